"""Issues 3 (part 7) and 11: the SPIDER-family experiment on real data.

IJCNN1 and a9a (``../shared/data``, read in place) with the non-convex losses
``sigmoid-l2`` and ``logistic-nonconvex-reg``; eps in {0.25, 0.5, 1, 2, 4},
delta = 1/n; seeds 0..4; algorithms dp-sgd, dp-gd, dp-spider, adaptive-spider
(each SPIDER method with ``gaussian`` and with ``tree`` noise) and
perturbed-sgd (both noises).  Every run goes through
:func:`dpreg.pipeline.run_pipeline` with the algorithms' default parameters,
so the table measures what ``dpreg run`` does.  Metrics (evaluation only,
after each run): final |grad F^| on the training set, lambda_min of the
training Hessian, test accuracy on the held-out split, records used, wall
time of the algorithm (``timing.run_s``).

One command regenerates everything::

    python benchmarks/experiments_sosp.py            # run what is missing, write the page
    python benchmarks/experiments_sosp.py --render   # only rebuild docs/experiments-sosp.md

Raw records (one JSON line per run, keyed by data/loss/algo/noise/eps/seed)
go to ``--raw`` (default ``$DPREG_BENCH_DIR/experiments-sosp.jsonl``,
``$DPREG_BENCH_DIR`` defaulting to ``/tmp/dpreg-bench``), so an interrupted
run resumes.  The svmlight files are parsed once and cached as .npz in the
same directory (outside the repository).  Algorithms not registered yet are
skipped and listed on the page.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DATASETS = {  # name: (train file, test file)
    "ijcnn1": ("ijcnn1.trn.bz2", "ijcnn1.tst.bz2"),
    "a9a": ("adult.trn.bz2", "adult.tst.bz2"),
}
LOSSES = ("sigmoid-l2", "logistic-nonconvex-reg")
EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0)
SEEDS = 5
#: (algorithm, noise or None)
METHODS = (
    ("dp-sgd", None),
    ("dp-gd", None),
    ("dp-spider", "gaussian"),
    ("dp-spider", "tree"),
    ("adaptive-spider", "gaussian"),
    ("adaptive-spider", "tree"),
    ("perturbed-sgd", "gaussian"),
    ("perturbed-sgd", "tree"),
    # tree vs gaussian with everything else held equal: literal eps in alpha, b, b_t and kappa
    ("adaptive-spider[noise_aware=false]", "gaussian"),
    ("adaptive-spider[noise_aware=false]", "tree"),
)
#: methods that make many passes over the data (ERM) vs one pass (population)
ERM = ("dp-sgd", "dp-gd", "dp-spider")
DOC = ROOT / "docs" / "experiments-sosp.md"
COMMAND = "python benchmarks/experiments_sosp.py"


def bench_dir() -> Path:
    p = Path(os.environ.get("DPREG_BENCH_DIR", "/tmp/dpreg-bench"))
    p.mkdir(parents=True, exist_ok=True)
    return p


def cached_npz(fname: str, n_features: int | None = None) -> tuple[str, int]:
    """Path of an .npz copy of ``../shared/data/fname`` in the bench dir
    (parsed once; the repository never holds data) and its feature count."""
    src = SHARED / fname
    if not src.exists():
        raise SystemExit(f"{src} not found (real data lives in ../shared/data beside the checkout)")
    dst = bench_dir() / (fname.replace(".bz2", "") + (f".d{n_features}" if n_features else "") + ".npz")
    if not dst.exists():
        from dpreg.data import load_file

        X, y = load_file(str(src), n_features=n_features)
        X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
        tmp = dst.with_suffix(".tmp.npz")
        np.savez(tmp, X=X, y=y)
        os.replace(tmp, dst)
    with np.load(dst) as z:
        d = z["X"].shape[1]
    return str(dst), d


def data_paths(name: str) -> tuple[str, str]:
    trn, tst = DATASETS[name]
    train, d = cached_npz(trn)
    test, _ = cached_npz(tst, n_features=d)
    return train, test


def key(r: dict) -> tuple:
    return (r["data"], r["loss"], r["algo"], r["noise"] or "-", float(r["epsilon"]), int(r["seed"]))


def load_raw(path: Path) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out[key(r)] = r
    return out


def run_one(data: str, loss: str, algo: str, noise: str | None, eps: float, seed: int) -> dict:
    from dpreg.errors import DpregError
    from dpreg.pipeline import RunConfig, run_pipeline

    train, test = data_paths(data)
    row = {"data": data, "loss": loss, "algo": algo, "noise": noise, "epsilon": eps, "seed": seed}
    name, _, fixed = algo.partition("[")  # "algo[k=v,...]": a variant with parameters fixed
    params = dict(kv.split("=", 1) for kv in fixed.rstrip("]").split(",") if kv)
    t0 = time.perf_counter()
    try:
        rec = run_pipeline(RunConfig(algo=name, noise=noise, loss=loss, data=train, test_data=test,
                                     epsilon=eps, delta=None, seed=seed, params=params))
    except DpregError as exc:  # a refused configuration is a result too
        row.update(error=str(exc), wall_s=time.perf_counter() - t0)
        return row
    m = rec["diagnostics"]["metrics"]
    row.update(
        n=rec["diagnostics"]["problem"]["n"], d=rec["diagnostics"]["problem"]["d"], delta=rec["release"]["config"]["delta"],
        eps_spent=rec["diagnostics"]["privacy"]["epsilon_spent"],
        grad_norm=m["train_grad_norm"], lambda_min=m["train_lambda_min"], train_loss=m["train_loss"],
        test_accuracy=m.get("test_accuracy"), train_accuracy=m.get("train_accuracy"),
        records_used=rec["diagnostics"]["usage"]["records_used"], grad_evals=rec["diagnostics"]["usage"]["gradient_evaluations"],
        iterations=rec["diagnostics"]["usage"]["iterations"], run_s=rec["diagnostics"]["timing"]["run_s"],
        wall_s=time.perf_counter() - t0,
        info={k: v for k, v in rec["diagnostics"]["run_info"].items()
              if isinstance(v, (int, float, str, bool)) and k in
              ("noise_multiplier", "certified", "escape_tests", "escapes", "o1_queries", "o2_queries",
               "batch1", "batch2", "batch", "steps", "alpha", "stop_reason", "phases", "kappa", "batch_o1",
               "batch_o2_mean")},
    )
    return row


# ----------------------------------------------------------------- rendering
def _mean_sd(vals):
    a = np.asarray([v for v in vals if v is not None], dtype=float)
    if a.size == 0:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def _label(algo, noise):
    return f"{algo} ({noise})" if noise else algo


def summarize(raw: dict[tuple, dict]):
    """{(data, loss, algo, noise, eps): aggregated metrics over seeds}."""
    groups = defaultdict(list)
    for k, r in raw.items():
        groups[k[:5]].append(r)
    agg = {}
    for k, rows in groups.items():
        ok = [r for r in rows if "error" not in r]
        a = {"seeds": len(ok), "errors": [r["error"] for r in rows if "error" in r]}
        for m in ("grad_norm", "lambda_min", "test_accuracy", "records_used", "run_s", "eps_spent", "train_loss"):
            a[m] = _mean_sd([r.get(m) for r in ok])
        agg[k] = a
    return agg


def _fmt(x, spec):
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def reference_at_zero(dset: str, loss: str) -> dict | None:
    """|grad F^| and lambda_min at the common start w = 0 (every algorithm here
    starts there) and the test set's majority-class rate; None without data."""
    try:
        from dpreg import metrics
        from dpreg.data import prepare
        from dpreg.problem import Problem
        from dpreg.registry import get_registry

        lo = get_registry().get("loss", loss)
        train, test = data_paths(dset)
        with np.load(train) as f:
            X, y = prepare(f["X"], f["y"], labels=lo.labels, where=dset)
        with np.load(test) as f:
            Xt, yt = prepare(f["X"], f["y"], labels=lo.labels, where=dset)
    except (SystemExit, OSError):
        return None
    pb, w = Problem(lo, X, y), np.zeros(X.shape[1])
    return {"grad_norm": float(np.linalg.norm(pb.gradient(w))), "lambda_min": metrics.lambda_min(pb, w),
            "majority": float(max(np.mean(yt > 0), np.mean(yt < 0)))}


_FSTAR: dict = {}


def reference_optimum(dset: str, loss: str, iters: int = 4000) -> tuple[float, float] | None:
    """(F^*, |grad F^| there): the smallest training loss non-private full-batch
    gradient descent from w = 0 (step 1/M, ``iters`` steps) reaches - a local
    minimum for a non-convex loss; used only as the reference of F(w) - F^*."""
    if (dset, loss) in _FSTAR:
        return _FSTAR[(dset, loss)]
    try:
        from dpreg.data import prepare
        from dpreg.problem import Problem
        from dpreg.registry import get_registry

        lo = get_registry().get("loss", loss)
        train, _ = data_paths(dset)
        with np.load(train) as f:
            X, y = prepare(f["X"], f["y"], labels=lo.labels, where=dset)
    except (SystemExit, OSError):
        return None
    pb = Problem(lo, X, y)
    _, M, _ = pb.constants()
    w = np.zeros(X.shape[1])
    for _ in range(iters):
        w = w - pb.gradient(w) / M
    _FSTAR[(dset, loss)] = (float(pb.value(w)), float(np.linalg.norm(pb.gradient(w))))
    return _FSTAR[(dset, loss)]


def tree_vs_gaussian(agg) -> list[str]:
    """Per SPIDER method: in how many (data, loss, eps) cells tree noise gives
    a smaller mean |grad F| / higher mean test accuracy than gaussian."""
    lines = []
    for algo in ("dp-spider", "adaptive-spider", "perturbed-sgd", "adaptive-spider[noise_aware=false]"):
        cells = [(k[0], k[1], k[4]) for k in agg if k[2] == algo and k[3] == "gaussian"]
        both = [c for c in cells if (c[0], c[1], algo, "tree", c[2]) in agg]
        if not both:
            continue
        g_win = a_win = a_tie = 0
        ratios = []
        for dset, loss, eps in both:
            g = agg[(dset, loss, algo, "gaussian", eps)]
            t = agg[(dset, loss, algo, "tree", eps)]
            if t["grad_norm"][0] < g["grad_norm"][0]:
                g_win += 1
            if g["grad_norm"][0] > 0:
                ratios.append(t["grad_norm"][0] / g["grad_norm"][0])
            if abs(t["test_accuracy"][0] - g["test_accuracy"][0]) < 5e-4:
                a_tie += 1
            elif t["test_accuracy"][0] > g["test_accuracy"][0]:
                a_win += 1
        med = float(np.median(ratios)) if ratios else float("nan")
        lines.append(f"| {algo} | {len(both)} | {g_win} | {med:.2f} | {a_win} | {a_tie} |")
    return lines


def findings(agg) -> list[str]:
    """Sentences computed from the tables (every number below is a mean in them)."""
    out = []
    for dset, loss, eps in sorted({(k[0], k[1], k[4]) for k in agg}):
        def g(algo, noise):
            a = agg.get((dset, loss, algo, noise, eps))
            return a["grad_norm"][0] if a and a["seeds"] else None
        sgd = g("dp-sgd", "-")
        for noise in ("gaussian", "tree"):
            sp = g("dp-spider", noise)
            if sgd and sp:
                out.append(f"- {dset}, {loss}, ε = {eps:g}: dp-spider ({noise}) ends with ‖∇F̂‖ = {sp:.4f}, "
                           f"{sp / sgd:.2f}× dp-sgd's {sgd:.4f}.")
        if loss == "sigmoid-l2":
            below = sorted(_label(k[2], None if k[3] == "-" else k[3]) for k, a in agg.items()
                           if k[:2] == (dset, loss) and k[4] == eps and a["seeds"] and a["grad_norm"][0] <= 1e-3)
            above = sorted(_label(k[2], None if k[3] == "-" else k[3]) for k, a in agg.items()
                           if k[:2] == (dset, loss) and k[4] == eps and a["seeds"] and a["grad_norm"][0] > 1e-3)
            out.append(f"- {dset}, sigmoid-l2, ε = {eps:g}: mean ‖∇F̂‖ ≤ 10⁻³ for "
                       f"{', '.join(below) or 'no method'}; above it for {', '.join(above) or 'no method'}.")
        ref = reference_optimum(dset, loss) if loss == "logistic-nonconvex-reg" else None
        sgd_a = agg.get((dset, loss, "dp-sgd", "-", eps))
        if ref and sgd_a and sgd_a["seeds"]:
            fstar, gstar = ref
            gap_sgd = sgd_a["train_loss"][0] - fstar
            parts = []
            for k, a in sorted(agg.items()):
                if k[:2] == (dset, loss) and k[4] == eps and a["seeds"] and k[2] != "dp-sgd":
                    gap = a["train_loss"][0] - fstar
                    parts.append(f"{_label(k[2], None if k[3] == '-' else k[3])} {gap:.4f} "
                                 f"({gap / gap_sgd:.1f}×)" if gap_sgd > 0 else f"{_label(k[2], k[3])} {gap:.4f}")
            out.append(f"- {dset}, {loss}, ε = {eps:g}: optimality gap F̂(w) − F̂* (F̂* = {fstar:.5f}, reached by "
                       f"non-private gradient descent, ‖∇F̂‖ = {gstar:.1e} there): dp-sgd {gap_sgd:.4f}; "
                       + "; ".join(parts) + " (× = ratio to dp-sgd's gap).")
        lam = [a["lambda_min"][0] for k, a in agg.items() if k[:2] == (dset, loss) and k[4] == eps and a["seeds"]]
        if lam:
            out.append(f"- {dset}, {loss}, ε = {eps:g}: the smallest mean λ_min of any method is {min(lam):.2e} "
                       f"(no returned point has negative curvature: nothing here separates second-order from first-order methods).")
    return out


def render(raw: dict[tuple, dict], meta: dict) -> str:
    agg = summarize(raw)
    out = ["# SPIDER-family experiment: IJCNN1 and a9a (issues 3 and 11)", "",
           f"Regenerate with `{COMMAND}{meta.get('args', '')}` (runs what is missing, then rewrites this page; "
           f"`--render` only rewrites it).  Generated {time.strftime('%Y-%m-%d %H:%M')} "
           f"by `benchmarks/experiments_sosp.py`; every sentence below is computed from the tables.", "",
           "Setup: training split `../shared/data/*.trn.bz2`, test split `*.tst.bz2`; every record scaled "
           "into the unit ball on its own; delta = 1/n; every algorithm with its default parameters "
           "(`dpreg info NAME`), run through `dpreg.pipeline.run_pipeline`; mean ± sd over "
           f"{meta.get('seeds', SEEDS)} seeds.  ‖∇F̂‖ and λ_min are of the *training* (empirical) objective at "
           "the returned point (evaluation only); accuracy is on the test split, in %.  Two kinds of method "
           "are in separate tables and should not be ranked against each other on ‖∇F̂‖: **ERM, many "
           "passes** (dp-sgd, dp-gd, dp-spider: practical step sizes, the empirical loss is their objective; "
           "the records column counts *record-uses* summed over all steps) and **single pass, population** "
           "(adaptive-spider, perturbed-sgd: each record used at most once, theory-derived constants, the "
           "population loss is their objective; the records column counts *distinct records*).  "
           "`adaptive-spider[noise_aware=false]` puts the literal ε in α, b, b_t and κ, so its gaussian and "
           "tree rows share α, κ and batch sizes: the only controlled tree-vs-gaussian comparison here.  "
           "time = the algorithm's run in seconds (no data loading, compilation or evaluation), "
           f"{meta.get('threads', 1)} numba thread(s) per run, {meta.get('jobs', 2)} runs in "
           "parallel on 2 CPU cores shared with other work: compare times within a table, not as absolutes.", ""]
    if meta.get("reduced"):
        out += [f"**Reduced grid**: {meta['reduced']}", ""]
    if meta.get("missing"):
        out += [f"Not registered when this page was generated (skipped): {', '.join(meta['missing'])}.", ""]
    errors = [(k, a["errors"]) for k, a in agg.items() if a["errors"]]
    tv = tree_vs_gaussian(agg)
    out += ["## Does tree noise beat Gaussian noise at equal ε?", "",
            "Cells = (data set, loss, ε) combinations; \"tree wins ‖∇F̂‖\" counts cells where the mean "
            "gradient norm with `--noise tree` is smaller; the ratio is tree/gaussian mean ‖∇F̂‖ "
            "(median over cells); accuracy ties are differences < 0.05 points.  Only the "
            "`[noise_aware=false]` row holds α, κ and the batches equal; in the others z also moves them.", "",
            "| method | cells | tree wins ‖∇F̂‖ | median ‖∇F̂‖ ratio tree/gauss | tree wins acc | acc ties |",
            "|---|---|---|---|---|---|"] + (tv or ["| (no SPIDER runs yet) | | | | | |"])
    out += ["", "## Findings (computed from the tables)", ""] + (findings(agg) or ["- (no runs)"]) + [""]
    for dset in DATASETS:
        for loss in LOSSES:
            keys = [k for k in agg if k[0] == dset and k[1] == loss]
            if not keys:
                continue
            any_row = next(r for r in raw.values() if r["data"] == dset and "n" in r) if any(
                r["data"] == dset and "n" in r for r in raw.values()) else {}
            out += [f"## {dset}, {loss}" + (f" (n = {any_row['n']}, d = {any_row['d']})" if any_row else ""), ""]
            z = reference_at_zero(dset, loss)
            for title, erm, unit in (("ERM, many passes", True, "record-uses"),
                                     ("single pass, population", False, "distinct records")):
                rows = []
                for algo, noise in METHODS:
                    if (algo.partition("[")[0] in ERM) != erm:
                        continue
                    for eps in EPSILONS:
                        k = (dset, loss, algo, noise or "-", eps)
                        if k not in agg:
                            continue
                        a = agg[k]
                        if a["seeds"] == 0:
                            rows.append(f"| {_label(algo, noise)} | {eps:g} | error: {a['errors'][0]} | | | | |")
                            continue
                        g, gs = a["grad_norm"]
                        lm, _ = a["lambda_min"]
                        acc, accs = a["test_accuracy"]
                        rec, _ = a["records_used"]
                        rs, _ = a["run_s"]
                        rows.append(f"| {_label(algo, noise)} | {eps:g} | {_fmt(g, '.4f')} ± {_fmt(gs, '.4f')} | "
                                    f"{_fmt(lm, '.2e')} | {_fmt(100 * acc, '.2f')} ± {_fmt(100 * accs, '.2f')} | "
                                    f"{_fmt(rec, ',.0f')} | {_fmt(rs, '.2f')} |")
                if not rows:
                    continue
                out += [f"### {title}", "",
                        f"| method | ε | ‖∇F̂‖ | λ_min | test acc (%) | {unit} | time (s) |",
                        "|---|---|---|---|---|---|---|"]
                if z:
                    out.append(f"| *start w = 0 (acc: majority class)* | | {z['grad_norm']:.4f} | "
                               f"{z['lambda_min']:.2e} | {100 * z['majority']:.2f} | | |")
                out += rows + [""]
    if errors:
        out += ["## Refused or failed runs", ""] + [f"- {k}: {e[0]}" for k, e in errors[:40]] + [""]
    out += [f"Total runs: {len(raw)}; total algorithm time {sum(r.get('run_s', 0) for r in raw.values()):.0f} s, "
            f"total wall time {sum(r.get('wall_s', 0) for r in raw.values()):.0f} s "
            f"(2 shared CPU cores; timings are noisy)."]
    return "\n".join(out) + "\n"


def write_doc(text: str, path: Path) -> None:
    """Write the page (wholly generated: no hand-written part is kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=SEEDS, help="seeds 0..S-1 [5]")
    ap.add_argument("--eps", default=",".join(f"{e:g}" for e in EPSILONS), help="comma-separated epsilons")
    ap.add_argument("--data", default=",".join(DATASETS), help="comma-separated: ijcnn1,a9a")
    ap.add_argument("--losses", default=",".join(LOSSES))
    ap.add_argument("--algos", default=None, help="comma-separated algorithm names (default: all)")
    ap.add_argument("--raw", default=None, help="JSON-lines results file (resumable)")
    ap.add_argument("--out", default=str(DOC), help="markdown page to write")
    ap.add_argument("--render", action="store_true", help="only rebuild the page from the raw results")
    ap.add_argument("--fresh", action="store_true", help="ignore (and overwrite) earlier raw results")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes [2]")
    ap.add_argument("--reduced", default="", help="sentence saying how the grid was reduced (printed on the page)")
    ap.add_argument("--threads", type=int, default=1,
                    help="numba threads per worker [1]: small kernels on shared cores run faster serially")
    args = ap.parse_args(argv)
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)  # before numba is imported (dpreg imports it lazily)
    raw_path = Path(args.raw) if args.raw else bench_dir() / "experiments-sosp.jsonl"
    if args.fresh and raw_path.exists():
        raw_path.unlink()
    raw = load_raw(raw_path)
    from dpreg.registry import get_registry

    reg = get_registry()
    have_algos, have_noise = set(reg.names("algorithm")), set(reg.names("noise"))
    wanted_algos = set(args.algos.split(",")) if args.algos else None
    base = lambda a: a.partition("[")[0]  # noqa: E731  (a variant "algo[k=v]" runs algo)
    methods = [(a, nz) for a, nz in METHODS if wanted_algos is None or a in wanted_algos or base(a) in wanted_algos]
    missing = sorted({_label(a, nz) for a, nz in methods
                      if base(a) not in have_algos or (nz and nz not in have_noise)})
    methods = [(a, nz) for a, nz in methods if base(a) in have_algos and (nz is None or nz in have_noise)]
    eps_list = [float(e) for e in args.eps.split(",")]
    seeds = range(args.seeds)
    if not args.render:
        todo = [(dset, loss, a, nz, e, s) for dset in args.data.split(",") for loss in args.losses.split(",")
                for a, nz in methods for e in eps_list for s in seeds
                if (dset, loss, a, nz or "-", e, s) not in raw]
        t0 = time.perf_counter()
        for dset in {j[0] for j in todo}:
            data_paths(dset)  # parse + cache once, before the workers start
        from concurrent.futures import ProcessPoolExecutor

        with raw_path.open("a") as fh, ProcessPoolExecutor(max(1, args.jobs)) as pool:
            futures = {pool.submit(run_one, *job): job for job in todo}
            from concurrent.futures import as_completed

            for i, fut in enumerate(as_completed(futures), 1):
                job = futures[fut]
                row = fut.result()
                raw[key(row)] = row
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                msg = row.get("error") or (f"|grad|={row['grad_norm']:.4f} acc={row['test_accuracy']:.4f} "
                                           f"run {row['run_s']:.2f}s")
                print(f"[{i}/{len(todo)} {time.perf_counter() - t0:.0f}s] {job}: {msg}", flush=True)
    sel = {k: r for k, r in raw.items()
           if k[0] in args.data.split(",") and k[1] in args.losses.split(",") and k[4] in eps_list
           and k[5] < args.seeds and any(k[2] == a and k[3] == (nz or "-") for a, nz in methods)}
    import shlex

    cli = shlex.join(argv if argv is not None else sys.argv[1:])
    write_doc(render(sel, {"seeds": args.seeds, "missing": missing, "jobs": args.jobs, "reduced": args.reduced,
                           "threads": args.threads, "args": (" " + cli) if cli else ""}), Path(args.out))
    print(f"wrote {args.out} ({len(sel)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
