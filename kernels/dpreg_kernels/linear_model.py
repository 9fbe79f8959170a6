"""Fused per-sample kernels for linear-model losses.

A *linear-model loss* is ``f(w; x, y) = phi(<x, w>, y) + psi(w)``: the data enter
through the margin ``m = <x, w>`` only, and ``psi`` is a data-independent term
(regulariser, or the ``1/2(|w|^2 + sin|w|^2)`` of the warm-start paper's synthetic
loss).  Its per-sample gradient is ``a(m, y) x + r`` with ``a = dphi/dm`` and
``r = grad psi(w)``, so every per-sample quantity the algorithms need follows
from three dot products per row (``<x,w>``, ``<x,r>``, ``|x|^2``) and one scalar
call.  The loss supplies ``phi``, ``dphi`` and ``d2phi`` as compiled scalar
functions with the signature :data:`SCALAR_SIG`; the kernels here take them as
first-class function arguments, so adding a loss adds no loop and no
recompilation (the kernels are compiled once, from explicit signatures, and
cached on disk).

Every kernel

* reads each selected row of ``X`` once, in one fused pass;
* splits the selected rows into fixed chunks (:func:`n_chunks`), runs the chunks
  under ``prange`` and keeps one partial sum per chunk, then adds the partials
  serially in chunk order: peak extra memory is O(chunks x d), never (n x d),
  and the result is bit-identical for every thread count;
* draws no random numbers (noise is added by the caller, outside).

Shapes: ``X`` is ``float64[n, d]`` C-contiguous, ``y`` ``float64[n]``, ``idx``
``int64[b]`` row numbers (``arange(n)`` for the full batch), vectors ``float64[d]``.
"""
from __future__ import annotations

import numpy as np
from numba import prange, types

from .config import MAX_CHUNKS, MIN_CHUNK_ROWS, jit_parallel, jit_serial

f8 = types.float64
i8 = types.int64
SCALAR_SIG = f8(f8, f8)
#: numba type of a loss's scalar function argument
ScalarFn = types.FunctionType(SCALAR_SIG)
Mat = types.Array(f8, 2, "C")
Vec = types.Array(f8, 1, "C")
Idx = types.Array(i8, 1, "C")


def _n_chunks(b):
    """Number of row chunks for a batch of ``b`` rows: a function of b alone."""
    c = (b + MIN_CHUNK_ROWS - 1) // MIN_CHUNK_ROWS
    if c > MAX_CHUNKS:
        c = MAX_CHUNKS
    if c < 1:
        c = 1
    return c


n_chunks = jit_serial(i8(i8))(_n_chunks)


def _clipped_grad_sum(X, y, idx, w, r, dphi, clip):
    """Sum over rows ``i in idx`` of ``min(1, clip/|g_i|) g_i`` with
    ``g_i = dphi(<x_i,w>, y_i) x_i + r``.

    Returns ``(sum, n_clipped)``.  Each term has norm at most ``clip`` by
    construction, whatever the data: this is where the O1 sensitivity is enforced.
    A term whose norm is not finite (overflow, NaN) counts as clipped and is
    dropped (contributes 0).
    """
    b = idx.shape[0]
    d = X.shape[1]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d))
    coef = np.zeros(nc)  # sum of clip factors (multiplies r)
    ncl = np.zeros(nc, dtype=np.int64)
    rr = 0.0
    for j in range(d):
        rr += r[j] * r[j]
    clip2 = clip * clip
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        cs = 0.0
        k = 0
        for t in range(lo, hi):
            i = idx[t]
            xi = X[i]
            m = 0.0
            xr = 0.0
            xx = 0.0
            for j in range(d):
                v = xi[j]
                m += v * w[j]
                xr += v * r[j]
                xx += v * v
            a = dphi(m, y[i])
            g2 = a * a * xx + 2.0 * a * xr + rr
            s = 1.0
            if not g2 <= clip2:
                k += 1
                # a norm that overflowed or is NaN (absurd record) drops the term
                s = clip / np.sqrt(g2) if g2 < np.inf else 0.0
            if s > 0.0:
                sa = s * a
                for j in range(d):
                    acc[j] += sa * xi[j]
                cs += s
        coef[c] = cs
        ncl[c] = k
    out = np.zeros(d)
    tot = 0.0
    nclip = 0
    for c in range(nc):
        for j in range(d):
            out[j] += part[c, j]
        tot += coef[c]
        nclip += ncl[c]
    for j in range(d):
        out[j] += tot * r[j]
    return out, nclip


def _clipped_diff_sum(X, y, idx, w, wp, r, rp, dphi, clip):
    """Sum over rows of the clipped per-sample gradient difference
    ``D_i = grad f(w; z_i) - grad f(wp; z_i) = (a_i - a'_i) x_i + (r - rp)``,
    each scaled by ``min(1, clip/|D_i|)``.  ``X`` is read once.

    Returns ``(sum, n_clipped)``; each term's norm is at most ``clip``.
    """
    b = idx.shape[0]
    d = X.shape[1]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d))
    coef = np.zeros(nc)
    ncl = np.zeros(nc, dtype=np.int64)
    dr = np.empty(d)
    rr = 0.0
    for j in range(d):
        dr[j] = r[j] - rp[j]
        rr += dr[j] * dr[j]
    clip2 = clip * clip
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        cs = 0.0
        k = 0
        for t in range(lo, hi):
            i = idx[t]
            xi = X[i]
            m = 0.0
            mp = 0.0
            xr = 0.0
            xx = 0.0
            for j in range(d):
                v = xi[j]
                m += v * w[j]
                mp += v * wp[j]
                xr += v * dr[j]
                xx += v * v
            yi = y[i]
            a = dphi(m, yi) - dphi(mp, yi)
            g2 = a * a * xx + 2.0 * a * xr + rr
            s = 1.0
            if not g2 <= clip2:
                k += 1
                # a norm that overflowed or is NaN (absurd record) drops the term
                s = clip / np.sqrt(g2) if g2 < np.inf else 0.0
            if s > 0.0:
                sa = s * a
                for j in range(d):
                    acc[j] += sa * xi[j]
                cs += s
        coef[c] = cs
        ncl[c] = k
    out = np.zeros(d)
    tot = 0.0
    nclip = 0
    for c in range(nc):
        for j in range(d):
            out[j] += part[c, j]
        tot += coef[c]
        nclip += ncl[c]
    for j in range(d):
        out[j] += tot * dr[j]
    return out, nclip


def _phi_sum(X, y, idx, w, phi):
    """Sum over rows of ``phi(<x_i, w>, y_i)`` (the data part of the loss)."""
    b = idx.shape[0]
    d = X.shape[1]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros(nc)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        s = 0.0
        for t in range(lo, hi):
            i = idx[t]
            xi = X[i]
            m = 0.0
            for j in range(d):
                m += xi[j] * w[j]
            s += phi(m, y[i])
        part[c] = s
    tot = 0.0
    for c in range(nc):
        tot += part[c]
    return tot


def _hvp_sum(X, y, idx, w, v, d2phi):
    """Sum over rows of ``d2phi(<x_i,w>, y_i) <x_i, v> x_i`` (data part of the
    Hessian-vector product)."""
    b = idx.shape[0]
    d = X.shape[1]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d))
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        for t in range(lo, hi):
            i = idx[t]
            xi = X[i]
            m = 0.0
            xv = 0.0
            for j in range(d):
                m += xi[j] * w[j]
                xv += xi[j] * v[j]
            h = d2phi(m, y[i]) * xv
            for j in range(d):
                acc[j] += h * xi[j]
    out = np.zeros(d)
    for c in range(nc):
        for j in range(d):
            out[j] += part[c, j]
    return out


def _hessian_sum(X, y, idx, w, d2phi):
    """Sum over rows of ``d2phi(<x_i,w>, y_i) x_i x_i^T`` (dense, for small d)."""
    b = idx.shape[0]
    d = X.shape[1]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d, d))
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        for t in range(lo, hi):
            i = idx[t]
            xi = X[i]
            m = 0.0
            for j in range(d):
                m += xi[j] * w[j]
            h = d2phi(m, y[i])
            for j in range(d):
                hj = h * xi[j]
                for k in range(j, d):
                    acc[j, k] += hj * xi[k]
    out = np.zeros((d, d))
    for c in range(nc):
        for j in range(d):
            for k in range(j, d):
                out[j, k] += part[c, j, k]
    for j in range(d):
        for k in range(j):
            out[j, k] = out[k, j]
    return out


_GRAD_SIG = types.Tuple((Vec, i8))(Mat, Vec, Idx, Vec, Vec, ScalarFn, f8)
_DIFF_SIG = types.Tuple((Vec, i8))(Mat, Vec, Idx, Vec, Vec, Vec, Vec, ScalarFn, f8)
_PHI_SIG = f8(Mat, Vec, Idx, Vec, ScalarFn)
_HVP_SIG = Vec(Mat, Vec, Idx, Vec, Vec, ScalarFn)
_HESS_SIG = types.Array(f8, 2, "C")(Mat, Vec, Idx, Vec, ScalarFn)

clipped_grad_sum = jit_parallel(_GRAD_SIG)(_clipped_grad_sum)
clipped_diff_sum = jit_parallel(_DIFF_SIG)(_clipped_diff_sum)
phi_sum = jit_parallel(_PHI_SIG)(_phi_sum)
hvp_sum = jit_parallel(_HVP_SIG)(_hvp_sum)
hessian_sum = jit_parallel(_HESS_SIG)(_hessian_sum)

#: serial variants of the two hot kernels, for thread-scaling benchmarks
clipped_grad_sum_serial = jit_serial(_GRAD_SIG)(_clipped_grad_sum)
clipped_diff_sum_serial = jit_serial(_DIFF_SIG)(_clipped_diff_sum)
