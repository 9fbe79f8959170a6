"""Saddle experiment for networks: five DP
algorithms started exactly at the symmetric saddle of a one-hidden-layer network.

Data (``--data``): ``adult`` (a9a from ../shared/data, 32,561 / 16,281 rows, 123
features), ``ijcnn1`` (../shared/data), or scikit-learn's bundled ``digits``
(1,797 x 64, label +1 for even digits, split 1,437 / 360 by a fixed public
seed); rows scaled to norm 1.  Loss ``mlp:hidden=H,init=zero`` plus
``--loss-options`` (e.g. ``M=0.5``, a declared smoothness): every algorithm
starts at w = 0, where all hidden units are identical, the gradient is zero
except in the output bias c, and (after c fits the class balance) the Hessian
has a negative eigenvalue -|E[phi'(c, y) (x, 1)]| from the coupling of each
unit's input weights with its output weight: a strict saddle.

For each budget in ``--eps``, algorithm (its default parameters and default
noise, plus ``--param ALGO:KEY=VALUE``) and seed, the checkpoints of the run's
trajectory are evaluated after the run (non-private diagnostics): training
loss, test accuracy, the distance |(W, b, v)| from the saddle manifold, and at
the first, the last and ``--lanczos`` evenly spaced checkpoints lambda_min of
the empirical Hessian (Lanczos, scipy eigsh, on the exact HVP kernel).  A run
"has left" the saddle at the first checkpoint whose training loss is below the
saddle's loss minus 0.01.  perturbed-sgd's escape tests (count, outcomes, log)
and adaptive-spider's perturbations are kept from the run info.

    NUMBA_NUM_THREADS=1 nice python experiments/experiment_saddles_mlp.py --data adult --eps 1,2 --seeds 3 \
        [--hidden 8] [--lanczos 4] [--loss-options M=0.5] [--param perturbed-sgd:o1_budget=2] [--out FILE]
    python experiments/experiment_saddles_mlp.py --tables FILE   # reprint the tables of a record

writes a JSON record (default experiments/results/saddles_mlp_DATA.json) and
prints the Markdown tables of docs/experiment-saddles-mlp.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

from dpreg.results import jsonable

ALGOS = (
    ("dp-gd", []),
    ("dp-sgd", []),
    ("dp-spider", []),
    ("adaptive-spider", []),
    ("perturbed-sgd", []),
)


def digits_even_odd(seed: int = 0):
    from sklearn.datasets import load_digits

    X, t = load_digits(return_X_y=True)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(t % 2 == 0, 1.0, -1.0)
    perm = np.random.default_rng(seed).permutation(len(y))  # public split seed
    te, tr = perm[:360], perm[360:]
    return X[tr], y[tr], X[te], y[te]


def ijcnn1(seed: int = 0):
    """IJCNN1 from ../shared/data (training and test files), rows scaled to |x| <= 1."""
    from dpreg.pipeline import load_prepared

    here = os.path.dirname(os.path.abspath(__file__))
    base = os.path.join(here, "..", "..", "shared", "data")
    X, y, _, _ = load_prepared(os.path.join(base, "ijcnn1.trn.bz2"), seed=seed, labels="binary")
    Xt, yt, _, _ = load_prepared(os.path.join(base, "ijcnn1.tst.bz2"), seed=seed, labels="binary", d=X.shape[1],
                             test=True)
    return X, y, Xt, yt


def adult(seed: int = 0):
    """a9a (adult) from ../shared/data: 32,561 training and 16,281 test rows, 123
    binary features (declared schema), rows scaled to |x| <= 1."""
    from dpreg.pipeline import load_prepared

    here = os.path.dirname(os.path.abspath(__file__))
    base = os.path.join(here, "..", "..", "shared", "data")
    X, y, _, _ = load_prepared(os.path.join(base, "adult.trn.bz2"), seed=seed, labels="binary", d=123)
    Xt, yt, _, _ = load_prepared(os.path.join(base, "adult.tst.bz2"), seed=seed, labels="binary", d=123, test=True)
    return X, y, Xt, yt


DATA = {"digits": digits_even_odd, "ijcnn1": ijcnn1, "adult": adult}


def lambda_min(pb, w) -> float:
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((pb.d, pb.d), matvec=lambda v: pb.hvp(w, np.ravel(v)), dtype=float)
    return float(eigsh(op, k=1, which="SA", tol=1e-6, maxiter=50 * pb.d,
                       v0=np.ones(pb.d) / math.sqrt(pb.d), return_eigenvectors=False)[0])


def saddle_point(pb):
    """The saddle the runs start next to: W = b = v = 0 and the loss-minimising c."""
    w = np.zeros(pb.d)
    for _ in range(50):  # Newton on c alone (the loss is convex in c)
        g = pb.gradient(w)[-1]
        e = np.zeros(pb.d)
        e[-1] = 1.0
        w[-1] -= g / pb.hvp(w, e)[-1]
    return w


def run_one(reg, pb, tp, algo, params, eps, delta, seed, n_lanczos=6):
    """One run from w = 0; every checkpoint's training loss and test accuracy,
    lambda_min (Lanczos) at the first, the last and n_lanczos evenly spaced ones
    (each costs ~100 Hessian-vector passes over the data)."""
    from dpreg.metrics import accuracy
    from dpreg.params import bind, parse_pairs

    cls = reg.get("algorithm", algo)
    p = bind(cls.params, parse_pairs(params), algo)
    acc = reg.get("accountant", "rdp")(eps, delta, cls.relation_for(p))
    noise_name = (cls.default_noise or "tree") if cls.uses_noise else None
    noise = reg.get("noise", noise_name) if noise_name else None
    t0 = time.perf_counter()
    with np.errstate(all="ignore"):
        out = cls(pb, p, noise=noise, accountant=acc, seed=seed).run()
    t_run = time.perf_counter() - t0
    traj = out.info.get("trajectory")
    steps = list(traj.steps) if traj is not None else []
    its = [np.asarray(v, dtype=float) for v in (traj.iterates if traj is not None else [])]
    if not its or not np.array_equal(its[-1], out.w):
        steps.append(out.iterations)
        its.append(np.asarray(out.w, dtype=float))
    if len(its) > 60:  # keep <= 60 checkpoints (first and last included)
        keep = sorted(set(np.linspace(0, len(its) - 1, 60).round().astype(int)))
        steps, its = [steps[i] for i in keep], [its[i] for i in keep]
    lz = set(np.linspace(0, len(its) - 1, n_lanczos + 2).round().astype(int))
    rows = []
    for i, (st, w) in enumerate(zip(steps, its)):
        rows.append({"step": int(st), "loss": pb.value(w), "lambda_min": lambda_min(pb, w) if i in lz else None,
                     "grad_norm": float(np.linalg.norm(pb.gradient(w))),
                     "dist": float(np.linalg.norm(w[:-1])), "test_accuracy": accuracy(tp, w)})
    keys = ("certified", "escapes", "escape_tests", "escape_attempts", "escape_test_outcomes", "escape_log",
            "perturbations", "perturbation_steps", "stop_reason", "alpha", "chi", "escape_radius", "escape_steps",
            "repeats", "batch1", "batch2", "batch_o1", "o1_refreshes", "o1_queries", "o2_queries", "step", "eta",
            "rho", "noise")
    info = {k: out.info[k] for k in keys if k in out.info}
    if noise_name:
        info["noise"] = noise_name
    return {"algo": algo, "params": list(params), "eps": eps, "seed": seed, "iterations": out.iterations,
            "records_used": out.records_used, "epsilon_spent": acc.epsilon_spent, "run_s": t_run,
            "checkpoints": rows, "info": jsonable(info)}



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", default="2", help="comma-separated budgets, e.g. 1,2")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=8)
    ap.add_argument("--data", choices=tuple(DATA), default="digits")
    ap.add_argument("--algos", default=",".join(a for a, _ in ALGOS))
    ap.add_argument("--param", action="append", default=[], metavar="ALGO:KEY=VALUE",
                    help="extra algorithm parameter, e.g. perturbed-sgd:o1_budget=2 (repeatable)")
    ap.add_argument("--loss-options", default="", metavar="KEY=VALUE,...",
                    help="extra mlp options after hidden=H,init=zero, e.g. M=0.5 (a declared smoothness)")
    ap.add_argument("--lanczos", type=int, default=6, help="interior checkpoints with lambda_min per run")
    ap.add_argument("--out", default=None, help="JSON record (default experiments/results/saddles_mlp_DATA.json)")
    ap.add_argument("--tables", default=None, help="only print the tables of this JSON record")
    a = ap.parse_args(argv)
    if a.tables:
        with open(a.tables) as f:
            rec = json.load(f)
        print(tables(rec))
        return
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry

    reg = get_registry()
    X, y, Xt, yt = DATA[a.data]()
    opts = dict(kv.split("=", 1) for kv in a.loss_options.split(",") if kv)
    loss = reg.get("loss", "mlp")(hidden=a.hidden, init="zero", **opts)
    pb, tp = make_problem(loss, X, y, a.data), make_problem(loss, Xt, yt, a.data + " test")
    delta = 1.0 / pb.n
    ws = saddle_point(pb)
    sad = {"loss": pb.value(ws), "lambda_min": lambda_min(pb, ws), "test_accuracy": float(np.mean(
        np.sign(tp.decision_function(ws)) == tp.y)),
           "grad_norm": float(np.linalg.norm(pb.gradient(ws))), "lambda_min_at_0": lambda_min(pb, np.zeros(pb.d)),
           "loss_at_0": pb.value(np.zeros(pb.d))}
    print(f"{a.data} n={pb.n} p={pb.p} h={a.hidden} d={pb.d}  eps={a.eps} delta={delta:.2e}  "
          f"constants (G, M, rho) = {tuple(round(c, 3) for c in pb.constants())}")
    print(f"saddle (W=b=v=0, best c): loss {sad['loss']:.4f}  lambda_min {sad['lambda_min']:.4g}  "
          f"|grad| {sad['grad_norm']:.2e}; at w=0: loss {sad['loss_at_0']:.4f} lambda_min {sad['lambda_min_at_0']:.4g}")
    extra = {}
    for spec in a.param:
        algo, _, kv = spec.partition(":")
        extra.setdefault(algo, []).append(kv)
    runs = []
    for eps in [float(e) for e in a.eps.split(",")]:
        for algo, params in ALGOS:
            if algo not in a.algos.split(","):
                continue
            for seed in range(a.seeds):
                r = run_one(reg, pb, tp, algo, list(params) + extra.get(algo, []), eps, delta, seed, a.lanczos)
                runs.append(r)
                last = r["checkpoints"][-1]
                print(f"eps {eps:g} {algo:16s} seed {seed}: {r['iterations']:5d} it  loss {last['loss']:.4f}  "
                      f"lambda_min {last['lambda_min']:+.4f}  dist {last['dist']:.3f}  "
                      f"test acc {last['test_accuracy']:.3f}  left at {left_at(r, sad)}  "
                      f"{ {k: v for k, v in r['info'].items() if k not in ('escape_log', 'perturbation_steps')} }",
                      flush=True)
    rec = {"data": a.data, "eps": a.eps, "loss_options": a.loss_options, "delta": delta, "hidden": a.hidden, "n": pb.n, "d": pb.d,
           "constants": list(pb.constants()), "params": a.param, "saddle": sad, "runs": runs}
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"saddles_mlp_{a.data}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(rec, f, indent=1)
    print(tables(rec))


def left_at(r, sad):
    """First checkpoint step whose training loss is 0.01 below the saddle's (None: never)."""
    for c in r["checkpoints"]:
        if c["loss"] < sad["loss"] - 0.01:
            return c["step"]
    return None


def _cert(r) -> str:
    i = r["info"]
    if "escape_tests" in i:
        o = i.get("escape_test_outcomes", {})
        return (f"{i['escape_tests']} escape tests ({o.get('escaped', 0)} escaped, {o.get('not_escaped', 0)} "
                f"not, {o.get('interrupted', 0)} interrupted); {'certified' if i.get('certified') else 'uncertified'}"
                f"; {i.get('stop_reason', '')}")
    if "perturbations" in i:
        return f"{i['perturbations']} perturbation(s); returns the set (no certificate); {i.get('stop_reason', '')}"
    return "first-order: no certificate"


def tables(rec) -> str:
    """The Markdown tables of the page from a JSON record."""
    sad, runs = rec["saddle"], rec["runs"]
    lines = [f"{rec['data']}: n = {rec['n']}, h = {rec['hidden']}, d = {rec['d']}, delta = {rec['delta']:.2e}, "
             f"loss options {rec.get('loss_options') or 'none'}, declared (G, M, rho) = "
             f"({', '.join(f'{c:.3g}' for c in rec['constants'])}), extra parameters "
             f"{rec.get('params') or 'none'}.",
             f"Saddle (W = b = v = 0, best c): loss {sad['loss']:.4f}, lambda_min {sad['lambda_min']:+.4f}, "
             f"|grad| {sad['grad_norm']:.1e}, test accuracy {sad.get('test_accuracy', float('nan')):.3f}; "
             f"at w = 0: loss {sad.get('loss_at_0', float('nan')):.4f}, lambda_min {sad['lambda_min_at_0']:+.4f}.", "",
             "| eps | algorithm | seed | steps | records used / n | lambda_min start -> end (min along run) | "
             "left saddle at step | final loss | final dist | test acc | certificate / escape tests |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        cps = r["checkpoints"]
        lm = [c["lambda_min"] for c in cps if c["lambda_min"] is not None]
        la = left_at(r, sad)
        c = cps[-1]
        lines.append(f"| {r['eps']:g} | {r['algo']} | {r['seed']} | {r['iterations']} | "
                     f"{r['records_used'] / rec['n']:.3g} | {lm[0]:+.4f} -> "
                     f"{lm[-1]:+.4f} ({min(lm):+.4f}) | {'never' if la is None else la} | {c['loss']:.4f} | "
                     f"{c['dist']:.2f} | {c['test_accuracy']:.3f} | {_cert(r)} |")
    lines += ["", "Summary (mean over seeds):", "",
              "| eps | algorithm | left the saddle (runs) | final loss | final lambda_min | test acc |",
              "|---|---|---|---|---|---|"]
    groups = {}
    for r in runs:
        groups.setdefault((r["eps"], r["algo"]), []).append(r)
    for (eps, algo), rs in groups.items():
        left = sum(left_at(r, sad) is not None for r in rs)
        lines.append(f"| {eps:g} | {algo} | {left}/{len(rs)} | {np.mean([r['checkpoints'][-1]['loss'] for r in rs]):.4f}"
                     f" | {np.mean([r['checkpoints'][-1]['lambda_min'] for r in rs]):+.4f} | "
                     f"{np.mean([r['checkpoints'][-1]['test_accuracy'] for r in rs]):.3f} |")
    lines += ["", "lambda_min along the run (step: lambda_min), seed 0:", ""]
    for r in runs:
        if r["seed"] == 0:
            pts = ", ".join(f"{c['step']}: {c['lambda_min']:+.3f}" for c in r["checkpoints"]
                            if c["lambda_min"] is not None)
            lines.append(f"- eps {r['eps']:g}, {r['algo']}: {pts}")
    esc = [r for r in runs if r["algo"] == "perturbed-sgd" and r["seed"] == 0 and r["info"].get("escape_log")]
    if esc:
        lines += ["", "perturbed-sgd escape tests, seed 0 (first three and last: step of x~, |x~|, attempts, "
                  "outcome; S = escape radius, T_esc = steps per attempt):", ""]
        for r in esc:
            log, i = r["info"]["escape_log"], r["info"]
            shown = log[:3] + ([log[-1]] if len(log) > 3 else [])
            lines.append(f"- eps {r['eps']:g} (S = {i.get('escape_radius', float('nan')):.3g}, T_esc = "
                         f"{i.get('escape_steps')}, Q = {i.get('repeats')}, chi = {i.get('chi', float('nan')):.3g}, "
                         f"step {i.get('eta', float('nan')):.3g}): " + "; ".join(
                             f"step {e['step']}, |x~| {e['x_tilde_norm']:.3f}, {e['attempts']} attempt(s), "
                             f"{e['outcome']}" for e in shown) + (f" ({len(log)} logged)" if len(log) > 4 else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
