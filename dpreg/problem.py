"""A problem: a loss on a data set, with the compiled kernels bound to it.

:class:`Problem` is what oracles and algorithms receive.  Its clipped sums are
the only way algorithms touch the data; its exact quantities (``value``,
``gradient``, ``hvp``, ``hessian``) are for evaluation after a run and for
tests - non-private, never fed back into a private run.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .interfaces import LinearModelLoss

_NO_ROWS = np.zeros(0, dtype=np.int64)


#: the kernels clip to clip * (1 - CLIP_MARGIN): their squared norms come from
#: |a x + r|^2 = a^2 |x|^2 + 2a<x,r> + |r|^2 with rounded dot products (relative
#: error ~ d * 2^-53), and the margin keeps every clipped term's true norm at or
#: below the clip that the accounting uses
CLIP_MARGIN = 1e-12


def vector_norm(v: np.ndarray) -> float:
    """The Euclidean norm of a float vector without BLAS: a step loop calls
    it between compiled kernels, and ``np.linalg.norm`` (BLAS ``dot``) wakes
    the BLAS threads for a long vector each time - 26 ms a call on the busy
    2-core machine of docs/benchmarks.md after a 2 ms kernel, against 0.08
    ms here (a 50,890-vector)."""
    v = np.asarray(v)
    return math.sqrt(float(np.einsum("i,i->", v, v)))


def project(w: np.ndarray, radius: float | None, norm=vector_norm) -> np.ndarray:
    """Euclidean projection onto the ball of ``radius`` (identity for None);
    ``norm``: the norm function (a caller that must reproduce a compiled
    loop's arithmetic passes that loop's norm)."""
    if radius is None:
        return w
    nrm = float(norm(w))
    return w if nrm <= radius else w * (radius / nrm)


_WANT_PARALLEL: list = []


def _want_parallel(work: float) -> bool:
    """Whether a kernel call of ``work`` elements wants the parallel variant: the
    work threshold and the thread count of :func:`dpreg_kernels.config.want_parallel`
    (imported on first use: dpreg imports the kernels lazily)."""
    if not _WANT_PARALLEL:
        from dpreg_kernels.config import want_parallel

        _WANT_PARALLEL.append(want_parallel)
    return _WANT_PARALLEL[0](work)


from .data import is_sparse as _is_sparse  # noqa: E402


def _as_csr(X):
    """``X`` as the CSR the sparse kernels take: float64 data, int64 indices
    and indptr, duplicates summed, indices sorted (a copy only when needed)."""
    import scipy.sparse as sp

    C = sp.csr_matrix(X, dtype=np.float64)
    if not C.has_canonical_format:
        C = C.copy()
        C.sum_duplicates()
    data = np.ascontiguousarray(C.data, dtype=np.float64)
    indices = np.ascontiguousarray(C.indices, dtype=np.int64)
    indptr = np.ascontiguousarray(C.indptr, dtype=np.int64)
    out = sp.csr_matrix((data, indices, indptr), shape=C.shape)
    out.data, out.indices, out.indptr = data, indices, indptr  # scipy may downcast the index arrays
    out.has_sorted_indices = True
    out.has_canonical_format = True
    return out


def _inner(clip: float) -> float:
    clip = float(clip)
    return clip * (1.0 - CLIP_MARGIN) if np.isfinite(clip) else clip


@dataclass
class Problem:
    """``loss`` on records ``(X[i], y[i])``; rows of X have norm <= ``row_bound``
    (1, or sqrt(1 + s^2) with an intercept column of value s: see
    :mod:`dpreg.preprocess`).

    ``X`` is a dense array (held as C-contiguous float64) or a scipy sparse
    matrix (held as CSR, float64, int64 sorted indices, duplicates summed):
    sparse data run the CSR kernels of :mod:`dpreg_kernels.sparse`, whose cost
    and memory follow the non-zeros."""

    loss: LinearModelLoss
    X: Any  # a C-contiguous float64 array or a CSR matrix
    y: np.ndarray
    name: str = ""
    row_bound: float = 1.0
    _rows: np.ndarray | None = field(default=None, repr=False)
    if TYPE_CHECKING:  # set with X (__setattr__); not fields at run time
        _csr: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(init=False, repr=False)
        _row_nnz: float = field(init=False, repr=False)

    def __post_init__(self):
        self.n, self.d = self.X.shape

    def __setattr__(self, name, value):
        # the kernels' entry points are called without numba's type checks
        # (Kernel.fast): X and y are held as exactly the kernels' types, always
        if name == "X":
            if _is_sparse(value):
                value = _as_csr(value)
                super().__setattr__("_csr", (value.data, value.indices, value.indptr))
                super().__setattr__("_row_nnz", max(1.0, value.nnz / max(1, value.shape[0])))
            else:
                value = np.ascontiguousarray(value, dtype=np.float64)
                super().__setattr__("_csr", None)
        elif name == "y":
            value = np.ascontiguousarray(value, dtype=np.float64)
        super().__setattr__(name, value)

    @property
    def sparse(self) -> bool:
        """Whether X is held as CSR (and the sparse kernels serve it)."""
        return self._csr is not None

    def _vec(self, v) -> np.ndarray:
        """``v`` as a C-contiguous float64 d-vector (ValueError otherwise)."""
        v = np.ascontiguousarray(v, dtype=np.float64)
        if v.shape != (self.d,):
            raise ValueError(f"expected a vector of shape ({self.d},), got {v.shape}")
        return v

    # --------------------------------------------------------------- compiled bits
    @cached_property
    def _k(self):
        import dpreg_kernels.linear_model as k  # lazy: compiles or loads cache

        return k

    @cached_property
    def _ks(self):
        import dpreg_kernels.sparse as ks  # lazy: compiles or loads cache

        return ks

    @cached_property
    def _scalars(self):
        return self.loss.scalar_kernels()

    @cached_property
    def _refs(self):
        """The loss's scalar functions as references the kernels take
        (:class:`dpreg_kernels.function_ref.FunctionRef`: unboxed in one pointer read)."""
        return tuple(self._k.scalar_ref(f) for f in self._scalars)

    @cached_property
    def _dphi_block(self):
        """The loss's block function of dphi (its own or the row-by-row
        default) as a reference the kernels take."""
        return self._k.block_ref(self.loss.block_kernels()[0])

    def _fast(self, kernel, work: float):
        """The compiled entry point of ``kernel``'s serial or parallel variant
        for ``work`` elements (:func:`dpreg_kernels.config.want_parallel`;
        :meth:`dpreg_kernels.linear_model.Kernel.pick`: compiled only once it pays)."""
        return kernel.pick(_want_parallel(work))

    @property
    def all_rows(self) -> np.ndarray:
        """``arange(n)`` as int64 (the full batch)."""
        if self._rows is None:
            self._rows = np.arange(self.n, dtype=np.int64)
        return self._rows

    def constants(self) -> tuple[float, float, float]:
        """The loss's declared (G, M, rho) for this dimension, for records of
        norm <= ``row_bound`` R: (G R, M R^2, rho R^3) (the data part of a
        linear-model loss scales so in |x|, psi's part is bounded by the same)."""
        G, M, rho = self.loss.constants(self.d)
        R = float(self.row_bound)
        return G * R, M * R * R, rho * R ** 3

    def _idx(self, idx):
        if idx is None:
            return self.all_rows
        return np.ascontiguousarray(idx, dtype=np.int64)

    # ------------------------------------------------------ clipped (private) sums
    @property
    def _nx(self) -> np.ndarray:
        """Squared row norms |x_i|^2 (n floats, computed once per X object; the
        hot kernels read them instead of a third dot product per row).  X must
        not be modified in place after the first clipped sum."""
        cache = self.__dict__.get("_nx_cache")
        if cache is None or cache[0] is not self.X:
            if self._csr is not None:
                nx = self._fast(self._ks.row_sqnorms, self.n)(self._csr[0], self._csr[2])
            else:
                nx = self._fast(self._k.row_sqnorms, self.n * self.d)(self.X)
            cache = (self.X, nx)
            self.__dict__["_nx_cache"] = cache
        return cache[1]

    def _batch(self, idx):
        """(idx array, full flag, rows) for the kernels: ``None`` is the full batch."""
        if idx is None:
            return _NO_ROWS, True, self.n
        ix = np.ascontiguousarray(idx, dtype=np.int64)
        return ix, False, ix.shape[0]

    def _psi_grad(self, w):
        if self._no_psi:
            return self._zeros_d
        return self._vec(self.loss.psi_grad(w))

    @cached_property
    def _no_psi(self) -> bool:
        """Whether the loss has no data-independent term (psi_grad not overridden)."""
        return not self.loss.has_psi

    @cached_property
    def _zeros_d(self) -> np.ndarray:
        z = np.zeros(self.d)
        z.flags.writeable = False
        return z

    def clipped_grad_sum(self, w: np.ndarray, idx: np.ndarray | None, clip: float):
        """(sum over idx of per-record gradients each clipped to norm ``clip``, n_clipped)."""
        w = self._vec(w)
        r = self._psi_grad(w)
        ix, full, rows = self._batch(idx)
        if self._csr is not None:
            return self._fast(self._ks.clipped_sum, rows * self._row_nnz)(*self._csr, self.y, self._nx, ix, full, w,
                                                                          w, False, r, r, self._refs[1],
                                                                          self._dphi_block, _inner(clip))
        return self._fast(self._k.clipped_sum, rows * self.d)(self.X, self.y, self._nx, ix, full, w, w, False, r, r,
                                                              self._refs[1], self._dphi_block, _inner(clip))

    def clipped_diff_sum(self, w: np.ndarray, w_prev: np.ndarray, idx: np.ndarray | None, clip: float):
        """(sum over idx of per-record gradient differences grad f(w) - grad f(w_prev),
        each clipped to norm ``clip``, n_clipped)."""
        w = self._vec(w)
        wp = self._vec(w_prev)
        r = self._psi_grad(w)
        rp = self._psi_grad(wp)
        ix, full, rows = self._batch(idx)
        if self._csr is not None:
            return self._fast(self._ks.clipped_sum, rows * self._row_nnz)(*self._csr, self.y, self._nx, ix, full, w,
                                                                          wp, True, r, rp, self._refs[1],
                                                                          self._dphi_block, _inner(clip))
        return self._fast(self._k.clipped_sum, rows * self.d)(self.X, self.y, self._nx, ix, full, w, wp, True, r, rp,
                                                              self._refs[1], self._dphi_block, _inner(clip))

    # ------------------------------------------------------------ many SGD steps
    def sgd_steps_available(self, batch: float) -> bool:
        """Whether :meth:`sgd_steps` serves this loss for batches of expected
        size ``batch``: the loss's psi gradient is compiled (or it has none),
        a batch's work is below the parallel threshold (larger batches are
        better served one parallel kernel call per step), and
        :meth:`clipped_grad_sum` is this class's own (a subclass that changes
        it - the audit's faults, a user's instrumentation - runs step by step
        through it: the compiled steps would bypass it)."""
        from dpreg_kernels.config import PARALLEL_WORK

        if type(self).clipped_grad_sum is not Problem.clipped_grad_sum:
            return False
        work = batch * (self._row_nnz if self._csr is not None else self.d)
        return work < PARALLEL_WORK and self.loss.psi_kernel() is not None

    @cached_property
    def _psi_ref(self):
        from dpreg_kernels.sgd import PSI_SIG

        return self._k.as_ref(self.loss.psi_kernel(), PSI_SIG)

    @cached_property
    def _psi_params(self) -> np.ndarray:
        return np.ascontiguousarray(self.loss.psi_params(), dtype=np.float64)

    def sgd_steps(self, w0: np.ndarray, rows: np.ndarray, offsets: np.ndarray, noise: np.ndarray, *,
                  noise_std: float, step: float, denom: float, radius: float | None, clip: float):
        """``K = len(offsets) - 1`` noisy SGD steps in one compiled call
        (:mod:`dpreg_kernels.sgd`): step k sums the per-record gradients of
        ``rows[offsets[k]:offsets[k+1]]`` at the current point, each clipped to
        ``clip`` (as :meth:`clipped_grad_sum`), adds ``noise[k] * noise_std``,
        divides by ``denom``, steps by ``step`` and projects onto the ball of
        ``radius`` (None: none).  The batches and the (K, d) standard normal
        noise come from the caller's secret generators.  Returns ``(w_K,
        iterates (K, d), noisy gradient norms (K,))``.  Requires
        :meth:`sgd_steps_available`."""
        from dpreg_kernels import sgd

        K = len(offsets) - 1
        W = np.empty((K, self.d))
        gn = np.empty(K)
        w0 = self._vec(w0)
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        noise = np.ascontiguousarray(noise, dtype=np.float64)
        if noise.shape != (K, self.d):
            raise ValueError(f"noise must have shape {(K, self.d)}, got {noise.shape}")
        tail = (w0, noise, float(noise_std), float(step), float(denom), float(radius) if radius is not None else 0.0,
                self._psi_ref, self._psi_params, self._refs[1], self._dphi_block, _inner(clip), W, gn)
        if self._csr is not None:
            w = sgd.csr_sgd_steps.fast(False)(*self._csr, self.y, self._nx, rows, offsets, *tail)
        else:
            w = sgd.sgd_steps.fast(False)(self.X, self.y, self._nx, rows, offsets, *tail)
        return w, W, gn

    # ------------------------------------------------------- many dp-spider steps
    def spider_steps_available(self) -> bool:
        """Whether :meth:`spider_steps` serves this problem (dense or CSR rows):
        the loss's psi gradient compiled (or none), and :meth:`clipped_grad_sum`
        and :meth:`clipped_diff_sum` this class's own (a subclass that
        changes either - the audit's faults, a user's instrumentation - runs
        step by step through them)."""
        return (type(self).clipped_grad_sum is Problem.clipped_grad_sum
                and type(self).clipped_diff_sum is Problem.clipped_diff_sum and self.loss.psi_kernel() is not None)

    def spider_steps(self, w0: np.ndarray, w_prev: np.ndarray, rows: np.ndarray, offsets: np.ndarray, full1: bool,
                     noise1: np.ndarray, noise2: np.ndarray, *, phase: int, sens1: float, scale1: float, z2: float,
                     factor: float, separate: bool, clip: float, smoothness: float, diff_cap: float | None, denom1: float,
                     denom2: float, step: float, radius: float | None):
        """``K = len(offsets) - 1`` dp-spider steps - whole phases of ``phase``
        steps, from a phase start - in one compiled call
        (:mod:`dpreg_kernels.spider`, whose docstring gives a step's
        arithmetic: ``SpiderEstimator.refresh``/``update`` with the gaussian
        mechanism, then the update).  Step t's batch is
        ``rows[offsets[t]:offsets[t+1]]`` (an O1 step's is every row when
        ``full1``); ``noise1`` (phases, d) and ``noise2`` (O2 steps, d) are the
        adds' standard normals from the caller's secret generators.  Per-record
        terms are clipped in the kernels as :meth:`clipped_grad_sum` and
        :meth:`clipped_diff_sum` clip them.  Returns ``(w, w_prev, iterates (K,
        d), noisy estimate norms (K,), sensitivities (K,), clipped terms
        (K,))``.  Requires :meth:`spider_steps_available`.

        The parallel form runs where a batch's work makes the parallel clipped
        sum worth running (:func:`dpreg_kernels.config.want_parallel`) and that
        variant is cheap to have (``Kernel.pick``: compiled, cached, or
        amortised); where it is wanted but not yet had, the serial form runs and
        its CPU time counts towards compiling it, as the serial calls of the
        step-at-a-time loop do."""
        from dpreg_kernels.config import PARALLEL_WORK
        from dpreg_kernels.spider import spider_steps

        K = len(offsets) - 1
        d = self.d
        W = np.empty((K, d))
        gn = np.empty(K)
        sens = np.empty(K)
        ncl = np.empty(K, dtype=np.int64)
        wp = np.array(self._vec(w_prev), dtype=np.float64)  # written: the last step's previous iterate
        noise1 = np.ascontiguousarray(noise1, dtype=np.float64)
        noise2 = np.ascontiguousarray(noise2, dtype=np.float64)
        n1 = -(-K // int(phase))
        if noise1.shape != (n1, d) or noise2.shape != (K - n1, d):
            raise ValueError(f"noise shapes {noise1.shape}, {noise2.shape}: expected {(n1, d)}, {(K - n1, d)}")
        # the parallel form where a batch's work may want it and the parallel clipped sum is cheap
        # to have (Kernel.parallel_ready), the threshold looked up once
        sparse = self._csr is not None
        row_work = float(self._row_nnz) if sparse else float(d)
        big = max(self.n if full1 else 0, int(np.max(np.diff(offsets))) if K else 0) * row_work
        ck = spider_steps.kernel(sparse)
        wanted = _want_parallel(big)
        parallel = wanted and ck.parallel_ready()
        par_work = PARALLEL_WORK if parallel else np.iinfo(np.int64).max
        t0 = time.thread_time()
        w = spider_steps.form(parallel, sparse)(
            tuple(self._csr) if self._csr is not None else (self.X,), self.y, self._nx, np.ascontiguousarray(rows, dtype=np.int64),
            np.ascontiguousarray(offsets, dtype=np.int64), bool(full1), row_work, float(par_work), self._vec(w0), wp,
            noise1, noise2, float(sens1), float(scale1), float(z2), float(factor), bool(separate), _inner(clip),
            1.0 - CLIP_MARGIN, float(smoothness), float(diff_cap) if diff_cap is not None else np.inf, float(denom1),
            float(denom2), float(step), float(radius) if radius is not None else 0.0, int(phase), self._psi_ref,
            self._psi_params, self._refs[1], self._dphi_block, W, gn, sens, ncl)
        if wanted and not parallel:  # serial where parallel was wanted: counts towards compiling it (Kernel.pick)
            ck.serial_large_s += time.thread_time() - t0
        return w, wp, W, gn, sens, ncl

    def initial_point(self, rng: np.random.Generator) -> np.ndarray:
        """The data-independent default start of an algorithm: the origin
        (``rng`` is not drawn from)."""
        return np.zeros(self.d)

    def clipped_zo_sum(self, wa: np.ndarray, wb: np.ndarray, directions: np.ndarray, idx: np.ndarray, *,
                       h: float, sgn: float, scale: float, clip: float, rec_clip: float = np.inf,
                       sym: bool = False):
        """(sum over records ``idx[t]`` of ``Clip_rec_clip(sum_j c_tj u_tj)``
        over their unit directions ``directions[t, j]``, n_clipped) with
        ``c_tj`` the finite difference ``scale (phi(<x,wa> + h<x,u>) -
        phi(<x,wb> + sgn h<x,u>))`` of the data part (``sym``: minus the same
        at ``-u``) clipped to ``[-clip, clip]`` and each record's vector
        clipped to norm ``rec_clip`` (the zeroth-order estimators;
        :mod:`dpreg_kernels.zeroth_order`).  psi's part is the caller's."""
        from dpreg_kernels.zeroth_order import zo_sum  # lazy: compiles or loads cache

        U = np.ascontiguousarray(directions, dtype=np.float64)
        return zo_sum(self.dense_X, self.y, np.ascontiguousarray(idx, dtype=np.int64),
                      np.ascontiguousarray(wa, dtype=np.float64), np.ascontiguousarray(wb, dtype=np.float64),
                      U, float(h), float(sgn), float(scale), _inner(clip), _inner(rec_clip), bool(sym),
                      self._scalars[0])

    @property
    def dense_X(self) -> np.ndarray:
        """X as a dense array (itself when dense; a CSR X densified once, for
        the kernels that have no sparse variant yet: zeroth-order)."""
        if self._csr is None:
            return self.X
        cache = self.__dict__.get("_dense_cache")
        if cache is None or cache[0] is not self.X:
            cache = (self.X, np.ascontiguousarray(self.X.toarray(), dtype=np.float64))
            self.__dict__["_dense_cache"] = cache
        return cache[1]

    def clipped_hessian_sum(self, w: np.ndarray, idx: np.ndarray | None, clip: float):
        """(sum over idx of per-record *data* Hessians ``d2phi x x^T``, each scaled
        to operator norm <= ``clip``, as a dense symmetric d x d array, n_clipped).
        Each term is rank one, so its Frobenius norm is bounded by ``clip`` too;
        psi's (data-independent) Hessian is not included."""
        w = self._vec(w)
        ix = self._idx(idx)
        if self._csr is not None:
            return self._fast(self._ks.clipped_hessian_sum, len(ix) * self._row_nnz ** 2)(
                *self._csr, self.y, ix, w, self._refs[2], _inner(clip))
        return self._fast(self._k.clipped_hessian_sum, len(ix) * self.d * self.d)(
            self.X, self.y, ix, w, self._refs[2], _inner(clip))

    def clipped_hessian_operator(self, w: np.ndarray, idx: np.ndarray | None, clip: float):
        """``(matmat, n_clipped)``: :meth:`clipped_hessian_sum` in factored form,
        ``matmat(V) = sum_i s_i h_i x_i (x_i^T V)`` for a (d, k) block ``V``
        (two products with the rows, no d x d matrix: the matrix-free
        trust-region step), with the same per-record rule - ``h_i =
        d2phi(<x_i, w>, y_i)`` scaled by ``s_i`` to operator (and Frobenius)
        norm ``|s_i h_i| |x_i|^2 <= clip`` - so it is the same sum applied to V.
        numpy; the loss's plain ``d2phi`` runs per record from Python (as
        :meth:`_exact_hessian_sum`)."""
        w = self._vec(w)
        ix = self._idx(idx)
        Xb = self.X if ix is self.all_rows else self.X[ix]
        m = np.asarray(Xb @ w, dtype=np.float64).ravel()
        xx = self._nx[ix]
        h = np.frompyfunc(type(self.loss).d2phi, 2, 1)(m, self.y[ix]).astype(np.float64)
        # the kernel's rule: |h| |x|^2 (with its rounding margin) above the clip scales the term to the clip
        op = np.abs(h) * xx * (1.0 + (self.d + 4) * 2.0 ** -51)
        c = _inner(clip)
        over = ~(op <= c)
        with np.errstate(divide="ignore", invalid="ignore"):
            h = np.where(over, np.where(op < np.inf, h * (c / op), 0.0), h)

        def matmat(V):
            V = np.asarray(V, dtype=np.float64)
            return np.asarray(Xb.T @ (h[:, None] * np.asarray(Xb @ V, dtype=np.float64)), dtype=np.float64)

        return matmat, int(np.count_nonzero(over))

    # ------------------------------------------------- exact (evaluation) quantities
    def decision_function(self, w: np.ndarray, X: np.ndarray | None = None) -> np.ndarray:
        """Margins <x, w> for the rows of X (default: this problem's)."""
        return (self.X if X is None else X) @ np.asarray(w, dtype=np.float64)

    def value(self, w: np.ndarray, idx: np.ndarray | None = None) -> float:
        """Empirical loss: mean over rows of f(w; z_i)."""
        w = self._vec(w)
        ix = self._idx(idx)
        if self._csr is not None:
            tot = self._fast(self._ks.phi_sum, len(ix) * self._row_nnz)(*self._csr, self.y, ix, w, self._refs[0])
        else:
            tot = self._fast(self._k.phi_sum, len(ix) * self.d)(self.X, self.y, ix, w, self._refs[0])
        return tot / len(ix) + self.loss.psi(w)

    def gradient(self, w: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Exact empirical gradient (mean over rows), unclipped."""
        s, _ = self.clipped_grad_sum(w, idx, np.inf)
        return s / len(self._idx(idx))

    def hvp(self, w: np.ndarray, v: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Exact empirical Hessian-vector product."""
        w = self._vec(w)
        v = self._vec(v)
        ix = self._idx(idx)
        if self._csr is not None:
            tot = self._fast(self._ks.hvp_sum, len(ix) * self._row_nnz)(*self._csr, self.y, ix, w, v, self._refs[2])
        else:
            tot = self._fast(self._k.hvp_sum, len(ix) * self.d)(self.X, self.y, ix, w, v, self._refs[2])
        return tot / len(ix) + self.loss.psi_hvp(w, v)

    #: rows per block of :meth:`_exact_hessian_sum` (its temporaries are a block's size)
    _HESSIAN_ROWS = 8192

    def _exact_hessian_sum(self, w: np.ndarray, ix: np.ndarray) -> np.ndarray:
        """``sum_{i in ix} d2phi(<x_i,w>, y_i) x_i x_i^T`` with numpy, in blocks of
        rows: the exact (evaluation-only) data Hessian.  The loss's plain
        ``d2phi`` runs per record from Python (about 5 ms for adult's 32,561 records;
the whole Hessian about 20 ms), so a
        run that only evaluates compiles no Hessian kernel (the kernel serves
        the clipped, private Hessians)."""
        d2 = np.frompyfunc(type(self.loss).d2phi, 2, 1)
        H = np.zeros((self.d, self.d))
        full = ix is self.all_rows
        for lo in range(0, len(ix), self._HESSIAN_ROWS):
            rows = ix[lo:lo + self._HESSIAN_ROWS]
            Xb = self.X[lo:lo + len(rows)] if full else self.X[rows]
            h = d2(np.asarray(Xb @ w).ravel(), self.y[rows]).astype(np.float64)
            if self._csr is not None:
                H += np.asarray((Xb.T @ Xb.multiply(h[:, None])).todense())
            else:
                H += (Xb.T * h) @ Xb
        return H

    def hessian(self, w: np.ndarray, idx: np.ndarray | None = None, clip: float = np.inf) -> np.ndarray:
        """Dense empirical Hessian (use for small d only).  Exact by default;
        with a finite ``clip`` each record's data part ``d2phi x x^T`` is scaled
        to operator norm <= clip (the sensitivity-bounded Hessian of the
        above-threshold selector)."""
        w = self._vec(w)
        ix = self._idx(idx)
        if np.isfinite(clip):
            H, _ = self.clipped_hessian_sum(w, ix, clip)
        else:
            H = self._exact_hessian_sum(w, ix)
        H = H / len(ix)
        eye = np.eye(self.d)
        H += np.stack([self.loss.psi_hvp(w, eye[j]) for j in range(self.d)], axis=1)
        return 0.5 * (H + H.T)



def make_problem(loss, X, y, name: str = "", row_bound: float = 1.0):
    """The problem of ``loss`` on ``(X, y)``: ``loss.make_problem(X, y, name)``
    when the loss builds its own (models beyond the linear one: ``mlp``,
    whose rows must have norm <= 1 - it carries its own biases and gets no
    intercept column; ``softmax``, a linear model over the features that takes
    the pipeline's intercept column and so its ``row_bound``:
    ``intercept_column`` True), else a linear-model :class:`Problem`."""
    make = getattr(loss, "make_problem", None)
    if make is not None:
        if getattr(loss, "intercept_column", False):
            return make(X, y, name, row_bound=row_bound)
        if row_bound != 1.0:
            raise ValueError(f"loss {loss.name!r} builds its own model: rows must have norm <= 1")
        return make(X, y, name)
    return Problem(loss, X, y, name=name, row_bound=row_bound)
