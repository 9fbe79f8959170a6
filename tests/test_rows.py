"""The record-preparation kernels (dpreg_kernels.rows) against their plain-numpy
references, and the pipeline's promise never to write into the caller's arrays."""
from __future__ import annotations

import numpy as np
import pytest

import naive
from dpreg.data import check_finite, scale_into_ball
from dpreg.errors import DataError
from dpreg_kernels import rows


def _rows(seed=0, n=2_300, p=37):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p)) * rng.choice([0.01, 0.3, 1.0, 50.0], size=(n, 1))
    X[5] = 0.0
    X[6] = 1e200                      # squares overflow
    X[7, :3] = [1e-200, -3e-300, 0.0]  # tiny: inside the ball
    X[8] = 1.0 / np.sqrt(p)           # on the sphere
    return X


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("column", [None, 0.5])
def test_scale_rows_matches_numpy(parallel, column):
    X = _rows()
    p = X.shape[1]
    out = np.empty((X.shape[0], p + (column is not None)))
    rows.scale_rows.fast(parallel)(X, out, 0.0 if column is None else column, True)
    ref = naive.scale_rows(X, column)
    np.testing.assert_allclose(out, ref, rtol=4e-16 * p, atol=0)
    norms = np.linalg.norm(out[:, :p], axis=1)
    assert np.all(norms <= 1.0 + 1e-15)
    np.testing.assert_allclose(out[6, :p], 1.0 / np.sqrt(p), rtol=1e-15)
    inside = np.linalg.norm(X, axis=1) <= 1.0
    np.testing.assert_array_equal(out[inside, :p], X[inside])  # rows inside the ball: copied exactly


def test_scale_rows_in_place_and_row_by_row():
    X = _rows(1)
    ref = naive.scale_rows(X)
    Y = X.copy()
    out = scale_into_ball(Y, in_place=True)
    assert out is Y
    np.testing.assert_allclose(Y, ref, rtol=1e-13, atol=0)
    # a record's scaling depends on that record alone (any chunking, any thread count)
    part = scale_into_ball(X[3:900])
    np.testing.assert_array_equal(part, out[3:900])
    for parallel in (False, True):
        Z = np.empty_like(X)
        rows.scale_rows.fast(parallel)(X, Z, 0.0, True)
        np.testing.assert_array_equal(Z, out)


def test_scale_into_ball_copies_unless_told_and_takes_any_layout():
    X = _rows(2)
    X0 = X.copy()
    out = scale_into_ball(X)
    np.testing.assert_array_equal(X, X0)            # not in place unless asked
    F = np.asfortranarray(X)
    np.testing.assert_array_equal(scale_into_ball(F, in_place=True), out)  # a copy: F is not C-contiguous
    np.testing.assert_array_equal(F, X0)
    with_col = scale_into_ball(X, in_place=True, column=0.25)  # a column: always a new array
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(with_col[:, :-1], out)
    assert np.all(with_col[:, -1] == 0.25)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_first_nonfinite(parallel, bad):
    X = _rows(3)
    f = rows.first_nonfinite.fast(parallel)
    assert f(X) == naive.first_nonfinite(X) == -1
    for r, c in ((2_299, 36), (1_500, 0), (0, 4)):  # the last entry, a later chunk, the first row
        X[r, c] = bad
        assert f(X) == naive.first_nonfinite(X) == r * X.shape[1] + c
    with pytest.raises(DataError, match=r"non-finite feature value .* at record 1, column 5"):
        check_finite(X, "data")


@pytest.mark.parametrize("intercept", [True, False])
def test_run_never_writes_into_the_callers_arrays(intercept):
    import dpreg

    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 5)) * 10.0
    y = (X[:, 0] > 0).astype(float)
    Xte = rng.standard_normal((50, 5)) * 10.0
    yte = (Xte[:, 0] > 0).astype(float)
    keep = [a.copy() for a in (X, y, Xte, yte)]
    dpreg.run(algo="dp-sgd", data=(X, y), test_data=(Xte, yte), labels=(0, 1), epsilon=1.0, seed=0, warn=False,
              intercept=intercept, scaling="none", params={"steps": 5})
    for a, b in zip((X, y, Xte, yte), keep):
        np.testing.assert_array_equal(a, b)
