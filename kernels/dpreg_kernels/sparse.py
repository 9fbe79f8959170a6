"""The linear-model kernels of :mod:`dpreg_kernels.linear_model` for CSR data.

``X`` is given as its CSR arrays ``data`` (float64[nnz]), ``indices``
(int64[nnz], column numbers, sorted within each row, no duplicates) and
``indptr`` (int64[n+1]); everything else (``y``, ``nx``, ``idx``/``full``,
``w``, ``r``, the loss's scalar functions, return values) is as in the dense
kernels; chunks as there, but at most one per 4 d non-zeros of the batch.  A row costs O(its non-zeros), never O(d) - except the
per-chunk accumulators of the gradient kernels, which are d-vectors
(O(chunks x d) memory, as for dense data).

Clipping (privacy rule 1) - the per-record norm is computed directly, as a
sum of squares of the actual term, never by the expanded form
``a^2 |x|^2 + 2a<x,r> + |r|^2`` (which cancels):

* no data-independent term (``r = 0``, the plain losses): ``|g|^2 =
  a^2 |x|^2`` with ``|x|^2 = nx[i]`` the row's sum of squares (``row_sqnorms``):
  a product of squares, exact up to rounding, no cancellation;
* with one (``r != 0``): the bound ``sum_{j in supp x} (a x_j + r_j)^2 +
  |r|^2 >= |g|^2`` (the off-support coordinates of ``g`` are ``r_j``, whose
  squares sum to at most ``|r|^2``).  Clipping by a bound scales a term by
  at most ``clip/|g|``: its norm never exceeds ``clip``, for any finite
  input; a term just inside the clip may be scaled slightly (utility only,
  and it differs from the dense kernel only for such terms).

All terms are non-negative, so the rounding error is relative and tiny
(``(nnz_row + 2) 2^-53``), inside :data:`dpreg.problem.CLIP_MARGIN`.  A
non-finite norm drops the term, as in the dense kernels.
"""
from __future__ import annotations

import numpy as np
from numba import prange, types

from .config import jit_inline
from .intrinsics import prefetch
from .linear_model import _BOUND_FLOOR, Idx, Kernel, ScalarFn, Vec, _err_coef, _over, _scale, f8, i8, n_chunks


def _csr_chunks(indptr, idx, full, b, d):
    """Chunks for a CSR batch: :func:`n_chunks` of the batch, but at most one
    per 4 d non-zeros of the batch (each chunk keeps a d-vector accumulator that
    is zeroed and reduced: for wide data, 64 of them would cost more than the
    rows).  A function of the batch alone: results do not depend on the
    thread count."""
    nc = n_chunks(b)
    if full:
        nnz = indptr[indptr.shape[0] - 1]
    else:
        nnz = 0
        for t in range(b):
            nnz += indptr[idx[t] + 1] - indptr[idx[t]]
    cap = nnz // (4 * d)
    if cap < 1:
        cap = 1
    return nc if nc < cap else cap


#: Rows ahead of the current one whose CSR slices a gather loop prefetches
#: (sampled batches are scattered: each row's data is a cache miss otherwise).
CSR_AHEAD = 8


def _csr_prefetch(data, indices, indptr, y, nx, idx, t, b):
    """Gather path only: hint the cache lines of the batch's row ``t + CSR_AHEAD``
    (its first and last non-zero, column numbers, label and squared norm) and
    the ``indptr`` entry of row ``t + 2 CSR_AHEAD``.  A hint: never changes a
    result, never reads out of bounds (positions past the batch are skipped)."""
    u = t + 2 * CSR_AHEAD
    if u < b:
        prefetch(indptr, idx[u])
    u = t + CSR_AHEAD
    if u < b:
        i = idx[u]
        lo = indptr[i]
        hi = indptr[i + 1]
        if hi > lo:
            prefetch(data, lo)
            prefetch(data, hi - 1)
            prefetch(indices, lo)
            prefetch(indices, hi - 1)
        prefetch(y, i)
        prefetch(nx, i)


def _csr_grad_sum(data, indices, indptr, y, nx, idx, full, w, r, dphi, clip):
    """Sum over the batch of ``min(1, clip/|g_i|) g_i``, ``g_i = dphi(<x_i,w>, y_i) x_i + r``
    (clip factor from the module docstring's norm); ``(sum, n_clipped)``."""
    n = indptr.shape[0] - 1
    d = w.shape[0]
    b = n if full else idx.shape[0]
    nc = _csr_chunks(indptr, idx, full, b, d)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d))
    coef = np.zeros(nc)
    ncl = np.zeros(nc, dtype=np.int64)
    rr = 0.0
    for j in range(d):
        rr += r[j] * r[j]
    has_r = rr > 0.0
    clip2 = clip * clip
    ek = _err_coef(d)
    for c in prange(nc):
        acc = part[c]
        cs = 0.0
        k = 0
        for t in range(c * step, min(b, c * step + step)):
            if not full:
                _csr_prefetch(data, indices, indptr, y, nx, idx, t, b)
            i = t if full else idx[t]
            lo = indptr[i]
            hi = indptr[i + 1]
            m = 0.0
            for p in range(lo, hi):
                m += data[p] * w[indices[p]]
            a = dphi(m, y[i])
            g2 = 0.0
            if has_r:
                for p in range(lo, hi):
                    v = a * data[p] + r[indices[p]]
                    g2 += v * v
                g2 += rr
            else:
                g2 = (a * a) * nx[i]
            # g2 sums squares (no cancellation); its rounding is covered as in the dense
            # kernels' proof (linear_model, above _scale): a bound gu >= the true |term|^2
            gu = g2 + ek * g2 + _BOUND_FLOOR
            k += _over(gu, clip2)
            s = _scale(gu, g2, clip, clip2)
            if s != 0.0:
                sa = s * a
                for p in range(lo, hi):
                    acc[indices[p]] += sa * data[p]
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
    if has_r:
        for j in range(d):
            out[j] += tot * r[j]
    return out, nclip


def _csr_diff_sum(data, indices, indptr, y, nx, idx, full, w, wp, r, rp, dphi, clip):
    """Sum over the batch of the clipped per-record gradient difference
    ``(a_i - a'_i) x_i + (r - rp)`` (see :func:`dpreg_kernels.linear_model._diff_sum`);
    ``(sum, n_clipped)``."""
    n = indptr.shape[0] - 1
    d = w.shape[0]
    b = n if full else idx.shape[0]
    nc = _csr_chunks(indptr, idx, full, b, d)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d))
    coef = np.zeros(nc)
    ncl = np.zeros(nc, dtype=np.int64)
    dr = np.empty(d)
    rr = 0.0
    for j in range(d):
        dr[j] = r[j] - rp[j]
        rr += dr[j] * dr[j]
    has_r = rr > 0.0
    clip2 = clip * clip
    ek = _err_coef(d)
    for c in prange(nc):
        acc = part[c]
        cs = 0.0
        k = 0
        for t in range(c * step, min(b, c * step + step)):
            if not full:
                _csr_prefetch(data, indices, indptr, y, nx, idx, t, b)
            i = t if full else idx[t]
            lo = indptr[i]
            hi = indptr[i + 1]
            m = 0.0
            mp = 0.0
            for p in range(lo, hi):
                v = data[p]
                q = indices[p]
                m += v * w[q]
                mp += v * wp[q]
            yi = y[i]
            a = dphi(m, yi) - dphi(mp, yi)
            g2 = 0.0
            if has_r:
                for p in range(lo, hi):
                    v = a * data[p] + dr[indices[p]]
                    g2 += v * v
                g2 += rr
            else:
                g2 = (a * a) * nx[i]
            # g2 sums squares (no cancellation); its rounding is covered as in the dense
            # kernels' proof (linear_model, above _scale): a bound gu >= the true |term|^2
            gu = g2 + ek * g2 + _BOUND_FLOOR
            k += _over(gu, clip2)
            s = _scale(gu, g2, clip, clip2)
            if s != 0.0:
                sa = s * a
                for p in range(lo, hi):
                    acc[indices[p]] += sa * data[p]
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
    if has_r:
        for j in range(d):
            out[j] += tot * dr[j]
    return out, nclip


def _csr_row_sqnorms(data, indptr):
    """``|x_i|^2`` for every row."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for i in prange(n):
        s = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            s += data[p] * data[p]
        out[i] = s
    return out


def _csr_phi_sum(data, indices, indptr, y, idx, w, phi):
    """Sum over rows ``idx`` of ``phi(<x_i, w>, y_i)``."""
    b = idx.shape[0]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros(nc)
    for c in prange(nc):
        s = 0.0
        for t in range(c * step, min(b, c * step + step)):
            i = idx[t]
            m = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                m += data[p] * w[indices[p]]
            s += phi(m, y[i])
        part[c] = s
    tot = 0.0
    for c in range(nc):
        tot += part[c]
    return tot


def _csr_hvp_sum(data, indices, indptr, y, idx, w, v, d2phi):
    """Sum over rows ``idx`` of ``d2phi(<x_i,w>, y_i) <x_i, v> x_i``."""
    b = idx.shape[0]
    d = w.shape[0]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d))
    for c in prange(nc):
        acc = part[c]
        for t in range(c * step, min(b, c * step + step)):
            i = idx[t]
            lo = indptr[i]
            hi = indptr[i + 1]
            m = 0.0
            xv = 0.0
            for p in range(lo, hi):
                m += data[p] * w[indices[p]]
                xv += data[p] * v[indices[p]]
            h = d2phi(m, y[i]) * xv
            for p in range(lo, hi):
                acc[indices[p]] += h * data[p]
    out = np.zeros(d)
    for c in range(nc):
        for j in range(d):
            out[j] += part[c, j]
    return out


def _csr_clipped_hessian_sum(data, indices, indptr, y, idx, w, d2phi, clip):
    """``sum_{i in idx} s_i h_i x_i x_i^T``, ``s_i = min(1, clip / (|h_i| |x_i|^2))``
    (dense symmetric d x d: small d only); ``(sum, n_clipped)``."""
    b = idx.shape[0]
    d = w.shape[0]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d, d))
    ncl = np.zeros(nc, dtype=np.int64)
    for c in prange(nc):
        acc = part[c]
        k_cl = 0
        for t in range(c * step, min(b, c * step + step)):
            i = idx[t]
            lo = indptr[i]
            hi = indptr[i + 1]
            m = 0.0
            xx = 0.0
            for p in range(lo, hi):
                m += data[p] * w[indices[p]]
                xx += data[p] * data[p]
            h = d2phi(m, y[i])
            op = abs(h) * xx
            if not op <= clip:
                k_cl += 1
                h = h * (clip / op) if op < np.inf else 0.0
            for p in range(lo, hi):
                hj = h * data[p]
                jj = indices[p]
                for q in range(p, hi):  # sorted indices: jj <= indices[q]
                    acc[jj, indices[q]] += hj * data[q]
        ncl[c] = k_cl
    out = np.zeros((d, d))
    nclip = 0
    for c in range(nc):
        for j in range(d):
            for k in range(j, d):
                out[j, k] += part[c, j, k]
        nclip += ncl[c]
    for j in range(d):
        for k in range(j):
            out[j, k] = out[k, j]
    return out, nclip


_CSR = (Vec, Idx, Idx)
_csr_chunks = jit_inline(_csr_chunks)
_csr_prefetch = jit_inline(_csr_prefetch)
grad_sum = Kernel(types.Tuple((Vec, i8))(*_CSR, Vec, Vec, Idx, types.boolean, Vec, Vec, ScalarFn, f8),
                  _csr_grad_sum)
diff_sum = Kernel(types.Tuple((Vec, i8))(*_CSR, Vec, Vec, Idx, types.boolean, Vec, Vec, Vec, Vec, ScalarFn, f8),
                  _csr_diff_sum)
row_sqnorms = Kernel(Vec(Vec, Idx), _csr_row_sqnorms)
phi_sum = Kernel(f8(*_CSR, Vec, Idx, Vec, ScalarFn), _csr_phi_sum)
hvp_sum = Kernel(Vec(*_CSR, Vec, Idx, Vec, Vec, ScalarFn), _csr_hvp_sum)
clipped_hessian_sum = Kernel(types.Tuple((types.Array(f8, 2, "C"), i8))(*_CSR, Vec, Idx, Vec, ScalarFn, f8),
                             _csr_clipped_hessian_sum)
