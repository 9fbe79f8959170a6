"""``dp-spider``: DP-SPIDER of Arora et al. (2023), Alg 1 of
lowy-ullman-wright-2024-warm-start.txt, for ERM (many passes over the data).

Every q steps the running gradient estimate restarts from O1 (a batch of
expected size b1, per-record gradients clipped to C); in between it adds O2
(a batch of expected size b2, per-record gradient differences clipped to
min(M |w_t - w_{t-1}|, 2C)), and the running sum is released through the
chosen noise plugin (``--noise gaussian|tree``), reset at each O1 call.

Mapping of the paper's noise onto two noise multipliers (std = multiplier
times the enforced sensitivity, add-remove neighbouring), as Alg 1 calibrates
sigma_1 and sigma_2 separately:
  sigma_1 = z1 C / b1;   min(sigma_2 |w_t - w_{t-1}|, sigma_hat_2) = z2 min(M |w_t - w_{t-1}|, 2C) / b2,
i.e. sigma_2 = z2 M / b2 and sigma_hat_2 = 2 z2 C / b2 (the Lipschitz cap on a
gradient difference).  O1 is released by its own mechanism instance (z1), the
O2 running sum by another (z2); the estimate is their sum.  z1 and z2 are
calibrated jointly: z1 = c sqrt(k1/s), z2 = c sqrt(k2/(1-s)) with k1, k2 the
O1 and O2 adds of the plan and s = ``o1_share`` (the share of the Gaussian
privacy loss, k/z^2, spent on O1), c the smallest that fits the budget
(``o1_share=0`` falls back to one multiplier for both).  With the gaussian
plugin this is exactly Alg 1; with ``tree`` the O2 prefix sums are released by
binary-tree aggregation.

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

With the gaussian plugin (dense or CSR rows) the run goes whole phases per compiled
call (:meth:`SpiderEstimator.steps`, ``dpreg_kernels.spider``: each phase's
batches and noise drawn, and its adds charged, before the call); otherwise a
step at a time through ``refresh``/``update``.  Both give the same numbers for
the same seed (tests/test_dp_spider.py).
"""
from __future__ import annotations

import math

from dpreg import hookimpl
from dpreg.accounting import composed
from dpreg.access import Resample
from dpreg.errors import ParameterError
from dpreg.interfaces import Algorithm, Participation, RunOutput
from dpreg.params import ParamSpec
from dpreg.problem import project
from dpreg.trajectory import KEEP_ALL_FLOATS, OutputChoice, Trajectory

from .dp_gd import COMMON, plan_noise, resolve_common
from .spider_core import SpiderEstimator, calibrate_noise, norm2, planned_event, prepay

#: steps per compiled call (whole phases; SpiderEstimator.steps); each step is reported to the
#: progress callback after the call
STEPS_PER_CALL = 256


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


def split_plan(plan):
    """``(O1 plan, O2 plan)`` of a plan whose O1 and O2 releases are made by
    separate mechanisms: each phase's first add, and its other adds (phases
    without O2 adds left out)."""
    return [(rep, parts[:1]) for rep, parts in plan], [(rep, parts[1:]) for rep, parts in plan if len(parts) > 1]


def separate_multipliers(accountant, noise_cls, plan, a1: float, a2: float) -> float:
    """Smallest c for which the plan with O1 released at multiplier c a1 (its own
    mechanism, one add per phase) and O2 at c a2 (the running-sum mechanism,
    ``len(parts) - 1`` adds per phase) fits the accountant's remaining budget."""
    o1_plan, o2_plan = split_plan(plan)
    h2 = max(len(parts) for _, parts in o2_plan)

    def event(c):
        return composed([planned_event(noise_cls, c * a1, 1, o1_plan, relation=accountant.relation),
                         planned_event(noise_cls, c * a2, h2, o2_plan, relation=accountant.relation)])
    return accountant.calibrate(event)


class DPSpider(Algorithm):
    """DP-SPIDER (Arora et al. 2023) with a pluggable running-sum noise."""

    name = "dp-spider"
    summary = "DP-SPIDER (Arora et al.): periodic O1 restarts, O2 differences, noise via --noise"
    paper = "lowy-ullman-wright-2024-warm-start.txt, Algorithm 1 (DP-SPIDER, Arora et al. 2023)"
    uses_noise = True
    data_access = "resample"
    relation = "add-remove"
    honours_init = True
    practitioner = {"epochs": "epochs", "lr": "step", "max_grad_norm": "clip", "noise_multiplier": "noise_multiplier",
                    "batch_size": "it has two batch sizes, --param batch1 (O1 refresh, default n) and batch2 "
                                  "(O2 differences, default n/10)"}
    theory_note = ("the warm-start paper states DP-SPIDER's guarantee (Lemma 3.1, citing Arora et al. 2023: "
                   "'there exist algorithmic parameters') but not its parameter formulas; App. G lists tuned "
                   "experiment values (eta, q per eps), not formulas")
    @classmethod
    def release_mechanisms(cls, info: dict, noise: str | None) -> list[dict]:
        """Two kinds of release through the noise plugin: the O1 gradients that
        restart each phase (multiplier z1) and the O2 gradient differences of
        the running sum (z)."""
        z, z1 = info.get("noise_multiplier"), info.get("o1_noise_multiplier")
        if z is None:
            return []
        nz = info.get("noise") or noise or "tree"
        return [{"what": "dp-spider O1 gradients (each phase's restart)", "noise": nz,
                 "noise_multiplier": float(z if z1 is None else z1)},
                {"what": "dp-spider O2 gradient differences (the running sum)", "noise": nz,
                 "noise_multiplier": float(z)}]

    params = COMMON + (
        ParamSpec("steps", "int", 400, "iteration number T",
                  "warm-start paper section 9 runs its baselines 100 iterations; practical default T = 400 with "
                  "q = 5, chosen on the *training* loss gap F(w) - F* (logistic-nonconvex-reg, eps = 1, seeds 0-1): "
                  "adult 0.036 -> 0.014, IJCNN1 0.021 -> 0.0074 (T = 600 was worse on adult: 0.039)", low=1),
        ParamSpec("epochs", "float", None, "expected passes over the data (--epochs); replaces steps: "
                  "T = ceil(epochs n q / (b1 + (q - 1) b2)), the records a phase touches",
                  "Opacus' epochs; default: steps", low=0, low_open=True),
        ParamSpec("phase", "int", 5, "phase length q: O1 every q steps, O2 in between",
                  "q | t triggers O1 (Alg 1); tuned q in {5, 10} (App. G); default 5 (see steps)", low=1),
        ParamSpec("batch1", "int", None, "expected O1 batch size b1 (Poisson rate b1/n; >= n: full batch)",
                  "sigma_1 = z C / b1; default b1 = n (full-batch O1, the ERM setting)", low=1),
        ParamSpec("batch2", "int", None, "expected O2 batch size b2 (Poisson rate b2/n; >= n: full batch)",
                  "sigma_2 = z2 M / b2, sigma_hat_2 = 2 z2 C / b2; default b2 = ceil(n/10): subsampled O2 as in "
                  "the paper's code (section 9: 0.574 -> 0.378 on the warm-start experiment)", low=1),
        ParamSpec("o1_share", "float", 0.5, "share s of the Gaussian privacy loss spent on O1 (0: one multiplier)",
                  "Alg 1 sets sigma_1 and sigma_2 separately; z1 = c sqrt(k1/s), z2 = c sqrt(k2/(1-s)), "
                  "c calibrated to the budget; default 1/2 (values >= 0.99 are refused)", low=0, high=0.99),
        ParamSpec("step_cap", "float", None, "largest step length |w_{t+1} - w_t|: a step -eta g~ longer than this is "
                  "shortened to it (post-processing of the release; 0: no cap)",
                  "not in Alg 1 (App. G tunes eta per eps instead). Default r = C b2 / (2 M b1 sqrt(q - 1)): an "
                  "O2 add's sensitivity is M |w_t - w_t-1| / b2 <= M r / b2, so the O2 noise a phase accumulates "
                  "(q - 1 adds) stays at half one O1 release's, C / b1, whatever the noise does to the step "
                  "(without it a noise-sized estimate takes a step of eta |g~|, the next O2 clip is then 2C and "
                  "the running sum random-walks: training loss 690 on a 270-record set at eps = 1). r = C/(40 M) "
                  "at the default batches and q; chosen on validation splits of breast-cancer, digits and a "
                  "synthetic set (experiments/targets_models_learn.py --validation, 6 seeds): r = 0.1 / 0.3 / 1 / "
                  "none on logistic (C/(40 M) = 0.1) -> eps = 1 accuracy 0.855 / 0.892 / 0.873 / 0.583 "
                  "(breast-cancer), 0.776 / 0.754 / 0.703 / 0.494 (digits), 0.754 / 0.723 / 0.667 / 0.527 "
                  "(synthetic); dp-sgd 0.899, 0.818, 0.754", low=0),
        ParamSpec("lipschitz_cap", "bool", True,
                  "cap O2's per-record clip at 2C (the sigma_hat_2 of Alg 1)",
                  "noise min(sigma_2 |w_t - w_{t-1}|, sigma_hat_2): clip min(M |dw|, 2C)"),
        ParamSpec("output", "str", "last", "which iterate to return",
                  "Alg 1 returns w_hat ~ Unif(w_1..w_T) ('random', the guarantee's output); default 'last' "
                  "(not the paper's: a uniform iterate of a 100-step run is one of the first 50 half the time; "
                  "the pages measure 'last')",
                  choices=("last", "average", "random")),
        ParamSpec("noise_multiplier", "float", None,
                  "fixed noise multiplier z of every release, O1 and O2 (std = z x enforced sensitivity; "
                  "o1_share is then unused); the whole plan is checked against the budget before the first release",
                  "default: calibrated - sigma_1 and sigma_2 as in o1_share", low=0, low_open=True),
    )

    def run(self) -> RunOutput:
        pb = self.problem
        n = pb.n
        clip, step, radius = resolve_common(pb, self.p)
        _, M, _ = pb.constants()
        q = int(self.p["phase"])
        b1 = int(self.p["batch1"] or n)
        b2 = int(self.p["batch2"] or math.ceil(n / 10))
        T = int(self.p["steps"])
        if self.p.get("epochs") is not None:  # expected records touched per phase: b1 + (q - 1) b2
            T = max(1, int(math.ceil(self.p["epochs"] * n * q / (min(b1, n) + (q - 1) * min(b2, n)))))
        if self.noise is None:
            raise ParameterError("dp-spider needs a noise mechanism (--noise gaussian|tree)")

        n_o1 = -(-T // q)  # steps 0, q, 2q, ... call O1; the others O2

        def sampler(b, total):
            """The batches of one oracle: all of them planned up front (a data-independent
            plan), drawn in chunks (Resample.poisson_stream)."""
            if b >= n:
                return access.poisson_stream(1.0, total).next, Participation.all(), float(n), 1.0
            rate = b / n
            return access.poisson_stream(rate, total).next, Participation.poisson(rate), float(b), rate

        access = Resample(n, self.rng("dp-spider sampling"))
        draw1, p1, den1, q1 = sampler(b1, n_o1)
        draw2, p2, den2, q2 = sampler(b2, T - n_o1)
        horizon = min(q, T)
        plan = spider_plan(T, q, p1, p2)
        share = float(self.p["o1_share"])
        k1 = sum(rep for rep, _ in plan)
        k2 = sum(rep * (len(parts) - 1) for rep, parts in plan)
        z1 = None
        fixed = self.p.get("noise_multiplier")
        if fixed is not None:
            z = plan_noise(self.accountant, lambda z: planned_event(self.noise, z, horizon, plan,
                                                                    relation=self.accountant.relation), fixed)
        elif share > 0 and k2 > 0:
            a1, a2 = math.sqrt(k1 / share), math.sqrt(k2 / (1 - share))
            z2 = separate_multipliers(self.accountant, self.noise, plan, a1, a2) * a2
            z, z1 = z2, z2 * a1 / a2
        else:
            z = calibrate_noise(self.accountant, self.noise, horizon, plan)
        # the plan is fixed (T steps, phases, rates, multipliers): all its releases are charged
        # at once, before the first one, and each release is checked off against it
        if z1 is None:
            paid = [(z, horizon, plan)]
        else:  # O1 by its own mechanism (horizon 1), O2 by the running sum (horizon - 1 adds)
            o1_plan, o2_plan = split_plan(plan)
            paid = [(z1, 1, o1_plan)] + ([(z, max(1, horizon - 1), o2_plan)] if o2_plan else [])
        prepaid = prepay(self.accountant, self.noise, paid, label=f"dp-spider: {T} steps, charged before the first")
        est = SpiderEstimator(pb, self.noise, noise_multiplier=z, horizon=horizon,
                              accountant=prepaid, seed=self.seed_sequence("dp-spider noise"),
                              clip=clip, smoothness=M,
                              diff_cap=2.0 * clip if self.p["lipschitz_cap"] else None,
                              o1_noise_multiplier=z1,
                              o1_seed=self.seed_sequence("dp-spider O1 noise") if z1 is not None else None)
        w = self.initial_point()
        w_prev = w
        output = OutputChoice(self.p["output"], T, self.rng("dp-spider output"), w)
        traj = Trajectory(T, keep_every_iterate=T * pb.d <= KEEP_ALL_FLOATS)  # --select sees every iterate
        traj.log(0, w)
        clipped = 0
        cap = self.p.get("step_cap")
        if cap is None:  # the O2 noise of a phase stays at half the O1 noise (see the parameter)
            cap = clip * min(b2, n) / (2.0 * M * min(b1, n) * math.sqrt(max(q - 1, 1)))
        cap = None if not cap else float(cap)
        capped = 0
        if est.compiled_steps and cap is None:  # whole phases per compiled call: the same numbers as the loop below
            t = 0
            per_call = max(q, STEPS_PER_CALL // q * q)
            while t < T:
                k = min(per_call, T - t)
                batches = [draw1() if i % q == 0 else draw2() for i in range(k)]
                w, w_prev, W, gn, sens, ncl, sizes = est.steps(w, w_prev, batches, phase=q, step=step,
                                                               radius=radius, full1=q1 >= 1.0, denom1=den1,
                                                               denom2=den2)
                clipped += int(ncl.sum())
                traj.log_many(t + 1, W, noisy_grad_norm=gn, batch=sizes, sensitivity=sens)
                for i in range(k):
                    output.see(t + i + 1, W[i])
                    self.progress(t + i + 1, T)  # every step reported: a dropped Ctrl-C stops the run at the next
                t += k
        else:  # a step at a time (other noise plugins, mechanisms or problems a subclass changes)
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
                move = step * g
                if cap is not None:  # a public cap on the step (post-processing of the release)
                    ln = norm2(move)
                    if ln > cap:
                        move = move * (cap / ln)
                        capped += 1
                w = project(w - move, radius, norm2)
                output.see(t + 1, w)
                traj.log(t + 1, w, noisy_grad_norm=norm2(g), batch=rel.batch, sensitivity=rel.sensitivity)
                self.progress(t + 1, T)
        traj.finish(T, w)
        out = output.result(w)
        info = {
            "noise": self.noise.name, "noise_multiplier": z, "o1_noise_multiplier": z1 if z1 is not None else z,
            "o1_share": share if z1 is not None else None, "steps": T, "phase_length": q, "phases": est.phases,
            "o2_calls": est.o2_calls, "batch1": b1, "batch2": b2, "sampling_rate1": q1, "sampling_rate2": q2,
            "sigma1": (z1 if z1 is not None else z) * self.accountant.sensitivity_factor * clip / den1,
            "sigma2_per_unit_step": z * self.accountant.sensitivity_factor * M / den2,
            "sigma2_hat": (z * self.accountant.sensitivity_factor * 2 * clip / den2
                           if self.p["lipschitz_cap"] else None),
            "clip": clip, "smoothness": M, "step": step, "step_cap": cap, "steps_capped": capped,
            "clipped_terms": clipped,
            "select_candidates": "every iterate" if traj.keeps_every_iterate else
            f"{len(traj.steps)} evenly spaced checkpoints",
            "releases": prepaid.released, "epsilon_spent": self.accountant.epsilon_spent, "trajectory": traj,
        }
        return RunOutput(out, T, access.used, est.gradient_evaluations, traj.series, info)


@hookimpl
def dpreg_register_algorithms(register):
    register(DPSpider.name, DPSpider, summary=DPSpider.summary)
