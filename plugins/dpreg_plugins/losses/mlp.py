"""Small neural networks as a loss: ``mlp`` (one hidden layer, logistic output).

``f(w; x, y) = log(1 + exp(-y o))`` with ``o = v . act(W x + b) + c``; ``W`` is
h x p (p = number of features), the flat parameter vector is
``[W row-major | b | v | c]`` of length ``D = h p + 2h + 1`` (this is the
problem's ``d``).  Options (``--loss mlp:hidden=32,activation=tanh``):

* ``hidden``     width h (default 32);
* ``activation`` ``tanh`` (default) or ``softplus``;
* ``init``       ``random`` (default): :meth:`MLPProblem.initial_point` draws
  ``W_kj ~ N(0, s^2)``, ``v_k ~ N(0, t^2/h)``, ``b = 0``, ``c = 0`` with
  ``s = init_scale`` (default 0.01) and ``t = init_v`` (default 8), from the
  algorithm's secret ``"initial point"`` stream (data-independent);
  ``zero``: start exactly at the symmetric saddle w = 0 (all hidden units
  identical; the gradient is zero except in c) - for saddle experiments;
* ``init_scale``, ``init_v``: s and t above;
* ``G``, ``M``   declared Lipschitz and smoothness constants (default: see
  below);
* ``ball``       B (default 1): the worst-case constants hold for ``|w| <= B``;
* ``radius``     feasible radius (default none: no projection); when set, the
  worst-case constants are declared for ``|w| <= radius``.

Practical defaults (chosen on adult's *training* split, adaptive-spider, eps = 2,
tree noise, seeds 0-4; docs/experiment-saddles-mlp.md):

* small input weights, large output weights: with s = 0.01 every unit starts
  in tanh's linear range, so the network starts as a product-parameterised
  linear model o ~ (sum_k v_k W_k) . x whose effective step is eta |v|^2; the
  privacy noise on W enters that linear map only through v.  The former
  default (s = 1, t = 0: random tanh features, only v and c learn at first)
  reached train accuracy 0.778 (seed 0), t = 1 to 6 with s = 0.1 at most 0.79;
* declared constants at the initial point's scale, G = t and M = t^2/8 (with
  t = 8: G = 8 = the O1 clip, M = 8: step 1/M = 0.125).  At W = b = 0 and
  |v| = t a record with |x| <= 1 has |grad_W f| <= t and
  |grad^2_W f| = phi'' |v|^2 |x|^2 <= t^2/4; the mean loss's W-block,
  (v v^T) (x) E[phi'' x x^T], is smaller, and t^2/8 measured better than
  t^2/4 (train accuracy 0.8185 vs 0.8127, seeds 0-1; 5 seeds: 0.8175 +-
  0.0093).  The worst-case constants on the ball |w| <= 1 (G = 1.73,
  M = 3.70) made adaptive-spider clip at 1.73 and step 0.27 on a model whose
  useful gradients have norm ~ t (s = 0.1, t = 2 to 6: train accuracy
  0.759-0.762, the majority class); those for |w| <= 8 (G = 11.4, M = 46)
  make steps tinier still.  G = t, M = t^2/c keep every default invariant
  to t (with M = t^2/4, t = 6, 8, 10 gave train accuracy 0.8122, 0.8127,
  0.8124, seeds 0-1).

The default suits data where a linear model is already good (adult, eps = 2,
5 seeds: test accuracy 0.819 +- 0.009, the linear logistic model 0.832 +- 0.001).
A problem that needs non-linearity from the start (XOR of signs) is not fitted
from it in 200 dp-gd steps (train accuracy 0.50); ``init_scale=1,init_v=0``
(random tanh features, worst-case constants) fits it (0.88).

Every constant is a default for clipping bounds, steps and batch sizes only:
every per-record gradient and gradient difference is clipped in the kernel
(:mod:`dpreg_kernels.mlp`) to what the algorithm uses, so privacy never
rests on them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from dpreg import hookimpl
from dpreg.errors import ParameterError

from .linear import logistic_d2phi, logistic_dphi, logistic_phi

ACTIVATIONS = ("tanh", "softplus")
#: max |act'|, |act''|, |act'''| (tanh: 1, 4/(3 sqrt 3), 2; softplus: 1, 1/4, 1/(6 sqrt 3))
_ACT_BOUNDS = {"tanh": (1.0, 4.0 / (3.0 * math.sqrt(3.0)), 2.0),
               "softplus": (1.0, 0.25, 1.0 / (6.0 * math.sqrt(3.0)))}


def _num(v, kind, name):
    try:
        return kind(v)
    except (TypeError, ValueError):
        raise ParameterError(f"mlp option {name}={v!r} must be a {kind.__name__}") from None


class MLPLoss:
    """One-hidden-layer network, logistic output (options hidden, activation, init, init_scale, init_v, G, M, ball, radius).

    f(w; x, y) = log(1 + exp(-y o)), o = v . act(W x + b) + c; d = h p + 2h + 1 parameters.
    Options, as --loss mlp:key=value,...:
    - hidden=32: width h; activation=tanh: tanh or softplus;
    - init=random: W_kj ~ N(0, init_scale^2), v_k ~ N(0, init_v^2/h), b = c = 0 (secret, data-independent);
      init=zero: start at the symmetric saddle w = 0 (saddle experiments);
    - init_scale=0.01, init_v=8 (t): units start in tanh's linear range with large output
      weights (chosen on adult's training split: adaptive-spider eps=2 train accuracy 0.8175
      vs 0.778 for init_scale=1, init_v=0, the random tanh features that fit XOR-like data);
    - G, M: declared Lipschitz / smoothness constants; default for init=random G = t,
      M = t^2/8 (the W-block bounds at the init's scale, t^2/4 halved: measured better on
      the training split), else the worst case on the ball;
    - ball=1: the worst-case G, M, rho hold for |w| <= ball (rho is always this one);
    - radius=none: project iterates onto this ball (then ball = radius).
    Every constant only sets defaults (clip, step, batches): every per-record gradient and
    difference is clipped in the kernel, so privacy never rests on them.
    Calling the loss with options returns a new loss: ``mlp(hidden=8)``.
    """

    name = "mlp"
    labels = "binary"
    classifier = True
    #: the output loss phi(o, y) (logistic), for code that bounds F at the origin
    phi = staticmethod(logistic_phi)
    dphi = staticmethod(logistic_dphi)
    d2phi = staticmethod(logistic_d2phi)

    def __init__(self, hidden=32, activation="tanh", init="random", init_scale=0.01, init_v=8.0, ball=1.0,
                 radius=None, G=None, M=None):
        self.hidden = _num(hidden, int, "hidden")
        if self.hidden < 1:
            raise ParameterError(f"mlp option hidden must be >= 1, got {self.hidden}")
        if activation not in ACTIVATIONS:
            raise ParameterError(f"mlp option activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        if init not in ("random", "zero"):
            raise ParameterError(f"mlp option init must be 'random' or 'zero', got {init!r}")
        self.init = init
        self.init_scale = _num(init_scale, float, "init_scale")
        self.init_v = _num(init_v, float, "init_v")
        self.radius = None if radius in (None, "", "none") else _num(radius, float, "radius")
        self.ball = self.radius if self.radius is not None else _num(ball, float, "ball")
        for nm, v in (("init_scale", self.init_scale), ("init_v", self.init_v), ("ball", self.ball)):
            if not (math.isfinite(v) and v >= 0):
                raise ParameterError(f"mlp option {nm} must be a finite number >= 0, got {v}")
        if self.radius is not None and not self.radius > 0:
            raise ParameterError(f"mlp option radius must be > 0, got {self.radius}")
        self.G = None if G in (None, "", "auto") else _num(G, float, "G")
        self.M = None if M in (None, "", "auto") else _num(M, float, "M")
        for nm, v in (("G", self.G), ("M", self.M)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ParameterError(f"mlp option {nm} must be a finite number > 0, got {v}")

    def __call__(self, **options) -> "MLPLoss":
        """A new loss with these options (the others keep their defaults)."""
        return MLPLoss(**options)

    def options(self) -> dict:
        return {"hidden": self.hidden, "activation": self.activation, "init": self.init,
                "init_scale": self.init_scale, "init_v": self.init_v, "ball": self.ball, "radius": self.radius,
                "G": self.G, "M": self.M}

    @property
    def act_code(self) -> int:
        from dpreg_kernels.mlp import ACTIVATIONS as codes

        return codes[self.activation]

    def constants(self, d: int) -> tuple[float, float, float]:
        """The declared (G, M, rho) that algorithms derive clip bounds, steps and
        batch sizes from (privacy never rests on them: every per-record gradient
        and difference is clipped in the kernel to what the algorithm uses).

        G and M: the options ``G``, ``M`` when given; else, for ``init=random``
        with t = init_v > 0, the bounds of the dominant block at the initial
        point's scale: at W = b = 0 (tanh' = 1, tanh'' = 0) and |v| = t, a record
        with |x| <= 1 has |grad_W f| = |phi'| |v| |x| <= t and
        |grad^2_W f| = phi'' |v|^2 |x|^2 <= t^2/4; declared G = t, M = t^2/8
        (t = 8: G = 8, M = 8, step 1/M = 0.125; see the module docstring); else (``init=zero``, or t = 0) the
        worst-case bounds on the ball (:meth:`ball_constants`).  rho is always
        the ball's (it only sets adaptive-spider's frozen period)."""
        Gb, Mb, rho = self.ball_constants()
        t = self.init_v
        if self.init == "random" and t > 0:
            Gp, Mp = t, t * t / 8.0
        else:
            Gp, Mp = Gb, Mb
        return (self.G if self.G is not None else Gp, self.M if self.M is not None else Mp, rho)

    def ball_constants(self) -> tuple[float, float, float]:
        """(G, M, rho) for records with |x| <= 1 and parameters |w| <= B.

        With x~ = (x, 1) (|x~| <= sqrt 2), P = |W|^2 + |b|^2, Q = |v|^2 (P + Q <= B^2),
        |phi'| <= 1, |phi''| <= 1/4, |phi'''| <= 1/(6 sqrt 3), act bounds s1, s2, s3:
        * |grad o|^2 = |a|^2 + 1 + sum_k v_k^2 act'(z_k)^2 |x~|^2, with |a|^2 <= 2P
          (tanh: |tanh z| <= |z|, |z_k| <= |W_k x| + |b_k|) or 2 h log^2 2 + 4P
          (softplus: |softplus z| <= log 2 + |z|): G_o^2 <= 1 + 2B^2 (tanh),
          1 + 2h log^2 2 + 4B^2 (softplus); G = G_o since |phi'| <= 1;
        * for a unit direction, |d^T grad^2 o d| = |2 sum_k dv_k act'(z_k) <x~, dW_k>
          + sum_k v_k act''(z_k) <x~, dW_k>^2| <= s1 |x~| + B s2 |x~|^2, so
          |grad^2 o| <= sqrt 2 s1 + 2 B s2 =: M_o;
          M = G_o^2 / 4 + M_o;
        * |grad^3 o| <= 3 s2 |x~|^2 + B s3 |x~|^3 = 6 s2 + 2 sqrt 2 B s3 =: R_o;
          rho = G_o^3 / (6 sqrt 3) + 3/4 G_o M_o + R_o.
        The same for every d (the parameter count)."""
        s1, s2, s3 = _ACT_BOUNDS[self.activation]
        B = self.ball
        if self.activation == "tanh":
            Go2 = 1.0 + 2.0 * B * B
        else:
            Go2 = 1.0 + 2.0 * self.hidden * math.log(2.0) ** 2 + 4.0 * B * B
        Go = math.sqrt(Go2)
        Mo = math.sqrt(2.0) * s1 + 2.0 * B * s2
        Ro = 6.0 * s2 + 2.0 * math.sqrt(2.0) * B * s3
        G = Go
        M = Go2 / 4.0 + Mo
        rho = Go ** 3 / (6.0 * math.sqrt(3.0)) + 0.75 * Go * Mo + Ro
        return G, M, rho

    # no data-independent term
    def psi(self, w) -> float:
        return 0.0

    def psi_grad(self, w):
        return np.zeros_like(w)

    def psi_hvp(self, w, v):
        return np.zeros_like(v)

    def scalar_kernels(self):
        raise ParameterError("loss 'mlp' is not a linear model: it has no margin kernels "
                             "(the exponential selector scores candidates with one; use --select above-threshold)")

    def make_problem(self, X, y, name: str = "") -> "MLPProblem":
        return MLPProblem(self, X, y, name)

    def describe(self) -> str:
        return f"mlp ({self.hidden} {self.activation} units)"


def _dense(X) -> np.ndarray:
    """X as a C-contiguous float64 array; a scipy sparse matrix (svmlight files
    load sparse) is densified: the network's kernels read dense rows, and the
    data sets it is meant for (p up to a few hundred features) fit."""
    from dpreg.data import is_sparse

    if is_sparse(X):
        X = X.toarray()
    return np.ascontiguousarray(X, dtype=np.float64)


@dataclass
class MLPProblem:
    """The ``mlp`` loss on records ``(X[i], y[i])`` (rows of X with norm <= 1):
    the same methods as :class:`dpreg.problem.Problem`, with ``d`` the number
    of parameters and ``p`` the number of features.  Clipped sums are the only
    way algorithms touch the data; ``value``, ``gradient``, ``hvp`` and
    ``hessian`` are exact and for evaluation only."""

    loss: MLPLoss
    X: np.ndarray
    y: np.ndarray
    name: str = ""
    _rows: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        self.X = _dense(self.X)
        self.y = np.ascontiguousarray(self.y, dtype=np.float64)
        self.n, self.p = self.X.shape
        self.h = self.loss.hidden
        self.d = self.h * self.p + 2 * self.h + 1
        self._act = self.loss.act_code

    @cached_property
    def _k(self):
        import dpreg_kernels.mlp as k  # lazy: compiles or loads cache

        return k

    @property
    def all_rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = np.arange(self.n, dtype=np.int64)
        return self._rows

    def constants(self) -> tuple[float, float, float]:
        return self.loss.constants(self.d)

    def _idx(self, idx):
        return self.all_rows if idx is None else np.ascontiguousarray(idx, dtype=np.int64)

    def _w(self, w):
        w = np.ascontiguousarray(w, dtype=np.float64)
        if w.shape != (self.d,):
            raise ValueError(f"mlp parameter vector must have length {self.d}, got shape {w.shape}")
        return w

    def unpack(self, w):
        """(W (h x p), b, v, c) views of the flat parameter vector."""
        h, p = self.h, self.p
        return (w[:h * p].reshape(h, p), w[h * p:h * p + h], w[h * p + h:h * p + 2 * h], w[-1])

    def initial_point(self, rng: np.random.Generator) -> np.ndarray:
        """Data-independent start: zeros for ``init=zero`` (the symmetric saddle),
        else W_kj ~ N(0, s^2), v_k ~ N(0, t^2/h), b = c = 0 (s = init_scale,
        t = init_v; see the module docstring)."""
        w = np.zeros(self.d)
        if self.loss.init == "zero":
            return w
        W, _, v, _ = self.unpack(w)
        W[:] = rng.standard_normal(W.shape) * self.loss.init_scale
        v[:] = rng.standard_normal(v.shape) * (self.loss.init_v / math.sqrt(self.h))
        return w

    # ------------------------------------------------------ clipped (private) sums
    def clipped_grad_sum(self, w, idx, clip):
        """(sum over idx of per-record gradients each clipped to norm ``clip``, n_clipped)."""
        from dpreg.problem import _inner

        full = idx is None
        ix = self.all_rows[:0] if full else np.ascontiguousarray(idx, dtype=np.int64)
        return self._k.grad_sum(self.X, self.y, ix, full, self._w(w), self.h, self._act, _inner(clip))

    def clipped_diff_sum(self, w, w_prev, idx, clip):
        """(sum over idx of per-record gradient differences grad f(w) - grad f(w_prev),
        each clipped to norm ``clip``, n_clipped)."""
        from dpreg.problem import _inner

        full = idx is None
        ix = self.all_rows[:0] if full else np.ascontiguousarray(idx, dtype=np.int64)
        return self._k.diff_sum(self.X, self.y, ix, full, self._w(w), self._w(w_prev), self.h, self._act,
                                _inner(clip))

    # ------------------------------------------------- exact (evaluation) quantities
    def decision_function(self, w, X=None) -> np.ndarray:
        """Network outputs o(w; x) for the rows of X (default: this problem's)."""
        X = self.X if X is None else _dense(X)
        if X.ndim != 2 or X.shape[1] != self.p:
            raise ValueError(f"decision_function needs rows of {self.p} features, got shape {X.shape}")
        return self._k.outputs(X, self._w(w), self.h, self._act)

    def value(self, w, idx=None) -> float:
        ix = self._idx(idx)
        return self._k.loss_sum(self.X, self.y, ix, self._w(w), self.h, self._act) / len(ix)

    def gradient(self, w, idx=None) -> np.ndarray:
        s, _ = self.clipped_grad_sum(w, idx, np.inf)
        return s / (self.n if idx is None else len(idx))

    def hvp(self, w, v, idx=None) -> np.ndarray:
        ix = self._idx(idx)
        return self._k.hvp_sum(self.X, self.y, ix, self._w(w), self._w(v), self.h, self._act) / len(ix)

    def hessian(self, w, idx=None, clip: float = np.inf) -> np.ndarray:
        """Dense exact Hessian from d Hessian-vector products (small d only).
        A finite ``clip`` (per-record operator-norm clipping, for the
        above-threshold selector) is not available for networks."""
        if np.isfinite(clip):
            raise ParameterError("loss 'mlp': per-record clipped Hessians are not available "
                                 "(above-threshold --check sosp needs a linear-model loss)")
        eye = np.eye(self.d)
        H = np.stack([self.hvp(w, eye[j], idx) for j in range(self.d)], axis=1)
        return 0.5 * (H + H.T)


@hookimpl
def dpreg_register_losses(register):
    register("mlp", MLPLoss(), summary=MLPLoss.__doc__.strip().splitlines()[0])
