"""The exact trust-region subproblem solver (plugins/.../trs_solver.py):
KKT conditions of Lemma 13, global optimality against random feasible points,
the hard case, and agreement with scipy's trust-exact subproblem."""
from __future__ import annotations

import numpy as np
import pytest

from dpreg_plugins.algorithms.trs_solver import kkt_residual, model_value, solve_trs, solve_trs_krylov


def random_instance(rng, p, kind):
    A = rng.standard_normal((p, p))
    H = 0.5 * (A + A.T)
    if kind == "pd":
        H = H @ H.T / p + 0.1 * np.eye(p)
    elif kind == "indefinite":
        H = H - 0.5 * np.eye(p)
    elif kind == "tiny":            # the DP regime: noise-sized Hessians
        H = 1e-2 * H
    g = rng.standard_normal(p) * rng.choice([1e-3, 1.0, 10.0])
    r = float(rng.choice([0.05, 1.0, 20.0]))
    return g, H, r


@pytest.mark.parametrize("kind", ["pd", "indefinite", "tiny"])
def test_kkt_residual_below_1e_9(kind):
    rng = np.random.default_rng({"pd": 1, "indefinite": 2, "tiny": 3}[kind])
    for _ in range(200):
        g, H, r = random_instance(rng, int(rng.integers(1, 25)), kind)
        res = solve_trs(g, H, r)
        assert kkt_residual(g, H, r, res.h, res.lam) <= 1e-9
        assert np.linalg.norm(res.h) <= r * (1 + 1e-12)
        assert res.lam >= 0


def test_interior_and_boundary_cases():
    H = np.diag([2.0, 4.0])
    g = np.array([-2.0, -4.0])             # Newton step (1, 1), |.| = sqrt 2
    res = solve_trs(g, H, 2.0)
    assert res.case == "interior" and res.lam == 0.0
    np.testing.assert_allclose(res.h, [1.0, 1.0], rtol=1e-12)
    res = solve_trs(g, H, 1.0)
    assert res.case == "boundary" and res.lam > 0
    assert np.linalg.norm(res.h) == pytest.approx(1.0, rel=1e-12)


def test_never_worse_than_random_feasible_points():
    rng = np.random.default_rng(7)
    for p, kind in [(2, "indefinite"), (5, "indefinite"), (8, "pd"), (12, "tiny")]:
        g, H, r = random_instance(rng, p, kind)
        res = solve_trs(g, H, r)
        best = model_value(g, H, res.h)
        # 10^4 random feasible points: uniform directions, radii r U^(1/p) and on the sphere
        U = rng.standard_normal((10_000, p))
        U /= np.linalg.norm(U, axis=1, keepdims=True)
        rad = r * rng.random(10_000) ** (1.0 / p)
        rad[::2] = r
        P = U * rad[:, None]
        vals = P @ g + 0.5 * np.einsum("ij,jk,ik->i", P, H, P)
        assert best <= vals.min() + 1e-12 * (1 + abs(vals.min()))


def test_hard_case():
    """g orthogonal to the bottom eigenvector and |-(H - l1 I)^+ g| < r: the
    solution is lam = -l1 with a component along q1 filling the ball."""
    rng = np.random.default_rng(11)
    p = 6
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    lam = np.array([-2.0, -1.0, 0.5, 1.0, 2.0, 3.0])
    H = Q @ np.diag(lam) @ Q.T
    g = Q @ np.array([0.0, 0.3, 0.2, -0.1, 0.4, 0.1])
    r = 2.0
    res = solve_trs(g, H, r)
    assert res.case == "hard"
    assert res.lam == pytest.approx(2.0, rel=1e-12)
    assert np.linalg.norm(res.h) == pytest.approx(r, rel=1e-12)
    assert kkt_residual(g, H, r, res.h, res.lam) <= 1e-9
    assert abs(Q[:, 0] @ res.h) > 0.5        # it uses the bottom direction
    # g = 0 with an indefinite H: a boundary step along q1
    res0 = solve_trs(np.zeros(p), H, r)
    assert res0.case == "hard" and abs(abs(Q[:, 0] @ res0.h) - r) < 1e-12
    # near-hard case (tiny gradient on q1): still exact, and the optimal value agrees
    g2 = g + 1e-9 * Q[:, 0]
    res2 = solve_trs(g2, H, r)
    assert kkt_residual(g2, H, r, res2.h, res2.lam) <= 1e-9
    assert model_value(g2, H, res2.h) == pytest.approx(model_value(g, H, res.h), abs=1e-8)


@pytest.mark.skipif(tuple(int(v) for v in __import__("scipy").__version__.split(".")[:2]) < (1, 12),
                    reason="scipy < 1.12: its trust-exact subproblem ignores maxiter and does not return on "
                           "near-hard cases (measured: no return at scipy 1.11.1)")
def test_agrees_with_scipy_trust_exact_subproblem():
    """scipy's trust-exact subproblem (Moré-Sorensen with Cholesky) at strict
    tolerances: where it converges, the same step and value; ours is never
    worse, also where scipy stops at its iteration limit (near hard cases)."""
    from scipy.optimize._trustregion_exact import IterativeSubproblem

    rng = np.random.default_rng(5)
    converged = 0
    for k in range(60):
        p = int(rng.integers(2, 15))
        g, H, r = random_instance(rng, p, ["pd", "indefinite", "tiny"][k % 3])
        sub = IterativeSubproblem(np.zeros(p), lambda x: 0.0, lambda x: g, lambda x: H,
                                  k_easy=1e-12, k_hard=1e-12)
        sub.maxiter = 500
        h_sp, _ = sub.solve(r)
        res = solve_trs(g, H, r)
        m_ours, m_sp = model_value(g, H, res.h), model_value(g, H, h_sp)
        assert m_ours <= m_sp + 1e-9 * (1 + abs(m_sp))
        if sub.niter < sub.maxiter:
            converged += 1
            assert m_ours == pytest.approx(m_sp, rel=1e-9, abs=1e-12)
            np.testing.assert_allclose(res.h, h_sp, atol=1e-6 * r)
    assert converged >= 45


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        solve_trs(np.ones(2), np.eye(3), 1.0)
    with pytest.raises(ValueError):
        solve_trs(np.ones(2), np.eye(2), 0.0)
    with pytest.raises(ValueError):
        solve_trs(np.array([np.nan, 1.0]), np.eye(2), 1.0)


# ------------------------------------------------------------- the Krylov solver
def _krylov(g, H, r, **kw):
    return solve_trs_krylov(g, lambda V: H @ V, r, **kw)


@pytest.mark.parametrize("kind", ["pd", "indefinite", "tiny"])
def test_krylov_agrees_with_the_exact_solver(kind):
    """On random instances of a few hundred parameters (the DP regime included:
    noise-sized Hessians) the matrix-free solver returns the exact solver's
    step and multiplier, meets the KKT conditions of Lemma 13 and says so."""
    rng = np.random.default_rng({"pd": 21, "indefinite": 22, "tiny": 23}[kind])
    for _ in range(4):
        p = int(rng.integers(60, 160))
        g, H, r = random_instance(rng, p, kind)
        ex = solve_trs(g, H, r)
        kr = _krylov(g, H, r)
        assert kr.converged
        assert kr.basis < p or p <= 2 * 16  # a basis smaller than the space
        assert kkt_residual(g, H, r, kr.h, kr.lam) <= 1e-6 * (np.linalg.norm(g) + np.linalg.norm(H, 2) * r)
        assert kr.lam == pytest.approx(ex.lam, rel=1e-6, abs=1e-9 * np.linalg.norm(H, 2))
        assert model_value(g, H, kr.h) == pytest.approx(model_value(g, H, ex.h), rel=1e-8, abs=1e-12)
        np.testing.assert_allclose(kr.h, ex.h, atol=1e-5 * r)


def test_krylov_hard_case():
    """g orthogonal to the bottom eigenvector, the pseudo-inverse step inside
    the ball: a Krylov method on g alone never leaves q1's complement; the
    solver's second block (a public vector's Krylov space) finds q1, and the
    answer is the exact solver's - lam = -l1, |h| = r, the same optimal value
    (h itself is unique up to the sign of its q1 component)."""
    rng = np.random.default_rng(31)
    p = 150
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    lam = np.concatenate([[-2.0], np.sort(np.abs(rng.standard_normal(p - 1))) - 1.0])
    H = Q @ np.diag(lam) @ Q.T
    c = 0.1 * rng.standard_normal(p)
    c[0] = 0.0
    g = Q @ c
    r = 5.0
    ex = solve_trs(g, H, r)
    assert ex.case == "hard"
    kr = _krylov(g, H, r)
    assert kr.converged
    assert kr.lam == pytest.approx(2.0, rel=1e-6)
    assert np.linalg.norm(kr.h) == pytest.approx(r, rel=1e-9)
    assert model_value(g, H, kr.h) == pytest.approx(model_value(g, H, ex.h), rel=1e-8)
    assert abs(Q[:, 0] @ kr.h) > 0.5 * r
    # the same with g = 0: a boundary step along q1
    k0 = _krylov(np.zeros(p), H, r)
    assert abs(abs(Q[:, 0] @ k0.h) - r) < 1e-6 * r and k0.lam == pytest.approx(2.0, rel=1e-6)


def test_krylov_small_spaces_and_cap():
    """A space smaller than the first check is solved exactly (the basis spans
    it); a cap below what an instance needs returns converged=False, never a
    silent answer."""
    rng = np.random.default_rng(41)
    g, H, r = random_instance(rng, 6, "indefinite")
    kr = _krylov(g, H, r)
    assert kr.converged and kr.basis == 6
    np.testing.assert_allclose(kr.h, solve_trs(g, H, r).h, atol=1e-10)
    p = 400
    A = rng.standard_normal((p, p))
    H = 0.5 * (A + A.T) / np.sqrt(p) - 0.99 * np.eye(p)
    g = 1e-6 * rng.standard_normal(p)
    kr = _krylov(g, H, 50.0, max_basis=8, first_check=8)
    assert kr.basis == 8 and not kr.converged
