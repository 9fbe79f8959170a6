"""Softmax cross-entropy (d = 784 features, K = 10 classes: MNIST's shape) - the
fused clipped-sum kernel against a plain-numpy reference, and dp-sgd's whole
run against the kernel time inside it, each measured in one run.

* ``test_clipped_sum_vs_numpy``: the O1 and O2 clipped sums of a freshly
  sampled batch of 256 rows (the gather inside the timed call), the dpreg
  kernel (serial variant, one thread) and the numpy reference (the batch's
  logits and its accumulation as two matrix products - BLAS, one thread - with
  the factorised per-record norms in between: what a careful numpy user
  writes; the p x K per-record gradients are never formed either), timed
  alternately, ``ROUNDS`` times each; ``extra_info`` holds both medians and
  ``numpy_over_kernel``.  Dense rows (80 % zeros, as MNIST's) and the same
  rows as CSR.
* ``test_dp_sgd_step_overhead``: a dp-sgd run (batch 256, T steps, softmax on
  60,000 such rows) against T kernel calls on batches of the same size: the
  share of a step that is not the kernel (Python, sampling, noise,
  trajectory) - dp-sgd runs softmax step by step (no compiled many-step form).

    python -m pytest benchmarks/bench_softmax.py --benchmark-enable
    python benchmarks/bench_softmax.py            # the same, as a table

Both sides run on one thread: numba's thread count is set to 1 and numpy's
BLAS is held to one thread with ``threadpoolctl`` (a scikit-learn dependency)
while they are timed.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

N, P, K = 60_000, 784, 10
BATCH = 256
ROUNDS = 40


def mnist_shaped(n=N, p=P, k=K, seed=0):
    """Rows of 784 non-negative 'pixels', 80 % of them zero, scaled into the
    unit ball; 10 balanced classes whose mean images differ (so a model can
    learn: the end-to-end run is a real training run)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    protos = rng.random((k, p)) * (rng.random((k, p)) < 0.3)
    X = protos[y] + 0.5 * rng.random((n, p))
    X[rng.random((n, p)) < 0.8] = 0.0
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return np.ascontiguousarray(X), y.astype(np.float64)


def numpy_clipped_sum(X, y, idx, w, wp, two, k, clip):
    """The reference: (sum of per-record gradients (differences) clipped to
    ``clip``, n_clipped), p x K row-major."""
    Xb = X[idx]
    W = w.reshape(X.shape[1], k)
    Z = Xb @ W
    Z -= Z.max(axis=1, keepdims=True)
    Pm = np.exp(Z)
    Pm /= Pm.sum(axis=1, keepdims=True)
    if two:
        Zq = Xb @ wp.reshape(X.shape[1], k)
        Zq -= Zq.max(axis=1, keepdims=True)
        Q = np.exp(Zq)
        Pm -= Q / Q.sum(axis=1, keepdims=True)
    else:
        Pm[np.arange(len(idx)), y[idx].astype(np.int64)] -= 1.0
    nrm = np.sqrt(np.einsum("ij,ij->i", Xb, Xb) * np.einsum("ij,ij->i", Pm, Pm))
    s = np.minimum(1.0, clip / np.maximum(nrm, 1e-300))
    return (Xb.T @ (Pm * s[:, None])).ravel(), int(np.sum(nrm > clip))


class Case:
    _cache: dict = {}

    @classmethod
    def get(cls, layout):
        if layout not in cls._cache:
            cls._cache[layout] = cls(layout)
        return cls._cache[layout]

    def __init__(self, layout):
        import scipy.sparse as sp

        from dpreg.registry import get_registry

        X, y = mnist_shaped()
        self.X, self.y = X, y
        data = sp.csr_matrix(X) if layout == "csr" else X
        self.pb = get_registry().get("loss", "softmax").with_classes(K).make_problem(data, y)
        rng = np.random.default_rng(1)
        self.w = 0.05 * rng.standard_normal(P * K)
        self.wp = self.w + 0.01 * rng.standard_normal(P * K)
        self.rng = np.random.default_rng(2)
        g = self.pb.gradient(self.w, rng.integers(0, N, 2000))
        self.clip = float(np.linalg.norm(g))  # clipping active for part of the rows
        self.kern = self.pb._k.clipped_sum.fast(False)
        self.layout = layout

    def kernel(self, idx, two):
        return self.kern(*self.pb._args(), idx, False, self.w, self.wp, two, K, self.clip)

    def numpy(self, idx, two):
        return numpy_clipped_sum(self.X, self.y, idx, self.w, self.wp, two, K, self.clip)


def interleaved(case, two, rounds=ROUNDS):
    """Median seconds per call of the kernel and of numpy, alternating, each
    on the same fresh batch (the first two rounds warm up); checks they agree."""
    tk, tn = [], []
    with threadpool_limits(limits=1):
        for r in range(rounds + 2):
            idx = case.rng.integers(0, N, BATCH)
            t0 = time.perf_counter()
            a, ka = case.kernel(idx, two)
            t1 = time.perf_counter()
            b, kb = case.numpy(idx, two)
            t2 = time.perf_counter()
            if r >= 2:
                tk.append(t1 - t0)
                tn.append(t2 - t1)
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
            assert ka == kb
    return float(np.median(tk)), float(np.median(tn))


@pytest.mark.parametrize("oracle", ["O1", "O2"])
@pytest.mark.parametrize("layout", ["dense", "csr"])
def test_clipped_sum_vs_numpy(benchmark, layout, oracle):
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        case = Case.get(layout)
        res = {}
        benchmark.pedantic(lambda: res.update(zip(("kernel", "numpy"), interleaved(case, oracle == "O2"))),
                           rounds=1, iterations=1)
    finally:
        numba.set_num_threads(before)
    benchmark.group = f"softmax-{oracle}"
    benchmark.extra_info.update({"kind": "softmax-kernel", "layout": layout, "oracle": oracle, "batch": BATCH,
                                 "p": P, "K": K, "kernel_median_s": res["kernel"], "numpy_median_s": res["numpy"],
                                 "numpy_over_kernel": res["numpy"] / res["kernel"]})


def dp_sgd_overhead(steps=300, layout="dense", repeats=3):
    """(seconds of a dp-sgd run of ``steps`` steps at batch 256 - its
    ``run_s``: calibration, sampling, noise, steps -, seconds of as many
    kernel calls on batches of 256, training accuracy): the two alternate
    ``repeats`` times, minimum of each."""
    import dpreg

    case = Case.get(layout)
    X, y = case.X, case.y
    data = (X, y) if layout == "dense" else (case.pb.X, y)
    runs, kerns = [], []
    with threadpool_limits(limits=1):
        for _ in range(repeats):
            rec = dpreg.run(algo="dp-sgd", loss="softmax", data=data, labels=tuple(range(K)), epsilon=2.0, seed=0,
                            warn=False, intercept=False, scaling="none", params={"steps": steps, "batch": BATCH},
                            diagnostics="light")
            runs.append(rec["diagnostics"]["timing"]["run_s"])
            idxs = [case.rng.integers(0, N, BATCH) for _ in range(steps)]
            t0 = time.perf_counter()
            for idx in idxs:
                case.pb.clipped_grad_sum(case.w, idx, case.clip)
            kerns.append(time.perf_counter() - t0)
    W = np.asarray(rec["release"]["model"]["weights"]).reshape(P, K)
    acc = float(np.mean(np.argmax(X @ W, axis=1) == y))
    return min(runs), min(kerns), acc


@pytest.mark.slow
def test_dp_sgd_step_overhead(benchmark):
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    res = {}
    try:
        benchmark.pedantic(lambda: res.update(zip(("run", "kernel", "acc"), dp_sgd_overhead())), rounds=1,
                           iterations=1)
    finally:
        numba.set_num_threads(before)
    benchmark.group = "softmax-dp-sgd"
    benchmark.extra_info.update({"kind": "softmax-dp-sgd", "steps": 300, "batch": BATCH, "run_s": res["run"],
                                 "kernel_s": res["kernel"], "overhead_share": 1 - res["kernel"] / res["run"],
                                 "train_accuracy": res["acc"]})


if __name__ == "__main__":
    import numba

    numba.set_num_threads(1)
    print(f"softmax clipped sums, {P} x {K}, batch {BATCH}, one thread, medians of {ROUNDS} alternating calls")
    print("| rows | oracle | dpreg kernel (ms) | numpy (ms) | numpy / kernel |")
    print("|---|---|---|---|---|")
    for layout in ("dense", "csr"):
        case = Case.get(layout)
        for oracle in ("O1", "O2"):
            tk, tn = interleaved(case, oracle == "O2")
            print(f"| {layout} | {oracle} | {tk * 1e3:.3f} | {tn * 1e3:.3f} | {tn / tk:.2f}x |")
    for layout in ("dense", "csr"):
        t_run, t_kern, acc = dp_sgd_overhead(layout=layout)
        print(f"dp-sgd, 300 steps of 256 ({layout} rows): run {t_run:.3f} s, the same kernel calls "
              f"{t_kern:.3f} s: {100 * (1 - t_kern / t_run):.0f} % of the run outside the kernel; "
              f"train accuracy {acc:.3f}")
