"""``dp-gd``: full-batch noisy gradient descent, the baseline of the DP
trust-region paper (dp-trust-region.txt, DP-GD) and of most others.

Each of T steps releases the mean of per-record gradients clipped to C over all
n records plus Gaussian noise of std z * 2C/n (replace-one); z is calibrated so
T composed Gaussian releases spend exactly the budget (RDP or PLD).
"""
from __future__ import annotations

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import gaussian_event, self_composed
from dpreg.interfaces import Algorithm, Participation, RunOutput, charge
from dpreg.params import ParamSpec
from dpreg.trajectory import Trajectory

COMMON = (
    ParamSpec("clip", "float", None, "per-record gradient clipping bound C",
              "C = G, the loss's declared Lipschitz constant", low=0, low_open=True),
    ParamSpec("step", "float", None, "step size eta", "eta = 1/M (M: declared smoothness)",
              low=0, low_open=True),
    ParamSpec("radius", "float", None, "project iterates onto the ball of this radius",
              "the loss's feasible radius if it has one, else no projection", low=0, low_open=True),
)


def resolve_common(problem, p):
    G, M, _ = problem.constants()
    clip = p["clip"] if p.get("clip") is not None else G
    step = p["step"] if p.get("step") is not None else 1.0 / M
    radius = p["radius"] if p.get("radius") is not None else problem.loss.radius
    return clip, step, radius


def project(w, radius):
    if radius is None:
        return w
    n = float(np.linalg.norm(w))
    return w if n <= radius else w * (radius / n)


class DPGD(Algorithm):
    """Full-batch DP gradient descent with per-record clipping."""

    name = "dp-gd"
    summary = "full-batch noisy gradient descent with per-record clipping (baseline)"
    paper = "dp-trust-region.txt, DP-GD baseline (section 5)"
    data_access = "resample"
    relation = "replace-one"
    honours_init = True
    params = COMMON + (
        ParamSpec("steps", "int", 50, "number of iterations T", "practical default T=50", low=1),
    )

    def run(self) -> RunOutput:
        pb = self.problem
        clip, step, radius = resolve_common(pb, self.p)
        T = int(self.p["steps"])
        z = self.accountant.calibrate(lambda z: self_composed(gaussian_event(z), T))
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
