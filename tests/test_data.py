"""Loaders and record-wise preprocessing."""
import bz2

import numpy as np
import pytest

from conftest import shared_file
from dpreg.data import load_file, prepare, split
from dpreg.errors import DataError
from dpreg.pipeline import load_data


def test_svmlight_bz2_ijcnn1():
    X, y = load_file(str(shared_file("ijcnn1.trn.bz2")))
    assert X.shape == (49990, 22)
    assert int(np.sum(y == 1)) == 4853
    Xp, yp = prepare(X, y, labels="binary", where="ijcnn1")
    assert set(np.unique(yp)) == {-1.0, 1.0}
    assert np.linalg.norm(Xp, axis=1).max() <= 1 + 1e-12


def test_a9a_zero_based_and_test_width():
    X, y = load_file(str(shared_file("adult.trn.bz2")))
    assert X.shape == (32561, 123) and int(np.sum(y == 1)) == 7841
    Xt, yt, _, _ = load_data(str(shared_file("adult.tst.bz2")), seed=0, labels="binary", d=123, test=True)
    assert Xt.shape == (16281, 123)


def test_rows_scaled_each_on_its_own():
    X = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [1e200, 1e200]])
    Xp, _ = prepare(X, np.array([0, 1, 0, 1.0]), labels="binary", where="t")
    np.testing.assert_allclose(Xp[0], [0.6, 0.8])
    np.testing.assert_allclose(Xp[1], [0.3, 0.4])       # inside the ball: untouched
    np.testing.assert_allclose(Xp[2], [0.0, 0.0])
    np.testing.assert_allclose(Xp[3], [2**-0.5, 2**-0.5])  # no overflow
    # a record's scaling does not depend on the other records
    Xq, _ = prepare(X[:2], np.array([0, 1.0]), labels="binary", where="t")
    np.testing.assert_array_equal(Xq, Xp[:2])


@pytest.mark.parametrize("labels,expect", [([0, 1, 1, 0], [-1, 1, 1, -1]), ([1, 2, 2, 1], [-1, 1, 1, -1]),
                                           ([-1, 1, 1, -1], [-1, 1, 1, -1])])
def test_binary_labels_mapped(labels, expect):
    _, y = prepare(np.ones((4, 2)), np.array(labels, float), labels="binary", where="t")
    np.testing.assert_array_equal(y, expect)


def test_csv_with_header_and_npz(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("label,a,b\n1,0.5,0.1\n0,0.2,0.3\n1,0.0,1.0\n")
    X, y = load_file(str(p))
    np.testing.assert_array_equal(y, [1, 0, 1])
    assert X.shape == (3, 2)
    q = tmp_path / "d.npz"
    np.savez(q, X=X, y=y)
    X2, y2 = load_file(str(q))
    np.testing.assert_array_equal(X, X2)
    c = tmp_path / "d.csv.bz2"
    c.write_bytes(bz2.compress(p.read_bytes()))
    X3, _ = load_file(str(c))
    np.testing.assert_array_equal(X, X3)


def test_seeded_split_is_reproducible_and_disjoint():
    X = np.arange(200.0).reshape(100, 2)
    y = np.arange(100.0)
    a = split(X, y, 0.2, seed=3)
    b = split(X, y, 0.2, seed=3)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert len(a[3]) == 20 and not set(a[1]) & set(a[3])


def test_clear_errors():
    with pytest.raises(DataError, match="not found"):
        load_file("/nonexistent/file.svm")
    with pytest.raises(DataError, match="one class"):
        prepare(np.ones((3, 2)), np.ones(3), labels="binary", where="t")
    with pytest.raises(DataError, match="not binary"):
        prepare(np.ones((3, 2)), np.array([0, 1, 2.0]), labels="binary", where="t")
    with pytest.raises(DataError, match="non-finite"):
        prepare(np.array([[1, np.nan], [0, 1.0]]), np.array([0, 1.0]), labels="binary", where="t")
    with pytest.raises(DataError, match="features, but the training data has"):
        prepare(np.ones((3, 5)), np.array([0, 1, 0.0]), labels="binary", where="t", d=4)


def test_builtin_sources():
    X, y, src, name = load_data("breast-cancer", seed=0, labels="binary")
    assert X.shape == (569, 30) and name == "breast-cancer"
    X, y, src, _ = load_data("synthetic-logistic:n=300,d=7", seed=1, labels="binary")
    assert X.shape == (300, 7)
    X2, _, _, _ = load_data("synthetic-logistic:n=300,d=7", seed=1, labels="binary")
    np.testing.assert_array_equal(X, X2)
