"""``dp-gd``: full-batch noisy gradient descent, the baseline of the DP
trust-region paper (dp-trust-region.txt, DP-GD) and of most others.

Each of T steps releases the mean of per-record gradients clipped to C over all
n records plus Gaussian noise of std z * 2C/n (replace-one); z is calibrated so
T composed Gaussian releases spend exactly the budget (RDP or PLD).
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import gaussian_event, self_composed
from dpreg.errors import BudgetExceededError
from dpreg.interfaces import Algorithm, Participation, RunOutput, charge
from dpreg.params import ParamSpec
from dpreg.problem import project
from dpreg.trajectory import Trajectory

COMMON = (
    ParamSpec("clip", "float", None, "per-record gradient clipping bound C",
              "C = G, the loss's declared Lipschitz constant", low=0, low_open=True),
    ParamSpec("step", "float", None, "step size eta", "eta = 1/M (M: declared smoothness)",
              low=0, low_open=True),
    ParamSpec("radius", "float", None, "project iterates onto the ball of this radius",
              "the loss's feasible radius if it has one, else no projection", low=0, low_open=True),
)


NOISE_MULTIPLIER = ParamSpec(
    "noise_multiplier", "float", None,
    "fixed noise multiplier z (noise std = z x sensitivity); the whole plan is checked against "
    "the budget before the first release",
    "default: calibrated - the smallest z whose T-step plan spends at most (eps, delta)",
    low=0, low_open=True)


def plan_noise(accountant, make_event, fixed):
    """The noise multiplier of a run whose whole plan is ``make_event(z)``:
    calibrated when ``fixed`` is None; else ``fixed`` if its plan fits the
    budget, and otherwise BudgetExceededError (before any release) saying by
    how much the plan overshoots."""
    if fixed is None:
        return accountant.calibrate(make_event)
    z = float(fixed)
    event = make_event(z)
    if not accountant.fits(event):
        eps = accountant.epsilon_of_plan(event)
        budget = accountant.epsilon_budget
        raise BudgetExceededError(
            f"plan spends eps={eps:.4g} > budget {budget:g} (over by {eps - budget:.4g}) at "
            f"delta={accountant.delta:g}: noise multiplier {z:g} is too small for this budget (nothing was "
            f"released); raise --noise-multiplier, "
            f"run fewer steps (--epochs or --param steps), raise --epsilon, or omit --noise-multiplier to have "
            f"it calibrated to the budget")
    accountant.reserve(event)  # as calibrate() does: the plan's releases are covered
    return z


def default_steps(n: int, d: int, eps: float, delta: float) -> int:
    """dp-gd's practical T = min(500, max(ceil(0.6 S), min(50, ceil(2 S)))), S = n eps / sqrt(d ln(1/delta)):
    proportional to S, at least 50 steps from S = 25 on, 2 S below (fewer, less noisy steps where the
    budget is small)."""
    from .schedule import privacy_scale

    S = privacy_scale(n, d, eps, delta)
    return int(min(500, max(math.ceil(0.6 * S), min(50, math.ceil(2.0 * S)))))


def resolve_common(problem, p):
    G, M, _ = problem.constants()
    clip = p["clip"] if p.get("clip") is not None else G
    step = p["step"] if p.get("step") is not None else 1.0 / M
    radius = p["radius"] if p.get("radius") is not None else problem.loss.radius
    return clip, step, radius


class DPGD(Algorithm):
    """Full-batch DP gradient descent with per-record clipping."""

    name = "dp-gd"
    summary = "full-batch noisy gradient descent with per-record clipping (baseline)"
    paper = "dp-trust-region.txt, DP-GD baseline (section 5)"
    data_access = "resample"
    relation = "replace-one"
    honours_init = True
    practitioner = {"epochs": "steps", "lr": "step", "max_grad_norm": "clip", "noise_multiplier": "noise_multiplier",
                    "batch_size": "it is full-batch: every step uses all n records (dp-sgd takes minibatches)"}
    theory_note = ("dp-trust-region.txt runs DP-GD only as a baseline tuned per data set (section 5.1, citing [28] "
                   "for its theory) and states no step-size or iteration-count formula; the defaults are practical "
                   "choices (see each parameter)")
    params = COMMON + (
        ParamSpec("steps", "int", None, "number of iterations T",
                  "noisy gradient descent balances its optimisation error M Delta / T against the noise "
                  "T d ln(1/delta) C^2 / (n eps)^2 at T proportional to S = n eps / sqrt(d ln(1/delta)) "
                  "(schedule.privacy_scale); practical default T = min(500, max(ceil(0.6 S), min(50, ceil(2 S)))). The cap 500 "
                  "was chosen on adult's training split (S = 820 at eps = 1: logistic-nonconvex-reg training "
                  "gap 0.0222 at T = 200, 0.0135 at 500, 0.0140 at 1000; experiments/tune_defaults_h_t.py); on "
                  "validation splits of the small sets (experiments/targets_models_learn.py --validation, 5 "
                  "seeds, T = 50: 10, eps = 1) T = 500 / 200 / 100 / 50 / 25 gave breast-cancer (S = 18) 0.846 / 0.872 / "
                  "0.835 / 0.894 / 0.883, digits (S = 40) 0.736 / 0.772 / 0.737 / 0.765 / 0.731, synthetic (S "
                  "= 27) 0.673 / 0.734 / 0.695 / 0.730 / 0.728: 50 steps at least; on wine's (class 1 against the rest, "
                  "S = 8 on its validation split, 5 seeds) T = 50 / 30 / 20 / 10 gave 0.511 / 0.628 / 0.694 / 0.650 "
                  "(majority 0.500): below S = 25, 2 S steps; the trust-region paper tunes "
                  "DP-GD per data set", low=1),
        NOISE_MULTIPLIER,
    )

    def run(self) -> RunOutput:
        pb = self.problem
        clip, step, radius = resolve_common(pb, self.p)
        T = int(self.p["steps"] or default_steps(pb.n, pb.d, self.accountant.epsilon_budget, self.accountant.delta))
        z = plan_noise(self.accountant, lambda z: self_composed(gaussian_event(z), T),
                       self.p.get("noise_multiplier"))
        rng = self.rng("dp-gd noise")
        w = self.initial_point()
        sens = self.accountant.sensitivity_factor * clip / pb.n
        traj = Trajectory(T)
        traj.log(0, w)
        for t in range(1, T + 1):
            charge(self.accountant, gaussian_event(z), Participation.all(), label="dp-gd step")
            s, _ = pb.clipped_grad_sum(w, None, clip)
            g = s / pb.n + rng.standard_normal(pb.d) * (z * sens)
            w = project(w - step * g, radius)
            traj.log(t, w, noisy_grad_norm=np.linalg.norm(g))
            self.progress(t, T)
        traj.finish(T, w)
        return RunOutput(w, T, pb.n, T * pb.n, traj.series,
                         {"noise_multiplier": z, "noise_std": z * sens, "clip": clip, "step": step,
                          "trajectory": traj})


@hookimpl
def dpreg_register_algorithms(register):
    register(DPGD.name, DPGD, summary=DPGD.summary)
