"""Fused per-record kernels for one-hidden-layer networks (the ``mlp`` loss).

The model: ``o(w; x) = v . act(W x + b) + c`` with ``W`` (h x p), ``b``, ``v``
(h) and ``c`` (scalar), and the per-record loss ``f(w; x, y) = log(1 + exp(-y o))``
(binary labels +-1).  The parameter vector is flat, in the order

    w = [W (h*p, row-major) | b (h) | v (h) | c (1)],   D = h*p + 2h + 1

(:func:`n_params`).  ``act`` is chosen by an integer code: :data:`TANH` or
:data:`SOFTPLUS`.

Per record the gradient is ``e * grad o`` with ``e = dphi(o, y)``:

    grad_W = u x^T,  grad_b = u,  grad_v = e a,  grad_c = e,   u = e v * act'(z)

so its squared norm is ``|u|^2 (|x|^2 + 1) + e^2 (|a|^2 + 1)``: every factor is
a sum of squares of the term's own entries (the Frobenius norm of an outer
product is the product of the norms), with no cancellation, so the norm is
that of the term itself up to a relative rounding of ~(p + h) 2^-53, which
the host's clip margin covers.  The gradient *difference* of the O2 kernel is
formed the same way from the difference of the two points' ``u``, ``e a`` and
``e`` (``x`` is shared), never from an expanded |g|^2 - 2<g,g'> + |g'|^2.

Every kernel, like :mod:`dpreg_kernels.linear_model`,

* makes one pass over the selected rows, fusing forward, backward, norm,
  clip and accumulation per record (peak extra memory O(chunks x D) plus
  O(h) per chunk: never an (n x D) matrix);
* splits the rows into fixed chunks (a function of the batch size alone:
  :func:`mlp_chunks`), runs chunks under ``prange`` and adds the partial sums
  serially in chunk order, so results are bit-identical for every thread count;
* drops a term whose norm is not finite (counted as clipped) and scales the
  others to norm <= clip;
* draws no random numbers.

The Hessian-vector product is exact: forward-over-reverse (the directional
derivative of the backward pass along ``V``), record by record.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange, types

from .config import MAX_CHUNKS, jit_inline, jit_parallel, jit_serial

f8 = types.float64
i8 = types.int64
Mat = types.Array(f8, 2, "C")
Vec = types.Array(f8, 1, "C")
Idx = types.Array(i8, 1, "C")

#: activation codes
TANH = 0
SOFTPLUS = 1
ACTIVATIONS = {"tanh": TANH, "softplus": SOFTPLUS}

#: A record costs ~4 h p flops here (h times a linear model's), so chunks are
#: smaller than linear_model's MIN_CHUNK_ROWS: a batch of 256 still spreads
#: over 8 chunks.  The split depends on the batch size alone.
MIN_CHUNK_ROWS = 32


def n_params(h, p):
    """Length of the flat parameter vector for width ``h`` and ``p`` features."""
    return h * p + 2 * h + 1


def _mlp_chunks(b):
    """Number of row chunks for a batch of ``b`` rows (a function of b alone)."""
    c = (b + MIN_CHUNK_ROWS - 1) // MIN_CHUNK_ROWS
    if c > MAX_CHUNKS:
        c = MAX_CHUNKS
    if c < 1:
        c = 1
    return c


mlp_chunks = jit_serial(i8(i8))(_mlp_chunks)


# ------------------------------------------------------------------ scalar parts
def _act(z, kind):
    """(act(z), act'(z), act''(z)) for the activation ``kind``."""
    if kind == 0:
        t = math.tanh(z)
        s1 = 1.0 - t * t
        return t, s1, -2.0 * t * s1
    # softplus log(1 + e^z), stable; act' = sigmoid(z), act'' = sigmoid (1 - sigmoid)
    if z > 0:
        e = math.exp(-z)
        s = 1.0 / (1.0 + e)
        return z + math.log1p(e), s, s * (1.0 - s)
    e = math.exp(z)
    s = e / (1.0 + e)
    return math.log1p(e), s, s * (1.0 - s)


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


def _forward(w, xi, h, p, kind, z, a, s1):
    """Fill pre-activations z, activations a and act'(z) in s1; return
    (output o, |x|^2)."""
    ob = h * p
    ov = ob + h
    xx = 0.0
    for j in range(p):
        xx += xi[j] * xi[j]
    o = w[ov + h]
    for k in range(h):
        row = k * p
        s = w[ob + k]
        for j in range(p):
            s += w[row + j] * xi[j]
        z[k] = s
        ak, dk, _ = _act(s, kind)
        a[k] = ak
        s1[k] = dk
        o += w[ov + k] * ak
    return o, xx


def _accumulate(acc, xi, h, p, su, sea, se):
    """acc += the term with W part su x^T, b part su, v part sea, c part se."""
    ob = h * p
    ov = ob + h
    for k in range(h):
        row = k * p
        c = su[k]
        if c != 0.0:
            for j in range(p):
                acc[row + j] += c * xi[j]
        acc[ob + k] += c
        acc[ov + k] += sea[k]
    acc[ov + h] += se


# ------------------------------------------------------------------------ kernels
def _grad_sum(X, y, idx, full, w, h, kind, clip):
    """Sum over the batch of per-record logistic-loss gradients of the network,
    each scaled by ``min(1, clip/|g_i|)`` (non-finite norm: dropped).  The batch
    is all rows when ``full`` (``idx`` ignored), else rows ``idx`` (repeats
    allowed).  Returns ``(sum, n_clipped)``: the O1 sensitivity is enforced here."""
    n = X.shape[0]
    p = X.shape[1]
    D = h * p + 2 * h + 1
    b = n if full else idx.shape[0]
    nc = mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, D))
    ncl = np.zeros(nc, dtype=np.int64)
    clip2 = clip * clip
    ov = h * p + h
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        z = np.empty(h)
        a = np.empty(h)
        s1 = np.empty(h)
        su = np.empty(h)
        sea = np.empty(h)
        k_cl = 0
        for t in range(lo, hi):
            i = t if full else idx[t]
            xi = X[i]
            o, xx = _forward(w, xi, h, p, kind, z, a, s1)
            e = _ldphi(o, y[i])
            for k in range(h):
                su[k] = e * w[ov + k] * s1[k]
            # the sums in a loop that stores nothing: LLVM vectorises it without a run-time
            # overlap check, so their order never depends on where the scratch arrays lie
            uu = 0.0
            aa = 0.0
            for k in range(h):
                uu += su[k] * su[k]
                aa += a[k] * a[k]
            g2 = uu * (xx + 1.0) + e * e * (aa + 1.0)
            if not g2 <= clip2:
                k_cl += 1
            s = _scale(g2, clip, clip2)
            if s == 0.0:
                continue
            for k in range(h):
                su[k] *= s
                sea[k] = s * e * a[k]
            _accumulate(acc, xi, h, p, su, sea, s * e)
        ncl[c] = k_cl
    out = np.zeros(D)
    nclip = 0
    for c in range(nc):
        for j in range(D):
            out[j] += part[c, j]
        nclip += ncl[c]
    return out, nclip


def _diff_sum(X, y, idx, full, w, wp, h, kind, clip):
    """Sum over the batch of per-record gradient differences
    ``grad f(w; z_i) - grad f(wp; z_i)``, each scaled by ``min(1, clip/|D_i|)``
    (non-finite norm: dropped); batch as :func:`_grad_sum`.  Two forward and
    backward passes per record, one accumulation.  Returns ``(sum, n_clipped)``:
    the O2 sensitivity is enforced here."""
    n = X.shape[0]
    p = X.shape[1]
    D = h * p + 2 * h + 1
    b = n if full else idx.shape[0]
    nc = mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, D))
    ncl = np.zeros(nc, dtype=np.int64)
    clip2 = clip * clip
    ov = h * p + h
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        z = np.empty(h)
        a = np.empty(h)
        s1 = np.empty(h)
        zq = np.empty(h)
        aq = np.empty(h)
        s1q = np.empty(h)
        su = np.empty(h)
        sea = np.empty(h)
        k_cl = 0
        for t in range(lo, hi):
            i = t if full else idx[t]
            xi = X[i]
            o, xx = _forward(w, xi, h, p, kind, z, a, s1)
            oq, _ = _forward(wp, xi, h, p, kind, zq, aq, s1q)
            e = _ldphi(o, y[i])
            eq = _ldphi(oq, y[i])
            for k in range(h):
                su[k] = e * w[ov + k] * s1[k] - eq * wp[ov + k] * s1q[k]
                sea[k] = e * a[k] - eq * aq[k]
            uu = 0.0  # sums in a loop that stores nothing (see _grad_sum)
            vv = 0.0
            for k in range(h):
                uu += su[k] * su[k]
                vv += sea[k] * sea[k]
            de = e - eq
            g2 = uu * (xx + 1.0) + vv + de * de
            if not g2 <= clip2:
                k_cl += 1
            s = _scale(g2, clip, clip2)
            if s == 0.0:
                continue
            for k in range(h):
                su[k] *= s
                sea[k] *= s
            _accumulate(acc, xi, h, p, su, sea, s * de)
        ncl[c] = k_cl
    out = np.zeros(D)
    nclip = 0
    for c in range(nc):
        for j in range(D):
            out[j] += part[c, j]
        nclip += ncl[c]
    return out, nclip


def _loss_sum(X, y, idx, w, h, kind):
    """Sum over rows ``idx`` of the per-record loss log(1 + exp(-y_i o(w; x_i)))."""
    p = X.shape[1]
    b = idx.shape[0]
    nc = mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros(nc)
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        z = np.empty(h)
        a = np.empty(h)
        s1 = np.empty(h)
        s = 0.0
        for t in range(lo, hi):
            i = idx[t]
            o, _ = _forward(w, X[i], h, p, kind, z, a, s1)
            s += _lphi(o, y[i])
        part[c] = s
    tot = 0.0
    for c in range(nc):
        tot += part[c]
    return tot


def _outputs(X, w, h, kind):
    """The network output o(w; x_i) for every row (the decision function)."""
    n = X.shape[0]
    p = X.shape[1]
    out = np.empty(n)
    nc = mlp_chunks(n)
    step = (n + nc - 1) // nc
    for c in prange(nc):
        lo = c * step
        hi = min(n, lo + step)
        z = np.empty(h)
        a = np.empty(h)
        s1 = np.empty(h)
        for i in range(lo, hi):
            o, _ = _forward(w, X[i], h, p, kind, z, a, s1)
            out[i] = o
    return out


def _hvp_sum(X, y, idx, w, V, h, kind):
    """Sum over rows ``idx`` of the exact per-record Hessian-vector product
    ``grad^2 f(w; z_i) V`` (forward-over-reverse: the directional derivative of
    the backward pass along V)."""
    p = X.shape[1]
    D = h * p + 2 * h + 1
    ob = h * p
    ov = ob + h
    b = idx.shape[0]
    nc = mlp_chunks(b)
    step = (b + nc - 1) // nc
    part = np.zeros((nc, D))
    for c in prange(nc):
        lo = c * step
        hi = min(b, lo + step)
        acc = part[c]
        z = np.empty(h)
        a = np.empty(h)
        s1 = np.empty(h)
        dz = np.empty(h)
        du = np.empty(h)
        dga = np.empty(h)
        for t in range(lo, hi):
            i = idx[t]
            xi = X[i]
            yi = y[i]
            # forward and its tangent along V
            o = w[ov + h]
            do = V[ov + h]
            for k in range(h):
                row = k * p
                s = w[ob + k]
                ds = V[ob + k]
                for j in range(p):
                    xj = xi[j]
                    s += w[row + j] * xj
                    ds += V[row + j] * xj
                z[k] = s
                dz[k] = ds
                ak, d1, _ = _act(s, kind)
                a[k] = ak
                s1[k] = d1
                o += w[ov + k] * ak
                do += V[ov + k] * ak + w[ov + k] * d1 * ds
            e = _ldphi(o, yi)
            de = _ld2phi(o, yi) * do
            # tangent of u = e v act'(z), of e a, of e
            for k in range(h):
                _, d1, d2 = _act(z[k], kind)
                du[k] = de * w[ov + k] * d1 + e * V[ov + k] * d1 + e * w[ov + k] * d2 * dz[k]
                dga[k] = de * a[k] + e * d1 * dz[k]
            _accumulate(acc, xi, h, p, du, dga, de)
    out = np.zeros(D)
    for c in range(nc):
        for j in range(D):
            out[j] += part[c, j]
    return out


_act = jit_inline(_act)
_lphi = jit_inline(_lphi)
_ldphi = jit_inline(_ldphi)
_ld2phi = jit_inline(_ld2phi)
_scale = jit_inline(_scale)
_forward = jit_inline(_forward)
_accumulate = jit_inline(_accumulate)

_GRAD_SIG = types.Tuple((Vec, i8))(Mat, Vec, Idx, types.boolean, Vec, i8, i8, f8)
_DIFF_SIG = types.Tuple((Vec, i8))(Mat, Vec, Idx, types.boolean, Vec, Vec, i8, i8, f8)

#: O1: clipped per-record gradient sum; O2: clipped per-record difference sum
grad_sum = jit_parallel(_GRAD_SIG)(_grad_sum)
diff_sum = jit_parallel(_DIFF_SIG)(_diff_sum)
loss_sum = jit_parallel(f8(Mat, Vec, Idx, Vec, i8, i8))(_loss_sum)
outputs = jit_parallel(Vec(Mat, Vec, i8, i8))(_outputs)
hvp_sum = jit_parallel(Vec(Mat, Vec, Idx, Vec, Vec, i8, i8))(_hvp_sum)
