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


def zo_sum(loss, X, y, idx, wa, wb, U, h, sgn, scale, clip):
    """Reference of dpreg_kernels.zeroth_order.zo_sum: sum over records t and
    directions j of clip(scale (phi(<x,wa> + h p) - phi(<x,wb> + sgn h p)))
    u_tj with p = <x_t, u_tj>; NaN coefficients dropped.  Returns (sum,
    n_clipped)."""
    phi = _vec(type(loss).phi)
    Xb, yb = X[idx], y[idx]
    P = np.einsum("td,tjd->tj", Xb, U)
    ma = (Xb @ wa)[:, None]
    mb = (Xb @ wb)[:, None]
    Y = np.broadcast_to(yb[:, None], P.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        V = scale * (phi(ma + h * P, Y) - phi(mb + sgn * h * P, Y))
    bad = ~(np.abs(V) <= clip)
    C = np.where(np.isnan(V), 0.0, np.clip(V, -clip, clip))
    return np.einsum("tj,tjd->d", C, U), int(bad.sum())
