"""Do the SOSP algorithms' second-order machinery run on real data at their
defaults, and what do they return?

a9a (train ../shared/data/adult.trn.bz2, test adult.tst.bz2), loss logistic,
eps = 1, delta = 1e-5, research seeds 0..4, every algorithm at its defaults
(``--noise`` as named).  Per run: perturbed-sgd's escape tests and outcomes,
adaptive-spider's O1 refreshes and phase lengths, the tree depth, the final
train ||grad F^(w)|| and test accuracy.

    # one JSON line per run, appended to FILE; LABEL tags the code version
    python experiments/experiment_fidelity.py run FILE LABEL [--seeds 0,1,2,3,4] [--only NAME,...]
    # the grid that chose perturbed-sgd's o1_budget and drift_steps (seed 0, a9a train ||grad||)
    python experiments/experiment_fidelity.py tune FILE
    # the page: the rows of LABEL (default "current"), SOSP decisions by cause
    python experiments/experiment_fidelity.py report FILE [LABEL] > docs/experiment-fidelity.md
    # the committed runs: FILE = experiments/results/experiment-fidelity.jsonl

Run under ``nice``; the whole grid is about 8 min CPU per code version.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

DATA = Path(os.environ.get("DPREG_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
TRAIN, TEST = str(DATA / "adult.trn.bz2"), str(DATA / "adult.tst.bz2")

#: name -> (algo, noise, params); defaults everywhere
CONFIGS = {
    "adaptive-spider + tree": ("adaptive-spider", "tree", {}),
    "adaptive-spider + gaussian": ("adaptive-spider", "gaussian", {}),
    # the kappa_eps choice: the noise-aware eps in kappa as well (everything else at defaults)
    "adaptive-spider + tree, kappa_eps=noise-aware": ("adaptive-spider", "tree", {"kappa_eps": "noise-aware"}),
    "perturbed-sgd + tree": ("perturbed-sgd", "tree", {}),
    "perturbed-sgd + gaussian": ("perturbed-sgd", "gaussian", {}),
    "dp-spider + gaussian": ("dp-spider", "gaussian", {}),
    "dp-spider + tree": ("dp-spider", "tree", {}),
    "dp-sgd (reference)": ("dp-sgd", None, {}),
    # the second data set: IJCNN1 (49,990 x 22), logistic-nonconvex-reg
    "ijcnn1: adaptive-spider + tree": ("adaptive-spider", "tree", {}),
    "ijcnn1: perturbed-sgd + tree": ("perturbed-sgd", "tree", {}),
}
IJCNN1 = ("ijcnn1.trn.bz2", "ijcnn1.tst.bz2", "logistic-nonconvex-reg")


def _commit() -> str:
    """The checkout's commit (short), "+dirty" when files differ from it; "unknown" outside git."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
        return c + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(path: str, label: str, seeds, only=None) -> None:
    from dpreg.pipeline import RunConfig, run_pipeline

    commit = _commit()

    with open(path, "a") as fh:
        for name, (algo, noise, params) in CONFIGS.items():
            if only and name not in only:
                continue
            for seed in seeds:
                t0 = time.process_time()
                train, test, loss = (str(DATA / IJCNN1[0]), str(DATA / IJCNN1[1]), IJCNN1[2]) \
                    if name.startswith("ijcnn1:") else (TRAIN, TEST, "logistic")
                rec = run_pipeline(RunConfig(algo=algo, noise=noise, loss=loss, data=train, test_data=test,
                                             epsilon=1.0, delta=1e-5, params=dict(params), seed=seed))
                m, ri = rec["diagnostics"]["metrics"], rec["diagnostics"]["run_info"]
                row = dict(label=label, commit=commit, config=name, seed=seed, grad=m["train_grad_norm"],
                           acc=m["test_accuracy"], lam=m["train_lambda_min"], cpu_s=time.process_time() - t0,
                           steps=rec["diagnostics"]["usage"]["iterations"], records=rec["diagnostics"]["usage"]["records_used"])
                for k in ("escape_tests", "escapes", "certified", "stop_reason", "o1_queries", "o2_queries",
                          "phases", "o1_refreshes", "o1_forced_by_phase_cap", "max_phase_steps", "longest_phase",
                          "tree_levels", "noise_multiplier", "o1_noise_multiplier", "kappa", "alpha", "horizon",
                          "batch_o1", "batch1"):
                    if k in ri:
                        row[k] = ri[k]
                dec = ri.get("sosp_decisions") or {}
                for part in ("escape_tests", "o1_refreshes", "perturbations"):
                    for k, v in (dec.get(part) or {}).items():
                        row[f"{part}.{k}"] = v
                for k in ("noise_norm", "escape_bar", "perturbation_threshold", "perturbation_norm", "note"):
                    if k in dec:
                        row[f"dec.{k}"] = dec[k]
                fh.write(json.dumps(row, default=float) + "\n")
                fh.flush()
                print(name, seed, f"grad={row['grad']:.4f} acc={row['acc']:.4f}", file=sys.stderr)


def tune(path: str) -> None:
    """perturbed-sgd's practical constants: o1_budget x drift_steps, seed 0,
    both noises; chosen by the final train ||grad|| (never the test split)."""
    from dpreg.pipeline import RunConfig, run_pipeline

    with open(path, "a") as fh:
        for noise in ("gaussian", "tree"):
            for K1 in (2, 4, 8):
                for P in (1, 2, 4):
                    rec = run_pipeline(RunConfig(algo="perturbed-sgd", noise=noise, loss="logistic", data=TRAIN,
                                                 test_data=TEST, epsilon=1.0, delta=1e-5, seed=0,
                                                 params={"o1_budget": K1, "drift_steps": P}))
                    m, ri = rec["diagnostics"]["metrics"], rec["diagnostics"]["run_info"]
                    fh.write(json.dumps(dict(label="tune", noise=noise, K1=K1, P=P, grad=m["train_grad_norm"],
                                             acc=m["test_accuracy"], tests=ri["escape_tests"],
                                             esc=ri["escapes"], cert=ri["certified"], o1=ri["o1_queries"],
                                             o2=ri["o2_queries"])) + "\n")
                    fh.flush()


def _ms(vals, fmt="{:.4f}"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = sum(vals) / len(vals)
    if len(vals) == 1:
        return fmt.format(m)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
    return f"{fmt.format(m)} ± {fmt.format(sd)}"


def _counts(vals):
    vals = [v for v in vals if v is not None]
    return "-" if not vals else f"{min(vals)}-{max(vals)}" if min(vals) != max(vals) else f"{vals[0]}"


def _after_commits(rows) -> str:
    """The commits the ``after`` rows record (rows from before commits were recorded: the fidelity branch)."""
    cs = sorted({r.get("commit", "the fidelity branch (1c3cbfa)") for r in rows if r["label"] == "after"})
    return ", ".join(cs) if cs else "-"


def _sum(rs, key):
    vals = [r.get(key) for r in rs if r.get(key) is not None]
    return sum(vals) if vals else None


def _split(rs, part, keys):
    got = [_sum(rs, f"{part}.{k}") for k in keys]
    return "-" if all(g is None for g in got) else " / ".join(str(g or 0) for g in got)


def report(path: str, label: str = "current") -> str:
    """The page: the rows of ``label`` (one code version), the SOSP decisions summed over the seeds."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if r.get("label") == label]
    by = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    commits = ", ".join(sorted({r.get("commit", "unknown") for r in rows})) or "-"
    out = ["# Experiment: do the SOSP algorithms' second-order machinery run on a9a and IJCNN1, and what decides it?",
           "",
           f"Generated at commit {commits} by `python experiments/experiment_fidelity.py report {path}` from "
           f"`NUMBA_NUM_THREADS=1 nice python experiments/experiment_fidelity.py run {path} {label} --seeds "
           f"{','.join(str(s) for s in sorted({r['seed'] for r in rows}))}` (do not edit by hand).", "",
           "a9a: train `adult.trn.bz2` (n = 32,561, d = 123), test `adult.tst.bz2`; loss `logistic` (no "
           "intercept; convex: lambda_min >= 0 up to rounding, there is no saddle to escape); eps = 1, delta = 1e-5; every "
           "algorithm at its defaults; research seeds as listed. Rows named `ijcnn1: ...` use IJCNN1 (train "
           "`ijcnn1.trn.bz2`, 49,990 x 22, test `ijcnn1.tst.bz2`, majority class 0.905) with loss "
           "`logistic-nonconvex-reg`. ||grad|| is the non-private diagnostic ||grad F^(w)|| on the training set, "
           "accuracy is on the test file (a9a majority class 0.764), lambda_min is of the training Hessian at the "
           "returned w. Cells mean ± sd over seeds; decision counts are summed over the seeds (the run record's "
           "`sosp_decisions`).", "",
           "| configuration | seeds | train ||grad|| | test accuracy | lambda_min | escape tests: escaped / "
           "certified / decided by noise / interrupted | O1 refreshes: drift / cap / pass start / O2 costlier | "
           "perturbations (smaller than the noise) | noise norm vs escape bar (perturbation threshold) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name in CONFIGS:
        rs = by.get(name)
        if not rs:
            continue
        per = _sum(rs, "perturbations.total")
        per = "-" if per is None else f"{per} ({_sum(rs, 'perturbations.decided_by_noise')})"
        nn = rs[0].get("dec.noise_norm")
        bar = rs[0].get("dec.escape_bar", rs[0].get("dec.perturbation_threshold"))
        cmp_ = "-" if nn is None or bar is None else f"{nn:.3g} vs {bar:.3g}"
        out.append(f"| {name} | {','.join(str(r['seed']) for r in rs)} | {_ms([r['grad'] for r in rs])} "
                   f"| {_ms([r['acc'] for r in rs])} | {_ms([r['lam'] for r in rs], '{:.2e}')} "
                   f"| {_split(rs, 'escape_tests', ('escaped', 'certified', 'decided_by_noise', 'interrupted'))} "
                   f"| {_split(rs, 'o1_refreshes', ('drift', 'cap', 'pass_start', 'o2_costlier'))} | {per} | {cmp_} |")
    out += ["", "## What the record says decided (each configuration's first seed)", ""]
    for name in CONFIGS:
        rs = by.get(name)
        if rs and rs[0].get("dec.note"):
            out.append(f"- {name}: {rs[0]['dec.note']}.")
    out += ["", "An escape test is decided by noise when the expected norm of the O1 noise in the estimate is at "
            "least the escape bar S / (T_esc eta): the noise alone then moves an attempt S away "
            "(perturbed-sgd's docstring derives why its batch floor puts the noise at about twice the bar). "
            "The strict-saddle problem of docs/experiment-saddles.md shows a configuration where the landscape "
            "decides.", ""]
    cpu = sum(r["cpu_s"] for r in rows)
    out += ["", f"CPU time of all runs in the table: {cpu / 60:.1f} min.", ""]
    return "\n".join(out)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "run":
        seeds, only = [0, 1, 2, 3, 4], None
        args = sys.argv[4:]
        for i, a in enumerate(args):
            if a == "--seeds":
                seeds = [int(s) for s in args[i + 1].split(",")]
            if a == "--only":
                only = set(args[i + 1].split(";"))
        run(sys.argv[2], sys.argv[3], seeds, only)
    elif cmd == "tune":
        tune(sys.argv[2])
    elif cmd == "report":
        print(report(sys.argv[2], *sys.argv[3:4]))
    else:
        raise SystemExit(__doc__)
