"""Saddle experiment for networks (issue 19, item 3): five DP algorithms started
exactly at the symmetric saddle of a one-hidden-layer network.

Data: scikit-learn's bundled digits (1,797 x 64), label +1 for even digits and
-1 for odd ones, rows scaled to norm 1 (public preprocessing: a fixed map of
each record), split 1,437 / 360 by a fixed public seed.  Loss
``mlp:hidden=H,init=zero``: every algorithm starts at w = 0, where all hidden
units are identical, the gradient is zero except in the output bias c, and
(after c fits the class balance) the Hessian has a negative eigenvalue
-|E[phi'(c, y) (x, 1)]| from the coupling of each unit's input weights with
its output weight: a strict saddle.

For each algorithm at the same (epsilon, delta) and each seed, the checkpoints
of the run's trajectory are evaluated after the run (non-private
diagnostics): lambda_min of the empirical Hessian (Lanczos, scipy eigsh, on
the exact HVP kernel), the distance from the saddle manifold |(W, b, v)|,
the training loss and test accuracy.  An algorithm "has left" the saddle at
the first checkpoint where the training loss is below the saddle's loss
minus 0.01.

    nice python benchmarks/experiment_saddles_mlp.py [--eps 2] [--seeds 3] [--hidden 8] [--out FILE]

writes a JSON record (default benchmarks/results/saddles_mlp.json) and prints
the Markdown tables of docs/experiment-saddles-mlp.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

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


def lambda_min(pb, w) -> float:
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((pb.d, pb.d), matvec=lambda v: pb.hvp(w, np.ravel(v)), dtype=float)
    return float(eigsh(op, k=1, which="SA", tol=1e-8, maxiter=50 * pb.d,
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


def run_one(reg, pb, tp, algo, params, eps, delta, seed):
    from dpreg.metrics import accuracy
    from dpreg.params import bind, parse_pairs

    cls = reg.get("algorithm", algo)
    p = bind(cls.params, parse_pairs(params), algo)
    acc = reg.get("accountant", "rdp")(eps, delta, cls.relation_for(p))
    noise = reg.get("noise", "tree") if cls.uses_noise else None
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
    rows = []
    for s, w in zip(steps, its):
        rows.append({"step": int(s), "loss": pb.value(w), "lambda_min": lambda_min(pb, w),
                     "grad_norm": float(np.linalg.norm(pb.gradient(w))),
                     "dist": float(np.linalg.norm(w[:-1])), "test_accuracy": accuracy(tp, w)})
    info = {k: out.info[k] for k in ("certified", "escapes", "escape_tests", "perturbations", "stop_reason")
            if k in out.info}
    return {"algo": algo, "seed": seed, "iterations": out.iterations, "records_used": out.records_used,
            "epsilon_spent": acc.epsilon_spent, "run_s": t_run, "checkpoints": rows, "info": info}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", type=float, default=2.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=8)
    ap.add_argument("--data", choices=("digits", "ijcnn1"), default="digits")
    ap.add_argument("--algos", default=",".join(a for a, _ in ALGOS))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "saddles_mlp.json"))
    a = ap.parse_args(argv)
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry

    reg = get_registry()
    X, y, Xt, yt = digits_even_odd() if a.data == "digits" else ijcnn1()
    loss = reg.get("loss", "mlp")(hidden=a.hidden, init="zero")
    pb, tp = make_problem(loss, X, y, "digits even/odd"), make_problem(loss, Xt, yt, "digits test")
    delta = 1.0 / pb.n
    ws = saddle_point(pb)
    sad = {"loss": pb.value(ws), "lambda_min": lambda_min(pb, ws),
           "grad_norm": float(np.linalg.norm(pb.gradient(ws))), "lambda_min_at_0": lambda_min(pb, np.zeros(pb.d))}
    print(f"{a.data} n={pb.n} p={pb.p} h={a.hidden} d={pb.d}  eps={a.eps} delta={delta:.2e}")
    print(f"saddle (W=b=v=0, best c): loss {sad['loss']:.4f}  lambda_min {sad['lambda_min']:.4g}  "
          f"|grad| {sad['grad_norm']:.2e}")
    runs = []
    for algo, params in ALGOS:
        if algo not in a.algos.split(","):
            continue
        for seed in range(a.seeds):
            r = run_one(reg, pb, tp, algo, params, a.eps, delta, seed)
            runs.append(r)
            last = r["checkpoints"][-1]
            print(f"{algo:16s} seed {seed}: {r['iterations']:5d} it  loss {last['loss']:.4f}  "
                  f"lambda_min {last['lambda_min']:+.4f}  dist {last['dist']:.3f}  "
                  f"test acc {last['test_accuracy']:.3f}  {r['info']}", flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"eps": a.eps, "delta": delta, "hidden": a.hidden, "n": pb.n, "d": pb.d, "saddle": sad,
                   "runs": runs}, f, indent=1)
    print(tables(sad, runs))


def left_at(r, sad):
    for c in r["checkpoints"]:
        if c["loss"] < sad["loss"] - 0.01:
            return c["step"]
    return None


def tables(sad, runs) -> str:
    lines = ["| algorithm | seed | iterations | left saddle at step | final loss | final lambda_min | "
             "final dist | test accuracy | certificate / info |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        c = r["checkpoints"][-1]
        la = left_at(r, sad)
        lines.append(f"| {r['algo']} | {r['seed']} | {r['iterations']} | {'never' if la is None else la} | "
                     f"{c['loss']:.4f} | {c['lambda_min']:+.4f} | {c['dist']:.3f} | {c['test_accuracy']:.3f} | "
                     f"{r['info'] or ''} |")
    lines += ["", "lambda_min along the run (checkpoint step: lambda_min), seed 0:", ""]
    for r in runs:
        if r["seed"] == 0:
            pts = ", ".join(f"{c['step']}: {c['lambda_min']:+.3f}" for c in r["checkpoints"][:: max(1, len(
                r["checkpoints"]) // 8)])
            lines.append(f"- {r['algo']}: {pts}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
