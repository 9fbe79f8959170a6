"""Fused per-record kernels for softmax cross-entropy (the ``softmax`` loss).

The model: ``K`` classes, a parameter matrix ``W`` (p x K) over the problem's
p features, held flat and row-major, ``w[j K + k] = W[j, k]`` (D = p K
parameters); logits ``z = W^T x``, probabilities ``pr = softmax(z)`` and the
per-record loss ``f(W; x, y) = log sum_k exp(z_k) - z_y`` for a class index
``y`` in ``0..K-1`` (held as a float, as every label).

Per record the gradient is the outer product ``x g^T`` with ``g = pr - e_y``,
so its norm *factorises*: ``|x g^T|_F = |x| |g|`` - a sum of squares over the
row's non-zeros times one over K numbers, no p x K temporary, no
cancellation.  The gradient difference of the O2 kernel at two points is
``x (pr(W) - pr(W'))^T`` (``e_y`` cancels): norm ``|x| |pr - pr'|``, the
same way.  The Hessian is ``A kron x x^T`` with ``A = diag(pr) - pr pr^T``;
its product with ``V`` is ``x (A V^T x)^T`` (exact), its operator norm
``|A| |x|^2 <= max_k 2 pr_k (1 - pr_k) |x|^2`` (Gershgorin: row k of ``A``
has diagonal ``pr_k (1 - pr_k)`` and off-diagonal sum ``pr_k (1 - pr_k)``).

Rows come in one of two layouts, so dense and CSR data share every kernel:

* dense (``dense`` True): ``data`` is the row-major n x p array flattened
  (a view of a C-contiguous X), ``ind`` is ``arange(p)``, ``ptr`` unused;
  row i is ``data[i p:(i + 1) p]`` at columns ``ind``;
* CSR (``dense`` False): ``data``, ``ind``, ``ptr`` are the CSR arrays
  (int64, sorted column numbers within a row); row i is
  ``data[ptr[i]:ptr[i + 1]]`` at columns ``ind[ptr[i]:ptr[i + 1]]``.

A row costs O(its stored entries x K).  Every kernel, like
:mod:`dpreg_kernels.linear_model`,

* makes one pass over each selected row, fusing logits, softmax, the
  factorised norm, the clip and the accumulation (extra memory O(chunks x D),
  never n x D and never a p x K matrix per record);
* splits the rows into fixed chunks (a function of the batch size alone:
  :func:`softmax_chunks`), runs the chunks under ``prange`` and adds their
  partial sums serially in chunk order: bit-identical for any thread count;
* drops a term whose norm is not finite (counted as clipped);
* draws no random numbers.

Clipping under rounding (privacy rule 1; ``u = 2^-53``).  The term added is
``T_jk = fl(x_j c_k)`` with ``c = g`` (kept) or ``c_k = fl(s g_k)``
(clipped), ``g`` the computed ``pr - e_y`` (or ``pr - pr'``): whatever
rounding made ``g``, the kernel adds exactly this ``g`` scaled, so the bound
concerns the computed ``g``.  ``nx = fl(sum x_j^2)`` and ``gg = fl(sum
g_k^2)`` are sums of non-negative terms (in any order, fastmath's
reassociation included), so ``nx >= |x|^2 (1 - gamma_q)`` and ``gg >= |g|^2
(1 - gamma_K)`` (q the row's stored entries, ``gamma_m = m u / (1 - m u)``);
the decision uses ``gu = fl(nx gg) (1 + (q + K + 32) 2^-50) + 2^-1000``,
which is ``>= |x|^2 |g|^2 (1 + 24 u)`` (products that underflow lose at most
2^-1074 each, covered by 2^-1000).  Kept (``gu <= clip^2``): ``|T| <= (1 + u)
|x| |g| <= clip (1 + u) / sqrt(1 + 24 u) < clip``.  Clipped: ``s = fl(clip /
fl(sqrt(gu))) <= clip (1 + 2.1 u) / sqrt(gu)`` and ``|T| <= (1 + u)^2 s |x| |g|
<= clip (1 + 4.2 u) / sqrt(1 + 24 u) < clip``.  A non-finite ``gu`` (overflow,
NaN or infinite logits) drops the term.  The host passes ``clip (1 -
CLIP_MARGIN)`` on top (:mod:`dpreg.problem`).
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange, types

from .config import MAX_CHUNKS, jit_inline, jit_serial
from .linear_model import Kernel

f8 = types.float64
i8 = types.int64
b1 = types.boolean
Vec = types.Array(f8, 1, "C")
Idx = types.Array(i8, 1, "C")
Mat = types.Array(f8, 2, "C")

#: A record costs about 2 q K flops (q stored entries), K times a linear
#: model's, so chunks are smaller than linear_model's MIN_CHUNK_ROWS: a batch
#: of 256 spreads over 4 chunks.  The split depends on the batch size alone.
MIN_CHUNK_ROWS = 64
#: the dense Hessian kernel keeps one D x D partial per chunk: at most this many
HESSIAN_CHUNKS = 4

_BOUND_FLOOR = 2.0 ** -1000


def _softmax_chunks(b):
    """Number of row chunks for a batch of ``b`` rows (a function of b alone)."""
    c = (b + MIN_CHUNK_ROWS - 1) // MIN_CHUNK_ROWS
    if c > MAX_CHUNKS:
        c = MAX_CHUNKS
    if c < 1:
        c = 1
    return c


softmax_chunks = jit_serial(i8(i8))(_softmax_chunks)


# ----------------------------------------------------------------- row helpers
# Inside the kernels W is held transposed (K x p, ``wt[k p + j] = W[j, k]``), and so are the
# per-chunk accumulators: a logit is a dot product over the row's entries (contiguous for dense
# rows: it vectorises) and an accumulation an axpy per class.  Dense rows go 4 at a time through
# the clipped sum (each row of W^T read once per 4 records, each accumulator row written once
# per 4 records).  Rows, W^T rows and accumulator rows are taken as slices: an index computed as
# ``a + j`` would get numba's negative-index wrap-around test, which kept LLVM from vectorising
# (0.94 against 0.17 ms for the logits of 256 rows at 784 x 10, one thread); CSR column numbers
# index as unsigned for the same reason.  The transposes cost p K per call.
def _row(data, ind, dense, p, ptr, i):
    """(values, column numbers) of row ``i`` (dense: the row, and an empty
    column array - its columns are 0..p-1)."""
    if dense:
        a = i * p
        return data[a:a + p], ind[0:0]
    a = ptr[i]
    e = ptr[i + 1]
    return data[a:e], ind[a:e]


def _transpose_in(w, p, K, wt):
    """``wt[k p + j] = w[j K + k]`` (the kernels' layout of W)."""
    for j in range(p):
        for k in range(K):
            wt[k * p + j] = w[j * K + k]


def _sqnorm(xd):
    """``|x|^2`` of a row's values (a loop that stores nothing)."""
    xx = 0.0
    for t in range(xd.shape[0]):
        v = xd[t]
        xx += v * v
    return xx


def _logits(xd, xi, dense, wt, p, K, z):
    """``z = W^T x`` for one row (dense: values ``xd`` at columns 0..p-1;
    CSR: at columns ``xi``)."""
    for k in range(K):
        wr = wt[k * p:(k + 1) * p]
        s = 0.0
        if dense:
            for j in range(xd.shape[0]):
                s += xd[j] * wr[j]
        else:
            for t in range(xd.shape[0]):
                s += xd[t] * wr[np.uint64(xi[t])]
        z[k] = s


def _logits4(x0, x1, x2, x3, wt, p, K, Z):
    """``Z[u] = W^T x_u`` for four dense rows: each row of W^T read once."""
    for k in range(K):
        wr = wt[k * p:(k + 1) * p]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for j in range(p):
            v = wr[j]
            s0 += x0[j] * v
            s1 += x1[j] * v
            s2 += x2[j] * v
            s3 += x3[j] * v
        Z[0, k] = s0
        Z[1, k] = s1
        Z[2, k] = s2
        Z[3, k] = s3


def _softmax(z, K, pr):
    """``pr = softmax(z)`` (stable: shifted by the largest logit); returns
    ``log sum_k exp(z_k)``.  A NaN or infinite logit makes ``pr`` NaN."""
    mx = z[0]
    for k in range(1, K):
        if z[k] > mx:
            mx = z[k]
    for k in range(K):
        pr[k] = math.exp(z[k] - mx)
    s = 0.0  # summed in a loop that stores nothing: LLVM vectorises it without a run-time overlap
    for k in range(K):  # check, so the order of the sum never depends on where z and pr lie
        s += pr[k]
    inv = 1.0 / s
    for k in range(K):
        pr[k] *= inv
    return mx + math.log(s)


def _accumulate(acc, xd, xi, dense, p, K, c):
    """``acc[k p + j] += c_k x_j`` over one row's entries (transposed layout)."""
    for k in range(K):
        ar = acc[k * p:(k + 1) * p]
        ck = c[k]
        if dense:
            for j in range(xd.shape[0]):
                ar[j] += ck * xd[j]
        else:
            for t in range(xd.shape[0]):
                ar[np.uint64(xi[t])] += ck * xd[t]


def _accumulate4(acc, x0, x1, x2, x3, p, K, C):
    """``acc[k p + j] += sum_u C[u, k] x_u[j]`` for four dense rows."""
    for k in range(K):
        ar = acc[k * p:(k + 1) * p]
        c0 = C[0, k]
        c1 = C[1, k]
        c2 = C[2, k]
        c3 = C[3, k]
        for j in range(p):
            ar[j] += (c0 * x0[j] + c1 * x1[j]) + (c2 * x2[j] + c3 * x3[j])


def _reduce_t(part, nc, p, K):
    """The chunks' transposed partial sums ``part[c D + k p + j]`` added serially
    in chunk order, returned in the public layout ``out[j K + k]``."""
    D = p * K
    out = np.zeros(D)
    for c in range(nc):
        o = c * D
        for k in range(K):
            for j in range(p):
                out[j * K + k] += part[o + k * p + j]
    return out


def _label(v, K):
    """The class index ``v`` holds, or -1 when it is not one of ``0..K-1``
    (never an index out of range, whatever the labels)."""
    if v >= 0.0 and v < K:
        k = np.int64(v)
        if k == v:
            return k
    return np.int64(-1)


def _clip_factor(g2, q, K, clip, clip2):
    """(factor, clipped?) for a term of computed squared norm ``g2 = fl(nx gg)``
    (module docstring): 1 if the rounding-safe bound is inside ``clip^2``, else
    ``clip / sqrt(bound)``, 0 for a non-finite bound."""
    gu = g2 * (1.0 + (q + K + 32) * 2.0 ** -50) + _BOUND_FLOOR
    if gu <= clip2:
        return 1.0, 0
    if gu < np.inf:
        return clip / np.sqrt(gu), 1
    return 0.0, 1


def _coefficients(z, zq, two, yv, K, xx, q, clip, clip2, c, pq):
    """The record's clipped coefficient vector, left in ``c`` (``z``: its
    logits at w, ``zq`` at wp): ``s (pr - e_y)`` (O1) or ``s (pr - pr')`` (O2)
    with ``s`` the clip factor of the term ``x c^T`` (``xx = |x|^2``, ``q`` the
    row's stored entries).  Returns (s, clipped?); s = 0: the term is dropped
    (non-finite norm, or a label that is not a class index)."""
    _softmax(z, K, c)
    if two:
        _softmax(zq, K, pq)
        for k in range(K):
            c[k] = c[k] - pq[k]
    else:
        yi = _label(yv, K)
        if yi < 0:
            return 0.0, 1
        c[yi] -= 1.0
    gg = 0.0  # a loop that stores nothing: its order never depends on where c lies
    for k in range(K):
        gg += c[k] * c[k]
    s, over = _clip_factor(xx * gg, q, K, clip, clip2)
    if s != 1.0:
        for k in range(K):
            c[k] *= s
    return s, over


# ------------------------------------------------------------------ the kernels
def _clipped_sum(data, ind, ptr, dense, p, y, idx, full, w, wp, two, K, clip):
    """The clipped per-record sums of the two oracles for softmax
    cross-entropy (module docstring for the layouts and the clip proof):

    * ``two`` False (O1): ``sum_i min(1, clip/|G_i|) G_i`` with ``G_i = x_i
      (pr_i - e_{y_i})^T`` (``wp`` unused);
    * ``two`` True (O2): the same for ``D_i = x_i (pr_i(w) - pr_i(wp))^T``.

    The batch is every row when ``full`` (``idx`` ignored), else the rows
    ``idx`` (repeats allowed).  A label that is not a class index ``0..K-1``
    drops its term (counted as clipped; the host refuses such labels).
    Dense rows go four at a time (logits, then the four coefficient vectors,
    then one accumulation); a block with a dropped term accumulates its kept
    rows one by one (a non-finite row is never multiplied by 0).  Returns
    ``(sum (p K, row-major), n_clipped)``: the O1 and O2 sensitivities are
    enforced here."""
    n = y.shape[0]
    D = p * K
    b = n if full else idx.shape[0]
    nc = softmax_chunks(b)
    step = (b + nc - 1) // nc
    wt = np.empty(D)
    _transpose_in(w, p, K, wt)
    wpt = np.empty(D if two else 0)
    if two:
        _transpose_in(wp, p, K, wpt)
    part = np.zeros(nc * D)
    ncl = np.zeros(nc, dtype=np.int64)
    clip2 = clip * clip
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c * D:(c + 1) * D]
        Z = np.empty((4, K))
        Zq = np.empty((4, K))
        C = np.empty((4, K))
        pq = np.empty(K)
        sv = np.empty(4)
        k_cl = 0
        t = lo
        while t < hi:
            if dense and t + 4 <= hi:
                i0 = t if full else idx[t]
                i1 = t + 1 if full else idx[t + 1]
                i2 = t + 2 if full else idx[t + 2]
                i3 = t + 3 if full else idx[t + 3]
                x0 = data[i0 * p:(i0 + 1) * p]
                x1 = data[i1 * p:(i1 + 1) * p]
                x2 = data[i2 * p:(i2 + 1) * p]
                x3 = data[i3 * p:(i3 + 1) * p]
                _logits4(x0, x1, x2, x3, wt, p, K, Z)
                if two:
                    _logits4(x0, x1, x2, x3, wpt, p, K, Zq)
                kept = 0
                for u in range(4):
                    iu = i0 if u == 0 else (i1 if u == 1 else (i2 if u == 2 else i3))
                    xu = data[iu * p:(iu + 1) * p]
                    s, over = _coefficients(Z[u], Zq[u], two, y[iu], K, _sqnorm(xu), p, clip, clip2, C[u], pq)
                    k_cl += over
                    sv[u] = s
                    if s != 0.0:
                        kept += 1
                if kept == 4:
                    _accumulate4(acc, x0, x1, x2, x3, p, K, C)
                else:
                    for u in range(4):
                        if sv[u] != 0.0:
                            iu = i0 if u == 0 else (i1 if u == 1 else (i2 if u == 2 else i3))
                            _accumulate(acc, data[iu * p:(iu + 1) * p], ind[0:0], True, p, K, C[u])
                t += 4
                continue
            i = t if full else idx[t]
            xd, xi = _row(data, ind, dense, p, ptr, i)
            _logits(xd, xi, dense, wt, p, K, Z[0])
            if two:
                _logits(xd, xi, dense, wpt, p, K, Zq[0])
            s, over = _coefficients(Z[0], Zq[0], two, y[i], K, _sqnorm(xd), xd.shape[0], clip, clip2, C[0], pq)
            k_cl += over
            if s != 0.0:
                _accumulate(acc, xd, xi, dense, p, K, C[0])
            t += 1
        ncl[c] = k_cl
    nclip = 0
    for c in range(nc):
        nclip += ncl[c]
    return _reduce_t(part, nc, p, K), nclip


def _loss_sum(data, ind, ptr, dense, p, y, idx, w, K):
    """Sum over rows ``idx`` of ``log sum_k exp(z_k) - z_y`` (the loss; NaN for
    a label that is not a class index)."""
    b = idx.shape[0]
    nc = softmax_chunks(b)
    step = (b + nc - 1) // nc
    wt = np.empty(p * K)
    _transpose_in(w, p, K, wt)
    part = np.zeros(nc)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        z = np.empty(K)
        pr = np.empty(K)
        s = 0.0
        for t in range(lo, hi):
            i = idx[t]
            xd, xi = _row(data, ind, dense, p, ptr, i)
            _logits(xd, xi, dense, wt, p, K, z)
            yi = _label(y[i], K)
            s += _softmax(z, K, pr) - (z[yi] if yi >= 0 else np.nan)
        part[c] = s
    tot = 0.0
    for c in range(nc):
        tot += part[c]
    return tot


def _hvp_sum(data, ind, ptr, dense, p, y, idx, w, V, K):
    """Sum over rows ``idx`` of the exact per-record Hessian-vector product
    ``x (A u)^T`` with ``u = V^T x`` and ``A u = pr * u - pr <pr, u>``."""
    D = p * K
    b = idx.shape[0]
    nc = softmax_chunks(b)
    step = (b + nc - 1) // nc
    wt = np.empty(D)
    _transpose_in(w, p, K, wt)
    vt = np.empty(D)
    _transpose_in(V, p, K, vt)
    part = np.zeros(nc * D)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c * D:(c + 1) * D]
        z = np.empty(K)
        u = np.empty(K)
        pr = np.empty(K)
        for t in range(lo, hi):
            i = idx[t]
            xd, xi = _row(data, ind, dense, p, ptr, i)
            _logits(xd, xi, dense, wt, p, K, z)
            _logits(xd, xi, dense, vt, p, K, u)
            _softmax(z, K, pr)
            pu = 0.0
            for k in range(K):
                pu += pr[k] * u[k]
            for k in range(K):
                u[k] = pr[k] * (u[k] - pu)
            _accumulate(acc, xd, xi, dense, p, K, u)
    return _reduce_t(part, nc, p, K)


def _clipped_hessian_sum(data, ind, ptr, dense, p, y, idx, w, K, clip):
    """``sum_{i in idx} s_i A_i kron x_i x_i^T`` (dense D x D, symmetric) with
    ``A_i = diag(pr_i) - pr_i pr_i^T`` as computed (entries ``fl(-pr_k pr_l)``,
    plus ``pr_k`` on the diagonal: exactly the entries added) and ``s_i =
    min(1, clip / bound_i)``, ``bound_i = (max row sum of |A_i|) |x_i|^2 (1 +
    (q + K + 8) 2^-51)``.  For a symmetric matrix the largest absolute row sum
    bounds the operator norm; the added term's entries are those of ``s A kron
    x x^T`` each within 3 u relative, so its operator norm is at most ``(1 +
    3 u) s |A| |x|^2``, and the factor covers that and the rounding of
    ``|x|^2`` and of the row sums: every term added has operator norm at most
    ``clip``; a non-finite bound drops the term.  Returns ``(sum,
    n_clipped)``; ``clip = inf``: the exact data Hessian.  At most
    :data:`HESSIAN_CHUNKS` partial D x D sums (the host bounds D)."""
    D = p * K
    b = idx.shape[0]
    nc = softmax_chunks(b)
    if nc > HESSIAN_CHUNKS:
        nc = HESSIAN_CHUNKS
    step = (b + nc - 1) // nc
    wt = np.empty(D)
    _transpose_in(w, p, K, wt)
    part = np.zeros((nc, D, D))
    ncl = np.zeros(nc, dtype=np.int64)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        H = part[c]
        z = np.empty(K)
        pr = np.empty(K)
        A = np.empty((K, K))
        k_cl = 0
        for t in range(lo, hi):
            i = idx[t]
            xd, xi = _row(data, ind, dense, p, ptr, i)
            q = xd.shape[0]
            xx = _sqnorm(xd)
            _logits(xd, xi, dense, wt, p, K, z)
            _softmax(z, K, pr)
            for k1 in range(K):
                for k2 in range(K):
                    v = -pr[k1] * pr[k2]
                    if k2 == k1:
                        v += pr[k1]
                    A[k1, k2] = v
            mx = 0.0
            for k1 in range(K):
                rs = 0.0  # a loop that stores nothing (see _softmax)
                for k2 in range(K):
                    rs += abs(A[k1, k2])
                if not rs <= mx and mx == mx:  # rs > mx, or rs NaN (kept once seen)
                    mx = rs
            op = mx * xx * (1.0 + (q + K + 8) * 2.0 ** -51)
            s = 1.0
            if not op <= clip:
                k_cl += 1
                s = clip / op if op < np.inf else 0.0
            if s == 0.0:
                continue
            # the upper triangle (row (j1, k1) <= column (j2, k2)): columns are sorted within a row
            for t1 in range(q):
                v1 = s * xd[t1]
                r1 = (t1 if dense else xi[t1]) * K
                for t2 in range(t1, q):
                    v12 = v1 * xd[t2]
                    r2 = (t2 if dense else xi[t2]) * K
                    for k1 in range(K):
                        k0 = k1 if t2 == t1 else 0
                        for k2 in range(k0, K):
                            H[r1 + k1, r2 + k2] += v12 * A[k1, k2]
        ncl[c] = k_cl
    out = np.zeros((D, D))
    nclip = 0
    for c in range(nc):
        for r in range(D):
            for q in range(r, D):
                out[r, q] += part[c, r, q]
        nclip += ncl[c]
    for r in range(D):
        for q in range(r):
            out[r, q] = out[q, r]
    return out, nclip


_row = jit_inline(_row)
_transpose_in = jit_inline(_transpose_in)
_sqnorm = jit_inline(_sqnorm)
_logits = jit_inline(_logits)
_logits4 = jit_inline(_logits4)
_softmax = jit_inline(_softmax)
_accumulate = jit_inline(_accumulate)
_accumulate4 = jit_inline(_accumulate4)
_reduce_t = jit_inline(_reduce_t)
_coefficients = jit_inline(_coefficients)
_clip_factor = jit_inline(_clip_factor)
_label = jit_inline(_label)

_ROWS = (Vec, Idx, Idx, b1, i8, Vec)  # data, ind, ptr, dense, p, y
_SUM_SIG = types.Tuple((Vec, i8))(*_ROWS, Idx, b1, Vec, Vec, b1, i8, f8)
_LOSS_SIG = f8(*_ROWS, Idx, Vec, i8)
_HVP_SIG = Vec(*_ROWS, Idx, Vec, Vec, i8)
_HESS_SIG = types.Tuple((Mat, i8))(*_ROWS, Idx, Vec, i8, f8)

#: O1 (``two`` False) and O2 (``two`` True): one compiled kernel for both
clipped_sum = Kernel(_SUM_SIG, _clipped_sum)
loss_sum = Kernel(_LOSS_SIG, _loss_sum)
hvp_sum = Kernel(_HVP_SIG, _hvp_sum)
clipped_hessian_sum = Kernel(_HESS_SIG, _clipped_hessian_sum)
