"""The vectorised exp of dpreg_kernels.vmath against libm, and the staged
kernels' use of the losses' block functions."""
from __future__ import annotations

import math

import numpy as np
import pytest


@pytest.fixture(scope="module")
def exp_nonpos():
    from dpreg_kernels.vmath import exp_nonpos

    return exp_nonpos


def _exp(f, x):
    out = np.empty_like(x)
    f(x, out)
    return out


def test_relative_error_against_libm(exp_nonpos):
    rng = np.random.default_rng(0)
    x = np.concatenate([-rng.random(20000) * 708.0, -rng.random(20000), -rng.random(2000) * 1e-12,
                        [0.0, -0.0, -1e-300, -708.0, -0.5 * math.log(2), -math.log(2), -745.0 + 37]])
    want = np.array([math.exp(v) for v in x])
    rel = np.abs(_exp(exp_nonpos, x) / want - 1.0)
    assert rel.max() <= 2.0 ** -51, rel.max()


def test_aliased_output_gives_the_same_values(exp_nonpos):
    x = -np.linspace(0.0, 700.0, 1001)
    a = _exp(exp_nonpos, x)
    y = x.copy()
    exp_nonpos(y, y)
    assert np.array_equal(a, y)


def test_out_of_range_and_nan(exp_nonpos):
    x = np.array([-709.0, -1e6, -np.inf, np.nan, 1.0, 0.0])
    out = _exp(exp_nonpos, x)
    floor = math.exp(-708.0)
    np.testing.assert_allclose(out[:3], floor, rtol=2.0 ** -51)   # clamped at -708, never a subnormal or 0
    assert np.isnan(out[3])
    assert out[4] == 1.0 and out[5] == 1.0                          # positive arguments: outside the contract, 0


def test_a_loss_without_block_form_runs_row_by_row(registry):
    """A loss with only scalar functions gets the kernels' row-by-row block
    function, and a block function given as a plain callable is compiled
    as one given by import path."""
    import dpreg_kernels.linear_model as K
    from dpreg_kernels import compile_block
    from dpreg_kernels.loss_blocks import logistic_dphi

    ramp = registry.get("loss", "ramp")
    assert ramp.block_kernels()[0] is K.scalar_block_fn()
    logistic = registry.get("loss", "logistic")
    own = compile_block(logistic_dphi)
    m = np.linspace(-30, 30, 61)
    y = np.where(np.arange(61) % 2 == 0, 1.0, -1.0)
    a, b = np.empty(61), np.empty(61)
    scratch = (np.empty(61), np.empty(61, dtype=np.int64))
    own(m, y, a, *scratch, logistic.scalar_kernels()[1])
    logistic.block_kernels()[0](m, y, b, *scratch, logistic.scalar_kernels()[1])
    assert np.array_equal(a, b)


@pytest.mark.parametrize("name", ["logistic", "sigmoid-l2"])
@pytest.mark.parametrize("sparse", [False, True])
def test_staged_kernels_match_row_by_row_block(registry, name, sparse):
    """The same clipped sums with the loss's vectorised block function and with
    the row-by-row default (libm's exp) agree to rounding, on every stage
    length (batches of 1..130 rows, full batch), for O1 and O2."""
    import scipy.sparse as sp

    import dpreg_kernels.linear_model as K
    from dpreg.problem import Problem

    loss = registry.get("loss", name)
    rng = np.random.default_rng(3)
    n, d = 400, 9
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.5)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    pb = Problem(loss, sp.csr_matrix(X) if sparse else X, y)
    row_by_row = Problem(loss, sp.csr_matrix(X) if sparse else X, y)
    row_by_row.__dict__["_dphi_block"] = K.block_ref(K.scalar_block_fn())
    w = rng.standard_normal(d) * 3
    wp = w + 0.3 * rng.standard_normal(d)
    for b in (1, 3, 4, 63, 64, 65, 130, None):
        idx = None if b is None else rng.integers(0, n, b)
        for clip in (0.05, 10.0):
            s1, k1 = pb.clipped_grad_sum(w, idx, clip)
            s2, k2 = row_by_row.clipped_grad_sum(w, idx, clip)
            np.testing.assert_allclose(s1, s2, rtol=1e-12, atol=1e-14)
            assert k1 == k2
            s1, k1 = pb.clipped_diff_sum(w, wp, idx, clip * 0.1)
            s2, k2 = row_by_row.clipped_diff_sum(w, wp, idx, clip * 0.1)
            np.testing.assert_allclose(s1, s2, rtol=1e-12, atol=1e-14)
            assert k1 == k2
