"""The matrix-factorisation loss has the strict-saddle landscape it declares:
the empirical loss -1/2 w^T S w + 1/4 |w|^4 (S the records' second moment)
has every per-record gradient 0 at w = 0 with lambda_min = -lam_1, minima at
+-sqrt(lam_1) v_1 with F* = -lam_1^2/4, strict saddles at sqrt(lam_i) v_i, and
its declared G, M, rho bound the gradient, Hessian and Hessian change on the
unit ball."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import unit_rows
from dpreg.metrics import lambda_min
from dpreg.problem import make_problem
from dpreg.registry import get_registry


@pytest.fixture(scope="module")
def mf():
    rng = np.random.default_rng(3)
    X = unit_rows(rng, 400, 6) * rng.uniform(0.2, 1.0, size=(400, 1))
    pb = make_problem(get_registry().get("loss", "matrix-factorisation"), X, np.zeros(400), "mf")
    lam, V = np.linalg.eigh(X.T @ X / 400)
    return pb, X, lam[::-1], V[:, ::-1]


def test_saddle_at_zero_and_minima_at_the_top_eigenvector(mf):
    pb, X, lam, V = mf
    z = np.zeros(pb.d)
    assert np.all(pb.gradient(z) == 0.0)
    assert lambda_min(pb, z) == pytest.approx(-lam[0], rel=1e-9)
    w_star = np.sqrt(lam[0]) * V[:, 0]
    assert pb.value(w_star) == pytest.approx(-lam[0] ** 2 / 4, rel=1e-9)
    assert np.linalg.norm(pb.gradient(w_star)) < 1e-12
    assert lambda_min(pb, w_star) == pytest.approx(lam[0] - lam[1], rel=1e-7)
    w2 = np.sqrt(lam[1]) * V[:, 1]   # a strict saddle: stationary, curvature lam_2 - lam_1 < 0
    assert np.linalg.norm(pb.gradient(w2)) < 1e-12
    assert lambda_min(pb, w2) == pytest.approx(lam[1] - lam[0], rel=1e-7)


def test_gradient_matches_the_formula_and_declared_constants_hold(mf):
    pb, X, lam, V = mf
    G, M, rho = pb.loss.constants(pb.d)
    rng = np.random.default_rng(4)
    for _ in range(20):
        w = rng.standard_normal(pb.d)
        w *= rng.uniform(0, 1) / np.linalg.norm(w)
        S = X.T @ X / X.shape[0]
        np.testing.assert_allclose(pb.gradient(w), -S @ w + (w @ w) * w, rtol=1e-10, atol=1e-14)
        per = -(X @ w)[:, None] * X + (w @ w) * w          # per-record gradients
        assert np.linalg.norm(per, axis=1).max() <= G
        H = pb.hessian(w)
        assert np.abs(np.linalg.eigvalsh(H)).max() <= M
        u = rng.standard_normal(pb.d)
        u *= 1e-3 / np.linalg.norm(u)
        if np.linalg.norm(w + u) <= 1:
            assert np.linalg.norm(pb.hessian(w + u) - H, 2) <= rho * 1e-3 * (1 + 1e-9)
