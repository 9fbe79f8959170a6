"""Wall time of the methods whose cost grows fastest with d - the trust-region pair
(a Hessian per step) and zo-o2nc (directions per record) - beside dp-sgd, at
d = 784, n = 4,000 (the size of an MNIST subset; docs/models-learn.md).

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python experiments/large_d_timing.py [--seeds 1]
    python experiments/large_d_timing.py --tiny          # the smoke run CI makes

Data: synthetic-logistic with n = 4,000 training records, d = 784, noise 0.05 (a planted
logistic model whose labels a linear model can learn: Gaussian features of norm about 1,
margins of standard deviation about 2), its own 1,000 held-out records; every algorithm at
its defaults, eps = 1, research seeds 0, 1, ...  Prints, per algorithm, the whole call (wall
and this process's CPU seconds: on a machine shared with other jobs the CPU seconds are what
the call costs, the wall seconds what it took), the algorithm's run, the diagnostics and the
test accuracy.
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import dpreg

ALGOS = ("dp-trust-region", "dp-stochastic-trust-region", "zo-o2nc", "dp-sgd")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--tiny", action="store_true", help="smoke run: n = 300, d = 60")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    n, d = (300, 60) if a.tiny else (4000, 784)
    data = f"synthetic-logistic:n={n},d={d},noise=0.05"
    print(f"| algorithm | call s | call CPU s | run s | diagnostics s | test accuracy | ({data}, eps = 1, "
          f"seeds: {a.seeds}) |")
    print("|---|---|---|---|---|---|---|")
    out = {}
    for algo in [x for x in a.algos.split(",") if x]:
        rows = []
        for s in range(a.seeds):
            t, c = time.perf_counter(), time.process_time()
            rec = dpreg.run(algo=algo, data=data, epsilon=1.0, seed=s, warn=lambda m: None)
            tm = rec["diagnostics"]["timing"]
            rows.append((time.perf_counter() - t, time.process_time() - c, tm["run_s"], tm["eval_s"],
                         rec["diagnostics"]["metrics"]["test_accuracy"]))
        m = np.mean(rows, axis=0)
        out[algo] = m
        print(f"| {algo} | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.1f} | {m[3]:.2f} | {m[4]:.4f} | |", flush=True)
    return out


if __name__ == "__main__":
    main()
