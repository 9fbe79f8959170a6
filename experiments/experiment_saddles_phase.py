"""Phase retrieval on real feature rows: do the SOSP finders
return something other than the strict saddle w = 0 that a first-order output
rule accepts?

Problem.  ``phase-retrieval`` loss f(w; x, y) = 1/4 (y - <x,w>^2)^2 on the real
rows of IJCNN1 (``--data ijcnn1``: ../shared/data/ijcnn1.trn.bz2, 49,990 x 22)
or a9a (``--data adult``: 32,561 x 123), loaded and scaled into the unit ball by
dpreg's own loader (``load_prepared``), no intercept.  Labels are planted:
y = <x, w*>^2 with w* a unit vector drawn from N(0, I) with the public seed
``--wstar-seed`` (default 0), independent of the data.  At w = 0 every
per-record gradient is exactly 0 and the Hessian is -E[y x x^T]: a strict saddle
with lambda_min(0) = -lambda_max(E[y x x^T]); the minima are +-w* (F = 0).

Methods, each at the same budget (eps, delta = 1/n), every run from w = 0
(every algorithm here honours ``init``/w0 = 0, the default), with the same
user-set ``step`` and ``clip`` (``--step``, ``--clip``; documented parameters,
privacy holds for any of them by clipping in the kernels), other parameters at
their defaults:

* ``dp-gd`` and ``dp-sgd``: last iterate (the whole budget to the run);
* ``dp-gd`` / ``dp-sgd`` + FOSP rule: 90 % of eps to the run, 10 % to
  ``above-threshold`` with ``check=fosp`` over the run's checkpoints (exactly
  what ``dpreg run --select above-threshold`` does: the selection's pure-DP
  event is charged before the run, the run calibrates to what is left);
* ``dp-gd`` + SOSP rule: the same with ``check=sosp`` (noisy |grad| and noisy
  lambda_min of the clipped Hessian, rho the loss's declared constant);
* ``perturbed-sgd``: its paper output (x~ that no escape attempt left, else the
  last iterate, uncertified); the run's escape-test counts are kept;
* ``adaptive-spider``: its released point (the last iterate of its set);
* ``dp-spider``: last iterate (a first-order SPIDER method, no saddle machinery);
* ``dp-trust-region`` and ``dp-stochastic-trust-region`` (dp-trust-region.txt,
  Alg 1 and 2, whose guarantee is an alpha-SOSP): last iterate; and a control,
  ``dp-trust-region without curvature``: the same run with the per-record Hessians
  clipped to 1e-9, so the released Hessian is ~0 and every step is a step of
  length r along the noisy gradient (same budget, same gradient noise).  They have no
  ``step`` (each step solves the trust-region subproblem of the noisy gradient
  and noisy Hessian within their radius rule r = sqrt(alpha/rho)); ``--clip``
  clips their per-record gradients and ``--hess-clip`` (default: the
  ``--clip`` value) their per-record Hessians.

Both selectors test the same alpha: perturbed-sgd's derived alpha at that eps
(a public function of n, d, eps and the constants), so "alpha-SOSP" means the
same for every method: |grad F| <= alpha and lambda_min >= -sqrt(rho alpha) with
rho = 12, the loss's declared Hessian-Lipschitz constant.

Reported per run (non-private diagnostics, after the run): |grad F|, exact
lambda_min (dense Hessian, d <= 300), F(w)/F(0), |w|, |cos(w, w*)|, whether the
point is the saddle (|w| <= 0.05 and lambda_min < 0), whether it left
(F(w) <= F(0)/2), whether it is an alpha-SOSP.

    NUMBA_NUM_THREADS=1 nice python experiments/experiment_saddles_phase.py --data ijcnn1 --eps 1,4 --seeds 5
    python experiments/experiment_saddles_phase.py --tables experiments/results/saddles_phase_ijcnn1.json

writes a JSON record (default experiments/results/saddles_phase_DATA.json) and
prints the Markdown tables of docs/experiment-saddles-phase.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

from dpreg.results import jsonable

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_FILES = {"ijcnn1": ("ijcnn1.trn.bz2", None), "adult": ("adult.trn.bz2", 123)}
SEL_SHARE = 0.1          # the pipeline's default select share
SADDLE_RADIUS = 0.05     # |w| <= this and lambda_min < 0: "the saddle"

# (label, algorithm, output rule): rule "last" = the algorithm's own released point.
# "perturbed-sgd (own alpha)" runs at its derived alpha (listed only when --alpha is given).
METHODS = (
    ("perturbed-sgd (own alpha)", "perturbed-sgd", "last"),
    ("perturbed-sgd", "perturbed-sgd", "last"),
    ("adaptive-spider", "adaptive-spider", "last"),
    ("dp-gd", "dp-gd", "last"),
    ("dp-gd + FOSP rule", "dp-gd", "fosp"),
    ("dp-gd + SOSP rule", "dp-gd", "sosp"),
    ("dp-sgd", "dp-sgd", "last"),
    ("dp-sgd + FOSP rule", "dp-sgd", "fosp"),
    ("dp-sgd + SOSP rule", "dp-sgd", "sosp"),
    ("dp-spider", "dp-spider", "last"),
    ("dp-trust-region", "dp-trust-region", "last"),
    ("dp-stochastic-trust-region", "dp-stochastic-trust-region", "last"),
    ("dp-trust-region without curvature (control)", "dp-trust-region", "last"),
)
#: labels whose runs override parameters: the control's Hessian is clipped to 1e-9 per record, so its
#: released Hessian (signal and noise, both proportional to the clip) is ~0 and each step is the
#: trust-region step of the noisy gradient alone, h = -r g~/|g~|, at the same epsilon
OVERRIDES = {"dp-trust-region without curvature (control)": {"hess_clip": 1e-9}}
#: second-order methods: a trust-region step of radius r = sqrt(alpha/rho) along the noisy
#: gradient and Hessian; they take no ``step`` and clip the per-record Hessians at ``hess_clip``
TRUST_REGION = ("dp-trust-region", "dp-stochastic-trust-region")


def real_rows(data: str, n: int | None = None, columns: list[int] | None = None) -> np.ndarray:
    """The feature rows of ../shared/data/<data> as dpreg loads them (rows in
    the unit ball, no intercept); the first ``n`` rows if given.  ``columns``:
    keep only these features, each row then rescaled to norm 1 (a row-wise
    map that reads nothing across records; an all-zero row stays 0)."""
    from dpreg.pipeline import load_prepared

    name, d = DATA_FILES[data]
    X, _, _, _ = load_prepared(os.path.join(HERE, "..", "..", "shared", "data", name), seed=0,
                               labels="binary", d=d)
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=float)
    if n is not None:
        X = X[:n]
    if columns is not None:
        X = X[:, columns]
        nr = np.linalg.norm(X, axis=1)
        X = X / np.where(nr > 0, nr, 1.0)[:, None]
    return np.ascontiguousarray(X)


def planted_w(d: int, seed: int = 0) -> np.ndarray:
    """The public planted signal: a unit vector from N(0, I_d) with a public seed."""
    w = np.random.default_rng(seed).standard_normal(d)
    return w / np.linalg.norm(w)


def phase_problem(X: np.ndarray, w_star: np.ndarray, name: str = "phase"):
    """The phase-retrieval problem on rows X with labels y = <x, w*>^2."""
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry

    loss = get_registry().get("loss", "phase-retrieval")
    return make_problem(loss, X, (X @ w_star) ** 2, name)


def run_method(pb, algo: str, rule: str, params: dict, eps: float, seed: int, alpha: float | None = None):
    """One run from w = 0 at budget (eps, 1/n) through ``rule`` ('last', 'fosp',
    'sosp'); returns (w, out, selection info or None, epsilon spent).  The
    selection is the pipeline's own (``dpreg run --select
    above-threshold:check=RULE``): charged before the run, then over the run's
    checkpoints and its final point."""
    from types import SimpleNamespace

    from dpreg.interfaces import secret_seed
    from dpreg.params import bind
    from dpreg.pipeline import _pipeline_rng, _prepare_selection, _select_output
    from dpreg.registry import get_registry

    reg = get_registry()
    cls = reg.get("algorithm", algo)
    p = bind(cls.params, dict(params), algo)
    acc = reg.get("accountant", "rdp")(eps, 1.0 / pb.n, cls.relation_for(p))
    selector = cfg = None
    if rule != "last":
        cfg = SimpleNamespace(select=f"above-threshold:check={rule}", select_share=SEL_SHARE, epsilon=eps,
                              alpha=alpha)
        opts = {"check": rule, **({"grad_clip": params["clip"]} if params.get("clip") is not None else {})}
        selector, eps_sel = _prepare_selection(reg.get("selector", "above-threshold"), opts, pb, acc, cfg,
                                               _pipeline_rng(None, secret_seed(seed), 1))
    noise = (cls.default_noise or "tree") if cls.uses_noise else None
    with np.errstate(all="ignore"):
        out = cls(pb, p, noise=reg.get("noise", noise) if noise else None, accountant=acc, seed=seed).run()
    w, sel = np.asarray(out.w, dtype=float), None
    if selector is not None:
        w, info = _select_output(selector, eps_sel, out, w, cfg)
        i = info["index"]
        step = None if i is None else info["steps"][i]
        sel = {"candidates": info["candidates"], "index": i,
               "step": out.iterations if i is not None and step is None else step,
               "fallback_to_last": info["fallback_to_last"]}
    return w, out, sel, acc.epsilon_spent


def evaluate(pb, w, w_star, F0, alpha, rho):
    from dpreg.metrics import lambda_min

    lam = lambda_min(pb, w)
    g = float(np.linalg.norm(pb.gradient(w)))
    nw = float(np.linalg.norm(w))
    return {"grad_norm": g, "lambda_min": lam, "loss_ratio": pb.value(w) / F0, "norm": nw,
            "cos": abs(float(w @ w_star)) / nw if nw > 0 else 0.0,
            "dist": float(min(np.linalg.norm(w - w_star), np.linalg.norm(w + w_star))),
            "is_saddle": bool(nw <= SADDLE_RADIUS and lam < 0), "left": bool(pb.value(w) <= F0 / 2),
            "alpha_sosp": bool(g <= alpha and lam >= -math.sqrt(rho * alpha))}


def left_at(pb, out, F0):
    """The first kept iterate of the run (its checkpoints: every iterate, or about 20
    evenly spaced) with F <= F(0)/2, as its step; None if none (a non-private diagnostic)."""
    tr = out.info.get("trajectory")
    if tr is None:
        return None
    for step, v in zip(tr.steps, tr.iterates):
        if pb.value(v) <= F0 / 2:
            return int(step)
    return None


def saddle_facts(pb, w_star):
    """F, lambda_min and gradient at w = 0 and at w*; alpha below which w = 0 is
    not an alpha-SOSP for the declared rho."""
    from dpreg.metrics import lambda_min

    z = np.zeros(pb.d)
    lam0 = lambda_min(pb, z)
    rho = pb.constants()[2]
    return {"F0": pb.value(z), "lambda_min_0": lam0, "grad_0": float(np.linalg.norm(pb.gradient(z))),
            "lambda_min_wstar": lambda_min(pb, w_star), "lambda_max_wstar": float(np.linalg.eigvalsh(
                pb.hessian(w_star))[-1]), "F_wstar": pb.value(w_star), "rho": rho, "alpha_crit": lam0 ** 2 / rho}


KEEP = ("alpha", "certified", "escapes", "escape_tests", "escape_attempts", "escape_test_outcomes", "stop_reason",
        "perturbations", "o1_refreshes", "escape_radius", "escape_steps", "repeats", "chi")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=tuple(DATA_FILES), default="ijcnn1")
    ap.add_argument("--eps", default="1,4")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--step", type=float, default=None, help="step of every method (default: each one's own)")
    ap.add_argument("--clip", type=float, default=None, help="clip of every method and of the selectors' "
                    "gradient query (default: each one's own, G)")
    ap.add_argument("--hess-clip", type=float, default=None, help="per-record Hessian clip of the trust-region "
                    "methods (default: --clip's value; neither given: their own default)")
    ap.add_argument("--alpha", type=float, default=None, help="alpha of perturbed-sgd and both selectors "
                    "(default: perturbed-sgd's derived alpha at each eps)")
    ap.add_argument("--wstar-seed", type=int, default=0)
    ap.add_argument("--columns", default=None, help="keep only these (0-based) feature columns, e.g. 10,11; "
                    "rows rescaled to norm 1")
    ap.add_argument("--methods", default=None, help="comma-separated labels (default all)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tables", default=None, help="only print the tables of this JSON record")
    ap.add_argument("--choose", action="store_true", help="only print the training-data choice of step and "
                    "clip: dp-gd's last-iterate F/F(0), eps 1, seeds 0-1, over STEP_GRID x CLIP_GRID")
    a = ap.parse_args(argv)
    if a.tables:
        with open(a.tables) as f:
            print(tables(json.load(f)))
        return
    cols = None if a.columns is None else [int(c) for c in a.columns.split(",")]
    X = real_rows(a.data, columns=cols)
    w_star = planted_w(X.shape[1], a.wstar_seed)
    pb = phase_problem(X, w_star, a.data)
    if a.choose:
        print(choose(pb))
        return
    facts = saddle_facts(pb, w_star)
    print(f"{a.data}: n={pb.n} d={pb.d} declared (G, M, rho) = {pb.constants()}  {facts}", flush=True)
    params = {k: v for k, v in (("step", a.step), ("clip", a.clip)) if v is not None}
    wanted = None if a.methods is None else set(a.methods.split(","))
    runs = []
    for eps in [float(e) for e in a.eps.split(",")]:
        alpha = a.alpha  # None: perturbed-sgd's derived alpha (its first run, listed first, sets it)
        for label, algo, rule in METHODS:
            own = label == "perturbed-sgd (own alpha)"
            if (own and a.alpha is None) or (wanted is not None and label not in wanted and not own):
                continue
            for seed in range(a.seeds):
                t0 = time.perf_counter()
                p = {**params, "alpha": a.alpha} if algo == "perturbed-sgd" and not own and a.alpha else params
                if algo in TRUST_REGION:  # no step; the Hessian clip follows --hess-clip, else --clip
                    p = {k: v for k, v in p.items() if k != "step"}
                    hc = a.hess_clip if a.hess_clip is not None else a.clip
                    if hc is not None:
                        p["hess_clip"] = hc
                p = {**p, **OVERRIDES.get(label, {})}
                w, out, sel, spent = run_method(pb, algo, rule, p, eps, seed, alpha)
                if algo == "perturbed-sgd" and alpha is None:
                    alpha = float(out.info["alpha"])
                ev = evaluate(pb, w, w_star, facts["F0"], alpha, facts["rho"])
                ev["left_at"] = left_at(pb, out, facts["F0"])
                r = {"method": label, "algo": algo, "rule": rule, "eps": eps, "seed": seed, "alpha": alpha,
                     "run_alpha": out.info.get("alpha"),
                     "iterations": out.iterations, "records_used": out.records_used, "epsilon_spent": spent,
                     "selection": sel, "info": jsonable({k: out.info[k] for k in KEEP if k in out.info}),
                     "run_s": time.perf_counter() - t0, **ev}
                runs.append(r)
                print(f"eps {eps:g} {label:26s} seed {seed}: |w| {ev['norm']:.3f} F/F0 {ev['loss_ratio']:.3f} "
                      f"lam {ev['lambda_min']:+.5f} |g| {ev['grad_norm']:.1e} saddle {ev['is_saddle']} "
                      f"sosp {ev['alpha_sosp']} sel {sel} {r['info'] if algo == 'perturbed-sgd' else ''}",
                      flush=True)
    rec = {"data": a.data, "columns": cols, "n": pb.n, "d": pb.d, "constants": list(pb.constants()), "wstar_seed": a.wstar_seed,
           "params": params, "hess_clip": a.hess_clip if a.hess_clip is not None else a.clip, "alpha_given": a.alpha, "eps": a.eps, "seeds": a.seeds, "select_share": SEL_SHARE,
           "saddle_radius": SADDLE_RADIUS, "facts": facts, "runs": runs}
    tag = a.data if cols is None else f"{a.data}_c{'-'.join(map(str, cols))}"
    out = a.out or os.path.join(HERE, "results", f"saddles_phase_{tag}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(rec, f, indent=1)
    print(tables(rec))


STEP_GRID = (1 / 12, 0.5, 1.0, 2.0, 8.0, 32.0)
CLIP_GRID = (0.1, 1.0)


def choose(pb) -> str:
    """The step/clip choice on the training rows: dp-gd's last-iterate F/F(0)
    (eps 1, seeds 0 and 1) for every pair of the grids, as a Markdown table."""
    F0 = pb.value(np.zeros(pb.d))
    lines = ["| clip \\ step | " + " | ".join(f"{s:.3g}" for s in STEP_GRID) + " |",
             "|---|" + "---|" * len(STEP_GRID)]
    for clip in CLIP_GRID:
        cells = []
        for step in STEP_GRID:
            r = [pb.value(run_method(pb, "dp-gd", "last", {"step": step, "clip": clip}, 1.0, s)[0]) / F0
                 for s in (0, 1)]
            cells.append(f"{r[0]:.3g}, {r[1]:.3g}")
        lines.append(f"| {clip:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _tr_note(rec) -> str:
    """What the trust-region rows were given, when they ran (no step; their Hessian clip)."""
    if not any(r["algo"] in TRUST_REGION for r in rec["runs"]):
        return ""
    hc = rec.get("hess_clip")
    return (" (trust-region methods: no step, radius r = sqrt(alpha/rho); per-record Hessian clip "
            + (f"{hc:g})" if hc is not None else "their default M)"))


def _left_at(rs) -> str:
    """Per run, the first checkpoint step at which the run's F <= F(0)/2 ('-': never; 'n/a': not recorded)."""
    if any("left_at" not in r for r in rs):
        return "n/a"
    return ", ".join("-" if r["left_at"] is None else str(r["left_at"]) for r in rs)


def tables(rec) -> str:
    """The Markdown tables of the page from a JSON record."""
    f, runs = rec["facts"], rec["runs"]
    cols = rec.get("columns")
    lines = [f"{rec['data']}{'' if cols is None else f' columns {cols} (rows rescaled to norm 1)'}: n = {rec['n']}, d = {rec['d']}, w* = unit N(0, I) vector, public seed "
             f"{rec['wstar_seed']}; common parameters {rec['params'] or 'none (documented defaults)'}"
             f"{_tr_note(rec)}; alpha "
             f"{'given' if rec.get('alpha_given') else 'perturbed-sgd derived'}; declared (G, M, rho) = ({', '.join(f'{c:g}' for c in rec['constants'])}); delta = 1/n.",
             f"At w = 0: F = {f['F0']:.3e}, |grad F| = {f['grad_0']:.1e}, lambda_min = {f['lambda_min_0']:+.5f}; "
             f"at w*: F = {f['F_wstar']:.1e}, Hessian eigenvalues in [{f['lambda_min_wstar']:.5f}, "
             f"{f['lambda_max_wstar']:.5f}].  w = 0 fails the alpha-SOSP test only for alpha < "
             f"lambda_min(0)^2 / rho = {f['alpha_crit']:.2e}.", ""]
    groups: dict = {}
    for r in runs:
        groups.setdefault((r["eps"], r["method"]), []).append(r)
    lines += ["| eps | method | steps | alpha tested (sqrt(rho alpha)) | returned the saddle | left (F <= F(0)/2) | alpha-SOSP | "
              "F/F(0) | lambda_min | abs cos(w, w*) | abs grad F | selected step | run below F(0)/2 from step |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (eps, method), rs in groups.items():
        al = rs[0]["alpha"]

        def rng(key, fmt):
            v = [r[key] for r in rs]
            return f"{min(v):{fmt}} .. {max(v):{fmt}}" if len(v) > 1 else f"{v[0]:{fmt}}"
        sel = [r["selection"] for r in rs]
        sel_s = ("-" if sel[0] is None else ", ".join("last" if s["fallback_to_last"] else str(s["step"])
                                                      for s in sel))
        ran = sorted({r["run_alpha"] for r in rs if r.get("run_alpha") is not None and r["run_alpha"] != al})
        if ran:  # the run's own alpha differs from the one its output is tested at: say so in the row
            method = f"{method}, ran at alpha {ran[0]:.3g}" + (f" .. {ran[-1]:.3g}" if len(ran) > 1 else "")
        lines.append(f"| {eps:g} | {method} | {rng('iterations', 'd')} | {al:.3g} ({math.sqrt(rec['constants'][2] * al):.2f}) | "
                     f"{sum(r['is_saddle'] for r in rs)}/{len(rs)} | {sum(r['left'] for r in rs)}/{len(rs)} | "
                     f"{sum(r['alpha_sosp'] for r in rs)}/{len(rs)} | {rng('loss_ratio', '.3f')} | "
                     f"{rng('lambda_min', '+.5f')} | {rng('cos', '.2f')} | {rng('grad_norm', '.1e')} | {sel_s} "
                     f"| {_left_at(rs)} |")
    esc = [r for r in runs if r["algo"] == "perturbed-sgd"]
    if esc:
        lines += ["", "perturbed-sgd per run: queries, escape tests (escaped / not / interrupted), certified, "
                  "stop reason:", ""]
        for r in esc:
            i = r["info"]
            o = i.get("escape_test_outcomes", {})
            lines.append(f"- eps {r['eps']:g}, {r['method']}, seed {r['seed']}: alpha {r['run_alpha']:.3g}, "
                         f"{r['iterations']} queries, {i.get('escape_tests')} "
                         f"tests ({o.get('escaped', 0)} / {o.get('not_escaped', 0)} / {o.get('interrupted', 0)}), "
                         f"certified {i.get('certified')}, S = {i.get('escape_radius', float('nan')):.3g}, "
                         f"T_esc = {i.get('escape_steps')}; {i.get('stop_reason')}; |w| {r['norm']:.3f}, "
                         f"lambda_min {r['lambda_min']:+.5f}, F/F(0) {r['loss_ratio']:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
