"""The linear-model kernels of :mod:`dpreg_kernels.linear_model` for CSR data.

``X`` is given as its CSR arrays ``data`` (float64[nnz]), ``indices``
(int64[nnz], column numbers, sorted within each row, no duplicates) and
``indptr`` (int64[n+1]); everything else (``y``, ``nx``, ``idx``/``full``,
``w``, ``r``, the loss's scalar and block functions, return values) is as in
the dense kernels, and so is the staging (margins of a stage of rows, the
block derivative, clip factors, accumulation); chunks as there, but at most
one per 4 d non-zeros of the batch.  A row costs O(its non-zeros), never O(d)
- except the per-chunk accumulators of the gradient kernels, which are
d-vectors (O(chunks x d) memory, as for dense data).

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
from .linear_model import (_BOUND_FLOOR, BlockFn, Idx, Kernel, OracleSum, ScalarFn, Vec, _err_coef, _over,
                           _psi_term, _reduce_parts, _scale, f8, i8, n_chunks)

#: Rows staged together by the CSR kernels (the dense kernels' STAGE, before that rose to 256 on
#: measurements of dense rows only; the CSR stage was not remeasured, so it stays at 64)
STAGE: int = 64


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


def _csr_margins(data, indices, indptr, y, w, wp, two, ib, nb, mv, nv, yv):
    """``mv[u] = <x_ib[u], w>``, ``yv[u] = y`` for the stage's ``nb`` rows and,
    when ``two`` (O2), ``nv[u] = <x_ib[u], wp>`` in the same pass over the row.
    No software prefetch: the rows of a stage are independent, so the
    out-of-order core overlaps their cache misses; prefetching each row's
    slices 8 rows ahead (which needs its ``indptr`` entries loaded first) made
    the margins of 256 scattered a9a rows 3.3x slower (20.2 against 6.2 us)."""
    for u in range(nb):
        i = ib[u]
        m = 0.0
        mp = 0.0
        if two:
            for p in range(indptr[i], indptr[i + 1]):
                v = data[p]
                q = indices[p]
                m += v * w[q]
                mp += v * wp[q]
        else:
            for p in range(indptr[i], indptr[i + 1]):
                m += data[p] * w[indices[p]]
        mv[u] = m
        nv[u] = mp
        yv[u] = y[i]


def _csr_stage_scales(data, indices, indptr, nx, ib, nb, r, rr, has_r, ek, clip, clip2, av, cv, sv):
    """Clip factors of the stage's terms ``a x + r`` (``av[u] = a``) from the
    module docstring's norm: ``cv[u] = s a``, ``sv[u] = s`` (0: dropped).
    Returns (sum of the factors, number clipped)."""
    cs = 0.0
    k = 0
    for u in range(nb):
        i = ib[u]
        a = av[u]
        if has_r:
            g2 = 0.0
            for p in range(indptr[i], indptr[i + 1]):
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
        cs += s
        sv[u] = s
        cv[u] = s * a if s != 0.0 else 0.0
    return cs, k


def _csr_stage_accumulate(data, indices, indptr, ib, nb, cv, sv, acc):
    """``acc += sum_u cv[u] x_ib[u]`` over the stage's kept terms (``sv[u] != 0``)."""
    for u in range(nb):
        if sv[u] != 0.0:
            i = ib[u]
            c = cv[u]
            for p in range(indptr[i], indptr[i + 1]):
                acc[indices[p]] += c * data[p]


def _csr_chunk(data, indices, indptr, y, nx, idx, full, w, wp, two, r, rr, has_r, ek, dphi, blk, clip, clip2, lo, hi,
               acc, sc, isc):
    """Batch positions ``lo..hi`` into ``acc``, a stage of :data:`STAGE` rows at
    a time: margins, the loss's block derivative(s), clip factors,
    accumulation.  ``two`` False: terms ``dphi(<x,w>) x + r`` (O1); True:
    ``(dphi(<x,w>) - dphi(<x,wp>)) x + r`` with ``r`` the difference of the psi
    gradients (O2).  ``sc`` is a (6, STAGE) float scratch, ``isc`` a (2,
    STAGE) int64 one, both flattened (one-dimensional).  Returns (sum of clip
    factors, number clipped)."""
    mv = sc[0:STAGE]
    nv = sc[STAGE:2 * STAGE]
    yv = sc[2 * STAGE:3 * STAGE]
    av = sc[3 * STAGE:4 * STAGE]
    cv = sc[4 * STAGE:5 * STAGE]
    sv = sc[5 * STAGE:6 * STAGE]
    ib = isc[0:STAGE]
    bt = isc[STAGE:2 * STAGE]
    cs = 0.0
    k = 0
    s0 = lo
    while s0 < hi:
        s1 = s0 + STAGE
        if s1 > hi:
            s1 = hi
        nb = s1 - s0
        for t in range(s0, s1):
            ib[t - s0] = t if full else idx[t]
        _csr_margins(data, indices, indptr, y, w, wp, two, ib, nb, mv, nv, yv)
        blk(mv[:nb], yv[:nb], av[:nb], cv[:nb], bt[:nb], dphi)
        if two:
            blk(nv[:nb], yv[:nb], mv[:nb], cv[:nb], bt[:nb], dphi)
            for u in range(nb):
                av[u] = av[u] - mv[u]
        cc, kk = _csr_stage_scales(data, indices, indptr, nx, ib, nb, r, rr, has_r, ek, clip, clip2, av, cv, sv)
        cs += cc
        k += kk
        _csr_stage_accumulate(data, indices, indptr, ib, nb, cv, sv, acc)
        s0 = s1
    return cs, k


def _csr_clipped_sum(data, indices, indptr, y, nx, idx, full, w, wp, two, r, rp, dphi_ref, blk_ref, clip):
    """:func:`dpreg_kernels.linear_model._clipped_sum` on CSR rows: O1 (``two``
    False: terms ``dphi(<x_i,w>, y_i) x_i + r``) or O2 (``two`` True: the
    per-record gradient differences ``(a_i - a'_i) x_i + (r - rp)``), each
    clipped by the module docstring's norm; ``(sum, n_clipped)``."""
    dphi = dphi_ref.fn
    blk = blk_ref.fn
    n = indptr.shape[0] - 1
    d = w.shape[0]
    b = n if full else idx.shape[0]
    nc = _csr_chunks(indptr, idx, full, b, d)
    step = (b + nc - 1) // nc
    # partial sum, clip factors, clip count per chunk, one-dimensional: the dense kernel's layout
    # (linear_model._clipped_sum, which says why it is written out in both)
    pw = d + 2
    part = np.empty(nc * pw)
    for i in range(nc * pw):
        part[i] = 0.0
    sw = 6 * STAGE
    scr = np.empty(nc * sw)
    iscr = np.empty(nc * 2 * STAGE, dtype=np.int64)
    dr, rr, has_r = _psi_term(r, rp, two)
    ek = _err_coef(d)
    for c in prange(nc):
        lo = c * step
        hi = lo + step
        if hi > b:
            hi = b
        o = c * pw
        cs, k = _csr_chunk(data, indices, indptr, y, nx, idx, full, w, wp, two, dr, rr, has_r, ek, dphi, blk, clip,
                           clip * clip, lo, hi, part[o:o + d], scr[c * sw:(c + 1) * sw],
                           iscr[c * 2 * STAGE:(c + 1) * 2 * STAGE])
        part[o + d] = cs
        part[o + d + 1] = k
    return _reduce_parts(part, nc, d, dr, has_r)


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


def _csr_phi_sum(data, indices, indptr, y, idx, w, phi_ref):
    """Sum over rows ``idx`` of ``phi(<x_i, w>, y_i)``."""
    phi = phi_ref.fn
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


def _csr_hvp_sum(data, indices, indptr, y, idx, w, v, d2phi_ref):
    """Sum over rows ``idx`` of ``d2phi(<x_i,w>, y_i) <x_i, v> x_i``."""
    d2phi = d2phi_ref.fn
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


def _csr_clipped_hessian_sum(data, indices, indptr, y, idx, w, d2phi_ref, clip):
    """``sum_{i in idx} s_i h_i x_i x_i^T``, ``s_i = min(1, clip / (|h_i| |x_i|^2))``
    (dense symmetric d x d: small d only); ``(sum, n_clipped)``."""
    d2phi = d2phi_ref.fn
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
_csr_margins = jit_inline(_csr_margins)
_csr_stage_scales = jit_inline(_csr_stage_scales)
_csr_stage_accumulate = jit_inline(_csr_stage_accumulate)
_csr_chunk = jit_inline(_csr_chunk)
#: the clipped sums of both oracles on CSR rows, and their O1/O2 calls (see OracleSum)
clipped_sum = Kernel(types.Tuple((Vec, i8))(*_CSR, Vec, Vec, Idx, types.boolean, Vec, Vec, types.boolean, Vec, Vec,
                                            ScalarFn, BlockFn, f8), _csr_clipped_sum)
grad_sum = OracleSum(clipped_sum, False, 3)
diff_sum = OracleSum(clipped_sum, True, 3)
row_sqnorms = Kernel(Vec(Vec, Idx), _csr_row_sqnorms)
phi_sum = Kernel(f8(*_CSR, Vec, Idx, Vec, ScalarFn), _csr_phi_sum)
hvp_sum = Kernel(Vec(*_CSR, Vec, Idx, Vec, Vec, ScalarFn), _csr_hvp_sum)
clipped_hessian_sum = Kernel(types.Tuple((types.Array(f8, 2, "C"), i8))(*_CSR, Vec, Idx, Vec, ScalarFn, f8),
                             _csr_clipped_hessian_sum)
