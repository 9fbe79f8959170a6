"""The ``softmax`` loss (multi-class linear models): its fused kernels against
the plain-numpy references in tests/naive.py and finite differences, dense and
CSR rows alike, the clipping that enforces every sensitivity, thread-count
determinism, the declared constants and the problem protocol."""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import naive
from conftest import unit_rows

N, P, K = 203, 7, 4  # 203 rows: 4 chunks of <= 64 rows, 4-row blocks and a remainder


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = unit_rows(rng, N, P)
    X[np.abs(X) < 0.15] = 0.0  # some zeros: the CSR rows differ in length
    y = rng.integers(0, K, N).astype(float)
    return X, y


def _problem(registry, X, y, k=K, **kw):
    from dpreg.problem import make_problem

    return make_problem(registry.get("loss", "softmax").with_classes(k), X, y, **kw)


def _w(rng, d, scale=1.0):
    return rng.standard_normal(d) * scale


LAYOUTS = ("dense", "csr")


def _X(X, layout):
    return sp.csr_matrix(X) if layout == "csr" else X


# ------------------------------------------------------------- kernels vs naive
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("clip", [np.inf, 0.3])
def test_grad_and_diff_sums_match_reference(registry, data, layout, clip):
    X, y = data
    pb = _problem(registry, _X(X, layout), y)
    assert pb.d == P * K and pb.sparse == (layout == "csr")
    rng = np.random.default_rng(1)
    w, wp = _w(rng, pb.d), _w(rng, pb.d)
    for idx in (None, rng.integers(0, N, 77), np.arange(5)):  # full; sampled with repeats; one block + 1
        ix = np.arange(N) if idx is None else idx
        s, k = pb.clipped_grad_sum(w, idx, clip)
        rs, rk = naive.softmax_clipped_grad_sum(K, X, y, ix, w, clip)
        np.testing.assert_allclose(s, rs, rtol=1e-10, atol=1e-12)
        assert k == rk
        s, k = pb.clipped_diff_sum(w, wp, idx, clip)
        rs, rk = naive.softmax_clipped_diff_sum(K, X, y, ix, w, wp, clip)
        np.testing.assert_allclose(s, rs, rtol=1e-10, atol=1e-12)
        assert k == rk
    if np.isfinite(clip):
        assert k > 0  # the clip was active


@pytest.mark.parametrize("layout", LAYOUTS)
def test_value_gradient_hvp_hessian_match_reference_and_finite_differences(registry, data, layout):
    X, y = data
    pb = _problem(registry, _X(X, layout), y)
    rng = np.random.default_rng(2)
    w, V = _w(rng, pb.d), rng.standard_normal(pb.d)
    assert pb.value(w) == pytest.approx(naive.softmax_value(K, X, y, w), rel=1e-12)
    Z = pb.decision_function(w)
    assert Z.shape == (N, K)
    np.testing.assert_allclose(Z, X @ w.reshape(P, K), rtol=1e-12, atol=1e-14)
    g = pb.gradient(w)
    np.testing.assert_allclose(g, naive.softmax_per_record_gradients(K, X, y, w).mean(axis=0), rtol=1e-10,
                               atol=1e-13)
    np.testing.assert_allclose(g, naive.finite_diff_grad(pb.value, w), rtol=1e-5, atol=1e-8)
    Href = naive.softmax_hessian(K, X, y, w)
    hv = pb.hvp(w, V)
    np.testing.assert_allclose(hv, Href @ V, rtol=1e-9, atol=1e-12)
    eps = 1e-6
    fd = (pb.gradient(w + eps * V) - pb.gradient(w - eps * V)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(pb.hessian(w), Href, rtol=1e-9, atol=1e-12)
    idx = rng.integers(0, N, 50)
    np.testing.assert_allclose(pb.hvp(w, V, idx), naive.softmax_hessian(K, X[idx], y[idx], w) @ V,
                               rtol=1e-9, atol=1e-12)


def test_lambda_min_by_lanczos_matches_dense(registry, data):
    from scipy.sparse.linalg import LinearOperator, eigsh

    from dpreg import metrics

    X, y = data
    pb = _problem(registry, X, y)
    w = _w(np.random.default_rng(3), pb.d, 0.5)
    dense = np.linalg.eigvalsh(naive.softmax_hessian(K, X, y, w))[0]
    op = LinearOperator((pb.d, pb.d), matvec=lambda v: pb.hvp(w, np.ravel(v)), dtype=float)
    lan = eigsh(op, k=1, which="SA", tol=1e-12, return_eigenvectors=False)[0]
    assert lan == pytest.approx(dense, abs=1e-10)
    assert abs(dense) < 1e-12  # softmax is invariant to adding a vector to every class: singular Hessian
    assert metrics.lambda_min(pb, w) == 0.0 == pb.lambda_min(w)  # the problem states it exactly
    v = np.repeat(np.random.default_rng(4).standard_normal(P), K)  # vec(v 1^T) in the row-major layout
    np.testing.assert_allclose(pb.hvp(w, v), 0.0, atol=1e-13)
    assert np.linalg.eigvalsh(naive.softmax_hessian(K, X, y, w))[0] > -1e-12  # PSD


# --------------------------------------------------------------------- clipping
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_term_is_clipped_and_non_finite_terms_dropped(registry, layout):
    rng = np.random.default_rng(3)
    X = unit_rows(rng, 40, P)
    X[5] *= 1e300  # overflows: its norm is not finite
    X[6, 0] = np.nan
    X[7] *= 1e200  # finite row, logits overflow
    y = rng.integers(0, K, 40).astype(float)
    pb = _problem(registry, _X(X, layout), y)
    w, wp = _w(rng, pb.d, 3.0), _w(rng, pb.d, 3.0)
    clip = 0.05
    for i in range(40):
        for s, k in (pb.clipped_grad_sum(w, [i], clip), pb.clipped_diff_sum(w, wp, [i], clip)):
            assert np.all(np.isfinite(s))
            assert np.linalg.norm(s) <= clip
            if i in (5, 6, 7):
                assert k == 1 and np.all(s == 0.0)
    for idx in (None, np.arange(4, 12)):  # blocks of 4 dense rows holding the dropped ones
        s, k = pb.clipped_grad_sum(w, idx, clip)
        assert np.all(np.isfinite(s)) and np.linalg.norm(s) <= 40 * clip and k >= 3
        keep = [i for i in (range(40) if idx is None else idx) if i not in (5, 6, 7)]
        ref, _ = naive.softmax_clipped_grad_sum(K, X, y, np.array(keep), w, clip)
        np.testing.assert_allclose(s, ref, rtol=1e-10, atol=1e-12)


def test_clipped_terms_stay_within_clip_at_the_rounding_edge(registry):
    """Terms whose norm sits on the clip (within a few ulps), with wide rows
    (many terms in |x|^2) and extreme probabilities: every term added has norm
    <= clip, as the host's CLIP_MARGIN argument requires."""
    from dpreg.problem import _inner

    rng = np.random.default_rng(9)
    p, k = 3000, 7
    worst = 0.0
    for trial in range(40):
        x = rng.standard_normal(p) * 10.0 ** rng.uniform(-3, 0)
        y = np.array([float(rng.integers(k))])
        pb = _problem(registry, x[None, :], y, k)
        w = rng.standard_normal(pb.d) * 10.0 ** rng.uniform(-3, 1)
        g = naive.softmax_per_record_gradients(k, x[None, :], y, w)[0]
        for clip in (float(np.linalg.norm(g)) * (1 + e) for e in (-1e-15, 0.0, 1e-15, 1e-13)):
            s, _ = pb.clipped_grad_sum(w, None, clip)
            worst = max(worst, np.linalg.norm(s) / _inner(clip))
    assert worst <= 1.0


def test_clipped_hessian_terms_have_operator_norm_within_clip(registry, data):
    X, y = data
    pb = _problem(registry, X, y)
    rng = np.random.default_rng(4)
    w = _w(rng, pb.d, 2.0)
    clip = 0.01
    for i in range(0, N, 17):
        H, k = pb.clipped_hessian_sum(w, [i], clip)
        assert np.linalg.norm(H, 2) <= clip
        Href = naive.softmax_record_hessian(K, X[i], w)
        if np.linalg.norm(Href, 2) > clip:
            assert k == 1
    H, k = pb.clipped_hessian_sum(w, None, np.inf)
    np.testing.assert_allclose(H / N, naive.softmax_hessian(K, X, y, w), rtol=1e-10, atol=1e-13)
    assert k == 0


@pytest.mark.slow
def test_bit_identical_for_serial_parallel_any_thread_count_and_repeated_calls(registry, data):
    X, y = data
    rng = np.random.default_rng(4)
    old = numba.get_num_threads()
    for layout in LAYOUTS:
        pb = _problem(registry, _X(X, layout), y)
        w, wp, V = _w(rng, pb.d), _w(rng, pb.d), rng.standard_normal(pb.d)
        idx = rng.integers(0, N, 150)

        def results(parallel):
            f = pb._k.clipped_sum.fast(parallel)
            return [f(*pb._args(), idx, False, w, wp, True, K, 0.2)[0],
                    f(*pb._args(), idx, True, w, w, False, K, 0.2)[0],
                    pb._k.hvp_sum.fast(parallel)(*pb._args(), pb.all_rows, w, V, K),
                    np.array([pb._k.loss_sum.fast(parallel)(*pb._args(), idx, w, K)])]

        try:
            numba.set_num_threads(1)
            ref = results(False)
            runs = [results(True)]
            numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
            runs.append(results(True))
            runs.append(results(False))
        finally:
            numba.set_num_threads(old)
        for other in runs:
            for a, b in zip(ref, other):
                assert np.array_equal(a, b)
        keep = []
        for j in range(20):  # the allocator's state moves between calls
            keep.append(np.empty(1 + (j * 37) % 61))
            assert np.array_equal(results(False)[1], ref[1])


# -------------------------------------------------------------------- constants
def test_declared_constants_bound_gradient_hessian_and_hessian_lipschitz(registry):
    """G = sqrt 2, M = 1/2, rho = sqrt(2)/2 hold for |x| <= 1 at random and
    adversarial points (large weights: probabilities near 0 and 1)."""
    loss = registry.get("loss", "softmax").with_classes(3)
    G, M, rho = loss.constants(0)
    assert (G, M, rho) == (math.sqrt(2), 0.5, math.sqrt(2) / 2)
    rng = np.random.default_rng(5)
    p, k = 3, 3
    worst = [0.0, 0.0, 0.0]
    for _ in range(400):
        x = rng.standard_normal(p)
        x /= np.linalg.norm(x)
        y = np.array([float(rng.integers(k))])
        w = rng.standard_normal(p * k) * 10.0 ** rng.uniform(-1, 1.5)
        u = rng.standard_normal(p * k)
        u /= np.linalg.norm(u)
        h = 1e-4
        g = naive.softmax_per_record_gradients(k, x[None], y, w)[0]
        H = naive.softmax_record_hessian(k, x, w)
        H2 = naive.softmax_record_hessian(k, x, w + h * u)
        worst[0] = max(worst[0], np.linalg.norm(g) / G)
        worst[1] = max(worst[1], np.linalg.norm(H, 2) / M)
        worst[2] = max(worst[2], np.linalg.norm(H - H2, 2) / (rho * h))
    assert max(worst) <= 1.0
    assert min(worst) > 0.3  # not vacuous


def test_problem_constants_scale_with_the_row_bound(registry, data):
    X, y = data
    R = math.sqrt(1.25)
    pb = _problem(registry, X, y, row_bound=R)
    G, M, rho = pb.constants()
    assert G == pytest.approx(math.sqrt(2) * R) and M == pytest.approx(0.5 * R * R)
    assert rho == pytest.approx(math.sqrt(2) / 2 * R ** 3)


# ---------------------------------------------------------------- the protocol
def test_labels_must_be_class_indices_and_classes_bound(registry, data):
    from dpreg.errors import DataError, ParameterError

    X, y = data
    bad = y.copy()
    bad[3] = K  # out of range
    with pytest.raises(DataError, match="record 4"):
        _problem(registry, X, bad)
    bad[3] = 0.5
    with pytest.raises(DataError, match="not a class index"):
        _problem(registry, X, bad)
    with pytest.raises(ParameterError, match="number of classes"):
        registry.get("loss", "softmax").make_problem(X, y)
    with pytest.raises(ParameterError):
        registry.get("loss", "softmax").with_classes(1)
    from dpreg.pipeline import get_loss

    assert get_loss(registry, "softmax:n_classes=5").n_classes == 5
    with pytest.raises(ParameterError):
        get_loss(registry, "softmax:hidden=3")


def test_kernels_never_index_out_of_range_whatever_the_labels(registry, data):
    """The kernels themselves drop a term whose label is not a class index
    (the host refuses such labels before; this is the kernels' own guard)."""
    X, y = data
    pb = _problem(registry, X, y)
    w = _w(np.random.default_rng(6), pb.d)
    yy = y.copy()
    yy[:8] = (-1.0, K, 1e300, np.nan, -np.inf, 2.5, 1e19, -0.5)
    f = pb._k.clipped_sum.fast(False)
    s, k = f(pb._data, pb._ind, pb._ptr, True, P, yy, pb.all_rows[:0], True, w, w, False, K, 1.0)
    ref, _ = naive.softmax_clipped_grad_sum(K, X, y, np.arange(8, N), w, 1.0)
    np.testing.assert_allclose(s, ref, rtol=1e-10, atol=1e-12)
    assert k >= 8


def test_capabilities_and_fast_paths(registry, data):
    from dpreg.errors import ParameterError

    X, y = data
    pb = _problem(registry, X, y)
    assert pb.supports("clipped_hessian_sum") is None
    assert "margin" in pb.supports("clipped_zo_sum")
    with pytest.raises(ParameterError, match="softmax"):
        pb.clipped_zo_sum()
    assert not pb.sgd_steps_available(64) and not pb.spider_steps_available()
    assert np.array_equal(pb.initial_point(np.random.default_rng(0)), np.zeros(pb.d))
    with pytest.raises(ParameterError, match="scalar margin"):
        pb.loss.scalar_kernels()
