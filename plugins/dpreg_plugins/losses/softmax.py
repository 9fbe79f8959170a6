"""Multi-class linear models as a loss: ``softmax`` (cross-entropy over K classes).

``f(W; x, y) = log sum_k exp(z_k) - z_y`` with logits ``z = W^T x``; ``W`` is
p x K over the problem's p features (the intercept column, when the pipeline
adds one, is the last feature: its row of ``W`` holds the K intercepts), held
flat and row-major: ``w[j K + k] = W[j, k]``, ``d = p K``.  Labels are the
class indices ``0..K-1`` in the order of the run's public label map
(``--labels a,b,c``; :mod:`dpreg.tasks`).  The loss is registered unbound
(``n_classes`` None); the pipeline calls :meth:`SoftmaxLoss.with_classes` with
the size of the label map.

Declared constants for records with ``|x| <= 1`` (whatever W and K):

* G = sqrt 2: the per-record gradient is ``x g^T`` with ``g = pr - e_y``, of norm
  ``|x| |g|``, and ``|g|^2 = (1 - pr_y)^2 + sum_{k != y} pr_k^2 <= 2 (1 - pr_y)^2
  <= 2``;
* M = 1/2: along a unit direction U (p x K) the second derivative is
  ``u^T A u`` with ``u = U^T x`` (``|u| <= |U|_F |x| <= 1``) and ``A =
  diag(pr) - pr pr^T``, whose largest eigenvalue is at most its largest
  absolute row sum ``max_k 2 pr_k (1 - pr_k) <= 1/2`` (Gershgorin);
* rho = sqrt(2)/2: the third derivative along U is the third central moment
  ``E[(V - E V)^3]`` of the variable V that takes the value ``u_k`` with
  probability ``pr_k``.  With ``m = max V - min V <= max_{k,l} |u_k - u_l| <=
  sqrt 2`` (as ``u_k^2 + u_l^2 <= 1``): ``|E (V - E V)^3| <= max |V - E V|
  Var V <= m (m^2 / 4) <= 2 sqrt 2 / 4`` (Popoviciu: ``Var V <= m^2 / 4``).

The clipping in the kernels (:mod:`dpreg_kernels.softmax`) enforces every
sensitivity whatever these constants are: they set clip, step and batch
defaults only.  Dense and CSR data share the kernels (a CSR row costs its
non-zeros times K).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from dpreg import hookimpl
from dpreg.errors import DataError, ParameterError

G_SOFTMAX = math.sqrt(2.0)
M_SOFTMAX = 0.5
RHO_SOFTMAX = math.sqrt(2.0) / 2.0

#: the dense Hessian (trust-region algorithms, ``--select above-threshold``,
#: lambda_min for d <= 300) is D x D: refused above this many bytes of it
HESSIAN_MAX_BYTES = 1 << 30


class SoftmaxLoss:
    """Softmax cross-entropy over K classes (multi-class linear model; a p x K weight matrix).

    f(W; x, y) = log sum_k exp(z_k) - z_y, z = W^T x (p x K parameters incl. the K intercepts).
    G = sqrt 2, M = 1/2, rho = sqrt(2)/2 for |x| <= 1 (derivation: dpreg_plugins.losses.softmax).
    Labels: class indices in the order of the public label map (--labels a,b,c).
    Every per-record gradient and difference is clipped in the kernel (factorised norm |x| |pr - e_y|).
    """

    name = "softmax"
    task = "multiclass"
    labels = "multiclass"
    classifier = True
    radius = None
    #: a linear model over the problem's features: the pipeline's intercept
    #: column (when on) gives its K intercepts
    intercept_column = True

    def __init__(self, n_classes=None):
        if n_classes is not None:
            try:
                n_classes = int(n_classes)
            except (TypeError, ValueError):
                raise ParameterError(f"softmax option n_classes must be an integer, got {n_classes!r}") from None
            if n_classes < 2:
                raise ParameterError(f"softmax needs at least 2 classes, got {n_classes}")
        self.n_classes = n_classes

    def __call__(self, **options) -> "SoftmaxLoss":
        """A new loss with these options (``n_classes``: normally set by the
        pipeline from the label map)."""
        unknown = set(options) - {"n_classes"}
        if unknown:
            raise ParameterError(f"softmax takes the option n_classes only, got {', '.join(sorted(unknown))}")
        return SoftmaxLoss(**options)

    def with_classes(self, K: int) -> "SoftmaxLoss":
        """This loss for K classes."""
        return SoftmaxLoss(n_classes=K)

    def options(self) -> dict:
        return {"n_classes": self.n_classes}

    def constants(self, d: int) -> tuple[float, float, float]:
        """(G, M, rho) for |x| <= 1 (module docstring)."""
        return G_SOFTMAX, M_SOFTMAX, RHO_SOFTMAX

    def origin_bound(self) -> float:
        """F(0) - inf F <= log K: at W = 0 every record's loss is log K, and
        cross-entropy is >= 0."""
        return math.log(self.n_classes or 2)

    # no data-independent term
    def psi(self, w) -> float:
        return 0.0

    def psi_grad(self, w):
        return np.zeros_like(w)

    def psi_hvp(self, w, v):
        return np.zeros_like(v)

    def scalar_kernels(self):
        raise ParameterError("loss 'softmax' has no scalar margin kernels (its logits are a K-vector): the "
                             "exponential selector and mechanism scores need a margin loss")

    def make_problem(self, X, y, name: str = "", row_bound: float = 1.0) -> "SoftmaxProblem":
        if self.n_classes is None:
            raise ParameterError("loss 'softmax' needs its number of classes: declare the labels "
                                 "(--labels a,b,c) or pass softmax:n_classes=K")
        return SoftmaxProblem(self, X, y, name=name, row_bound=row_bound)

    def describe(self) -> str:
        return f"softmax ({self.n_classes or 'K'} classes)"


def _rows(X):
    """(X held, data, ind, ptr, dense, p) for the kernels: a dense X as its
    C-contiguous float64 array (``data`` its flat view, ``ind = arange(p)``),
    a sparse one as canonical CSR (:func:`dpreg.problem._as_csr`)."""
    from dpreg.data import is_sparse
    from dpreg.problem import _as_csr

    if is_sparse(X):
        C = _as_csr(X)
        return C, C.data, C.indices, C.indptr, False, C.shape[1]
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise DataError(f"features must be a 2-D array, got shape {X.shape}")
    return X, X.reshape(-1), np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), True, X.shape[1]


@dataclass
class SoftmaxProblem:
    """The ``softmax`` loss on records ``(X[i], y[i])`` (rows of norm <=
    ``row_bound``; ``y[i]`` a class index): the problem protocol of
    :class:`dpreg.problem.Problem` with ``d = p K`` parameters.  Clipped sums
    are the only way algorithms touch the data; ``value``, ``gradient``,
    ``hvp`` and ``hessian`` are exact and for evaluation only."""

    loss: SoftmaxLoss
    X: np.ndarray
    y: np.ndarray
    name: str = ""
    row_bound: float = 1.0
    _rows: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        self.K = int(self.loss.n_classes)
        self.X, self._data, self._ind, self._ptr, self._dense, self.p = _rows(self.X)
        self.n = self.X.shape[0]
        self.d = self.p * self.K
        y = np.ascontiguousarray(self.y, dtype=np.float64)
        if y.shape != (self.n,):
            raise DataError(f"{self.name or 'data'}: {self.n} feature rows but labels of shape {y.shape}")
        bad = ~((y >= 0) & (y < self.K) & (y == np.floor(y)))
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise DataError(f"{self.name or 'data'}: label {y[r]:g} at record {r + 1} is not a class index "
                            f"0..{self.K - 1}")
        self.y = y
        self._q = max(1.0, (self._ptr[-1] / max(1, self.n)) if not self._dense else float(self.p))

    @property
    def sparse(self) -> bool:
        return not self._dense

    @cached_property
    def _k(self):
        import dpreg_kernels.softmax as k  # lazy: compiles or loads cache

        return k

    @property
    def all_rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = np.arange(self.n, dtype=np.int64)
        return self._rows

    def constants(self) -> tuple[float, float, float]:
        """(G R, M R^2, rho R^3) for rows of norm <= R = ``row_bound``."""
        G, M, rho = self.loss.constants(self.d)
        R = float(self.row_bound)
        return G * R, M * R * R, rho * R ** 3

    def _idx(self, idx):
        return self.all_rows if idx is None else np.ascontiguousarray(idx, dtype=np.int64)

    def _w(self, w):
        w = np.ascontiguousarray(w, dtype=np.float64)
        if w.shape != (self.d,):
            raise ValueError(f"softmax parameter vector must have length {self.d} (p x K = {self.p} x {self.K}), "
                             f"got shape {w.shape}")
        return w

    def unpack(self, w) -> np.ndarray:
        """W (p x K) as a view of the flat parameter vector."""
        return np.asarray(w).reshape(self.p, self.K)

    def _args(self):
        return self._data, self._ind, self._ptr, self._dense, self.p, self.y

    def _fast(self, kernel, rows):
        from dpreg.problem import _want_parallel

        return kernel.pick(_want_parallel(rows * self._q * self.K))

    def initial_point(self, rng: np.random.Generator) -> np.ndarray:
        """The origin (``rng`` is not drawn from): every class equally likely."""
        return np.zeros(self.d)

    # ------------------------------------------------------ clipped (private) sums
    def clipped_grad_sum(self, w, idx, clip):
        """(sum over idx of per-record gradients each clipped to norm ``clip``, n_clipped)."""
        from dpreg.problem import _inner

        w = self._w(w)
        full = idx is None
        ix = self.all_rows[:0] if full else np.ascontiguousarray(idx, dtype=np.int64)
        return self._fast(self._k.clipped_sum, self.n if full else len(ix))(
            *self._args(), ix, full, w, w, False, self.K, _inner(clip))

    def clipped_diff_sum(self, w, w_prev, idx, clip):
        """(sum over idx of per-record gradient differences grad f(w) - grad f(w_prev),
        each clipped to norm ``clip``, n_clipped)."""
        from dpreg.problem import _inner

        full = idx is None
        ix = self.all_rows[:0] if full else np.ascontiguousarray(idx, dtype=np.int64)
        return self._fast(self._k.clipped_sum, self.n if full else len(ix))(
            *self._args(), ix, full, self._w(w), self._w(w_prev), True, self.K, _inner(clip))

    def _hessian_bytes_ok(self, what: str) -> None:
        need = 8 * self.d * self.d * (1 + min(self._k.HESSIAN_CHUNKS, 1 + self.n // self._k.MIN_CHUNK_ROWS))
        if need > HESSIAN_MAX_BYTES:
            raise ParameterError(f"{what} needs the dense {self.d} x {self.d} Hessian of softmax "
                                 f"({self.p} features x {self.K} classes): {need / 2 ** 30:.1f} GiB, over the "
                                 f"{HESSIAN_MAX_BYTES / 2 ** 30:g} GiB bound; use fewer features")

    def clipped_hessian_sum(self, w, idx, clip):
        """(sum over idx of per-record Hessians ``A kron x x^T``, each scaled to
        operator norm <= ``clip``, dense symmetric d x d, n_clipped)."""
        from dpreg.problem import _inner

        self._hessian_bytes_ok("a per-record clipped Hessian (trust region, --select above-threshold)")
        ix = self._idx(idx)
        return self._fast(self._k.clipped_hessian_sum, len(ix) * self._q * self.K)(
            *self._args(), ix, self._w(w), self.K, _inner(clip))

    def sgd_steps_available(self, batch: float) -> bool:
        """No compiled many-step form: dp-sgd runs step by step (each step one
        fused clipped-sum call)."""
        return False

    def spider_steps_available(self) -> bool:
        """No compiled many-step form: dp-spider runs step by step."""
        return False

    def supports(self, capability: str) -> str | None:
        """None when ``capability`` is available, else why not (one line)."""
        if capability == "clipped_zo_sum":
            return ("zeroth-order estimates need a margin loss (one scalar per record); softmax has K logits "
                    "per record")
        if capability == "clipped_hessian_sum":
            try:
                self._hessian_bytes_ok("the trust-region step")
            except ParameterError as exc:
                return str(exc)
        return None

    def clipped_zo_sum(self, *args, **kwargs):
        raise ParameterError(f"loss 'softmax': {self.supports('clipped_zo_sum')}")

    # ------------------------------------------------- exact (evaluation) quantities
    def decision_function(self, w, X=None) -> np.ndarray:
        """Logits ``X W`` (n x K) for the rows of X (default: this problem's)."""
        W = self.unpack(self._w(w))
        X = self.X if X is None else X
        if X.ndim != 2 or X.shape[1] != self.p:
            raise ValueError(f"decision_function needs rows of {self.p} features, got shape {X.shape}")
        return np.asarray(X @ W)

    def value(self, w, idx=None) -> float:
        ix = self._idx(idx)
        return self._fast(self._k.loss_sum, len(ix))(*self._args(), ix, self._w(w), self.K) / len(ix)

    def gradient(self, w, idx=None) -> np.ndarray:
        s, _ = self.clipped_grad_sum(w, idx, np.inf)
        return s / (self.n if idx is None else len(idx))

    def hvp(self, w, v, idx=None) -> np.ndarray:
        ix = self._idx(idx)
        return self._fast(self._k.hvp_sum, len(ix))(*self._args(), ix, self._w(w), self._w(v), self.K) / len(ix)

    def lambda_min(self, w, idx=None) -> float:
        """The smallest eigenvalue of the empirical Hessian: exactly 0.  Each
        record's Hessian ``A kron x x^T`` is positive semi-definite (``A =
        diag(pr) - pr pr^T`` is, as a covariance matrix), and ``W -> W + v 1^T``
        shifts every logit of a record by the same ``<x, v>``, which leaves the
        loss unchanged: every ``vec(v 1^T)`` is in the null space.  (Lanczos
        cannot resolve this p-fold zero eigenvalue within its matvec cap.)"""
        return 0.0

    def hessian(self, w, idx=None, clip: float = np.inf) -> np.ndarray:
        """Dense Hessian (small d only): exact by default; a finite ``clip``
        scales each record's term to operator norm <= clip (the
        above-threshold selector's sensitivity-bounded Hessian)."""
        ix = self._idx(idx)
        H, _ = self.clipped_hessian_sum(w, ix, clip)
        return H / len(ix)


@hookimpl
def dpreg_register_losses(register):
    register("softmax", SoftmaxLoss(), summary=SoftmaxLoss.__doc__.strip().splitlines()[0])
