"""Accuracy of the ``mlp`` defaults with one and two hidden layers, at eps = 2.

Data: adult (binary; trained on its training split, tested on the official
test split) and scikit-learn's digits (10 classes; a fixed public split,
``--test-fraction 0.25`` with split seed 0).  Each configuration runs with
seeds 0..S-1 and prints train and test accuracy (mean +- sd) beside the test
set's majority rate.  The defaults were chosen on the training splits only
(``experiments/tune_mlp_defaults.py``, the module docstring of
``dpreg_plugins.losses.mlp``); this script reports them.

    NUMBA_NUM_THREADS=1 nice python experiments/networks_accuracy.py [--seeds 5] \
        [--algos dp-sgd,adaptive-spider] [--losses mlp,mlp:hidden=64,mlp:hidden=64,32]
    python experiments/networks_accuracy.py --tiny      # smoke run
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import dpreg

DATA = {"adult": {}, "digits": {"test_fraction": 0.25, "labels": tuple(range(10))}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--algos", default="dp-sgd,adaptive-spider")
    ap.add_argument("--losses", default="mlp,mlp:hidden=64,mlp:hidden=64,32")
    ap.add_argument("--data", default="adult,digits")
    ap.add_argument("--epsilon", type=float, default=2.0)
    ap.add_argument("--tiny", action="store_true", help="smoke run: digits, dp-sgd, mlp, one seed")
    a = ap.parse_args(argv)
    if a.tiny:
        a.seeds, a.algos, a.losses, a.data = 1, "dp-sgd", "mlp", "digits"
    losses = []  # "mlp:hidden=64,32" holds a comma: split on ",mlp" boundaries
    for part in a.losses.split(","):
        if part.startswith("mlp") or part in ("logistic", "softmax") or not losses:
            losses.append(part)
        else:
            losses[-1] += "," + part
    print("| data | algorithm | loss | train accuracy | test accuracy | test majority rate | seeds | s/run |")
    print("|---|---|---|---|---|---|---|---|")
    for data in a.data.split(","):
        for algo in a.algos.split(","):
            for loss in losses:
                if data == "adult" and loss == "softmax":
                    continue
                tr, te, maj = [], [], None
                t0 = time.time()
                for s in range(a.seeds):
                    rec = dpreg.run(algo=algo, loss=loss, data=data, epsilon=a.epsilon, seed=s, warn=False,
                                    **DATA[data])
                    m = rec["diagnostics"]["metrics"]
                    tr.append(m["train_accuracy"])
                    te.append(m["test_accuracy"])
                    maj = rec["diagnostics"]["baselines"]["test_majority_rate"]
                dt = (time.time() - t0) / a.seeds
                print(f"| {data} | {algo} | `{loss}` | {np.mean(tr):.3f} ± {np.std(tr):.3f} | "
                      f"{np.mean(te):.3f} ± {np.std(te):.3f} | {maj:.3f} | 0-{a.seeds - 1} | {dt:.0f} |", flush=True)


if __name__ == "__main__":
    main()
