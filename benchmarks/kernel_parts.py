"""Where the clipped-sum kernel's time goes on one thread, part by part, at
IJCNN1's shape (49,990 x 22 synthetic unit rows, logistic loss): ns per row of

* the margins pass over stages of consecutive rows, without and with the
  software prefetch (``linear_model._margins``, pf = 0 and 8), and the same
  dot products over a column-major copy of the rows (numpy's ``X.T`` copied),
  a reference for the bandwidth of one pass;
* the loss's block derivative (``loss_blocks.logistic_dphi``) on 256-margin stages;
* the clip factors plus the accumulation (``linear_model._stage_finish``), and
  the accumulation alone (``_accumulate_kept``);
* the whole serial kernel: O1 over the full batch, O2 over n/10 gathered rows;
* numpy's ``standard_exponential``, ns per draw (the Poisson sampling's draws).

``--prefetch-sweep`` adds the margins pass with pf = 0 and 8 over consecutive
rows at d = 22, 54, 123 and 4-128 MB of rows (in and out of the L3 cache).
``--rows N`` runs the parts on N rows instead of 49,990 (4,096 rows, 0.7 MB,
stay in the L2 cache: the passes' cost without L3's).
``--llvm-option=OPT`` (repeatable; the = keeps argparse from reading OPT as an option) sets an LLVM command-line option (e.g.
``-force-vector-width=4``) before anything is compiled: run it with an empty
``NUMBA_CACHE_DIR``, or numba loads the code it cached without the option.

    NUMBA_NUM_THREADS=1 python benchmarks/kernel_parts.py [--prefetch-sweep]
    NUMBA_CACHE_DIR=$(mktemp -d) NUMBA_NUM_THREADS=1 python benchmarks/kernel_parts.py \\
        --llvm-option=-force-vector-width=4 --llvm-option=-force-vector-interleave=1

Minimum of 7 timings each.  Not a pytest benchmark: the LLVM options need a
process of their own.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

STAGE = 256


def _best_ns(f, rows: int, reps: int = 20) -> float:
    """Minimum ns per row over 7 timings of ``reps`` calls of ``f`` (after one untimed call)."""
    f()
    best = np.inf
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best / rows * 1e9


def harness():
    """The compiled harness functions (compiled on first use, after any LLVM option is set)."""
    import numba as nb

    from dpreg_kernels import linear_model as L
    from dpreg_kernels.config import _FM
    from dpreg_kernels.loss_blocks import logistic_dphi

    jit = nb.njit(fastmath=_FM)
    blk = jit(logistic_dphi)

    @jit
    def margins(X, w, st, pf):
        n = X.shape[0]
        mv, nv, ib = np.empty(st), np.empty(st), np.empty(st, np.int64)
        tot, s0 = 0.0, 0
        while s0 < n:
            s1 = min(s0 + st, n)
            for t in range(s0, s1):
                ib[t - s0] = t
            L._margins(X, w, w, False, ib, s1 - s0, pf, mv, nv)
            tot += mv[0]
            s0 = s1
        return tot

    @jit
    def margins_colmajor(XT, w, st):
        d, n = XT.shape
        mv = np.empty(st)
        tot, s0 = 0.0, 0
        while s0 < n:
            s1 = min(s0 + st, n)
            m = mv[:s1 - s0]
            m[:] = 0.0
            for j in range(d):
                xr, wj = XT[j, s0:s1], w[j]
                for u in range(s1 - s0):
                    m[u] += xr[u] * wj
            tot += mv[0]
            s0 = s1
        return tot

    @jit
    def derivative(m, y, st):
        n = m.shape[0]
        out, work, bits = np.empty(st), np.empty(st), np.empty(st, np.int64)
        tot, s0 = 0.0, 0
        while s0 < n:
            s1 = min(s0 + st, n)
            blk(m[s0:s1], y[s0:s1], out[:s1 - s0], work[:s1 - s0], bits[:s1 - s0], 0.0)
            tot += out[0]
            s0 = s1
        return tot

    @jit
    def finish(X, nx, a, st, clip):
        n, d = X.shape
        acc = np.zeros(d)
        ib, av, pv, cv = np.empty(st, np.int64), np.empty(st), np.empty(st), np.empty(st)
        ek, s0 = L._err_coef(d), 0
        while s0 < n:
            s1 = min(s0 + st, n)
            for t in range(s0, s1):
                ib[t - s0] = t
                av[t - s0] = a[t]
            L._stage_finish(X, nx, ib, s1 - s0, 0.0, False, ek, clip, clip * clip, av, pv, cv, acc)
            s0 = s1
        return acc

    @jit
    def accumulate(X, c, st):
        n, d = X.shape
        acc = np.zeros(d)
        ib, cv = np.empty(st, np.int64), np.empty(st)
        s0 = 0
        while s0 < n:
            s1 = min(s0 + st, n)
            for t in range(s0, s1):
                ib[t - s0] = t
                cv[t - s0] = c[t]
            L._accumulate_kept(X, ib, s1 - s0, cv, acc)
            s0 = s1
        return acc

    return margins, margins_colmajor, derivative, finish, accumulate


def unit_rows(rng, n, d):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def parts(n: int = 49990) -> None:
    from dpreg.problem import Problem, _inner
    from dpreg.registry import get_registry

    margins, margins_colmajor, derivative, finish, accumulate = harness()
    rng = np.random.default_rng(0)
    d = 22
    X = unit_rows(rng, n, d)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    pb = Problem(get_registry().get("loss", "logistic"), X, y)
    w = rng.standard_normal(d) * 0.3
    m = X @ w
    a = -y / (1.0 + np.exp(y * m))
    XT = np.ascontiguousarray(X.T)
    k = pb._k.clipped_sum.fast(False)
    r = np.zeros(d)
    full = np.empty(0, np.int64)
    i10 = np.sort(rng.choice(n, n // 10, replace=False))
    rows = [
        ("margins, consecutive rows, no prefetch (pf = 0)", lambda: margins(X, w, STAGE, 0), n),
        ("margins, consecutive rows, prefetch (pf = 8)", lambda: margins(X, w, STAGE, 8), n),
        ("margins over a column-major copy (reference)", lambda: margins_colmajor(XT, w, STAGE), n),
        ("block derivative (logistic)", lambda: derivative(m, y, STAGE), n),
        ("clip factors + accumulation (_stage_finish)", lambda: finish(X, pb._nx, a, STAGE, 1.0), n),
        ("accumulation alone (_accumulate_kept)", lambda: accumulate(X, a, STAGE), n),
        ("whole serial kernel, O1 full batch", lambda: k(X, y, pb._nx, full, True, w, w, False, r, r, pb._refs[1],
                                                         pb._dphi_block, _inner(1.0)), n),
        ("whole serial kernel, O2 over n/10 gathered rows",
         lambda: k(X, y, pb._nx, i10, False, w, w + 0.01, True, r, r, pb._refs[1], pb._dphi_block, _inner(0.03)),
         len(i10)),
    ]
    print(f"| part, {n} x {d}, one thread | ns per row |")
    print("|---|---|")
    for name, f, cnt in rows:
        print(f"| {name} | {_best_ns(f, cnt, reps=max(20, 1_000_000 // n) if cnt == n else 100):.2f} |", flush=True)
    g = np.random.default_rng(1)
    ns = _best_ns(lambda: g.standard_exponential((12, 5440)), 12 * 5440, reps=20)
    print(f"| numpy standard_exponential, per draw | {ns:.2f} |")


def prefetch_sweep() -> None:
    margins = harness()[0]
    rng = np.random.default_rng(0)
    print("\n| d | MB of rows | pf = 0 (ns/row) | pf = 8 (ns/row) | pf 8 / pf 0 |")
    print("|---|---|---|---|---|")
    for d in (22, 54, 123):
        for mb in (4, 8, 16, 32, 64, 128):
            n = mb * 2 ** 20 // (8 * d)
            X = rng.random((n, d))
            w = np.ones(d)
            st = max(4, min(STAGE, (1 << 18) // (8 * d) // 4 * 4))
            reps = max(1, 2_000_000 // n)
            a, b = (_best_ns(lambda pf=pf: margins(X, w, st, pf), n, reps=reps) for pf in (0, 8))
            print(f"| {d} | {mb} | {a:.2f} | {b:.2f} | {b / a:.2f}x |", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefetch-sweep", action="store_true")
    ap.add_argument("--rows", type=int, default=49990,
                    help="rows of the parts' data (default IJCNN1's 49,990: 8.4 MB, in L3; 4,096: 0.7 MB, in L2)")
    ap.add_argument("--llvm-option", action="append", default=[])
    opts = ap.parse_args()
    if opts.llvm_option:
        import llvmlite.binding as llvm

        for o in opts.llvm_option:
            llvm.set_option("kernel_parts", o)
        print(f"(LLVM options: {' '.join(opts.llvm_option)})")
    parts(opts.rows)
    if opts.prefetch_sweep:
        prefetch_sweep()
