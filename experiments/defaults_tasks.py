"""Utility of the defaults beyond binary labels: test accuracy (digits, wine)
and test R^2 (diabetes) at epsilon 1 and 4, seeds 0..S-1, on a train/test
split with the fixed public split seed 0 (a quarter held out), beside the
majority rate / the R^2 of predicting the training mean and the non-private
optimum of the same loss.

Rows: ``dpreg run --algo dp-sgd`` with every other option at its default (the
registered data sets declare their classes and feature bounds; diabetes' target
range is estimated privately), ``dpreg run`` with the default algorithm
(adaptive-spider), and the scikit-learn estimators' defaults
(``DPClassifier()`` / ``DPRegressor()``) on the raw arrays of the same split,
alone and after scikit-learn's ``StandardScaler`` in a ``Pipeline`` (the
scaler reads its means and deviations off the data: not private).

    python experiments/defaults_tasks.py [--seeds 5] [--out table.md]
    python experiments/defaults_tasks.py --tiny      # smoke run: wine, one seed, eps = 1
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np

DATA = ("digits", "wine", "diabetes")
EPS = (1.0, 4.0)


def _split(name):
    """The registered set's raw (X, y) and the pipeline's split (test fraction
    0.25, split seed 0: the same rows as ``--test-fraction 0.25``)."""
    from dpreg.data import split
    from dpreg.registry import get_registry

    src = get_registry().get("dataset", name)()
    X, y = src.load(0)
    return split(X, y, 0.25, 0)


def run_cli(name, eps, seed, algo):
    import dpreg

    rec = dpreg.run(algo=algo, data=name, epsilon=eps, seed=seed, test_fraction=0.25, split_seed=0)
    m, b = rec["diagnostics"]["metrics"], rec["diagnostics"]["baselines"]
    if name == "diabetes":
        return m["test_r2"], b.get("test_r2_of_train_mean"), b.get("nonprivate_test_r2")
    return m["test_accuracy"], b.get("test_majority_rate"), b.get("nonprivate_test_accuracy")


def run_estimator(name, eps, seed, scaler=False):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from dpreg.sklearn import DPClassifier, DPRegressor

    Xtr, ytr, Xte, yte = _split(name)
    est = (DPRegressor if name == "diabetes" else DPClassifier)(epsilon=eps, random_state=seed)
    if scaler:  # what a scikit-learn user writes (the scaler itself reads the data: not private)
        est = make_pipeline(StandardScaler(), est)
    return est.fit(Xtr, ytr).score(Xte, yte), None, None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tiny", action="store_true", help="smoke run: wine only, one seed, eps = 1")
    a = ap.parse_args(argv)
    data, eps = (("wine",), EPS[:1]) if a.tiny else (DATA, EPS)
    if a.tiny:
        a.seeds = 1
    warnings.filterwarnings("ignore")
    lines = ["| data | metric | how | " + " | ".join(f"eps = {e:g}" for e in eps) + " | reference (majority / "
             "mean) | non-private |", "|---|---|---|" + "---|" * len(eps) + "---|---|"]
    for name in data:
        metric = "test R^2" if name == "diabetes" else "test accuracy"
        est = "DPRegressor()" if name == "diabetes" else "DPClassifier()"
        for how, f in (("dpreg run --algo dp-sgd", lambda e, s: run_cli(name, e, s, "dp-sgd")),
                       ("dpreg run (adaptive-spider)", lambda e, s: run_cli(name, e, s, "adaptive-spider")),
                       (f"{est}, raw arrays", lambda e, s: run_estimator(name, e, s)),
                       (f"StandardScaler + {est}", lambda e, s: run_estimator(name, e, s, scaler=True))):
            cells, ref, nonpriv = [], None, None
            for e in eps:
                vals = []
                for s in range(a.seeds):
                    v, r, npv = f(e, s)
                    vals.append(v)
                    ref = r if r is not None else ref
                    nonpriv = npv if npv is not None else nonpriv
                cells.append(f"{np.mean(vals):.3f} ± {np.std(vals):.3f}")
            refs = ["-" if v is None else f"{v:.3f}" for v in (ref, nonpriv)]
            lines.append(f"| {name} | {metric} | {how} | " + " | ".join(cells + refs) + " |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)
    return text


if __name__ == "__main__":
    main()
