"""Utility of K-class and regression models against the peers at equal (eps, delta).

    nice python experiments/utility_peers.py --seeds 5 --out /tmp/utility.json   # docs/multiclass-regression.md
    python experiments/utility_peers.py --tiny                                  # the smoke run

Data (all public or synthetic; a fixed public split, 25 % held out, split seed 0):

* ``digits`` (scikit-learn, 1,797 records, 64 pixels 0..16, 10 classes) and ``wine``
  (178 records, 13 features, 3 classes): test accuracy;
* ``diabetes`` (scikit-learn, 442 records, 10 features, target 25..346) and
  ``synthetic`` (100,000 records, 20 Gaussian features, a planted linear rule plus noise,
  target clipped to [-3, 3]): test R^2.

Methods, each at (eps, delta = 1e-5), eps in {1, 4}, seeds 0..S-1:

* ``dpreg``: ``DPClassifier(epsilon=eps, delta=1e-5)`` / ``DPRegressor(epsilon=eps,
  delta=1e-5)`` on the raw features, every other argument at its default (the defaults
  spend part of eps on private feature scales and, for regression, on the target's range);
* ``diffprivlib``: ``LogisticRegression(epsilon=eps, data_norm=1)`` /
  ``LinearRegression(epsilon=eps, bounds_X=(-1, 1), bounds_y=public range)`` on rows
  scaled into the unit ball (x / max(1, |x|), a per-record map); pure eps-DP (delta = 0);
* ``opacus``: DP-SGD (``make_private_with_epsilon``, its PRV accountant) on a linear model
  (softmax head, or squared error on the target mapped into [-1, 1] by the public range),
  the same unit-ball rows, batch 64 (256 on the synthetic set), clip 1, 20 epochs (1 on the
  synthetic set); its step size tuned once per data set and eps on a validation split of
  the training split (seed 0, never the test split) over {0.05, 0.2, 1, 4}.

The public target ranges given to the peers: diabetes [0, 400] (the measure's documented
range is 25-346), synthetic [-3, 3] (by construction).  dpreg's default estimates the
range privately (``target_bounds="auto"``, 10 % of eps) instead.
"""
from __future__ import annotations

import argparse
import json
import math
import time
import warnings

import numpy as np

EPSILONS = (1.0, 4.0)
DELTA = 1e-5
LR_GRID = (0.05, 0.2, 1.0, 4.0)
TARGET_RANGE = {"diabetes": (0.0, 400.0), "synthetic": (-3.0, 3.0)}


def load(name, tiny=False):
    """(X, y, task) of a data set; ``task`` "classification" or "regression"."""
    from sklearn import datasets

    if name == "digits":
        X, y = datasets.load_digits(return_X_y=True)
        return X, y, "classification"
    if name == "wine":
        X, y = datasets.load_wine(return_X_y=True)
        return X, y, "classification"
    if name == "diabetes":
        X, y = datasets.load_diabetes(return_X_y=True, scaled=False)
        return X, y, "regression"
    if name == "synthetic":
        rng = np.random.default_rng(2024)
        n, d = (4000 if tiny else 100_000), 20
        X = rng.standard_normal((n, d))
        w = rng.standard_normal(d) / math.sqrt(d)
        y = np.clip(2.0 * X @ w + 0.3 * rng.standard_normal(n), -3.0, 3.0)
        return X, y, "regression"
    raise ValueError(name)


def split(X, y, seed=0, fraction=0.25):
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5B1D]))
    perm = rng.permutation(len(y))
    k = int(round(len(y) * fraction))
    te, tr = np.sort(perm[:k]), np.sort(perm[k:])
    return X[tr], y[tr], X[te], y[te]


def unit_rows(X):
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))


def score(task, y, pred):
    if task == "classification":
        return float(np.mean(pred == y))
    from sklearn.metrics import r2_score

    return float(r2_score(y, pred))


# ------------------------------------------------------------------ the methods
def fit_dpreg(name, task, Xtr, ytr, Xte, eps, seed):
    from dpreg.sklearn import DPClassifier, DPRegressor

    est = (DPClassifier(epsilon=eps, delta=DELTA, random_state=seed) if task == "classification"
           else DPRegressor(epsilon=eps, delta=DELTA, random_state=seed))
    return est.fit(Xtr, ytr).predict(Xte)


def fit_diffprivlib(name, task, Xtr, ytr, Xte, eps, seed):
    from diffprivlib.models import LinearRegression, LogisticRegression

    A, B = unit_rows(Xtr), unit_rows(Xte)
    if task == "classification":
        m = LogisticRegression(epsilon=eps, data_norm=1.0, random_state=seed)
    else:
        lo, hi = TARGET_RANGE[name]
        m = LinearRegression(epsilon=eps, bounds_X=(-1.0, 1.0), bounds_y=(lo, hi), random_state=seed)
    return m.fit(A, ytr).predict(B)


def _opacus_train(task, A, ytr, classes, eps, seed, lr, epochs, batch, lo_hi):
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(seed)
    X = torch.tensor(A, dtype=torch.float32)
    if task == "classification":
        y = torch.tensor(np.searchsorted(classes, ytr), dtype=torch.long)
        model = torch.nn.Linear(A.shape[1], len(classes))
        lossf = torch.nn.CrossEntropyLoss()
    else:
        lo, hi = lo_hi
        y = torch.tensor(np.clip((2.0 * ytr - lo - hi) / (hi - lo), -1, 1), dtype=torch.float32)[:, None]
        model = torch.nn.Linear(A.shape[1], 1)
        lossf = torch.nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(TensorDataset(X, y), batch_size=batch)
    model, opt, loader = PrivacyEngine().make_private_with_epsilon(
        module=model, optimizer=opt, data_loader=loader, target_epsilon=eps, target_delta=DELTA,
        epochs=epochs, max_grad_norm=1.0)
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            if len(xb):
                lossf(model(xb), yb).backward()
            opt.step()
    return model


def _opacus_predict(task, model, B, classes, lo_hi):
    import torch

    with torch.no_grad():
        out = model(torch.tensor(B, dtype=torch.float32)).numpy()
    if task == "classification":
        return classes[out.argmax(1)]
    lo, hi = lo_hi
    return (out[:, 0] * (hi - lo) + lo + hi) / 2.0


def opacus_settings(name, n):
    return (1, 256) if n > 20_000 else (20, 64)


def tune_opacus(name, task, Xtr, ytr, eps):
    """The step size of LR_GRID with the best validation score: a validation split
    (25 %, seed 1) of the training split, one training seed (0)."""
    A, yA, V, yV = split(Xtr, ytr, seed=1)
    classes = np.unique(ytr)
    epochs, batch = opacus_settings(name, len(yA))
    best = None
    for lr in LR_GRID:
        m = _opacus_train(task, unit_rows(A), yA, classes, eps, 0, lr, epochs, batch, TARGET_RANGE.get(name))
        s = score(task, yV, _opacus_predict(task, m, unit_rows(V), classes, TARGET_RANGE.get(name)))
        if not np.isfinite(s):
            s = -np.inf
        if best is None or s > best[1]:
            best = (lr, s)
    return best[0]


def fit_opacus(name, task, Xtr, ytr, Xte, eps, seed, lr):
    classes = np.unique(ytr)
    epochs, batch = opacus_settings(name, len(ytr))
    m = _opacus_train(task, unit_rows(Xtr), ytr, classes, eps, seed, lr, epochs, batch, TARGET_RANGE.get(name))
    return _opacus_predict(task, m, unit_rows(Xte), classes, TARGET_RANGE.get(name))


def installed(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--data", default="digits,wine,diabetes,synthetic")
    ap.add_argument("--tiny", action="store_true", help="smoke run: 1 seed, eps 4, a 4,000-record synthetic set")
    ap.add_argument("--out", help="write the raw scores (JSON) here")
    ap.add_argument("--methods", default="dpreg,diffprivlib,opacus", help="a subset of dpreg,diffprivlib,opacus")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    methods = [m for m in a.methods.split(",") if m == "dpreg" or installed(m)]
    epsilons = (4.0,) if a.tiny else EPSILONS
    seeds = range(1 if a.tiny else a.seeds)
    raw = {}
    for name in a.data.split(","):
        X, y, task = load(name, a.tiny)
        Xtr, ytr, Xte, yte = split(X, y)
        for eps in epsilons:
            lr = tune_opacus(name, task, Xtr, ytr, eps) if "opacus" in methods else None
            for m in methods:
                scores, t0 = [], time.perf_counter()
                for seed in seeds:
                    if m == "dpreg":
                        pred = fit_dpreg(name, task, Xtr, ytr, Xte, eps, seed)
                    elif m == "diffprivlib":
                        pred = fit_diffprivlib(name, task, Xtr, ytr, Xte, eps, seed)
                    else:
                        pred = fit_opacus(name, task, Xtr, ytr, Xte, eps, seed, lr)
                    scores.append(score(task, yte, pred))
                raw[f"{name}|{eps:g}|{m}"] = {"scores": scores, "lr": lr if m == "opacus" else None,
                                              "seconds": time.perf_counter() - t0}
                print(f"# {name} eps={eps:g} {m}: {np.mean(scores):.3f} +- {np.std(scores):.3f}"
                      + (f" (lr {lr:g})" if m == "opacus" else ""), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(raw, f, indent=1)
    print()
    print("| data | metric | eps | " + " | ".join(methods) + " |")
    print("|---|---|---|" + "---|" * len(methods))
    for name in a.data.split(","):
        metric = "test accuracy" if name in ("digits", "wine") else "test R^2"
        for eps in epsilons:
            cells = []
            for m in methods:
                s = raw[f"{name}|{eps:g}|{m}"]["scores"]
                cells.append(f"{np.mean(s):.3f} ± {np.std(s):.3f}")
            print(f"| {name} | {metric} | {eps:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
