"""Record preparation in one pass over the rows: the finiteness check and the
unit-ball row scaling (with the intercept column) of :mod:`dpreg.data` and
:mod:`dpreg.preprocess`.

* :data:`first_nonfinite` - the row-major position of the first NaN or
  infinite entry of a dense ``X``, or -1;
* :data:`scale_rows` - ``out[i, :p] = x_i / max(1, |x_i|)`` for every row,
  and ``out[i, p] = column`` when ``out`` has one more column than ``X``
  (the intercept feature).  ``out`` may be ``X`` itself (``copy`` False:
  rows already inside the ball are then not rewritten).  The norm is
  overflow-safe: a row whose sum of squares overflows is measured again
  scaled by its largest magnitude.  Rows of norm at most 1 are copied
  unchanged.

Each row is its own work, so the result does not depend on the chunking or
the thread count; the rows are still split into fixed chunks (a function of
n alone) run under ``prange``, like every kernel of this package.  Numpy's
block-wise formulation of the same scaling (``np.linalg.norm`` of the rows
divided by their largest magnitude, then a division) made five passes over
the data and two temporaries per block.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange, types

from .config import MAX_CHUNKS, jit_inline
from .linear_model import Kernel

f8 = types.float64
i8 = types.int64
b1 = types.boolean
Mat = types.Array(f8, 2, "C")

#: rows per chunk at least (a chunk of 1,024 rows of 784 floats is 6 MB of work)
MIN_CHUNK_ROWS = 1024


def _chunks(n):
    c = (n + MIN_CHUNK_ROWS - 1) // MIN_CHUNK_ROWS
    if c > MAX_CHUNKS:
        c = MAX_CHUNKS
    if c < 1:
        c = 1
    return c


def _first_nonfinite(X):
    """Row-major position ``i p + j`` of the first entry of ``X`` that is NaN
    or infinite, -1 when every entry is finite.  Read from the bits (an
    exponent field of all ones), so no floating-point flag of the compiler can
    fold the test away."""
    n = X.shape[0]
    p = X.shape[1]
    U = X.view(np.uint64)
    exp = np.uint64(0x7FF0000000000000)
    nc = _chunks(n)
    step = (n + nc - 1) // nc
    first = np.full(nc, -1, dtype=np.int64)
    for c in prange(nc):
        lo = c * step
        hi = min(n, lo + step)
        for i in range(lo, hi):
            ui = U[i]
            mn = exp
            for j in range(p):  # (u & exp) ^ exp is 0 exactly for NaN and +-inf
                t = (ui[j] & exp) ^ exp
                if t < mn:
                    mn = t
            if mn == 0:
                for j in range(p):
                    if (ui[j] & exp) == exp:
                        first[c] = i * p + j
                        break
                break
    for c in range(nc):
        if first[c] >= 0:
            return first[c]
    return np.int64(-1)


def _scale_rows(X, out, column, copy):
    """``out[i, :p] = x_i / max(1, |x_i|)``; ``out[i, p] = column`` when
    ``out`` has ``p + 1`` columns.  ``copy`` False: ``out`` is ``X`` (rows
    inside the ball are left as they are).  Every entry of X must be finite."""
    n = X.shape[0]
    p = X.shape[1]
    extra = out.shape[1] > p
    nc = _chunks(n)
    step = (n + nc - 1) // nc
    for c in prange(nc):
        lo = c * step
        hi = min(n, lo + step)
        for i in range(lo, hi):
            xi = X[i]
            oi = out[i]
            ss = 0.0
            for j in range(p):
                v = xi[j]
                ss += v * v
            if ss > 1.0:
                if ss < np.inf:
                    nrm = math.sqrt(ss)
                else:  # the squares overflowed: measure the row scaled by its largest magnitude
                    m = 0.0
                    for j in range(p):
                        a = abs(xi[j])
                        if a > m:
                            m = a
                    s2 = 0.0
                    for j in range(p):
                        v = xi[j] / m
                        s2 += v * v
                    nrm = m * math.sqrt(s2)
                for j in range(p):
                    oi[j] = xi[j] / nrm
            elif copy:
                for j in range(p):
                    oi[j] = xi[j]
            if extra:
                oi[p] = column


_chunks = jit_inline(_chunks)
first_nonfinite = Kernel(i8(Mat), _first_nonfinite)
scale_rows = Kernel(types.none(Mat, Mat, f8, b1), _scale_rows)
