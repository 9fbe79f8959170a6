"""Training-split measurements behind the ``mlp`` network's defaults (the
module docstring of ``dpreg_plugins.losses.mlp``).

Each argument is a JSON object of algorithm parameters (``--param`` keys),
optionally with ``"algo"`` (default ``adaptive-spider``), ``"loss"`` (default
``mlp:hidden=32``) and ``"data"`` (default adult's training split, the shipped
a9a training file; ``digits``: the training 75 % of scikit-learn's digits,
``--test-fraction 0.25`` with split seed 0; any data set name or file).  Each
configuration runs at eps = 2 with tuning seeds 100-104 and the script prints
the mean, sd and per-seed training accuracy (R^2 for regression).  No test
data are looked at.

    NUMBA_NUM_THREADS=1 python experiments/tune_mlp_defaults.py '{}' '{"adaptive_scale": 0.5}' \\
        '{"loss": "logistic"}' '{"algo": "dp-sgd", "loss": "mlp:hidden=64,32,M=4", "data": "digits"}' \\
        '{"algo": "dp-sgd", "loss": "mlp:hidden=64,32", "data": "synthetic-regression"}'
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import dpreg

TRAIN = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "adult.trn.bz2"
#: data sets without a test file: their training part of a fixed public split
SPLIT = {"digits": 0.25}


def main(argv):
    seeds = range(100, 105)
    if argv[:1] == ["--tiny"]:  # smoke run: one seed of dp-sgd on digits
        argv, seeds = ['{"algo": "dp-sgd", "loss": "mlp:hidden=8", "data": "digits"}'], (100,)
    for arg in argv or ["{}"]:
        params = json.loads(arg)
        algo = params.pop("algo", "adaptive-spider")
        loss = params.pop("loss", "mlp:hidden=32")
        data = params.pop("data", str(TRAIN))
        scores = []
        for s in seeds:
            m = dpreg.run(algo=algo, loss=loss, data=data, epsilon=2.0, seed=s, warn=False, params=params,
                          test_fraction=SPLIT.get(data))["diagnostics"]["metrics"]
            scores.append(m["train_accuracy"] if m.get("train_accuracy") is not None else m["train_r2"])
        what = "accuracy" if m.get("train_accuracy") is not None else "R^2"
        print(f"{algo} {loss} {Path(data).name} {params}: train {what} {np.mean(scores):.4f} ± {np.std(scores):.4f} "
              f"(min {min(scores):.4f}) {[round(a, 4) for a in scores]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
