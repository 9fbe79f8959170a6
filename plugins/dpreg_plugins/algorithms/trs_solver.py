"""The exact trust-region subproblem (TRS) of the DP trust-region paper
(dp-trust-region.txt, problem (3) and Lemma 13):

    minimise  m(h) = <g, h> + 1/2 <H h, h>   subject to  |h| <= r,

for a symmetric (possibly indefinite) H.  :func:`solve_trs` returns a global
minimiser h and its multiplier lam, which satisfy (Lemma 13 / Moré-Sorensen)

    (H + lam I) h = -g,   H + lam I >= 0,   lam >= 0,   lam (|h| - r) = 0.

Method (dense; the problems here have p <= 123): one eigendecomposition
H = Q diag(l) Q^T, gamma = Q^T g, then everything in the eigenbasis, where
|h(lam)|^2 = sum gamma_i^2 / (l_i + lam)^2 costs O(p):

1. interior: l_1 > 0 and |H^-1 g| <= r gives lam = 0;
2. easy case: safeguarded Newton on the secular equation
   1/r - 1/|h(lam)| = 0 (concave and increasing in lam), bracketed by
   [max(0, -l_1), |g|/r - l_1] with a bisection fallback; the unknown is the
   shift mu = lam + l_1 >= 0, so that l_i + lam = (l_i - l_1) + mu keeps full
   relative precision however close lam comes to -l_1;
3. hard case: gamma vanishes on the bottom eigenspace and the pseudo-inverse
   step -(H - l_1 I)^+ g is strictly inside the ball; then lam = -l_1 and h is
   that step plus tau q_1 with |h| = r, the sign of q_1 fixed deterministically
   (its largest-magnitude coordinate positive).

numpy only; this module is post-processing of released (noisy) matrices and
never touches data.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: relative tolerance for "zero" eigenvalue gaps and gradient components
#: (the hard-case test), relative to the matrix / gradient scale
HARD_TOL = 1e-10


@dataclass(frozen=True)
class TRSResult:
    """A global minimiser ``h`` of the TRS, its multiplier ``lam`` and how it
    was found (``case``: "interior", "boundary" or "hard"; ``iterations``:
    secular-equation steps)."""

    h: np.ndarray
    lam: float
    case: str
    iterations: int = 0


def model_value(g: np.ndarray, H: np.ndarray, h: np.ndarray) -> float:
    """m(h) = <g, h> + 1/2 <H h, h>."""
    return float(g @ h + 0.5 * h @ (H @ h))


def kkt_residual(g: np.ndarray, H: np.ndarray, r: float, h: np.ndarray, lam: float) -> float:
    """The largest violation of Lemma 13's conditions: |(H + lam I) h + g|,
    max(0, -lambda_min(H + lam I)), max(0, |h| - r), max(0, -lam) and
    |lam (|h| - r)| (absolute numbers)."""
    H = 0.5 * (H + H.T)
    nh = float(np.linalg.norm(h))
    stat = float(np.linalg.norm(H @ h + lam * h + g))
    psd = max(0.0, -float(np.linalg.eigvalsh(H + lam * np.eye(len(g)))[0]))
    return max(stat, psd, max(0.0, nh - r), max(0.0, -lam), abs(lam * (nh - r)))


def solve_trs(g: np.ndarray, H: np.ndarray, r: float, *, max_iter: int = 200) -> TRSResult:
    """A global minimiser of <g,h> + 1/2 h^T H h over |h| <= r (see module
    docstring); H is symmetrised first.  Promises the KKT conditions of Lemma
    13 to rounding error (|(H + lam I) h + g| ~ 1e-15 (|H| r + |g|)), |h| <= r
    and lam >= 0."""
    g = np.asarray(g, dtype=float).reshape(-1)
    H = np.asarray(H, dtype=float)
    p = g.shape[0]
    if H.shape != (p, p):
        raise ValueError(f"H must be {p}x{p}, got {H.shape}")
    if not (r > 0 and np.isfinite(r)):
        raise ValueError(f"radius must be finite and > 0, got {r}")
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
        raise ValueError("g and H must be finite")
    l, Q = np.linalg.eigh(0.5 * (H + H.T))
    gam = Q.T @ g
    l1 = float(l[0])
    gap = l - l1                              # >= 0, exact 0 at i = 0
    scale_h = max(float(np.max(np.abs(l))), 1e-300)
    gnorm = float(np.linalg.norm(g))
    bottom = gap <= HARD_TOL * scale_h
    g2 = gam * gam

    def hsq(mu: float) -> float:
        den = gap + mu
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(g2 > 0, g2 / (den * den), 0.0)
        return float(np.sum(t))

    def step(mu: float) -> np.ndarray:
        den = gap + mu
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(gam != 0, -gam / den, 0.0)
        return Q @ c

    # 1. interior: H positive definite and the Newton step inside the ball
    if l1 > 0 and hsq(l1) <= r * r:
        return TRSResult(Q @ (-gam / l), 0.0, "interior")

    mu_lo = max(0.0, l1)                      # lam = mu - l1 >= 0 and H + lam I >= 0
    # 3. hard case: no gradient on the bottom eigenspace and the pseudo-inverse
    # step strictly inside (only possible when lam = -l1 >= 0, i.e. l1 <= 0)
    if l1 <= 0 and np.sqrt(np.sum(g2[bottom])) <= HARD_TOL * max(gnorm, 1e-300):
        den = np.where(bottom, 1.0, gap)
        c = np.where(bottom, 0.0, -gam / den)
        nrm2 = float(c @ c)
        if nrm2 < r * r:
            q1 = Q[:, 0]
            sign = 1.0 if q1[np.argmax(np.abs(q1))] >= 0 else -1.0
            tau = np.sqrt(r * r - nrm2)
            h = Q @ c + sign * tau * q1
            return TRSResult(h, -l1, "hard")
        g2 = np.where(bottom, 0.0, g2)        # the root lies at mu > 0 with these terms dropped
        gam = np.where(bottom, 0.0, gam)

    # 2. easy case: root of phi(mu) = 1/|h(mu)| - 1/r (increasing, concave) on
    # [mu_lo, mu_hi]; after the first Newton step the iterates increase
    # monotonically to the root from the left
    a, b = mu_lo, max(gnorm / r, mu_lo)       # phi(a) <= 0 <= phi(b)
    mu = b
    it = 0
    for it in range(1, max_iter + 1):
        s = hsq(mu)
        phi = 1.0 / np.sqrt(s) - 1.0 / r
        if phi < 0:
            a = mu
        else:
            b = mu
        if abs(phi) * r <= 1e-14:
            break
        den = gap + mu
        with np.errstate(divide="ignore", invalid="ignore"):
            ds = float(np.sum(np.where(g2 > 0, g2 / (den * den * den), 0.0)))
        dphi = ds / s ** 1.5 if np.isfinite(s) and s > 0 else 0.0
        new = mu - phi / dphi if dphi > 0 else np.nan
        if not (a <= new <= b):               # safeguard: bisect (geometrically when a > 0)
            new = np.sqrt(a * b) if a > 0 else 0.5 * b
        if abs(new - mu) <= 1e-15 * max(abs(mu), 1e-300):
            mu = new
            break
        mu = new
    h = step(mu)
    nh = float(np.linalg.norm(h))
    if nh > r:                                # a hair outside (|h| = r (1 + O(1e-14))): pull in
        h *= r / nh
    return TRSResult(h, float(mu - l1), "boundary", it)
