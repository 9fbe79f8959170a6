"""What a scattered (Poisson-sampled) batch costs the CSR O1 kernel, and
dp-sgd's step loop on a9a - the numbers behind the CSR gather path (its
software prefetch, added in the third session, was removed in the fifth: in
the staged kernel, where a stage's rows are independent and the out-of-order
core overlaps their misses, it cost more than it saved).

    python benchmarks/gather_cost.py

* the CSR ``grad_sum`` on 256 sorted random rows of a9a against 256 consecutive
  rows (600 calls each, min and median over 7 repeats, microseconds per call);
* dp-sgd's step loop on a9a as the pipeline holds it (CSR), the parameters of
  ``bench_peers.py`` (ms per step, min and median of 5 runs).

Run it from two checkouts (e.g. before and after a kernel change) back to back
for a before/after pair.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_peers import dpreg_steps, load  # noqa: E402


def gather_us(pb, kind, rng, calls=600, repeats=7):
    """(min, median) microseconds per CSR grad_sum call on 256-row batches."""
    w = rng.standard_normal(pb.d) * 0.1
    batches = [np.sort(rng.choice(pb.n, 256, replace=False)) if kind == "random"
               else np.arange(s, s + 256, dtype=np.int64) for s in range(0, calls * 50, 50)]
    pb.clipped_grad_sum(w, batches[0], 1.0)
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for ix in batches:
            pb.clipped_grad_sum(w, ix, 1.0)
        per.append(1e6 * (time.perf_counter() - t0) / calls)
    return min(per), float(np.median(per))


def main():
    import os

    from dpreg.problem import Problem
    from dpreg.registry import get_registry

    Xp, _, y = load("a9a")
    pb = Problem(get_registry().get("loss", "logistic"), Xp, y)
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.2f}")
    for kind in ("random", "consecutive"):
        lo, med = gather_us(pb, kind, rng)
        print(f"CSR grad_sum, 256 {kind} a9a rows: {lo:.1f} us/call min, {med:.1f} median")
    steps = [dpreg_steps(Xp, y)[0] * 1e3 for _ in range(5)]
    print(f"dp-sgd step loop, a9a CSR: {min(steps):.4f} ms/step min, {float(np.median(steps)):.4f} median")


if __name__ == "__main__":
    main()
