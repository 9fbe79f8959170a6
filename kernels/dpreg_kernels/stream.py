"""The streaming limit: the cheapest possible pass over the same rows.

:func:`row_sums` (all rows) and :func:`row_sums_at` (the rows ``idx``, gathered)
add up each row of ``X`` under ``prange``; they read exactly the bytes a hot
kernel reads and do one add per element, so their time is the memory-bandwidth
floor the benchmarks divide by (kernel / limit).  Imported by the benchmarks
only; compiled eagerly and cached like every kernel.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from .config import jit_parallel
from .linear_model import Idx, Mat, Vec


def _row_sums(X, out):
    n = X.shape[0]
    d = X.shape[1]
    for i in prange(n):
        xi = X[i]
        s = 0.0
        for j in range(d):
            s += xi[j]
        out[i] = s
    return out


def _row_sums_at(X, idx, out):
    b = idx.shape[0]
    d = X.shape[1]
    for t in prange(b):
        xi = X[idx[t]]
        s = 0.0
        for j in range(d):
            s += xi[j]
        out[t] = s
    return out


row_sums = jit_parallel(Vec(Mat, Vec))(_row_sums)
row_sums_at = jit_parallel(Vec(Mat, Idx, Vec))(_row_sums_at)


def limit(X, idx=None, out=None):
    """One streaming pass over X (or its rows idx): returns the row sums."""
    if idx is None:
        return row_sums(X, out if out is not None else np.empty(X.shape[0]))
    return row_sums_at(X, idx, out if out is not None else np.empty(idx.shape[0]))
