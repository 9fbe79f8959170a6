"""Choose zo-o2nc's practical defaults on adult's TRAINING split: runs
``dpreg.run(algo="zo-o2nc", epsilon=EPS, seed=s, params=PARAMS)`` for each
seed and prints the training accuracy and loss (the selection criteria; the
test accuracy is printed last, for reporting only, never for choosing).

    NUMBA_NUM_THREADS=1 nice python experiments/tune_zo_o2nc.py 0,1 '{"smoothing": 8, "batch2": 128, "blocks": 4}' [EPS]
"""
from __future__ import annotations

import json
import sys
import time
import warnings

import numpy as np

import dpreg


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    warnings.filterwarnings("ignore")
    data = {}
    if argv[:1] == ["--tiny"]:  # smoke run: one seed on 2,000 synthetic records
        argv, data = ["0"], {"data": "synthetic-logistic:n=2000,d=5", "test_fraction": 0.2}
    seeds = [int(x) for x in argv[0].split(",")]
    params = json.loads(argv[1]) if len(argv) > 1 else {}
    eps = float(argv[2]) if len(argv) > 2 else 1.0
    tr, te, ls = [], [], []
    for s in seeds:
        t = time.time()
        r = dpreg.run(algo="zo-o2nc", epsilon=eps, seed=s, params=params, **data)
        m, ri = r["diagnostics"]["metrics"], r["diagnostics"]["run_info"]
        tr.append(m["train_accuracy"])
        ls.append(m["train_loss"])
        te.append(m["test_accuracy"])
        w = np.asarray(r["release"]["model"]["weights"])
        print(f"seed {s}: train accuracy {m['train_accuracy']:.4f} train loss {m['train_loss']:.4f} "
              f"|w| {np.linalg.norm(w):.2f} T={ri['block_length']} K={ri['blocks']} B1={ri['batch1']} "
              f"B2={ri['batch2']} z={ri['noise_multiplier']:.2f} s_max={ri['max_sensitivity']:.3g} "
              f"clipped={ri['clipped_terms']} ({time.time() - t:.0f} s)", flush=True)
    print(f"params {params} eps {eps}: train accuracy {np.mean(tr):.4f} train loss {np.mean(ls):.4f} "
          f"(test accuracy, report only: {np.mean(te):.4f})")


if __name__ == "__main__":
    main()
