"""The 'models that learn' targets, measured: every registered algorithm at its
defaults on the shipped adult data set at eps = 1 (test accuracy, 5 seeds),
dp-sgd on breast-cancer's seeded 80/20 split, and the optimality gap on IJCNN1
with logistic-nonconvex-reg against dp-sgd's.

    python benchmarks/targets_models_learn.py [--seeds 5] [--algos a,b] > targets.md

Seeds are research seeds (reproducible runs).  Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

import dpreg

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--algos", default="adaptive-spider,dp-gd,dp-sgd,dp-spider,perturbed-sgd,warm-start,"
                                       "zo-o2nc,distributed-spider,dp-trust-region,dp-stochastic-trust-region")
    ap.add_argument("--skip-ijcnn1", action="store_true")
    ap.add_argument("--only-ijcnn1", action="store_true", help="measure only the IJCNN1 gaps")
    ap.add_argument("--scaling", default="auto", help="feature scaling of the IJCNN1 runs (auto, private, ...)")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="algorithm parameter for the IJCNN1 runs of --algos (not for the dp-sgd reference)")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    from dpreg.registry import get_registry

    names = [n for n in a.algos.split(",") if n in get_registry().names("algorithm")]
    if not a.only_ijcnn1:
        adult_and_breast_cancer(names, a.seeds)
    if a.skip_ijcnn1 or not (SHARED / "ijcnn1.trn.bz2").exists():
        return
    ijcnn1_gaps(names, a.seeds, a.scaling, a.param)


def adult_and_breast_cancer(names, seeds):
    print("| algorithm (defaults) | adult test accuracy, eps = 1 (mean ± sd, %d seeds) | min | run s |" % seeds)
    print("|---|---|---|---|")
    for algo in names:
        acc, secs = [], []
        for s in range(seeds):
            t = time.perf_counter()
            r = dpreg.run(algo=algo, epsilon=1.0, seed=s)
            secs.append(time.perf_counter() - t)
            acc.append(r["diagnostics"]["metrics"]["test_accuracy"])
        print(f"| {algo} | {np.mean(acc):.4f} ± {np.std(acc):.4f} | {np.min(acc):.4f} | {np.mean(secs):.1f} |",
              flush=True)
    acc = [dpreg.run(algo="dp-sgd", data="breast-cancer", test_fraction=0.2, epsilon=1.0, seed=s)
           ["diagnostics"]["metrics"]["test_accuracy"] for s in range(seeds)]
    print(f"\nbreast-cancer, dp-sgd defaults, eps = 1, seeded 80/20 split: test accuracy "
          f"{np.mean(acc):.4f} ± {np.std(acc):.4f} (min {np.min(acc):.4f})")


def ijcnn1_gaps(names, seeds, scaling, params=()):
    data = str(SHARED / "ijcnn1.trn.bz2")
    gaps = {}
    for algo in ["dp-sgd"] + [n for n in names if n != "dp-sgd"]:
        vals = []
        for s in range(min(seeds, 3)):
            r = dpreg.run(algo=algo, loss="logistic-nonconvex-reg", data=data, features=22, zero_based=False,
                          epsilon=1.0, seed=s, scaling=scaling,
                          params=list(params) if algo != "dp-sgd" else None)
            b = r["diagnostics"]["baselines"]
            vals.append(r["diagnostics"]["metrics"]["train_loss"] - b["nonprivate_train_loss"])
        gaps[algo] = float(np.mean(vals))
    print(f"\n| algorithm | IJCNN1 logistic-nonconvex-reg optimality gap F(w) - F*, eps = 1, --scaling {scaling} "
          f"{' '.join(params)} | ratio to dp-sgd |")
    print("|---|---|---|")
    for algo, g in gaps.items():
        print(f"| {algo} | {g:.4g} | {g / gaps['dp-sgd']:.2f} |")


if __name__ == "__main__":
    main()
