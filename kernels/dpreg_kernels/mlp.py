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

* makes one pass over the selected rows, fusing forward, backward, norm, clip
  and accumulation per record; rows go in tiles of :data:`TILE` rows through
  the first layer (the one whose width is the data's: ``p x n_0`` weights),
  4 rows at a time, so its weights and its partial sum stream once per 4 rows
  (peak extra memory O(chunks x D) plus O(TILE x n_0 + units) per chunk:
  never an (n x D) matrix);
* splits the rows into fixed chunks (a function of the batch size alone:
  :func:`mlp_chunks`), runs chunks under ``prange`` and adds the partial sums
  serially in chunk order, so results are bit-identical for every thread count;
* drops a term whose norm is not finite (counted as clipped) and scales the
  others to norm <= clip;
* draws no random numbers.

Reductions (dot products, squared norms) run in loops that store nothing, so
LLVM vectorises them without a run-time overlap check and their order never
depends on where the scratch arrays lie (a loop that stores and reduces gets
a vectorised and a scalar version, chosen by addresses at run time).

The Hessian-vector product is exact: forward-over-reverse (the directional
derivative of the forward and backward passes along ``V``), record by record.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange, types

from .config import MAX_CHUNKS, jit_inline
from .linear_model import Kernel

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

#: A record costs ~4 D flops here (D parameters), so chunks are smaller than
#: linear_model's MIN_CHUNK_ROWS: a batch of 256 still spreads over 8 chunks.
#: The split depends on the batch size alone.
MIN_CHUNK_ROWS = 32
#: rows per tile through the first layer (a chunk is cut into tiles; fixed, so
#: the arithmetic never depends on the thread count)
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


def _head_value(a, o0, K, y, head, hp):
    """The loss l(o, y) of the outputs ``a[o0:o0+K]``."""
    if head == 0:
        return _lphi(a[o0], y)
    if head == 1:
        mx = a[o0]
        for k in range(1, K):
            if a[o0 + k] > mx:
                mx = a[o0 + k]
        s = 0.0
        for k in range(K):
            s += math.exp(a[o0 + k] - mx)
        oy = 0.0
        for k in range(K):
            if k == y:
                oy = a[o0 + k]
        return math.log(s) + mx - oy
    r = a[o0] - y
    if head == 3 and not abs(r) <= hp:
        return hp * (abs(r) - 0.5 * hp)
    return 0.5 * r * r


def _head_grad(a, o0, K, y, head, hp, g):
    """``g[o0:o0+K] = dl/do`` at the outputs ``a[o0:o0+K]`` (softmax: p - e_y;
    a label outside 0..K-1 has no one-hot part: the host checks labels)."""
    if head == 0:
        g[o0] = _ldphi(a[o0], y)
    elif head == 1:
        mx = a[o0]
        for k in range(1, K):
            if a[o0 + k] > mx:
                mx = a[o0 + k]
        s = 0.0
        for k in range(K):
            e = math.exp(a[o0 + k] - mx)
            g[o0 + k] = e
            s += e
        inv = 1.0 / s
        for k in range(K):
            g[o0 + k] = g[o0 + k] * inv - (1.0 if k == y else 0.0)
    else:
        r = a[o0] - y
        if head == 3 and not abs(r) <= hp:
            r = hp if r > 0 else (-hp if r < 0 else r)  # NaN stays NaN
        g[o0] = r


def _head_hvp(a, o0, K, y, head, hp, do, dg):
    """``dg[o0:o0+K] = (d2l/do2) do[o0:o0+K]`` (softmax: p * do - p (p . do))."""
    if head == 0:
        dg[o0] = _ld2phi(a[o0], y) * do[o0]
    elif head == 1:
        mx = a[o0]
        for k in range(1, K):
            if a[o0 + k] > mx:
                mx = a[o0 + k]
        s = 0.0
        for k in range(K):
            e = math.exp(a[o0 + k] - mx)
            dg[o0 + k] = e
            s += e
        inv = 1.0 / s
        pd = 0.0
        for k in range(K):
            pd += dg[o0 + k] * inv * do[o0 + k]
        for k in range(K):
            pk = dg[o0 + k] * inv
            dg[o0 + k] = pk * (do[o0 + k] - pd)
    else:
        r = a[o0] - y
        if head == 3 and not abs(r) <= hp:
            dg[o0] = 0.0
        else:
            dg[o0] = do[o0]


# ------------------------------------------------------------------- layer parts
def _layout(sizes):
    """(woff, uoff): ``woff[m]`` the offset of W_m in w (``woff[L+1] = D``),
    ``uoff[m]`` the offset of layer m's units in the unit scratch
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


def _rows_of(idx, full, lo, hi, rws):
    """``rws[0:hi-lo]`` = the data rows of batch positions lo..hi-1."""
    for t in range(lo, hi):
        rws[t - lo] = t if full else idx[t]


def _first_layer(w, X, rws, nr, h0, Z):
    """``Z[r, k] = b_0[k] + W_0[k] . x_r`` for the tile's rows ``X[rws[r]]``,
    r < nr: each weight row is read once per 4 rows."""
    p = X.shape[1]
    ob = h0 * p
    for k in range(h0):
        row = k * p
        bk = w[ob + k]
        r = 0
        while r + 4 <= nr:
            x0 = X[rws[r]]
            x1 = X[rws[r + 1]]
            x2 = X[rws[r + 2]]
            x3 = X[rws[r + 3]]
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            for j in range(p):
                wj = w[row + j]
                s0 += wj * x0[j]
                s1 += wj * x1[j]
                s2 += wj * x2[j]
                s3 += wj * x3[j]
            Z[r, k] = bk + s0
            Z[r + 1, k] = bk + s1
            Z[r + 2, k] = bk + s2
            Z[r + 3, k] = bk + s3
            r += 4
        while r < nr:
            xr = X[rws[r]]
            s0 = 0.0
            for j in range(p):
                s0 += w[row + j] * xr[j]
            Z[r, k] = bk + s0
            r += 1


def _first_layer_acc(acc, X, rws, keep, nk, h0, C):
    """``acc[W_0] += sum_r C[r] x_r^T``, ``acc[b_0] += sum_r C[r]`` over the
    tile positions ``keep[0:nk]`` (rows of dropped terms are never read: they
    may hold inf or NaN); 4 rows per pass over a weight row."""
    p = X.shape[1]
    ob = h0 * p
    for k in range(h0):
        row = k * p
        t = 0
        bsum = 0.0
        while t + 4 <= nk:
            r0 = keep[t]
            r1 = keep[t + 1]
            r2 = keep[t + 2]
            r3 = keep[t + 3]
            c0 = C[r0, k]
            c1 = C[r1, k]
            c2 = C[r2, k]
            c3 = C[r3, k]
            x0 = X[rws[r0]]
            x1 = X[rws[r1]]
            x2 = X[rws[r2]]
            x3 = X[rws[r3]]
            for j in range(p):
                acc[row + j] += (c0 * x0[j] + c1 * x1[j]) + (c2 * x2[j] + c3 * x3[j])
            bsum += (c0 + c1) + (c2 + c3)
            t += 4
        while t < nk:
            r0 = keep[t]
            c0 = C[r0, k]
            x0 = X[rws[r0]]
            for j in range(p):
                acc[row + j] += c0 * x0[j]
            bsum += c0
            t += 1
        acc[ob + k] += bsum


def _sqnorm_row(x):
    """|x|^2 (a loop that stores nothing)."""
    s = 0.0
    for j in range(x.shape[0]):
        s += x[j] * x[j]
    return s


def _hidden0(Zr, h0, act, a, s1, L):
    """Layer 0's activations from its pre-activations ``Zr`` (a row of the
    tile's Z) into ``a[0:h0]``, act' into ``s1``; a network without hidden
    layers (L = 0) has its outputs there."""
    if L == 0:
        for k in range(h0):
            a[k] = Zr[k]
        return
    for k in range(h0):
        ak, dk, _ = _act(Zr[k], act)
        a[k] = ak
        s1[k] = dk


def _forward_rest(w, sizes, woff, uoff, act, a, s1):
    """Layers 1..L from layer 0's activations in ``a``: fills ``a`` (hidden
    activations, then the outputs) and ``s1`` (act' of hidden units)."""
    nl = sizes.shape[0] - 1
    for m in range(1, nl):
        nin = sizes[m]
        nout = sizes[m + 1]
        W0 = woff[m]
        bo = W0 + nout * nin
        ui = uoff[m - 1]
        u0 = uoff[m]
        last = m == nl - 1
        for k in range(nout):
            row = W0 + k * nin
            s = 0.0
            for j in range(nin):
                s += w[row + j] * a[ui + j]
            s += w[bo + k]
            if last:
                a[u0 + k] = s
            else:
                ak, dk, _ = _act(s, act)
                a[u0 + k] = ak
                s1[u0 + k] = dk


def _backward(w, sizes, woff, uoff, s1, dl):
    """From the outputs' ``dl`` (dl/do in the output units) down to layer 0:
    ``dl_{m-1} = act'(z_{m-1}) * (W_m^T dl_m)``."""
    nl = sizes.shape[0] - 1
    for m in range(nl - 1, 0, -1):
        nin = sizes[m]
        nout = sizes[m + 1]
        W0 = woff[m]
        ui = uoff[m - 1]
        u0 = uoff[m]
        for j in range(nin):
            dl[ui + j] = 0.0
        for k in range(nout):
            row = W0 + k * nin
            c = dl[u0 + k]
            for j in range(nin):
                dl[ui + j] += w[row + j] * c
        for j in range(nin):
            dl[ui + j] *= s1[ui + j]


def _grad_sqnorm(sizes, uoff, a, dl, xx):
    """Squared norm of the record's gradient: sum_m |dl_m|^2 (|a_{m-1}|^2 + 1),
    |a_{-1}|^2 = xx (loops that store nothing)."""
    nl = sizes.shape[0] - 1
    g2 = 0.0
    for m in range(nl):
        u0 = uoff[m]
        dd = 0.0
        for k in range(sizes[m + 1]):
            dd += dl[u0 + k] * dl[u0 + k]
        if m == 0:
            aa = xx
        else:
            ui = uoff[m - 1]
            aa = 0.0
            for j in range(sizes[m]):
                aa += a[ui + j] * a[ui + j]
        g2 += dd * (aa + 1.0)
    return g2


def _acc_rest(acc, sizes, woff, uoff, a, dl, s):
    """acc[W_m] += s dl_m a_{m-1}^T, acc[b_m] += s dl_m for layers m >= 1."""
    nl = sizes.shape[0] - 1
    for m in range(1, nl):
        nin = sizes[m]
        nout = sizes[m + 1]
        W0 = woff[m]
        bo = W0 + nout * nin
        ui = uoff[m - 1]
        u0 = uoff[m]
        for k in range(nout):
            c = s * dl[u0 + k]
            row = W0 + k * nin
            for j in range(nin):
                acc[row + j] += c * a[ui + j]
            acc[bo + k] += c


def _record_grad(w, sizes, woff, uoff, act, head, hp, yi, Zr, a, s1, dl):
    """Forward (from layer 0's pre-activations ``Zr``), head and backward of
    one record: activations in ``a``, act' in ``s1``, dl/dz in ``dl``."""
    nl = sizes.shape[0] - 1
    _hidden0(Zr, sizes[1], act, a, s1, nl - 1)
    _forward_rest(w, sizes, woff, uoff, act, a, s1)
    _head_grad(a, uoff[nl - 1], sizes[nl], yi, head, hp, dl)
    _backward(w, sizes, woff, uoff, s1, dl)


# ------------------------------------------------------------------------ kernels
def _grad_sum(X, y, idx, full, w, sizes, act, head, hp, clip):
    """Sum over the batch of per-record gradients of the network's loss, each
    scaled by ``min(1, clip/|g_i|)`` (non-finite norm: dropped).  The batch is
    all rows when ``full`` (``idx`` ignored), else rows ``idx`` (repeats
    allowed).  Returns ``(sum, n_clipped)``: the O1 sensitivity is enforced here."""
    n = X.shape[0]
    woff, uoff = _layout(sizes)
    D = woff[woff.shape[0] - 1]
    U = uoff[uoff.shape[0] - 1]
    h0 = sizes[1]
    b = n if full else idx.shape[0]
    nc = _mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, D))
    ncl = np.zeros(nc, dtype=np.int64)
    clip2 = clip * clip
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        Z = np.empty((TILE, h0))
        C = np.empty((TILE, h0))
        rws = np.empty(TILE, dtype=np.int64)
        keep = np.empty(TILE, dtype=np.int64)
        a = np.empty(U)
        s1 = np.empty(U)
        dl = np.empty(U)
        k_cl = 0
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            _rows_of(idx, full, t0, t0 + nr, rws)
            _first_layer(w, X, rws, nr, h0, Z)
            nk = 0
            for r in range(nr):
                i = rws[r]
                xi = X[i]
                _record_grad(w, sizes, woff, uoff, act, head, hp, y[i], Z[r], a, s1, dl)
                g2 = _grad_sqnorm(sizes, uoff, a, dl, _sqnorm_row(xi))
                if not g2 <= clip2:
                    k_cl += 1
                s = _scale(g2, clip, clip2)
                if s == 0.0:
                    continue
                for k in range(h0):
                    C[r, k] = s * dl[k]
                keep[nk] = r
                nk += 1
                _acc_rest(acc, sizes, woff, uoff, a, dl, s)
            _first_layer_acc(acc, X, rws, keep, nk, h0, C)
        ncl[c] = k_cl
    out = np.zeros(D)
    nclip = 0
    for c in range(nc):
        for j in range(D):
            out[j] += part[c, j]
        nclip += ncl[c]
    return out, nclip


def _diff_sum(X, y, idx, full, w, wp, sizes, act, head, hp, clip):
    """Sum over the batch of per-record gradient differences
    ``grad f(w; z_i) - grad f(wp; z_i)``, each scaled by ``min(1, clip/|D_i|)``
    (non-finite norm: dropped); batch as :func:`_grad_sum`.  Two forward and
    backward passes per record, one accumulation; past the first layer the
    difference's entries are formed in scratch, and its norm and the
    accumulated term both read them.  Returns ``(sum, n_clipped)``: the O2
    sensitivity is enforced here."""
    n = X.shape[0]
    p = X.shape[1]
    woff, uoff = _layout(sizes)
    D = woff[woff.shape[0] - 1]
    U = uoff[uoff.shape[0] - 1]
    h0 = sizes[1]
    D0 = h0 * (p + 1)  # the first layer's parameters
    b = n if full else idx.shape[0]
    nc = _mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, D))
    ncl = np.zeros(nc, dtype=np.int64)
    clip2 = clip * clip
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        Z = np.empty((TILE, h0))
        Zq = np.empty((TILE, h0))
        C = np.empty((TILE, h0))
        rws = np.empty(TILE, dtype=np.int64)
        keep = np.empty(TILE, dtype=np.int64)
        a = np.empty(U)
        s1 = np.empty(U)
        dl = np.empty(U)
        aq = np.empty(U)
        s1q = np.empty(U)
        dlq = np.empty(U)
        dd0 = np.empty(h0)
        rest = np.empty(D - D0)  # the difference's entries past the first layer
        k_cl = 0
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            _rows_of(idx, full, t0, t0 + nr, rws)
            _first_layer(w, X, rws, nr, h0, Z)
            _first_layer(wp, X, rws, nr, h0, Zq)
            nk = 0
            for r in range(nr):
                i = rws[r]
                xi = X[i]
                _record_grad(w, sizes, woff, uoff, act, head, hp, y[i], Z[r], a, s1, dl)
                _record_grad(wp, sizes, woff, uoff, act, head, hp, y[i], Zq[r], aq, s1q, dlq)
                for k in range(h0):
                    dd0[k] = dl[k] - dlq[k]
                _diff_rest(sizes, woff, uoff, a, dl, aq, dlq, rest, D0)
                g2 = _sqnorm_row(dd0) * (_sqnorm_row(xi) + 1.0) + _sqnorm_row(rest)
                if not g2 <= clip2:
                    k_cl += 1
                s = _scale(g2, clip, clip2)
                if s == 0.0:
                    continue
                for k in range(h0):
                    C[r, k] = s * dd0[k]
                keep[nk] = r
                nk += 1
                for j in range(D - D0):
                    acc[D0 + j] += s * rest[j]
            _first_layer_acc(acc, X, rws, keep, nk, h0, C)
        ncl[c] = k_cl
    out = np.zeros(D)
    nclip = 0
    for c in range(nc):
        for j in range(D):
            out[j] += part[c, j]
        nclip += ncl[c]
    return out, nclip


def _diff_rest(sizes, woff, uoff, a, dl, aq, dlq, rest, D0):
    """The gradient difference's entries past the first layer, in w's order:
    ``dl_m a_{m-1}^T - dlq_m aq_{m-1}^T`` then ``dl_m - dlq_m`` for m >= 1, into
    ``rest`` (offset by the first layer's D0 parameters)."""
    nl = sizes.shape[0] - 1
    for m in range(1, nl):
        nin = sizes[m]
        nout = sizes[m + 1]
        W0 = woff[m] - D0
        bo = W0 + nout * nin
        ui = uoff[m - 1]
        u0 = uoff[m]
        for k in range(nout):
            c = dl[u0 + k]
            cq = dlq[u0 + k]
            row = W0 + k * nin
            for j in range(nin):
                rest[row + j] = c * a[ui + j] - cq * aq[ui + j]
            rest[bo + k] = c - cq


def _loss_sum(X, y, idx, w, sizes, act, head, hp):
    """Sum over rows ``idx`` of the per-record loss l(o(w; x_i), y_i)."""
    woff, uoff = _layout(sizes)
    U = uoff[uoff.shape[0] - 1]
    h0 = sizes[1]
    nl = sizes.shape[0] - 1
    b = idx.shape[0]
    nc = _mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros(nc)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        Z = np.empty((TILE, h0))
        rws = np.empty(TILE, dtype=np.int64)
        a = np.empty(U)
        s1 = np.empty(U)
        s = 0.0
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            _rows_of(idx, False, t0, t0 + nr, rws)
            _first_layer(w, X, rws, nr, h0, Z)
            for r in range(nr):
                _hidden0(Z[r], h0, act, a, s1, nl - 1)
                _forward_rest(w, sizes, woff, uoff, act, a, s1)
                s += _head_value(a, uoff[nl - 1], sizes[nl], y[rws[r]], head, hp)
        part[c] = s
    tot = 0.0
    for c in range(nc):
        tot += part[c]
    return tot


def _outputs(X, w, sizes, act):
    """The network outputs o(w; x_i) for every row, as an (n, n_out) array."""
    n = X.shape[0]
    woff, uoff = _layout(sizes)
    U = uoff[uoff.shape[0] - 1]
    h0 = sizes[1]
    nl = sizes.shape[0] - 1
    K = sizes[nl]
    o0 = uoff[nl - 1]
    out = np.empty((n, K))
    nc = _mlp_chunks(n)
    step = (n + nc - 1) // nc
    for c in prange(nc):
        lo = c * step
        hi = min(n, lo + step)
        Z = np.empty((TILE, h0))
        rws = np.empty(TILE, dtype=np.int64)
        a = np.empty(U)
        s1 = np.empty(U)
        for t0 in range(lo, hi, TILE):
            nr = min(TILE, hi - t0)
            _rows_of(rws, True, t0, t0 + nr, rws)
            _first_layer(w, X, rws, nr, h0, Z)
            for r in range(nr):
                _hidden0(Z[r], h0, act, a, s1, nl - 1)
                _forward_rest(w, sizes, woff, uoff, act, a, s1)
                for k in range(K):
                    out[t0 + r, k] = a[o0 + k]
    return out


def _hvp_sum(X, y, idx, w, V, sizes, act, head, hp):
    """Sum over rows ``idx`` of the exact per-record Hessian-vector product
    ``grad^2 f(w; z_i) V`` (forward-over-reverse: the directional derivative
    of the forward and backward passes along V)."""
    p = X.shape[1]
    woff, uoff = _layout(sizes)
    D = woff[woff.shape[0] - 1]
    U = uoff[uoff.shape[0] - 1]
    nl = sizes.shape[0] - 1
    b = idx.shape[0]
    nc = _mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, D))
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        a = np.empty(U)     # activations (outputs last)
        da = np.empty(U)    # their tangents along V
        dz = np.empty(U)    # tangents of the pre-activations
        s1 = np.empty(U)    # act'
        s2 = np.empty(U)    # act''
        dl = np.empty(U)    # dl/dz
        ddl = np.empty(U)   # its tangent
        for t in range(lo, hi):
            i = idx[t]
            xi = X[i]
            _hvp_record(w, V, xi, y[i], sizes, woff, uoff, act, head, hp, p, nl, a, da, dz, s1, s2, dl, ddl, acc)
    out = np.zeros(D)
    for c in range(nc):
        for j in range(D):
            out[j] += part[c, j]
    return out


def _hvp_record(w, V, xi, yi, sizes, woff, uoff, act, head, hp, p, nl, a, da, dz, s1, s2, dl, ddl, acc):
    """acc += grad^2 f(w; x_i, y_i) V for one record (see :func:`_hvp_sum`)."""
    # forward and its tangent
    for m in range(nl):
        nin = sizes[m]
        nout = sizes[m + 1]
        W0 = woff[m]
        bo = W0 + nout * nin
        u0 = uoff[m]
        ui = uoff[m - 1] if m > 0 else 0
        last = m == nl - 1
        for k in range(nout):
            row = W0 + k * nin
            s = 0.0
            ds = 0.0
            if m == 0:
                for j in range(p):
                    s += w[row + j] * xi[j]
                    ds += V[row + j] * xi[j]
            else:
                for j in range(nin):
                    s += w[row + j] * a[ui + j]
                    ds += V[row + j] * a[ui + j] + w[row + j] * da[ui + j]
            s += w[bo + k]
            ds += V[bo + k]
            dz[u0 + k] = ds
            if last:
                a[u0 + k] = s
                da[u0 + k] = ds
            else:
                ak, d1, d2 = _act(s, act)
                a[u0 + k] = ak
                s1[u0 + k] = d1
                s2[u0 + k] = d2
                da[u0 + k] = d1 * ds
    o0 = uoff[nl - 1]
    K = sizes[nl]
    _head_grad(a, o0, K, yi, head, hp, dl)
    _head_hvp(a, o0, K, yi, head, hp, da, ddl)
    # backward and its tangent, accumulating HV block by block
    for m in range(nl - 1, -1, -1):
        nin = sizes[m]
        nout = sizes[m + 1]
        W0 = woff[m]
        bo = W0 + nout * nin
        u0 = uoff[m]
        if m == 0:
            for k in range(nout):
                c = ddl[u0 + k]
                row = W0 + k * nin
                for j in range(p):
                    acc[row + j] += c * xi[j]
                acc[bo + k] += c
            continue
        ui = uoff[m - 1]
        for k in range(nout):
            c = ddl[u0 + k]
            e = dl[u0 + k]
            row = W0 + k * nin
            for j in range(nin):
                acc[row + j] += c * a[ui + j] + e * da[ui + j]
            acc[bo + k] += c
        # dl_{m-1} = s1 * (W^T dl);  ddl_{m-1} = s2 dz * (W^T dl) + s1 * (dW^T dl + W^T ddl)
        for j in range(nin):
            dl[ui + j] = 0.0
            ddl[ui + j] = 0.0
        for k in range(nout):
            row = W0 + k * nin
            e = dl[u0 + k]
            c = ddl[u0 + k]
            for j in range(nin):
                dl[ui + j] += w[row + j] * e
                ddl[ui + j] += V[row + j] * e + w[row + j] * c
        for j in range(nin):
            t = dl[ui + j]
            dl[ui + j] = s1[ui + j] * t
            ddl[ui + j] = s2[ui + j] * dz[ui + j] * t + s1[ui + j] * ddl[ui + j]


for _name in ("_sigm", "_act", "_lphi", "_ldphi", "_ld2phi", "_scale", "_head_value", "_head_grad", "_head_hvp",
              "_layout", "_rows_of", "_first_layer", "_first_layer_acc", "_sqnorm_row", "_hidden0", "_forward_rest",
              "_backward", "_grad_sqnorm", "_acc_rest", "_record_grad", "_diff_rest", "_hvp_record"):
    globals()[_name] = jit_inline(globals()[_name])
_mlp_chunks = jit_inline(_mlp_chunks)

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
