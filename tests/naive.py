"""Plain-numpy references for every kernel (slow, obvious, O(n x d) memory).

They call the loss's scalar functions as ordinary Python (no numba) and build
the per-sample gradient matrix explicitly, which the kernels never do.
"""
from __future__ import annotations

import numpy as np


def _vec(f):
    return np.vectorize(f, otypes=[float])


def per_sample_gradients(loss, X, y, w):
    """(n x d) matrix of per-sample gradients a_i x_i + grad psi(w)."""
    a = _vec(type(loss).dphi)(X @ w, y)
    return a[:, None] * X + loss.psi_grad(w)[None, :]


def clip_rows(G, clip):
    norms = np.linalg.norm(G, axis=1)
    scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    return G * scale[:, None], int(np.sum(norms > clip))


def clipped_grad_sum(loss, X, y, idx, w, clip):
    Gm = per_sample_gradients(loss, X[idx], y[idx], w)
    C, k = clip_rows(Gm, clip)
    return C.sum(axis=0), k


def clipped_diff_sum(loss, X, y, idx, w, wp, clip):
    D = per_sample_gradients(loss, X[idx], y[idx], w) - per_sample_gradients(loss, X[idx], y[idx], wp)
    C, k = clip_rows(D, clip)
    return C.sum(axis=0), k


def value(loss, X, y, w):
    return float(np.mean(_vec(type(loss).phi)(X @ w, y)) + loss.psi(w))


def gradient(loss, X, y, w):
    return per_sample_gradients(loss, X, y, w).mean(axis=0)


def hessian(loss, X, y, w):
    h = _vec(type(loss).d2phi)(X @ w, y)
    H = (X * h[:, None]).T @ X / X.shape[0]
    eye = np.eye(X.shape[1])
    H += np.stack([loss.psi_hvp(w, eye[j]) for j in range(X.shape[1])], axis=1)
    return H


def hvp(loss, X, y, w, v):
    return hessian(loss, X, y, w) @ v


def finite_diff_grad(f, w, h=1e-6):
    g = np.zeros_like(w)
    for j in range(len(w)):
        e = np.zeros_like(w)
        e[j] = h
        g[j] = (f(w + e) - f(w - e)) / (2 * h)
    return g


# ----------------------------------------------------------- data parts (kernels)
def row_sqnorms(X):
    """|x_i|^2 for every row."""
    return np.array([float(np.dot(x, x)) for x in X])


def first_nonfinite(X):
    """Row-major position of the first NaN or infinite entry, -1 if none."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(X, dtype=float).ravel()))
    return int(bad[0]) if bad.size else -1


def scale_rows(X, column=None):
    """Rows scaled into the unit ball, x / max(1, |x|) (the norm of each row
    divided by its largest magnitude first: no overflow), then a constant
    column when given."""
    X = np.asarray(X, dtype=float)
    m = np.max(np.abs(X), axis=1, keepdims=True)
    m[m == 0] = 1.0
    out = X / np.maximum(1.0, np.linalg.norm(X / m, axis=1, keepdims=True) * m)
    return out if column is None else np.hstack([out, np.full((X.shape[0], 1), float(column))])


def phi_sum(loss, X, y, idx, w):
    """Sum over rows idx of phi(<x_i, w>, y_i) (no psi)."""
    return float(sum(type(loss).phi(float(X[i] @ w), float(y[i])) for i in idx))


def hvp_sum(loss, X, y, idx, w, v):
    """Sum over rows idx of d2phi(<x_i,w>, y_i) <x_i, v> x_i (no psi)."""
    out = np.zeros(X.shape[1])
    for i in idx:
        out += type(loss).d2phi(float(X[i] @ w), float(y[i])) * float(X[i] @ v) * X[i]
    return out


def hessian_sum(loss, X, y, idx, w):
    """Sum over rows idx of d2phi(<x_i,w>, y_i) x_i x_i^T (no psi)."""
    out = np.zeros((X.shape[1], X.shape[1]))
    for i in idx:
        out += type(loss).d2phi(float(X[i] @ w), float(y[i])) * np.outer(X[i], X[i])
    return out


# ------------------------------------------------------------------ CSR kernels
def _csr_clip_norms2(X, a, r):
    """Per-row squared norm the CSR kernels clip by (dpreg_kernels.sparse): exact
    a_i^2 |x_i|^2 when r = 0, else the bound sum_{j in supp x_i} (a_i x_ij + r_j)^2 + |r|^2."""
    X = X.tocsr()
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    rr = float(r @ r)
    terms = a[rows] * X.data + (r[X.indices] if rr > 0 else 0.0)
    g2 = np.bincount(rows, weights=terms * terms, minlength=X.shape[0])
    return g2 + rr if rr > 0 else g2


def _csr_clipped(X, a, r, clip):
    g2 = _csr_clip_norms2(X, a, r)
    norms = np.sqrt(g2)
    s = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    dense = np.asarray(X.toarray())
    G = a[:, None] * dense + r[None, :]
    return (G * s[:, None]).sum(axis=0), int(np.sum(norms > clip))


def csr_clipped_grad_sum(loss, X, y, idx, w, clip):
    """The CSR O1 kernel: per-record gradients clipped by the CSR norm rule."""
    Xb = X[idx]
    a = _vec(type(loss).dphi)(np.asarray(Xb @ w).ravel(), y[idx])
    return _csr_clipped(Xb, a, np.asarray(loss.psi_grad(w), dtype=float), clip)


def csr_clipped_diff_sum(loss, X, y, idx, w, wp, clip):
    """The CSR O2 kernel: per-record gradient differences clipped by the CSR norm rule."""
    Xb = X[idx]
    dphi = _vec(type(loss).dphi)
    a = dphi(np.asarray(Xb @ w).ravel(), y[idx]) - dphi(np.asarray(Xb @ wp).ravel(), y[idx])
    r = np.asarray(loss.psi_grad(w), dtype=float) - np.asarray(loss.psi_grad(wp), dtype=float)
    return _csr_clipped(Xb, a, r, clip)


# ------------------------------------------------ one-hidden-layer networks (mlp)
# Parameters w = [W (h x p, row-major) | b (h) | v (h) | c]; output
# o = v . act(W x + b) + c; per-record loss log(1 + exp(-y o)).
def _mlp_act(z, activation):
    """(act, act', act'') elementwise."""
    if activation == "tanh":
        t = np.tanh(z)
        return t, 1.0 - t * t, -2.0 * t * (1.0 - t * t)
    s = 1.0 / (1.0 + np.exp(-z))
    return np.logaddexp(0.0, z), s, s * (1.0 - s)


def _mlp_unpack(w, h, p):
    return w[:h * p].reshape(h, p), w[h * p:h * p + h], w[h * p + h:h * p + 2 * h], w[-1]


def mlp_outputs(h, activation, X, w):
    W, b, v, c = _mlp_unpack(w, h, X.shape[1])
    return _mlp_act(X @ W.T + b, activation)[0] @ v + c


def mlp_value(h, activation, X, y, w):
    """Mean per-record logistic loss of the network."""
    return float(np.mean(np.logaddexp(0.0, -y * mlp_outputs(h, activation, X, w))))


def mlp_per_record_gradients(h, activation, X, y, w):
    """(n x D) matrix of per-record gradients, built explicitly."""
    n, p = X.shape
    W, b, v, c = _mlp_unpack(w, h, p)
    Z = X @ W.T + b
    A, S1, _ = _mlp_act(Z, activation)
    o = A @ v + c
    e = -y / (1.0 + np.exp(y * o))               # d loss / d o
    U = e[:, None] * v[None, :] * S1              # n x h
    gW = U[:, :, None] * X[:, None, :]            # n x h x p
    return np.hstack([gW.reshape(n, h * p), U, e[:, None] * A, e[:, None]])


def mlp_clipped_grad_sum(h, activation, X, y, idx, w, clip):
    C, k = clip_rows(mlp_per_record_gradients(h, activation, X[idx], y[idx], w), clip)
    return C.sum(axis=0), k


def mlp_clipped_diff_sum(h, activation, X, y, idx, w, wp, clip):
    D = (mlp_per_record_gradients(h, activation, X[idx], y[idx], w)
         - mlp_per_record_gradients(h, activation, X[idx], y[idx], wp))
    C, k = clip_rows(D, clip)
    return C.sum(axis=0), k


def mlp_record_hessian(h, activation, x, y, w):
    """Dense Hessian of one record's loss, from the closed form
    phi'' grad o grad o^T + phi' grad^2 o, where grad^2 o has the blocks
    (theta_k, theta_k) = v_k act''(z_k) x~ x~^T and (theta_k, v_k) = act'(z_k) x~,
    x~ = (x, 1), theta_k = (W_k, b_k)."""
    p = x.shape[0]
    D = h * p + 2 * h + 1
    W, b, v, c = _mlp_unpack(w, h, p)
    z = W @ x + b
    a, s1, s2 = _mlp_act(z, activation)
    o = a @ v + c
    sg = 1.0 / (1.0 + np.exp(y * o))
    d1, d2 = -y * sg, sg * (1.0 - sg)
    go = np.concatenate([((v * s1)[:, None] * x[None, :]).reshape(-1), v * s1, a, [1.0]])
    H2 = np.zeros((D, D))
    for k in range(h):
        th = np.concatenate([np.arange(k * p, (k + 1) * p), [h * p + k]])
        xt = np.append(x, 1.0)
        H2[np.ix_(th, th)] += v[k] * s2[k] * np.outer(xt, xt)
        jv = h * p + h + k
        H2[th, jv] += s1[k] * xt
        H2[jv, th] += s1[k] * xt
    return d2 * np.outer(go, go) + d1 * H2


def mlp_hessian(h, activation, X, y, w):
    """Mean of the per-record Hessians."""
    return sum(mlp_record_hessian(h, activation, X[i], y[i], w) for i in range(X.shape[0])) / X.shape[0]


# ------------------------------------------------ networks of any depth (mlp)
# sizes = [p, n_0, ..., n_out]; w = [W_0 | b_0 | W_1 | b_1 | ...] (each W row-major);
# hidden layers a = act(W a_prev + b), a linear output layer o, a head l(o, y).
def net_act(z, activation):
    """(act, act', act'') elementwise, for every activation of the mlp loss."""
    if activation == "tanh":
        return _mlp_act(z, "tanh")
    s = np.exp(-np.logaddexp(0.0, -z))  # the sigmoid, without overflow or cancellation
    q = s * (1.0 - s)
    if activation == "softplus":
        return np.logaddexp(0.0, z), s, q
    if activation == "sigmoid":
        return s, q, q * (1.0 - 2.0 * s)
    assert activation == "silu"
    return z * s, s * (1.0 + z * (1.0 - s)), q * (2.0 + z * (1.0 - 2.0 * s))


def net_n_params(sizes):
    return sum(sizes[m + 1] * (sizes[m] + 1) for m in range(len(sizes) - 1))


def net_unpack(sizes, w):
    """[(W_m, b_m)] views of the flat vector."""
    out, o = [], 0
    for m in range(len(sizes) - 1):
        nin, nout = sizes[m], sizes[m + 1]
        out.append((w[o:o + nout * nin].reshape(nout, nin), w[o + nout * nin:o + nout * (nin + 1)]))
        o += nout * (nin + 1)
    assert o == len(w)
    return out


def _net_forward(sizes, activation, X, w, V=None):
    """Inputs of every layer (ins[0] = X), pre-activations Z, act' and act'' of
    the hidden layers, and (with V) the tangents along V of the inputs and Zs."""
    layers = net_unpack(sizes, w)
    dlayers = net_unpack(sizes, V) if V is not None else None
    ins, dins, Zs, dZs, S1, S2 = [X], [np.zeros_like(X)], [], [], [], []
    for m, (W, b) in enumerate(layers):
        Z = ins[-1] @ W.T + b
        dZ = None
        if V is not None:
            dW, db = dlayers[m]
            dZ = ins[-1] @ dW.T + dins[-1] @ W.T + db
        Zs.append(Z)
        dZs.append(dZ)
        if m < len(layers) - 1:
            A, s1, s2 = net_act(Z, activation)
            S1.append(s1)
            S2.append(s2)
            ins.append(A)
            dins.append(s1 * dZ if V is not None else None)
    return layers, dlayers, ins, dins, Zs, dZs, S1, S2


def net_outputs(sizes, activation, X, w):
    """(n, n_out) network outputs."""
    return _net_forward(sizes, activation, X, w)[4][-1]


def net_head(head, O, y, delta=1.0):
    """Per-record (loss, dl/do (n x K), d2l/do2 (n x K x K)) of the head."""
    n, K = O.shape
    if head == "logistic":
        o = O[:, 0]
        sg = 1.0 / (1.0 + np.exp(y * o))
        return np.logaddexp(0.0, -y * o), (-y * sg)[:, None], (sg * (1.0 - sg))[:, None, None]
    if head == "softmax":
        Y = (np.arange(K)[None, :] == y[:, None]).astype(float)
        m = O.max(axis=1, keepdims=True)
        E = np.exp(O - m)
        Pr = E / E.sum(axis=1, keepdims=True)
        val = np.log(E.sum(axis=1)) + m[:, 0] - (O * Y).sum(axis=1)
        Hs = np.einsum("nk,kj->nkj", Pr, np.eye(K)) - Pr[:, :, None] * Pr[:, None, :]
        return val, Pr - Y, Hs
    r = O[:, 0] - y
    if head == "squared":
        return 0.5 * r * r, r[:, None], np.ones((n, 1, 1))
    assert head == "huber"
    inside = np.abs(r) <= delta
    val = np.where(inside, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta))
    return val, np.clip(r, -delta, delta)[:, None], inside.astype(float)[:, None, None]


def net_value(sizes, activation, head, X, y, w, delta=1.0):
    """Mean per-record loss."""
    return float(np.mean(net_head(head, net_outputs(sizes, activation, X, w), y, delta)[0]))


def net_per_record_gradients(sizes, activation, head, X, y, w, delta=1.0):
    """(n x D) matrix of per-record gradients, built explicitly by backpropagation."""
    layers, _, ins, _, Zs, _, S1, _ = _net_forward(sizes, activation, X, w)
    dl = net_head(head, Zs[-1], y, delta)[1]
    blocks = []
    for m in range(len(layers) - 1, -1, -1):
        W, _ = layers[m]
        blocks.append(np.hstack([(dl[:, :, None] * ins[m][:, None, :]).reshape(len(X), -1), dl]))
        if m > 0:
            dl = (dl @ W) * S1[m - 1]
    return np.hstack(blocks[::-1])


def net_clipped_grad_sum(sizes, activation, head, X, y, idx, w, clip, delta=1.0):
    C, k = clip_rows(net_per_record_gradients(sizes, activation, head, X[idx], y[idx], w, delta), clip)
    return C.sum(axis=0), k


def net_clipped_diff_sum(sizes, activation, head, X, y, idx, w, wp, clip, delta=1.0):
    D = (net_per_record_gradients(sizes, activation, head, X[idx], y[idx], w, delta)
         - net_per_record_gradients(sizes, activation, head, X[idx], y[idx], wp, delta))
    C, k = clip_rows(D, clip)
    return C.sum(axis=0), k


def net_hvp(sizes, activation, head, X, y, w, V, delta=1.0):
    """Mean over records of the exact Hessian-vector product, by
    forward-over-reverse in numpy over the whole batch at once."""
    layers, dlayers, ins, dins, Zs, dZs, S1, S2 = _net_forward(sizes, activation, X, w, V)
    _, dl, Hs = net_head(head, Zs[-1], y, delta)
    ddl = np.einsum("nkj,nj->nk", Hs, dZs[-1])
    blocks = []
    for m in range(len(layers) - 1, -1, -1):
        W, _ = layers[m]
        dW, _ = dlayers[m]
        blocks.append(np.concatenate([(ddl.T @ ins[m] + dl.T @ dins[m]).ravel(), ddl.sum(axis=0)]))
        if m > 0:
            t = dl @ W
            dt = dl @ dW + ddl @ W
            dl, ddl = S1[m - 1] * t, S2[m - 1] * dZs[m - 1] * t + S1[m - 1] * dt
    return np.concatenate(blocks[::-1]) / len(X)


def net_hessian(sizes, activation, head, X, y, w, delta=1.0):
    """Dense mean Hessian from D exact Hessian-vector products."""
    eye = np.eye(len(w))
    return np.stack([net_hvp(sizes, activation, head, X, y, w, eye[j], delta) for j in range(len(w))], axis=1)


def zo_sum(loss, X, y, idx, wa, wb, U, h, sgn, scale, clip, rec_clip=np.inf, sym=False):
    """Reference of dpreg_kernels.zeroth_order.zo_sum: sum over records t of
    Clip_rec_clip(sum_j clip(c_tj) u_tj), c_tj = scale (phi(<x,wa> + h p) -
    phi(<x,wb> + sgn h p)) (``sym``: minus the same at -p), p = <x_t, u_tj>;
    NaN coefficients dropped.  Returns (sum, n_clipped coefficients + records)."""
    phi = _vec(type(loss).phi)
    Xb, yb = X[idx], y[idx]
    P = np.einsum("td,tjd->tj", Xb, U)
    ma = (Xb @ wa)[:, None]
    mb = (Xb @ wb)[:, None]
    Y = np.broadcast_to(yb[:, None], P.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        V = scale * (phi(ma + h * P, Y) - phi(mb + sgn * h * P, Y))
        if sym:
            V = V - scale * (phi(ma - h * P, Y) - phi(mb - sgn * h * P, Y))
    bad = ~(np.abs(V) <= clip)
    C = np.where(np.isnan(V), 0.0, np.clip(V, -clip, clip))
    R = np.einsum("tj,tjd->td", C, U)
    nr = np.linalg.norm(R, axis=1)
    over = nr > rec_clip
    R[over] *= (rec_clip / nr[over])[:, None]
    return R.sum(0), int(bad.sum()) + int(over.sum())


# --------------------------------------------------- softmax cross-entropy (K classes)
def _softmax_rows(Z):
    Z = Z - Z.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)


def softmax_value(K, X, y, w):
    """Mean over rows of log sum_k exp(z_k) - z_y, z = W^T x (W = w as p x K, row-major)."""
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=float)
    Z = X @ w.reshape(X.shape[1], K)
    m = Z.max(axis=1)
    lse = m + np.log(np.exp(Z - m[:, None]).sum(axis=1))
    return float(np.mean(lse - Z[np.arange(len(y)), y.astype(int)]))


def softmax_per_record_gradients(K, X, y, w):
    """(n x pK) matrix of per-record gradients vec(x (pr - e_y)^T), built explicitly."""
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=float)
    P = _softmax_rows(X @ w.reshape(X.shape[1], K))
    P[np.arange(len(y)), y.astype(int)] -= 1.0
    return np.einsum("ij,ik->ijk", X, P).reshape(X.shape[0], -1)


def softmax_clipped_grad_sum(K, X, y, idx, w, clip):
    C, k = clip_rows(softmax_per_record_gradients(K, X[idx], y[idx], w), clip)
    return C.sum(axis=0), k


def softmax_clipped_diff_sum(K, X, y, idx, w, wp, clip):
    D = softmax_per_record_gradients(K, X[idx], y[idx], w) - softmax_per_record_gradients(K, X[idx], y[idx], wp)
    C, k = clip_rows(D, clip)
    return C.sum(axis=0), k


def softmax_record_hessian(K, x, w):
    """(pK x pK) Hessian of one record: (diag(pr) - pr pr^T) kron x x^T in the row-major layout."""
    x = np.asarray(x, dtype=float)
    pr = _softmax_rows((x @ w.reshape(len(x), K))[None])[0]
    A = np.diag(pr) - np.outer(pr, pr)
    return np.kron(np.outer(x, x), A)


def softmax_hessian(K, X, y, w):
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=float)
    return sum(softmax_record_hessian(K, X[i], w) for i in range(X.shape[0])) / X.shape[0]
