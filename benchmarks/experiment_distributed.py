"""Issue 17: distributed adaptive DP-SPIDER (Alg 1 + Alg 3) and distributed
private model selection (Alg 4) of perturbed-sgd-adaptive-spider-distributed-sosp.txt
on IJCNN1 and a9a (``../shared/data``, read in place).

Three questions (Thm 3, Remark 2, Remark 3):

* collaboration gain - fixed n per client (n = N/4 records each; m clients
  hold m n records, a seeded public subset): |grad F| should fall as m grows;
* the sqrt(m) price - fixed total (all N records split over m clients):
  m > 1 should be worse than one machine (client-side noise, averaged);
* selection - Alg 4 after an m = 4 run (20% of every shard kept fresh):
  accepted or not, and whether Remark 3's d <= min{(sqrt(m) n eps)^2,
  (sqrt(m) n eps)^(6/13)} holds (it does for IJCNN1, d = 22; not for a9a, d = 123).

Reduced grid (CPU budget about 10 minutes on a shared 2-core machine):
m in {1, 2, 4}, eps in {0.5, 1, 2} (selection: eps = 1 only), delta = 1/N, seeds 0..2, sharding iid and
Dirichlet(0.5) label skew, loss ``logistic-nonconvex-reg``, noise ``tree``,
every other parameter at its default (Thm 3 with n per client), and in the
setting "fixed n per client, m=1 plan" with the one-machine run's alpha,
kappa, batch1 and batch2 at every m (isolates the averaging gain from Thm 3's
change of plan); the issue's grid (m up to 8, 5 seeds) is ``--full``.

Metrics, after each run and non-private: the global objective's gradient norm
|(1/m) sum_j grad F_j(w)| over the clients' training shards (the paper's
F = (1/m) sum_j F_j), test accuracy on the held-out file, whether Alg 1
certified its output, rounds, and the communication each round (floats per
client each way, measured by the backend).

    python benchmarks/experiment_distributed.py            # writes docs/experiment-distributed.md
    python benchmarks/experiment_distributed.py --quick    # one seed, IJCNN1 only
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DATASETS = {"ijcnn1": ("ijcnn1.trn.bz2", "ijcnn1.tst.bz2"), "a9a": ("adult.trn.bz2", "adult.tst.bz2")}
LOSS, NOISE = "logistic-nonconvex-reg", "tree"
DOC = ROOT / "docs" / "experiment-distributed.md"
COMMAND = "python benchmarks/experiment_distributed.py"


def load(name):
    from dpreg.pipeline import load_prepared

    trn, tst = DATASETS[name]
    X, y, _, _ = load_prepared(str(SHARED / trn), seed=0, labels="binary")
    Xt, yt, _, _ = load_prepared(str(SHARED / tst), seed=0, labels="binary", d=X.shape[1], test=True)
    return X, y, Xt, yt


def one_run(reg, X, y, Xt, yt, *, m, sharding, eps, seed, select=False, fixed=None):
    from dpreg.accounting import RdpAccountant
    from dpreg.params import bind
    from dpreg.problem import Problem

    loss = reg.get("loss", LOSS)
    pb = Problem(loss, X, y)
    cls = reg.get("algorithm", "distributed-spider")
    params = {"clients": m, "sharding": sharding}
    if select:
        params["select"] = "distributed-selection"
    params.update(fixed or {})
    acc = RdpAccountant(eps, 1.0 / pb.n, cls.relation)
    algo = cls(pb, bind(cls.params, params, "distributed-spider"), noise=reg.get("noise", NOISE),
               accountant=acc, seed=seed)
    t0 = time.perf_counter()
    out = algo.run()
    wall = time.perf_counter() - t0
    w = out.w
    grads = [pb.gradient(w, tr) for tr, _ in algo._shards()]
    info = out.info
    sel = info.get("selection") or {}
    rec = {"m": m, "sharding": sharding, "eps": eps, "seed": seed, "select": select,
           "grad_norm": float(np.linalg.norm(np.mean(grads, axis=0))),
           "test_accuracy": float(np.mean(np.sign(Xt @ w) == yt)),
           "certified": bool(info["certified"]), "rounds": info["rounds"],
           "n_per_client": min(info["records_per_client"]), "epsilon": acc.epsilon_spent,
           "eps_max_clients": info["epsilon_max_over_clients"], "alpha": info["alpha"],
           "batch1": info["batch1"], "batch2": info["batch2"], "noise_multiplier": info["noise_multiplier"],
           "kappa": info["kappa"],
           "floats_down": info["communication"]["floats_down_per_round_per_client"],
           "floats_up": info["communication"]["floats_up_per_round_per_client"],
           "bytes_down": info["communication"]["bytes_down"] / max(1, m * info["rounds"]),
           "bytes_up": info["communication"]["bytes_up"] / max(1, m * info["rounds"]),
           "wall_s": wall}
    if select:
        rec.update(sel_index=sel.get("index"), sel_candidates=sel.get("candidates"),
                   sel_remark3_bound=sel.get("remark3_dimension_bound"), sel_remark3=sel.get("remark3_holds"),
                   sel_grad_threshold=sel.get("grad_threshold"), sel_lambda_threshold=sel.get("lambda_threshold"),
                   sel_floats_up=sel.get("floats_up_per_client"), sel_alpha=sel.get("alpha"))
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full", action="store_true", help="the issue's grid: m up to 8, eps 0.5/1/2, 5 seeds")
    ap.add_argument("--raw", default="/tmp/dpreg-bench/experiment-distributed.jsonl")
    ap.add_argument("--render", action="store_true", help="only rebuild the page from --raw")
    args = ap.parse_args(argv)
    if args.render:
        rows = [json.loads(line) for line in open(args.raw)]
        return render(rows, None, args)
    from dpreg.registry import get_registry

    reg = get_registry()
    ms = (1, 2, 4, 8) if args.full else (1, 2, 4)
    epss = (1.0,) if args.quick else (0.5, 1.0, 2.0)
    seeds = range(5 if args.full else (1 if args.quick else 3))
    datasets = ("ijcnn1",) if args.quick else tuple(DATASETS)
    Path(args.raw).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    t_all = time.perf_counter()
    for name in datasets:
        X, y, Xt, yt = load(name)
        N, d = X.shape
        n_client = N // max(ms)
        for eps in epss:
            for seed in seeds:
                base = None
                for m in ms:
                    for sharding in (("iid",) if m == 1 else ("iid", "dirichlet")):
                        # fixed n per client: the first m * n_client records of a public permutation
                        keep = np.sort(np.random.default_rng(17).permutation(N)[: m * n_client])
                        r = one_run(reg, X[keep], y[keep], Xt, yt, m=m, sharding=sharding, eps=eps, seed=seed)
                        rows.append(dict(r, data=name, d=d, setting="fixed n per client"))
                        if m == 1:  # the one-machine plan, reused below at every m
                            base = {k: r[k] for k in ("alpha", "kappa", "batch1", "batch2")}
                        else:
                            r = one_run(reg, X[keep], y[keep], Xt, yt, m=m, sharding=sharding, eps=eps,
                                        seed=seed, fixed=base)
                            rows.append(dict(r, data=name, d=d, setting="fixed n per client, m=1 plan"))
                        r = one_run(reg, X, y, Xt, yt, m=m, sharding=sharding, eps=eps, seed=seed)
                        rows.append(dict(r, data=name, d=d, setting="fixed total"))
                        print(json.dumps({k: rows[-1][k] for k in ("data", "m", "sharding", "seed", "grad_norm",
                                                                     "rounds", "wall_s")}), flush=True)
                if eps == 1.0:
                    r = one_run(reg, X, y, Xt, yt, m=4, sharding="iid", eps=eps, seed=seed, select=True)
                    rows.append(dict(r, data=name, d=d, setting="selection"))
    with open(args.raw, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    render(rows, time.perf_counter() - t_all, args)


def _ms(vals):
    a = np.asarray(vals, dtype=float)
    se = a.std(ddof=1) / np.sqrt(a.size) if a.size > 1 else 0.0
    return f"{a.mean():.4f} +- {se:.4f}"


NOTES = """
### What the tables say (read with the caveats below)

Headline rows (eps = 1, mean over 3 seeds; |grad F| of the global objective at the output):

| data | setting | m = 1 | m = 2 (iid) | m = 4 (iid) |
|---|---|---|---|---|
| ijcnn1 | fixed n per client, Thm 3 defaults | 0.0439 | 0.0596 | 0.0658 |
| ijcnn1 | fixed n per client, m=1 plan | 0.0439 | 0.0366 | 0.0371 |
| ijcnn1 | fixed total (N = 49,990) | 0.0170 | 0.0377 | 0.0659 |
| a9a | fixed n per client, Thm 3 defaults | 0.0520 | 0.0758 | 0.0763 |
| a9a | fixed n per client, m=1 plan | 0.0520 | 0.0491 | 0.0457 |
| a9a | fixed total (N = 32,561) | 0.0393 | 0.0508 | 0.0764 |

* **Collaboration gain at fixed n per client (Remark 2): only when the plan is
  held fixed.**  With Thm 3's defaults the output gets *worse* as m grows:
  Thm 3 lowers alpha with m (alpha 0.051 -> 0.042 -> 0.035 on IJCNN1), the
  practical batch floor b1 >= 2 z C sqrt(d)/alpha grows with 1/alpha, and the
  run affords fewer rounds (10 -> 7 -> 6).  Holding the one-machine plan
  (alpha, kappa, b1, b2) fixed isolates the averaging: the server's noise falls
  as z 2C/(b1 sqrt(m)) and the runs go further (10 -> 12 -> 12 rounds), and
  |grad F| falls by 6-17% at eps = 1 (a9a also at eps = 2; at eps = 0.5 by
  under 3%; IJCNN1 at eps = 2 mixed).  The theory's gain is real but small at
  these sizes, and Thm 3's plan as implemented spends it on a smaller alpha.
* **The sqrt(m) price at fixed total n**: clear and monotone - splitting
  IJCNN1 over 2 and 4 clients multiplies |grad F| by 2.2 and 3.9 at eps = 1
  (a9a: 1.3 and 1.9): each client adds noise for its own n/m records, and the
  lockstep rounds end when a shard (N/m records) is spent.
* **iid vs Dirichlet(0.5) label skew**: indistinguishable here.  Shards have
  equal sizes, so the average of the clients' gradients is the pooled
  gradient; skew only changes each client's sampling variance, which the
  privacy noise (z = 4-15) dominates over these few rounds.
* **Selection (Remark 3)**: on IJCNN1 (d = 22 below the bound 107) Alg 4
  accepts the run's final iterate; on a9a (d = 123 above the bound 88) its
  thresholds are so loose (|grad| <= 0.31) that it accepts candidate 0, the
  *initial point* w = 0, whose |grad F| (0.182) is 2.4 times the run's own
  output (0.076) - the failure Remark 3 predicts.  It also costs each client
  7,749 floats per candidate on a9a against 123 per training round.

Caveats.  Runs are short (1-71 rounds): ``perturbed-sgd``'s default batch
floors spend the records fast, no run certified an SOSP, and test accuracy
stays at the majority class (IJCNN1 0.905, a9a 0.764) except a9a at eps = 2 on
one machine (0.794).  These defaults are being reworked (fidelity issue); this
page measures what ``distributed-spider`` does with them, and will move with
them.  Three seeds; standard errors are over seeds only (the shards and
subsets are fixed).  Not run: m = 8 and 5 seeds (the issue's grid, ``--full``),
and sweeps on a Dask cluster (issue 17 item 5: ``dpreg sweep`` does not exist yet).
"""


def render(rows, total_s, args):
    groups = defaultdict(list)
    for r in rows:
        groups[(r["data"], r["setting"], r["m"], r["sharding"], r["eps"])].append(r)
    lines = ["# Distributed adaptive DP-SPIDER and distributed private selection (issue 17)", "",
             f"Generated by `{COMMAND}{' --quick' if args.quick else ''}{' --full' if args.full else ''}` "
             "(do not edit by hand); raw rows in " + f"`{args.raw}`.", "",
             __doc__.split("\n\n", 1)[1].split("    python")[0].strip(), "",
             f"Runs: {len(rows)}; sum of their wall times (algorithm only, loaded 2-core machine shared with "
             f"other jobs): {sum(r['wall_s'] for r in rows):.0f} s.", "",
             "## Alg 1 + Alg 3 (distributed-spider)", "",
             "| data | setting | m | sharding | eps | n per client | |grad F| (mean +- se) | test acc | certified | rounds | alpha | z | floats down/up per round per client | s/run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[4], k[2], k[3])):
        data, setting, m, sharding, eps = key
        if setting == "selection":
            continue
        g = groups[key]
        lines.append(f"| {data} | {setting} | {m} | {sharding} | {eps:g} | {g[0]['n_per_client']} | "
                     f"{_ms([r['grad_norm'] for r in g])} | {_ms([r['test_accuracy'] for r in g])} | "
                     f"{sum(r['certified'] for r in g)}/{len(g)} | {np.mean([r['rounds'] for r in g]):.0f} | "
                     f"{g[0]['alpha']:.3g} | {g[0]['noise_multiplier']:.3g} | "
                     f"{np.mean([r['floats_down'] for r in g]):.1f} / {np.mean([r['floats_up'] for r in g]):.0f} | "
                     f"{np.mean([r['wall_s'] for r in g]):.2f} |")
    lines += ["", NOTES.strip(), "", "## Alg 4 after an m = 4 run (distributed-selection, 20% of every shard fresh)", "",
              "| data | d | seed | candidates | accepted index | Remark 3 bound on d | Remark 3 holds | grad threshold | lambda threshold | alpha | |grad F| at output | floats up per client |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["setting"] != "selection":
            continue
        lines.append(f"| {r['data']} | {r['d']} | {r['seed']} | {r['sel_candidates']} | {r['sel_index']} | "
                     f"{r['sel_remark3_bound']:.1f} | {r['sel_remark3']} | {r['sel_grad_threshold']:.3g} | "
                     f"{r['sel_lambda_threshold']:.3g} | {r['sel_alpha']:.3g} | {r['grad_norm']:.4f} | "
                     f"{r['sel_floats_up']} |")
    lines += ["", "## Communication per round (measured by the backend)", "",
              "Server -> each client: the round number, the mode and x_{t-1} (O1 round: d + 2 numbers), plus "
              "x_{t-2} in an O2 round (2d + 2); each client -> server: its noisy estimate (d floats).  Alg 4: "
              "d + d(d+1)/2 floats per client per candidate (the gradient and the Hessian's upper triangle).  "
              "Bytes are the pickled messages (protocol 5), as the local backend measures them; Dask's own "
              "framing adds a constant per message.", "",
              "| data | d | O1 round down | O2 round down | up | measured floats down / up per round per client (mean over runs) | measured bytes down / up per round per client | Alg 4 floats up per client per candidate |",
              "|---|---|---|---|---|---|---|---|"]
    for data in sorted({r["data"] for r in rows}):
        rs = [r for r in rows if r["data"] == data and r["setting"] != "selection"]
        d = rs[0]["d"]
        lines.append(f"| {data} | {d} | {d + 2} | {2 * d + 2} | {d} | "
                     f"{np.mean([r['floats_down'] for r in rs]):.1f} / {np.mean([r['floats_up'] for r in rs]):.0f} | "
                     f"{np.mean([r['bytes_down'] for r in rs]):.0f} / {np.mean([r['bytes_up'] for r in rs]):.0f} | "
                     f"{d + d * (d + 1) // 2} |")
    DOC.write_text("\n".join(lines) + "\n")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    sys.exit(main())
