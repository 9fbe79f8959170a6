"""The audit's statistics: Clopper-Pearson bounds on a threshold test's error
rates and the (epsilon, delta) hypothesis-testing inequalities, the choice of
a test on calibration data, Fisher's discriminant, and the Gaussian bounds
(the exact epsilon of a Gaussian mechanism; lower confidence bounds on its
shift-to-noise ratio mu, from an estimated shift or from a known one).

Every function that returns a bound takes the data it is computed from and
nothing chosen on that same data: the callers choose tests and directions on a
calibration half and measure on the other half.
"""
from __future__ import annotations

import math

import numpy as np


# ------------------------------------------------------------- Clopper-Pearson
def clopper_pearson_upper(k, n: int, alpha: float):
    """One-sided (1 - alpha) Clopper-Pearson upper bound on a binomial rate
    from ``k`` successes in ``n`` trials (vectorized over ``k``)."""
    from scipy.stats import beta

    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        up = beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, up)


def _eps_parts(fp, n0: int, fn, n1: int, delta: float, confidence: float):
    """The two hypothesis-testing bounds log((1-delta-FNR)/FPR) and
    log((1-delta-FPR)/FNR) at Clopper-Pearson upper rates (NaN-free, may be < 0)."""
    alpha = (1.0 - confidence) / 2.0
    fpr = clopper_pearson_upper(fp, n0, alpha)
    fnr = clopper_pearson_upper(fn, n1, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1.0 - delta - fnr, 0.0) / fpr)
        b = np.log(np.maximum(1.0 - delta - fpr, 0.0) / fnr)
    a = np.nan_to_num(a, nan=0.0, neginf=0.0)
    b = np.nan_to_num(b, nan=0.0, neginf=0.0)
    return a, b, fpr, fnr


def epsilon_lower_bound(fp, n0: int, fn, n1: int, delta: float, confidence: float = 0.95):
    """Lower bound on epsilon, valid with probability >= ``confidence``, from
    ``fp`` false positives among ``n0`` runs on the neighbour and ``fn`` false
    negatives among ``n1`` runs on the canary data set (vectorized).  Returns
    ``(eps_lower, fpr_upper, fnr_upper)``."""
    a, b, fpr, fnr = _eps_parts(fp, n0, fn, n1, delta, confidence)
    return np.maximum(np.maximum(a, b), 0.0), fpr, fnr


def errors(s1, s0, tau, sign):
    """(false positives, false negatives) of the test "canary present iff
    sign * stat > tau" (s1: stats with the canary, s0: without; vectorized
    over ``tau``)."""
    s1 = np.sort(sign * np.asarray(s1))
    s0 = np.sort(sign * np.asarray(s0))
    tau = np.atleast_1d(tau)
    fp = len(s0) - np.searchsorted(s0, tau, side="right")  # s0 > tau
    fn = np.searchsorted(s1, tau, side="right")             # s1 <= tau
    return fp, fn


def choose_test(s1, s0, delta: float, confidence: float) -> tuple[float, int]:
    """Threshold and direction maximizing the epsilon bound on these
    (calibration) stats.  A bound whose numerator rests on fewer than
    max(20, 5%) of the calibration runs is not considered: far-tail thresholds
    win on calibration by chance and lose on fresh runs."""
    return best_test(s1, s0, delta, confidence)[1:]


def best_test(s1, s0, delta: float, confidence: float) -> tuple[float, float, int]:
    """:func:`choose_test` with the calibration bound it reached: ``(eps, tau, sign)``."""
    best = (-1.0, 0.0, 1)
    n1, n0 = len(s1), len(s0)
    floor1, floor0 = max(20, 0.05 * n1), max(20, 0.05 * n0)
    for sign in (1, -1):
        cand = np.unique(np.concatenate([sign * np.asarray(s1), sign * np.asarray(s0)]))
        if cand.size > 2000:  # quantile grid keeps this O(trials)
            cand = np.unique(np.quantile(cand, np.linspace(0, 1, 2001)))
        fp, fn = errors(s1, s0, cand, sign)
        a, b, _, _ = _eps_parts(fp, n0, fn, n1, delta, confidence)
        a = np.where(n1 - fn >= floor1, a, -np.inf)  # numerator: true positives
        b = np.where(n0 - fp >= floor0, b, -np.inf)  # numerator: true negatives
        eps = np.maximum(a, b)
        i = int(np.argmax(eps))
        if eps[i] > best[0]:
            best = (float(eps[i]), float(cand[i]), sign)
    return best


def choose_event(o1, o0, delta: float, confidence: float) -> int:
    """The outcome ``k`` (a selector's returned index, -1 for none) whose
    indicator ``output == k`` gives the largest epsilon bound on these
    (calibration) outputs, in either direction (:func:`choose_test` then picks
    ``output == k`` or ``output != k``).  ``o1``: outputs with the canary,
    ``o0``: without."""
    o1, o0 = np.asarray(o1), np.asarray(o0)
    best_eps, best_k = -np.inf, int(o1[0])
    for k in np.unique(np.concatenate([o1, o0])):
        eps = best_test((o1 == k).astype(float), (o0 == k).astype(float), delta, confidence)[0]
        if eps > best_eps:
            best_eps, best_k = eps, int(k)
    return best_k


# -------------------------------------------------------------------- Gaussian
def gaussian_delta(eps: float, mu: float) -> float:
    """delta(eps) of the Gaussian mechanism with sensitivity / sigma = ``mu``
    (Balle & Wang 2018): Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2),
    the second term computed in log space (no overflow for large eps)."""
    from scipy.special import log_ndtr, ndtr

    a, b = -eps / mu + mu / 2, -eps / mu - mu / 2
    return float(ndtr(a) - math.exp(min(eps + float(log_ndtr(b)), 0.0)))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon at ``delta`` of the Gaussian mechanism with sensitivity /
    sigma = ``mu`` (:func:`gaussian_delta` inverted by bisection); 0 when
    mu <= 0, inf when mu is infinite."""
    if not mu > 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(hi, mu) > delta:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gaussian_delta(mid, mu) > delta else (lo, mid)
    return hi


def gaussian_lower_bound(s1, s0, sign: int, delta: float, confidence: float) -> tuple[float, float, float]:
    """``(epsilon_lower, mu_lower, sigma_upper)`` from an *estimated* shift:
    with probability >= ``confidence``, when ``s1`` and ``s0`` are Gaussian
    samples with a common variance, ``sign * (mean_1 - mean_0) / sigma >=
    mu_lower`` and epsilon >= gaussian_epsilon(mu_lower) (Welch t bound on the
    difference, chi-square bound on the pooled sigma, the error split
    between them)."""
    from scipy.stats import chi2, t

    s1, s0 = np.asarray(s1, dtype=float), np.asarray(s0, dtype=float)
    n1, n0 = len(s1), len(s0)
    a = (1.0 - confidence) / 2.0  # half for the mean, half for the variance
    diff = sign * (s1.mean() - s0.mean())
    se = math.sqrt(s1.var(ddof=1) / n1 + s0.var(ddof=1) / n0)
    diff_lo = diff - t.ppf(1.0 - a, min(n1, n0) - 1) * se
    dof = n1 + n0 - 2
    pooled = ((n1 - 1) * s1.var(ddof=1) + (n0 - 1) * s0.var(ddof=1)) / dof
    sigma_up = math.sqrt(pooled * dof / chi2.ppf(a, dof))
    mu_lo = max(diff_lo, 0.0) / sigma_up if sigma_up > 0 else (math.inf if diff_lo > 0 else 0.0)
    return gaussian_epsilon(mu_lo, delta), mu_lo, sigma_up


def known_shift_lower_bound(s0, shift: float, delta: float, confidence: float) -> tuple[float, float, float]:
    """``(epsilon_lower, mu_lower, sigma_upper)`` when the canary moves the
    statistic by a *known* ``shift`` (the white-box audit checks it run by
    run) and ``s0`` are independent samples of the statistic without it:
    with probability >= ``confidence``, when ``s0`` is Gaussian, its sigma is
    at most ``sigma_upper`` (chi-square bound on the sample variance, mean
    estimated), so the canary's Gaussian shift-to-noise ratio is at least
    ``mu_lower = |shift| / sigma_upper`` and epsilon >= gaussian_epsilon(mu_lower)."""
    from scipy.stats import chi2

    s0 = np.asarray(s0, dtype=float)
    dof = len(s0) - 1
    sigma_up = math.sqrt(s0.var(ddof=1) * dof / chi2.ppf(1.0 - confidence, dof))
    if sigma_up > 0:
        mu_lo = abs(shift) / sigma_up
    else:
        mu_lo = math.inf if shift != 0 else 0.0
    return gaussian_epsilon(mu_lo, delta), mu_lo, sigma_up


def fisher_direction(F1: np.ndarray, F0: np.ndarray) -> np.ndarray:
    """Fisher's linear discriminant direction from two samples of feature vectors."""
    mu = F1.mean(axis=0) - F0.mean(axis=0)
    S = 0.5 * (np.cov(F1, rowvar=False) + np.cov(F0, rowvar=False))
    return whitened(S, mu)


def whitened(S: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``S^-1 m`` for a covariance estimate ``S`` (a ridge of 1e-9 of its
    trace keeps a singular S solvable): the likelihood-ratio direction of a
    shift ``m`` in Gaussian noise of covariance ``S``."""
    S = np.atleast_2d(S)
    S = S + np.eye(S.shape[0]) * (1e-9 * max(np.trace(S), 1e-300))
    return np.linalg.solve(S, np.atleast_1d(m))
