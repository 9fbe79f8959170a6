"""Per-step speed of a network's clipped gradient sum - the O1 work of one
dp-sgd step - against plain-numpy per-example references, in one run.

Work measured: for a batch of 256 records drawn afresh each call (the gather
is part of the cost), the sum of the per-record gradients of the softmax
cross-entropy (K = 10 classes) of a tanh network, each clipped to norm C (the
median per-record norm: half the terms are clipped).  Shapes: d_in = 784
(MNIST-shaped rows: pixels in [0, 1], 80 % zeros, scaled to norm 1) and
d_in = 50 (Gaussian rows, scaled: MNIST after PCA, as Abadi et al. train it),
hidden 64 (one layer) and 64,32 (two).  Implementations:

* ``dpreg``: ``MLPProblem.clipped_grad_sum`` - what an algorithm calls per
  step, Python wrapper and thread choice included (the fused kernels of
  :mod:`dpreg_kernels.mlp`);
* ``numpy-per-example``: the per-example gradients materialised (a batch x D
  matrix, layer by layer with ``einsum``), their norms, clip factors and one
  product: the plain-numpy per-example reference;
* ``numpy-ghost``: the best plain numpy - per-example norms by the
  outer-product identity ``|delta a^T|_F = |delta| |a|`` and one matrix
  product per layer for the clipped sum (BLAS; no per-example gradient formed).

Every implementation's result is checked against dpreg's first.

pytest-benchmark (groups ``<d_in>-<hidden>-<threads>t``; ``benchmarks/report.py``
prints the table of ratios)::

    python -m pytest benchmarks/bench_networks.py --benchmark-enable --benchmark-json=net.json
    python benchmarks/report.py net.json

Interleaved (each round calls every implementation once, in turn; best and
median CPU time per call; the figure the docs quote, robust on a shared
machine)::

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice python benchmarks/bench_networks.py [--rounds 40]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pytest

N_ROWS = 10_000
BATCH = 256
K = 10
SHAPES = {"784": 784, "50": 50}
HIDDEN = {"64": (64,), "64-32": (64, 32)}


# ------------------------------------------------------------------ set-up
class Case:
    """Data, network, iterate and clip for one (d_in, hidden) (built once)."""

    _cache: dict = {}

    @classmethod
    def get(cls, shape, hidden):
        key = (shape, hidden)
        if key not in cls._cache:
            cls._cache[key] = cls(shape, hidden)
        return cls._cache[key]

    def __init__(self, shape, hidden):
        from dpreg.problem import make_problem
        from dpreg.registry import get_registry

        p = SHAPES[shape]
        rng = np.random.default_rng(0)
        if p == 784:
            X = rng.random((N_ROWS, p)) * (rng.random((N_ROWS, p)) < 0.2)
        else:
            X = rng.standard_normal((N_ROWS, p))
        X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
        self.X = np.ascontiguousarray(X)
        self.y = rng.integers(0, K, N_ROWS).astype(float)
        self.hidden = HIDDEN[hidden]
        loss = get_registry().get("loss", "mlp")(hidden=self.hidden, head="softmax", n_classes=K)
        self.pb = make_problem(loss, self.X, self.y)
        self.sizes = [p, *self.hidden, K]
        self.w = rng.standard_normal(self.pb.d) * 0.1
        self.rng = np.random.default_rng(11)
        probe = rng.integers(0, N_ROWS, 2000)
        G = per_example(self.sizes, self.X[probe], self.y[probe], self.w)
        self.clip = float(np.median(np.linalg.norm(G, axis=1)))
        self.desc = f"d_in {p}, hidden {','.join(map(str, self.hidden))}, K {K}, D {self.pb.d:,}, batch {BATCH}"

    def idx(self):
        return self.rng.integers(0, N_ROWS, BATCH)

    def dpreg(self):
        return self.pb.clipped_grad_sum(self.w, self.idx(), self.clip)[0]

    def numpy_per_example(self):
        ix = self.idx()
        G = per_example(self.sizes, self.X[ix], self.y[ix], self.w)
        s = np.minimum(1.0, self.clip / np.maximum(np.linalg.norm(G, axis=1), 1e-300))
        return s @ G

    def numpy_ghost(self):
        ix = self.idx()
        return ghost(self.sizes, self.X[ix], self.y[ix], self.w, self.clip)

    def check(self):
        """Every implementation agrees with dpreg on one batch."""
        ix = self.idx()
        ref = self.pb.clipped_grad_sum(self.w, ix, self.clip)[0]
        G = per_example(self.sizes, self.X[ix], self.y[ix], self.w)
        s = np.minimum(1.0, self.clip / np.maximum(np.linalg.norm(G, axis=1), 1e-300))
        np.testing.assert_allclose(s @ G, ref, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(ghost(self.sizes, self.X[ix], self.y[ix], self.w, self.clip), ref, rtol=1e-8,
                                   atol=1e-10)


# ------------------------------------------------- plain-numpy references
def _layers(sizes, w):
    out, o = [], 0
    for m in range(len(sizes) - 1):
        nin, nout = sizes[m], sizes[m + 1]
        out.append((w[o:o + nout * nin].reshape(nout, nin), w[o + nout * nin:o + nout * (nin + 1)]))
        o += nout * (nin + 1)
    return out


def _backprop(sizes, X, y, w):
    """(layers, inputs of every layer, dl/dz of every layer) for a tanh
    network with a softmax head, batched."""
    layers = _layers(sizes, w)
    ins, S1 = [X], []
    for m, (W, b) in enumerate(layers):
        Z = ins[-1] @ W.T + b
        if m < len(layers) - 1:
            A = np.tanh(Z)
            S1.append(1.0 - A * A)
            ins.append(A)
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    dl = E / E.sum(axis=1, keepdims=True)
    dl[np.arange(len(y)), y.astype(int)] -= 1.0
    dls = [None] * len(layers)
    for m in range(len(layers) - 1, -1, -1):
        dls[m] = dl
        if m > 0:
            dl = (dl @ layers[m][0]) * S1[m - 1]
    return layers, ins, dls


def per_example(sizes, X, y, w):
    """The (batch x D) matrix of per-example gradients."""
    layers, ins, dls = _backprop(sizes, X, y, w)
    n = len(X)
    return np.hstack([np.hstack([np.einsum("nk,nj->nkj", dls[m], ins[m]).reshape(n, -1), dls[m]])
                      for m in range(len(layers))])


def ghost(sizes, X, y, w, clip):
    """Clipped sum without per-example gradients: norms by the outer-product
    identity, one matrix product per layer."""
    layers, ins, dls = _backprop(sizes, X, y, w)
    g2 = sum(np.einsum("nk,nk->n", d, d) * (np.einsum("nj,nj->n", a, a) + 1.0) for d, a in zip(dls, ins))
    s = np.minimum(1.0, clip / np.sqrt(np.maximum(g2, 1e-300)))
    return np.concatenate([np.concatenate([((s[:, None] * d).T @ a).ravel(), s @ d]) for d, a in zip(dls, ins)])


IMPLS = {"dpreg": "dpreg", "numpy-per-example": "numpy_per_example", "numpy-ghost": "numpy_ghost"}


# --------------------------------------------------------------- benchmarks
@pytest.fixture
def threads(request):
    import numba

    before = numba.get_num_threads()
    if request.param > numba.config.NUMBA_NUM_THREADS:
        pytest.skip(f"{request.param} threads requested, NUMBA_NUM_THREADS={numba.config.NUMBA_NUM_THREADS}")
    numba.set_num_threads(request.param)
    yield request.param
    numba.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2], indirect=True)
@pytest.mark.parametrize("hidden", list(HIDDEN))
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("impl", list(IMPLS))
def test_network_o1(benchmark, impl, shape, hidden, threads):
    case = Case.get(shape, hidden)
    if impl == "dpreg":
        case.check()
    benchmark.group = f"{shape}-{hidden}-{threads}t"
    benchmark.extra_info.update({"kind": "network", "impl": impl, "shape": shape, "hidden": hidden,
                                 "threads": threads, "desc": case.desc})
    benchmark(getattr(case, IMPLS[impl]))


# ------------------------------------------------------- interleaved runner
def interleaved(rounds: int) -> str:
    """Markdown table: best and median CPU time per call of each
    implementation, calls interleaved round by round, and the ratios."""
    import numba

    rows = ["| network | threads | dpreg ms (best / median) | numpy per-example ms | numpy ghost ms | "
            "per-example / dpreg | ghost / dpreg |", "|---|---|---|---|---|---|---|"]
    for shape in SHAPES:
        for hidden in HIDDEN:
            case = Case.get(shape, hidden)
            case.check()
            th = numba.get_num_threads()
            fns = {k: getattr(case, v) for k, v in IMPLS.items()}
            for f in fns.values():
                f()  # warm-up: compile or load, caches
            cpu = {k: [] for k in fns}
            for _ in range(rounds):
                for k, f in fns.items():
                    t0 = time.process_time()
                    f()
                    cpu[k].append(time.process_time() - t0)
            best = {k: min(v) for k, v in cpu.items()}
            med = {k: float(np.median(v)) for k, v in cpu.items()}
            rows.append(f"| {case.desc} | {th} | {best['dpreg'] * 1e3:.2f} / {med['dpreg'] * 1e3:.2f} | "
                        f"{best['numpy-per-example'] * 1e3:.1f} / {med['numpy-per-example'] * 1e3:.1f} | "
                        f"{best['numpy-ghost'] * 1e3:.2f} / {med['numpy-ghost'] * 1e3:.2f} | "
                        f"{med['numpy-per-example'] / med['dpreg']:.0f}x | {med['numpy-ghost'] / med['dpreg']:.1f}x |")
    return "\n".join(rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    a = ap.parse_args()
    print(interleaved(a.rounds))
