"""Experiment pages as pure functions of a ``dpreg sweep`` results table.

    dpreg sweep experiments/sweeps/sosp.toml --out-dir D
    python experiments/render_pages.py sosp D/results.json > docs/experiments-sosp.md

    dpreg sweep experiments/sweeps/warm-start.toml --out-dir W
    python experiments/render_pages.py warm-start W/results.json > docs/experiment-warm-start.md

Each page is computed from the table alone (no data is read, nothing is run,
no clock or host is printed): the same table renders the same page.  Every
comparative sentence is generated from the numbers in the page's tables.  A
table that lacks a column a page needs (one written by an older dpreg) is
refused with one line naming the columns; rerunning the same ``dpreg sweep``
command rebuilds the table from the finished records without running them.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

#: columns every page reads
BASE_COLUMNS = ("algo", "noise", "loss", "data", "epsilon", "delta", "status", "error")
SOSP_COLUMNS = BASE_COLUMNS + (
    "n", "d", "data_access", "noise_multiplier", "iterations", "records_used", "gradient_evaluations", "alpha",
    "kappa", "batch1", "batch2", "o1_refreshes", "escape_tests", "test_accuracy", "train_loss", "train_grad_norm",
    "train_lambda_min", "train_grad_norm_at_zero", "test_majority_rate", "nonprivate_train_loss", "run_s")
WARM_COLUMNS = BASE_COLUMNS + (
    "params", "n", "d", "iterations", "epsilon_spent", "train_grad_norm", "test_grad_norm", "train_grad_norm_at_zero",
    "test_grad_norm_at_zero", "run_s")


class TableError(Exception):
    """The table cannot render the page (one line)."""


# --------------------------------------------------------------------------- table helpers
def load_table(path: str, needed: tuple[str, ...]) -> list[dict]:
    """The rows of a sweep's results.json (or of DIR/results.json); raises
    TableError (one line) if it is unreadable, empty or lacks a column in ``needed``."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    try:
        rows = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TableError(f"cannot read {p}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise TableError(f"{p} is not JSON: {exc}") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise TableError(f"{p} is not a sweep table (a non-empty list of rows)")
    missing = [c for c in needed if any(c not in r for r in rows)]
    if any(r.get("seed") is None and r.get("replicate") is None for r in rows):
        missing.append("seed or replicate")
    if missing:
        raise TableError(f"{p} lacks column(s) {', '.join(missing)} needed by this page: rebuild it by rerunning "
                         f"the same `dpreg sweep CONFIG --out-dir DIR` with this dpreg (finished cells are not rerun)")
    return rows


def _vals(rows, col):
    return [float(r[col]) for r in rows if isinstance(r.get(col), (int, float)) and math.isfinite(r[col])]


def mean(rows, col):
    v = _vals(rows, col)
    return sum(v) / len(v) if v else None


def sd(rows, col):
    v = _vals(rows, col)
    if len(v) < 2 or min(v) == max(v):
        return 0.0 if v else None
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def se(rows, col):
    s = sd(rows, col)
    return None if s is None else s / math.sqrt(len(_vals(rows, col)))


def num(x, kind="g"):
    """One number as the page prints it (the sentences use the same strings)."""
    if x is None:
        return "—"
    if kind == "int":
        return f"{x:,.0f}"
    if kind == "pct":
        return f"{100 * x:.2f}"
    if kind == "e":
        return f"{x:.2e}"
    if kind == "ratio":
        return f"{x:.2f}"
    return f"{x:.4f}" if abs(x) >= 1e-3 or x == 0 else f"{x:.1e}"


def label(r) -> str:
    return f"{r['algo']} ({r['noise']})" if r.get("noise") else str(r["algo"])


def ordered_groups(rows, key):
    """{key(row): [rows]} in the table's order (the sweep's grid order)."""
    out: dict = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def run_id(r) -> str:
    """A row's run within its cell: ``seed S`` in a seeded sweep, else ``replicate K``."""
    return f"seed {r['seed']}" if r.get("seed") is not None else f"replicate {r['replicate']}"


def _seeds_text(rows) -> str:
    """``seeds 0–4`` (a seeded sweep) or ``replicates 0–4`` (secret randomness)."""
    seeded = all(r.get("seed") is not None for r in rows)
    what = "seeds" if seeded else "replicates (secret randomness)"
    ids = sorted({int(r["seed"] if seeded else r["replicate"]) for r in rows})
    if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"{what} {ids[0]}–{ids[-1]}"
    return f"{what} " + ", ".join(map(str, ids))


def _deltas(rows, spec: str) -> str:
    return ", ".join(sorted({format(float(r["delta"]), spec) for r in rows}))


def _errors_section(rows) -> list[str]:
    bad = [r for r in rows if r["status"] != "ok"]
    if not bad:
        return []
    return ["## Failed cells", ""] + [f"- {r['data']}, {r['loss']}, {label(r)}, ε = {r['epsilon']:g}, "
                                      f"{run_id(r)}: {r['error']}" for r in bad] + [""]


def _minmax(rows, col) -> str:
    v = _vals(rows, col)
    if not v:
        return "—"
    lo, hi = min(v), max(v)
    return f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"


# --------------------------------------------------------------------------- SOSP page
SOSP_SECTIONS = (("resample", "ERM, many passes"), ("single-pass", "single pass, population"))


def render_sosp(rows: list[dict], source: str = "RESULTS") -> str:
    """The SPIDER-family page (docs/experiments-sosp.md) from a sweep table."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise TableError("the table has no finished (ok) cell")
    panels = ordered_groups(ok, lambda r: (r["data"], r["loss"]))
    eps = sorted({float(r["epsilon"]) for r in ok})
    n_seeds = sorted({len(g) for g in ordered_groups(ok, lambda r: (r["data"], r["loss"], label(r),
                                                                     r["epsilon"])).values()})
    L = ["# SPIDER-family experiment on real data", "",
         f"Rendered by `python experiments/render_pages.py sosp {source}` from the results table of "
         "`dpreg sweep experiments/sweeps/sosp.toml` (do not edit by hand).  Every number is a mean (± sd) over "
         "the table's finished seeds of one cell; every comparative sentence is generated from the numbers in "
         "the tables below.", "",
         f"**Grid** (read off the table): data {', '.join(sorted({r['data'] for r in ok}))}; losses "
         f"{', '.join(dict.fromkeys(r['loss'] for r in ok))}; ε ∈ {{{', '.join(f'{e:g}' for e in eps)}}}; "
         f"δ = {_deltas(ok, '.3g')} (the pipeline's default); "
         f"{_seeds_text(ok)} ({'/'.join(map(str, n_seeds))} per method and ε); {len(rows)} cells, "
         f"{len(rows) - len(ok)} failed.  Every algorithm with its default parameters, exactly as `dpreg run` "
         "runs it (`dpreg info NAME`).", "",
         "**Metrics** (diagnostics computed after each run, not released): ‖∇F̂‖ and λ_min are the gradient "
         "norm and the smallest Hessian eigenvalue of the *training* (empirical) objective F̂ at the returned "
         "point; F̂ − F̂_np is its training loss minus that of the pipeline's non-private reference (L-BFGS from "
         "w = 0, at most 200 iterations; a negative value means the private point is lower); "
         "test accuracy is on the official test split, in %; z is the released noise multiplier of the "
         "(first) mechanism; time is the algorithm's run in seconds on 1 numba thread, on 2 CPU cores "
         "shared with other work (compare within a table only).", "",
         "**Two kinds of method, never ranked against each other.**  *ERM, many passes* (the algorithms "
         "whose data access is `resample`: dp-sgd, dp-gd, dp-spider; practical step sizes, the empirical "
         "loss is their objective) and *single pass, population* (data access `single-pass`: "
         "adaptive-spider, perturbed-sgd; every record is used in at most one batch, constants from the "
         "theorems, the population loss is their objective).  Units: the ERM tables count **per-record "
         "gradient evaluations** (a record in a SPIDER difference batch counts twice, at w_t and w_t−1) and "
         "**passes** = evaluations / n; the single-pass tables count **distinct records** used (and their "
         "share of n).  The row *w = 0* is the data-independent output, which costs no privacy and is where "
         "these algorithms start; its accuracy column is the test split's majority-class rate.", ""]
    L += tree_vs_gaussian_section(ok)
    L += ["## Findings (generated from the tables)", ""] + sosp_findings(ok) + [""]
    for (dset, loss), prow in panels.items():
        L += [f"## {dset}, {loss} (n = {num(prow[0]['n'], 'int')}, d = {prow[0]['d']})", ""]
        for access, title in SOSP_SECTIONS:
            sec = [r for r in prow if r["data_access"] == access]
            if sec:
                L += [f"### {title}", ""] + sosp_table(sec, access, prow) + [""]
        other = [r for r in prow if r["data_access"] not in dict(SOSP_SECTIONS)]
        if other:
            L += ["### other", ""] + sosp_table(other, "resample", prow) + [""]
    L += _errors_section(rows)
    L += ["## Reproduce", "",
          "    NUMBA_NUM_THREADS=1 dpreg sweep experiments/sweeps/sosp.toml --workers 2 --out-dir /tmp/dpreg-bench/sosp",
          "    cp /tmp/dpreg-bench/sosp/results.json experiments/results/experiments-sosp.json",
          "    python experiments/render_pages.py sosp experiments/results/experiments-sosp.json > docs/experiments-sosp.md",
          "", "The committed runs are experiments/results/experiments-sosp.json.",
          "", f"Algorithm time over all {len(ok)} finished runs: {sum(_vals(ok, 'run_s')):.0f} s.", ""]
    L += [SADDLE_POINTER, ""]
    return "\n".join(L)


#: one paragraph at the end of the SOSP page: where a saddle does separate the methods
SADDLE_POINTER = (
    "On these linear losses no saddle separates the SOSP finders from first-order methods. "
    "docs/experiment-saddles-phase.md starts phase retrieval at its strict saddle w = 0. On real "
    "IJCNN1 rows restricted to features 10–11, λ_min(0) = −0.448 there. The FOSP output rule "
    "(`above-threshold`, `check=fosp`) returned the saddle in all 20 runs, and `check=sosp` at "
    "α = 0.005 returned points near the minima. The noisy dp-gd and dp-sgd last iterates "
    "left the saddle on their own. At the α the algorithms derive, and on all 22 IJCNN1 or 123 a9a "
    "features, the saddle is an α-SOSP and nothing separates.")


def sosp_table(sec, access, panel) -> list[str]:
    erm = access != "single-pass"
    head = ("| method | ε | ‖∇F̂‖ | F̂ − F̂_np | λ_min | test acc (%) | z | steps | "
            + ("per-record gradients | passes | time (s) |" if erm else
               "distinct records (% of n) | O1 refreshes | escape tests | α | κ | b (O1) | mean b_t (O2) | time (s) |"))
    cols = head.count("|") - 1
    out = [head, "|" + "---|" * cols]
    z0 = mean(panel, "train_grad_norm_at_zero")
    if z0 is not None:
        out.append(f"| *w = 0 (data-independent)* | | {num(z0)} | | | {num(mean(panel, 'test_majority_rate'), 'pct')} |"
                   + " |" * (cols - 6))
    for (lab, e), g in ordered_groups(sec, lambda r: (label(r), float(r["epsilon"]))).items():
        n = float(g[0]["n"])
        cells = [lab, f"{e:g}", f"{num(mean(g, 'train_grad_norm'))} ± {num(sd(g, 'train_grad_norm'))}",
                 num(_gap(g)), num(mean(g, "train_lambda_min"), "e"),
                 f"{num(mean(g, 'test_accuracy'), 'pct')} ± {num(sd(g, 'test_accuracy'), 'pct')}",
                 num(mean(g, "noise_multiplier"), "ratio"), _minmax(g, "iterations")]
        if erm:
            ge = mean(g, "gradient_evaluations")
            cells += [num(ge, "int"), f"{ge / n:.1f}" if ge is not None else "—"]
        else:
            ru = mean(g, "records_used")
            cells += [f"{num(ru, 'int')} ({100 * ru / n:.1f} %)" if ru is not None else "—",
                      _minmax(g, "o1_refreshes"), _minmax(g, "escape_tests"), num(mean(g, "alpha")),
                      num(mean(g, "kappa")), num(mean(g, "batch1"), "int"), num(mean(g, "batch2"), "int")]
        cells.append(f"{mean(g, 'run_s'):.2f}" if mean(g, "run_s") is not None else "—")
        out.append("| " + " | ".join(cells) + " |")
    return out


def _gap(g):
    gaps = [float(r["train_loss"]) - float(r["nonprivate_train_loss"]) for r in g
            if all(isinstance(r.get(c), (int, float)) for c in ("train_loss", "nonprivate_train_loss"))]
    return sum(gaps) / len(gaps) if gaps else None


def _same(g, t, col) -> bool:
    """Every seed's value of ``col`` equal (to 1e-9 relative) between the two noises."""
    gs, ts = {run_id(r): r.get(col) for r in g}, {run_id(r): r.get(col) for r in t}
    if set(gs) != set(ts) or any(v is None for v in (*gs.values(), *ts.values())):
        return False
    return all(abs(gs[s] - ts[s]) <= 1e-9 * max(abs(gs[s]), abs(ts[s]), 1e-300) for s in gs)


def tree_vs_gaussian_section(ok) -> list[str]:
    """Per method run with both noises: the constants each noise led to, and the outcome."""
    groups = ordered_groups(ok, lambda r: (r["data"], r["loss"], float(r["epsilon"]), r["algo"], r.get("noise")))
    pairs = [(k[:4], g, groups[k[:4] + ("tree",)]) for k, g in groups.items()
             if k[4] == "gaussian" and k[:4] + ("tree",) in groups]
    if not pairs:
        return []
    L = ["## Tree vs Gaussian noise at equal ε", "",
         "Each row pairs a method's `--noise gaussian` and `--noise tree` runs (same data, loss, ε and seeds); "
         "values are gaussian / tree.  *held equal* says whether α, κ and the O1 batch b (those the method "
         "has) are identical for every seed under both noises: only then does the row compare the noise "
         "mechanisms alone.  The "
         "noise multipliers z differ by construction (a tree node's noise vs one release's).", "",
         "| data, loss, ε | method | held equal | α | κ | b (O1) | mean b_t (O2) | z | ‖∇F̂‖ | ratio tree/gauss "
         "| test acc (%) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    sentences = []
    for (dset, loss, e, algo), g, t in pairs:
        consts = [(sym, col) for sym, col in (("α", "alpha"), ("κ", "kappa"), ("b", "batch1"))
                  if any(r.get(col) is not None for r in g + t)]
        held = bool(consts) and all(_same(g, t, col) for _, col in consts)
        has_consts = bool(consts)
        gg, tg = mean(g, "train_grad_norm"), mean(t, "train_grad_norm")
        ratio = tg / gg if gg else None
        ga, ta = mean(g, "test_accuracy"), mean(t, "test_accuracy")

        def pair(col, kind="g"):
            return f"{num(mean(g, col), kind)} / {num(mean(t, col), kind)}"

        L.append(f"| {dset}, {loss}, {e:g} | {algo} | {'yes' if held else 'no' if has_consts else 'n/a'} | "
                 f"{pair('alpha')} | {pair('kappa')} | {pair('batch1', 'int')} | {pair('batch2', 'int')} | "
                 f"{pair('noise_multiplier', 'ratio')} | {pair('train_grad_norm')} | {num(ratio, 'ratio')} | "
                 f"{pair('test_accuracy', 'pct')} |")
        if held and ratio is not None:
            sentences.append(
                f"- {algo} on {dset}, {loss}, ε = {e:g}: {', '.join(sym for sym, _ in consts)} "
                f"{'is' if len(consts) == 1 else 'are'} the same under both noises ("
                + ", ".join(f"{sym} = {num(mean(g, col), 'int' if col == 'batch1' else 'g')}" for sym, col in consts)
                + f"), so tree vs gaussian is compared with these held equal: tree noise ends at ‖∇F̂‖ = "
                f"{num(tg)}, {num(ratio, 'ratio')}× gaussian's {num(gg)} ({'smaller' if tg < gg else 'larger'}), "
                f"test accuracy {num(ta, 'pct')} % vs {num(ga, 'pct')} %; the O2 batch (mean "
                f"{num(mean(g, 'batch2'), 'int')} vs {num(mean(t, 'batch2'), 'int')}) "
                + ("is the same." if _same(g, t, "batch2") else "follows the same rule from the path, so it differs."))
        elif has_consts and ratio is not None:
            moved = [sym for sym, col in consts if not _same(g, t, col)]
            sentences.append(
                f"- {algo} on {dset}, {loss}, ε = {e:g}: {', '.join(moved)} "
                f"{'differs' if len(moved) == 1 else 'differ'} between the noises "
                f"(table), so the tree/gaussian ratio {num(ratio, 'ratio')} is not the noise mechanism's alone.")
    return L + [""] + sentences + [""]


def sosp_findings(ok) -> list[str]:
    out = []
    for (dset, loss, e), cell in ordered_groups(ok, lambda r: (r["data"], r["loss"], float(r["epsilon"]))).items():
        where = f"{dset}, {loss}, ε = {e:g}"
        by = ordered_groups(cell, label)
        gmean = {lab: mean(g, "train_grad_norm") for lab, g in by.items()}
        sgd = gmean.get("dp-sgd")
        for lab in by:
            if lab.startswith("dp-spider") and sgd and gmean[lab] is not None:
                r = gmean[lab] / sgd
                out.append(f"- {where} (ERM): {lab} ends at ‖∇F̂‖ = {num(gmean[lab])}, {num(r, 'ratio')}× "
                           f"dp-sgd's {num(sgd)} ({'smaller' if r < 1 else 'larger'}).")
        for access, title in SOSP_SECTIONS:
            sec = {lab: v for lab, v in gmean.items() if by[lab][0]["data_access"] == access and v is not None}
            if not sec:
                continue
            below = [lab for lab, v in sec.items() if v <= 1e-3]
            above = [f"{lab} ({num(v)})" for lab, v in sec.items() if v > 1e-3]
            out.append(f"- {where} ({title}): mean ‖∇F̂‖ ≤ 10⁻³ for {', '.join(below) or 'no method'}; above it "
                       f"for {', '.join(above) or 'no method'}.")
        z0 = mean(cell, "train_grad_norm_at_zero")
        if z0 is not None:
            worse = [f"{lab} ({num(v)})" for lab, v in gmean.items() if v is not None and v >= z0]
            out.append(f"- {where}: the data-independent w = 0 has ‖∇F̂‖ = {num(z0)}; "
                       + (f"not below it: {', '.join(worse)}." if worse else "every method ends below it."))
        maj = mean(cell, "test_majority_rate")
        if maj is not None:
            flat = [lab for lab, g in by.items() if mean(g, "test_accuracy") is not None
                    and abs(mean(g, "test_accuracy") - maj) < 5e-4]
            if flat:
                out.append(f"- {where}: mean test accuracy within 0.05 points of the majority-class rate "
                           f"({num(maj, 'pct')} %), i.e. no better than predicting one class, for "
                           f"{', '.join(flat)}" + ("." if len(flat) < len(by) else " (every method)."))
        lam = _vals(cell, "train_lambda_min")
        if lam:
            neg = sum(v < 0 for v in lam)
            out.append(f"- {where}: smallest λ_min over all {len(lam)} returned points {num(min(lam), 'e')}; "
                       + (f"{neg} of them have negative curvature." if neg else
                          "none has negative curvature, so these runs do not exercise the saddle-escape "
                          "machinery: nothing here separates second-order from first-order methods."))
        for lab, g in by.items():
            if any(r.get("escape_tests") is not None for r in g):
                v = _vals(g, "escape_tests")
                out.append(f"- {where}: {lab} ran {_minmax(g, 'escape_tests')} escape tests per run "
                           f"(mean {sum(v) / len(v):.1f}); {sum(x >= 1 for x in v)} of {len(v)} runs ran at least one.")
            elif g[0]["algo"].startswith("adaptive-spider"):
                v = _vals(g, "o1_refreshes")
                if v:
                    out.append(f"- {where}: {lab} made {_minmax(g, 'o1_refreshes')} O1 refreshes per run "
                               f"(mean {sum(v) / len(v):.1f}); {sum(x >= 2 for x in v)} of {len(v)} runs made at "
                               "least two.")
        passes = [mean(g, "gradient_evaluations") / float(g[0]["n"]) for g in by.values()
                  if g[0]["data_access"] == "resample" and mean(g, "gradient_evaluations") is not None]
        share = [mean(g, "records_used") / float(g[0]["n"]) for g in by.values()
                 if g[0]["data_access"] == "single-pass" and mean(g, "records_used") is not None]
        if passes and share:
            out.append(f"- {where}: the ERM methods make {min(passes):.1f}–{max(passes):.1f} passes over the data "
                       f"(per-record gradients / n); the single-pass methods touch {100 * min(share):.1f}–"
                       f"{100 * max(share):.1f} % of the records, each once.")
    return out


# --------------------------------------------------------------------------- warm-start page
WARM_ORDER = ("DP-SGD", "DP-SPIDER", "warm start")


def _param_dict(s) -> dict:
    """The table's ``params`` cell (``k=v; k=v``) as a dict of strings."""
    return dict(kv.split("=", 1) for kv in (s or "").split("; ") if "=" in kv)


def _stage_steps(params: dict, key: str) -> int | None:
    sub = dict(kv.split("=", 1) for kv in params.get(key, "").split(",") if "=" in kv)
    return int(sub["steps"]) if "steps" in sub else None


def render_warm_start(rows: list[dict], source: str = "RESULTS") -> str:
    """The section-9 warm-start page (docs/experiment-warm-start.md) from a sweep table."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise TableError("the table has no finished (ok) cell")
    labels = list(dict.fromkeys(r["algo"] for r in ok))
    eps = sorted({float(r["epsilon"]) for r in ok})
    first = ok[0]
    L = ["# Warm-start experiment (section 9 of the warm-start paper)", "",
         f"Rendered by `python experiments/render_pages.py warm-start {source}` from the results table of "
         "`dpreg sweep experiments/sweeps/warm-start.toml` (do not edit by hand).  Every comparative sentence is "
         "generated from the numbers in the table.", "",
         f"**Setup** (read off the table and the config): loss and data `{first['loss']}`, f(w, x) = 1/2(|w|^2 + "
         f"sin|w|^2) + x^T w, x uniform in the unit ball, data set `{first['data']}` (n = {first['n']}, "
         f"d = {first['d']}), iterates projected onto the ball of radius 2; δ = "
         f"{_deltas(ok, 'g')} (1/n^1.5); RDP accounting, Gaussian "
         f"noise; ε ∈ {{{', '.join(f'{e:g}' for e in eps)}}}; {_seeds_text(ok)}.  DP-SGD and DP-SPIDER "
         "run 100 iterations; the warm start runs T1 DP-SGD steps then T2 DP-SPIDER steps in one accountant, "
         "T1 + T2 = 100 as in the paper's code (section 9's text says 50); the step sizes, phase lengths, T1 "
         "and the warm stage's budget share are App. G's (the `parameters` column).", "",
         "Where this differs from the paper's code: one data draw (the pipeline's split seed 0) for every "
         "seed, so the seeds vary the noise only; every run starts at the pipeline's initial point, the origin "
         "w = 0 (the paper's code draws fresh data and a random start in the ball of radius 2 per trial); App. "
         "G's parameters only (the tuned set of `experiments/experiment_warm_start.py` needs a tuning loop, "
         "not a grid).", "",
         "Numbers: ‖∇F̂‖ of the train (test) empirical loss at the output, mean ± standard error over the "
         "seeds; steps = the run's iterations (T1 + T2 for the warm start); time = the algorithm's run in "
         "seconds (1 numba thread, shared cores).  The row *w = 0* is the data-independent output, which "
         "costs no privacy: a private method is useful here only where its gradient norm is below it.", "",
         "| ε | algorithm | steps | T1 + T2 | train ‖∇F̂‖ | test ‖∇F̂‖ | ε spent (max) | time (s) | parameters |",
         "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for e in eps:
        at = [r for r in ok if float(r["epsilon"]) == e]
        by = ordered_groups(at, lambda r: r["algo"])
        for lab in [x for x in WARM_ORDER if x in by] + [x for x in labels if x not in WARM_ORDER and x in by]:
            g = by[lab]
            p = _param_dict(g[0]["params"])
            t1, t2 = _stage_steps(p, "warm_params"), _stage_steps(p, "then_params")
            split = f"{t1} + {t2 or 0}" if t1 is not None else ""
            L.append(f"| {e:g} | {lab} | {_minmax(g, 'iterations')} | {split} | {num(mean(g, 'train_grad_norm'))} "
                     f"± {num(se(g, 'train_grad_norm'))} | {num(mean(g, 'test_grad_norm'))} ± "
                     f"{num(se(g, 'test_grad_norm'))} | {max(_vals(g, 'epsilon_spent')):.4g} | "
                     f"{mean(g, 'run_s'):.2f} | `{g[0]['params'] or ''}` |")
        z_tr, z_te = mean(at, "train_grad_norm_at_zero"), mean(at, "test_grad_norm_at_zero")
        L.append(f"| {e:g} | *w = 0 (data-independent)* | 0 | | {num(z_tr)} ± {num(se(at, 'train_grad_norm_at_zero'))} "
                 f"| {num(z_te)} ± {num(se(at, 'test_grad_norm_at_zero'))} | 0 | | |")
        priv = {lab: mean(g, "train_grad_norm") for lab, g in by.items()}
        best = min(priv, key=priv.get)
        notes.append(f"- ε = {e:g}: the best private method ({best}) ends at train ‖∇F̂‖ = {num(priv[best])}, "
                     + ("below" if priv[best] < z_tr else "above") + f" w = 0's {num(z_tr)}.")
        ws = by.get("warm start")
        for other in ("DP-SGD", "DP-SPIDER"):
            if ws and other in by:
                notes.append("- ε = {:g}: warm start vs {}: {}".format(e, other, _compare(ws, by[other])))
        if ws:
            steps = _vals(ws, "iterations")
            notes.append(f"- ε = {e:g}: every warm-start run made {_minmax(ws, 'iterations')} steps in total "
                         f"({len(steps)} runs).")
    best_private = {e: min(mean(g, "train_grad_norm") for g in ordered_groups(
        [r for r in ok if float(r["epsilon"]) == e], lambda r: r["algo"]).values()) for e in eps}
    zero = mean(ok, "train_grad_norm_at_zero")
    if zero is not None and all(v > zero for v in best_private.values()):
        notes.append(f"- At every ε the data-independent w = 0 (train ‖∇F̂‖ = {num(zero)}) is below every private "
                     "output, and every run starts there: no private method ends at a smaller gradient norm than "
                     "its own starting point in this table.")
    L += ["", "## Notes (generated from the table)", ""] + notes + [""]
    L += _errors_section(rows)
    out_dir = "/tmp/dpreg-bench/warm-start"
    L += ["## Reproduce", "",
          f"    NUMBA_NUM_THREADS=1 dpreg sweep experiments/sweeps/warm-start.toml --workers 2 --out-dir {out_dir}",
          f"    cp {out_dir}/results.json experiments/results/experiment-warm-start-sweep.json",
          "    python experiments/render_pages.py warm-start experiments/results/experiment-warm-start-sweep.json "
          "> docs/experiment-warm-start.md",
          "", "The committed runs are experiments/results/experiment-warm-start-sweep.json.",
          "", f"Algorithm time over all {len(ok)} finished runs: {sum(_vals(ok, 'run_s')):.0f} s.", ""]
    return "\n".join(L)


def _compare(a, b) -> str:
    """a vs b on mean train ‖∇F̂‖: a tie when the difference is within two
    standard errors of the difference (independent runs)."""
    ma, mb = mean(a, "train_grad_norm"), mean(b, "train_grad_norm")
    s = math.sqrt((se(a, "train_grad_norm") or 0) ** 2 + (se(b, "train_grad_norm") or 0) ** 2)
    d = ma - mb
    k = round(abs(d) / s, 1) if s > 0 else math.inf  # rounded as printed, so the verdict matches the text
    within = f"{k:.1f} standard errors of the difference ({num(s)})" if s > 0 else "no spread"
    verdict = (f"a tie (the difference {num(abs(d))} is {within}, within two)" if k <= 2 else
               f"{'smaller' if d < 0 else 'larger'} by {num(abs(d))}, {within}")
    return f"train ‖∇F̂‖ {num(ma)} vs {num(mb)}: {verdict}."


# --------------------------------------------------------------------------- command line
PAGES = {"sosp": (SOSP_COLUMNS, render_sosp), "warm-start": (WARM_COLUMNS, render_warm_start)}


def render(page: str, table: str) -> str:
    """The page ``page`` ("sosp" or "warm-start") rendered from the sweep table at ``table``."""
    if page not in PAGES:
        raise TableError(f"unknown page {page!r} (one of: {', '.join(PAGES)})")
    needed, fn = PAGES[page]
    return fn(load_table(table, needed), table)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(f"usage: python experiments/render_pages.py {{{'|'.join(PAGES)}}} RESULTS.json > PAGE.md", file=sys.stderr)
        return 2
    try:
        text = render(*argv)
    except TableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
