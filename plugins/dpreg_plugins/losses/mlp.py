"""Feed-forward networks as a loss: ``mlp`` (any number of hidden layers; a
logistic, softmax, squared or Huber head).

The network maps a record's features ``x`` (p of them, ``|x| <= 1``) through
hidden layers ``a_m = act(W_m a_{m-1} + b_m)`` (``a_{-1} = x``) to a linear
output layer ``o = W_L a_{L-1} + b_L``, and the per-record loss is the head's
``l(o, y)``:

* ``logistic`` (task ``binary``, one output, y = +-1): ``log(1 + exp(-y o))``;
* ``softmax`` (task ``multiclass``, K outputs, y = the class index 0..K-1):
  ``log sum_k exp(o_k) - o_y``;
* ``squared`` (task ``regression``, one output, real y): ``(o - y)^2 / 2``;
* ``huber`` (task ``regression``): ``r^2/2`` for ``|r| <= delta``, else
  ``delta (|r| - delta/2)``, ``r = o - y``: its gradient in o is bounded by
  delta whatever the target.

The flat parameter vector (the problem's ``d`` entries, what algorithms see
and the record's ``weights``) holds the layers in order, each weight matrix
row-major then its bias:

    w = [W_0 (n_0 x p) | b_0 | W_1 (n_1 x n_0) | b_1 | ... | W_L (K x n_{L-1}) | b_L]

(for one hidden layer and one output: ``[W | b | v | c]``, d = h p + 2h + 1).
:meth:`MLPProblem.unpack` gives the ``(W_m, b_m)`` views.  Options
(``--loss mlp:hidden=64,32,activation=tanh``):

* ``hidden``     widths of the hidden layers, first to last (default 32: one
  layer); ``hidden=64,32`` is two;
* ``activation`` ``tanh`` (default), ``softplus``, ``sigmoid`` or ``silu``
  (z sigmoid(z)): all smooth, so the Hessian is defined everywhere;
* ``head``       ``logistic`` (default), ``softmax``, ``squared`` or ``huber``;
  the pipeline sets it from the task (:meth:`MLPLoss.for_task`), and binds the
  softmax head's class count K to the public label map's
  (:meth:`MLPLoss.with_classes`); ``n_classes=K`` sets it by hand;
* ``delta``      Huber's delta (default 1, in the units of the transformed
  targets);
* ``init``       ``random`` (default): :meth:`MLPProblem.initial_point` draws
  ``W_0 ~ N(0, s^2)``, every later hidden layer ``W_m ~ N(0, r^2/n_{m-1})``,
  the output layer ``W_L ~ N(0, t^2/n_{L-1})``, biases 0, with ``s =
  init_scale`` (default 0.01), ``r = init_mid`` (default 1) and ``t = init_v``
  (default 8), from the algorithm's secret ``"initial point"`` stream
  (data-independent); ``zero``: start exactly at the symmetric saddle w = 0
  (all hidden units identical; the gradient is zero except in the output
  biases) - for saddle experiments;
* ``G``, ``M``   declared Lipschitz and smoothness constants (default: see
  below);
* ``ball``       B (default 1): the worst-case constants hold for ``|w| <= B``;
* ``radius``     feasible radius (default none: no projection); when set, the
  worst-case constants are declared for ``|w| <= radius``.

Practical defaults, chosen on training data only - adult's training split for
the logistic head, the training 75 % of scikit-learn's digits (``--test-fraction
0.25``, split seed 0) for softmax, the training set of ``synthetic-regression``
for the regression heads - at eps = 2 with tuning seeds 100-104 (train
accuracy, or train R^2; ``experiments/tune_mlp_defaults.py``; test accuracy of
the defaults: docs/networks.md):

* small input weights, large output weights: with s = 0.01 every unit starts
  in its activation's linear range, so the network starts as a
  product-parameterised linear model ``o ~ (W_L J_{L-1} ... J_1 W_1) W_0 x``
  whose effective step on ``W_0`` is eta times the squared norm of the
  back-propagated factor ``u = W_1^T ... W_L^T e`` (``e = dl/do``); with
  ``r = 1`` the later hidden layers are norm-preserving on average
  (``E|W^T u|^2 = |u|^2`` for entries of variance 1/fan-in), so
  ``E|u|^2 = t^2 |e|^2`` at any depth and the constants below hold for every
  depth.  The privacy noise on ``W_0`` enters that linear map only through u.
  On adult (one layer, dp-sgd) this start reaches train accuracy 0.8444 +-
  0.0011, random tanh features (s = 1, t = 0, worst-case constants) 0.8244 +-
  0.0034, the linear logistic model 0.8424 +- 0.0004; with two layers
  (64,32) 0.8445.  r on digits' training split (64,32, dp-sgd): 0.865 (r = 1),
  0.879 (1.5), 0.884 (2), within 1.5 sd of each other; on adult 0.8445 (1),
  0.8446 (1.5): r = 1 is kept for the derivation it allows;
* declared constants at the initial point's scale, G = t and M = t^2 m:
  at the start (``W_0 = 0``, units linear) a record with |x| <= 1 has
  ``|grad_{W_0} f| = |e| |u| |x| <= |u|`` (|e| <= 1 at outputs near 0 with
  targets in [-1, 1]) and ``|grad^2_{W_0} f| <= c |u|^2``, c the head's
  curvature near o = 0: logistic 1/4 (its largest), softmax 1/K (growing
  towards 1/2 as the classes separate), squared and Huber 1 (for good).  m
  is half the logistic's c for both classification heads (t^2/8: with t = 8,
  G = 8 = the O1 clip, M = 8, dp-sgd's step 1/(2M) = 1/16) and c itself
  for the regression heads (t^2), whose curvature does not fall as they fit.
  Measured, dp-sgd: adult (one layer) t^2/8 0.8444, t^2/4 0.8424; adult
  (64,32) t^2/8 0.8445, t^2/16 0.8412; digits (64,32) t^2/4 0.792, t^2/8
  0.865, t^2/16 0.879, t^2/20 0.870, t^2/32 0.848, (64) t^2/4 0.885, t^2/8
  0.899, t^2/20 0.889; synthetic-regression (64,32), train R^2: t^2/8 0.07 +-
  0.77 (two of five runs diverge), t^2/2 0.56 +- 0.16, t^2 0.640 +- 0.002,
  2 t^2 0.638 +- 0.005 (the linear model 0.642).  adaptive-spider, whose
  step is 1/M, prefers t^2/4 on adult's one-layer network (0.8258 +- 0.0028
  against 0.668 +- 0.211 at t^2/8, where two of five runs collapse; give
  ``M=16``); its Thm 3.11 batches leave it a few dozen steps on networks of
  thousands of parameters at this budget (adult (64,32): 25), which two
  hidden layers do not learn from (docs/networks.md).  The worst-case
  constants on the ball |w| <= 1 (G = 1.73, M = 3.70 for tanh and one layer)
  would clip at 1.73 a model whose useful gradients have norm ~ t; those for
  |w| <= 8 (G = 11.4, M = 46) make steps tinier still.  G = t, M = t^2 m keep
  every default invariant to t.

A problem that needs non-linearity from the start is fitted from this start
too (XOR of signs, dp-gd, 200 steps of 2, eps = 8: train accuracy 0.97-0.99
with one or two layers; random tanh features ``init_scale=1,init_v=0``:
0.99).

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
from dpreg.errors import DataError, ParameterError

from .linear import logistic_d2phi, logistic_dphi, logistic_phi

ACTIVATIONS = ("tanh", "softplus", "sigmoid", "silu")
#: per activation: (|act(0)|, growth g with |act(z)| <= |act(0)| + g |z|, sup |act| (inf: unbounded),
#: max |act'|, max |act''|, max |act'''|) - tanh: 1, 4/(3 sqrt 3), 2; softplus: 1, 1/4, 1/(6 sqrt 3);
#: sigmoid: 1/4, 1/(6 sqrt 3), 1/8; silu (z sigmoid z): 1.0998..., 1/2, 0.3082... (rounded up)
_ACT_BOUNDS = {"tanh": (0.0, 1.0, 1.0, 1.0, 4.0 / (3.0 * math.sqrt(3.0)), 2.0),
               "softplus": (math.log(2.0), 1.0, math.inf, 1.0, 0.25, 1.0 / (6.0 * math.sqrt(3.0))),
               "sigmoid": (0.5, 0.25, 1.0, 0.25, 1.0 / (6.0 * math.sqrt(3.0)), 0.125),
               "silu": (0.0, 1.0, math.inf, 1.1, 0.5, 0.31)}
#: head -> the task it serves
HEADS = {"logistic": "binary", "softmax": "multiclass", "squared": "regression", "huber": "regression"}
#: task -> the default head for it
TASK_HEADS = {"binary": "logistic", "multiclass": "softmax", "regression": "squared"}
#: the practical smoothness of each head, as a factor of t^2 (t = init_v): M = t^2 m.  At the start
#: (W_0 = 0, units linear) the W_0 block of a record's Hessian is (u^T l''(o) u) x x^T with |u| ~ t,
#: so its norm is at most c t^2, c the head's curvature at o ~ 0: logistic 1/4 (its largest), softmax
#: 1/K (it grows towards its bound 1/2 as the classes separate), squared and Huber 1 (for good).
#: Declared: half of the logistic's, t^2/8, for both classification heads; c t^2 = t^2 for the
#: regression heads, whose curvature does not fall as they fit.  Chosen on training splits
#: (dp-sgd, eps = 2, seeds 100-104; see the module docstring)
_PRACTICAL_M = {"logistic": 0.125, "softmax": 0.125, "squared": 1.0, "huber": 1.0}


def _num(v, kind, name):
    try:
        return kind(v)
    except (TypeError, ValueError):
        raise ParameterError(f"mlp option {name}={v!r} must be a {kind.__name__}") from None


def parse_hidden(v) -> tuple[int, ...]:
    """Hidden widths from an int, a sequence of ints or a string ``"64,32"``
    (also ``"64-32"``); ParameterError unless every width is an integer >= 1."""
    if isinstance(v, str):
        parts = [s for s in v.replace("-", ",").replace(" ", "").split(",")]
    elif isinstance(v, (list, tuple)):
        parts = list(v)
    else:
        parts = [v]
    out = []
    for s in parts:
        try:
            f = float(s)
            k = int(f)
        except (TypeError, ValueError, OverflowError):
            raise ParameterError(f"mlp option hidden={v!r} must be widths like 32 or 64,32") from None
        if k != f or k < 1:
            raise ParameterError(f"mlp option hidden must be integers >= 1, got {v!r}")
        out.append(k)
    if not out:
        raise ParameterError("mlp option hidden must name at least one layer width")
    return tuple(out)


class MLPLoss:
    """Feed-forward network: hidden layers, logistic/softmax/squared/Huber head (options hidden, activation, head, n_classes, delta, init, init_scale, init_mid, init_v, G, M, ball, radius).

    f(w; x, y) = l(o, y), o = W_L act(... act(W_0 x + b_0) ...) + b_L; w = every layer's
    weights (row-major) then bias, in order.  Options, as --loss mlp:key=value,...:
    - hidden=32: hidden widths, e.g. hidden=64,32 (two layers); activation=tanh: tanh,
      softplus, sigmoid or silu;
    - head=logistic (binary, y = +-1), softmax (K classes; K bound from the label map, or
      n_classes=K), squared or huber (regression; delta=1); set from the task by the pipeline;
    - init=random: W_0 ~ N(0, init_scale^2), later hidden W ~ N(0, init_mid^2/fan_in),
      output W ~ N(0, init_v^2/fan_in), biases 0 (secret, data-independent);
      init=zero: start at the symmetric saddle w = 0 (saddle experiments);
    - init_scale=0.01, init_mid=1, init_v=8 (t): units start in the linear range with a
      large output gain, and the later layers keep the back-propagated factor's norm t at any
      depth (chosen on adult's and digits' training splits: dp-sgd eps=2 train accuracy 0.8444
      on adult vs 0.8244 for init_scale=1, init_v=0, the random tanh features);
    - G, M: declared Lipschitz / smoothness constants; default for init=random G = t,
      M = t^2/8 (logistic, softmax) or t^2 (squared, huber): the start's bounds (see the
      module docstring), else the worst case on the ball;
    - ball=1: the worst-case G, M, rho hold for |w| <= ball (rho is always this one);
    - radius=none: project iterates onto this ball (then ball = radius).
    Every constant only sets defaults (clip, step, batches): every per-record gradient and
    difference is clipped in the kernel, so privacy never rests on them.
    Calling the loss with options returns a new loss: ``mlp(hidden=(64, 32))``.
    """

    name = "mlp"
    #: the output loss phi(o, y) of the logistic head, for code that bounds F at the origin
    phi = staticmethod(logistic_phi)
    dphi = staticmethod(logistic_dphi)
    d2phi = staticmethod(logistic_d2phi)

    def __init__(self, hidden=32, activation="tanh", head=None, n_classes=None, delta=1.0, init="random",
                 init_scale=0.01, init_mid=1.0, init_v=8.0, ball=1.0, radius=None, G=None, M=None):
        self.hidden = parse_hidden(hidden)
        if activation not in ACTIVATIONS:
            raise ParameterError(f"mlp option activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        if head in ("", "auto"):
            head = None
        if head is not None and head not in HEADS:
            raise ParameterError(f"mlp option head must be one of {', '.join(HEADS)}, got {head!r}")
        #: the head as given (None: chosen from the task, logistic until bound: :meth:`for_task`)
        self.head_given = head
        self.head = head or "logistic"
        if n_classes in (None, "", "none"):
            self.n_classes = None
        else:
            k = _num(n_classes, float, "n_classes")
            if k != int(k) or k < 2:
                raise ParameterError(f"mlp option n_classes must be an integer >= 2, got {n_classes!r}")
            self.n_classes = int(k)
        if self.n_classes is not None:
            if head is None:
                self.head = self.head_given = "softmax"  # K classes given: the softmax head
            elif head != "softmax":
                raise ParameterError(f"mlp option n_classes is for head=softmax; head {head!r} has one output")
        self.delta = _num(delta, float, "delta")
        if not (math.isfinite(self.delta) and self.delta > 0):
            raise ParameterError(f"mlp option delta must be a finite number > 0, got {delta!r}")
        if init not in ("random", "zero"):
            raise ParameterError(f"mlp option init must be 'random' or 'zero', got {init!r}")
        self.init = init
        self.init_scale = _num(init_scale, float, "init_scale")
        self.init_mid = _num(init_mid, float, "init_mid")
        self.init_v = _num(init_v, float, "init_v")
        self.radius = None if radius in (None, "", "none") else _num(radius, float, "radius")
        self.ball = self.radius if self.radius is not None else _num(ball, float, "ball")
        for nm, v in (("init_scale", self.init_scale), ("init_mid", self.init_mid), ("init_v", self.init_v),
                      ("ball", self.ball)):
            if not (math.isfinite(v) and v >= 0):
                raise ParameterError(f"mlp option {nm} must be a finite number >= 0, got {v}")
        if self.radius is not None and not self.radius > 0:
            raise ParameterError(f"mlp option radius must be > 0, got {self.radius}")
        self.G = None if G in (None, "", "auto") else _num(G, float, "G")
        self.M = None if M in (None, "", "auto") else _num(M, float, "M")
        for nm, v in (("G", self.G), ("M", self.M)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ParameterError(f"mlp option {nm} must be a finite number > 0, got {v}")

    # ------------------------------------------------------------ configuration
    def __call__(self, **options) -> "MLPLoss":
        """A new loss with these options (the others keep their defaults)."""
        return MLPLoss(**options)

    def options(self) -> dict:
        """Every option, as :class:`MLPLoss` takes them (``MLPLoss(**loss.options())`` is this loss)."""
        return {"hidden": self.hidden, "activation": self.activation, "head": self.head_given,
                "n_classes": self.n_classes, "delta": self.delta, "init": self.init, "init_scale": self.init_scale,
                "init_mid": self.init_mid, "init_v": self.init_v, "ball": self.ball, "radius": self.radius,
                "G": self.G, "M": self.M}

    def _with(self, **changes) -> "MLPLoss":
        return MLPLoss(**{**self.options(), **changes})

    @property
    def task(self) -> str:
        """``binary``, ``multiclass`` or ``regression``: the head's."""
        return HEADS[self.head]

    @property
    def labels(self) -> str:
        """How the plumbing treats the labels: ``binary`` (a two-value label map
        to +-1), ``multiclass`` (a K-value label map to 0..K-1) or ``real``."""
        return {"binary": "binary", "multiclass": "multiclass", "regression": "real"}[self.task]

    @property
    def classifier(self) -> bool:
        return self.task != "regression"

    @property
    def n_outputs(self) -> int | None:
        """Outputs of the last layer: K for the softmax head (None until bound), else 1."""
        return self.n_classes if self.head == "softmax" else 1

    def with_classes(self, K: int) -> "MLPLoss":
        """This network with a softmax head over K classes (the size of the
        public label map); other options kept."""
        K = _num(K, int, "n_classes")
        if K < 2:
            raise ParameterError(f"a softmax head needs at least 2 classes, got {K}")
        return self._with(head="softmax", n_classes=K)

    def for_task(self, task: str, K: int | None = None) -> "MLPLoss":
        """This network configured for ``task`` (from public facts: the
        declared label map, the data set's declared task): ``binary`` -> the
        logistic head, ``multiclass`` -> softmax over K classes (K None: bound
        later, :meth:`with_classes`), ``regression`` -> squared.  A head given
        as an option is kept when it serves the task (``head=huber`` for
        regression) and refused in one line when it does not.  Other options kept."""
        if task not in TASK_HEADS:
            raise ParameterError(f"unknown task {task!r} (binary, multiclass or regression)")
        if self.head_given is not None:
            if HEADS[self.head_given] != task:
                what = {"binary": "two classes", "multiclass": f"{K or 'K > 2'} classes",
                        "regression": "real targets"}[task]
                raise ParameterError(f"mlp head={self.head_given} is for {self.task} data; these data declare "
                                     f"{what} (use head={TASK_HEADS[task]}, or leave head out)")
            return self.with_classes(K) if task == "multiclass" and K is not None else self
        if task == "multiclass":
            return self.with_classes(K) if K is not None else self._with(head="softmax")
        if task == "binary":
            return self  # the logistic head: the default
        return self._with(head=TASK_HEADS[task])

    @property
    def spec(self) -> str:
        """The loss with every option that differs from the default, as a
        ``--loss`` string that rebuilds it (``mlp:hidden=64,32,head=softmax,n_classes=10``)."""
        default = MLPLoss().options()
        parts = []
        for k, v in self.options().items():
            if v == default[k] or (k == "ball" and self.radius is not None) or (k == "n_classes" and v is None):
                continue
            if k == "hidden":
                v = ",".join(str(h) for h in v)
            parts.append(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}")
        return "mlp" + (":" + ",".join(parts) if parts else "")

    @property
    def act_code(self) -> int:
        from dpreg_kernels.mlp import ACTIVATIONS as codes

        return codes[self.activation]

    @property
    def head_code(self) -> int:
        from dpreg_kernels.mlp import HEADS as codes

        return codes[self.head]

    def sizes(self, p: int) -> tuple[int, ...]:
        """Layer sizes ``(p, n_0, ..., n_out)`` for p features."""
        if self.n_outputs is None:
            raise ParameterError("loss 'mlp' with head=softmax needs its number of classes: declare the labels "
                                 "(--labels a,b,c) or give n_classes=K")
        return (int(p), *self.hidden, int(self.n_outputs))

    # ------------------------------------------------------------ constants
    def _head_bounds(self, out_bound: float) -> tuple[float, float, float]:
        """(sup |grad_o l|, sup |grad^2_o l|, sup |grad^3_o l|) over outputs with
        |o| <= out_bound (targets in [-1, 1] for the regression heads):
        logistic 1, 1/4, 1/(6 sqrt 3); softmax sqrt 2 (|p - e_y|), 1/2 (the
        variance of a unit vector's entries under p, entries within sqrt 2 of
        each other: Popoviciu), 1/sqrt 2 (third central moment <= range x
        variance); squared 1 + out_bound, 1, 0; Huber min(delta, 1 + out_bound),
        1, 0 (its second derivative jumps at |r| = delta: rho holds on each piece)."""
        if self.head == "logistic":
            return 1.0, 0.25, 1.0 / (6.0 * math.sqrt(3.0))
        if self.head == "softmax":
            return math.sqrt(2.0), 0.5, 1.0 / math.sqrt(2.0)
        g = 1.0 + out_bound
        return (g if self.head == "squared" else min(self.delta, g)), 1.0, 0.0

    def constants(self, d: int) -> tuple[float, float, float]:
        """The declared (G, M, rho) that algorithms derive clip bounds, steps and
        batch sizes from (privacy never rests on them: every per-record gradient
        and difference is clipped in the kernel to what the algorithm uses).

        G and M: the options ``G``, ``M`` when given; else, for ``init=random``
        with t = init_v > 0, the bounds of the dominant block at the initial
        point's scale: at ``W_0 = 0`` (activations in their linear range) the
        back-propagated factor u has ``E|u|^2 = t^2 |e|^2`` (``e = dl/do``), a
        record with |x| <= 1 has ``|grad_{W_0} f| <= |u|`` and
        ``|grad^2_{W_0} f| <= c |u|^2`` (c the head's curvature near o = 0);
        declared G = t, M = t^2 m with m = 1/8 for the classification heads
        (half the logistic's c) and 1 for the regression heads (logistic, t = 8:
        G = 8, M = 8; see the module docstring); else (``init=zero``, or t = 0)
        the worst-case bounds on the ball (:meth:`ball_constants`).  rho is
        always the ball's (it only sets adaptive-spider's frozen period and the
        escape tests' scales)."""
        Gb, Mb, rho = self.ball_constants()
        t = self.init_v
        if self.init == "random" and t > 0:
            Gp, Mp = t, t * t * _PRACTICAL_M[self.head]
        else:
            Gp, Mp = Gb, Mb
        return (self.G if self.G is not None else Gp, self.M if self.M is not None else Mp, rho)

    def ball_constants(self) -> tuple[float, float, float]:
        """(G, M, rho) for records with |x| <= 1 and parameters |w| <= B.

        Bounds on the output map's derivatives ``|grad o|``, ``|grad^2 o|``,
        ``|grad^3 o|`` (Go, Mo, Ro: operator norms over unit directions in w,
        Euclidean norm over the outputs) combine with the head's (l1, l2, l3,
        :meth:`_head_bounds`) by the chain rule:
        G = l1 Go, M = l2 Go^2 + l1 Mo, rho = l3 Go^3 + 3 l2 Go Mo + l1 Ro.
        With ``x~ = (x, 1)`` (|x~| <= sqrt 2), act bounds s1, s2, s3
        (max |act'|, |act''|, |act'''|) and ``|act(z)| <= c0 + g |z|``:

        * one hidden layer of width h, ``P = |[W_0 b_0]|^2``, ``Q = |[W_1 b_1]|^2``,
          P + Q <= B^2: ``|a|^2 <= alpha + beta P`` (c0 = 0: alpha = 0,
          beta = 2 g^2; else alpha = 2 c0^2 h, beta = 4 g^2), so
          Go^2 <= 1 + alpha + max(beta, 2 s1^2) B^2 (tanh: 1 + 2B^2);
          Mo = sqrt 2 s1 + 2 B s2; Ro = 6 s2 + 2 sqrt 2 B s3;
        * deeper networks: by layers, with every ``|[W_m b_m]| <= B``: for
          ``x~_m = (a_m, 1)`` bounds F (value), J, H, T (first three derivatives
          in w) start at (sqrt 2, 0, 0, 0) and go through ``z = [W b] x~``:
          Jz = sqrt(F^2 + B^2 J^2) (Cauchy-Schwarz over the layer's own
          direction and the earlier ones), Hz = (B H + sqrt(B^2 H^2 + 4 J^2))/2
          (the top eigenvalue of [[0, J], [J, B H]]), Tz = (2/sqrt 3) H + B T
          (max c s^2 = 2/(3 sqrt 3) on c^2 + s^2 = 1), then the activation:
          J' = s1 Jz, H' = s2 Jz^2 + s1 Hz, T' = s3 Jz^3 + 3 s2 Jz Hz + s1 Tz,
          F'^2 = 1 + min(n sup|act|^2, (c0 sqrt n + g B F)^2); the output layer
          gives Go = Jz, Mo = Hz, Ro = Tz and ``|o| <= B F`` (the regression
          heads' l1).
        The same for every d (the parameter count)."""
        c0, g, sup, s1, s2, s3 = _ACT_BOUNDS[self.activation]
        B = self.ball
        if len(self.hidden) == 1:
            h = self.hidden[0]
            alpha, beta = (0.0, 2.0 * g * g) if c0 == 0 else (2.0 * c0 * c0 * h, 4.0 * g * g)
            aa = min(h * sup * sup, alpha + beta * B * B)
            Go = math.sqrt(1.0 + alpha + max(beta, 2.0 * s1 * s1) * B * B)
            Mo = math.sqrt(2.0) * s1 + 2.0 * B * s2
            Ro = 6.0 * s2 + 2.0 * math.sqrt(2.0) * B * s3
            out = B * math.sqrt(1.0 + aa)
        else:
            F, J, H, T = math.sqrt(2.0), 0.0, 0.0, 0.0
            for n in self.hidden:
                Jz, Hz, Tz = self._through_layer(F, J, H, T, B)
                a = min(n * sup * sup, (c0 * math.sqrt(n) + g * B * F) ** 2)
                F = math.sqrt(1.0 + a)
                J, H, T = s1 * Jz, s2 * Jz * Jz + s1 * Hz, s3 * Jz ** 3 + 3.0 * s2 * Jz * Hz + s1 * Tz
            Go, Mo, Ro = self._through_layer(F, J, H, T, B)
            out = B * F
        l1, l2, l3 = self._head_bounds(out)
        G = l1 * Go
        M = l2 * Go * Go + l1 * Mo
        rho = l3 * Go ** 3 + 3.0 * l2 * Go * Mo + l1 * Ro
        return G, M, rho

    @staticmethod
    def _through_layer(F, J, H, T, B):
        """(Jz, Hz, Tz): derivative bounds of ``z = [W b] x~`` from those of x~
        (value F, derivatives J, H, T) and |[W b]| <= B (see :meth:`ball_constants`)."""
        Jz = math.sqrt(F * F + B * B * J * J)
        Hz = 0.5 * (B * H + math.sqrt(B * B * H * H + 4.0 * J * J))
        Tz = 2.0 / math.sqrt(3.0) * H + B * T
        return Jz, Hz, Tz

    def origin_bound(self) -> float:
        """A public bound on F at outputs 0 minus inf F (adaptive-spider's B):
        the head's loss at o = 0 - log 2 (logistic), log K (softmax), 1/2
        (squared, targets in [-1, 1]), min(1/2, delta (1 - delta/2)) (Huber) -
        as every head's loss is >= 0.  The initial point's outputs are near 0
        (its first layer is small: ``init_scale``); reads nothing from the data."""
        if self.head == "logistic":
            return math.log(2.0)
        if self.head == "softmax":
            return math.log(self.n_classes or 2)
        if self.head == "huber" and self.delta < 1.0:
            return self.delta * (1.0 - 0.5 * self.delta)
        return 0.5

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
        widths = "-".join(str(h) for h in self.hidden)
        head = "" if self.head == "logistic" else (
            f", softmax head over {self.n_classes} classes" if self.head == "softmax" else f", {self.head} head")
        return f"mlp ({widths} {self.activation} units{head})"


def _dense(X) -> np.ndarray:
    """X as a C-contiguous float64 array; a scipy sparse matrix (svmlight files
    load sparse) is densified: the network's kernels read dense rows, and the
    data sets it is meant for (p up to a few thousand features) fit."""
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
    ``hessian`` are exact and for evaluation only.  Labels: +-1 for the
    logistic head, class indices 0..K-1 (floats) for softmax, real targets for
    the regression heads (checked for softmax and regression: a label the head
    cannot read is a DataError)."""

    loss: MLPLoss
    X: np.ndarray
    y: np.ndarray
    name: str = ""
    _rows: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        self.X = _dense(self.X)
        self.y = np.ascontiguousarray(self.y, dtype=np.float64).reshape(-1)
        self.n, self.p = self.X.shape
        if self.y.shape != (self.n,):
            raise DataError(f"mlp: {self.n} records but {self.y.shape[0]} labels")
        self.sizes = np.array(self.loss.sizes(self.p), dtype=np.int64)
        self.hidden = self.loss.hidden
        self.n_outputs = int(self.sizes[-1])
        self.d = int(sum(int(self.sizes[m + 1]) * (int(self.sizes[m]) + 1) for m in range(len(self.sizes) - 1)))
        self._act = self.loss.act_code
        self._head = self.loss.head_code
        self._hp = float(self.loss.delta)
        self._check_labels(self.y)

    def _check_labels(self, y):
        head = self.loss.head
        if head == "softmax":
            bad = ~((y >= 0) & (y < self.n_outputs) & (y == np.floor(y)))
            what = f"class indices 0..{self.n_outputs - 1}"
        elif head == "logistic":  # y as given: the host maps labels to +-1 (prediction passes zeros)
            return
        else:
            bad = ~np.isfinite(y)
            what = "finite targets"
        if np.any(bad):
            raise DataError(f"mlp ({head} head) needs {what}; got {y[np.argmax(bad)]!r}")

    @cached_property
    def _k(self):
        import dpreg_kernels.mlp as k  # lazy: compiles or loads cache

        return k

    def _fast(self, kernel, work: float):
        """The compiled entry point of ``kernel``'s serial or parallel variant
        for ``work`` elements (as :meth:`dpreg.problem.Problem._fast`)."""
        from dpreg.problem import _want_parallel

        return kernel.pick(_want_parallel(work))

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

    def unpack(self, w) -> list[tuple[np.ndarray, np.ndarray]]:
        """``[(W_0, b_0), ..., (W_L, b_L)]``: views of the flat parameter vector
        (``W_m`` is n_m x n_{m-1}; the last layer's rows are the outputs)."""
        out, o = [], 0
        for m in range(len(self.sizes) - 1):
            nin, nout = int(self.sizes[m]), int(self.sizes[m + 1])
            out.append((w[o:o + nout * nin].reshape(nout, nin), w[o + nout * nin:o + nout * (nin + 1)]))
            o += nout * (nin + 1)
        return out

    def initial_point(self, rng: np.random.Generator) -> np.ndarray:
        """Data-independent start: zeros for ``init=zero`` (the symmetric saddle),
        else ``W_0 ~ N(0, s^2)``, later hidden ``W_m ~ N(0, r^2/n_{m-1})``, the
        output layer ``N(0, t^2/n_{L-1})``, biases 0 (s = init_scale, r =
        init_mid, t = init_v; drawn layer by layer in that order; see the
        module docstring)."""
        w = np.zeros(self.d)
        if self.loss.init == "zero":
            return w
        layers = self.unpack(w)
        last = len(layers) - 1
        for m, (W, _) in enumerate(layers):
            if m == 0:
                sd = self.loss.init_scale
            elif m == last:
                sd = self.loss.init_v / math.sqrt(W.shape[1])
            else:
                sd = self.loss.init_mid / math.sqrt(W.shape[1])
            W[:] = rng.standard_normal(W.shape) * sd
        return w

    def reference_start(self) -> np.ndarray:
        """Start of the non-private reference solve of the diagnostics: the
        initial point drawn from a fixed public seed (0), so the solve leaves
        the symmetric saddle at w = 0 (``init=zero``: w = 0 itself)."""
        return self.initial_point(np.random.default_rng(0))

    def _batch(self, idx):
        if idx is None:
            return self.all_rows[:0], True, self.n
        ix = np.ascontiguousarray(idx, dtype=np.int64)
        return ix, False, ix.shape[0]

    # ------------------------------------------------------ clipped (private) sums
    def clipped_grad_sum(self, w, idx, clip):
        """(sum over idx of per-record gradients each clipped to norm ``clip``, n_clipped)."""
        from dpreg.problem import _inner

        ix, full, rows = self._batch(idx)
        return self._fast(self._k.grad_sum, rows * self.d)(self.X, self.y, ix, full, self._w(w), self.sizes,
                                                           self._act, self._head, self._hp, _inner(clip))

    def clipped_diff_sum(self, w, w_prev, idx, clip):
        """(sum over idx of per-record gradient differences grad f(w) - grad f(w_prev),
        each clipped to norm ``clip``, n_clipped)."""
        from dpreg.problem import _inner

        ix, full, rows = self._batch(idx)
        return self._fast(self._k.diff_sum, 2 * rows * self.d)(self.X, self.y, ix, full, self._w(w),
                                                               self._w(w_prev), self.sizes, self._act, self._head,
                                                               self._hp, _inner(clip))

    # ------------------------------------------ what networks do not provide
    def supports(self, capability: str) -> str | None:
        """None when ``capability`` (an optional method of the problem
        protocol) is available, else why not, in a few words (the pipeline
        refuses an algorithm that needs it before any release)."""
        if capability == "clipped_hessian_sum":
            return (f"a network's per-record Hessians are dense d x d matrices (d = {self.d}); its exact "
                    "Hessian-vector products serve lambda_min")
        if capability == "clipped_zo_sum":
            return "no zeroth-order kernel for networks (the zeroth-order sums read a linear model's margins)"
        return None if callable(getattr(self, capability, None)) else "not provided"

    def clipped_hessian_sum(self, w, idx, clip):
        """Not available (:meth:`supports`): ParameterError in one line."""
        raise ParameterError(f"loss 'mlp': {self.supports('clipped_hessian_sum')}")

    def clipped_zo_sum(self, *args, **kwargs):
        """Not available (:meth:`supports`): ParameterError in one line."""
        raise ParameterError(f"loss 'mlp': {self.supports('clipped_zo_sum')}")

    def sgd_steps_available(self, batch) -> bool:
        """False: dp-sgd steps one kernel call at a time (each a whole parallel batch)."""
        return False

    def spider_steps_available(self) -> bool:
        """False: SPIDER steps one kernel call at a time."""
        return False

    # ------------------------------------------------- exact (evaluation) quantities
    def outputs(self, w, X=None) -> np.ndarray:
        """Network outputs as an (n, n_outputs) array for the rows of X (default: this problem's)."""
        X = self.X if X is None else _dense(X)
        if X.ndim != 2 or X.shape[1] != self.p:
            raise ValueError(f"decision_function needs rows of {self.p} features, got shape {X.shape}")
        return self._fast(self._k.outputs, X.shape[0] * self.d)(X, self._w(w), self.sizes, self._act)

    def decision_function(self, w, X=None) -> np.ndarray:
        """Network outputs for the rows of X (default: this problem's): shape
        (n,) for one output (binary: positive means class +1; regression: the
        prediction), (n, K) for the softmax head (the class scores)."""
        o = self.outputs(w, X)
        return o if self.loss.head == "softmax" else o[:, 0]

    def value(self, w, idx=None) -> float:
        ix = self._idx(idx)
        return self._fast(self._k.loss_sum, len(ix) * self.d)(self.X, self.y, ix, self._w(w), self.sizes, self._act,
                                                              self._head, self._hp) / len(ix)

    def gradient(self, w, idx=None) -> np.ndarray:
        s, _ = self.clipped_grad_sum(w, idx, np.inf)
        return s / (self.n if idx is None else len(idx))

    def hvp(self, w, v, idx=None) -> np.ndarray:
        ix = self._idx(idx)
        return self._fast(self._k.hvp_sum, 2 * len(ix) * self.d)(self.X, self.y, ix, self._w(w), self._w(v),
                                                                 self.sizes, self._act, self._head,
                                                                 self._hp) / len(ix)

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
