"""Fused kernel for the zeroth-order estimators of
zhang-tran-cutkosky-2024-private-zeroth-order.txt (Algs 1, 2 and 6).

For a linear-model loss ``f(w; x, y) = phi(<x, w>, y) + psi(w)`` a function
value at ``w + h u`` needs only the margin ``<x, w> + h <x, u>``, so the 2J
function evaluations of one record along J directions cost one dot product
``<x, u_j>`` per direction and two scalar calls.  :func:`zo_sum` computes, for
a block of records and a block of directions ``U[t, j, :]`` (record t of the
block, direction j; unit vectors drawn by the caller, in numpy),

    sum_t Clip_rec_clip( sum_j c_tj u_tj ),
    c_tj = clip_[-clip, clip]( scale * (phi(<x, wa> + h p, y) - phi(<x, wb> + sgn h p, y)) ),
    p = <x_t, u_tj>,

(``sym``: c_tj's difference minus the same difference at ``-p``, four
evaluations) with ``Clip_c(v) = v min(1, c/|v|)`` the per-record norm clip
(``rec_clip = inf``: none), which is

* GRAD (Alg 1, two-point): ``wa = wb = w``, ``sgn = -1``, ``scale = 1/(2h)``;
* DIFF (Alg 2, same direction at both points): ``wa = x``, ``wb = y``,
  ``sgn = +1``, ``scale = 1``; the symmetric DIFF (``sym``, ``scale = 1/2``)
  is GRAD(x) - GRAD(y) with the same directions, whose coefficient obeys the
  same bound |c| <= L |x - y| and has no common-mode term <grad f, x - y>;
* the naive oracle (Alg 6): GRAD with J = 1.

The caller multiplies by the outer constant (1 for GRAD, 1/h for DIFF, d for
Alg 6) and adds psi's data-independent part.  Each coefficient is clipped
(a NaN drops the term and counts as clipped), so a record's term has norm at
most ``min(J * clip * max_j |u_tj|, rec_clip)`` whatever its data: this is
where Lemmas 3.1-3.2's sensitivities (and the practical per-record clip) are
enforced.  Records are split into fixed chunks
(a function of the block size, J and d alone), the chunks run under ``prange``
with one partial sum each, and the partials are added serially in chunk order:
bit-identical for every thread count, O(chunks x d) extra memory, no random
numbers.  Cost: O(b J d) per call.
"""
from __future__ import annotations

import numpy as np
from numba import prange, types

from .config import MAX_CHUNKS, jit_inline, jit_parallel, jit_serial
from .linear_model import Idx, Mat, ScalarFunction, Vec, f8, i8

#: (records, directions per record, d) block of unit directions
Dirs = types.Array(f8, 3, "C")


#: about this many multiply-adds of direction work per chunk: a DIFF of one
#: record (d^2 of them) stays serial up to d = 128, a GRAD over B1 ~ T records
#: spreads over up to MAX_CHUNKS chunks
CHUNK_WORK = 1 << 14


def _zo_chunks(b, J, d):
    """Number of record chunks for ``b`` records with ``J`` directions in R^d:
    a function of (b, J, d) alone (about CHUNK_WORK multiply-adds per chunk,
    at most MAX_CHUNKS chunks, never more chunks than records)."""
    c = (b * J * d + CHUNK_WORK - 1) // CHUNK_WORK
    if c > MAX_CHUNKS:
        c = MAX_CHUNKS
    if c > b:
        c = b
    if c < 1:
        c = 1
    return c


def _clip_coef(v, clip):
    """``v`` clipped to [-clip, clip]; NaN gives 0 (the term is dropped)."""
    if v <= clip and v >= -clip:
        return v
    if v > clip:
        return clip
    if v < -clip:
        return -clip
    return 0.0


def _zo_sum(X, y, idx, wa, wb, U, h, sgn, scale, clip, rec_clip, sym, phi):
    """``(sum_t r_t, n_clipped)`` over the records ``idx[t]`` of the block
    and their directions ``U[t, j]``, ``r_t = Clip_rec_clip(sum_j c_tj u_tj)``
    (see the module docstring); ``n_clipped`` counts the coefficients clipped
    or dropped plus the records whose norm was clipped."""
    b = idx.shape[0]
    J = U.shape[1]
    d = X.shape[1]
    nc = _zo_chunks(b, J, d)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d))
    rec = np.zeros((nc, d))
    ncl = np.zeros(nc, dtype=np.int64)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        k = 0
        for t in range(lo, hi):
            i = idx[t]
            x = X[i]
            yi = y[i]
            ma = 0.0
            mb = 0.0
            for q in range(d):
                ma += x[q] * wa[q]
                mb += x[q] * wb[q]
            for q in range(d):
                rec[c, q] = 0.0
            for j in range(J):
                u = U[t, j]
                p = 0.0
                for q in range(d):
                    p += x[q] * u[q]
                v = scale * (phi(ma + h * p, yi) - phi(mb + sgn * h * p, yi))
                if sym:
                    v -= scale * (phi(ma - h * p, yi) - phi(mb - sgn * h * p, yi))
                cv = _clip_coef(v, clip)
                if not (v <= clip and v >= -clip):
                    k += 1
                for q in range(d):
                    rec[c, q] += cv * u[q]
            nr = 0.0
            for q in range(d):
                nr += rec[c, q] * rec[c, q]
            # clip on a rounding-safe upper bound of |rec| (the computed sum of d
            # squares and its root are within (d + 2) u of the true norm; the
            # margin (d + 4) 2^-51 = 4 (d + 4) u covers that and the product
            # f * rec_q), so the added term never has norm above rec_clip;
            # an overflowed or NaN estimate is dropped, as in the linear kernels
            nrb = np.sqrt(nr) * (1.0 + (d + 4) * 2.0 ** -51) + 2.0 ** -1000
            f = 1.0
            if not (nrb <= rec_clip):
                f = rec_clip / nrb if nrb < np.inf else 0.0
                k += 1
            if f > 0.0:
                for q in range(d):
                    acc[q] += f * rec[c, q]
        ncl[c] = k
    out = np.zeros(d)
    nclip = 0
    for c in range(nc):
        for q in range(d):
            out[q] += part[c, q]
        nclip += ncl[c]
    return out, nclip


_ZO_SIG = types.Tuple((Vec, i8))(Mat, Vec, Idx, Vec, Vec, Dirs, f8, f8, f8, f8, f8, types.boolean, ScalarFunction)

_n_zo_chunks = _zo_chunks  # plain Python: a function of (b, J, d) alone
_zo_chunks = jit_inline(_zo_chunks)
_clip_coef = jit_inline(_clip_coef)

#: the fused GRAD/DIFF kernel (see :func:`_zo_sum`), parallel and serial variants
zo_sum_parallel = jit_parallel(_ZO_SIG)(_zo_sum)
zo_sum_serial = jit_serial(_ZO_SIG)(_zo_sum)


def zo_sum(X, y, idx, wa, wb, U, h, sgn, scale, clip, rec_clip, sym, phi):
    """:func:`_zo_sum`, serial when the block is one chunk (a DIFF of one
    record: a parallel region's start-up would cost more than the work),
    parallel otherwise; both give the same bits (same chunks, same order)."""
    if _n_zo_chunks(idx.shape[0], U.shape[1], U.shape[2]) == 1:
        return zo_sum_serial(X, y, idx, wa, wb, U, h, sgn, scale, clip, rec_clip, sym, phi)
    return zo_sum_parallel(X, y, idx, wa, wb, U, h, sgn, scale, clip, rec_clip, sym, phi)
