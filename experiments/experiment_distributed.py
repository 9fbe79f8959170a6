"""Distributed adaptive DP-SPIDER (Alg 1 + Alg 3) and distributed
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
a label-skewed layout (client j's class mix ~ Dirichlet(0.5), equal shard sizes) that this script draws
once per data set and m and hands to dpreg as a public client assignment (``sharding=given``): the
simulated federation's layout, which the guarantee treats as public, as it would the real clients'
holdings (dpreg itself never shards by label); loss ``logistic-nonconvex-reg``, noise ``tree``,
every other parameter at its default (Thm 3 with n per client), and in the
setting "fixed n per client, m=1 plan" with the one-machine run's alpha,
kappa, batch1 and batch2 at every m (isolates the averaging gain from Thm 3's
change of plan); the full grid (m up to 8, 5 seeds) is ``--full``.

Metrics, after each run and non-private: the global objective's gradient norm
|(1/m) sum_j grad F_j(w)| over the clients' training shards (the paper's
F = (1/m) sum_j F_j), test accuracy on the held-out file, whether Alg 1
certified its output, rounds, and the communication each round (floats per
client each way, measured by the backend).

    python experiments/experiment_distributed.py            # writes docs/experiment-distributed.md
    python experiments/experiment_distributed.py --quick    # one seed, IJCNN1 only
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
COMMAND = "python experiments/experiment_distributed.py"
#: where the label-skewed layouts (client assignment files) are written (set by main from --raw)
LAYOUTS = Path("/tmp/dpreg-bench/experiment-distributed-layouts")


def _commit() -> str:
    """The checkout's short commit, "+dirty" when tracked files differ from it."""
    import subprocess

    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return c + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load(name):
    from dpreg.pipeline import load_prepared

    trn, tst = DATASETS[name]
    X, y, _, _ = load_prepared(str(SHARED / trn), seed=0, labels="binary")
    Xt, yt, _, _ = load_prepared(str(SHARED / tst), seed=0, labels="binary", d=X.shape[1], test=True)
    return X, y, Xt, yt


def label_skew(y, m, *, beta=0.5, seed=0):
    """The simulated federation's layout for the "skewed" rows: equal shard
    sizes, client j's class mix ~ Dirichlet(beta) served while the class
    lasts, the quota then filled from the classes with most records left.
    Drawn here, by the experimenter, and given to dpreg as public input
    (``sharding=given``); returns record i's client."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5A4D, int(m)]))
    classes = np.unique(y)
    pools = [list(rng.permutation(np.flatnonzero(y == c))) for c in classes]
    sizes = [len(a) for a in np.array_split(np.arange(len(y)), m)]
    owner = np.empty(len(y), dtype=np.int64)
    for j in range(m):
        want = np.floor(rng.dirichlet(np.full(classes.size, float(beta))) * sizes[j]).astype(int)
        take = []
        for c, k in enumerate(want):
            k = min(int(k), len(pools[c]))
            take += pools[c][:k]
            del pools[c][:k]
        while len(take) < sizes[j]:
            c = int(np.argmax([len(pl) for pl in pools]))
            k = min(sizes[j] - len(take), len(pools[c]))
            take += pools[c][:k]
            del pools[c][:k]
        owner[np.asarray(take, dtype=np.int64)] = j
    return owner


def layout_file(y, m, directory):
    """The label-skewed layout of ``y`` over m clients, written as an assignment file."""
    import hashlib

    path = Path(directory) / f"skew-m{m}-{hashlib.blake2b(np.ascontiguousarray(y).tobytes(), digest_size=8).hexdigest()}.txt"
    if not path.exists():
        np.savetxt(path, label_skew(y, m), fmt="%d")
    return str(path)


def one_run(reg, X, y, Xt, yt, *, m, sharding, eps, seed, select=False, fixed=None):
    from dpreg.accounting import RdpAccountant
    from dpreg.params import bind
    from dpreg.problem import Problem

    loss = reg.get("loss", LOSS)
    pb = Problem(loss, X, y)
    cls = reg.get("algorithm", "distributed-spider")
    params = {"clients": m, "sharding": "iid"}
    if sharding == "skewed (given)":
        params.update(sharding="given", assignment=layout_file(y, m, LAYOUTS))
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
           "escape_tests": (info.get("sosp_decisions") or {}).get("escape_tests"),
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
    ap.add_argument("--full", action="store_true", help="the full grid: m up to 8, eps 0.5/1/2, 5 seeds")
    ap.add_argument("--eps", default=None, help="comma-separated eps values (default 0.5,1,2; --quick: 1)")
    ap.add_argument("--raw", default="/tmp/dpreg-bench/experiment-distributed.jsonl")
    ap.add_argument("--render", action="store_true", help="only rebuild the page from --raw")
    args = ap.parse_args(argv)
    if args.render:
        rows = [json.loads(line) for line in open(args.raw)]
        return render(rows, None, args)
    from dpreg.registry import get_registry

    reg = get_registry()
    ms = (1, 2, 4, 8) if args.full else (1, 2, 4)
    epss = (tuple(float(e) for e in args.eps.split(",")) if args.eps else
            (1.0,) if args.quick else (0.5, 1.0, 2.0))
    seeds = range(5 if args.full else (1 if args.quick else 3))
    datasets = ("ijcnn1",) if args.quick else tuple(DATASETS)
    Path(args.raw).parent.mkdir(parents=True, exist_ok=True)
    global LAYOUTS
    LAYOUTS = Path(args.raw).parent / "experiment-distributed-layouts"
    LAYOUTS.mkdir(exist_ok=True)
    from dpreg.errors import ParameterError

    rows, refused = [], []
    commit = _commit()
    t_all = time.perf_counter()
    for name in datasets:
        X, y, Xt, yt = load(name)
        N, d = X.shape
        n_client = N // max(ms)
        for eps in epss:
            for seed in seeds:
                base = None
                for m in ms:
                    for sharding in (("iid",) if m == 1 else ("iid", "skewed (given)")):
                        # fixed n per client: the first m * n_client records of a public permutation
                        keep = np.sort(np.random.default_rng(17).permutation(N)[: m * n_client])

                        def attempt(setting, Xa, ya, **kw):
                            """One cell; a plan the data cannot pay for is a 'refused' row, not a crash."""
                            try:
                                r = one_run(reg, Xa, ya, Xt, yt, m=m, sharding=sharding, eps=eps, seed=seed, **kw)
                            except ParameterError as exc:
                                refused.append({"data": name, "setting": setting, "m": m, "sharding": sharding,
                                                "eps": eps, "seed": seed, "reason": str(exc), "commit": commit})
                                return None
                            rows.append(dict(r, data=name, d=d, setting=setting, commit=commit))
                            print(json.dumps({k: rows[-1][k] for k in ("data", "setting", "m", "sharding", "seed",
                                                                         "grad_norm", "rounds", "wall_s")}),
                                  flush=True)
                            return r

                        r = attempt("fixed n per client", X[keep], y[keep])
                        if m == 1:  # the one-machine plan, reused below at every m
                            base = None if r is None else {k: r[k] for k in ("alpha", "kappa", "batch1", "batch2")}
                        elif base is not None:
                            attempt("fixed n per client, m=1 plan", X[keep], y[keep], fixed=base)
                        attempt("fixed total", X, y)
                if eps == 1.0:
                    r = one_run(reg, X, y, Xt, yt, m=4, sharding="iid", eps=eps, seed=seed, select=True)
                    rows.append(dict(r, data=name, d=d, setting="selection", commit=commit))
    with open(args.raw, "w") as fh:
        for r in rows + [dict(r, refused=True) for r in refused]:
            fh.write(json.dumps(r) + "\n")
    render(rows + [dict(r, refused=True) for r in refused], time.perf_counter() - t_all, args)


def _ms(vals):
    a = np.asarray(vals, dtype=float)
    se = a.std(ddof=1) / np.sqrt(a.size) if a.size > 1 else 0.0
    return f"{a.mean():.4f} +- {se:.4f}"


def headline(rows) -> str:
    """The findings, computed from the rows: |grad F| at eps = 1 (iid, mean over
    seeds) by m for each setting, the collaboration gain (fixed n per client)
    and the sqrt(m) price (fixed total), and the escape tests' outcomes."""
    ms = sorted({r["m"] for r in rows if r["setting"] != "selection"})
    out = ["### What the tables say (computed from the rows)", "",
           "|grad F| of the global objective at the output / test accuracy / rounds, eps = 1, iid, mean over seeds:", "",
           "| data | setting | " + " | ".join(f"m = {m}" for m in ms) + " |", "|---|---|" + "---|" * len(ms)]
    mean = {}
    for data in sorted({r["data"] for r in rows}):
        for setting in ("fixed n per client", "fixed n per client, m=1 plan", "fixed total"):
            cells = []
            for m in ms:
                g = [r for r in rows if r["data"] == data and r["setting"] == setting and r["m"] == m
                     and r["sharding"] == "iid" and r["eps"] == 1.0]
                if setting.endswith("m=1 plan") and m == 1:
                    g = [r for r in rows if r["data"] == data and r["setting"] == "fixed n per client" and r["m"] == 1
                         and r["eps"] == 1.0]
                if not g:
                    cells.append("-")
                    continue
                mean[(data, setting, m)] = float(np.mean([r["grad_norm"] for r in g]))
                cells.append(f"{mean[(data, setting, m)]:.4f} / {np.mean([r['test_accuracy'] for r in g]):.3f} / "
                             f"{np.mean([r['rounds'] for r in g]):.0f}")
            out.append(f"| {data} | {setting} | " + " | ".join(cells) + " |")
    out.append("")
    for data in sorted({r["data"] for r in rows}):
        g = [mean.get((data, "fixed n per client", m)) for m in ms]
        t = [mean.get((data, "fixed total", m)) for m in ms]
        if g[0] is not None:
            falls = all(b is not None and b < a for a, b in zip(g, g[1:]))
            out.append(f"* {data}, collaboration gain (fixed n per client, eps = 1): |grad F| "
                       + ", ".join("-" if v is None else f"{v:.4f}" for v in g)
                       + f" for m = {', '.join(map(str, ms))}: " + ("falls at every m." if falls else
                                                                   "does not fall at every m."))
        if t[0] is not None:
            worse = [m for m, v in zip(ms, t) if m > 1 and v is not None and v > t[0]]
            out.append(f"* {data}, the sqrt(m) price (fixed total, eps = 1): |grad F| "
                       + ", ".join("-" if v is None else f"{v:.4f}" for v in t)
                       + ("; worse than one machine at m = " + ", ".join(map(str, worse)) if worse else
                          "; no m is worse than one machine") + ".")
    tests = defaultdict(int)
    for r in rows:
        for k, v in (r.get("escape_tests") or {}).items():
            tests[k] += v
    if tests:
        out.append(f"* Escape tests of Alg 1 over all runs: {tests['total']} (escaped {tests['escaped']}, certified "
                   f"{tests['certified']}, decided by noise {tests['decided_by_noise']}, interrupted "
                   f"{tests['interrupted']}): an escape is decided by noise when the expected norm of the averaged "
                   "client noise is at least the escape bar S / (T_esc eta) (the run record's sosp_decisions).")
    sel = [r for r in rows if r["setting"] == "selection"]
    if sel:
        out.append(f"* Alg 4 accepted candidate index {sorted({r['sel_index'] for r in sel}, key=str)} in "
                   f"{len(sel)} runs; Remark 3's dimension condition held in "
                   f"{sum(bool(r['sel_remark3']) for r in sel)} of them.")
    out += ["", "Runs use ``logistic-nonconvex-reg`` with ``tree`` noise, delta = 1/N, no intercept or scaling; "
            "standard errors are over seeds only (the shards and subsets are fixed). Where the practical alpha "
            "floor exceeds the gradient at w = 0, Alg 1 certifies w = 0 at its first test (test accuracy 0: "
            "sign(0) predicts no class)."]
    return "\n".join(out)




def render(rows, total_s, args):
    refused = [r for r in rows if r.get("refused")]
    rows = [r for r in rows if not r.get("refused")]
    groups = defaultdict(list)
    for r in rows:
        groups[(r["data"], r["setting"], r["m"], r["sharding"], r["eps"])].append(r)
    lines = ["# Distributed adaptive DP-SPIDER and distributed private selection", "",
             f"Runs at commit {', '.join(sorted({r.get('commit', 'unknown') for r in rows}))}, generated by `{COMMAND}{' --quick' if args.quick else ''}{' --full' if args.full else ''}"
             f"{' --eps ' + args.eps if getattr(args, 'eps', None) else ''}` "
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
    lines += ["", headline(rows), "", "## Alg 4 after an m = 4 run (distributed-selection, 20% of every shard fresh)", "",
              "| data | d | seed | candidates | accepted index | Remark 3 bound on d | Remark 3 holds | grad threshold | lambda threshold | alpha | |grad F| at output | floats up per client |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["setting"] != "selection":
            continue
        lines.append(f"| {r['data']} | {r['d']} | {r['seed']} | {r['sel_candidates']} | {r['sel_index']} | "
                     f"{r['sel_remark3_bound']:.1f} | {r['sel_remark3']} | {r['sel_grad_threshold']:.3g} | "
                     f"{r['sel_lambda_threshold']:.3g} | {r['sel_alpha']:.3g} | {r['grad_norm']:.4f} | "
                     f"{r['sel_floats_up']} |")
    if refused:
        lines += ["", "## Refused cells", "",
                  "Plans the data cannot pay for are refused before any release (the algorithm's own "
                  "one-line error); they are not in the tables above.", "",
                  "| data | setting | m | sharding | eps | seeds | reason (first seed) |", "|---|---|---|---|---|---|---|"]
        rg = defaultdict(list)
        for r in refused:
            rg[(r["data"], r["setting"], r["m"], r["sharding"], r["eps"])].append(r)
        for (data, setting, m, sharding, eps), g in sorted(rg.items(), key=lambda kv: str(kv[0])):
            lines.append(f"| {data} | {setting} | {m} | {sharding} | {eps:g} | {len(g)} | "
                         f"{g[0]['reason'].replace('|', '/')} |")
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
