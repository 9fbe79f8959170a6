"""The numba kernels of dpreg_kernels.linear_model against the plain-numpy
references in tests/naive.py and against finite differences, for every
registered loss: full and sampled batches (repeats, remainders of the 4-row
blocks, several chunks), clipping active and inactive, worst-case records, and
bit-identical results for 1 and 2 threads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import naive
from conftest import unit_rows

N, D = 601, 6  # 601 rows: 3 chunks of 256 rows max, and a 4-row-block remainder


@pytest.fixture(scope="module")
def K():
    import dpreg_kernels.linear_model as k

    return k


@pytest.fixture(scope="module")
def S():
    import dpreg_kernels.serial as s

    return s


def _labels(loss, rng, n):
    if loss.labels == "binary":
        return np.where(rng.random(n) < 0.5, 1.0, -1.0)
    if loss.labels == "real":
        return rng.random(n)
    return np.zeros(n)


def _data(loss, seed, n=N, d=D):
    rng = np.random.default_rng(seed)
    X = np.ascontiguousarray(unit_rows(rng, n, d))
    y = _labels(loss, rng, n)
    R = loss.radius if loss.radius is not None else 2.0
    w = rng.standard_normal(d)
    w *= 0.7 * R / np.linalg.norm(w)
    return rng, X, y, w


def _losses(registry):
    from dpreg.interfaces import LinearModelLoss  # networks (mlp): tests/test_mlp.py

    return [(name, registry.get("loss", name)) for name in registry.names("loss")
            if isinstance(registry.get("loss", name), LinearModelLoss)]


def _batches(rng, n):
    return {
        "sampled": rng.integers(0, n, 37).astype(np.int64),       # repeats, 37 = 9 blocks + 1
        "sorted": np.sort(rng.choice(n, 300, replace=False)).astype(np.int64),
        "empty": np.zeros(0, dtype=np.int64),
    }


def _grad(K, loss, X, y, w, idx, clip, full=False):
    r = np.ascontiguousarray(loss.psi_grad(w), dtype=float)
    nx = K.row_sqnorms(X)
    return K.grad_sum(X, y, nx, idx, full, w, r, loss.scalar_kernels()[1], loss.block_kernels()[0], float(clip))


def _diff(K, loss, X, y, w, wp, idx, clip, full=False):
    r = np.ascontiguousarray(loss.psi_grad(w), dtype=float)
    rp = np.ascontiguousarray(loss.psi_grad(wp), dtype=float)
    nx = K.row_sqnorms(X)
    return K.diff_sum(X, y, nx, idx, full, w, wp, r, rp, loss.scalar_kernels()[1], loss.block_kernels()[0],
                      float(clip))


def _mid_clip(norms):
    """A clip bound strictly between two per-record norms, about the median."""
    s = np.sort(norms)
    k = len(s) // 2
    return 0.5 * (s[k - 1] + s[k]) if s[k] > s[k - 1] else s[k] * 0.999


# ------------------------------------------------------------------ references
def test_row_sqnorms(K, rng):
    X = rng.standard_normal((301, 9))
    np.testing.assert_allclose(K.row_sqnorms(X), naive.row_sqnorms(X), rtol=1e-13)


def test_n_chunks_depends_on_batch_size_only(K):
    from dpreg_kernels.config import MAX_CHUNKS, MIN_CHUNK_ROWS

    assert K.n_chunks(0) == 1 and K.n_chunks(1) == 1 and K.n_chunks(MIN_CHUNK_ROWS) == 1
    assert K.n_chunks(MIN_CHUNK_ROWS + 1) == 2
    assert K.n_chunks(10**9) == MAX_CHUNKS


def test_clipped_grad_sum_matches_numpy(K, registry):
    for name, loss in _losses(registry):
        rng, X, y, w = _data(loss, 1)
        norms = np.linalg.norm(naive.per_sample_gradients(loss, X, y, w), axis=1)
        for label, idx in _batches(rng, N).items():
            for clip in (10.0 * norms.max() + 1.0, _mid_clip(norms)):  # inactive, active
                s, k = _grad(K, loss, X, y, w, idx, clip)
                ref, kref = naive.clipped_grad_sum(loss, X, y, idx, w, clip) if len(idx) else (np.zeros(D), 0)
                np.testing.assert_allclose(s, ref, rtol=1e-10, atol=1e-12, err_msg=f"{name} {label} {clip}")
                assert k == kref, (name, label)
        # the full-batch path equals the gather path over arange(n)
        all_rows = np.arange(N, dtype=np.int64)
        for clip in (1e9, _mid_clip(norms)):
            a, ka = _grad(K, loss, X, y, w, np.zeros(0, np.int64), clip, full=True)
            b, kb = _grad(K, loss, X, y, w, all_rows, clip)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
            assert ka == kb
        assert 0 < _grad(K, loss, X, y, w, all_rows, _mid_clip(norms))[1] < N


def test_clipped_diff_sum_matches_numpy(K, registry):
    for name, loss in _losses(registry):
        rng, X, y, w = _data(loss, 2)
        wp = w + 0.2 * rng.standard_normal(D)
        Dm = naive.per_sample_gradients(loss, X, y, w) - naive.per_sample_gradients(loss, X, y, wp)
        norms = np.linalg.norm(Dm, axis=1)
        for label, idx in _batches(rng, N).items():
            for clip in (10.0 * norms.max() + 1.0, _mid_clip(norms)):
                s, k = _diff(K, loss, X, y, w, wp, idx, clip)
                ref, kref = naive.clipped_diff_sum(loss, X, y, idx, w, wp, clip) if len(idx) else (np.zeros(D), 0)
                np.testing.assert_allclose(s, ref, rtol=1e-10, atol=1e-12, err_msg=f"{name} {label}")
                assert k == kref, (name, label)
        a, ka = _diff(K, loss, X, y, w, wp, np.zeros(0, np.int64), _mid_clip(norms), full=True)
        ref, kref = naive.clipped_diff_sum(loss, X, y, np.arange(N), w, wp, _mid_clip(norms))
        np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-12)
        assert ka == kref


def test_legacy_entry_points(K, registry):
    loss = registry.get("loss", "sigmoid-l2")
    rng, X, y, w = _data(loss, 3)
    wp = w + 0.1
    idx = rng.integers(0, N, 50).astype(np.int64)
    dphi = loss.scalar_kernels()[1]
    r, rp = loss.psi_grad(w), loss.psi_grad(wp)
    s, k = K.clipped_grad_sum(X, y, idx, w, r, dphi, 0.01)
    np.testing.assert_allclose(s, naive.clipped_grad_sum(loss, X, y, idx, w, 0.01)[0], rtol=1e-10, atol=1e-13)
    s, k = K.clipped_diff_sum(X, y, idx, w, wp, r, rp, dphi, 1e-3)
    np.testing.assert_allclose(s, naive.clipped_diff_sum(loss, X, y, idx, w, wp, 1e-3)[0], rtol=1e-10, atol=1e-13)


def test_evaluation_kernels_match_numpy(K, registry):
    for name, loss in _losses(registry):
        rng, X, y, w = _data(loss, 4, n=300)
        phi, _, d2phi = loss.scalar_kernels()
        idx = rng.integers(0, 300, 41).astype(np.int64)
        v = rng.standard_normal(D)
        assert K.phi_sum(X, y, idx, w, phi) == pytest.approx(naive.phi_sum(loss, X, y, idx, w), rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(K.hvp_sum(X, y, idx, w, v, d2phi), naive.hvp_sum(loss, X, y, idx, w, v),
                                   rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(K.hessian_sum(X, y, idx, w, d2phi), naive.hessian_sum(loss, X, y, idx, w),
                                   rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------ finite differences
def test_kernels_match_finite_differences(K, registry):
    """Unclipped O1 sum = d/dw of the loss sum; unclipped O2 sum = O1(w) - O1(wp);
    hvp = d/dw of the gradient; dense Hessian agrees with hvp."""
    for name, loss in _losses(registry):
        rng, X, y, w = _data(loss, 5, n=300)
        phi, dphi, d2phi = loss.scalar_kernels()
        idx = rng.integers(0, 300, 45).astype(np.int64)
        b = len(idx)

        def total(u):
            return K.phi_sum(X, y, idx, u, phi) + b * loss.psi(u)

        g, k = _grad(K, loss, X, y, w, idx, np.inf)
        assert k == 0
        np.testing.assert_allclose(g, naive.finite_diff_grad(total, w), rtol=1e-6, atol=1e-6, err_msg=name)
        wp = w + 0.05 * rng.standard_normal(D)
        dsum, _ = _diff(K, loss, X, y, w, wp, idx, np.inf)
        np.testing.assert_allclose(dsum, g - _grad(K, loss, X, y, wp, idx, np.inf)[0], rtol=1e-9, atol=1e-12)
        v = rng.standard_normal(D)
        h = 1e-6
        fd = (_grad(K, loss, X, y, w + h * v, idx, np.inf)[0] - _grad(K, loss, X, y, w - h * v, idx, np.inf)[0]) / (2 * h)
        hv = K.hvp_sum(X, y, idx, w, v, d2phi) + b * loss.psi_hvp(w, v)
        np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(K.hessian_sum(X, y, idx, w, d2phi) @ v, K.hvp_sum(X, y, idx, w, v, d2phi),
                                   rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------- worst-case records
@pytest.mark.parametrize("scale", [1.0, 1e6, 1e150, 1e200])
def test_one_record_moves_the_sum_by_at_most_clip(K, registry, scale):
    """Adding one arbitrary record (huge norm, overflowing norm, zero row)
    changes either clipped sum by a vector of norm <= clip."""
    for name, loss in _losses(registry):
        rng, X, y, w = _data(loss, 6, n=257)
        wp = w + 0.1 * rng.standard_normal(D)
        bad = np.full(D, scale / np.sqrt(D))
        for row in (bad, -bad, np.zeros(D)):
            X2 = np.ascontiguousarray(np.vstack([X, row]))
            y2 = np.append(y, y[0])
            for clip in (1e-3, 0.3):
                for full in (True, False):
                    idx = np.arange(len(X2) - (1 if full else 0), dtype=np.int64)
                    idx_with = np.arange(len(X2), dtype=np.int64)
                    a, _ = _grad(K, loss, X2, y2, w, idx_with, clip, full=full)
                    b_, _ = _grad(K, loss, X, y, w, idx[: len(X)], clip)
                    assert np.all(np.isfinite(a)), (name, scale)
                    assert np.linalg.norm(a - b_) <= clip * (1 + 1e-9), (name, scale, clip)
                    a, _ = _diff(K, loss, X2, y2, w, wp, idx_with, clip, full=full)
                    b_, _ = _diff(K, loss, X, y, w, wp, idx[: len(X)], clip)
                    assert np.all(np.isfinite(a)), (name, scale)
                    assert np.linalg.norm(a - b_) <= clip * (1 + 1e-9), (name, scale, clip)


def test_overflowing_record_is_counted_and_dropped(K, registry):
    loss = registry.get("loss", "logistic")
    rng, X, y, w = _data(loss, 7, n=9)
    X[3] = 1e200
    s, k = _grad(K, loss, X, y, w, np.arange(9, dtype=np.int64), 0.5)
    keep = np.array([i for i in range(9) if i != 3])
    ref, kref = naive.clipped_grad_sum(loss, X, y, keep, w, 0.5)
    np.testing.assert_allclose(s, ref, rtol=1e-12, atol=1e-14)
    assert k == kref + 1


def test_non_finite_records_are_dropped_whatever_their_place_in_a_padded_block(K, registry):
    """The passes take 4-row blocks and a remainder, and a stage with a dropped term is
    compacted first: a NaN or infinite record - first in the batch, last, among several,
    or in the remainder - is dropped and counted, and never reaches the sum (0 x inf
    would make it NaN)."""
    loss = registry.get("loss", "logistic")
    for n, bad in ((9, (0, 3)), (10, (8, 9)), (7, (0, 1, 2)), (13, (12,))):
        rng, X, y, w = _data(loss, 11, n=n)
        for i, b in enumerate(bad):
            X[b] = np.nan if i % 2 else np.inf
        idx = np.arange(n, dtype=np.int64)
        keep = np.array([i for i in range(n) if i not in bad])
        s, k = _grad(K, loss, X, y, w, idx, 0.5)
        ref, kref = naive.clipped_grad_sum(loss, X, y, keep, w, 0.5)
        np.testing.assert_allclose(s, ref, rtol=1e-12, atol=1e-14)
        assert k == kref + len(bad)
        d, kd = _diff(K, loss, X, y, w, w + 0.05, idx[::-1].copy(), 0.01)  # bad rows elsewhere in the blocks
        dref, kdref = naive.clipped_diff_sum(loss, X, y, keep, w, w + 0.05, 0.01)
        np.testing.assert_allclose(d, dref, rtol=1e-9, atol=1e-14)
        assert kd == kdref + len(bad)


# -------------------------------------------------------- determinism / threads
def test_serial_and_parallel_variants_are_bit_identical(K, S, registry):
    loss = registry.get("loss", "logistic-nonconvex-reg")
    rng, X, y, w = _data(loss, 8, n=2000)
    wp = w + 0.1
    r, rp = loss.psi_grad(w), loss.psi_grad(wp)
    dphi, blk = loss.scalar_kernels()[1], loss.block_kernels()[0]
    nx = K.row_sqnorms(X)
    for idx, full in ((np.zeros(0, np.int64), True), (rng.integers(0, 2000, 1500).astype(np.int64), False)):
        a = K.grad_sum(X, y, nx, idx, full, w, r, dphi, blk, 0.1)
        b = S.grad_sum_serial(X, y, nx, idx, full, w, r, dphi, blk, 0.1)
        assert a[0].tobytes() == b[0].tobytes() and a[1] == b[1]
        a = K.diff_sum(X, y, nx, idx, full, w, wp, r, rp, dphi, blk, 0.01)
        b = S.diff_sum_serial(X, y, nx, idx, full, w, wp, r, rp, dphi, blk, 0.01)
        assert a[0].tobytes() == b[0].tobytes() and a[1] == b[1]


_THREAD_SCRIPT = textwrap.dedent("""
    import hashlib, json, numba, numpy as np
    from dpreg.registry import get_registry
    import dpreg_kernels.linear_model as K
    reg = get_registry()
    out = {"threads": numba.get_num_threads()}
    rng = np.random.default_rng(2024)
    n, d = 6001, 13                      # 24 chunks, a 4-row remainder in each
    X = rng.standard_normal((n, d)); X /= np.maximum(1, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    w = 0.5 * rng.standard_normal(d); wp = w + 0.05 * rng.standard_normal(d)
    idx = rng.integers(0, n, 5003).astype(np.int64)
    nx = K.row_sqnorms(X)
    h = hashlib.sha256()
    for name in ("logistic", "sigmoid-l2", "logistic-nonconvex-reg", "lowy-synthetic"):
        loss = reg.get("loss", name)
        phi, dphi, d2phi = loss.scalar_kernels()
        blk = loss.block_kernels()[0]
        r, rp = loss.psi_grad(w), loss.psi_grad(wp)
        for ix, full in ((np.zeros(0, np.int64), True), (idx, False)):
            for clip in (0.01, 1e9):
                s, k = K.grad_sum(X, y, nx, ix, full, w, r, dphi, blk, clip); h.update(s.tobytes()); h.update(bytes([k % 256]))
                s, k = K.diff_sum(X, y, nx, ix, full, w, wp, r, rp, dphi, blk, clip * 0.1); h.update(s.tobytes())
        h.update(np.float64(K.phi_sum(X, y, idx, w, phi)).tobytes())
        h.update(K.hvp_sum(X, y, idx, w, wp, d2phi).tobytes())
        h.update(K.hessian_sum(X, y, idx, w, d2phi).tobytes())
    out["digest"] = h.hexdigest()
    print(json.dumps(out))
""")


def test_results_bit_identical_for_one_and_two_threads():
    digests = {}
    for nt in (1, 2):
        env = dict(os.environ, NUMBA_NUM_THREADS=str(nt))
        res = subprocess.run([sys.executable, "-c", _THREAD_SCRIPT], env=env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        rec = json.loads(res.stdout.strip().splitlines()[-1])
        assert rec["threads"] == nt
        digests[nt] = rec["digest"]
    assert digests[1] == digests[2]
