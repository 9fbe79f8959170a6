"""Where passes stop paying: the training gap F^(w) - F^* of a single-pass
SPIDER-type method with 1, 2 and 3 passes (``--param passes=P``) on the public
synthetic set ``synthetic-logistic:n=N,d=20`` (logistic loss, eps = 1, tuning
seeds 100-102) for N = 1,000 ... 30,000: the measurement behind the
20,000-record threshold of the practical ``passes`` default (adaptive-spider,
perturbed-sgd; docs/models-learn.md, "The defaults, and the public quantities they adapt to").  Training data only.

    NUMBA_NUM_THREADS=1 python experiments/passes_crossover.py adaptive-spider,perturbed-sgd
    python experiments/passes_crossover.py --tiny      # smoke run
"""
from __future__ import annotations

import sys

import numpy as np

import dpreg


def main(algos, sizes=(1000, 3000, 10000, 30000), seeds=range(100, 103)):
    for algo in algos:
        for n in sizes:
            row = []
            for p in (1, 2, 3):
                gaps, iters = [], []
                for s in seeds:
                    r = dpreg.run(algo=algo, data=f"synthetic-logistic:n={n},d=20", loss="logistic", epsilon=1.0,
                                  seed=s, warn=False, params={"passes": p})
                    b = r["diagnostics"]["baselines"]
                    gaps.append(r["diagnostics"]["metrics"]["train_loss"] - b["nonprivate_train_loss"])
                    iters.append(r["diagnostics"]["usage"]["iterations"])
                row.append(f"passes {p}: gap {np.mean(gaps):.4f}, {np.mean(iters):.0f} steps")
            print(f"{algo} n={n}: " + " | ".join(row), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--tiny"]:  # smoke run: one algorithm, 1,000 records, one seed
        main(["adaptive-spider"], sizes=(1000,), seeds=(100,))
    else:
        main(sys.argv[1].split(",") if len(sys.argv) > 1 else ["adaptive-spider", "perturbed-sgd"])
