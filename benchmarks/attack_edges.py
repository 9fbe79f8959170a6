"""Three attacks on what dpreg's outer surfaces publish: a sweep's cells, a
pickled estimator, and the distributed algorithm's sharding.

1. *Sweep membership.*  A victim runs ``dpreg sweep`` on D (with a target
   record) or on D' (without it) and publishes the sweep's records and table.
   The attacker knows D and D' and the cell's configuration (the table says
   it); where the published cell names a seed (its file name or the table's
   ``seed`` column) the attacker re-runs the cell with that seed on D and on D'
   and picks the one whose weights are nearer the published ones (an exact
   match is certain).  Where no seed is published the attacker re-runs with
   seed 0, the best guess there is.
2. *Pickled estimator canary.*  A ``DPClassifier`` is fitted on D (a canary
   record whose gradient exceeds the clip, every other record's is below it)
   or on D' (no canary) and pickled.  The attacker unpickles it and looks for
   a clip count anywhere in the object: a positive count means the canary was
   there.  Where there is none, the attacker can only guess (a fair coin).
   Also counted: pickles holding any count, metric or timing.
3. *Label-dependent sharding.*  ``distributed-spider`` shards the records
   over m clients; flipping one record's label must move no other record
   between clients (else a client's records, hence its epsilon, depend on
   every label).  Counted: records moved, over random flips, for every
   sharding rule the installed dpreg offers.

    python benchmarks/attack_edges.py [--trials 20]

Prints each attack's figures (success 0.5 = guessing; a (1, delta)-DP
release bounds any attacker's success at e/(1+e) + delta ~ 0.73).
"""
from __future__ import annotations

import argparse
import io
import json
import pickle
import re
import tempfile
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np


# ------------------------------------------------------------------ 1. sweep
def _write_csv(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    path.write_text("\n".join(",".join(f"{v:.17g}" for v in (yy, *xx)) for xx, yy in zip(X, y)) + "\n")


def sweep_neighbours(tmp: Path, n: int = 300, d: int = 4, seed: int = 0) -> tuple[Path, Path]:
    """D (a target record: a unit feature vector with the 'wrong' label) and
    D' (D without it), as CSV files (label first)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / (2 * np.sqrt(d))
    y = np.where(X[:, 0] > 0, 1.0, 0.0)
    target_x = np.zeros(d)
    target_x[0] = 1.0
    D, D2 = tmp / "with.csv", tmp / "without.csv"
    _write_csv(D, np.vstack([X, target_x]), np.append(y, 0.0))
    _write_csv(D2, X, y)
    return D, D2


def sweep_weights(data: Path, out: Path, *, seeds=None, steps: int = 20) -> tuple[np.ndarray, dict, str]:
    """Run a one-cell sweep (dp-gd, eps = 1) on ``data`` in this process:
    (released weights, table row, record file name)."""
    from dpreg_plugins.commands.sweep import parse_config, run_sweep

    cfg = {"algorithms": ["dp-gd"], "epsilons": [1.0], "data": [str(data)], "diagnostics": "light",
           "params": {"dp-gd": {"steps": steps}}}
    if seeds is not None:
        cfg["seeds"] = list(seeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cells = parse_config(cfg, data.parent)
        rows, _ = run_sweep(cells, str(out), workers=1)
    (row,) = rows
    rec = json.loads(Path(row["record"]).read_text())
    return np.asarray(rec["release"]["model"]["weights"], dtype=float), row, Path(row["record"]).name


def published_seed(row: dict, name: str) -> int | None:
    """The seed a published cell shows: the table's seed column, or its record's file name."""
    if row.get("seed") not in (None, ""):
        return int(row["seed"])
    m = re.search(r"seed(\d+)", name)
    return int(m.group(1)) if m else None


def sweep_attack(trials: int, tmp: Path, rng: np.random.Generator) -> dict:
    """The membership attack on published sweep cells; returns its counts."""
    D, D2 = sweep_neighbours(tmp)
    wins = exact = seeded = 0
    for t in range(trials):
        truth = "D" if rng.random() < 0.5 else "D'"
        w_pub, row, name = sweep_weights(D if truth == "D" else D2, tmp / f"victim{t}")
        s = published_seed(row, name)
        seeded += s is not None
        guess_seed = 0 if s is None else s
        ref = {k: sweep_weights(v, tmp / f"attacker{t}-{k}", seeds=[guess_seed])[0]
               for k, v in (("D", D), ("D'", D2))}
        dist = {k: float(np.linalg.norm(w_pub - w)) for k, w in ref.items()}
        exact += any(v == 0.0 for v in dist.values())
        wins += min(dist, key=dist.get) == truth
    return {"trials": trials, "success": wins, "exact_matches": exact, "cells_showing_a_seed": seeded}


# ---------------------------------------------------------------- 2. estimator
def canary_data(seed: int = 0):
    """breast-cancer standardised and shrunk so every record's gradient is
    below clip = 0.1 (norm <= 0.05), and the same with record 0 replaced by a
    canary (a unit vector, label 0) whose gradient exceeds it."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    X = X / np.linalg.norm(X, axis=1).max() * 0.05
    Xc, yc = X.copy(), y.copy()
    Xc[0] = 0.0
    Xc[0, 0] = 1.0
    yc[0] = 0
    return (Xc, yc), (X, y)


#: names of counts, metrics and timings (a timing's name ends in "_s")
NON_PRIVATE_KEYS = ("clipped", "usage", "timing", "metrics", "run_info", "records_used", "gradient_evaluations",
                    "iterations", "accuracy", "loss_at", "grad_norm", "diagnostics", "n_iter")


def non_private_name(key: str) -> bool:
    return key.endswith("_s") or any(k in key for k in NON_PRIVATE_KEYS)


def leaves(obj, path=""):
    """Every (path, value) of an unpickled object graph (attributes, dicts, lists)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)) and len(obj) < 1000:
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}[{i}]")
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and type(obj).__module__.startswith(("dpreg", "sklearn")):
        yield from leaves(vars(obj), path)
    else:
        yield path, obj


def estimator_attack(trials: int, rng: np.random.Generator) -> dict:
    from dpreg.sklearn import DPClassifier

    with_c, without_c = canary_data()
    wins = found = nonprivate = 0
    keys_seen: set = set()
    for _ in range(trials):
        truth = "D" if rng.random() < 0.5 else "D'"
        X, y = with_c if truth == "D" else without_c
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = DPClassifier(algorithm="dp-spider", params={"clip": 0.1}, fit_intercept=False,
                               classes=(0, 1)).fit(X, y)
        blob = pickle.dumps(est)
        got = pickle.loads(blob)
        found_here = [(p, v) for p, v in leaves(got) if p.endswith("clipped_terms")]
        bad = sorted({p.split(".")[-1] for p, v in leaves(got)
                      if isinstance(v, (int, float)) and not isinstance(v, bool)
                      and non_private_name(p.split(".")[-1])})
        keys_seen.update(bad)
        nonprivate += bool(bad)
        if found_here:
            found += 1
            guess = "D" if found_here[0][1] > 0 else "D'"
        else:
            guess = "D" if rng.random() < 0.5 else "D'"
        wins += guess == truth
    return {"trials": trials, "success": wins, "pickles_with_a_clip_count": found,
            "pickles_with_a_count_metric_or_timing": nonprivate, "keys": sorted(keys_seen)[:12]}


# ----------------------------------------------------------------- 3. sharding
def sharding_attack(trials: int, rng: np.random.Generator, n: int = 2000) -> dict:
    """Records moved by one label flip, through the algorithm itself
    (``DistributedSpider._shards`` on two problems that differ in one label)."""
    from dpreg.accounting import RdpAccountant
    from dpreg.params import bind
    from dpreg.problem import Problem
    from dpreg.registry import get_registry

    reg = get_registry()
    cls = reg.get("algorithm", "distributed-spider")
    spec = next(p for p in cls.params if p.name == "sharding")
    X = rng.normal(size=(n, 3)) / 2
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    tmp = Path(tempfile.mkdtemp(prefix="dpreg-attack-"))

    def shards(yy, m, scheme, t):
        params = {"clients": m, "sharding": scheme, "shard_seed": t}
        if scheme == "dirichlet":
            params["beta"] = 0.5
        if scheme == "given":
            f = tmp / f"assign{m}-{t}.txt"
            f.write_text("\n".join(str(j) for j in np.random.default_rng(t).integers(0, m, n)))
            params["assignment"] = str(f)
        algo = cls(Problem(reg.get("loss", "logistic"), X, yy), bind(cls.params, params, cls.name),
                   noise=reg.get("noise", "gaussian"), accountant=RdpAccountant(1.0, 1e-5, cls.relation), seed=0)
        return algo._shards()

    out = {}
    for scheme in spec.choices:
        for m in (2, 4):
            moved = []
            for t in range(trials):
                i = int(rng.integers(n))
                y2 = y.copy()
                y2[i] = -y2[i]
                a, b = shards(y, m, scheme, t), shards(y2, m, scheme, t)
                owner_a, owner_b = np.empty(n, int), np.empty(n, int)
                for j, (tr, sel) in enumerate(a):
                    owner_a[np.concatenate([tr, sel])] = j
                for j, (tr, sel) in enumerate(b):
                    owner_b[np.concatenate([tr, sel])] = j
                diff = owner_a != owner_b
                diff[i] = False
                moved.append(int(diff.sum()))
            out[f"{scheme}, m={m}"] = {"median": float(np.median(moved)), "max": int(max(moved))}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--only", choices=("sweep", "estimator", "sharding"), default=None)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(2024)  # the experiment's own coins, not a mechanism
    if a.only in (None, "sharding"):
        print("sharding: records moved between clients by one label flip (excluding the flipped record)")
        for k, v in sharding_attack(a.trials, rng).items():
            print(f"  {k}: median {v['median']:g}, max {v['max']}")
    if a.only in (None, "estimator"):
        r = estimator_attack(a.trials, rng)
        print(f"estimator canary: success {r['success']}/{r['trials']}; pickles with a clip count "
              f"{r['pickles_with_a_clip_count']}/{r['trials']}; with any count, metric or timing "
              f"{r['pickles_with_a_count_metric_or_timing']}/{r['trials']} {r['keys']}")
    if a.only in (None, "sweep"):
        with tempfile.TemporaryDirectory(prefix="dpreg-attack-") as tmp:
            with redirect_stdout(io.StringIO()):
                r = sweep_attack(a.trials, Path(tmp), rng)
        print(f"sweep membership: success {r['success']}/{r['trials']}; exact matches {r['exact_matches']}; "
              f"published cells showing a seed {r['cells_showing_a_seed']}/{r['trials']}")


if __name__ == "__main__":
    main()
