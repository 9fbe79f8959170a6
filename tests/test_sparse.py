"""CSR kernels (dpreg_kernels.sparse) through Problem: against tests/naive.py,
against the dense kernels on the same data, finite differences, the clipping
guarantee on hostile rows, serial = parallel bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import naive
from dpreg.problem import Problem

LOSSES = ["logistic", "sigmoid", "logistic-nonconvex-reg"]  # the last has psi != 0 (r != 0)


def _data(rng, n=300, d=40, density=0.1):
    A = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    A[5] = 0.0  # an empty row
    A /= np.maximum(1.0, np.linalg.norm(A, axis=1, keepdims=True))
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return sp.csr_matrix(A), A, y


@pytest.fixture
def setup(rng, registry, request):
    loss = registry.get("loss", request.param)
    C, A, y = _data(rng)
    return loss, C, A, y, Problem(loss, C, y), Problem(loss, A, y)


@pytest.mark.parametrize("setup", LOSSES, indirect=True)
@pytest.mark.parametrize("clip", [0.05, 0.3, np.inf])
def test_clipped_sums_match_naive_and_dense(setup, rng, clip):
    loss, C, A, y, ps, pd = setup
    assert ps.sparse and sp.isspmatrix_csr(ps.X) and not pd.sparse
    w = rng.standard_normal(40) * 2
    wp = w + rng.standard_normal(40) * 0.5
    idx = np.sort(rng.choice(300, 77, replace=True))
    for ix in (idx, None):
        rows = np.arange(300) if ix is None else ix
        s, k = ps.clipped_grad_sum(w, ix, clip)
        want, wk = naive.csr_clipped_grad_sum(loss, C, y, rows, w, clip)
        np.testing.assert_allclose(s, want, rtol=1e-10, atol=1e-12)
        assert k == wk
        s2, k2 = ps.clipped_diff_sum(w, wp, ix, clip)
        want2, wk2 = naive.csr_clipped_diff_sum(loss, C, y, rows, w, wp, clip)
        np.testing.assert_allclose(s2, want2, rtol=1e-10, atol=1e-12)
        assert k2 == wk2
        if loss.name != "logistic-nonconvex-reg" or clip == np.inf:  # exact norm: same as the dense kernels
            ds, dk = pd.clipped_grad_sum(w, ix, clip)
            np.testing.assert_allclose(s, ds, rtol=1e-10, atol=1e-12)
            assert k == dk
            dd, _ = pd.clipped_diff_sum(w, wp, ix, clip)
            np.testing.assert_allclose(s2, dd, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("setup", LOSSES, indirect=True)
def test_exact_quantities_match_dense(setup, rng):
    loss, C, A, y, ps, pd = setup
    w = rng.standard_normal(40)
    v = rng.standard_normal(40)
    np.testing.assert_allclose(ps._nx, naive.row_sqnorms(A), rtol=1e-13)
    assert ps.value(w) == pytest.approx(pd.value(w), rel=1e-12)
    np.testing.assert_allclose(ps.gradient(w), naive.gradient(loss, A, y, w), rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(ps.hvp(w, v), pd.hvp(w, v), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(ps.hessian(w), naive.hessian(loss, A, y, w), rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(ps.hessian(w, clip=0.01), pd.hessian(w, clip=0.01), rtol=1e-10, atol=1e-13)
    idx = np.arange(10, 60)
    assert ps.value(w, idx) == pytest.approx(naive.value(loss, A[idx], y[idx], w), rel=1e-12)
    fd = naive.finite_diff_grad(lambda u: ps.value(u), w)
    np.testing.assert_allclose(ps.gradient(w), fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("setup", ["logistic", "logistic-nonconvex-reg"], indirect=True)
def test_every_clipped_term_within_clip_on_hostile_rows(setup, rng):
    loss, C, A, y, _, _ = setup
    H = A[:12].copy()
    H[0, :3] = [1e200, -1e200, 3.0]
    H[1, 7] = 1e300
    H[2, :] = 1e-300
    H[3, 1] = 1e154
    pb = Problem(loss, sp.csr_matrix(H), y[:12])
    for w in (rng.standard_normal(40), np.full(40, 1e150), np.zeros(40)):
        for i in range(12):
            for clip in (1e-3, 0.7):
                s, _ = pb.clipped_grad_sum(w, np.array([i]), clip)
                d, _ = pb.clipped_diff_sum(w, -w, np.array([i]), clip)
                assert np.all(np.isfinite(s)) and np.linalg.norm(s) <= clip
                assert np.all(np.isfinite(d)) and np.linalg.norm(d) <= clip


@pytest.mark.parametrize("setup", ["sigmoid"], indirect=True)
def test_serial_and_parallel_csr_variants_bit_identical(setup, rng):
    import dpreg_kernels.sparse as K

    loss, C, A, y, ps, _ = setup
    ref, blk = ps._refs[1], ps._dphi_block
    data, ind, ptr = ps._csr
    w = rng.standard_normal(40)
    r = np.zeros(40)
    for full, idx in ((True, np.zeros(0, dtype=np.int64)), (False, np.sort(rng.choice(300, 290)))):
        a = K.grad_sum.serial(data, ind, ptr, ps.y, ps._nx, idx, full, w, r, ref, blk, 0.1)
        b = K.grad_sum.parallel(data, ind, ptr, ps.y, ps._nx, idx, full, w, r, ref, blk, 0.1)
        assert a[1] == b[1] and np.array_equal(a[0], b[0])
        a = K.diff_sum.serial(data, ind, ptr, ps.y, ps._nx, idx, full, w, -w, r, r, ref, blk, 0.1)
        b = K.diff_sum.parallel(data, ind, ptr, ps.y, ps._nx, idx, full, w, -w, r, r, ref, blk, 0.1)
        assert a[1] == b[1] and np.array_equal(a[0], b[0])


def test_problem_keeps_csr_canonical_and_small(rng, registry):
    """Unsorted indices, duplicates, int32 index arrays, COO input: held as
    canonical int64 CSR; a wide sparse problem never allocates n x d."""
    loss = registry.get("loss", "logistic")
    rows = np.array([0, 0, 0, 1, 2])
    cols = np.array([5, 2, 5, 1, 3])
    vals = np.array([0.1, 0.2, 0.3, -0.5, 0.4])
    X = sp.coo_matrix((vals, (rows, cols)), shape=(3, 200_000))
    pb = Problem(loss, X, np.array([1.0, -1.0, 1.0]))
    assert pb.sparse and pb.X.indices.dtype == np.int64 and pb.X.has_canonical_format and pb.X.nnz == 4
    g = pb.gradient(np.zeros(200_000))
    want = naive.gradient(loss, X.toarray(), pb.y, np.zeros(200_000))
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)


def test_sparse_pipeline_run(rng, registry):
    """A dp-sgd run on CSR data spends its budget and returns finite weights."""
    from dpreg.params import bind

    C, A, y = _data(rng, n=2000, d=30)
    loss = registry.get("loss", "logistic")
    cls = registry.get("algorithm", "dp-sgd")
    acc = registry.get("accountant", "rdp")(1.0, 1e-5, cls.relation)
    out = cls(Problem(loss, C, y), bind(cls.params, {"steps": 50}, "dp-sgd"), noise=None, accountant=acc,
              seed=3).run()
    assert np.all(np.isfinite(out.w)) and 0 < acc.epsilon_spent <= 1.0 + 1e-9
