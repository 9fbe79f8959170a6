"""The non-private reference optimum of the diagnostics is solved once for
the same data and loss - kept in the process (dpreg.pipeline.reference._OPTIMA) and, for
public data or with the user's opt-in (DPREG_DATA_CACHE=1), in the user data
cache (optima/ beside the parsed-array cache) - and again for anything that
changes it."""
from __future__ import annotations

import numpy as np
import pytest
from dpreg_plugins.losses.linear import Logistic, LogisticNonconvexReg

from dpreg import PrivacyWarning
from dpreg.pipeline import reference
from dpreg.problem import Problem


@pytest.fixture
def solves(monkeypatch, tmp_path):
    monkeypatch.setenv("DPREG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DPREG_DATA_CACHE", "1")  # the user's opt-in: their data's optima are kept too
    calls = []
    real = reference._solve_optimum

    def counting(problem, max_iter):
        calls.append(problem)
        return real(problem, max_iter)

    monkeypatch.setattr(reference, "_solve_optimum", counting)
    monkeypatch.setattr(reference, "_OPTIMA", {})
    return calls


def data(seed=0, n=400, d=6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def test_same_data_and_loss_is_solved_once(solves):
    X, y = data()
    w1 = reference.nonprivate_optimum(Problem(Logistic(), X, y))
    w1_value = w1.copy()
    w1[:] = 99.0  # the caller's copy: the cache keeps its own
    w2 = reference.nonprivate_optimum(Problem(Logistic(), X.copy(), y.copy()))  # equal content, new objects
    assert len(solves) == 1
    np.testing.assert_array_equal(w2, w1_value)
    pb = Problem(Logistic(), X, y)
    np.testing.assert_allclose(pb.gradient(w2), 0.0, atol=1e-4)  # it is the optimum


def test_anything_that_changes_the_reference_is_solved_again(solves):
    X, y = data()
    reference.nonprivate_optimum(Problem(Logistic(), X, y))
    y2 = y.copy()
    y2[0] = -y2[0]
    reference.nonprivate_optimum(Problem(Logistic(), X, y2))             # one label
    X2 = X.copy()
    X2[3, 2] += 1e-9
    reference.nonprivate_optimum(Problem(Logistic(), X2, y))             # one feature value
    reference.nonprivate_optimum(Problem(LogisticNonconvexReg(), X, y))  # the loss
    reg = LogisticNonconvexReg()
    reg.lam = 0.5
    w_reg = reference.nonprivate_optimum(Problem(reg, X, y))             # the loss's parameter
    reference.nonprivate_optimum(Problem(Logistic(), X, y), max_iter=5)  # the solver's cap
    assert len(solves) == 6
    w_default = reference.nonprivate_optimum(Problem(LogisticNonconvexReg(), X, y))
    assert len(solves) == 6 and not np.allclose(w_reg, w_default)


def test_the_next_process_reads_the_optimum_from_the_user_cache(solves, tmp_path):
    X, y = data()
    w1 = reference.nonprivate_optimum(Problem(Logistic(), X, y))
    files = list((tmp_path / "cache" / "optima").glob("*.npy"))
    assert len(solves) == 1 and len(files) == 1
    reference._OPTIMA.clear()  # a new process: nothing in memory
    w2 = reference.nonprivate_optimum(Problem(Logistic(), X.copy(), y.copy()))
    assert len(solves) == 1  # read from disk, not solved
    np.testing.assert_array_equal(w2, w1)


def test_a_corrupt_or_foreign_cache_file_is_solved_again_and_replaced(solves, tmp_path):
    X, y = data()
    w1 = reference.nonprivate_optimum(Problem(Logistic(), X, y))
    (f,) = (tmp_path / "cache" / "optima").glob("*.npy")
    for bad in (b"not an array", None):
        reference._OPTIMA.clear()
        if bad is None:
            np.save(f, np.full(X.shape[1] + 1, 0.5))  # a well-formed array of the wrong shape
        else:
            f.write_bytes(bad)
        w = reference.nonprivate_optimum(Problem(Logistic(), X, y))
        np.testing.assert_array_equal(w, w1)
        np.testing.assert_array_equal(np.load(f), w1)  # rewritten
    assert len(solves) == 3


def test_disabled_or_unwritable_cache_costs_only_the_speed_up(solves, tmp_path, monkeypatch):
    X, y = data()
    monkeypatch.setenv("DPREG_DATA_CACHE", "0")
    w1 = reference.nonprivate_optimum(Problem(Logistic(), X, y))
    assert not (tmp_path / "cache").exists()  # nothing written
    monkeypatch.setenv("DPREG_DATA_CACHE", "1")
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("DPREG_CACHE_DIR", str(blocker))
    reference._OPTIMA.clear()
    with pytest.warns(PrivacyWarning, match="data cache off"):
        w2 = reference.nonprivate_optimum(Problem(Logistic(), X, y))
    np.testing.assert_array_equal(w2, w1)
    assert len(solves) == 2


def test_without_the_opt_in_only_public_data_leave_an_optimum_on_disk(solves, tmp_path, monkeypatch):
    """Default (DPREG_DATA_CACHE unset): the optimum of the user's data stays in
    the process; a public data set's (public=True) is kept on disk."""
    monkeypatch.delenv("DPREG_DATA_CACHE")
    X, y = data()
    reference.nonprivate_optimum(Problem(Logistic(), X, y))
    assert not (tmp_path / "cache").exists()
    reference._OPTIMA.clear()
    reference.nonprivate_optimum(Problem(Logistic(), X, y), public=True)
    assert len(solves) == 2 and len(list((tmp_path / "cache" / "optima").glob("*.npy"))) == 1
