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
