"""Grids of ``--param`` cells for one algorithm, measured on training data only: the
measurements behind the practical defaults of the single-pass algorithms.

* perturbed-sgd (and distributed-spider; results in
  experiments/results/tune_perturbed_sgd.txt): the step eta = 2/M, the practical
  alpha = max{alpha_scale * Thm 2 alpha, floor} with alpha_scale = 4, mu = 3,
  drift_steps = 1 and b2 = its noise floor.  The paper-scale rules are the cell
  '{"alpha_scale": 1, "step_over_M": 1, "mu": 2, "drift_steps": 2}' (their b2 =
  max{Thm 2 b2, floor} was the floor in every cell measured: see batch2_paper);
* adaptive-spider: alpha_scale 0.7, kappa_scale 2, adaptive_scale 3,
  diff_clip M/8 (``dpreg info adaptive-spider``, docs/models-learn.md; the 20-seed adult
  check is ``--data adult --seeds 20``);
* zo-o2nc and distributed-spider (docs/models-learn.md); zo-o2nc's h = 4, T = 6
  (B2 = M/(2 K T)) and 4 passes (``dpreg info zo-o2nc``).

Every cell runs ``dpreg.run`` at eps = 1 (``--epsilon``) with research *tuning* seeds, disjoint from
the seeds the targets are reported with (0-2 on IJCNN1, 0-4 on adult), and reports
only training-data quantities - never a test split:

* ``ijcnn1``: IJCNN1's training file, loss logistic-nonconvex-reg, the optimality
  gap F^(w) - F^* of the training objective (F^* the pipeline's non-private
  optimum), seeds 100-105, and its ratio to dp-sgd's 0.02445 (seeds 0-2,
  docs/models-learn.md; ``--reference`` recomputes dp-sgd's gap on the tuning seeds);
* ``adult``: the shipped adult data set at the defaults of ``dpreg run`` (loss
  logistic), *training* accuracy, seeds 100-104;
* ``synthetic``: synthetic-logistic:n=50000,d=50 (public, generated), loss
  logistic-nonconvex-reg, training gap, seeds 100-102, with dp-sgd's gap on the
  same seeds as the reference.

    NUMBA_NUM_THREADS=1 nice python experiments/tune_on_training_data.py perturbed-sgd \\
        --data ijcnn1,adult '{}' '{"alpha_scale": 1}' '{"step_over_M": 1}' '{"mu": 2}' ...
    NUMBA_NUM_THREADS=1 python experiments/tune_on_training_data.py adaptive-spider \\
        --data ijcnn1,adult,synthetic '{}' '{"max_phase": 16, "diff_clip_over_M": 0.25}' ...

A grid cell is a JSON object of ``--param`` values; the extra key ``noise`` names the
noise plugin (``--noise``), ``step_over_M``
sets the step to c/M and ``diff_clip_over_M`` the O2 clip factor to c M, with M the
loss's declared smoothness on that data (read from a probe run).  The resolved parameters of the last seed are printed beside each cell.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

import dpreg

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DPSGD_IJCNN1_GAP = 0.02445  # dp-sgd at its defaults, seeds 0-2 (docs/models-learn.md)
SHOW = ("alpha", "chi", "eta", "mu", "kappa", "batch1", "batch2", "batch2_paper", "noise_multiplier", "horizon",
        "escape_steps", "escape_radius", "o1_queries", "o2_queries", "escape_tests", "stop_reason",
        # adaptive-spider
        "steps", "phases", "batch_o1", "batch_o2_mean", "perturbations", "saddle_threshold", "step",
        # zo-o2nc
        "smoothing", "block_length", "blocks", "batch1", "max_sensitivity")

DATA = {
    "ijcnn1": dict(kw=dict(loss="logistic-nonconvex-reg", data=str(SHARED / "ijcnn1.trn.bz2"), features=22,
                           zero_based=False), seeds=range(100, 106), metric="gap"),
    "adult": dict(kw={}, seeds=range(100, 105), metric="train_accuracy"),
    "synthetic": dict(kw=dict(loss="logistic-nonconvex-reg", data="synthetic-logistic:n=50000,d=50"),
                      seeds=range(100, 103), metric="gap"),
}


EPS = 1.0


def measure(algo, kw, params, s):
    params = dict(params)
    if "noise" in params:  # the noise plugin, not a --param
        kw = dict(kw, noise=params.pop("noise"))
    d = dpreg.run(algo=algo, epsilon=EPS, seed=s, params=params or None, warn=False, **kw)["diagnostics"]
    m = d["metrics"]
    gap = m["train_loss"] - d["baselines"]["nonprivate_train_loss"]
    return gap, m["train_accuracy"], d["run_info"], d["problem"]["M"], d["usage"]["iterations"]


def declared_M(algo, kw):
    """The loss's declared smoothness M on that data, from a one-step probe run."""
    cap = "steps" if algo == "adaptive-spider" else "max_steps"
    return measure(algo, kw, {cap: 1}, 0)[3]


def fmt(info):
    out = []
    for k in SHOW:
        if k in info:
            v = info[k]
            out.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    return " ".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("algo")
    ap.add_argument("grid", nargs="*", default=["{}"])
    ap.add_argument("--data", default="ijcnn1,adult")
    ap.add_argument("--reference", action="store_true", help="recompute dp-sgd's IJCNN1 gap on the tuning seeds")
    ap.add_argument("--epsilon", type=float, default=1.0, help="privacy budget of every run (default 1)")
    ap.add_argument("--seeds", type=int, default=None,
                    help="tuning seeds 100 .. 100+N-1 on every data set (default: 6 IJCNN1, 5 adult, 3 synthetic)")
    ap.add_argument("--tiny", action="store_true", help="smoke run: 2,000 synthetic records, one seed")
    a = ap.parse_intermixed_args(argv)
    if a.tiny:
        DATA["tiny"] = dict(DATA["synthetic"], kw=dict(DATA["synthetic"]["kw"], data="synthetic-logistic:n=2000,d=5"))
        a.data, a.seeds = "tiny", 1
    global EPS
    EPS = a.epsilon
    warnings.filterwarnings("ignore")
    for name in a.data.split(","):
        spec = DATA[name]
        if a.seeds is not None:
            spec = dict(spec, seeds=range(100, 100 + a.seeds))
        ref = None
        if spec["metric"] == "gap" and (a.reference or name != "ijcnn1" or EPS != 1.0):
            ref = float(np.mean([measure("dp-sgd", spec["kw"], {}, s)[0] for s in spec["seeds"]]))
            print(f"{name}, eps = {EPS:g}: dp-sgd reference gap {ref:.5g} (seeds {spec['seeds'].start}-{spec['seeds'].stop - 1})")
        elif spec["metric"] == "gap":
            ref = DPSGD_IJCNN1_GAP
        M = None
        for cell in a.grid:
            params = json.loads(cell)
            if "step_over_M" in params:
                M = M or declared_M(a.algo, spec["kw"])
                params["step"] = params.pop("step_over_M") / M
            if "diff_clip_over_M" in params:
                M = M or declared_M(a.algo, spec["kw"])
                params["diff_clip"] = params.pop("diff_clip_over_M") * M
            t = time.perf_counter()
            rows = [measure(a.algo, spec["kw"], params, s) for s in spec["seeds"]]
            vals = np.array([r[0] if spec["metric"] == "gap" else r[1] for r in rows])
            info, its = rows[-1][2], [r[4] for r in rows]
            tests = [r[2].get("escape_tests") for r in rows]
            if spec["metric"] == "gap":
                head = (f"gap {vals.mean():.4f} ({vals.mean() / ref:.2f}x dp-sgd) "
                        f"[{' '.join(f'{v:.4f}' for v in vals)}]")
            else:
                head = f"train accuracy {vals.mean():.4f} ± {vals.std():.4f} (min {vals.min():.4f})"
            print(f"{a.algo} {name} eps={EPS:g} {cell}: {head}; iterations {int(np.mean(its))}, escape tests {tests}; "
                  f"{fmt(info)}  [{time.perf_counter() - t:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
