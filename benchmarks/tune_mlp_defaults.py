"""Training-split measurements behind the `mlp` network's defaults under
adaptive-spider (issue 19; docs/experiment-saddles-mlp.md).

Each argument is a JSON object of adaptive-spider parameters (``--param`` keys),
optionally with ``"loss"`` (default ``mlp:hidden=32``); no argument means the
defaults.  Each configuration runs on adult's *training* split (the shipped
a9a training file, no test data) at eps = 2 with tuning seeds 100-104, and the
script prints the mean, sd and per-seed training accuracy.

    NUMBA_NUM_THREADS=1 python benchmarks/tune_mlp_defaults.py '{}' '{"adaptive_scale": 0.5}' \
        '{"loss": "logistic"}'
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import dpreg

TRAIN = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "adult.trn.bz2"


def main(argv):
    for arg in argv or ["{}"]:
        params = json.loads(arg)
        loss = params.pop("loss", "mlp:hidden=32")
        accs = [dpreg.run(algo="adaptive-spider", loss=loss, data=str(TRAIN), epsilon=2.0, seed=s, warn=False,
                          params=params)["diagnostics"]["metrics"]["train_accuracy"] for s in range(100, 105)]
        print(f"{loss} {params}: train accuracy {np.mean(accs):.4f} ± {np.std(accs):.4f} (min {min(accs):.4f}) "
              f"{[round(a, 4) for a in accs]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
