"""Loaders and record-wise preprocessing."""
import bz2

import numpy as np
import pytest

from conftest import shared_file
from dpreg.data import LabelMap, Schema, load_file, prepare, split
from dpreg.errors import DataError
from dpreg.pipeline import load_data


def test_svmlight_bz2_ijcnn1():
    X, y, inferred = load_file(str(shared_file("ijcnn1.trn.bz2")))
    assert inferred == {"zero_based": False, "n_features": 22}  # reported, since nothing was declared
    assert X.shape == (49990, 22)
    assert int(np.sum(y == 1)) == 4853
    Xp, yp = prepare(X, y, labels="binary", where="ijcnn1")
    assert set(np.unique(yp)) == {-1.0, 1.0}
    assert np.linalg.norm(Xp, axis=1).max() <= 1 + 1e-12


def test_a9a_zero_based_and_test_width():
    X, y, inferred = load_file(str(shared_file("adult.trn.bz2")), Schema(123, True))
    assert X.shape == (32561, 123) and int(np.sum(y == 1)) == 7841 and inferred == {}
    assert X.nnz == 451592  # sparse below the density threshold: memory follows the non-zeros
    te = load_data(str(shared_file("adult.tst.bz2")), schema=Schema(123, True), split_seed=0, test=True)
    assert te.X.shape == (16281, 123) and te.inferred == {}


def test_shipped_adult_equals_the_svmlight_original():
    """The package's re-encoded copy is the a9a files, record by record."""
    for part, name in (("data", "adult.trn.bz2"), ("test", "adult.tst.bz2")):
        ref_X, ref_y, _ = load_file(str(shared_file(name)), Schema(123, True))
        ref_X = ref_X.toarray() if hasattr(ref_X, "toarray") else ref_X  # a9a is 11 % dense: read as CSR
        src = load_data("adult", schema=Schema(), split_seed=0)
        X, y = (src.X, src.y) if part == "data" else src.source.load_test(0)
        np.testing.assert_array_equal(X, ref_X)
        np.testing.assert_array_equal(y, ref_y)
        assert src.schema == Schema(123, True, (-1.0, 1.0))


def _svm(tmp_path, lines, name="d.svm"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_one_record_cannot_change_a_declared_schema(tmp_path):
    """d and the index base are public inputs: a replaced record that uses a
    new index or index 0 is refused, never absorbed by widening or shifting."""
    base = ["1 1:0.5 3:1", "-1 2:1 4:0.25", "1 1:1"]
    X, _, inf = load_file(_svm(tmp_path, base), Schema(4, False))
    assert X.shape == (3, 4) and inf == {}
    with pytest.raises(DataError, match="beyond the declared 4 features"):
        load_file(_svm(tmp_path, base[:2] + ["1 9:1"]), Schema(4, False))
    with pytest.raises(DataError, match="declared one-based"):
        load_file(_svm(tmp_path, base[:2] + ["1 0:1"]), Schema(4, False))
    # left to inference, the same replacement changes the schema: that is why it is reported
    _, _, inf1 = load_file(_svm(tmp_path, base))
    X2, _, inf2 = load_file(_svm(tmp_path, base[:2] + ["1 0:1"]))
    assert inf1 == {"zero_based": False, "n_features": 4}
    assert inf2["zero_based"] is True and X2.shape[1] == 5


def test_label_maps_fixed_declared_inferred():
    assert LabelMap.for_training(np.array([0, 1, 1.0]), None, "t") == LabelMap(0.0, 1.0, "fixed")
    assert LabelMap.for_training(np.array([1, -1, 1.0]), None, "t") == LabelMap(-1.0, 1.0, "fixed")
    assert LabelMap.for_training(np.array([2, 4, 4.0]), None, "t").source == "inferred"
    m = LabelMap.for_training(np.array([4, 2.0]), (4.0, 2.0), "t")
    np.testing.assert_array_equal(m.apply(np.array([2, 4, 2.0]), "t"), [1, -1, 1])
    # with the fixed {0,1} map one replaced record cannot flip every label
    a = LabelMap.for_training(np.array([0, 1, 1, 0.0]), None, "t")
    b = LabelMap.for_training(np.array([0, 1, 1, 1.0]), None, "t")
    assert a == b
    with pytest.raises(DataError, match="neither of the two classes"):
        a.apply(np.array([0, 1, 7.0]), "test data")


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
    X, y, inf = load_file(str(p))
    assert inf == {}
    np.testing.assert_array_equal(y, [1, 0, 1])
    assert X.shape == (3, 2)
    q = tmp_path / "d.npz"
    np.savez(q, X=X, y=y)
    X2, y2, _ = load_file(str(q))
    np.testing.assert_array_equal(X, X2)
    c = tmp_path / "d.csv.bz2"
    c.write_bytes(bz2.compress(p.read_bytes()))
    X3, _, _ = load_file(str(c))
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
    bc = load_data("breast-cancer", schema=Schema(), split_seed=0)
    assert bc.X.shape == (569, 30) and bc.description == "breast-cancer" and bc.inferred == {}
    lo, hi = bc.source.bounds
    assert np.all(bc.X >= np.array(lo)) and np.all(bc.X <= np.array(hi))  # declared bounds cover the data
    a = load_data("synthetic-logistic:n=300,d=7", schema=Schema(), split_seed=1)
    assert a.X.shape == (300, 7)
    b = load_data("synthetic-logistic:n=300,d=7", schema=Schema(), split_seed=1)
    np.testing.assert_array_equal(a.X, b.X)
