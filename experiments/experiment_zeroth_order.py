"""Private zeroth-order O2NC (zhang-tran-cutkosky-2024; the paper has no
experiments): IJCNN1 and a9a with the non-smooth ``ramp`` loss and the smooth
control ``sigmoid-l2``, eps in {1, 2, 4, 8} and non-private, delta = 1/M.

Methods (all records of the training file, single pass; ``--seeds`` seeds):
* ``vr+tree``     zo-o2nc, oracle=vr, noise=tree (the paper: Algs 3-5)
* ``vr+gaussian`` zo-o2nc, oracle=vr, noise=gaussian
* ``vr+tree-honaker``, ``vr+sqrt-factorization`` (``--mechanisms``): the other
  running-sum mechanisms
* ``naive``       zo-o2nc, oracle=naive (App. E, Alg 6)
* ``dp-sgd``      first-order DP-SGD (add-remove, Poisson batches, its defaults)
                  on the smooth surrogate sigmoid-l2, evaluated on the row's loss
Every zo-o2nc run uses zo-o2nc's defaults (``--preset practical``, the
default, or ``--preset theory``: Thm 4.9 / App. E with h = 0.1, L = G = 1 for
ramp, F = 1); non-private = the same run with no noise (theory: T from the
non-private term alone).

Metrics, after the run, on the training data (non-private diagnostics):
the Goldstein proxy |(1/T) sum_t grad F(w^k_t)| (spec (b)): it bounds
|grad F(w-bar^k)|_h since |w_t - w-bar^k| <= h (T D <= h); estimated from 16
evenly spaced iterates of each block; reported at the output block k and as
the minimum over k; the loss and accuracy of the output.  For dp-sgd the
proxy column is |grad F(w)| at its output.  Tables give the mean (and sd)
over seeds.

    nice python experiments/experiment_zeroth_order.py --seeds 3   # writes docs/experiment-zeroth-order.json
    nice python experiments/experiment_zeroth_order.py --quick     # ijcnn1 ramp, eps 4 only, one seed
    python experiments/experiment_zeroth_order.py --table docs/experiment-zeroth-order.json
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
EPSILONS = (1.0, 2.0, 4.0, 8.0)
#: (data, loss) -> epsilons (non-private always added): the full grid
GRID = {("ijcnn1", "ramp"): EPSILONS, ("ijcnn1", "sigmoid-l2"): EPSILONS,
        ("adult", "ramp"): EPSILONS, ("adult", "sigmoid-l2"): EPSILONS}
PROXY_POINTS = 16


class _Exact:
    """Non-private stand-ins: a 'mechanism' that releases the exact running
    sum and an accountant that charges nothing (experiment only)."""

    class Mechanism:
        name = "none"

        def __init__(self, *, dim, noise_multiplier, horizon, accountant, seed):
            self.dim = dim
            self.reset()

        def reset(self):
            self._sum = np.zeros(self.dim)

        def add(self, increment, sensitivity, participation):
            self._sum = self._sum + increment
            return self._sum.copy()

    class Accountant:
        relation = "replace-one"
        sensitivity_factor = 2.0
        epsilon_budget = 1e12
        delta = 1e-5
        epsilon_spent = 0.0

        def calibrate(self, make_event, **kw):
            return 1.0


def load(name):
    """Rows scaled to |x| <= 1 plus the intercept column, as ``dpreg run``
    does by default: (X, y, row bound)."""
    from dpreg.data import load_file, prepare
    from dpreg.preprocess import Preprocessing

    X, y, _ = load_file(str(DATA / f"{name}.trn.bz2"))
    X, y = prepare(X, y, labels="binary", where=name)
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=float)
    prep = Preprocessing(X.shape[1], "none", intercept=True)
    return prep.transform(X, where=name), y, prep.row_bound


def proxy(pb, blocks):
    """Goldstein proxy of every block: |mean of grad F at PROXY_POINTS
    evenly spaced iterates of the block|."""
    out = []
    for its in blocks:
        sel = np.unique(np.linspace(0, len(its) - 1, min(PROXY_POINTS, len(its))).astype(int))
        g = np.mean([pb.gradient(its[t]) for t in sel], axis=0)
        out.append(float(np.linalg.norm(g)))
    return out


def run_zo(pb, eps, oracle, noise, seed=0, preset="practical"):
    from dpreg.accounting import RdpAccountant
    from dpreg.params import bind
    from dpreg.registry import get_registry
    from dpreg_plugins.algorithms.zo_o2nc import ZoO2NC, default_block_length

    reg = get_registry()
    given = {"oracle": oracle, "preset": preset}
    if eps is None:
        acc = _Exact.Accountant()
        noise_cls = _Exact.Mechanism
        if preset == "theory":
            given["block_length"] = default_block_length(pb.n, pb.d, pb.constants()[0], 0.1, 1.0, math.inf,
                                                         oracle)
    else:
        acc = RdpAccountant(eps, 1.0 / pb.n, "replace-one")
        noise_cls = reg.get("noise", noise)
    algo = ZoO2NC(pb, bind(ZoO2NC.params, given, "zo-o2nc"), noise=noise_cls, accountant=acc, seed=seed)
    algo.keep_iterates = True
    t0 = time.process_time()
    out = algo.run()
    cpu = time.process_time() - t0
    traj = out.info["trajectory"]
    k = next(i for i, v in enumerate(traj.iterates[1:], start=0) if np.array_equal(v, out.w))
    px = proxy(pb, algo.block_iterates)
    return {"w": out.w, "proxy_chosen": px[k], "proxy_min": min(px), "chosen_block": k + 1,
            "T": out.info["block_length"], "K": out.info["blocks"], "z": out.info["noise_multiplier"],
            "node_std": out.info["noise_std_max_node"], "eps_spent": acc.epsilon_spent,
            "clipped": out.info["clipped_terms"], "cpu_s": cpu}


def run_dpsgd(pb, surrogate, eps, seed=0):
    from dpreg.accounting import RdpAccountant
    from dpreg.params import bind
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry

    reg = get_registry()
    cls = reg.get("algorithm", "dp-sgd")
    spb = make_problem(reg.get("loss", surrogate), pb.X, pb.y, row_bound=pb.row_bound)
    acc = RdpAccountant(eps, 1.0 / pb.n, cls.relation)
    t0 = time.process_time()
    out = cls(spb, bind(cls.params, {}, "dp-sgd"), noise=None, accountant=acc, seed=seed).run()
    cpu = time.process_time() - t0
    g = float(np.linalg.norm(pb.gradient(out.w)))
    return {"w": out.w, "proxy_chosen": g, "proxy_min": None, "eps_spent": acc.epsilon_spent, "cpu_s": cpu}


def _partial(out, rows):
    """Write what is done so far (without the weights) next to ``out``."""
    Path(out + ".partial").write_text(json.dumps([{k: v for k, v in r.items() if k != "w"} for r in rows]))


def _cell(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return ""
    if len(vals) == 1:
        return format(vals[0], fmt)
    return f"{format(float(np.mean(vals)), fmt)} ± {format(float(np.std(vals)), fmt)}"


def table(rows) -> str:
    """Markdown table of the rows: one line per (data, loss, eps, method),
    mean ± sd over the seeds run (grouped by data set and loss)."""
    out = []
    key = None
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["data"], r["loss"], r["eps"] is None, r["eps"] or 0.0, r["method"]), []).append(r)
    order = []
    for r in rows:
        g = (r["data"], r["loss"], r["eps"] is None, r["eps"] or 0.0, r["method"])
        if g not in order:
            order.append(g)
    for g in order:
        rs = groups[g]
        r = rs[0]
        if (r["data"], r["loss"]) != key:
            key = (r["data"], r["loss"])
            out += ["", f"**{r['data']}, {r['loss']}** (loss at w = 0: {r['loss_at_0']:.4f}; "
                    f"majority-class accuracy {r['majority_accuracy']:.3f})", "",
                    "| eps | method | seeds | T | K | node std | proxy at output | min proxy over k | loss | "
                    "accuracy | CPU s |",
                    "|---|---|---|---|---|---|---|---|---|---|---|"]
        eps = "non-private" if r["eps"] is None else f"{r['eps']:g}"
        ns = "" if r.get("node_std") is None or r["eps"] is None else f"{np.mean([x['node_std'] for x in rs]):.3g}"
        out.append(f"| {eps} | {r['method']} | {len(rs)} | {r.get('T', '') or ''} | {r.get('K', '') or ''} | {ns} | "
                   f"{_cell([x['proxy_chosen'] for x in rs], '.4f')} | "
                   f"{_cell([x.get('proxy_min') for x in rs], '.4f')} | "
                   f"{_cell([x['loss_value'] for x in rs], '.4f')} | {_cell([x['accuracy'] for x in rs], '.3f')} | "
                   f"{np.mean([x['cpu_s'] for x in rs]):.1f} |")
    return "\n".join(out)


def main():
    from dpreg.metrics import accuracy
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--preset", default="practical", choices=("practical", "theory"))
    ap.add_argument("--data", default="ijcnn1,adult", help="comma-separated subset of the grid's data sets")
    ap.add_argument("--losses", default="ramp,sigmoid-l2", help="comma-separated subset of the grid's losses")
    ap.add_argument("--merge", nargs="*", default=(), metavar="JSON",
                    help="with --table: also print the rows of these results files (partial runs merged)")
    ap.add_argument("--mechanisms", default="", help="extra vr noise mechanisms, e.g. tree-honaker,sqrt-factorization")
    ap.add_argument("--out", default=str(ROOT / "docs" / "experiment-zeroth-order.json"))
    ap.add_argument("--table", metavar="JSON", help="print the markdown table of a results file and exit")
    args = ap.parse_args()
    if args.table:
        rows = [r for f in (args.table, *args.merge) for r in json.loads(Path(f).read_text())]
        print(table([r for r in rows if "loss_value" in r]))  # rows of an unfinished (data, loss) are left out
        return
    reg = get_registry()
    rows = []
    keep = set(args.data.split(","))
    losses = set(args.losses.split(","))
    grid = ({("ijcnn1", "ramp"): (4.0,)} if args.quick
            else {k: v for k, v in GRID.items() if k[0] in keep and k[1] in losses})
    seeds = range(1 if args.quick else args.seeds)
    extra = [m for m in args.mechanisms.split(",") if m]
    loaded = {}
    for (data, loss), epsilons in grid.items():
        if data not in loaded:
            loaded[data] = load(data)
        X, y, R = loaded[data]
        pb = make_problem(reg.get("loss", loss), X, y, name=data, row_bound=R)
        f0 = pb.value(np.zeros(pb.d))
        start = len(rows)
        for eps in (None,) + tuple(epsilons):
            methods = [("vr+tree", "vr", "tree"), ("naive", "naive", "tree")]
            if eps is not None:
                methods[1:1] = [("vr+gaussian", "vr", "gaussian")] + [(f"vr+{m}", "vr", m) for m in extra]
            for seed in seeds:
                for label, oracle, noise in methods:
                    r = run_zo(pb, eps, oracle, noise, seed=seed, preset=args.preset)
                    r.update(data=data, loss=loss, eps=eps, method=label, seed=seed)
                    rows.append(r)
                    print(json.dumps({k: v for k, v in r.items() if k != "w"}), flush=True)
                    _partial(args.out, rows)
                if eps is not None:
                    r = run_dpsgd(pb, "sigmoid-l2", eps, seed=seed)
                    r.update(data=data, loss=loss, eps=eps, method="dp-sgd (sigmoid-l2)", seed=seed)
                    rows.append(r)
                    print(json.dumps({k: v for k, v in r.items() if k != "w"}), flush=True)
        for r in rows[start:]:
            r["loss_value"] = float(pb.value(r["w"]))
            r["loss_at_0"] = float(f0)
            r["accuracy"] = float(accuracy(pb, r["w"]))
            r["majority_accuracy"] = float(max(np.mean(pb.y > 0), np.mean(pb.y < 0)))
        _partial(args.out, rows)
    for r in rows:
        r.pop("w")
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
