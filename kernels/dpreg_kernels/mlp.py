"""Fused per-record kernels for feed-forward networks of any depth (the ``mlp`` loss).

The network: layers ``m = 0 .. L`` map ``a_{m-1}`` (``a_{-1} = x``) to
``z_m = W_m a_{m-1} + b_m``; hidden layers (``m < L``) apply the activation,
``a_m = act(z_m)``; the last layer is linear, ``o = z_L`` (one output, or K).
The layer sizes are an int64 array ``sizes = [p, n_0, ..., n_{L-1}, n_out]``
and the parameters one flat vector, layer after layer, each weight matrix
row-major then its bias:

    w = [W_0 (n_0 x p) | b_0 | W_1 (n_1 x n_0) | b_1 | ... | W_L (n_out x n_{L-1}) | b_L]

(:func:`n_params`).  For one hidden layer and one output this is
``[W | b | v | c]``.  Depth and width are data, not code: one compiled kernel
serves every network.  ``act`` is an integer code (:data:`ACTIVATIONS`), the
per-record loss ``l(o, y)`` (the *head*) another (:data:`HEADS`), with one
real parameter ``hp`` (Huber's delta; ignored by the others):

* ``LOGISTIC``: one output, ``y = +-1``, ``l = log(1 + exp(-y o))``;
* ``SOFTMAX``: K outputs, ``y`` the class index 0..K-1 (a float),
  ``l = log sum_k exp(o_k) - o_y``;
* ``SQUARED``: one output, real ``y``, ``l = (o - y)^2 / 2``;
* ``HUBER``: one output, real ``y``, ``l = r^2/2`` for ``|r| <= hp``, else
  ``hp (|r| - hp/2)``, ``r = o - y`` (its gradient is bounded by hp whatever y).

Per record, backpropagation gives ``delta_m = dl/dz_m`` and the gradient
blocks ``grad W_m = delta_m a_{m-1}^T``, ``grad b_m = delta_m``, so the
squared norm is ``sum_m |delta_m|^2 (|a_{m-1}|^2 + 1)`` - every factor a sum of
squares of the term's own entries (the Frobenius norm of an outer product is
the product of the norms): no cancellation, no gradient formed.  The gradient
*difference* of the O2 kernel between ``w`` and ``wp`` is, in the first
layer, ``(delta_0 - delta_0') x^T`` (``x`` is shared: the same factorised
norm); in the later layers ``delta_m a_{m-1}^T - delta_m' a_{m-1}'^T`` has no
such factorisation, so its entries are formed in per-thread scratch (the
parameters past the first layer: O(D) per chunk) and both the norm and the
accumulated term are read from those stored entries - never from an expanded
``|g|^2 - 2<g,g'> + |g'|^2``, whose cancellation could understate the norm of
what is added.

Every kernel, like :mod:`dpreg_kernels.linear_model`,

* splits the rows into fixed chunks (a function of the batch size alone:
  :func:`mlp_chunks`), runs chunks under ``prange`` and adds the partial sums
  serially in chunk order, so results are bit-identical for every thread count;
* makes one pass over the selected rows, in tiles of :data:`TILE` rows per
  chunk: a tile's rows are gathered, then go through each layer together -
  the layer's products as small matrix products, 4 rows by 4 units per pass
  over a weight row (:func:`_lin_fwd`, :func:`_lin_acc`: a weight row and a
  row of the partial sum are read once per 4 rows), the activation, head,
  backpropagation, norm and clip factor record by record - so memory beyond
  the data is O(chunks x D) for the partial sums plus O(TILE x (p + units))
  per chunk: never an (n x D) matrix;
* drops a term whose norm is not finite (counted as clipped; its rows are
  never read again) and scales the others to norm <= clip;
* draws no random numbers.

Every inner loop indexes views from 0 (``a[j]`` over ``range(n)``, never
``a[o + j]``): numba wraps negative indices, and an index it cannot prove
non-negative makes LLVM's vectorised loop a gather (measured: the first
layer's products at 8.7 against 53 GFlop/s, 784 x 64, one thread).
Reductions (dot products, squared norms) run in loops that store nothing, so
LLVM vectorises them without a run-time overlap check and their order never
depends on where the scratch arrays lie.

The Hessian-vector product is exact: forward-over-reverse (the directional
derivative of the forward and backward passes along ``V``), tile by tile.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange, types

from .config import MAX_CHUNKS, jit_inline
from .linear_model import Kernel
from .vmath import exp_nonpos

f8 = types.float64
i8 = types.int64
Mat = types.Array(f8, 2, "C")
Vec = types.Array(f8, 1, "C")
Idx = types.Array(i8, 1, "C")

#: activation codes
TANH = 0
SOFTPLUS = 1
SIGMOID = 2
SILU = 3
ACTIVATIONS = {"tanh": TANH, "softplus": SOFTPLUS, "sigmoid": SIGMOID, "silu": SILU}

#: head (output loss) codes
LOGISTIC = 0
SOFTMAX = 1
SQUARED = 2
HUBER = 3
HEADS = {"logistic": LOGISTIC, "softmax": SOFTMAX, "squared": SQUARED, "huber": HUBER}

#: Rows per chunk at least (a record costs ~6 D flops); the split depends on
#: the batch size alone.  A batch of 256 makes 4 chunks: partial sums to zero
#: and add up are 4 D floats, and 2 threads still share the work evenly.
MIN_CHUNK_ROWS = 64
#: rows per tile (a chunk is cut into tiles; fixed, so the arithmetic never
#: depends on the thread count)
TILE = 32


def n_params(sizes) -> int:
    """Length of the flat parameter vector for layer sizes ``[p, n_0, ..., n_out]``."""
    return int(sum(int(sizes[m + 1]) * (int(sizes[m]) + 1) for m in range(len(sizes) - 1)))


def _mlp_chunks(b):
    """Number of row chunks for a batch of ``b`` rows (a function of b alone)."""
    c = (b + MIN_CHUNK_ROWS - 1) // MIN_CHUNK_ROWS
    if c > MAX_CHUNKS:
        c = MAX_CHUNKS
    if c < 1:
        c = 1
    return c


# ------------------------------------------------------------------ scalar parts
def _sigm(z):
    """The logistic sigmoid, stable for either sign of z."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _act(z, kind):
    """(act(z), act'(z), act''(z)) for the activation ``kind``."""
    if kind == 0:
        t = math.tanh(z)
        s1 = 1.0 - t * t
        return t, s1, -2.0 * t * s1
    if kind == 1:  # softplus log(1 + e^z), stable; act' = sigmoid(z), act'' = sigmoid (1 - sigmoid)
        if z > 0:
            e = math.exp(-z)
            s = 1.0 / (1.0 + e)
            return z + math.log1p(e), s, s * (1.0 - s)
        e = math.exp(z)
        s = e / (1.0 + e)
        return math.log1p(e), s, s * (1.0 - s)
    s = _sigm(z)
    q = s * (1.0 - s)
    if kind == 2:  # sigmoid
        return s, q, q * (1.0 - 2.0 * s)
    # silu z sigmoid(z): act' = s (1 + z (1 - s)), act'' = s (1 - s) (2 + z (1 - 2s))
    return z * s, s * (1.0 + z * (1.0 - s)), q * (2.0 + z * (1.0 - 2.0 * s))


def _lphi(o, y):
    """Logistic loss log(1 + exp(-y o))."""
    z = y * o
    if z > 0:
        return math.log1p(math.exp(-z))
    return -z + math.log1p(math.exp(z))


def _ldphi(o, y):
    """d/do of the logistic loss: -y sigmoid(-y o)."""
    z = y * o
    if z > 0:
        e = math.exp(-z)
        return -y * e / (1.0 + e)
    return -y / (1.0 + math.exp(z))


def _ld2phi(o, y):
    """d2/do2 of the logistic loss: sigmoid(y o) sigmoid(-y o) (y = +-1)."""
    z = y * o
    if z > 0:
        e = math.exp(-z)
    else:
        e = math.exp(z)
    return e / ((1.0 + e) * (1.0 + e))


def _scale(g2, clip, clip2):
    """Clip factor for a term of squared norm g2: 1, clip/|g|, or 0 (dropped:
    non-finite norm)."""
    if g2 <= clip2:
        return 1.0
    if g2 < np.inf:
        return clip / np.sqrt(g2)
    return 0.0


def _sq(v):
    """|v|^2 of a view (a loop that stores nothing)."""
    s = 0.0
    for j in range(v.shape[0]):
        s += v[j] * v[j]
    return s


def _head_value(o, y, head, hp):
    """The loss l(o, y) of the outputs ``o`` (a view of K entries)."""
    K = o.shape[0]
    if head == 0:
        return _lphi(o[0], y)
    if head == 1:
        mx = o[0]
        for k in range(1, K):
            if o[k] > mx:
                mx = o[k]
        s = 0.0
        for k in range(K):
            s += math.exp(o[k] - mx)
        oy = 0.0
        for k in range(K):
            if k == y:
                oy = o[k]
        return math.log(s) + mx - oy
    r = o[0] - y
    if head == 3 and not abs(r) <= hp:
        return hp * (abs(r) - 0.5 * hp)
    return 0.5 * r * r


def _head_grad(o, y, head, hp, g):
    """``g = dl/do`` at the outputs ``o`` (views of K entries; softmax: p - e_y;
    a label outside 0..K-1 has no one-hot part: the host checks labels)."""
    K = o.shape[0]
    if head == 0:
        g[0] = _ldphi(o[0], y)
    elif head == 1:
        mx = o[0]
        for k in range(1, K):
            if o[k] > mx:
                mx = o[k]
        s = 0.0
        for k in range(K):
            e = math.exp(o[k] - mx)
            g[k] = e
            s += e
        inv = 1.0 / s
        for k in range(K):
            g[k] = g[k] * inv - (1.0 if k == y else 0.0)
    else:
        r = o[0] - y
        if head == 3 and not abs(r) <= hp:
            r = hp if r > 0 else (-hp if r < 0 else r)  # NaN stays NaN
        g[0] = r


def _head_hvp(o, y, head, hp, do, dg):
    """``dg = (d2l/do2) do`` (views of K entries; softmax: p * do - p (p . do))."""
    K = o.shape[0]
    if head == 0:
        dg[0] = _ld2phi(o[0], y) * do[0]
    elif head == 1:
        mx = o[0]
        for k in range(1, K):
            if o[k] > mx:
                mx = o[k]
        s = 0.0
        for k in range(K):
            e = math.exp(o[k] - mx)
            dg[k] = e
            s += e
        inv = 1.0 / s
        pd = 0.0
        for k in range(K):
            pd += dg[k] * inv * do[k]
        for k in range(K):
            dg[k] = dg[k] * inv * (do[k] - pd)
    else:
        r = o[0] - y
        if head == 3 and not abs(r) <= hp:
            dg[0] = 0.0
        else:
            dg[0] = do[0]


# ------------------------------------------------------------------- layer parts
def _layout(sizes):
    """(woff, uoff): ``woff[m]`` the offset of W_m in w (``woff[L+1] = D``),
    ``uoff[m]`` the offset of layer m's units in a row of the unit scratch
    (``uoff[L+1]`` = the number of units)."""
    nl = sizes.shape[0] - 1
    woff = np.empty(nl + 1, dtype=np.int64)
    uoff = np.empty(nl + 1, dtype=np.int64)
    wo = 0
    uo = 0
    for m in range(nl):
        woff[m] = wo
        uoff[m] = uo
        wo += sizes[m + 1] * (sizes[m] + 1)
        uo += sizes[m + 1]
    woff[nl] = wo
    uoff[nl] = uo
    return woff, uoff


def _gather(X, idx, full, t0, nr, Xt, xx):
    """Rows of batch positions t0..t0+nr-1 into the tile ``Xt`` (nr x p, flat),
    their squared norms into ``xx``."""
    p = X.shape[1]
    for r in range(nr):
        i = t0 + r if full else idx[t0 + r]
        src = X[i]
        dst = Xt[r * p:(r + 1) * p]
        for j in range(p):
            dst[j] = src[j]
        xx[r] = _sq(src)


def _lin_fwd(w, wo, bo, nout, nin, A, sa, ai, nr, Z, sz, zo, add):
    """For tile rows r < nr and units k < nout: ``Z[r, zo + k] (+)= b[k] +
    W[k] . A[r, ai:ai+nin]`` with ``W`` the nout x nin matrix at ``w[wo:]`` and
    ``b`` at ``w[bo:]`` (``bo < 0``: no bias); ``A``, ``Z`` flat tiles with row
    strides ``sa``, ``sz``; ``add``: add to Z instead of setting it.  Blocks
    of 4 units x 4 rows: each weight row is read once per 4 rows."""
    k = 0
    while k < nout:
        if k + 4 <= nout:
            w0 = w[wo + k * nin:wo + (k + 1) * nin]
            w1 = w[wo + (k + 1) * nin:wo + (k + 2) * nin]
            w2 = w[wo + (k + 2) * nin:wo + (k + 3) * nin]
            w3 = w[wo + (k + 3) * nin:wo + (k + 4) * nin]
            r = 0
            while r + 4 <= nr:
                a0 = A[r * sa + ai:r * sa + ai + nin]
                a1 = A[(r + 1) * sa + ai:(r + 1) * sa + ai + nin]
                a2 = A[(r + 2) * sa + ai:(r + 2) * sa + ai + nin]
                a3 = A[(r + 3) * sa + ai:(r + 3) * sa + ai + nin]
                s00 = 0.0
                s01 = 0.0
                s02 = 0.0
                s03 = 0.0
                s10 = 0.0
                s11 = 0.0
                s12 = 0.0
                s13 = 0.0
                s20 = 0.0
                s21 = 0.0
                s22 = 0.0
                s23 = 0.0
                s30 = 0.0
                s31 = 0.0
                s32 = 0.0
                s33 = 0.0
                for j in range(nin):
                    x0 = a0[j]
                    x1 = a1[j]
                    x2 = a2[j]
                    x3 = a3[j]
                    v0 = w0[j]
                    v1 = w1[j]
                    v2 = w2[j]
                    v3 = w3[j]
                    s00 += v0 * x0
                    s01 += v0 * x1
                    s02 += v0 * x2
                    s03 += v0 * x3
                    s10 += v1 * x0
                    s11 += v1 * x1
                    s12 += v1 * x2
                    s13 += v1 * x3
                    s20 += v2 * x0
                    s21 += v2 * x1
                    s22 += v2 * x2
                    s23 += v2 * x3
                    s30 += v3 * x0
                    s31 += v3 * x1
                    s32 += v3 * x2
                    s33 += v3 * x3
                _put4(Z, r * sz + zo + k, sz, s00, s01, s02, s03, w, bo, k, add)
                _put4(Z, r * sz + zo + k + 1, sz, s10, s11, s12, s13, w, bo, k + 1, add)
                _put4(Z, r * sz + zo + k + 2, sz, s20, s21, s22, s23, w, bo, k + 2, add)
                _put4(Z, r * sz + zo + k + 3, sz, s30, s31, s32, s33, w, bo, k + 3, add)
                r += 4
            while r < nr:
                a0 = A[r * sa + ai:r * sa + ai + nin]
                s0 = 0.0
                s1 = 0.0
                s2 = 0.0
                s3 = 0.0
                for j in range(nin):
                    x0 = a0[j]
                    s0 += w0[j] * x0
                    s1 += w1[j] * x0
                    s2 += w2[j] * x0
                    s3 += w3[j] * x0
                _put1(Z, r * sz + zo + k, s0, w, bo, k, add)
                _put1(Z, r * sz + zo + k + 1, s1, w, bo, k + 1, add)
                _put1(Z, r * sz + zo + k + 2, s2, w, bo, k + 2, add)
                _put1(Z, r * sz + zo + k + 3, s3, w, bo, k + 3, add)
                r += 1
            k += 4
        else:
            w0 = w[wo + k * nin:wo + (k + 1) * nin]
            r = 0
            while r + 4 <= nr:
                a0 = A[r * sa + ai:r * sa + ai + nin]
                a1 = A[(r + 1) * sa + ai:(r + 1) * sa + ai + nin]
                a2 = A[(r + 2) * sa + ai:(r + 2) * sa + ai + nin]
                a3 = A[(r + 3) * sa + ai:(r + 3) * sa + ai + nin]
                s0 = 0.0
                s1 = 0.0
                s2 = 0.0
                s3 = 0.0
                for j in range(nin):
                    v0 = w0[j]
                    s0 += v0 * a0[j]
                    s1 += v0 * a1[j]
                    s2 += v0 * a2[j]
                    s3 += v0 * a3[j]
                _put4(Z, r * sz + zo + k, sz, s0, s1, s2, s3, w, bo, k, add)
                r += 4
            while r < nr:
                a0 = A[r * sa + ai:r * sa + ai + nin]
                s0 = 0.0
                for j in range(nin):
                    s0 += w0[j] * a0[j]
                _put1(Z, r * sz + zo + k, s0, w, bo, k, add)
                r += 1
            k += 1


def _put1(Z, at, s, w, bo, k, add):
    """``Z[at] (+)= b[k] + s`` (no bias for bo < 0)."""
    if bo >= 0:
        s = w[bo + k] + s
    if add:
        Z[at] += s
    else:
        Z[at] = s


def _put4(Z, at, sz, s0, s1, s2, s3, w, bo, k, add):
    """:func:`_put1` for 4 rows ``at, at + sz, ...`` of unit k."""
    _put1(Z, at, s0, w, bo, k, add)
    _put1(Z, at + sz, s1, w, bo, k, add)
    _put1(Z, at + 2 * sz, s2, w, bo, k, add)
    _put1(Z, at + 3 * sz, s3, w, bo, k, add)


def _lin_acc(acc, wo, bo, nout, nin, A, sa, ai, keep, nk, C, sc, co):
    """``acc[W] += sum_t C[q_t, co:co+nout]^T A[q_t, ai:ai+nin]`` and
    ``acc[b] += sum_t C[q_t, co:co+nout]`` over tile rows ``q_t = keep[t]``,
    t < nk, in that order (W the nout x nin block at ``acc[wo:]``, b at
    ``acc[bo:]``); flat tiles with row strides ``sa``, ``sc``.  Blocks of 4
    units x 4 rows: each row of the partial sum is read and written once per
    4 rows.  Rows not in ``keep`` are never read (they may hold inf or NaN)."""
    k = 0
    while k < nout:
        if k + 4 <= nout:
            g0 = acc[wo + k * nin:wo + (k + 1) * nin]
            g1 = acc[wo + (k + 1) * nin:wo + (k + 2) * nin]
            g2 = acc[wo + (k + 2) * nin:wo + (k + 3) * nin]
            g3 = acc[wo + (k + 3) * nin:wo + (k + 4) * nin]
            b0 = 0.0
            b1 = 0.0
            b2 = 0.0
            b3 = 0.0
            t = 0
            while t + 4 <= nk:
                q0 = keep[t]
                q1 = keep[t + 1]
                q2 = keep[t + 2]
                q3 = keep[t + 3]
                a0 = A[q0 * sa + ai:q0 * sa + ai + nin]
                a1 = A[q1 * sa + ai:q1 * sa + ai + nin]
                a2 = A[q2 * sa + ai:q2 * sa + ai + nin]
                a3 = A[q3 * sa + ai:q3 * sa + ai + nin]
                c00 = C[q0 * sc + co + k]
                c01 = C[q1 * sc + co + k]
                c02 = C[q2 * sc + co + k]
                c03 = C[q3 * sc + co + k]
                c10 = C[q0 * sc + co + k + 1]
                c11 = C[q1 * sc + co + k + 1]
                c12 = C[q2 * sc + co + k + 1]
                c13 = C[q3 * sc + co + k + 1]
                c20 = C[q0 * sc + co + k + 2]
                c21 = C[q1 * sc + co + k + 2]
                c22 = C[q2 * sc + co + k + 2]
                c23 = C[q3 * sc + co + k + 2]
                c30 = C[q0 * sc + co + k + 3]
                c31 = C[q1 * sc + co + k + 3]
                c32 = C[q2 * sc + co + k + 3]
                c33 = C[q3 * sc + co + k + 3]
                for j in range(nin):
                    x0 = a0[j]
                    x1 = a1[j]
                    x2 = a2[j]
                    x3 = a3[j]
                    g0[j] += (c00 * x0 + c01 * x1) + (c02 * x2 + c03 * x3)
                    g1[j] += (c10 * x0 + c11 * x1) + (c12 * x2 + c13 * x3)
                    g2[j] += (c20 * x0 + c21 * x1) + (c22 * x2 + c23 * x3)
                    g3[j] += (c30 * x0 + c31 * x1) + (c32 * x2 + c33 * x3)
                b0 += (c00 + c01) + (c02 + c03)
                b1 += (c10 + c11) + (c12 + c13)
                b2 += (c20 + c21) + (c22 + c23)
                b3 += (c30 + c31) + (c32 + c33)
                t += 4
            while t < nk:
                q0 = keep[t]
                a0 = A[q0 * sa + ai:q0 * sa + ai + nin]
                c00 = C[q0 * sc + co + k]
                c10 = C[q0 * sc + co + k + 1]
                c20 = C[q0 * sc + co + k + 2]
                c30 = C[q0 * sc + co + k + 3]
                for j in range(nin):
                    x0 = a0[j]
                    g0[j] += c00 * x0
                    g1[j] += c10 * x0
                    g2[j] += c20 * x0
                    g3[j] += c30 * x0
                b0 += c00
                b1 += c10
                b2 += c20
                b3 += c30
                t += 1
            acc[bo + k] += b0
            acc[bo + k + 1] += b1
            acc[bo + k + 2] += b2
            acc[bo + k + 3] += b3
            k += 4
        else:
            g0 = acc[wo + k * nin:wo + (k + 1) * nin]
            b0 = 0.0
            t = 0
            while t + 4 <= nk:
                q0 = keep[t]
                q1 = keep[t + 1]
                q2 = keep[t + 2]
                q3 = keep[t + 3]
                a0 = A[q0 * sa + ai:q0 * sa + ai + nin]
                a1 = A[q1 * sa + ai:q1 * sa + ai + nin]
                a2 = A[q2 * sa + ai:q2 * sa + ai + nin]
                a3 = A[q3 * sa + ai:q3 * sa + ai + nin]
                c00 = C[q0 * sc + co + k]
                c01 = C[q1 * sc + co + k]
                c02 = C[q2 * sc + co + k]
                c03 = C[q3 * sc + co + k]
                for j in range(nin):
                    g0[j] += (c00 * a0[j] + c01 * a1[j]) + (c02 * a2[j] + c03 * a3[j])
                b0 += (c00 + c01) + (c02 + c03)
                t += 4
            while t < nk:
                q0 = keep[t]
                a0 = A[q0 * sa + ai:q0 * sa + ai + nin]
                c00 = C[q0 * sc + co + k]
                for j in range(nin):
                    g0[j] += c00 * a0[j]
                b0 += c00
                t += 1
            acc[bo + k] += b0
            k += 1


def _tanh_small(x):
    """tanh(x) for |x| < 0.625: x + x^3 P(x^2)/Q(x^2) (Cephes' rational form,
    relative error ~1e-16); arithmetic only, so a loop of it vectorises."""
    q = x * x
    pp = (-9.64399179425052238628e-1 * q - 9.92877231001918586564e1) * q - 1.61468768441708447952e3
    qq = ((q + 1.12811678491632931402e2) * q + 2.23548839060100448583e3) * q + 4.84406305325125486048e3
    return x + x * q * (pp / qq)


def _activate(Z, sz, zo, n, nr, act, S1, S2, second, E):
    """Tile rows r < nr, units zo..zo+n-1: ``Z <- act(Z)``, ``S1 <- act'``
    and (``second``) ``S2 <- act''`` (S1, S2 with Z's layout; ``E`` scratch of
    2n floats).  tanh, sigmoid and silu go through loops LLVM vectorises:
    ``exp(-c |z|)`` by :func:`dpreg_kernels.vmath.exp_nonpos` (relative error
    <= 2^-51), then tanh = sign(z) (1 - e)/(1 + e) for |z| >= 0.625 (no
    cancellation there) and a rational form below; sigmoid = 1/(1 + e) or
    e/(1 + e) by the sign of z.  softplus calls libm per unit."""
    u = E[:n]
    e = E[n:2 * n]
    for r in range(nr):
        z = Z[r * sz + zo:r * sz + zo + n]
        s1 = S1[r * sz + zo:r * sz + zo + n]
        s2 = S2[r * sz + zo:r * sz + zo + n]
        if act == 1:
            for k in range(n):
                a, d1, d2 = _act(z[k], act)
                z[k] = a
                s1[k] = d1
                if second:
                    s2[k] = d2
            continue
        c = 2.0 if act == 0 else 1.0
        for k in range(n):
            u[k] = -c * abs(z[k])
        exp_nonpos(u, e)
        if act == 0:
            for k in range(n):
                x = z[k]
                big = (1.0 - e[k]) / (1.0 + e[k])
                if x < 0:
                    big = -big
                t = _tanh_small(x) if abs(x) < 0.625 else big
                d1 = 1.0 - t * t
                z[k] = t
                s1[k] = d1
                if second:
                    s2[k] = -2.0 * t * d1
        else:
            for k in range(n):
                x = z[k]
                ek = e[k]
                sg = 1.0 / (1.0 + ek) if x >= 0 else ek / (1.0 + ek)
                q = sg * (1.0 - sg)
                if act == 2:
                    z[k] = sg
                    s1[k] = q
                    if second:
                        s2[k] = q * (1.0 - 2.0 * sg)
                else:
                    z[k] = x * sg
                    s1[k] = sg * (1.0 + x * (1.0 - sg))
                    if second:
                        s2[k] = q * (2.0 + x * (1.0 - 2.0 * sg))


def _forward(w, sizes, woff, uoff, act, Xt, nr, A, S1, S2, second, E):
    """The tile's forward pass: activations of every hidden layer and the
    outputs into ``A`` (nr x U, flat), act' into ``S1`` (and act'' into
    ``S2`` when ``second``); ``E``: scratch of 2U floats."""
    nl = sizes.shape[0] - 1
    U = uoff[nl]
    p = sizes[0]
    for m in range(nl):
        nin = sizes[m]
        nout = sizes[m + 1]
        bo = woff[m] + nout * nin
        if m == 0:
            _lin_fwd(w, woff[m], bo, nout, nin, Xt, p, 0, nr, A, U, uoff[m], False)
        else:
            _lin_fwd(w, woff[m], bo, nout, nin, A, U, uoff[m - 1], nr, A, U, uoff[m], False)
        if m < nl - 1:
            _activate(A, U, uoff[m], nout, nr, act, S1, S2, second, E)


def _back_row(w, wo, nout, nin, dl, t):
    """``t = W^T dl`` for one record (W the nout x nin block at ``w[wo:]``;
    views ``dl`` of nout entries, ``t`` of nin)."""
    for j in range(nin):
        t[j] = 0.0
    for k in range(nout):
        c = dl[k]
        wk = w[wo + k * nin:wo + (k + 1) * nin]
        for j in range(nin):
            t[j] += wk[j] * c


def _backward(w, sizes, woff, uoff, S1, DL, nr, yv, rws, head, hp, A):
    """Head and backpropagation for the tile: ``DL[r]`` = dl/dz of every unit
    of every layer, from the outputs in ``A``."""
    nl = sizes.shape[0] - 1
    U = uoff[nl]
    o0 = uoff[nl - 1]
    K = sizes[nl]
    for r in range(nr):
        base = r * U
        _head_grad(A[base + o0:base + o0 + K], yv[rws[r]], head, hp, DL[base + o0:base + o0 + K])
        for m in range(nl - 1, 0, -1):
            nin = sizes[m]
            nout = sizes[m + 1]
            ui = base + uoff[m - 1]
            t = DL[ui:ui + nin]
            _back_row(w, woff[m], nout, nin, DL[base + uoff[m]:base + uoff[m] + nout], t)
            s1 = S1[ui:ui + nin]
            for j in range(nin):
                t[j] *= s1[j]


def _grad_sq(sizes, uoff, A, DL, xx, r):
    """Squared norm of row r's gradient: sum_m |dl_m|^2 (|a_{m-1}|^2 + 1),
    |a_{-1}|^2 = xx[r]."""
    nl = sizes.shape[0] - 1
    U = uoff[nl]
    base = r * U
    g2 = 0.0
    for m in range(nl):
        dd = _sq(DL[base + uoff[m]:base + uoff[m] + sizes[m + 1]])
        if m == 0:
            aa = xx[r]
        else:
            aa = _sq(A[base + uoff[m - 1]:base + uoff[m - 1] + sizes[m]])
        g2 += dd * (aa + 1.0)
    return g2


def _acc_layers(acc, sizes, woff, uoff, Xt, A, DL, keep, nk, first):
    """acc += the kept rows' (already scaled) gradient blocks of layers
    ``first..L`` (``DL`` holds dl/dz, ``A`` the activations, ``Xt`` the inputs)."""
    nl = sizes.shape[0] - 1
    U = uoff[nl]
    p = sizes[0]
    for m in range(first, nl):
        nin = sizes[m]
        nout = sizes[m + 1]
        bo = woff[m] + nout * nin
        if m == 0:
            _lin_acc(acc, woff[m], bo, nout, nin, Xt, p, 0, keep, nk, DL, U, uoff[m])
        else:
            _lin_acc(acc, woff[m], bo, nout, nin, A, U, uoff[m - 1], keep, nk, DL, U, uoff[m])


def _scratch(nc, per):
    """``nc`` per-chunk scratch blocks of ``per`` floats, one allocation."""
    return np.empty(nc * per)


def _reduce(part, nc, D):
    """Sum of the chunks' partial sums (``part[c D:(c+1) D]``), in chunk order."""
    out = np.empty(D)
    for j in range(D):
        out[j] = 0.0
    for c in range(nc):
        pc = part[c * D:(c + 1) * D]
        for j in range(D):
            out[j] += pc[j]
    return out


# ------------------------------------------------------------------------ kernels
def _grad_sum(X, y, idx, full, w, sizes, act, head, hp, clip):
    """Sum over the batch of per-record gradients of the network's loss, each
    scaled by ``min(1, clip/|g_i|)`` (non-finite norm: dropped).  The batch is
    all rows when ``full`` (``idx`` ignored), else rows ``idx`` (repeats
    allowed).  Returns ``(sum, n_clipped)``: the O1 sensitivity is enforced here."""
    n = X.shape[0]
    p = X.shape[1]
    woff, uoff = _layout(sizes)
    nl = sizes.shape[0] - 1
    D = woff[nl]
    U = uoff[nl]
    b = n if full else idx.shape[0]
    nc = _mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = _scratch(nc, D)
    for j in range(nc * D):
        part[j] = 0.0
    per = TILE * (p + 3 * U + 1) + 2 * U
    scr = _scratch(nc, per)
    iscr = np.empty(nc * 2 * TILE, dtype=np.int64)
    ncl = np.zeros(nc, dtype=np.int64)
    clip2 = clip * clip
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c * D:(c + 1) * D]
        s = scr[c * per:(c + 1) * per]
        Xt = s[:TILE * p]
        A = s[TILE * p:TILE * (p + U)]
        S1 = s[TILE * (p + U):TILE * (p + 2 * U)]
        DL = s[TILE * (p + 2 * U):TILE * (p + 3 * U)]
        xx = s[TILE * (p + 3 * U):TILE * (p + 3 * U + 1)]
        E = s[TILE * (p + 3 * U + 1):]
        rws = iscr[c * 2 * TILE:c * 2 * TILE + TILE]
        keep = iscr[c * 2 * TILE + TILE:(c + 1) * 2 * TILE]
        k_cl = 0
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            for r in range(nr):
                rws[r] = t0 + r if full else idx[t0 + r]
            _gather(X, idx, full, t0, nr, Xt, xx)
            _forward(w, sizes, woff, uoff, act, Xt, nr, A, S1, S1, False, E)
            _backward(w, sizes, woff, uoff, S1, DL, nr, y, rws, head, hp, A)
            nk = 0
            for r in range(nr):
                g2 = _grad_sq(sizes, uoff, A, DL, xx, r)
                if not g2 <= clip2:
                    k_cl += 1
                sc = _scale(g2, clip, clip2)
                if sc == 0.0:
                    continue
                if sc != 1.0:
                    dl = DL[r * U:(r + 1) * U]
                    for j in range(U):
                        dl[j] *= sc
                keep[nk] = r
                nk += 1
            _acc_layers(acc, sizes, woff, uoff, Xt, A, DL, keep, nk, 0)
        ncl[c] = k_cl
    nclip = 0
    for c in range(nc):
        nclip += ncl[c]
    return _reduce(part, nc, D), nclip


def _diff_rest(sizes, woff, uoff, A, DL, Aq, DLq, r, rest, D0):
    """Row r's gradient difference past the first layer, in w's order
    (``dl_m a_{m-1}^T - dlq_m aq_{m-1}^T`` then ``dl_m - dlq_m``, m >= 1),
    into ``rest`` (offset by the first layer's D0 parameters)."""
    nl = sizes.shape[0] - 1
    U = uoff[nl]
    base = r * U
    for m in range(1, nl):
        nin = sizes[m]
        nout = sizes[m + 1]
        W0 = woff[m] - D0
        ui = base + uoff[m - 1]
        u0 = base + uoff[m]
        a = A[ui:ui + nin]
        aq = Aq[ui:ui + nin]
        for k in range(nout):
            c = DL[u0 + k]
            cq = DLq[u0 + k]
            row = rest[W0 + k * nin:W0 + (k + 1) * nin]
            for j in range(nin):
                row[j] = c * a[j] - cq * aq[j]
            rest[W0 + nout * nin + k] = c - cq


def _diff_sum(X, y, idx, full, w, wp, sizes, act, head, hp, clip):
    """Sum over the batch of per-record gradient differences
    ``grad f(w; z_i) - grad f(wp; z_i)``, each scaled by ``min(1, clip/|D_i|)``
    (non-finite norm: dropped); batch as :func:`_grad_sum`.  Two forward and
    backward passes per tile, one accumulation; past the first layer each
    record's difference is formed in scratch, and its norm and the
    accumulated term both read it.  Returns ``(sum, n_clipped)``: the O2
    sensitivity is enforced here."""
    n = X.shape[0]
    p = X.shape[1]
    woff, uoff = _layout(sizes)
    nl = sizes.shape[0] - 1
    D = woff[nl]
    U = uoff[nl]
    h0 = sizes[1]
    D0 = woff[1]  # the first layer's parameters
    b = n if full else idx.shape[0]
    nc = _mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = _scratch(nc, D)
    for j in range(nc * D):
        part[j] = 0.0
    per = TILE * (p + 6 * U + 1) + 2 * U + (D - D0)
    scr = _scratch(nc, per)
    iscr = np.empty(nc * 2 * TILE, dtype=np.int64)
    ncl = np.zeros(nc, dtype=np.int64)
    clip2 = clip * clip
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c * D:(c + 1) * D]
        s = scr[c * per:(c + 1) * per]
        Xt = s[:TILE * p]
        A = s[TILE * p:TILE * (p + U)]
        S1 = s[TILE * (p + U):TILE * (p + 2 * U)]
        DL = s[TILE * (p + 2 * U):TILE * (p + 3 * U)]
        Aq = s[TILE * (p + 3 * U):TILE * (p + 4 * U)]
        S1q = s[TILE * (p + 4 * U):TILE * (p + 5 * U)]
        DLq = s[TILE * (p + 5 * U):TILE * (p + 6 * U)]
        xx = s[TILE * (p + 6 * U):TILE * (p + 6 * U + 1)]
        E = s[TILE * (p + 6 * U + 1):TILE * (p + 6 * U + 1) + 2 * U]
        rest = s[TILE * (p + 6 * U + 1) + 2 * U:]
        accr = acc[D0:]
        rws = iscr[c * 2 * TILE:c * 2 * TILE + TILE]
        keep = iscr[c * 2 * TILE + TILE:(c + 1) * 2 * TILE]
        k_cl = 0
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            for r in range(nr):
                rws[r] = t0 + r if full else idx[t0 + r]
            _gather(X, idx, full, t0, nr, Xt, xx)
            _forward(w, sizes, woff, uoff, act, Xt, nr, A, S1, S1, False, E)
            _backward(w, sizes, woff, uoff, S1, DL, nr, y, rws, head, hp, A)
            _forward(wp, sizes, woff, uoff, act, Xt, nr, Aq, S1q, S1q, False, E)
            _backward(wp, sizes, woff, uoff, S1q, DLq, nr, y, rws, head, hp, Aq)
            nk = 0
            for r in range(nr):
                d0 = DL[r * U:r * U + h0]  # the first layer's difference, in place
                d0q = DLq[r * U:r * U + h0]
                for k in range(h0):
                    d0[k] = d0[k] - d0q[k]
                _diff_rest(sizes, woff, uoff, A, DL, Aq, DLq, r, rest, D0)
                g2 = _sq(d0) * (xx[r] + 1.0) + _sq(rest)
                if not g2 <= clip2:
                    k_cl += 1
                sc = _scale(g2, clip, clip2)
                if sc == 0.0:
                    continue
                for k in range(h0):
                    d0[k] *= sc
                for j in range(D - D0):
                    accr[j] += sc * rest[j]
                keep[nk] = r
                nk += 1
            _lin_acc(acc, 0, h0 * p, h0, p, Xt, p, 0, keep, nk, DL, U, 0)
        ncl[c] = k_cl
    nclip = 0
    for c in range(nc):
        nclip += ncl[c]
    return _reduce(part, nc, D), nclip


def _loss_sum(X, y, idx, w, sizes, act, head, hp):
    """Sum over rows ``idx`` of the per-record loss l(o(w; x_i), y_i)."""
    p = X.shape[1]
    woff, uoff = _layout(sizes)
    nl = sizes.shape[0] - 1
    U = uoff[nl]
    o0 = uoff[nl - 1]
    K = sizes[nl]
    b = idx.shape[0]
    nc = _mlp_chunks(b)
    step = (b + nc - 1) // nc
    per = TILE * (p + 2 * U + 1) + 2 * U
    scr = _scratch(nc, per)
    part = np.zeros(nc)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        s = scr[c * per:(c + 1) * per]
        Xt = s[:TILE * p]
        A = s[TILE * p:TILE * (p + U)]
        S1 = s[TILE * (p + U):TILE * (p + 2 * U)]
        xx = s[TILE * (p + 2 * U):TILE * (p + 2 * U + 1)]
        E = s[TILE * (p + 2 * U + 1):]
        tot = 0.0
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            _gather(X, idx, False, t0, nr, Xt, xx)
            _forward(w, sizes, woff, uoff, act, Xt, nr, A, S1, S1, False, E)
            for r in range(nr):
                tot += _head_value(A[r * U + o0:r * U + o0 + K], y[idx[t0 + r]], head, hp)
        part[c] = tot
    out = 0.0
    for c in range(nc):
        out += part[c]
    return out


def _outputs(X, w, sizes, act):
    """The network outputs o(w; x_i) for every row, as an (n, n_out) array."""
    n = X.shape[0]
    p = X.shape[1]
    woff, uoff = _layout(sizes)
    nl = sizes.shape[0] - 1
    U = uoff[nl]
    o0 = uoff[nl - 1]
    K = sizes[nl]
    out = np.empty((n, K))
    nc = _mlp_chunks(n)
    step = (n + nc - 1) // nc
    per = TILE * (p + 2 * U + 1) + 2 * U
    scr = _scratch(nc, per)
    none = np.empty(0, dtype=np.int64)
    for c in prange(nc):
        lo = c * step
        hi = min(n, lo + step)
        s = scr[c * per:(c + 1) * per]
        Xt = s[:TILE * p]
        A = s[TILE * p:TILE * (p + U)]
        S1 = s[TILE * (p + U):TILE * (p + 2 * U)]
        xx = s[TILE * (p + 2 * U):TILE * (p + 2 * U + 1)]
        E = s[TILE * (p + 2 * U + 1):]
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            _gather(X, none, True, t0, nr, Xt, xx)
            _forward(w, sizes, woff, uoff, act, Xt, nr, A, S1, S1, False, E)
            for r in range(nr):
                for k in range(K):
                    out[t0 + r, k] = A[r * U + o0 + k]
    return out


def _hvp_sum(X, y, idx, w, V, sizes, act, head, hp):
    """Sum over rows ``idx`` of the exact per-record Hessian-vector product
    ``grad^2 f(w; z_i) V`` (forward-over-reverse: the directional derivative
    of the forward and backward passes along V), tile by tile."""
    p = X.shape[1]
    woff, uoff = _layout(sizes)
    nl = sizes.shape[0] - 1
    D = woff[nl]
    U = uoff[nl]
    o0 = uoff[nl - 1]
    K = sizes[nl]
    b = idx.shape[0]
    nc = _mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = _scratch(nc, D)
    for j in range(nc * D):
        part[j] = 0.0
    per = TILE * (p + 8 * U + 1) + 2 * U
    scr = _scratch(nc, per)
    iscr = np.empty(nc * 2 * TILE, dtype=np.int64)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c * D:(c + 1) * D]
        s = scr[c * per:(c + 1) * per]
        Xt = s[:TILE * p]
        A = s[TILE * p:TILE * (p + U)]              # activations (outputs last)
        dZ = s[TILE * (p + U):TILE * (p + 2 * U)]   # tangents of the pre-activations
        S1 = s[TILE * (p + 2 * U):TILE * (p + 3 * U)]
        S2 = s[TILE * (p + 3 * U):TILE * (p + 4 * U)]
        DL = s[TILE * (p + 4 * U):TILE * (p + 5 * U)]
        DDL = s[TILE * (p + 5 * U):TILE * (p + 6 * U)]
        dA = s[TILE * (p + 6 * U):TILE * (p + 7 * U)]
        T = s[TILE * (p + 7 * U):TILE * (p + 8 * U)]
        xx = s[TILE * (p + 8 * U):TILE * (p + 8 * U + 1)]
        E = s[TILE * (p + 8 * U + 1):]
        rws = iscr[c * 2 * TILE:c * 2 * TILE + TILE]
        keep = iscr[c * 2 * TILE + TILE:(c + 1) * 2 * TILE]
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            for r in range(nr):
                rws[r] = idx[t0 + r]
                keep[r] = r
            _gather(X, idx, False, t0, nr, Xt, xx)
            # forward with tangents: dz_m = dW_m a_{m-1} + W_m da_{m-1} + db_m, da_m = act'(z_m) dz_m
            for m in range(nl):
                nin = sizes[m]
                nout = sizes[m + 1]
                bo = woff[m] + nout * nin
                if m == 0:
                    _lin_fwd(w, woff[m], bo, nout, nin, Xt, p, 0, nr, A, U, uoff[m], False)
                    _lin_fwd(V, woff[m], bo, nout, nin, Xt, p, 0, nr, dZ, U, uoff[m], False)
                else:
                    _lin_fwd(w, woff[m], bo, nout, nin, A, U, uoff[m - 1], nr, A, U, uoff[m], False)
                    _lin_fwd(V, woff[m], bo, nout, nin, A, U, uoff[m - 1], nr, dZ, U, uoff[m], False)
                    _lin_fwd(w, woff[m], -1, nout, nin, dA, U, uoff[m - 1], nr, dZ, U, uoff[m], True)
                if m < nl - 1:
                    _activate(A, U, uoff[m], nout, nr, act, S1, S2, True, E)
                for r in range(nr):
                    base = r * U + uoff[m]
                    dz = dZ[base:base + nout]
                    da = dA[base:base + nout]
                    if m < nl - 1:
                        s1 = S1[base:base + nout]
                        for k in range(nout):
                            da[k] = s1[k] * dz[k]
                    else:
                        for k in range(nout):
                            da[k] = dz[k]
            # head and backward with tangents:
            # dl_{m-1} = act' (W^T dl_m), ddl_{m-1} = act'' dz (W^T dl_m) + act' (dW^T dl_m + W^T ddl_m)
            for r in range(nr):
                base = r * U
                o = A[base + o0:base + o0 + K]
                _head_grad(o, y[rws[r]], head, hp, DL[base + o0:base + o0 + K])
                _head_hvp(o, y[rws[r]], head, hp, dA[base + o0:base + o0 + K], DDL[base + o0:base + o0 + K])
                for m in range(nl - 1, 0, -1):
                    nin = sizes[m]
                    nout = sizes[m + 1]
                    ui = base + uoff[m - 1]
                    u0 = base + uoff[m]
                    t = T[ui:ui + nin]
                    dl = DL[ui:ui + nin]
                    ddl = DDL[ui:ui + nin]
                    _back_row(w, woff[m], nout, nin, DL[u0:u0 + nout], t)
                    _back_row(V, woff[m], nout, nin, DL[u0:u0 + nout], dl)
                    _back_row(w, woff[m], nout, nin, DDL[u0:u0 + nout], ddl)
                    s1 = S1[ui:ui + nin]
                    s2 = S2[ui:ui + nin]
                    dz = dZ[ui:ui + nin]
                    for j in range(nin):
                        ddl[j] = s2[j] * dz[j] * t[j] + s1[j] * (dl[j] + ddl[j])
                        dl[j] = s1[j] * t[j]
            # HV_W_m += ddl_m a_{m-1}^T + dl_m da_{m-1}^T (da_{-1} = 0), HV_b_m += ddl_m
            for m in range(nl):
                nin = sizes[m]
                nout = sizes[m + 1]
                bo = woff[m] + nout * nin
                if m == 0:
                    _lin_acc(acc, woff[m], bo, nout, nin, Xt, p, 0, keep, nr, DDL, U, uoff[m])
                else:
                    _lin_acc(acc, woff[m], bo, nout, nin, A, U, uoff[m - 1], keep, nr, DDL, U, uoff[m])
                    _lin_acc_nob(acc, woff[m], nout, nin, dA, U, uoff[m - 1], keep, nr, DL, U, uoff[m])
    return _reduce(part, nc, D)


def _lin_acc_nob(acc, wo, nout, nin, A, sa, ai, keep, nk, C, sc, co):
    """:func:`_lin_acc` without the bias part (the HVP's second outer product)."""
    for k in range(nout):
        g0 = acc[wo + k * nin:wo + (k + 1) * nin]
        for t in range(nk):
            q0 = keep[t]
            a0 = A[q0 * sa + ai:q0 * sa + ai + nin]
            c00 = C[q0 * sc + co + k]
            for j in range(nin):
                g0[j] += c00 * a0[j]


for _name in ("_sigm", "_act", "_lphi", "_ldphi", "_ld2phi", "_scale", "_sq", "_head_value", "_head_grad",
              "_head_hvp", "_layout", "_gather", "_lin_fwd", "_put1", "_put4", "_lin_acc", "_lin_acc_nob",
              "_tanh_small", "_activate", "_forward", "_back_row", "_backward", "_grad_sq", "_acc_layers", "_scratch", "_reduce",
              "_diff_rest", "_mlp_chunks"):
    globals()[_name] = jit_inline(globals()[_name])

_GRAD_SIG = types.Tuple((Vec, i8))(Mat, Vec, Idx, types.boolean, Vec, Idx, i8, i8, f8, f8)
_DIFF_SIG = types.Tuple((Vec, i8))(Mat, Vec, Idx, types.boolean, Vec, Vec, Idx, i8, i8, f8, f8)

#: O1: clipped per-record gradient sum; O2: clipped per-record difference sum.
#: Each a :class:`~dpreg_kernels.linear_model.Kernel`: serial and parallel
#: variants of one function, each compiled (or loaded from numba's cache) on
#: first use; the same fixed chunks, so bit-identical results.
grad_sum = Kernel(_GRAD_SIG, _grad_sum)
diff_sum = Kernel(_DIFF_SIG, _diff_sum)
loss_sum = Kernel(f8(Mat, Vec, Idx, Vec, Idx, i8, i8, f8), _loss_sum)
outputs = Kernel(Mat(Mat, Vec, Idx, i8), _outputs)
hvp_sum = Kernel(Vec(Mat, Vec, Idx, Vec, Vec, Idx, i8, i8, f8), _hvp_sum)
