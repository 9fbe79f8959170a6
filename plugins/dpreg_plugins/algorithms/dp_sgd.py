"""``dp-sgd``: noisy minibatch SGD with Poisson subsampling and per-record
clipping (Alg 3 of lowy-ullman-wright-2024-warm-start.txt; Abadi et al.).

Each step samples every record independently with probability q = b/n, sums
per-record gradients clipped to C, adds N(0, (zC)^2 I) and divides by the
expected batch size b (add-remove neighbouring, as for Poisson amplification).
z is calibrated so T Poisson-subsampled Gaussians spend the budget.
Output: the last iterate, the average, or a uniformly random iterate (Alg 3).
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import gaussian_event, poisson_sampled, self_composed
from dpreg.errors import ParameterError
from dpreg.interfaces import Algorithm, RunOutput
from dpreg.params import ParamSpec
from dpreg.problem import project, vector_norm
from dpreg.trajectory import OutputChoice, Trajectory

from .dp_gd import COMMON, NOISE_MULTIPLIER, plan_noise, resolve_common


#: steps per compiled call when the problem runs many steps at once
#: (Problem.sgd_steps): 256 steps of noise is 256 x d floats; the progress bar
#: moves once per call
STEPS_PER_CALL = 256

#: practical defaults for network losses (a loss with hidden layers, ``mlp``): the
#: settings practitioners train networks with under DP (Opacus' examples): epochs, expected batch,
#: per-record clip, and the step for that clip (see the ``epochs`` parameter)
NETWORK_EPOCHS = 20
NETWORK_BATCH = 256
NETWORK_CLIP = 1.0
NETWORK_STEP = 1.0
#: a network with a regression head (squared, Huber) steps 2/M instead (M: its declared smoothness,
#: t^2 at init scale t; 0.031 at the default t = 8): a regression head's curvature does not fall as
#: it fits, and step 1 overshoots on small data.  Chosen on training data (dp-sgd, mlp:hidden=32,16,
#: eps 1 and 4, seeds 1-2): diabetes (353 training records) train R^2 0.49 / 0.48 at 2/M against
#: -11.3 at step 1, -6.9 at 0.3, -0.5 at 0.1; synthetic-regression 0.64 at 2/M, 0.60 at step 1
NETWORK_REGRESSION_STEP_M = 2.0


def is_network(loss) -> bool:
    """Whether ``loss`` is a network (a loss with hidden layers, ``mlp``): its
    parameter count is not the feature count, and its declared G, M are loose
    layer bounds.  A multi-class linear model (softmax) is not one."""
    return bool(getattr(loss, "hidden", None))


#: dp-sgd's step size: half the full-batch default of COMMON
STEP = ParamSpec("step", "float", None, "step size eta (--param step; Opacus' lr)",
                 "eta = 1/(2M) (M: declared smoothness): practical default, chosen on breast-cancer's "
                 "training accuracy (0.922 at 1/(2M) vs 0.905 at 1/M, batch 64, eps = 1, 5 seeds)",
                 low=0, low_open=True)


class DPSGD(Algorithm):
    """DP-SGD with Poisson subsampling."""

    name = "dp-sgd"
    summary = "noisy SGD with Poisson subsampling and per-record clipping (baseline)"
    paper = "lowy-ullman-wright-2024-warm-start.txt, Algorithm 3 (DP-SGD)"
    data_access = "resample"
    relation = "add-remove"
    honours_init = True
    practitioner = {"epochs": "epochs", "lr": "step", "batch_size": "batch", "max_grad_norm": "clip",
                    "noise_multiplier": "noise_multiplier"}
    params = tuple(STEP if s.name == "step" else s for s in COMMON) + (
        ParamSpec("batch", "int", None, "expected batch size b (q = b/n)",
                  "b >= sqrt(d eps) (Prop. D.1); practical default max(sqrt(d eps), min(256, max(64, n/10))) "
                  "(the floor 64 chosen on breast-cancer's training accuracy)", low=1),
        ParamSpec("steps", "int", None, "number of iterations T (--param steps; epochs = T b / n)",
                  "T = eps^2 n^2 / (d ln(1/delta)) (Prop. D.1), capped at max(5 epochs, 300 steps): "
                  "practical cap chosen on the training accuracy of adult and breast-cancer "
                  "(300 steps let small data sets learn; 5 epochs suffice from n ~ 10^4)", low=1),
        ParamSpec("epochs", "float", None, "passes over the data (--epochs): T = ceil(epochs n / b); "
                  "not with steps",
                  "Opacus' epochs; default: T as in steps for linear models; for network losses (mlp) 20 epochs "
                  "of expected batch min(256, n/4) with clip 1 and step 1 (2/M for a regression head: see "
                  "NETWORK_REGRESSION_STEP_M) - what practitioners train networks with under DP (Prop. D.1's T = eps^2 n^2/(d ln(1/delta)) shrinks with the parameter count d: "
                  "55 steps for a 784-input network on 4,000 records at eps = 1). Chosen on validation splits "
                  "(experiments/targets_models_learn.py --validation, mlp, 3 seeds): digits / adult at eps = 1 "
                  "0.845 / 0.845 (eps = 4: 0.862 / 0.846) against 0.781 / 0.840 (0.882 / 0.841) at the "
                  "linear-model rules (clip G = 8, step 1/(2M), 477 steps); with clip 1, 20 epochs, batch 256, "
                  "step 0.0625 / 0.5 / 1 / 2 / 8: digits 0.494 / 0.844 / 0.845 / 0.796 / 0.765 (eps = 1); "
                  "10 epochs at step 1: 0.831 / 0.843; batch 128 at step 0.5: 0.851 / 0.846",
                  low=0, low_open=True),
        ParamSpec("output", "str", "last", "which iterate to return",
                  "Alg 3 returns a uniformly random iterate ('random')",
                  choices=("last", "average", "random")),
        NOISE_MULTIPLIER,
        ParamSpec("preset", "str", "practical", "practical defaults or the literal parameters of Prop. D.1",
                  "'theory': T = eps^2 n^2/(d ln(1/delta)) uncapped, b = ceil(sqrt(d eps)), "
                  "sigma^2 = 1000 L^2 T ln(1/delta)/(eps^2 n^2) (fixed, checked against the budget; the "
                  "accountant reports the eps it spends), eta = D/sqrt(T (L^2 + d sigma^2)) with L = C and "
                  "D = the loss's feasible radius, else 1 (the paper leaves D to the user), output 'random'; "
                  "given parameters still win. Slow on large n: T grows as n^2",
                  choices=("practical", "theory")),
    )

    def resolve(self) -> dict:
        """Every run parameter with its default computed from (n, d, eps,
        delta, G, M): clip, step, radius, batch, steps, output and the fixed
        noise multiplier (None: calibrated to the budget).  ``preset=theory``
        gives the formulas of Prop. D.1 (see the ``preset`` parameter)."""
        pb, p = self.problem, self.p
        n, d = pb.n, pb.d
        eps, delta = self.accountant.epsilon_budget, self.accountant.delta
        clip, step, radius = resolve_common(pb, p)
        theory = p.get("preset") == "theory"
        if is_network(pb.loss) and not theory:  # networks: the practitioners' settings (see epochs)
            clip = p["clip"] if p.get("clip") is not None else NETWORK_CLIP
            b = min(int(p["batch"] or min(NETWORK_BATCH, max(1, n // 4))), n)
            if p.get("steps") is not None:
                T = int(p["steps"])
            else:
                T = max(1, int(math.ceil((p["epochs"] if p.get("epochs") is not None else NETWORK_EPOCHS) * n / b)))
            if p.get("step") is not None:
                step = p["step"]
            elif getattr(pb.loss, "task", None) == "regression":
                step = NETWORK_REGRESSION_STEP_M / pb.constants()[1]
            else:
                step = NETWORK_STEP
            return dict(clip=clip, step=step, radius=radius,
                        batch=b, steps=T, noise_multiplier=p.get("noise_multiplier"), output=p["output"])
        if p.get("steps") is not None and p.get("epochs") is not None:
            raise ParameterError("dp-sgd: give either --epochs or --param steps, not both")
        if theory:
            b = p["batch"] or int(math.ceil(math.sqrt(d * eps)))
        else:
            b = p["batch"] or int(max(math.sqrt(d * eps), min(256, max(64, n // 10)), 1))
        b = min(b, n)
        if p.get("steps") is not None:
            T = int(p["steps"])
        elif p.get("epochs") is not None:
            T = max(1, int(math.ceil(p["epochs"] * n / b)))
        elif theory:
            T = int(max(1, eps ** 2 * n ** 2 / (d * math.log(1 / delta))))
        else:
            T = int(max(1, min(eps ** 2 * n ** 2 / (d * math.log(1 / delta)), max(math.ceil(5 * n / b), 300))))
        z = p.get("noise_multiplier")
        output = p["output"]
        if theory:
            sigma = math.sqrt(1000 * clip ** 2 * T * math.log(1 / delta) / (eps ** 2 * n ** 2))
            if z is None:  # sigma is the std of the noise on the batch mean: z factor C / b
                z = sigma * b / (self.accountant.sensitivity_factor * clip)
            if p.get("step") is None:
                D = radius if radius is not None else 1.0
                step = D / math.sqrt(T * (clip ** 2 + d * sigma ** 2))
            output = "random"
        elif p.get("step") is None:
            step = 0.5 * step  # eta = 1/(2M): practical for noisy minibatch steps (see STEP)
        return dict(clip=clip, step=step, radius=radius, batch=b, steps=T, noise_multiplier=z, output=output)

    def run(self) -> RunOutput:
        pb = self.problem
        r = self.resolve()
        clip, step, radius, b, T = r["clip"], r["step"], r["radius"], r["batch"], r["steps"]
        q = b / pb.n
        if q >= 1.0:
            step_event = gaussian_event
        else:
            def step_event(z):
                return poisson_sampled(q, gaussian_event(z))

        def plan_event(z):
            return self_composed(step_event(z), T)

        z = plan_noise(self.accountant, plan_event, r["noise_multiplier"])
        from dpreg.access import Resample

        access = Resample(pb.n, self.rng("dp-sgd sampling"))
        noise_rng = self.rng("dp-sgd noise")
        w = self.initial_point()
        output = OutputChoice(r["output"], T, self.rng("dp-sgd output"), w)
        traj = Trajectory(T)
        traj.log(0, w)
        factor = self.accountant.sensitivity_factor
        # the plan is fixed (T steps, rate q, multiplier z): its T releases are
        # charged at once, before the first one (a per-step charge cost ~70 us,
        # more than a step's work); the accountant refuses here if they do not fit
        self.accountant.charge(plan_event(z), None, label=f"dp-sgd: {T} steps, charged before the first")
        sd = z * factor * clip
        if q < 1.0 and getattr(pb, "sgd_steps_available", None) and pb.sgd_steps_available(b):
            # the same steps, STEPS_PER_CALL at a time in one compiled call: batches and noise
            # drawn first, from the same secret generators (dpreg_kernels.sgd)
            t = 0
            while t < T:
                k = min(STEPS_PER_CALL, T - t)
                rows, offsets, _ = access.poisson_many(q, k)
                noise = noise_rng.standard_normal((k, pb.d))
                w, W, gn = pb.sgd_steps(w, rows, offsets, noise, noise_std=sd, step=step, denom=b, radius=radius,
                                        clip=clip)
                output.see_many(t + 1, W)
                traj.log_many(t + 1, W, noisy_grad_norm=gn, batch=np.diff(offsets))
                t += k
                self.progress(t, T)
        else:
            batches = access.poisson_stream(q, T)  # drawn in chunks: the law of T poisson() calls
            for t in range(1, T + 1):
                idx, _ = batches.next()
                s, _ = pb.clipped_grad_sum(w, idx, clip) if len(idx) else (np.zeros(pb.d), 0)
                g = (s + noise_rng.standard_normal(pb.d) * sd) / b
                w = project(w - step * g, radius)
                output.see(t, w)
                traj.log(t, w, noisy_grad_norm=vector_norm(g), batch=len(idx))
                self.progress(t, T)
        out = output.result(w)
        traj.finish(T, w)
        return RunOutput(out, T, access.used, access.used, traj.series,
                         {"noise_multiplier": z, "sampling_rate": q, "expected_batch": b,
                          "clip": clip, "step": step, "steps": T, "output": r["output"],
                          "preset": self.p.get("preset", "practical"), "trajectory": traj})


@hookimpl
def dpreg_register_algorithms(register):
    register(DPSGD.name, DPSGD, summary=DPSGD.summary)
