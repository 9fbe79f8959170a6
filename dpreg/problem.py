"""A problem: a loss on a data set, with the compiled kernels bound to it.

:class:`Problem` is what oracles and algorithms receive.  Its clipped sums are
the only way algorithms touch the data; its exact quantities (``value``,
``gradient``, ``hvp``, ``hessian``) are for evaluation after a run and for
tests - non-private, never fed back into a private run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .interfaces import LinearModelLoss

_NO_ROWS = np.zeros(0, dtype=np.int64)


#: the kernels clip to clip * (1 - CLIP_MARGIN): their squared norms come from
#: |a x + r|^2 = a^2 |x|^2 + 2a<x,r> + |r|^2 with rounded dot products (relative
#: error ~ d * 2^-53), and the margin keeps every clipped term's true norm at or
#: below the clip that the accounting uses
CLIP_MARGIN = 1e-12


def project(w: np.ndarray, radius: float | None) -> np.ndarray:
    """Euclidean projection onto the ball of ``radius`` (identity for None)."""
    if radius is None:
        return w
    nrm = float(np.linalg.norm(w))
    return w if nrm <= radius else w * (radius / nrm)


def _inner(clip: float) -> float:
    clip = float(clip)
    return clip * (1.0 - CLIP_MARGIN) if np.isfinite(clip) else clip


@dataclass
class Problem:
    """``loss`` on records ``(X[i], y[i])``; rows of X have norm <= 1."""

    loss: LinearModelLoss
    X: np.ndarray
    y: np.ndarray
    name: str = ""
    _rows: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        self.y = np.ascontiguousarray(self.y, dtype=np.float64)
        self.n, self.d = self.X.shape

    # --------------------------------------------------------------- compiled bits
    @cached_property
    def _k(self):
        import dpreg_kernels.linear_model as k  # lazy: compiles or loads cache

        return k

    @cached_property
    def _scalars(self):
        return self.loss.scalar_kernels()

    @property
    def all_rows(self) -> np.ndarray:
        """``arange(n)`` as int64 (the full batch)."""
        if self._rows is None:
            self._rows = np.arange(self.n, dtype=np.int64)
        return self._rows

    def constants(self) -> tuple[float, float, float]:
        """The loss's declared (G, M, rho) for this dimension."""
        return self.loss.constants(self.d)

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
            cache = (self.X, self._k.row_sqnorms(self.X))
            self.__dict__["_nx_cache"] = cache
        return cache[1]

    def _batch(self, idx):
        """(idx array, full flag) for the kernels: ``None`` is the full batch."""
        if idx is None:
            return _NO_ROWS, True
        return np.ascontiguousarray(idx, dtype=np.int64), False

    def clipped_grad_sum(self, w: np.ndarray, idx: np.ndarray | None, clip: float):
        """(sum over idx of per-record gradients each clipped to norm ``clip``, n_clipped)."""
        w = np.ascontiguousarray(w, dtype=np.float64)
        r = np.ascontiguousarray(self.loss.psi_grad(w), dtype=np.float64)
        ix, full = self._batch(idx)
        return self._k.grad_sum(self.X, self.y, self._nx, ix, full, w, r, self._scalars[1], _inner(clip))

    def clipped_diff_sum(self, w: np.ndarray, w_prev: np.ndarray, idx: np.ndarray | None, clip: float):
        """(sum over idx of per-record gradient differences grad f(w) - grad f(w_prev),
        each clipped to norm ``clip``, n_clipped)."""
        w = np.ascontiguousarray(w, dtype=np.float64)
        wp = np.ascontiguousarray(w_prev, dtype=np.float64)
        r = np.ascontiguousarray(self.loss.psi_grad(w), dtype=np.float64)
        rp = np.ascontiguousarray(self.loss.psi_grad(wp), dtype=np.float64)
        ix, full = self._batch(idx)
        return self._k.diff_sum(self.X, self.y, self._nx, ix, full, w, wp, r, rp,
                                self._scalars[1], _inner(clip))

    def clipped_hessian_sum(self, w: np.ndarray, idx: np.ndarray | None, clip: float):
        """(sum over idx of per-record *data* Hessians ``d2phi x x^T``, each scaled
        to operator norm <= ``clip``, as a dense symmetric d x d array, n_clipped).
        Each term is rank one, so its Frobenius norm is bounded by ``clip`` too;
        psi's (data-independent) Hessian is not included."""
        w = np.ascontiguousarray(w, dtype=np.float64)
        ix = self._idx(idx)
        return self._k.clipped_hessian_sum(self.X, self.y, ix, w, self._scalars[2], _inner(clip))

    # ------------------------------------------------- exact (evaluation) quantities
    def value(self, w: np.ndarray, idx: np.ndarray | None = None) -> float:
        """Empirical loss: mean over rows of f(w; z_i)."""
        w = np.ascontiguousarray(w, dtype=np.float64)
        ix = self._idx(idx)
        return self._k.phi_sum(self.X, self.y, ix, w, self._scalars[0]) / len(ix) + self.loss.psi(w)

    def gradient(self, w: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Exact empirical gradient (mean over rows), unclipped."""
        s, _ = self.clipped_grad_sum(w, idx, np.inf)
        return s / len(self._idx(idx))

    def hvp(self, w: np.ndarray, v: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Exact empirical Hessian-vector product."""
        w = np.ascontiguousarray(w, dtype=np.float64)
        v = np.ascontiguousarray(v, dtype=np.float64)
        ix = self._idx(idx)
        return self._k.hvp_sum(self.X, self.y, ix, w, v, self._scalars[2]) / len(ix) + self.loss.psi_hvp(w, v)

    def hessian(self, w: np.ndarray, idx: np.ndarray | None = None, clip: float = np.inf) -> np.ndarray:
        """Dense empirical Hessian (use for small d only).  Exact by default;
        with a finite ``clip`` each record's data part ``d2phi x x^T`` is scaled
        to operator norm <= clip (the sensitivity-bounded Hessian of the
        above-threshold selector)."""
        w = np.ascontiguousarray(w, dtype=np.float64)
        ix = self._idx(idx)
        H, _ = self._k.clipped_hessian_sum(self.X, self.y, ix, w, self._scalars[2], float(clip))
        H = H / len(ix)
        eye = np.eye(self.d)
        H += np.stack([self.loss.psi_hvp(w, eye[j]) for j in range(self.d)], axis=1)
        return 0.5 * (H + H.T)

