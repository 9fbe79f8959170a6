"""Fused per-sample kernels for linear-model losses.

A *linear-model loss* is ``f(w; x, y) = phi(<x, w>, y) + psi(w)``: the data enter
through the margin ``m = <x, w>`` only, and ``psi`` is a data-independent term
(regulariser, or the ``1/2(|w|^2 + sin|w|^2)`` of the warm-start paper's synthetic
loss).  Its per-sample gradient is ``a(m, y) x + r`` with ``a = dphi/dm`` and
``r = grad psi(w)``, so every per-sample quantity the algorithms need follows
from two dot products per row (``<x,w>``, ``<x,r>``), the squared row norm
``|x|^2`` (computed once per data set by :func:`row_sqnorms`: O(n) memory) and
one scalar call.  The loss supplies ``phi``, ``dphi`` and ``d2phi`` as compiled scalar
functions with the signature :data:`SCALAR_SIG`, and optionally a block form of
``dphi`` (:data:`BLOCK_SIG`: a stage of margins at once, vectorised);  the
kernels here take them as first-class function arguments, so adding a loss
adds no loop and no recompilation (the kernels are compiled once, from
explicit signatures, and cached on disk).

Every kernel

* reads each selected row of ``X`` from memory once (the hot kernels read a
  stage of rows twice, the second time from cache);
* splits the selected rows into fixed chunks (:func:`n_chunks`), runs the chunks
  under ``prange`` and keeps one partial sum per chunk, then adds the partials
  serially in chunk order: peak extra memory is O(chunks x d), never (n x d),
  and the result is bit-identical for every thread count;
* draws no random numbers (noise is added by the caller, outside).

Shapes: ``X`` is ``float64[n, d]`` C-contiguous, ``y`` ``float64[n]``, ``idx``
``int64[b]`` row numbers (``arange(n)`` for the full batch, or any array with
``full=True`` in the two hot kernels), vectors ``float64[d]``.

The hot kernels are O1 (:data:`grad_sum`) and O2 (:data:`diff_sum`), one
compiled kernel :func:`_clipped_sum`; measured choices (benchmarks/,
docs/benchmarks.md): stages of up to 256 rows - margins, the loss's block
derivative with a vectorised ``exp`` (:mod:`dpreg_kernels.vmath`), clip
factors, accumulation - (IJCNN1 49,990 x 22, one thread: about 15 ns per row for
O1 and O2, 30-40 % less than a kernel that finishes one row at a time), 4-row blocks
within each pass (about 30 % less time on 4,096 sampled rows at d = 1,000),
precomputed row norms (-13 % at d = 1,000), software prefetch for gathers
(not for consecutive rows: :data:`SHORT_ROW`), no branch inside a vectorised loop (a zero row selected for
dropped terms, or a per-row full/gather test, made the loops 4x slower),
fastmath without nnan/ninf (1.7x; the overflow guards stay).  float32 is not offered
(measured barely faster than float64).  The thread count is never read inside a kernel (that would
defeat numba's cache); chunking fixes the result whatever it is.
"""
from __future__ import annotations

import time

import numpy as np
from numba import prange, types

from . import config
from .config import BLOCK, MAX_CHUNKS, MIN_CHUNK_ROWS, jit_inline, jit_parallel, jit_serial
from .function_ref import FunctionRef, RefFunctionType, FunctionRefType, as_ref  # noqa: F401 (FunctionRef: re-exported)
from .intrinsics import prefetch

f8 = types.float64
i8 = types.int64
SCALAR_SIG = f8(f8, f8)
#: a loss's scalar function as a first-class function (what a block function gets)
ScalarFunction = types.FunctionType(SCALAR_SIG)
#: numba type of a kernel's argument for a loss's scalar function: a
#: :class:`~dpreg_kernels.function_ref.FunctionRef` (unboxed in one pointer read;
#: :func:`scalar_ref`), whose ``fn`` the kernel calls
ScalarFn = RefFunctionType(SCALAR_SIG)
Mat = types.Array(f8, 2, "C")
Vec = types.Array(f8, 1, "C")
Idx = types.Array(i8, 1, "C")
#: a loss's block function ``f(m, y, out, work, bits, scalar)``: ``out[i] =
#: scalar(m[i], y[i])`` for i over ``m.shape[0]``, with a float and an int64
#: scratch at least as long (``work``, ``bits``); ``scalar`` is the loss's
#: scalar function (a first-class function), which a vectorised block function
#: does not need to call
BLOCK_SIG = types.none(Vec, Vec, Vec, Vec, Idx, ScalarFunction)
#: numba type of a kernel's argument for a loss's block function (a
#: :class:`~dpreg_kernels.function_ref.FunctionRef`; :func:`block_ref`)
BlockFn = RefFunctionType(BLOCK_SIG)


def _n_chunks(b):
    """Number of row chunks for a batch of ``b`` rows: a function of b alone."""
    c = (b + MIN_CHUNK_ROWS - 1) // MIN_CHUNK_ROWS
    if c > MAX_CHUNKS:
        c = MAX_CHUNKS
    if c < 1:
        c = 1
    return c


n_chunks = jit_serial(i8(i8))(_n_chunks)


#: Rows shorter than this are "short": little work per row, so the kernels
#: prefetch two blocks ahead of a gather (one block for long rows).  A stage of
#: consecutive rows (the full batch, whether passed as ``full`` or as row
#: numbers) is not prefetched: the hardware prefetcher follows it, and software
#: prefetches over consecutive rows were measured to cost time or to be neutral
#: (one thread, d = 22 to 123, 4 to 128 MB of rows).
SHORT_ROW = 128


def _prefetch_row(xq):
    d = xq.shape[0]
    for j in range(0, d, 8):
        prefetch(xq, j)
    prefetch(xq, d - 1)


#: Clip decision under rounding.  The squared norm of a
#: term ``v = a x + r`` is evaluated expanded, ``g = a^2 |x|^2 + 2 a <x,r> + |r|^2``,
#: which cancels when ``|a x| ~ |r| >> |v|``: the computed ``g`` can be far below
#: ``|v|^2``.  The kernels therefore decide on an upper bound
#:   ``gu = g + (d + 8) 2^-51 t + 2^-1000``,  ``t = a^2 |x|^2 + |r|^2``  (both as computed)
#: and scale clipped terms by ``clip / (sqrt(gu) (1 + 2^-50) + 2^-50 sqrt(t))``.
#: Proof (u = 2^-53 the unit roundoff; numbers are the computed floats a, x, r):
#: (i) |x|^2, <x,r>, |r|^2 are sums of d products, so in any summation order
#: (fastmath may reassociate or contract; that only removes roundings) each has
#: absolute error <= gamma_d times the sum of |products| (gamma_k = k u/(1-k u)),
#: and <x,r>'s is <= gamma_d |x||r|; three products and two sums more give
#: |g - |v|^2| <= gamma_(d+5) (a^2|x|^2 + 2|a||x||r| + |r|^2) <= 2 gamma_(d+5) (a^2|x|^2 + |r|^2),
#: i.e. at most 2 (d+6) u t: half the added (d + 8) 2^-51 t = 4 (d+8) u t.  Products
#: that underflow lose at most 2^-1074 each, covered by 2^-1000.  So
#: gu >= |v|^2 + 2 (d+8) u t (1 - 2u) >= |v|^2 (1 + 8u), using t >= |v|^2 / 2 (1 - gamma_(d+1)).
#: (ii) Kept term (gu <= fl(clip^2) <= clip^2 (1 + u)): it is added as fl(fl(a x_j) + r_j),
#: within 2.9 u sqrt(t) of v in norm; with tau = t / clip^2, (i) gives |v|^2 / clip^2 <=
#: min(2 tau (1 + gamma_(d+1)), 1 + u - 2 (d+8) u tau (1 - 2u)), and sqrt of that + 2.9 u sqrt(tau)
#: < 1 for every tau (tau <= 0.45: sqrt(0.91) + 2u; tau > 0.45: sqrt(1 - x) <= 1 - x/2 and
#: (d+8) tau - 1/2 > 2.9 sqrt(tau)).
#: (iii) Clipped term: s = fl(clip / B) <= clip (1 + 6u) / B, the term added is
#: fl(fl(s a) x_j) + fl(s r_j) = s v + e with |e| <= s (u |a||x| + 2.9 u sqrt(t)) <= 4 u s sqrt(t),
#: so |term| <= clip (1 + 6u) (sqrt(gu) + 4u sqrt(t)) / (sqrt(gu) (1 + 8u) + 8u sqrt(t)) <= clip.
#: Overflow or NaN anywhere makes gu infinite or NaN: the term is dropped (s = 0).
#: Cost: three flops per row; the second square root runs for clipped rows only.
_BOUND_FLOOR = 2.0 ** -1000
_SCALE_SLACK = 2.0 ** -50


def _err_coef(d):
    """Coefficient of ``t`` in the clip decision's rounding bound (see above)."""
    return (d + 8) * 2.0 ** -51


def _scale(g2, t, clip, clip2):
    """Clip factor of a per-record term whose squared norm is at most ``g2``
    (the rounding-safe bound ``gu`` above; ``t = a^2|x|^2 + |r|^2``):
    1 if ``g2 <= clip^2``, else ``clip / (sqrt(g2)(1 + 2^-50) + 2^-50 sqrt(t))``,
    0 (term dropped) when the bound overflowed or is NaN - so the term the
    kernel adds never has norm above ``clip`` (proof above)."""
    if g2 <= clip2:
        return 1.0
    if g2 < np.inf:
        return clip / (np.sqrt(g2) * (1.0 + _SCALE_SLACK) + _SCALE_SLACK * np.sqrt(t))
    return 0.0


def _over(g2, clip2):
    """1 if a term of squared-norm bound ``g2`` counts as clipped (or dropped),
    else 0 - a diagnostic: the bound's underflow floor alone does not count
    (a zero term at clip 0 is scaled to zero, as it is, but not counted)."""
    if g2 - _BOUND_FLOOR <= clip2:
        return 0
    return 1


#: Rows staged together (at most): the kernels compute the margins of a stage
#: of rows, then the loss derivative of the whole stage in one call of the
#: loss's block function (vectorised ``exp`` for the built-in losses:
#: :mod:`dpreg_kernels.vmath`), then the clip factors, then accumulate the
#: stage (measured: module docstring); the 4-row blocking of each pass stays.  Stages hold at most
#: STAGE_BYTES of rows so that the accumulation re-reads them from L2.
#: 256 rows: measured 10-16 % faster than 64-row stages for serial O1 over the full batch at
#: d = 22 to 123 (one thread), the same at d = 1,000 (its stages are capped by STAGE_BYTES) and
#: on 256-row batches (one stage either way).
STAGE: int = 256
STAGE_BYTES: int = 1 << 18


def _psi_term(r, rp, two):
    """The data-independent part of the clipped terms: ``dr = r - rp`` (O2,
    ``two``) or ``r`` (O1), its squared norm, and whether it is non-zero in
    some coordinate (exactly: a ``dr`` that is 0 in every coordinate
    contributes nothing, so its dot products are skipped)."""
    d = r.shape[0]
    dr = np.empty(d)
    rr = 0.0
    nonzero = False
    for j in range(d):
        v = r[j] - rp[j] if two else r[j]
        dr[j] = v
        rr += v * v
        if v != 0.0:
            nonzero = True
    return dr, rr, nonzero


def _margins(X, w, wp, two, ib, nb, pf, mv, nv):
    """``mv[u] = <x_ib[u], w>`` for ``u < nb`` and, when ``two`` (the O2
    kernel), ``nv[u] = <x_ib[u], wp>`` in the same pass over the row; 4 rows
    per pass over ``d``; rows ``pf`` positions ahead are prefetched (``pf =
    0``: none).  One function for both forms: it compiles once."""
    if two:
        d = X.shape[1]
        u = 0
        while u + BLOCK <= nb:
            if pf > 0 and u + pf + BLOCK <= nb:
                for q in range(u + pf, u + pf + BLOCK):
                    _prefetch_row(X[ib[q]])
            x0 = X[ib[u]]
            x1 = X[ib[u + 1]]
            x2 = X[ib[u + 2]]
            x3 = X[ib[u + 3]]
            m0 = 0.0
            m1 = 0.0
            m2 = 0.0
            m3 = 0.0
            n0 = 0.0
            n1 = 0.0
            n2 = 0.0
            n3 = 0.0
            for j in range(d):
                wj = w[j]
                uj = wp[j]
                v0 = x0[j]
                v1 = x1[j]
                v2 = x2[j]
                v3 = x3[j]
                m0 += v0 * wj
                m1 += v1 * wj
                m2 += v2 * wj
                m3 += v3 * wj
                n0 += v0 * uj
                n1 += v1 * uj
                n2 += v2 * uj
                n3 += v3 * uj
            mv[u] = m0
            mv[u + 1] = m1
            mv[u + 2] = m2
            mv[u + 3] = m3
            nv[u] = n0
            nv[u + 1] = n1
            nv[u + 2] = n2
            nv[u + 3] = n3
            u += BLOCK
        while u < nb:
            xi = X[ib[u]]
            m = 0.0
            mp = 0.0
            for j in range(d):
                v = xi[j]
                m += v * w[j]
                mp += v * wp[j]
            mv[u] = m
            nv[u] = mp
            u += 1
        return
    d = X.shape[1]
    u = 0
    while u + BLOCK <= nb:
        if pf > 0 and u + pf + BLOCK <= nb:
            for q in range(u + pf, u + pf + BLOCK):
                _prefetch_row(X[ib[q]])
        x0 = X[ib[u]]
        x1 = X[ib[u + 1]]
        x2 = X[ib[u + 2]]
        x3 = X[ib[u + 3]]
        m0 = 0.0
        m1 = 0.0
        m2 = 0.0
        m3 = 0.0
        for j in range(d):
            wj = w[j]
            m0 += x0[j] * wj
            m1 += x1[j] * wj
            m2 += x2[j] * wj
            m3 += x3[j] * wj
        mv[u] = m0
        mv[u + 1] = m1
        mv[u + 2] = m2
        mv[u + 3] = m3
        u += BLOCK
    while u < nb:
        xi = X[ib[u]]
        m = 0.0
        for j in range(d):
            m += xi[j] * w[j]
        mv[u] = m
        u += 1


def _accumulate_kept(X, ib, nb, cv, acc):
    """``acc += sum_u cv[u] x_ib[u]`` over ``u < nb``, 4 rows per pass over
    ``d`` (the rows are still in cache from the margins pass)."""
    d = X.shape[1]
    u = 0
    while u + BLOCK <= nb:
        x0 = X[ib[u]]
        x1 = X[ib[u + 1]]
        x2 = X[ib[u + 2]]
        x3 = X[ib[u + 3]]
        c0 = cv[u]
        c1 = cv[u + 1]
        c2 = cv[u + 2]
        c3 = cv[u + 3]
        for j in range(d):
            acc[j] += (c0 * x0[j] + c1 * x1[j]) + (c2 * x2[j] + c3 * x3[j])
        u += BLOCK
    while u < nb:
        xi = X[ib[u]]
        c = cv[u]
        for j in range(d):
            acc[j] += c * xi[j]
        u += 1


def _stage_finish(X, nx, ib, nb, rr, has_r, ek, clip, clip2, av, pv, cv, acc):
    """The rest of a stage once its derivatives are known (``av[u] = a``,
    ``pv[u] = <x, r>`` when ``has_r``): the clip factor s of each term ``a x +
    r`` (the rounding-safe bound of :func:`_scale`; 0 drops the term, and
    ``pv[u]`` then holds s), then ``acc += sum_u s a x_u`` 4 rows per pass over
    ``d`` while the rows are in cache.  A dropped term never enters, so a
    non-finite row is never read (0 * inf): a stage with one is first
    compacted to its kept rows (``ib`` and ``cv`` rewritten) - a test for drops
    inside the 4-row loop, or a zero row selected there, kept LLVM from
    vectorising it (12.5 against 3.8 ns per row at d = 23).  Returns (sum of
    the clip factors, number clipped)."""
    cs = 0.0
    k = 0
    kept = nb - nb  # an int64 variable, not the literal 0 (numba would compile callees for both)
    for u in range(nb):
        a = av[u]
        q = a * a * nx[ib[u]]
        tq = q + rr
        if has_r:
            g = (q + 2.0 * a * pv[u] + rr) + ek * tq + _BOUND_FLOOR
        else:
            g = q + ek * tq + _BOUND_FLOOR
        k += _over(g, clip2)
        s = _scale(g, tq, clip, clip2)
        cs += s
        pv[u] = s
        if s != 0.0:
            cv[u] = s * a
            kept += 1
    if kept < nb:
        kept = nb - nb
        for u in range(nb):
            if pv[u] != 0.0:
                ib[kept] = ib[u]
                cv[kept] = cv[u]
                kept += 1
    _accumulate_kept(X, ib, kept, cv, acc)
    return cs, k


def _chunk(X, y, nx, idx, full, w, wp, two, r, rr, has_r, dphi, blk, clip, clip2, pf, lo, hi, acc, scr, iscr, st):
    """Rows ``lo..hi`` of the batch into ``acc``, a stage of ``st`` rows at a
    time: margins, the loss's block derivative, clip factors, accumulation.
    ``two`` False: terms ``dphi(<x,w>) x + r`` (O1); True: ``(dphi(<x,w>) -
    dphi(<x,wp>)) x + r`` with ``r`` the difference of the psi gradients (O2:
    both margins in one pass over the row).  ``<x, r>`` is a second pass over
    the cached rows, only when ``has_r``.  ``scr`` is a float scratch of 6 st
    elements, ``iscr`` an int64 one of 2 st.  Returns (sum of clip factors, number
    clipped).  One chunk of :func:`_clipped_sum` (a
    separate function so numba's parallel passes see a small loop body; one
    for both, so it compiles once: the O1/O2 branch is per stage)."""
    ek = _err_coef(X.shape[1])
    not_two = two and not two  # False, as a variable (a literal would compile _margins twice)
    mv = scr[0:st]
    nv = scr[st:2 * st]
    pv = scr[2 * st:3 * st]
    yv = scr[3 * st:4 * st]
    av = scr[4 * st:5 * st]
    cv = scr[5 * st:6 * st]
    ib = iscr[0:st]
    bits = iscr[st:2 * st]
    cs = 0.0
    k = 0
    s0 = lo
    while s0 < hi:
        s1 = s0 + st
        if s1 > hi:
            s1 = hi
        nb = s1 - s0
        for t in range(s0, s1):  # the stage's rows as one index array: no full/gather branch in the passes
            ib[t - s0] = t if full else idx[t]
        # consecutive rows (the full batch, also when passed as row numbers): the hardware
        # prefetcher follows them, and software prefetches only cost (SHORT_ROW)
        pfs = pf if ib[nb - 1] - ib[0] != nb - 1 else 0
        _margins(X, w, wp, two, ib, nb, pfs, mv, nv)
        if has_r:
            _margins(X, r, r, not_two, ib, nb, pfs, pv, nv)
        for u in range(nb):
            yv[u] = y[ib[u]]
        blk(mv[:nb], yv[:nb], av[:nb], cv[:nb], bits[:nb], dphi)
        if two:
            blk(nv[:nb], yv[:nb], mv[:nb], cv[:nb], bits[:nb], dphi)
            for u in range(nb):
                av[u] = av[u] - mv[u]
        c, kk = _stage_finish(X, nx, ib, nb, rr, has_r, ek, clip, clip2, av, pv, cv, acc)
        cs += c
        k += kk
        s0 = s1
    return cs, k


def _clipped_sum(X, y, nx, idx, full, w, wp, two, r, rp, dphi_ref, blk_ref, clip):
    """The clipped per-record sums of the algorithms' two oracles, O1 and O2:

    * ``two`` False (O1): the sum over the batch of ``min(1, clip/|g_i|) g_i``
      with ``g_i = dphi(<x_i,w>, y_i) x_i + r`` (``r`` = gradient of the
      data-independent term psi at w; ``wp``, ``rp`` unused);
    * ``two`` True (O2): the same for the per-record gradient difference
      ``D_i = grad f(w; z_i) - grad f(wp; z_i) = (a_i - a'_i) x_i + (r - rp)``
      (``a_i = dphi(<x_i,w>, y_i)``, ``a'_i = dphi(<x_i,wp>, y_i)``); for a
      linear-model loss ``D_i`` is a scalar times ``x_i`` plus a constant, so
      ``X`` is read once from memory.

    The batch is all rows ``0..n-1`` when ``full`` (``idx`` ignored), else the
    rows ``idx`` (repeats allowed).  ``nx[i] = |x_i|^2`` for every row of ``X``
    (:func:`row_sqnorms`).  ``blk`` is the loss's block function for ``dphi``
    (``blk(m, y, out, work, bits, dphi)`` sets ``out[i] = dphi(m[i], y[i])``;
    :func:`scalar_block_fn` for a loss without one); both come as references
    (:func:`scalar_ref`, :func:`block_ref`).  Returns ``(sum,
    n_clipped)``.  Each term has norm at most ``clip`` whatever the data (a
    non-finite norm drops the term and counts as clipped): this is where the
    O1 and O2 sensitivities are enforced.

    Rows are staged (:data:`STAGE`): margins of a stage 4 rows at a time, the
    stage's loss derivatives in one block call, clip factors, then the
    accumulation 4 rows at a time while the rows are in cache; rows a few
    positions ahead are prefetched (gathers, and short rows).  One kernel for
    both oracles, so it compiles once (the O1/O2 branch is per stage; the
    Python names :data:`grad_sum` and :data:`diff_sum` call it).
    """
    dphi = dphi_ref.fn
    blk = blk_ref.fn
    n = X.shape[0]
    d = X.shape[1]
    b = n if full else idx.shape[0]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    # rows per stage: STAGE, fewer for long rows (at most STAGE_BYTES of rows, a multiple of BLOCK)
    st = STAGE_BYTES // (8 * d) // BLOCK * BLOCK if d > 0 else STAGE
    if st > STAGE:
        st = STAGE
    if st < BLOCK:
        st = BLOCK
    # rows ahead that the margins pass prefetches in a gathered stage (none in a stage of
    # consecutive rows: SHORT_ROW)
    pf = 2 * BLOCK if d < SHORT_ROW else BLOCK
    # per chunk (a stride of d + 2): the partial sum, then its sum of clip factors (multiplies r)
    # and its clip count (a float: exact below 2^53).  One-dimensional allocations and
    # explicit zeroing: every allocation shape, dtype or np.zeros compiles one more numba
    # overload on the first run (0.03-0.26 s of CPU each).  The CSR kernel
    # (sparse._csr_clipped_sum) lays out and cuts its memory the same way, written out there
    # too: shared numba helpers for both added 0.4-0.6 s to the first run's compile
    pw = d + 2
    part = np.empty(nc * pw)
    for i in range(nc * pw):
        part[i] = 0.0
    scr = np.empty(nc * 6 * st)
    iscr = np.empty(nc * 2 * st, dtype=np.int64)
    dr, rr, has_r = _psi_term(r, rp, two)
    clip2 = clip * clip
    for c in prange(nc):
        lo = c * step
        hi = lo + step
        if hi > b:
            hi = b
        o = c * pw
        cs, k = _chunk(X, y, nx, idx, full, w, wp, two, dr, rr, has_r, dphi, blk, clip, clip2, pf, lo, hi,
                       part[o:o + d], scr[c * 6 * st:(c + 1) * 6 * st], iscr[c * 2 * st:(c + 1) * 2 * st], st)
        part[o + d] = cs
        part[o + d + 1] = k
    return _reduce_parts(part, nc, d, dr, has_r)


def _reduce_parts(part, nc, d, r, has_r):
    """``(sum of the chunks' partial sums + (sum of their clip factors) r,
    total clipped)`` from ``part[c (d + 2):(c + 1)(d + 2)] = (partial sum (d),
    clip factors, clip count)`` for the ``nc`` chunks, added serially in chunk
    order (bit-identical for every thread count); ``r`` enters only when
    ``has_r``."""
    pw = d + 2
    out = np.empty(d)
    for j in range(d):
        out[j] = 0.0
    tot = 0.0
    nclip = 0
    for c in range(nc):
        o = c * pw
        for j in range(d):
            out[j] += part[o + j]
        tot += part[o + d]
        nclip += np.int64(part[o + d + 1])
    if has_r:
        for j in range(d):
            out[j] += tot * r[j]
    return out, nclip


def _scalar_block(m, y, out, work, bits, f):
    """The block function of a loss that has none: ``out[i] = f(m[i], y[i])``
    for i over ``m.shape[0]`` (``work``, ``bits``: unused scratch)."""
    for i in range(m.shape[0]):
        out[i] = f(m[i], y[i])


def _row_sqnorms(X):
    """``|x_i|^2`` for every row (computed once per data set, O(n) memory)."""
    n = X.shape[0]
    d = X.shape[1]
    out = np.empty(n)
    for i in prange(n):
        xi = X[i]
        s = 0.0
        for j in range(d):
            s += xi[j] * xi[j]
        out[i] = s
    return out


def _phi_sum(X, y, idx, w, phi_ref):
    """Sum over rows of ``phi(<x_i, w>, y_i)`` (the data part of the loss)."""
    phi = phi_ref.fn
    b = idx.shape[0]
    d = X.shape[1]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.empty(nc)
    for c in prange(nc):
        lo = c * step
        hi = lo + step
        if hi > b:
            hi = b
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


def _hvp_sum(X, y, idx, w, v, d2phi_ref):
    """Sum over rows of ``d2phi(<x_i,w>, y_i) <x_i, v> x_i`` (data part of the
    Hessian-vector product)."""
    d2phi = d2phi_ref.fn
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


def _clipped_hessian_sum(X, y, idx, w, d2phi_ref, clip):
    """``sum_{i in idx} s_i h_i x_i x_i^T`` with ``h_i = d2phi(<x_i,w>, y_i)`` and
    ``s_i = min(1, clip / (|h_i| |x_i|^2))``: every term has operator norm at
    most ``clip``.  Returns ``(dense symmetric d x d sum, n_clipped)``."""
    d2phi = d2phi_ref.fn
    b = idx.shape[0]
    d = X.shape[1]
    nc = n_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, d, d))
    ncl = np.zeros(nc, dtype=np.int64)
    hk = 1.0 + (d + 4) * 2.0 ** -51
    for c in prange(nc):
        lo_r = c * step
        hi_r = min(b, lo_r + step)
        acc = part[c]
        k_cl = 0
        for t in range(lo_r, hi_r):
            i = idx[t]
            xi = X[i]
            m = 0.0
            xx = 0.0
            for j in range(d):
                m += xi[j] * w[j]
                xx += xi[j] * xi[j]
            h = d2phi(m, y[i])
            # |h| |x|^2 <= op: xx has relative error <= gamma_d, op one rounding
            # more; the margin (d+4) 2^-51 > 2 gamma_(d+2) also absorbs the rounding
            # of h * (clip / op) and of the products added, so every term added
            # has operator (even Frobenius) norm <= clip
            op = abs(h) * xx * hk
            if not op <= clip:
                k_cl += 1
                # an operator norm that overflowed or is NaN drops the term
                h = h * (clip / op) if op < np.inf else 0.0
            for j in range(d):
                hj = h * xi[j]
                for k in range(j, d):
                    acc[j, k] += hj * xi[k]
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


_SUM_SIG = types.Tuple((Vec, i8))(Mat, Vec, Vec, Idx, types.boolean, Vec, Vec, types.boolean, Vec, Vec, ScalarFn,
                                   BlockFn, f8)
_PHI_SIG = f8(Mat, Vec, Idx, Vec, ScalarFn)
_HVP_SIG = Vec(Mat, Vec, Idx, Vec, Vec, ScalarFn)
_HESS_SIG = types.Tuple((types.Array(f8, 2, "C"), i8))(Mat, Vec, Idx, Vec, ScalarFn, f8)

_prefetch_row = jit_inline(_prefetch_row)
_err_coef = jit_inline(_err_coef)
_scale = jit_inline(_scale)
_over = jit_inline(_over)
_psi_term = jit_inline(_psi_term)
_margins = jit_inline(_margins)
_accumulate_kept = jit_inline(_accumulate_kept)
_stage_finish = jit_inline(_stage_finish)
_chunk = jit_inline(_chunk)
_reduce_parts = jit_inline(_reduce_parts)


class Kernel:
    """One kernel in two variants compiled from the same undecorated function:
    ``serial`` and ``parallel`` (same fixed chunking, so bit-identical
    results).  Each variant is compiled - or loaded from numba's cache - on
    first use, so a run pays only for the variants it calls (a small-batch run
    on a small data set never compiles a parallel kernel: the first-run
    compile time).

    Calling the object runs the parallel variant (numba's ordinary dispatch;
    a loss's function may be passed as a compiled function or as a
    reference, :func:`~dpreg_kernels.function_ref.as_ref`).  :meth:`fast`
    returns the variant's compiled entry point, which skips numba's per-call
    argument typing (about 30 us per call, more than the work of a 256-row
    batch): its caller must pass exactly the declared types - C-contiguous
    float64 arrays, int64 row numbers, a Python bool, a Python float and a
    :func:`scalar_ref` / :func:`block_ref` for the loss's functions - as
    :class:`dpreg.problem.Problem` does.

    ``prepare`` (optional) is called once, before the first variant is made: a kernel
    that calls another kernel's compiled variant binds it there (:mod:`dpreg_kernels.sgd`)."""

    def __init__(self, signature, func, prepare=None):
        self.signature, self.py_func = signature, func
        self._prepare = prepare    # called once before a variant is first made (binds what it calls)
        self.name = f"{func.__module__}.{func.__qualname__}"
        self._disp = {}
        self._fast = {}
        self._refs = tuple(a.field_dict["fn"].signature if isinstance(a, FunctionRefType) else None
                           for a in signature.args)
        self.serial_large_s = 0.0  # CPU seconds of serial calls made where parallel was wanted

    def variant(self, parallel: bool):
        """The numba dispatcher of one variant (compiled on first use)."""
        d = self._disp.get(parallel)
        if d is None:
            if self._prepare is not None:
                self._prepare()
                self._prepare = None
            d = (jit_parallel if parallel else jit_serial)(self.signature)(self.py_func)
            self._disp[parallel] = d
            if parallel:
                config.mark_parallel_cached(self.name)
        return d

    @property
    def parallel(self):
        return self.variant(True)

    @property
    def serial(self):
        return self.variant(False)

    def compiled(self):
        """The variants compiled (or loaded) so far, as ``{parallel: dispatcher}``."""
        return dict(self._disp)

    def fast(self, parallel: bool):
        """The compiled entry point of one variant (see the class docstring);
        the dispatcher itself if numba's internals do not expose it."""
        f = self._fast.get(parallel)
        if f is None:
            f = self._fast[parallel] = entry_point(self.variant(parallel))
        return f

    def parallel_ready(self) -> bool:
        """Whether the parallel variant is cheap to have: compiled in this
        process, in numba's on-disk cache (:func:`config.parallel_variant_cached`),
        or its serial calls made in its place (``serial_large_s``) have taken
        :data:`config.PARALLEL_AMORTIZE_S` CPU seconds - the rule of :meth:`pick`."""
        if True in self._disp:
            return True
        return config.parallel_variant_cached(self.name) or self.serial_large_s >= config.PARALLEL_AMORTIZE_S

    def pick(self, want_parallel: bool):
        """The entry point (as :meth:`fast`) for a call whose work does
        (``want_parallel``, :func:`config.want_parallel`) or does not make the
        parallel variant worth running.  The parallel variant is used only
        once it is cheap to have - compiled in this process, or in numba's
        on-disk cache - or once the serial calls made in its place have taken
        :data:`config.PARALLEL_AMORTIZE_S` CPU seconds (then it is compiled): a
        short run never pays for compiling a variant it barely uses."""
        if not want_parallel:
            return self.fast(False)
        f = self._fast.get(True)
        if f is not None:
            return f
        if self.parallel_ready():
            return self.fast(True)
        return self._timed_serial

    def _timed_serial(self, *args):
        serial = self.fast(False)
        t0 = time.thread_time()  # CPU seconds of this thread: what the variant saves, whatever the load
        out = serial(*args)
        self.serial_large_s += time.thread_time() - t0
        return out

    def with_refs(self, args):
        """``args`` with each compiled function passed for a loss's function (a
        :class:`FunctionRef` argument) replaced by a reference to it (:func:`as_ref`)."""
        return tuple(a if sig is None else as_ref(a, sig) for a, sig in zip(args, self._refs)) + args[len(self._refs):]

    def typed(self, parallel: bool):
        """One variant through numba's ordinary dispatch, loss functions passed as
        compiled functions or references (:meth:`with_refs`)."""
        return lambda *args: self.variant(parallel)(*self.with_refs(args))

    def __call__(self, *args):
        return self.variant(True)(*self.with_refs(args))

    def __getattr__(self, name):  # stats, signatures, ... of the parallel variant
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.variant(True), name)


def entry_point(disp):
    """The compiled entry point of a dispatcher compiled for one signature
    (calling it skips numba's per-call argument typing: see :class:`Kernel`):
    its one compile result's ``entry_point``; the dispatcher itself if numba
    does not give one."""
    try:
        (cres,) = disp.overloads.values()
        return cres.entry_point
    except (AttributeError, ValueError):
        return disp


def scalar_ref(dispatcher):
    """:class:`FunctionRef` of a loss's compiled scalar function (:data:`ScalarFn`)."""
    return as_ref(dispatcher, SCALAR_SIG)


def block_ref(dispatcher):
    """:class:`FunctionRef` of a loss's compiled block function (:data:`BLOCK_SIG`, :data:`BlockFn`)."""
    return as_ref(dispatcher, BLOCK_SIG)


class OracleSum:
    """``grad_sum`` (O1) and ``diff_sum`` (O2): the two calls of one clipped-sum
    :class:`Kernel` (:func:`_clipped_sum`), with their own argument lists

    * O1: ``(X, y, nx, idx, full, w, r, dphi, blk, clip)``
    * O2: ``(X, y, nx, idx, full, w, wp, r, rp, dphi, blk, clip)``

    (CSR kernels: ``data, indices, indptr`` in place of ``X``).  Calling,
    :meth:`fast`, :meth:`pick`, :attr:`serial` and :attr:`parallel` behave as
    the kernel's with these arguments; :class:`dpreg.problem.Problem` calls
    the kernel itself."""

    def __init__(self, kernel: "Kernel", two: bool, lead: int):
        self.kernel, self.two, self.lead = kernel, two, lead

    def _args(self, a):
        k = self.lead + 4  # data arrays, y, nx, idx, full
        if self.two:
            return (*a[:k], a[k], a[k + 1], True, *a[k + 2:])
        return (*a[:k], a[k], a[k], False, a[k + 1], a[k + 1], *a[k + 2:])

    def _wrap(self, f):
        return lambda *a: f(*self._args(a))

    def __call__(self, *a):
        return self.kernel(*self._args(a))

    def fast(self, parallel: bool):
        return self._wrap(self.kernel.fast(parallel))

    def pick(self, want_parallel: bool):
        return self._wrap(self.kernel.pick(want_parallel))

    @property
    def serial(self):
        return self._wrap(self.kernel.typed(False))

    @property
    def parallel(self):
        return self._wrap(self.kernel.typed(True))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.kernel, name)


#: the clipped sums of both oracles (see :func:`_clipped_sum`), and their O1/O2 calls
clipped_sum = Kernel(_SUM_SIG, _clipped_sum)
grad_sum = OracleSum(clipped_sum, False, 1)
diff_sum = OracleSum(clipped_sum, True, 1)
row_sqnorms = Kernel(Vec(Mat), _row_sqnorms)
phi_sum = Kernel(_PHI_SIG, _phi_sum)
hvp_sum = Kernel(_HVP_SIG, _hvp_sum)
clipped_hessian_sum = Kernel(_HESS_SIG, _clipped_hessian_sum)


_SCALAR_BLOCK: list = []


def scalar_block_fn():
    """The block function of a loss that has none (loops over its scalar
    function), compiled on first use."""
    if not _SCALAR_BLOCK:
        _SCALAR_BLOCK.append(config.jit_scalar(BLOCK_SIG)(_scalar_block))
    return _SCALAR_BLOCK[0]


def hessian_sum(X, y, idx, w, d2phi):
    """Sum over rows of ``d2phi(<x_i,w>, y_i) x_i x_i^T`` (dense, small d): the
    exact data part of the Hessian, :func:`clipped_hessian_sum` with no clip."""
    return clipped_hessian_sum(X, y, idx, w, d2phi, np.inf)[0]


def clipped_grad_sum(X, y, idx, w, r, dphi, clip, nx=None, blk=None):
    """(sum over rows ``idx`` of per-record gradients clipped to norm ``clip``,
    n_clipped) - the original entry point; :func:`grad_sum` with ``full=False``.
    ``nx`` (:func:`row_sqnorms` of X) is computed when not given; ``blk`` is
    the loss's block function (default :func:`scalar_block_fn`)."""
    if nx is None:
        nx = row_sqnorms(X)
    return grad_sum(X, y, nx, idx, False, w, r, dphi, scalar_block_fn() if blk is None else blk, clip)


def clipped_diff_sum(X, y, idx, w, wp, r, rp, dphi, clip, nx=None, blk=None):
    """(sum over rows ``idx`` of per-record gradient differences clipped to norm
    ``clip``, n_clipped) - the original entry point; :func:`diff_sum` with
    ``full=False``."""
    if nx is None:
        nx = row_sqnorms(X)
    return diff_sum(X, y, nx, idx, False, w, wp, r, rp, dphi, scalar_block_fn() if blk is None else blk, clip)
