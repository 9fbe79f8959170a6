"""Plain-numpy references for the selection kernels and mechanisms
(slow, obvious, O(n x K) / O(n x d^2) memory)."""
from __future__ import annotations

import numpy as np
from scipy.integrate import trapezoid  # (numpy.trapezoid needs numpy >= 2; the pins allow 1.26)


def _vec(f):
    return np.vectorize(f, otypes=[float])


def clipped_phi_sums(loss, X, y, W, lo, hi):
    """(K,) sums over rows of clip(phi(<x_i, W_k>, y_i), lo, hi), and the clip count."""
    V = _vec(type(loss).phi)(X @ W.T, y[:, None])  # n x K
    bad = ~((V >= lo) & (V <= hi))
    Vc = np.where(np.isnan(V), hi, np.clip(V, lo, hi))
    return Vc.sum(axis=0), int(bad.sum())


def clipped_hessian_sum(loss, X, y, w, clip):
    """sum_i s_i h_i x_i x_i^T with |s_i h_i| |x_i|^2 <= clip, and the clip count."""
    h = _vec(type(loss).d2phi)(X @ w, y)
    op = np.abs(h) * np.sum(X * X, axis=1)
    s = np.where(op > clip, clip / np.maximum(op, 1e-300), 1.0)
    hs = h * s
    return (X * hs[:, None]).T @ X, int(np.sum(op > clip))


def exponential_probabilities(utilities, epsilon, sensitivity):
    """Exact softmax of -epsilon * u / (2 * sensitivity) (McSherry-Talwar)."""
    a = -epsilon * np.asarray(utilities, float) / (2.0 * sensitivity)
    a -= a.max()
    p = np.exp(a)
    return p / p.sum()


def laplace_difference_cdf(x, b_query, b_threshold):
    """P(nu - rho <= x) for nu ~ Lap(b_query), rho ~ Lap(b_threshold) independent,
    by numerical integration over rho (reference for AboveThreshold)."""
    r = np.linspace(-60 * b_threshold, 60 * b_threshold, 200001)
    dens = np.exp(-np.abs(r) / b_threshold) / (2 * b_threshold)
    z = x + r  # nu <= x + rho
    cdf = np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0) / b_query), 1 - 0.5 * np.exp(-np.maximum(z, 0) / b_query))
    return float(trapezoid(dens * cdf, r))
