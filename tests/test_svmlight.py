"""dpreg.svmlight: parsing against scikit-learn, index base and feature count,
dense-or-sparse choice, the content-keyed parsed-array cache (opt-in:
DPREG_DATA_CACHE=1; its privacy rules are tests/test_cache_privacy.py), row
scaling."""
from __future__ import annotations

import bz2

import numpy as np
import pytest
import scipy.sparse as sp

from dpreg import svmlight as S


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("DPREG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DPREG_DATA_CACHE", "1")  # the user's opt-in
    return tmp_path / "cache" / "svmlight"


def _write(path, rows, labels, compress=False):
    text = "".join(f"{lab:g} " + " ".join(f"{j}:{v!r}" for j, v in row) + "\n" for lab, row in zip(labels, rows))
    if compress:
        path.write_bytes(bz2.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _random_rows(rng, n, d, density, base):
    rows = []
    for _ in range(n):
        cols = np.flatnonzero(rng.random(d) < density)
        rows.append([(int(j) + base, float(rng.standard_normal())) for j in cols])
    return rows


@pytest.mark.parametrize("base,compress", [(1, False), (0, False), (1, True)])
def test_parse_matches_sklearn(tmp_path, rng, base, compress):
    from sklearn.datasets import load_svmlight_file

    rows = _random_rows(rng, 60, 9, 0.6, base)
    rows[0].append((8 + base, 2.5))  # the last column occurs
    labels = np.where(rng.random(60) < 0.5, -1.0, 1.0)
    f = _write(tmp_path / ("a.svm.bz2" if compress else "a.svm"), rows, labels, compress)
    X, y, info = S.load_svmlight(str(f))
    Xs, ys = load_svmlight_file(str(f), zero_based="auto")
    assert isinstance(X, np.ndarray) and X.flags.c_contiguous and X.dtype == np.float64  # 60 % dense
    np.testing.assert_array_equal(X, Xs.toarray())
    np.testing.assert_array_equal(y, ys)
    assert info["n_features_inferred"] == 9 and info["zero_based_inferred"] == (base == 0)
    assert info["cache"] == "miss" and not info["sparse"]


def test_explicit_index_base_and_n_features(tmp_path, rng):
    f = _write(tmp_path / "b.svm", [[(1, 1.0), (3, 2.0)], [(2, -1.0)]], [1, -1])
    X, _, info = S.load_svmlight(str(f), zero_based=True, n_features=6)
    assert X.shape == (2, 6) and X[0, 1] == 1.0 and X[0, 3] == 2.0 and info["n_features_inferred"] == 4
    X, _, _ = S.load_svmlight(str(f), zero_based=False)
    assert X.shape == (2, 3) and X[0, 0] == 1.0 and X[1, 1] == -1.0
    with pytest.raises(ValueError, match="n_features"):
        S.load_svmlight(str(f), zero_based=False, n_features=2)
    g = _write(tmp_path / "c.svm", [[(0, 1.0)], [(2, 1.0)]], [1, -1])
    with pytest.raises(ValueError, match="index 0"):
        S.load_svmlight(str(g), zero_based=False)


def test_sparse_below_density_threshold_and_huge_index_stays_sparse(tmp_path, rng):
    rows = _random_rows(rng, 200, 50, 0.05, 1)
    f = _write(tmp_path / "s.svm", rows, np.ones(200))
    X, _, info = S.load_svmlight(str(f))
    assert sp.isspmatrix_csr(X) and info["sparse"] and info["density"] < S.SPARSE_BELOW
    assert X.has_sorted_indices and X.indices.dtype == np.int64
    # one feature index of 10^9 in a tiny file: 24 GB dense; stays CSR of 3 non-zeros
    g = _write(tmp_path / "huge.svm", [[(1, 1.0)], [(10**9, 2.0)], [(3, 1.0)]], [1, -1, 1])
    X, _, info = S.load_svmlight(str(g))
    assert sp.isspmatrix_csr(X) and X.shape == (3, 10**9) and X.nnz == 3 and X[1, 10**9 - 1] == 2.0


def test_cache_hit_is_identical_and_keyed_by_content(tmp_path, rng, cache_in_tmp):
    rows = _random_rows(rng, 80, 12, 0.5, 1)
    f = _write(tmp_path / "d.svm", rows, np.where(rng.random(80) < 0.5, -1.0, 1.0))
    X1, y1, i1 = S.load_svmlight(str(f))
    assert i1["cache"] == "miss" and len(list(cache_in_tmp.glob("*.npz"))) == 1
    X2, y2, i2 = S.load_svmlight(str(f))
    assert i2["cache"] == "hit"
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    # a copy under another name hits; changed content misses
    g = tmp_path / "copy.svm"
    g.write_bytes(f.read_bytes())
    assert S.load_svmlight(str(g))[2]["cache"] == "hit"
    f.write_text(f.read_text().replace("\n", " 13:1.0\n", 1))
    X3, _, i3 = S.load_svmlight(str(f))
    assert i3["cache"] == "miss" and X3.shape == (80, 13) and X3[0, 12] == 1.0


def test_corrupt_cache_entry_is_reparsed(tmp_path, rng, cache_in_tmp):
    f = _write(tmp_path / "e.svm", _random_rows(rng, 30, 5, 0.8, 1), np.ones(30))
    X1, _, _ = S.load_svmlight(str(f))
    (entry,) = cache_in_tmp.glob("*.npz")
    entry.write_bytes(b"not an npz")
    X2, _, info = S.load_svmlight(str(f))
    assert info["cache"] == "miss"
    np.testing.assert_array_equal(X1, X2)
    assert S.load_svmlight(str(f))[2]["cache"] == "hit"  # rewritten


def test_cache_disabled_reads_and_writes_nothing(tmp_path, rng, monkeypatch, cache_in_tmp):
    monkeypatch.setenv("DPREG_DATA_CACHE", "0")
    f = _write(tmp_path / "f.svm", _random_rows(rng, 30, 5, 0.8, 1), np.ones(30))
    assert S.load_svmlight(str(f))[2]["cache"] == "off"
    assert S.load_svmlight(str(f))[2]["cache"] == "off"
    assert not cache_in_tmp.exists()


def test_unusable_cache_dir_still_loads(tmp_path, rng, monkeypatch):
    from dpreg import PrivacyWarning

    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("DPREG_CACHE_DIR", str(blocker))
    f = _write(tmp_path / "g.svm", _random_rows(rng, 30, 5, 0.8, 1), np.ones(30))
    with pytest.warns(PrivacyWarning, match="not a directory"):
        X, _, info = S.load_svmlight(str(f))
    assert X.shape == (30, 5) and info["cache"] == "off"


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e200])
def test_scale_rows_csr_matches_dense_prepare(rng, scale):
    from dpreg.data import prepare

    A = rng.standard_normal((40, 30)) * (rng.random((40, 30)) < 0.2) * scale
    A[3] = 0.0
    y = np.where(rng.random(40) < 0.5, -1.0, 1.0)
    want, _ = prepare(A.copy(), y, labels="binary", where="t")
    C = sp.csr_matrix(A)
    data = C.data
    S.scale_rows_csr(C)
    assert C.data is data  # in place
    np.testing.assert_allclose(C.toarray(), want, rtol=1e-14, atol=0)
    assert np.all(np.sqrt(np.asarray(C.multiply(C).sum(axis=1)).ravel()) <= 1.0 + 1e-15)


def test_scale_rows_csr_rejects_non_finite():
    C = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, np.inf]]))
    with pytest.raises(ValueError, match="record 2, column 2"):
        S.scale_rows_csr(C)


def test_load_file_goes_through_the_cache(tmp_path, rng, cache_in_tmp):
    from dpreg.data import load_file

    f = _write(tmp_path / "h.svm.bz2", _random_rows(rng, 50, 6, 0.7, 1), np.where(rng.random(50) < .5, -1., 1.),
               compress=True)
    X1, y1, _ = load_file(str(f))
    X2, y2, _ = load_file(str(f))
    assert len(list(cache_in_tmp.glob("*.npz"))) == 1
    np.testing.assert_array_equal(X1, X2)
    assert X1.shape == (50, 6)
