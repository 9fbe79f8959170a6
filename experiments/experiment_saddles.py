"""Do the SOSP finders leave a strict saddle that the first-order methods keep?

Problem: the ``matrix-factorisation`` loss (rank-one factorisation of the
records' second moment), f(w; x) = -1/2 <x, w>^2 + 1/4 |w|^4, on the real
feature rows of a data file (rows in the unit ball as dpreg loads them, no
intercept; labels are ignored).  With S = (1/n) sum x x^T and its eigenvalues
lam_1 >= lam_2 >= ..., the empirical loss has its minima at +-sqrt(lam_1) v_1
(F* = -lam_1^2/4, lambda_min = lam_1 - lam_2 there) and a strict saddle at
w = 0 (lambda_min = -lam_1), where every per-record gradient is exactly 0.
Every run starts at w = 0 (the algorithms' default start).

Methods, each at the same budget (eps, delta = 1/n), every parameter at its
default: first-order dp-gd, dp-sgd, dp-spider; SOSP finders perturbed-sgd,
adaptive-spider, distributed-spider, dp-trust-region,
dp-stochastic-trust-region.  Reported per method over the seeds (non-private
diagnostics after the run): F(w)/F*, exact lambda_min(w), |grad F(w)|, the
fraction of runs that end at a saddle (lambda_min(w) <= -lam_1/2: half the
saddle's negative curvature is still there; the minima have lambda_min > 0),
and each SOSP run's ``sosp_decisions`` (escape tests by outcome, O1 refreshes
by cause, perturbations, multiplier tests) with the public noise norm and bar
they were decided against.  The loss has no labels: there is no accuracy.

    NUMBA_NUM_THREADS=1 nice python experiments/experiment_saddles.py \
        --data ../shared/data/ijcnn1.trn.bz2 --eps 1 --seeds 10 --out /tmp/saddles_ijcnn1.json

prints the Markdown tables of docs/experiment-saddles.md (``--tables FILE``
prints them again from a record).
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

FIRST_ORDER = ("dp-gd", "dp-sgd", "dp-spider")
SOSP = ("perturbed-sgd", "adaptive-spider", "distributed-spider", "dp-trust-region", "dp-stochastic-trust-region")


def rows(path: str) -> np.ndarray:
    """The feature rows of ``path`` as dpreg loads them (unit ball, no intercept)."""
    from dpreg.pipeline import load_prepared

    X, _, _, _ = load_prepared(path, seed=0, labels="binary")
    return np.ascontiguousarray(np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=float))


def problem(X: np.ndarray):
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry

    return make_problem(get_registry().get("loss", "matrix-factorisation"), X, np.zeros(X.shape[0]), "mf")


def landscape(X: np.ndarray) -> dict:
    lam = np.linalg.eigvalsh(X.T @ X / X.shape[0])[::-1]
    return {"n": int(X.shape[0]), "d": int(X.shape[1]), "lam1": float(lam[0]), "lam2": float(lam[1]),
            "F_star": -float(lam[0]) ** 2 / 4, "lambda_min_0": -float(lam[0]),
            "lambda_min_star": float(lam[0] - lam[1])}


def method(label: str):
    """``ALGO`` or ``ALGO:key=value:key=value`` -> (algorithm, parameters)."""
    algo, *kv = label.split(":")
    def value(v: str):
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return v

    return algo, {k: value(v) for k, v in (x.split("=", 1) for x in kv)}


def run(pb, label: str, eps: float, seed: int):
    from dpreg.params import bind
    from dpreg.registry import get_registry

    reg = get_registry()
    algo, given = method(label)
    cls = reg.get("algorithm", algo)
    p = bind(cls.params, given, algo)
    acc = reg.get("accountant", "rdp")(eps, 1.0 / pb.n, cls.relation_for(p))
    noise = (cls.default_noise or "tree") if cls.uses_noise else None
    with np.errstate(all="ignore"):
        out = cls(pb, p, noise=reg.get("noise", noise) if noise else None, accountant=acc, seed=seed).run()
    return np.asarray(out.w, dtype=float), out, acc.epsilon_spent


def measure(pb, w, land) -> dict:
    from dpreg.metrics import lambda_min

    lam = float(lambda_min(pb, w))
    return {"loss_ratio": float(pb.value(w)) / land["F_star"], "lambda_min": lam,
            "grad_norm": float(np.linalg.norm(pb.gradient(w))), "norm": float(np.linalg.norm(w)),
            "at_saddle": bool(lam <= -land["lam1"] / 2)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/ijcnn1.trn.bz2")
    ap.add_argument("--eps", default="1")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--methods", default=",".join(FIRST_ORDER + SOSP))
    ap.add_argument("--out", default=None)
    ap.add_argument("--tables", default=None)
    a = ap.parse_args(argv)
    if a.tables:
        with open(a.tables) as fh:
            print(tables(json.load(fh)))
        return
    X = rows(a.data)
    pb = problem(X)
    land = landscape(X)
    rec = {"data": a.data, "landscape": land, "runs": []}
    for eps in [float(e) for e in a.eps.split(",")]:
        for algo in a.methods.split(","):
            for seed in range(a.seeds):
                t0 = time.perf_counter()
                w, out, spent = run(pb, algo, eps, seed)
                r = {"algo": algo, "eps": eps, "seed": seed, "eps_spent": spent, **measure(pb, w, land),
                     "seconds": time.perf_counter() - t0, "iterations": out.iterations}
                dec = out.info.get("sosp_decisions")
                if dec is not None:
                    r["sosp_decisions"] = json.loads(json.dumps(dec, default=float))
                rec["runs"].append(r)
                print(f"{algo} eps={eps} seed={seed}: F/F*={r['loss_ratio']:.3f} lmin={r['lambda_min']:.4f} "
                      f"{r['seconds']:.1f}s", flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(rec, fh, indent=1)
    print(tables(rec))


def _rng(xs, fmt):
    return f"{min(xs):{fmt}} to {max(xs):{fmt}}" if len(xs) > 1 else f"{xs[0]:{fmt}}"


def _order(label: str):
    algo = method(label)[0]
    return ((FIRST_ORDER + SOSP).index(algo) if algo in FIRST_ORDER + SOSP else 99, label)


def tables(rec) -> str:
    land = rec["landscape"]
    out = [f"{rec['data']}: n = {land['n']}, d = {land['d']}, lam_1 = {land['lam1']:.4f}, lam_2 = {land['lam2']:.4f}; "
           f"F* = {land['F_star']:.5f}; lambda_min(0) = {land['lambda_min_0']:.4f}, at the minima "
           f"{land['lambda_min_star']:.4f}", "",
           "| eps | method | runs | at a saddle | F/F* | lambda_min | grad norm |", "|---|---|---|---|---|---|---|"]
    keys = sorted({(r["eps"], r["algo"]) for r in rec["runs"]}, key=lambda k: (k[0], _order(k[1])))
    for eps, algo in keys:
        rs = [r for r in rec["runs"] if r["eps"] == eps and r["algo"] == algo]
        out.append(f"| {eps:g} | {algo} | {len(rs)} | {sum(r['at_saddle'] for r in rs)}/{len(rs)} | "
                   f"{_rng([r['loss_ratio'] for r in rs], '.3f')} | {_rng([r['lambda_min'] for r in rs], '.4f')} | "
                   f"{_rng([r['grad_norm'] for r in rs], '.2g')} |")
    out += ["", "| eps | method | escape tests: escaped / certified / by noise / interrupted | O1 refreshes: "
            "drift / cap / pass start / O2 costlier | perturbations (smaller than the noise) | multiplier tests "
            "(certified) | noise norm vs bar |", "|---|---|---|---|---|---|---|"]
    for eps, algo in keys:
        rs = [r for r in rec["runs"] if r["eps"] == eps and r["algo"] == algo and "sosp_decisions" in r]
        if not rs:
            continue

        def tot(path, key):
            vals = [r["sosp_decisions"].get(path, {}).get(key) for r in rs]
            vals = [v for v in vals if v is not None]
            return sum(vals) if vals else None

        def cell(path, ks):
            got = [tot(path, k) for k in ks]
            return "-" if all(g is None for g in got) else " / ".join(str(g or 0) for g in got)

        dec0 = rs[0]["sosp_decisions"]
        bar = next((dec0[k] for k in ("escape_bar", "perturbation_threshold", "threshold") if k in dec0), None)
        nn = next((dec0[k] for k in ("noise_norm", "hessian_noise_norm") if k in dec0), None)
        cmp_ = "-" if nn is None or bar is None else f"{nn:.3g} vs {bar:.3g}"
        per = "-" if tot("perturbations", "total") is None else \
            f"{tot('perturbations', 'total')} ({tot('perturbations', 'decided_by_noise')})"
        mt = "-" if tot("multiplier_tests", "total") is None else \
            f"{tot('multiplier_tests', 'total')} ({tot('multiplier_tests', 'certified')})"
        out.append(f"| {eps:g} | {algo} | {cell('escape_tests', ('escaped', 'certified', 'decided_by_noise', 'interrupted'))} | "
                   f"{cell('o1_refreshes', ('drift', 'cap', 'pass_start', 'o2_costlier'))} | {per} | {mt} | {cmp_} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
