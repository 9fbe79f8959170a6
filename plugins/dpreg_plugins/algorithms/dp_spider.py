"""``dp-spider``: DP-SPIDER of Arora et al. (2023), Alg 1 of
lowy-ullman-wright-2024-warm-start.txt, for ERM (many passes over the data).

Every q steps the running gradient estimate restarts from O1 (a batch of
expected size b1, per-record gradients clipped to C); in between it adds O2
(a batch of expected size b2, per-record gradient differences clipped to
min(M |w_t - w_{t-1}|, 2C)), and the running sum is released through the
chosen noise plugin (``--noise gaussian|tree``), reset at each O1 call.

Mapping of the paper's noise onto one noise multiplier z (std = z times the
enforced sensitivity, add-remove neighbouring):
  sigma_1 = z C / b1;   min(sigma_2 |w_t - w_{t-1}|, sigma_hat_2) = z min(M |w_t - w_{t-1}|, 2C) / b2,
i.e. sigma_2 = z M / b2 and sigma_hat_2 = 2 z C / b2 (the Lipschitz cap on a
gradient difference).  With the gaussian plugin this is exactly Alg 1; with
``tree`` the same prefix sums are released by binary-tree aggregation.

Sampling (sound choice, documented): batches are Poisson subsamples with
rates b1/n and b2/n (sums divided by the public expected sizes), under the
add-remove relation; a batch size >= n means the full batch (no sampling).
The gaussian plugin is charged with Poisson amplification per add; the tree
plugin claims no amplification (each completed node is a global Gaussian
with the summed sensitivity of its leaves).  Fixed-size batches without
amplification would need replace-one (sensitivity 2C) and are not offered.

z is calibrated before the run so that the worst-case record's planned
exposure (every add of every phase, dry-run through the noise class itself)
spends the budget.
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.access import Resample
from dpreg.errors import ParameterError
from dpreg.interfaces import Algorithm, Participation, RunOutput
from dpreg.params import ParamSpec
from dpreg.problem import project
from dpreg.trajectory import OutputChoice, Trajectory

from .dp_gd import COMMON, resolve_common
from .spider_core import SpiderEstimator, calibrate_noise


def spider_plan(T: int, q: int, p1: Participation, p2: Participation):
    """Phases of a DP-SPIDER run of T steps with phase length q, as
    ``(repeat, participations)`` for :func:`spider_core.planned_event`."""
    full, rest = divmod(int(T), int(q))
    plan = []
    if full:
        plan.append((full, [p1] + [p2] * (q - 1)))
    if rest:
        plan.append((1, [p1] + [p2] * (rest - 1)))
    return plan


class DPSpider(Algorithm):
    """DP-SPIDER (Arora et al. 2023) with a pluggable running-sum noise."""

    name = "dp-spider"
    summary = "DP-SPIDER (Arora et al.): periodic O1 restarts, O2 differences, noise via --noise"
    paper = "lowy-ullman-wright-2024-warm-start.txt, Algorithm 1 (DP-SPIDER, Arora et al. 2023)"
    uses_noise = True
    data_access = "resample"
    relation = "add-remove"
    honours_init = True
    params = COMMON + (
        ParamSpec("steps", "int", 100, "iteration number T",
                  "practical default T = 100 (warm-start paper section 9: baselines run 100 iterations)", low=1),
        ParamSpec("phase", "int", 10, "phase length q: O1 every q steps, O2 in between",
                  "q | t triggers O1 (Alg 1); tuned q in {5, 10} (App. G); default 10", low=1),
        ParamSpec("batch1", "int", None, "expected O1 batch size b1 (Poisson rate b1/n; >= n: full batch)",
                  "sigma_1 = z C / b1; default b1 = n (full-batch O1, the ERM setting)", low=1),
        ParamSpec("batch2", "int", None, "expected O2 batch size b2 (Poisson rate b2/n; >= n: full batch)",
                  "sigma_2 = z M / b2, sigma_hat_2 = 2 z C / b2; default b2 = n", low=1),
        ParamSpec("lipschitz_cap", "bool", True,
                  "cap O2's per-record clip at 2C (the sigma_hat_2 of Alg 1)",
                  "noise min(sigma_2 |w_t - w_{t-1}|, sigma_hat_2): clip min(M |dw|, 2C)"),
        ParamSpec("output", "str", "last", "which iterate to return",
                  "Alg 1 returns w_hat ~ Unif(w_1..w_T) ('random')", choices=("last", "average", "random")),
    )

    def run(self) -> RunOutput:
        pb = self.problem
        n = pb.n
        clip, step, radius = resolve_common(pb, self.p)
        _, M, _ = pb.constants()
        T, q = int(self.p["steps"]), int(self.p["phase"])
        b1 = int(self.p["batch1"] or n)
        b2 = int(self.p["batch2"] or n)
        if self.noise is None:
            raise ParameterError("dp-spider needs a noise mechanism (--noise gaussian|tree)")

        def sampler(b):
            if b >= n:
                return (lambda: access.full()), Participation.all(), float(n), 1.0
            rate = b / n
            return (lambda: access.poisson(rate)), Participation.poisson(rate), float(b), rate

        access = Resample(n, self.rng("dp-spider sampling"))
        draw1, p1, den1, q1 = sampler(b1)
        draw2, p2, den2, q2 = sampler(b2)
        horizon = min(q, T)
        z = calibrate_noise(self.accountant, self.noise, horizon, spider_plan(T, q, p1, p2))
        est = SpiderEstimator(pb, self.noise, noise_multiplier=z, horizon=horizon,
                              accountant=self.accountant, seed=self.seed_sequence("dp-spider noise"),
                              clip=clip, smoothness=M,
                              diff_cap=2.0 * clip if self.p["lipschitz_cap"] else None)
        w = self.initial_point()
        w_prev = w
        output = OutputChoice(self.p["output"], T, self.rng("dp-spider output"), w)
        traj = Trajectory(T)
        traj.log(0, w)
        clipped = 0
        for t in range(T):
            if t % q == 0:
                idx, part = draw1()
                rel = est.refresh(w, idx, part, denom=den1)
            else:
                idx, part = draw2()
                rel = est.update(w, w_prev, idx, part, denom=den2)
            clipped += rel.clipped
            g = rel.value
            w_prev = w
            w = project(w - step * g, radius)
            output.see(t + 1, w)
            traj.log(t + 1, w, noisy_grad_norm=float(np.linalg.norm(g)), batch=rel.batch,
                     sensitivity=rel.sensitivity)
            self.progress(t + 1, T)
        traj.finish(T, w)
        out = output.result(w)
        info = {
            "noise": self.noise.name, "noise_multiplier": z, "phase_length": q, "phases": est.phases,
            "o2_calls": est.o2_calls, "batch1": b1, "batch2": b2, "sampling_rate1": q1, "sampling_rate2": q2,
            "sigma1": z * self.accountant.sensitivity_factor * clip / den1,
            "sigma2_per_unit_step": z * self.accountant.sensitivity_factor * M / den2,
            "sigma2_hat": (z * self.accountant.sensitivity_factor * 2 * clip / den2
                           if self.p["lipschitz_cap"] else None),
            "clip": clip, "smoothness": M, "step": step, "clipped_terms": clipped,
            "epsilon_spent": self.accountant.epsilon_spent, "trajectory": traj,
        }
        return RunOutput(out, T, access.used, est.gradient_evaluations, traj.series, info)


@hookimpl
def dpreg_register_algorithms(register):
    register(DPSpider.name, DPSpider, summary=DPSpider.summary)
