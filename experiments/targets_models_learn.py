"""The standing table of docs/models-learn.md: every registered algorithm at its
defaults on seven data sets at eps = 1 and 4 - test accuracy, its gap to dp-sgd's
and to the majority rate.

    NUMBA_NUM_THREADS=1 nice python experiments/targets_models_learn.py [--seeds 3] [--algos a,b]
        [--data breast-cancer,wine,digits,adult-4601,adult,ijcnn1,synthetic] [--epsilons 1,4] [--out table.json]
    python experiments/targets_models_learn.py --from-json table.json [--compact]   # a former run's table
    python experiments/targets_models_learn.py --tiny      # the smoke run CI makes (seconds)

Data sets (each with a fixed public split; research seeds 0, 1, ... for the mechanisms):

* ``breast-cancer``: scikit-learn's 569 x 30, a seeded 80/20 split (split seed 0), the
  data set's declared public feature bounds (what ``--scaling auto`` applies);
* ``wine``: scikit-learn's 178 x 13, binary label class 1 (cultivar 2) against the other
  two, a seeded 80/20 split, the data set's declared public feature bounds;
* ``digits``: scikit-learn's bundled digits (1,797 x 64, 8 x 8 pixels in 0..16), binary
  label digit >= 5, a seeded 80/20 split, the public pixel bounds [0, 16];
* ``adult``: the shipped a9a (32,561 x 123) and its official test split (no feature map:
  ``--scaling auto`` for a source of one-hot indicators);
* ``adult-4601``: the first 4,601 of those training records (spambase's size), the same
  test split;
* ``ijcnn1``: ../shared/data/ijcnn1.trn (49,990 x 22) and ijcnn1.tst (91,701; no
  feature map: ``--scaling auto`` for an svmlight file);
* ``synthetic``: synthetic-logistic with n = 300, d = 10, noise 0.25 (a planted logistic
  model), tested on 20,000 fresh records of the same model.

Every run is ``dpreg.run(algo=A, epsilon=E, seed=s, ...)`` with no algorithm parameter:
the defaults a user gets, loss ``logistic``.  ``--validation`` evaluates instead on a
25 % validation split carved out of each *training* split (the numbers the defaults may
be chosen by; the test splits are for the table only).  ``--tiny`` runs every algorithm
on 200-record subsets of two data sets at one epsilon and one seed, and checks the table
is complete.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

import dpreg

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
ALGOS = ("dp-sgd", "dp-gd", "dp-spider", "adaptive-spider", "perturbed-sgd", "warm-start", "dp-trust-region",
         "dp-stochastic-trust-region", "zo-o2nc", "distributed-spider")
DATASETS = ("breast-cancer", "wine", "digits", "adult-4601", "adult", "ijcnn1", "synthetic")
#: the adult subset: the first 4,601 training records (a spambase-sized set)
ADULT_SUBSET = 4601
#: the synthetic set: n = 300 training records of a planted logistic model
SYNTHETIC = dict(n=300, d=10, noise=0.25)


def _split(X, y, fraction, seed):
    from dpreg.data import split

    return split(X, y, fraction, seed)


@lru_cache(maxsize=None)
def load(name: str, generation: int = 0):
    """``(X_train, y_train, X_test, y_test, run options)`` of a data set (labels -1/+1);
    ``generation``: the public seed of the synthetic set (the table uses 0)."""
    from dpreg.registry import get_registry

    reg = get_registry()
    if name == "breast-cancer":
        src = reg.get("dataset", "breast-cancer")()
        X, y = src.load(0)
        Xtr, ytr, Xte, yte = _split(X, y, 0.2, 0)
        return Xtr, ytr, Xte, yte, dict(scaling="bounds", bounds=src.bounds)
    if name == "digits":
        from sklearn.datasets import load_digits

        X, t = load_digits(return_X_y=True)
        y = np.where(t >= 5, 1.0, -1.0)
        Xtr, ytr, Xte, yte = _split(X.astype(float), y, 0.2, 0)
        return Xtr, ytr, Xte, yte, dict(scaling="bounds", bounds=([0.0] * 64, [16.0] * 64))
    if name == "wine":
        src = reg.get("dataset", "wine")()
        X, t = src.load(0)
        y = np.where(t == 1, 1.0, -1.0)
        Xtr, ytr, Xte, yte = _split(X, y, 0.2, 0)
        return Xtr, ytr, Xte, yte, dict(scaling="bounds", bounds=src.bounds)
    if name in ("adult", "adult-4601"):
        src = reg.get("dataset", "adult")()
        Xtr, ytr = src.load(0)
        if name == "adult-4601":
            Xtr, ytr = Xtr[:ADULT_SUBSET], ytr[:ADULT_SUBSET]
        return (Xtr, ytr, *src.load_test(0), dict(scaling="none"))
    if name == "ijcnn1":
        from dpreg.data import Schema, load_file

        sch = Schema(n_features=22, zero_based=False)
        Xtr, ytr, _ = load_file(str(SHARED / "ijcnn1.trn.bz2"), sch)
        Xte, yte, _ = load_file(str(SHARED / "ijcnn1.tst.bz2"), sch)
        dense = [m.toarray() if hasattr(m, "toarray") else np.asarray(m) for m in (Xtr, Xte)]
        return dense[0], np.asarray(ytr, float), dense[1], np.asarray(yte, float), dict(scaling="none")
    if name == "synthetic":
        n, d, noise = SYNTHETIC["n"], SYNTHETIC["d"], SYNTHETIC["noise"]
        Xtr, ytr = reg.get("dataset", "synthetic-logistic")(n=n, d=d, noise=noise).load(generation)
        # 20,000 test records: the source's held-out stream at n = 80,000 (same planted model)
        Xte, yte = reg.get("dataset", "synthetic-logistic")(n=80000, d=d, noise=noise).load_test(generation)
        return Xtr, ytr, Xte, yte, dict(scaling="none")
    raise SystemExit(f"unknown data set {name!r}; choose from {', '.join(DATASETS)}")


def arrays(name: str, mode: str, tiny: int | None = None):
    """``(train, evaluation, options)``: the test split (mode "test") or a 25 % validation
    split of the training split (mode "validation"; for the synthetic set, a fresh draw of
    another planted model, public seed 1, and its own test records); ``tiny``: at most that
    many rows of each."""
    if mode == "validation" and name == "synthetic":
        Xtr, ytr, Xte, yte, opts = load(name, 1)
    else:
        Xtr, ytr, Xte, yte, opts = load(name)
        if mode == "validation":
            Xtr, ytr, Xte, yte = _split(Xtr, ytr, 0.25, 1)
    if tiny:
        Xtr, ytr, Xte, yte = Xtr[:tiny], ytr[:tiny], Xte[:tiny], yte[:tiny]
    return (Xtr, ytr), (Xte, yte), opts


def run_cell(algo, name, eps, seed, *, mode="test", tiny=None, params=None, **kw):
    """One run: (accuracy on the evaluation split, its majority rate, seconds, record).  Mode
    "validation" skips the diagnostics (``diagnostics="light"``) and scores the released model."""
    tr, te, opts = arrays(name, mode, tiny)
    params = dict(params or {})
    if "noise" in params:  # the noise plugin (--noise), not an algorithm parameter
        kw["noise"] = params.pop("noise")
    if "loss" in params:  # the loss (--loss), not an algorithm parameter
        kw["loss"] = params.pop("loss")
    t = time.perf_counter()
    light = mode == "validation"
    rec = dpreg.run(algo=algo, data=tr, test_data=None if light else te, labels=(-1.0, 1.0), epsilon=eps,
                    seed=seed, params=params or None, warn=lambda m: None, diagnostics="light" if light else True,
                    **opts, **kw)
    secs = time.perf_counter() - t
    maj = max(np.mean(te[1] > 0), np.mean(te[1] <= 0))
    if light:
        acc = float(np.mean(dpreg.load_model(rec).predict(te[0]) == te[1]))
        return acc, maj, secs, rec
    return rec["diagnostics"]["metrics"]["test_accuracy"], maj, secs, rec


def _summary(rec) -> dict:
    """A few run facts for the log: iterations, records used, stop reason."""
    d = rec["diagnostics"]
    info = d.get("run_info") or {}
    return {"iterations": d["usage"]["iterations"], "records_used": d["usage"]["records_used"],
            **{k: info[k] for k in ("stop_reason", "passes", "steps", "noise_multiplier") if k in info}}


def nonprivate_accuracy(name, *, mode="test", tiny=None) -> float | None:
    """Test accuracy of the non-private L-BFGS optimum of the same loss and preprocessing (the
    pipeline's reference model, solved to completion): the ceiling a linear model reaches."""
    tr, te, opts = arrays(name, mode, tiny)
    rec = dpreg.run(algo="dp-sgd", data=tr, test_data=te, labels=(-1.0, 1.0), epsilon=1.0, seed=0,
                    warn=lambda m: None, diagnostics_budget=float("inf"), **opts)
    return rec["diagnostics"]["baselines"].get("nonprivate_test_accuracy")


def table(algos, names, epsilons, seeds, *, mode="test", tiny=None, params=None, log=sys.stderr):
    """{(algo, data, eps): {"acc": [...], "secs": [...], "run_s": [...], "eval_s": [...], "majority": m}};
    ``params``: algorithm parameters for every run (None: the defaults)."""
    out = {}
    for name in names:
        ref = nonprivate_accuracy(name, mode=mode, tiny=tiny)
        for eps in epsilons:
            for algo in algos:
                cell = {"acc": [], "secs": [], "eval_s": [], "run_s": []}
                for s in seeds:
                    acc, maj, secs, rec = run_cell(algo, name, eps, s, mode=mode, tiny=tiny, params=params)
                    tm = rec["diagnostics"]["timing"]
                    cell["acc"].append(acc)
                    cell["secs"].append(secs)
                    cell["run_s"].append(tm["run_s"])
                    cell["eval_s"].append(tm.get("eval_s", 0.0))
                    cell.setdefault("info", []).append(_summary(rec))
                    cell["majority"] = maj
                cell["nonprivate"] = ref
                out[(algo, name, eps)] = cell
                print(f"{name} eps={eps:g} {algo}: {np.mean(cell['acc']):.4f} (majority {cell['majority']:.4f}) "
                      f"[{' '.join(f'{a:.3f}' for a in cell['acc'])}] {np.mean(cell['secs']):.1f} s", file=log,
                      flush=True)
    return out


def markdown(res, algos, names, epsilons, seeds) -> str:
    """The page's table: per data set and eps, one row per algorithm."""
    lines = []
    for name in names:
        for eps in epsilons:
            ref = res.get(("dp-sgd", name, eps))
            first = next(c for (a, n, e), c in res.items() if n == name and e == eps)
            maj, npv = first["majority"], first.get("nonprivate")
            ceiling = f"; non-private logistic regression {npv:.4f}" if npv is not None else ""
            lines.append(f"\n### {name}, eps = {eps:g} (majority rate {maj:.4f}{ceiling}; seeds: {len(seeds)})\n")
            lines.append("| algorithm | test accuracy (mean ± sd) | min | vs dp-sgd (points) | vs majority (points) "
                         "| run s | diagnostics s | call s |")
            lines.append("|---|---|---|---|---|---|---|---|")
            for algo in algos:
                c = res.get((algo, name, eps))
                if c is None:
                    continue
                a = np.array(c["acc"])
                vs = "-" if ref is None or algo == "dp-sgd" else f"{100 * (a.mean() - np.mean(ref['acc'])):+.1f}"
                lines.append(f"| {algo} | {a.mean():.4f} ± {a.std():.4f} | {a.min():.4f} | {vs} | "
                             f"{100 * (a.mean() - maj):+.1f} | {np.mean(c['run_s']):.2f} | "
                             f"{np.mean(c['eval_s']):.2f} | {np.mean(c['secs']):.1f} |")
    return "\n".join(lines) + "\n"


def compact(res, algos, names, epsilons) -> str:
    """The whole table on one grid: per algorithm and (data set, eps), the mean test accuracy,
    its gap to dp-sgd and to the majority rate in points."""
    cols = [(n, e) for n in names for e in epsilons if any(k[1] == n and k[2] == e for k in res)]
    lines = ["| algorithm | " + " | ".join(f"{n} ε={e:g}" for n, e in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for algo in algos:
        cells = []
        for n, e in cols:
            c, ref = res.get((algo, n, e)), res.get(("dp-sgd", n, e))
            if c is None:
                cells.append("")
                continue
            a = float(np.mean(c["acc"]))
            vs = "" if ref is None or algo == "dp-sgd" else f"{100 * (a - np.mean(ref['acc'])):+.1f} / "
            cells.append(f"{a:.3f} ({vs}{100 * (a - c['majority']):+.1f})")
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    lines.append("| majority rate | " + " | ".join(
        f"{next(c for k, c in res.items() if k[1] == n and k[2] == e)['majority']:.3f}" for n, e in cols) + " |")
    return "\n".join(lines) + "\n"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--data", default=",".join(DATASETS))
    ap.add_argument("--epsilons", default="1,4")
    ap.add_argument("--validation", action="store_true",
                    help="evaluate on a validation split of each training split (for choosing defaults)")
    ap.add_argument("--tiny", action="store_true", help="smoke run: 200-row subsets, one seed, eps = 1")
    ap.add_argument("--out", help="also write the raw results as JSON")
    ap.add_argument("--from-json", help="render the table of a former --out file instead of running")
    ap.add_argument("--compact", action="store_true", help="with --from-json: the whole table on one grid "
                    "(accuracy, then its gap to dp-sgd / to the majority rate in points)")
    ap.add_argument("--params", default=None, help="algorithm parameters as JSON for every run (default: none; "
                    "the keys 'noise' and 'loss' name the noise plugin and the loss)")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    algos = [x for x in a.algos.split(",") if x]
    names = [x for x in a.data.split(",") if x]
    epsilons = [float(e) for e in a.epsilons.split(",")]
    seeds = list(range(a.seeds))
    tiny = None
    if a.tiny:
        names = [n for n in names if n != "ijcnn1" or (SHARED / "ijcnn1.trn.bz2").exists()][:2]
        epsilons, seeds, tiny = epsilons[:1], [0], 200
    if a.from_json:
        rows = json.loads(Path(a.from_json).read_text())
        res = {(r["algo"], r["data"], r["epsilon"]): r for r in rows}
        algos = [x for x in algos if any(k[0] == x for k in res)]
        names = [x for x in names if any(k[1] == x for k in res)]
        epsilons = [e for e in epsilons if any(k[2] == e for k in res)]
        seeds = list(range(len(next(iter(res.values()))["acc"])))
        print(compact(res, algos, names, epsilons) if a.compact else markdown(res, algos, names, epsilons, seeds))
        return res
    mode = "validation" if a.validation else "test"
    made_at = commit()
    t0 = time.perf_counter()
    res = table(algos, names, epsilons, seeds, mode=mode, tiny=tiny,
                params=json.loads(a.params) if a.params else None)
    print(f"<!-- made at commit {made_at} by: python experiments/targets_models_learn.py "
          f"{' '.join(argv if argv is not None else sys.argv[1:])} ({time.perf_counter() - t0:.0f} s) -->")
    print(markdown(res, algos, names, epsilons, seeds))
    if a.out:
        Path(a.out).write_text(json.dumps([{"algo": k[0], "data": k[1], "epsilon": k[2], "commit": made_at, **v}
                                           for k, v in res.items()], indent=1))
    return res


if __name__ == "__main__":
    main()
