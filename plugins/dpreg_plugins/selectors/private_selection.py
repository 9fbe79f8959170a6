"""Private selectors: the ``exponential`` mechanism and ``above-threshold``
(the sparse vector technique), plus private hyper-parameter selection.

``exponential`` (Def. 4.1 of lowy-ullman-wright-2024-warm-start.txt; McSherry &
Talwar 2007).  Among candidates ``w_1..w_K`` it outputs ``w_k`` with
probability proportional to ``exp(-eps * u(w_k) / (2 * Delta_u))`` where the
score is the clipped empirical loss

    u(w) = sum_i (clip(phi(<x_i, w>, y_i), lo, hi) - lo) + n * psi(w)

(``n F_hat(w)`` when no value is clipped; ``phi`` is the data part of the
loss, ``psi`` its data-independent part, ``n`` the public data-set size).
Each record contributes a value in ``[0, hi - lo]`` whatever it is, so
``Delta_u = hi - lo`` under both relations, enforced by the clipping in
:func:`dpreg_kernels.selection.clipped_phi_sums`.  The paper's
``exp(-eps n F_hat / (4 L D))`` is this with ``Delta_u = 2 L D``.  Sampling is
Gumbel-max with a seeded Generator (exactly the softmax).  The mechanism is
eps-DP (pure) and is charged as :func:`dpreg.accounting.pure_dp_event` before
the draw.  Candidate sets: a seeded random net of the ball of radius D
(:func:`ball_net`; the paper's D d/(eps n)-net has (2 D eps n / d)^d points,
practical only for tiny d, so the net is N uniform points) or any user list.

``above-threshold`` (AboveThreshold, Dwork & Roth 2014 Alg. 1; the private
model selection of Liu et al. 2024 that perturbed-sgd-adaptive-spider-
distributed-sosp.txt section 3 / Alg. 4 discusses).  Scans candidates in order
and returns the first that passes the alpha-SOSP test, or none.  Queries:

* gradient: ``g(w) = |(1/n) sum_i clip_C(grad f(w; z_i))|`` - sensitivity
  ``Delta_g = factor * C / n`` (norm is 1-Lipschitz; factor 2 replace-one,
  1 add-remove), clipping in the gradient kernel;
* curvature: ``l(w) = lambda_min(grad^2 psi(w) + (1/n) sum_i s_i d2phi_i x_i x_i^T)``
  with ``s_i`` scaling each record's Hessian to operator norm <= M
  (:func:`dpreg_kernels.selection.clipped_hessian_sum`).  By Weyl's inequality
  ``|lambda_min(A) - lambda_min(B)| <= |A - B|_op <= factor * M / n``.  This
  needs the dense d x d matrix and an exact symmetric eigensolver (LAPACK),
  so it is offered for d <= 300 only: an iterative (Lanczos) estimate has a
  data-dependent error and no sensitivity bound.  For larger d use
  ``check="fosp"`` (gradient only).

Both are combined into one sensitivity-1 query, the normalised deficit
``u(w) = max((g(w) - alpha) / Delta_g, (-l(w) - sqrt(rho alpha)) / Delta_h)``
(a max of sensitivity-1 functions has sensitivity 1); candidate t passes when
``-u(w_t) + Lap(4/eps) >= Lap(2/eps)`` (one threshold draw).  AboveThreshold
with these scales is eps-DP however many candidates it scans (Dwork & Roth
Thm 3.23); it is charged as a pure eps release before the scan.  In gradient
units the comparison noise is Lap(4 Delta_g / eps) = Lap(8 C / (n eps)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import pure_dp_event
from dpreg.errors import ParameterError
from dpreg.interfaces import Participation, Selector, charge, problem_supports
from dpreg.params import ParamSpec

#: largest dimension for the dense lambda_min query of above-threshold
DENSE_MAX_D = 300


@dataclass
class Selection:
    """A selector's (private) output: the index chosen (None: no candidate
    passed) and its point; ``info`` holds public diagnostics."""

    index: int | None
    w: np.ndarray | None
    epsilon: float
    info: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ sampling
def gumbel_argmax(logits: np.ndarray, rng: np.random.Generator, size: int | None = None):
    """argmax_k (logits_k + Gumbel_k): a draw from softmax(logits).  With
    ``size`` returns that many independent draws (array of indices)."""
    logits = np.asarray(logits, dtype=float)
    if size is None:
        return int(np.argmax(logits + rng.gumbel(size=logits.shape)))
    g = rng.gumbel(size=(int(size), logits.size))
    return np.argmax(logits[None, :] + g, axis=1)


def exponential_logits(utilities: np.ndarray, epsilon: float, sensitivity: float) -> np.ndarray:
    """``-epsilon * u / (2 * sensitivity)``: the exponential mechanism's log-weights
    for a score to be minimised."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ParameterError(f"selection epsilon must be a finite number > 0, got {epsilon!r}")
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ParameterError(f"score sensitivity must be a finite number > 0, got {sensitivity!r}")
    return -float(epsilon) * np.asarray(utilities, dtype=float) / (2.0 * float(sensitivity))


def ball_net(size: int, radius: float, d: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` points uniform in the ball of ``radius`` in R^d (data-independent,
    seeded): the random stand-in for the paper's D d/(eps n)-net.  Row 0 is the origin."""
    if size < 1 or not radius > 0:
        raise ParameterError(f"net needs size >= 1 and radius > 0, got {size}, {radius}")
    g = rng.standard_normal((size, d))
    g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300)
    W = g * (radius * rng.random(size)[:, None] ** (1.0 / d))
    W[0] = 0.0
    return np.ascontiguousarray(W)


def default_phi_range(loss, radius: float) -> tuple[float, float]:
    """A default clipping range ``[lo, hi]`` for ``phi(m, y)``: its min and max
    over margins ``|m| <= radius`` (records have |x| <= 1, candidates |w| <= radius)
    on a fine grid, for the labels the loss's label type allows (+-1 for
    "binary", 0 for "ignored").  Data-independent; a wrong range costs utility,
    never privacy (the kernel clips to it).  "real" labels need an explicit range."""
    if loss.labels == "binary":
        ys = (-1.0, 1.0)
    elif loss.labels == "ignored":
        ys = (0.0,)
    else:
        raise ParameterError(
            f"loss {loss.name!r} has real-valued labels: give the loss-value range lo, hi explicitly")
    ms = np.linspace(-radius, radius, 2001)
    phi = type(loss).phi
    vals = np.array([phi(float(m), y) for m in ms for y in ys])
    lo, hi = float(np.min(vals)), float(np.max(vals))
    if hi <= lo:
        hi = lo + 1.0
    return lo, hi


def fit_pure_epsilon(accountant, epsilon: float) -> float:
    """The largest eps0 <= ``epsilon`` whose pure release fits what ``accountant``
    has left.  (RDP's conversion to (eps, delta) charges a pure eps release a
    little more than eps, so a selection given exactly the remaining budget
    would be refused; the PLD accountant gives eps0 = epsilon up to its
    discretization.)  Raises ParameterError when nothing fits."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ParameterError(f"selection epsilon must be a finite number > 0, got {epsilon!r}")
    if accountant.fits(pure_dp_event(epsilon)):
        return float(epsilon)
    make = lambda z: pure_dp_event(1.0 / z)  # noqa: E731
    high = 1.1 / epsilon  # the usual case: the conversion slack is well under 10%
    if not accountant.fits(make(high)):
        high = 1e6
    z = accountant.calibrate(make, low=1.0 / epsilon, high=high, what="1/epsilon of the selection")
    return 1.0 / z


# ---------------------------------------------------------------- exponential
class ExponentialSelector(Selector):
    """Exponential mechanism over a finite candidate set, score = clipped empirical loss."""

    name = "exponential"
    summary = "exponential mechanism: pick w with prob. ~ exp(-eps n F(w) / (2 Delta_u)), loss values clipped (pure eps-DP)"
    params = (
        ParamSpec("lo", "float", None, "lower end of the clipping range of per-record loss values phi",
                  "Delta_u = hi - lo (sensitivity of n F_hat); paper: Delta_u = 2 L D (Def. 4.1, "
                  "exp(-eps n F / (4 L D))); default: min of phi over |m| <= D"),
        ParamSpec("hi", "float", None, "upper end of the clipping range of per-record loss values phi",
                  "default: max of phi over |m| <= D"),
        ParamSpec("net_size", "int", 1000, "number of points of the random net of the ball of radius D",
                  "paper: a D d/(eps n)-net, N <= (2 D eps n / d)^d points (section 4)", low=1),
        ParamSpec("net_radius", "float", None, "radius D of the ball the net covers",
                  "D: the loss's feasible radius (else 1)", low=0, low_open=True),
    )

    def __init__(self, problem, *, accountant, rng: np.random.Generator,
                 lo: float | None = None, hi: float | None = None, radius: float | None = None):
        self.problem = problem
        self.accountant = accountant
        self.rng = rng
        self.radius = float(radius if radius is not None else (problem.loss.radius or 1.0))
        # the scores need the loss's per-record margin kernel: a loss without one
        # (mlp) is refused here, when the selector is built -- before any run
        self._phi = problem.loss.scalar_kernels()[0]
        if lo is None or hi is None:
            dlo, dhi = default_phi_range(problem.loss, self.radius)
            lo = dlo if lo is None else lo
            hi = dhi if hi is None else hi
        self.lo, self.hi = float(lo), float(hi)
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.hi > self.lo):
            raise ParameterError(f"loss-value range needs finite lo < hi, got [{lo}, {hi}]")

    @property
    def sensitivity(self) -> float:
        """Delta_u = hi - lo: what one record can change any candidate's score by."""
        return self.hi - self.lo

    def net(self, size: int) -> np.ndarray:
        """A seeded random net of the ball of radius D (see :func:`ball_net`)."""
        return ball_net(int(size), self.radius, self.problem.d, self.rng)

    def utilities(self, candidates) -> tuple[np.ndarray, int]:
        """(scores u(w_k) to be minimised, number of clipped values) - non-private."""
        from dpreg_kernels.selection import clipped_phi_sums

        W = np.ascontiguousarray(np.atleast_2d(np.asarray(candidates, dtype=float)))
        if W.ndim != 2 or W.shape[1] != self.problem.d or W.shape[0] < 1:
            raise ParameterError(f"candidates must be a non-empty K x {self.problem.d} array")
        if not np.all(np.isfinite(W)):
            raise ParameterError("candidates must be finite")
        pb = self.problem
        s, ncl = clipped_phi_sums(pb.X, pb.y, pb.all_rows, W, self._phi, self.lo, self.hi)
        psi = np.array([pb.loss.psi(w) for w in W])
        return s - pb.n * self.lo + pb.n * psi, int(ncl)

    def probabilities(self, candidates, epsilon: float) -> np.ndarray:
        """The exact selection probabilities (non-private; for tests and diagnostics)."""
        u, _ = self.utilities(candidates)
        a = exponential_logits(u, epsilon, self.sensitivity)
        a -= a.max()
        p = np.exp(a)
        return p / p.sum()

    def select(self, candidates, epsilon: float, *, fit: bool = False,
               label: str = "exponential mechanism") -> Selection:
        """Charge ``pure_dp_event(epsilon)`` to the accountant, then draw one
        candidate with the exponential mechanism.  ``fit=True``: use the largest
        epsilon <= ``epsilon`` that the accountant has left (:func:`fit_pure_epsilon`)."""
        W = np.atleast_2d(np.asarray(candidates, dtype=float))
        u, ncl = self.utilities(W)
        if fit:
            epsilon = fit_pure_epsilon(self.accountant, epsilon)
        logits = exponential_logits(u, epsilon, self.sensitivity)
        charge(self.accountant, pure_dp_event(epsilon), Participation.all(), label=label)
        k = gumbel_argmax(logits, self.rng)
        return Selection(k, W[k].copy(), float(epsilon),
                         {"candidates": int(W.shape[0]), "lo": self.lo, "hi": self.hi,
                          "sensitivity": self.sensitivity})


# ------------------------------------------------------------- above-threshold
def above_threshold_scan(deficits: Sequence[float], epsilon: float, rng: np.random.Generator):
    """AboveThreshold on sensitivity-1 queries ``-u_t`` with threshold 0: the first
    t with ``-u_t + Lap(4/eps) >= Lap(2/eps)`` (one threshold draw), or None."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ParameterError(f"selection epsilon must be a finite number > 0, got {epsilon!r}")
    rho = rng.laplace(0.0, 2.0 / epsilon)
    for t, u in enumerate(deficits):
        if -float(u) + rng.laplace(0.0, 4.0 / epsilon) >= rho:
            return t
    return None


class AboveThresholdSelector(Selector):
    """AboveThreshold over iterates: the first (noisy) alpha-SOSP (or alpha-FOSP)."""

    name = "above-threshold"
    sparse_data = True  # gradients and Hessians through the problem, which has CSR kernels
    summary = "AboveThreshold (sparse vector): first iterate whose noisy |grad| and lambda_min pass the alpha-SOSP test (pure eps-DP)"
    params = (
        ParamSpec("alpha", "float", None, "target alpha: pass if |grad F| <= alpha and lambda_min >= -sqrt(rho alpha)",
                  "alpha-SOSP, Def. 1 of perturbed-sgd-adaptive-spider-distributed-sosp.txt", low=0, low_open=True),
        ParamSpec("grad_clip", "float", None, "per-record gradient clip C (Delta_g = factor C / n)",
                  "C = G, the loss's declared Lipschitz constant", low=0, low_open=True),
        ParamSpec("hess_clip", "float", None, "per-record Hessian operator-norm clip M (Delta_h = factor M / n)",
                  "M, the loss's declared smoothness", low=0, low_open=True),
        ParamSpec("check", "str", "sosp", "what to test: 'sosp' (gradient and lambda_min, d <= 300) or 'fosp'",
                  "Alg. 4 line 7 (both tests)", choices=("sosp", "fosp")),
    )

    def __init__(self, problem, *, accountant, rng: np.random.Generator, grad_clip: float | None = None,
                 hess_clip: float | None = None, check: str = "sosp"):
        G, M, rho = problem.constants()
        self.problem = problem
        self.accountant = accountant
        self.rng = rng
        self.C = float(grad_clip if grad_clip is not None else G)
        self.M = float(hess_clip if hess_clip is not None else M)
        self.rho = float(rho)
        if check not in ("sosp", "fosp"):
            raise ParameterError(f"check must be 'sosp' or 'fosp', got {check!r}")
        if not (self.C > 0 and self.M > 0 and math.isfinite(self.C) and math.isfinite(self.M)):
            raise ParameterError("grad_clip and hess_clip must be finite numbers > 0")
        if check == "sosp" and problem.d > DENSE_MAX_D:
            raise ParameterError(
                f"above-threshold's lambda_min query needs an exact dense eigendecomposition "
                f"(d <= {DENSE_MAX_D}); d = {problem.d}: test the gradient only with "
                f"--select above-threshold:check=fosp")
        why = problem_supports(problem, "clipped_hessian_sum") if check == "sosp" else None
        if why is not None:
            raise ParameterError(f"above-threshold's lambda_min query needs per-record clipped Hessians, which "
                                 f"loss {problem.loss.name!r} does not provide ({why}): test the gradient only "
                                 f"with --select above-threshold:check=fosp")
        self.check = check

    @property
    def sensitivities(self) -> tuple[float, float]:
        """(Delta_g, Delta_h): sensitivities of the gradient-norm and lambda_min queries."""
        f = self.accountant.sensitivity_factor
        return f * self.C / self.problem.n, f * self.M / self.problem.n

    def clipped_gradient_norm(self, w) -> float:
        pb = self.problem
        s, _ = pb.clipped_grad_sum(np.asarray(w, dtype=float), None, self.C)
        return float(np.linalg.norm(s)) / pb.n

    def clipped_lambda_min(self, w) -> float:
        """lambda_min of the Hessian with each record's part clipped to operator norm M."""
        return float(np.linalg.eigvalsh(self.problem.hessian(w, clip=self.M))[0])

    def deficits(self, candidates, alpha: float, rho: float | None = None) -> np.ndarray:
        """Normalised deficits u(w_t) (sensitivity 1; <= 0 means an alpha-SOSP of
        the clipped objective) - non-private."""
        if not (alpha > 0 and math.isfinite(alpha)):
            raise ParameterError(f"alpha must be a finite number > 0, got {alpha!r}")
        rho = self.rho if rho is None else float(rho)
        dg, dh = self.sensitivities
        out = []
        for w in candidates:
            u = (self.clipped_gradient_norm(w) - alpha) / dg
            if self.check == "sosp":
                u = max(u, (-self.clipped_lambda_min(w) - math.sqrt(rho * alpha)) / dh)
            out.append(u)
        return np.array(out)

    def select(self, candidates, epsilon: float, alpha: float, rho: float | None = None, *,
               fit: bool = False, label: str = "above-threshold") -> Selection:
        """Charge ``pure_dp_event(epsilon)``, then return the first candidate that
        passes the noisy test (index None and w None if none does).  ``fit``: as
        for :meth:`ExponentialSelector.select`."""
        W = [np.asarray(w, dtype=float) for w in candidates]
        if not W:
            raise ParameterError("above-threshold needs at least one candidate")
        u = self.deficits(W, alpha, rho)
        if fit:
            epsilon = fit_pure_epsilon(self.accountant, epsilon)
        charge(self.accountant, pure_dp_event(epsilon), Participation.all(), label=label)
        k = above_threshold_scan(u, epsilon, self.rng)
        dg, dh = self.sensitivities
        return Selection(k, None if k is None else W[k].copy(), float(epsilon),
                         {"candidates": len(W), "check": self.check, "alpha": float(alpha),
                          "query_noise_grad_units": 4 * dg / epsilon,
                          "query_noise_lambda_units": 4 * dh / epsilon})


# --------------------------------------------------- hyper-parameter selection
def select_hyperparameters(problem, algorithm, grid: Sequence[dict], *, accountant, epsilon_each: float,
                           delta_each: float, epsilon_select: float, seed: int | None = None,
                           lo: float | None = None, hi: float | None = None, noise=None) -> dict:
    """Private hyper-parameter selection: run ``algorithm`` (a registered name or
    class) once per parameter dict of ``grid``, each in a budget view of
    (epsilon_each, delta_each) of ``accountant``, then pick one output with the
    exponential mechanism (``epsilon_select``, score = clipped empirical loss).

    Everything is charged to ``accountant``, which composes the runs and the
    selection: the selection's pure event is charged *first* (reserving it), so
    the runs cannot spend it.  ``seed``: None (OS entropy, the default) or a
    research seed that must stay secret.  Returns ``{"index", "params", "w", "outputs"}``.
    """
    from dpreg.params import bind
    from dpreg.registry import get_registry

    algo_cls = get_registry().get("algorithm", algorithm) if isinstance(algorithm, str) else algorithm
    if not grid:
        raise ParameterError("hyper-parameter grid is empty")
    bound = [bind(algo_cls.params, dict(g), f"algorithm {algo_cls.name!r}") for g in grid]
    from dpreg.interfaces import derive_seed, secret_seed

    # secret by default (privacy rule 4); each run gets a 128-bit child seed
    ss = np.random.SeedSequence([secret_seed(seed), 0x5E1EC7])
    sel_rng, *run_seeds = [np.random.default_rng(s) for s in ss.spawn(1)] + \
        [derive_seed(s) for s in ss.spawn(len(bound))]
    selector = ExponentialSelector(problem, accountant=accountant, rng=sel_rng, lo=lo, hi=hi)
    epsilon_select = fit_pure_epsilon(accountant, epsilon_select)
    charge(accountant, pure_dp_event(epsilon_select), Participation.all(),
           label="hyper-parameter selection (reserved)")
    outputs = []
    for params, s in zip(bound, run_seeds):
        algo = algo_cls(problem, params, noise=noise, accountant=accountant.view(epsilon_each, delta_each),
                        seed=s)
        outputs.append(algo.run())
    W = np.stack([np.asarray(o.w, dtype=float) for o in outputs])
    u, _ = selector.utilities(W)
    k = gumbel_argmax(exponential_logits(u, epsilon_select, selector.sensitivity), sel_rng)
    return {"index": k, "params": bound[k], "w": W[k].copy(), "outputs": outputs,
            "epsilon_select": epsilon_select}


@hookimpl
def dpreg_register_selectors(register):
    for cls in (ExponentialSelector, AboveThresholdSelector):
        register(cls.name, cls, summary=cls.summary)
