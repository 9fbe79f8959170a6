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

Beyond a few hundred parameters a dense eigendecomposition per step (O(p^3),
and the O(n p^2) Hessian it needs) dominates a run.  :func:`solve_trs_krylov`
solves the same problem from products H V only (a block of vectors at a
time): a block Lanczos basis of span{g, v} + H span{g, v} + ... (v a fixed
public pseudo-random vector), with the problem projected onto it and solved
there exactly by :func:`solve_trs`.  The Krylov space of g carries the easy
case's solution (a rational function of H applied to g); the one of v carries
the bottom eigenvector, so the hard case (g orthogonal to it) is solved too,
which a Krylov method on g alone (Steihaug-CG, GLTR) cannot do.  It stops
when the full-space KKT residual |(H + lam I) h + g| and the bottom Ritz
pair's residual |H u - theta u| is either at most ``tol`` (|g|/r + |H|) or
small enough that lam + theta - |H u - theta u| >= 0 (so H + lam I >= 0 holds
with the bottom Ritz value anywhere within its residual): exact enough to
certify.

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


@dataclass(frozen=True)
class KrylovTRSResult(TRSResult):
    """:class:`TRSResult` of :func:`solve_trs_krylov`, with the basis size
    (``basis``: vectors; ``products``: products of H with a vector), the
    certificate residuals (``residual``: |(H + lam I) h + g|; ``eig_residual``:
    the bottom Ritz pair's |H u - theta u|; ``theta``: the bottom Ritz value)
    and whether both met the tolerance (``converged``)."""

    basis: int = 0
    products: int = 0
    residual: float = float("nan")
    eig_residual: float = float("nan")
    theta: float = float("nan")
    converged: bool = False


def _public_vector(p: int) -> np.ndarray:
    """A fixed, data-independent start vector (public pseudo-random)."""
    v = np.random.default_rng(0x7125).standard_normal(p)
    return v / np.linalg.norm(v)


def solve_trs_krylov(g: np.ndarray, matmat, r: float, *, tol: float = 1e-8, max_basis: int = 400,
                     first_check: int = 16) -> KrylovTRSResult:
    """The TRS of module docstring for a symmetric operator given by products:
    ``matmat(V)`` returns H V for a (p, k) array V.  Builds a block Lanczos
    basis (blocks of 2: the Krylov spaces of g and of a fixed public vector,
    full reorthogonalisation), projects the problem onto it and solves the
    projected problem exactly with :func:`solve_trs` when the basis reaches
    ``first_check`` vectors and each time it has grown by half since, until
    the full-space KKT residual is at most ``tol (|g| + |H| r)`` (|H|
    estimated by the largest Ritz value) and H + lam I >= 0 is settled (module
    docstring), or the basis reaches ``max_basis`` vectors (then ``converged``
    is False and the last projected solution is returned).  Memory O(p
    max_basis)."""
    g = np.asarray(g, dtype=float).reshape(-1)
    p = g.shape[0]
    if not (r > 0 and np.isfinite(r)):
        raise ValueError(f"radius must be finite and > 0, got {r}")
    if not np.all(np.isfinite(g)):
        raise ValueError("g must be finite")
    max_basis = max(2, min(int(max_basis), p))
    Q = np.empty((p, max_basis))
    HQ = np.empty((p, max_basis))
    gnorm = float(np.linalg.norm(g))
    start = np.stack([g, _public_vector(p)], axis=1)
    m = 0            # basis vectors so far
    products = 0
    block = start
    next_check = max(2, int(first_check))
    best = None
    while True:
        # orthonormalise the new block against the basis (twice) and within itself
        for _ in range(2):
            if m:
                block = block - Q[:, :m] @ (Q[:, :m].T @ block)
        new = []
        for j in range(block.shape[1]):
            v = block[:, j]
            for u in new:
                v = v - (u @ v) * u
            if m + len(new) >= max_basis:
                break
            nv = float(np.linalg.norm(v))
            ref = max(float(np.linalg.norm(block[:, j])), 1e-300)
            if nv > 1e-10 * max(ref, gnorm, 1.0) and nv > 0:
                new.append(v / nv)
        if new:
            V = np.stack(new, axis=1)
            HV = np.asarray(matmat(V), dtype=float).reshape(p, V.shape[1])
            products += V.shape[1]
            Q[:, m:m + V.shape[1]] = V
            HQ[:, m:m + V.shape[1]] = HV
            m += V.shape[1]
        exhausted = not new or m >= max_basis
        if exhausted or m >= next_check:
            next_check = max(m + 2, int(1.5 * m))
            best = _projected(g, Q[:, :m], HQ[:, :m], r, m, products, tol, gnorm)
            if best.converged or exhausted:
                if not best.converged and m == p:  # the basis spans the space: the projection is exact
                    best = _projected(g, Q[:, :m], HQ[:, :m], r, m, products, np.inf, gnorm)
                return best
        block = HV - V @ (V.T @ HV) if new else block


def _projected(g, Q, HQ, r, m, products, tol, gnorm) -> KrylovTRSResult:
    """Solve the TRS projected on the orthonormal basis Q (with HQ = H Q) and
    measure its full-space certificate."""
    P = Q.T @ HQ
    P = 0.5 * (P + P.T)
    res = solve_trs(Q.T @ g, P, r)
    h = Q @ res.h
    resid = float(np.linalg.norm(HQ @ res.h + res.lam * h + g))
    l, S = np.linalg.eigh(P)
    u = S[:, 0]
    eig_resid = float(np.linalg.norm(HQ @ u - l[0] * (Q @ u)))
    scale = gnorm + float(np.max(np.abs(l))) * r
    # H + lam I >= 0: the bottom Ritz value is within eig_resid of an eigenvalue (with a random start, the
    # smallest one with probability 1); either it is resolved to the tolerance, or lam clears it with room
    psd = eig_resid <= tol * max(scale / r, 1e-300) or res.lam + float(l[0]) - eig_resid >= 0.0
    ok = resid <= tol * scale and psd
    return KrylovTRSResult(h, res.lam, res.case, res.iterations, basis=m, products=products, residual=resid,
                           eig_residual=eig_resid, theta=float(l[0]), converged=bool(ok))
