"""The clipped-sum kernel (O1 and O2, serial and parallel variants) over four
dense shapes, as minimum milliseconds per call: a quick before/after table for
kernel changes, run once per code version and alternated, e.g.

    git worktree add --detach /tmp/wt HEAD~1
    for r in 1 2 3; do
      PYTHONPATH=/tmp/wt/kernels NUMBA_CACHE_DIR=/tmp/nc_old NUMBA_NUM_THREADS=1 python benchmarks/kernel_shapes.py old
      NUMBA_NUM_THREADS=1 python benchmarks/kernel_shapes.py new
    done

Rows: ``LABEL SHAPE VARIANT CASE MS``.  Shapes are synthetic unit-norm rows
(49,990 x 22 as IJCNN1, 100,000 x 54, 32,561 x 123 as a9a, 10,000 x 1,000),
logistic loss; cases: O1 over the full batch, O1 over 256 rows, O2 over n/10
rows; and two references per shape, numpy's ``X @ w`` and ``X.T @ c`` over the full batch
(one pass over the rows each, BLAS with its own threads unless ``OPENBLAS_NUM_THREADS=1``):
the fused O1 kernel makes both passes' work in one.  With ``NUMBA_NUM_THREADS=1`` both
variants run on one thread.  Not a
pytest benchmark: a comparison across code versions needs separate processes.
"""
from __future__ import annotations

import sys
import time

import numpy as np


def _best(f, reps: int) -> float:
    """Minimum seconds of ``reps`` calls of ``f`` after one untimed call."""
    f()
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def main(label: str) -> None:
    from dpreg.problem import Problem, _inner
    from dpreg.registry import get_registry

    loss = get_registry().get("loss", "logistic")
    rng = np.random.default_rng(0)
    for n, d in ((49990, 22), (100000, 54), (32561, 123), (10000, 1000)):
        X = rng.standard_normal((n, d))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        pb = Problem(loss, X, y)
        w = rng.standard_normal(d) * 0.3
        wp = w + 0.01
        r = np.zeros(d)
        none = np.empty(0, np.int64)
        i256 = np.sort(rng.choice(n, 256, replace=False))
        i10 = np.sort(rng.choice(n, n // 10, replace=False))
        c = np.random.default_rng(1).standard_normal(n)  # its own stream: the kernels' inputs stay as before
        for name, f in (("numpy-X@w", lambda: X @ w), ("numpy-X.T@c", lambda: X.T @ c)):
            print(label, f"{n}x{d}", "reference", name, f"{_best(f, 30) * 1e3:.4f}", flush=True)
        for par in (False, True):
            k = pb._k.clipped_sum.fast(par)
            cases = {"O1-full": (none, True, w, w, False), "O1-b256": (i256, False, w, w, False),
                     "O2-n/10": (i10, False, w, wp, True)}
            for name, (ix, full, a, b, two) in cases.items():
                def call():
                    k(pb.X, pb.y, pb._nx, ix, full, a, b, two, r, r, pb._refs[1], pb._dphi_block, _inner(1.0))
                best = _best(call, 200 if name == "O1-b256" else 30)
                print(label, f"{n}x{d}", "parallel" if par else "serial", name, f"{best * 1e3:.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "this")
