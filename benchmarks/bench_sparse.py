"""Sparse data and the serial/parallel switch.

* CSR kernels (``dpreg_kernels.sparse``) against the dense kernel on the same
  data and against scipy.sparse matrix-vector products (``X @ w`` then
  ``X.T @ a``: the unclipped two-pass floor a numpy user would write), on an
  rcv1-shaped synthetic set (20,242 x 47,236, ~1.5 M non-zeros: dense would be
  7.6 GB, so no dense kernel there) and on a9a (``../shared/data/adult.trn.bz2``,
  32,561 x 123, 11 % dense);
* the work threshold of :func:`dpreg_kernels.config.want_parallel`: serial vs
  parallel O1 on IJCNN1-shaped rows for growing batches, idle and with 2 busy
  processes.

``python benchmarks/bench_sparse.py`` prints both tables (markdown).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import SHARED_DATA  # noqa: E402

A9A = SHARED_DATA / "adult.trn.bz2"


def rcv1_like(seed=0, n=20_242, d=47_236, nnz=1_500_000):
    """Synthetic CSR of rcv1's shape: Zipf-like column popularity, positive
    values, rows scaled into the unit ball, +-1 labels (duplicates summed, so
    a little under ``nnz`` non-zeros)."""
    import scipy.sparse as sp

    from dpreg.svmlight import scale_rows_csr

    rng = np.random.default_rng(seed)
    rows = rng.integers(0, n, nnz)
    pop = 1.0 / np.arange(1, d + 1) ** 0.8
    cols = np.minimum(np.searchsorted(np.cumsum(pop) / pop.sum(), rng.random(nnz)), d - 1)
    X = sp.coo_matrix((rng.random(nnz) + 0.1, (rows, cols)), shape=(n, d)).tocsr()
    X.sum_duplicates()
    scale_rows_csr(X)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return X, y


def _time(f, reps):
    f()
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t0) / reps


def sparse_rows(X, y, name, reps=5):
    """(name, dense kernel ms or None, CSR kernel ms, scipy two mat-vecs ms) for O1 over all rows."""
    from dpreg.problem import Problem
    from dpreg.registry import get_registry

    loss = get_registry().get("loss", "logistic")
    ps = Problem(loss, X, y)
    rng = np.random.default_rng(1)
    w = rng.standard_normal(X.shape[1]) * 0.1
    csr = _time(lambda: ps.clipped_grad_sum(w, None, 0.5), reps)
    Xs = ps.X

    def scipy_two_pass():
        m = Xs @ w
        a = -y / (1.0 + np.exp(y * m))
        return Xs.T @ a

    sc = _time(scipy_two_pass, reps)
    dense = None
    if X.shape[0] * X.shape[1] * 8 < 2 ** 30:
        pd = Problem(loss, X.toarray(), y)
        dense = _time(lambda: pd.clipped_grad_sum(w, None, 0.5), reps)
    return name, X.shape, X.nnz, dense, csr, sc


@pytest.mark.slow
def test_sparse_a9a(benchmark):
    if not A9A.exists():
        pytest.skip(f"{A9A} not present")
    from dpreg.svmlight import load_svmlight, scale_rows_csr

    X, y, _ = load_svmlight(str(A9A))
    scale_rows_csr(X)
    res = {}
    benchmark.pedantic(lambda: res.update(zip(("name", "shape", "nnz", "dense", "csr", "scipy"),
                                              sparse_rows(X, y, "a9a"))), rounds=1, iterations=1)
    benchmark.extra_info.update({"kind": "sparse", **{k: v for k, v in res.items() if k != "shape"}})


@pytest.mark.slow
def test_sparse_rcv1_like(benchmark):
    X, y = rcv1_like()
    res = {}
    benchmark.pedantic(lambda: res.update(zip(("name", "shape", "nnz", "dense", "csr", "scipy"),
                                              sparse_rows(X, y, "rcv1-like"))), rounds=1, iterations=1)
    benchmark.extra_info.update({"kind": "sparse", **{k: v for k, v in res.items() if k != "shape"}})


def threshold_rows(load: int, d: int = 22, n: int = 50_000):
    """Serial and parallel O1 (gather path) for growing batches, under ``load`` busy processes."""
    import dpreg_kernels.linear_model as K
    from bench_end_to_end import busy

    from dpreg.registry import get_registry

    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d)) / np.sqrt(d) / 2
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    nx = np.einsum("ij,ij->i", X, X)
    loss = get_registry().get("loss", "logistic")
    ref, blk = K.scalar_ref(loss.scalar_kernels()[1]), K.block_ref(loss.block_kernels()[0])
    w = np.full(d, 0.1)
    r = np.zeros(d)
    out = []
    with busy(load):
        for b in (256, 1024, 4096, 16384, 50_000):
            idx = np.sort(rng.choice(n, b, replace=False)).astype(np.int64)
            reps = max(20, 400_000 // b)
            ts = [_time(lambda: K.grad_sum.fast(par)(X, y, nx, idx, False, w, r, ref, blk, 1.0), reps) for par in
                  (False, True)]
            out.append((load, b, b * d, ts[0], ts[1]))
    return out


if __name__ == "__main__":
    import numba

    print(f"threads: {numba.get_num_threads()}, layer after first call below\n")
    print("| load | batch | work b*d | serial (us) | parallel (us) | parallel / serial |")
    print("|---|---|---|---|---|---|")
    for load in (0, 2):
        for ld, b, work, s_, p_ in threshold_rows(load):
            print(f"| {ld} busy | {b:,} | {work:,} | {s_ * 1e6:.0f} | {p_ * 1e6:.0f} | {p_ / s_:.2f} |", flush=True)
    print("\n| data | shape | nnz | dense kernel (ms) | CSR kernel (ms) | scipy X@w, X.T@a (ms) |")
    print("|---|---|---|---|---|---|")
    rows = []
    if A9A.exists():
        from dpreg.svmlight import load_svmlight, scale_rows_csr

        X, y, _ = load_svmlight(str(A9A))
        scale_rows_csr(X)
        rows.append(sparse_rows(X, y, "a9a"))
    X, y = rcv1_like()
    rows.append(sparse_rows(X, y, "rcv1-like"))
    for name, shape, nnz, dense, csr, sc in rows:
        ds = "n/a (dense 7.6 GB)" if dense is None else f"{dense * 1e3:.2f}"
        print(f"| {name} | {shape[0]:,} x {shape[1]:,} | {nnz:,} | {ds} | {csr * 1e3:.2f} | {sc * 1e3:.2f} |")
