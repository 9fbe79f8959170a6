"""Fused kernels for private selection (the ``exponential`` and
``above-threshold`` selectors).

* :func:`clipped_phi_sums` - for K candidate points at once, the sum over rows
  of the data part of the per-record loss, ``phi(<x_i, w_k>, y_i)``, each
  clipped to the declared range ``[lo, hi]``: the score of the exponential
  mechanism, whose sensitivity ``hi - lo`` the clipping enforces.
* :func:`clipped_hessian_sum` (defined in :mod:`dpreg_kernels.linear_model`,
  where with no clip it is also the exact Hessian) - the sum over rows of the
  data part of the per-record Hessian, ``d2phi(<x_i,w>, y_i) x_i x_i^T``, each scaled so its
  operator norm ``|d2phi| |x_i|^2`` is at most ``clip``: the lambda_min query of
  AboveThreshold, whose sensitivity (Weyl) the scaling enforces.

Same layout as :mod:`dpreg_kernels.linear_model`: the selected rows are split
into fixed chunks (a function of the batch size alone), the chunks run under
``prange`` with one partial result each, and partials are added serially in
chunk order - bit-identical for every thread count; no random numbers.
"""
from __future__ import annotations

import numpy as np
from numba import prange, types

from .config import jit_parallel
from . import linear_model as _lm
from .linear_model import Idx, Mat, ScalarFunction, Vec, f8, i8, n_chunks


def _clipped_phi_sums(X, y, idx, W, phi, lo, hi):
    """For each row ``k`` of ``W`` (K x d): ``sum_{i in idx} clip(phi(<x_i, W_k>, y_i), lo, hi)``.

    Returns ``(sums[K], n_clipped)`` where ``n_clipped`` counts (row, candidate)
    pairs whose value was outside ``[lo, hi]`` (NaN counts as above).  Each term
    lies in ``[lo, hi]`` whatever the data.
    """
    b = idx.shape[0]
    d = X.shape[1]
    K = W.shape[0]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, K))
    ncl = np.zeros(nc, dtype=np.int64)
    for c in prange(nc):
        lo_r = c * step
        hi_r = min(b, lo_r + step)
        acc = part[c]
        k_cl = 0
        for t in range(lo_r, hi_r):
            i = idx[t]
            xi = X[i]
            yi = y[i]
            for k in range(K):
                wk = W[k]
                m = 0.0
                for j in range(d):
                    m += xi[j] * wk[j]
                v = phi(m, yi)
                if not (v >= lo and v <= hi):
                    k_cl += 1
                    # below: lo; above, +inf or NaN (absurd record): hi
                    v = lo if v < lo else hi
                acc[k] += v
        ncl[c] = k_cl
    out = np.zeros(K)
    nclip = 0
    for c in range(nc):
        for k in range(K):
            out[k] += part[c, k]
        nclip += ncl[c]
    return out, nclip


_PHI_SUMS_SIG = types.Tuple((Vec, i8))(Mat, Vec, Idx, Mat, ScalarFunction, f8, f8)

clipped_phi_sums = jit_parallel(_PHI_SUMS_SIG)(_clipped_phi_sums)
#: defined next to the other Hessian code; re-exported for the selectors
clipped_hessian_sum = _lm.clipped_hessian_sum
