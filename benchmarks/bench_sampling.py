"""Poisson subsampling: ``dpreg.access.poisson_rows_many`` (Geometric gaps
from exponential draws, turned into rows by one compiled pass, O(q n) per
sample) against the same draws turned into rows by five numpy passes
(:func:`numpy_gaps`: the arithmetic the compiled pass reproduces bit for bit)
and against the textbook ``flatnonzero(rng.random(n) < q)`` (n uniforms per
sample) in the same run, for 256 samples of IJCNN1's n = 49,990 at
dp-spider's O2 rate (0.1) and dp-sgd's (256 / n).

    python -m pytest benchmarks/bench_sampling.py --benchmark-enable
    python benchmarks/bench_sampling.py        # the table: ms per 256 samples, ratio

The compiled pass is a kernel of its own (``dpreg_kernels.sampling``), compiled
or loaded from numba's cache only by a run that draws Poisson samples; its share
of a dp-spider run on IJCNN1 is the sampling column of
``python benchmarks/race_breakdown.py dp-spider``.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from dpreg.access import poisson_rows_many

N, K = 49_990, 256
RATES = {"dp-spider O2 (q = 0.1)": 0.1, "dp-sgd (q = 256/n)": 256 / N}


def numpy_mask(rng, n, q, k):
    """k samples as k masks of n uniforms."""
    return [np.flatnonzero(rng.random(n) < q) for _ in range(k)]


def numpy_gaps(rng, n, q, k):
    """k samples from the same exponential draws as poisson_rows_many, in
    numpy passes (gaps, partial sums, mask): its pre-compiled form."""
    from dpreg.access import geometric_gaps

    mean = q * n
    block = int(mean + 6.0 * np.sqrt(mean) + 16)
    pos = np.cumsum(geometric_gaps(rng, q, (k, block), n), axis=1)
    keep = pos <= n
    return pos[keep] - 1, keep.sum(axis=1)


IMPLS = {"geometric-gaps": poisson_rows_many, "numpy-gaps": numpy_gaps, "numpy-mask": numpy_mask}


@pytest.mark.parametrize("rate", list(RATES), ids=["spider-o2", "dp-sgd"])
@pytest.mark.parametrize("impl", list(IMPLS))
def test_poisson_sampling(benchmark, impl, rate):
    q = RATES[rate]
    rng = np.random.default_rng(0)
    benchmark.group = f"sampling-{rate}"
    benchmark.extra_info.update({"kind": "sampling", "impl": impl, "q": q, "samples": K, "n": N})
    benchmark(IMPLS[impl], rng, N, q, K)


def stream_draw(chunk):
    """K samples drawn through a Resample's Poisson stream in chunks of
    ``chunk`` (None: the default, dpreg.access.stream_chunk)."""
    from dpreg.access import Resample

    def draw(rng, n, q, k):
        nxt = Resample(n, rng).poisson_stream(q, k, chunk).next
        return [nxt()[0] for _ in range(k)]

    return draw


STREAMS = {"chunk-default": stream_draw(None), "chunk-256": stream_draw(256)}


@pytest.mark.parametrize("rate", list(RATES), ids=["spider-o2", "dp-sgd"])
@pytest.mark.parametrize("chunk", list(STREAMS))
def test_stream_chunk(benchmark, chunk, rate):
    """A Poisson stream's chunk (dpreg.access.stream_chunk: a chunk's draws fit in
    STREAM_DRAW_FLOATS) against a fixed 256 samples per chunk, K
    samples at each rate; the extra info holds both, best of 10, and their
    ratio, measured in this run."""
    from dpreg.access import stream_chunk

    q = RATES[rate]
    per = {k: _ms(f, q, reps=10) for k, f in STREAMS.items()}
    benchmark.group = f"stream-chunk-{rate}"
    benchmark.extra_info.update({"kind": "stream-chunk", "chunk": chunk, "q": q, "samples": K,
                                 "default_chunk": stream_chunk(N, q), "default_ms": per["chunk-default"],
                                 "chunk256_ms": per["chunk-256"], "ratio": per["chunk-256"] / per["chunk-default"]})
    benchmark(STREAMS[chunk], np.random.default_rng(0), N, q, K)


def _ms(f, q, reps=20):
    rng = np.random.default_rng(0)
    f(rng, N, q, K)
    best = np.inf
    for _ in range(reps):
        t = time.perf_counter()
        f(rng, N, q, K)
        best = min(best, time.perf_counter() - t)
    return best * 1e3


if __name__ == "__main__":
    print(f"| rate | geometric gaps, compiled pass (ms / {K} samples) | same draws, numpy passes (ms) | "
          "numpy mask (ms) | numpy passes / compiled | mask / compiled |")
    print("|---|---|---|---|---|---|")
    for name, q in RATES.items():
        g, p, m = (_ms(IMPLS[k], q, reps=5 if k == "numpy-mask" else 20) for k in IMPLS)
        print(f"| {name} | {g:.2f} | {p:.2f} | {m:.2f} | {p / g:.2f}x | {m / g:.2f}x |")
    from dpreg.access import stream_chunk

    print(f"\n| rate | stream, default chunk (samples) | ms / {K} samples | chunk 256 (ms) | 256 / default |")
    print("|---|---|---|---|---|")
    for name, q in RATES.items():
        a, b = _ms(STREAMS["chunk-default"], q), _ms(STREAMS["chunk-256"], q)
        print(f"| {name} | {stream_chunk(N, q)} | {a:.2f} | {b:.2f} | {b / a:.2f}x |")
