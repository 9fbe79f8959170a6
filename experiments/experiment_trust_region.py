"""Section 5 of dp-trust-region.txt: DP-TR and DP-STR against DP-GD on IJCNN1
(the paper's 35,000-row training set: the first 35,000 rows of ijcnn1.trn;
test on ijcnn1.tst), a9a (adult.trn / adult.tst, an extra) and the
Covertype-shaped synthetic set (``synthetic-covtype``, a seeded 10% held out);
losses ``logistic-nonconvex-reg`` and ``sigmoid-l2`` (lambda = 1e-3);
eps in {0.25, 0.5, 1, 1.5, 2, 4}; delta = 1/n (the paper; dpreg's own default
is also 1/n, but note the paper's n is 35,000, not 49,990); alpha = 0.1,
w0 = 0, Thm 15 defaults for r and T; RDP accounting.

Methods (each on the same ``runs`` research seeds):

* ``DP-GD``: the existing dp-gd, "after carefully tuning": for each data set,
  loss and eps the better (optimality gap on one tuning seed that is never
  reported) of steps in {30, 100} at step 3/M (3/M was the best step of the
  grid {1, 3, 10}/M in a smoke run at eps 1 and 4).
  Tuning on the training data is not private (as in the paper); it favours
  DP-GD.
* ``DP-TR paper`` / ``DP-STR paper``: the paper's sigma formulas (DP-STR with
  the paper's fixed-size sampling, replace-one, SampledWithoutReplacement);
  the accountant reports the epsilon they actually spend.
* ``DP-TR cal`` / ``DP-STR cal``: calibrated noise (DP-STR: Poisson sampling,
  add-remove).
* ``DP-TR cal, all T``: calibrated, without the multiplier stop (all T steps).

DP-STR batch sizes: 5,000 (IJCNN, a9a), 50,000 (Covertype), as section 5.2.
Metrics: optimality gap L(w) - L*, |grad L(w)|, test accuracy, wall time of
the run (calibration included), steps run, epsilon spent; mean (and std) over
runs.  L* = the best of several non-private trust-region runs
(:func:`reference_minimum`); the non-private accuracy is that of w*.

``--row-normalise`` applies the paper's preprocessing x/|x| (default: dpreg's
x/max(1, |x|)).  A per-record map: no privacy cost.

    nice python experiments/experiment_trust_region.py              # writes docs/experiment-trust-region.md
    nice python experiments/experiment_trust_region.py --quick      # smoke test, prints only
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
EPSILONS = (0.25, 0.5, 1.0, 1.5, 2.0, 4.0)
LOSSES = ("logistic-nonconvex-reg", "sigmoid-l2")
METHODS = ("DP-GD", "DP-TR paper", "DP-STR paper", "DP-TR cal", "DP-STR cal", "DP-TR cal, all T")
GD_GRID = [(T, 3.0) for T in (30, 100)]
TUNE_SEEDS = (1001,)


def registry():
    from dpreg.registry import get_registry

    return get_registry()


def load(name: str, loss, row_normalise: bool):
    """(train Problem, test Problem, batch size of DP-STR, description)."""
    from dpreg.data import Schema, load_file, prepare, split
    from dpreg.pipeline import load_prepared
    from dpreg.problem import Problem

    if name == "ijcnn":
        X, y, _ = load_file(str(SHARED / "ijcnn1.trn.bz2"), Schema(22, False))
        X, y = X[:35_000], y[:35_000]
        Xt, yt, _ = load_file(str(SHARED / "ijcnn1.tst.bz2"), Schema(22, False))
        batch, desc = 5_000, "IJCNN1: first 35,000 rows of ijcnn1.trn, test ijcnn1.tst (91,701)"
    elif name == "a9a":
        X, y, _ = load_file(str(SHARED / "adult.trn.bz2"), Schema(123, True))
        Xt, yt, _ = load_file(str(SHARED / "adult.tst.bz2"), Schema(123, True))
        X, Xt = X.toarray(), Xt.toarray()  # a9a is read as CSR; the script works on dense rows
        batch, desc = 5_000, "a9a: adult.trn (32,561 x 123), test adult.tst"
    elif name == "covtype":
        X, y, _, _ = load_prepared("synthetic-covtype", seed=0, labels="binary")
        X, y, Xt, yt = split(X, y, 0.1, 0)
        batch, desc = 50_000, "synthetic-covtype (581,012 x 54 planted logistic), 10% held out"
    else:
        raise SystemExit(f"unknown data set {name}")
    X, y = prepare(X, y, labels="binary", where=name)
    Xt, yt = prepare(Xt, yt, labels="binary", where=name + " test", d=X.shape[1])
    if row_normalise:
        for A in (X, Xt):
            nrm = np.linalg.norm(A, axis=1, keepdims=True)
            np.divide(A, nrm, out=A, where=nrm > 0)
    return Problem(loss, X, y, name=name), Problem(loss, Xt, yt, name=name + " test"), batch, desc


def accuracy(pb, w) -> float:
    return float(np.mean(np.sign(pb.X @ w) == pb.y))


def run_one(pb, cls, params, eps, delta, seed):
    from dpreg.accounting import RdpAccountant
    from dpreg.params import bind

    p = bind(cls.params, params, cls.name)
    acc = RdpAccountant(eps, delta, cls.relation_for(p))
    t0 = time.perf_counter()
    out = cls(pb, p, noise=None, accountant=acc, seed=seed).run()
    wall = time.perf_counter() - t0
    return out, wall, acc.epsilon_spent


def method_spec(method, reg, batch, gd_params):
    tr, st = reg.get("algorithm", "dp-trust-region"), reg.get("algorithm", "dp-stochastic-trust-region")
    return {
        "DP-GD": (reg.get("algorithm", "dp-gd"), gd_params),
        # Alg 1/2 as written stop on the TRS multiplier (l.7); dpreg's practical default is
        # stop=none, so the paper rows ask for the rule explicitly
        "DP-TR paper": (tr, {"noise": "paper", "stop": "multiplier"}),
        "DP-STR paper": (st, {"noise": "paper", "sampling": "fixed", "batch": batch, "stop": "multiplier"}),
        "DP-TR cal": (tr, {"stop": "multiplier"}),
        "DP-STR cal": (st, {"batch": batch, "stop": "multiplier"}),
        "DP-TR cal, all T": (tr, {"stop": "none"}),
    }[method]


def tune_gd(pb, L_star, eps, delta, reg, grid):
    M = pb.constants()[1]
    cls = reg.get("algorithm", "dp-gd")
    best = None
    for T, c in grid:
        params = {"steps": T, "step": c / M}
        gaps = [pb.value(run_one(pb, cls, params, eps, delta, s)[0].w) - L_star for s in TUNE_SEEDS]
        score = float(np.mean(gaps))
        if best is None or score < best[0]:
            best = (score, params)
    return best[1]


def experiment(name, loss_name, eps_list, runs, methods, row_normalise, grid, ref_starts):
    from dpreg_plugins.algorithms.trust_region import reference_minimum

    reg = registry()
    loss = reg.get("loss", loss_name)
    pb, pt, batch, desc = load(name, loss, row_normalise)
    delta = 1.0 / pb.n
    t0 = time.perf_counter()
    w_star, L_star = reference_minimum(pb, starts=ref_starts)
    ref = {"L_star": L_star, "grad": float(np.linalg.norm(pb.gradient(w_star))),
           "test_acc": accuracy(pt, w_star), "train_acc": accuracy(pb, w_star),
           "time": time.perf_counter() - t0, "L0": pb.value(np.zeros(pb.d))}
    print(f"[{name} {loss_name}] n={pb.n} d={pb.d} L*={L_star:.6f} |grad|={ref['grad']:.1e} "
          f"test acc*={ref['test_acc']:.4f}", flush=True)
    rows = []
    for eps in eps_list:
        gd_params = tune_gd(pb, L_star, eps, delta, reg, grid) if "DP-GD" in methods else None
        for m in methods:
            cls, params = method_spec(m, reg, min(batch, pb.n), gd_params)
            res = []
            for s in range(runs):
                out, wall, spent = run_one(pb, cls, params, eps, delta, s)
                w = out.w
                res.append((pb.value(w) - L_star, float(np.linalg.norm(pb.gradient(w))),
                            accuracy(pt, w), wall, out.iterations, spent))
            a = np.array(res)
            row = {"eps": eps, "method": m, "params": params,
                   **{k: float(a[:, i].mean()) for i, k in enumerate(("gap", "grad", "acc", "time", "steps",
                                                                      "spent"))},
                   # median: the first run at each eps also pays the accountant's
                   # calibration (RDP curves are cached for the later runs)
                   "time": float(np.median(a[:, 3])), "time_first": float(a[0, 3]),
                   "gap_sd": float(a[:, 0].std()), "grad_sd": float(a[:, 1].std()),
                   "acc_sd": float(a[:, 2].std()), "spent_max": float(a[:, 5].max())}
            rows.append(row)
            print(f"  eps={eps:<4} {m:<17} gap={row['gap']:.4f}±{row['gap_sd']:.4f} "
                  f"grad={row['grad']:.4f} acc={row['acc']:.4f} t={row['time']:.2f}s "
                  f"steps={row['steps']:.1f} eps_spent={row['spent']:.3f}", flush=True)
    return {"data": name, "desc": desc, "loss": loss_name, "n": pb.n, "d": pb.d, "delta": delta,
            "batch": min(batch, pb.n), "runs": runs, "ref": ref, "rows": rows}


# ------------------------------------------------------------------- report
def claims(res) -> list[str]:
    """The paper's claims checked on one (data, loss) block."""
    rows = res["rows"]
    get = {(r["eps"], r["method"]): r for r in rows}
    eps_list = sorted({r["eps"] for r in rows})
    out = []

    def both(m1, m2, k):
        return [e for e in eps_list if (e, m1) in get and (e, m2) in get and get[e, m1][k] <= get[e, m2][k]]

    n = len(eps_list)
    for m in ("DP-TR paper", "DP-TR cal", "DP-TR cal, all T"):
        g = both(m, "DP-GD", "gap")
        gr = both(m, "DP-GD", "grad")
        out.append(f"{m} <= DP-GD: gap at {len(g)}/{n} eps, gradient norm at {len(gr)}/{n} eps")
    worse = [e for e in eps_list if all((e, m) in get for m in ("DP-STR paper", "DP-GD", "DP-TR paper"))
             and get[e, "DP-STR paper"]["gap"] > max(get[e, "DP-GD"]["gap"], get[e, "DP-TR paper"]["gap"])]
    out.append(f"DP-STR paper worse (gap) than both DP-GD and DP-TR paper at {len(worse)}/{n} eps")
    e1 = 1.0 if 1.0 in eps_list else eps_list[len(eps_list) // 2]
    times = {m: get[e1, m]["time"] for m in METHODS if (e1, m) in get}
    if times:
        fastest = min(times, key=times.get)
        out.append(f"fastest at eps={e1:g}: {fastest} (" + ", ".join(f"{m} {t:.2f}s" for m, t in times.items())
                   + ")")
    for m in ("DP-TR paper", "DP-TR cal", "DP-TR cal, all T", "DP-GD"):
        acc = [get[e, m]["acc"] for e in eps_list if (e, m) in get]
        if acc:
            inc = sum(b >= a for a, b in zip(acc, acc[1:]))
            out.append(f"{m} test accuracy over eps {', '.join(f'{a:.4f}' for a in acc)} "
                       f"(non-decreasing at {inc}/{len(acc) - 1} steps; non-private {res['ref']['test_acc']:.4f})")
    return out


def report(results, args, elapsed) -> str:
    L = ["# Experiment: DP trust region (dp-trust-region.txt, section 5)", "",
         "Regenerated by `nice python experiments/experiment_trust_region.py` with `" + " ".join(args.argv) + "`"
         f" ({elapsed / 60:.1f} min wall of runs on the shared 2-core machine; timings are noisy under load).", "",
         __doc__.split("\n\n")[0].replace("\n", " "), "",
         "Runs per cell: " + ", ".join(f"{r['data']} {r['runs']}" for r in results[::len(args.losses)]) + " "
         "(the paper: 10).", "",
         "Columns: optimality gap L(w)-L* (mean ± sd), |grad L(w)| (mean), test accuracy (mean), "
         "median run wall time (s; the first run at each eps also calibrates), steps run (mean; DP-TR/DP-STR stop when the TRS "
         "multiplier <= sqrt(alpha rho)), epsilon spent (mean; RDP, at delta = 1/n).", ""]
    for res in results:
        ref = res["ref"]
        L += [f"## {res['desc']} — {res['loss']}", "",
              f"n = {res['n']}, d = {res['d']}, delta = 1/n = {res['delta']:.3g}, DP-STR batch {res['batch']}; "
              f"L* = {ref['L_star']:.6f} (|grad| {ref['grad']:.1e}), L(0) = {ref['L0']:.4f}, "
              f"non-private test accuracy {ref['test_acc']:.4f}.", "",
              "| eps | method | gap | grad norm | test acc | time s | steps | eps spent |",
              "|---|---|---|---|---|---|---|---|"]
        for r in res["rows"]:
            extra = ""
            if r["method"] == "DP-GD":
                extra = f" (T={r['params']['steps']}, eta={r['params']['step']:.3g})"
            L.append(f"| {r['eps']:g} | {r['method']}{extra} | {r['gap']:.4f} ± {r['gap_sd']:.4f} | "
                     f"{r['grad']:.4f} | {r['acc']:.4f} | {r['time']:.2f} | {r['steps']:.1f} | "
                     f"{r['spent']:.3f} |")
        L += ["", "Claims on this block:", ""] + [f"- {c}" for c in claims(res)] + [""]
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", default=["ijcnn", "a9a", "covtype"])
    ap.add_argument("--losses", nargs="+", default=list(LOSSES))
    ap.add_argument("--eps", nargs="+", type=float, default=list(EPSILONS))
    ap.add_argument("--runs", type=int, default=10, help="runs per cell on IJCNN")
    ap.add_argument("--runs-large", type=int, default=10, help="runs per cell on a9a and covtype")
    ap.add_argument("--eps-large", nargs="+", type=float, default=list(EPSILONS),
                    help="eps grid on a9a and covtype")
    ap.add_argument("--row-normalise", action="store_true", help="the paper's x/|x| preprocessing")
    ap.add_argument("--quick", action="store_true", help="smoke test: IJCNN, 2 runs, eps 1 and 4, no file")
    ap.add_argument("--out", default=str(ROOT / "docs" / "experiment-trust-region.md"))
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--merge", nargs="+", default=None,
                    help="render the report from result files written by --json (no runs)")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    results = []
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        results = [r for part in parts for r in part["results"]]
        args.argv = [a for part in parts for a in part["argv"]]
        Path(args.out).write_text(report(results, args, sum(p["elapsed"] for p in parts)))
        print(f"wrote {args.out}")
        return
    if args.quick:
        args.data, args.eps, args.runs = ["ijcnn"], [1.0, 4.0], 2
    for name in args.data:
        large = name != "ijcnn"
        for loss in args.losses:
            results.append(experiment(
                name, loss, args.eps_large if large else args.eps,
                args.runs_large if large else args.runs, METHODS, args.row_normalise,
                GD_GRID if not args.quick else GD_GRID[:2], 3 if large else 5))
    elapsed = time.perf_counter() - t0
    text = report(results, args, elapsed)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "argv": args.argv, "elapsed": elapsed},
                                              indent=1, default=float))
    if args.quick:
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out} ({elapsed / 60:.1f} min)")


if __name__ == "__main__":
    main()
