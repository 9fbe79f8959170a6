"""A mixed-curvature strict saddle on real rows (follow-up of
experiment_saddles_phase.py): does the curvature-aware trust-region method leave
a saddle that its own no-curvature control and the first-order methods (dp-gd,
dp-sgd, dp-spider) at the same epsilon sit at?

Problem.  ``phase-retrieval`` loss f(w; x, y) = 1/4 (y - <x,w>^2)^2, unchanged,
on the real rows of IJCNN1 (49,990 x 22) or a9a (32,561 x 123) as
experiment_saddles_phase.real_rows loads them, with *offset* labels
y = <x, w*>^2 - c: w* the public unit vector of ``planted_w`` (public seed) and
c >= 0 a public constant.  At w = 0 every per-record gradient is 0 and

    H(0) = E[(c - <x,w*>^2) x x^T] = c E[x x^T] - E[<x,w*>^2 x x^T],

negative along w*-like directions, positive along the others once c is large
enough: a strict saddle with mixed curvature (c = 0 is the page
experiment-saddles-phase.md, negative semidefinite in every direction).

c is chosen by a stated rule on a fixed grid (``C_GRID``, printed in full by
``--grid``): the smallest c of the grid at which H(0) has at most d/4
eigenvalues below -1e-9 (negative along few directions, positive or zero along
most) and lambda_min(0) < -1e-9.  The rule reads the exact spectrum of H(0): a
non-private property of the benchmark problem, not a release.

What is measured (``--eps``, ``--seeds``; every run from w = 0 at (eps, 1/n)):

* the *window* of each set-up.  Lower end: the operator norm of the symmetric
  Gaussian noise that dp-trust-region adds to its released Hessian, at the
  noise std its run records (``out.info['noise_std_hess']``), averaged over 200
  public draws; the same for dp-stochastic-trust-region (noise on its batch mean).
  Upper end (a rule of thumb: a noisy first-order method started at the saddle leaves once eta g T exceeds a few): 3 / (eta T) for each first-order method,
  eta and T as its run records them.  The curvature g = |lambda_min| of the
  *clipped* Hessian at 0 (what the trust-region method's release carries) is
  compared with both ends, and eta g T is listed per method.
* per run: exact lambda_min (dense Hessian), |grad F|, F/F(0), the gap
  (F - F_ref)/(F(0) - F_ref) with F_ref the best of 5 non-private trust-exact
  runs (``trust_region.reference_minimum``), |w|, |cos(w, w_ref)|; *returned the
  saddle* (|w| <= 0.05 and lambda_min < 0), *left* (gap <= 1/2: half the way from
  F(0) down to F_ref; with c > 0 the labels below 0 cannot be fitted, so
  F <= F(0)/2 may be unreachable), *alpha-SOSP* at the trust-region methods'
  alpha = 0.1 (rho = 12 declared).  All of these are non-private diagnostics.

Methods (``METHODS``): dp-gd, dp-sgd, dp-spider (last iterates), dp-trust-region,
dp-stochastic-trust-region and a control for each of the two, as in
experiment_saddles_phase (the same method with per-record Hessians clipped to
1e-9: every step has length r along the noisy gradient, same budget, batches and
gradient noise).  ``--clip`` is every method's gradient clip and the
trust-region methods' Hessian clip (``--hess-clip`` overrides); ``--step`` every
first-order method's step.

    NUMBA_NUM_THREADS=1 nice python experiments/experiment_saddle_window.py --grid
    NUMBA_NUM_THREADS=1 nice python experiments/experiment_saddle_window.py --data ijcnn1 --eps 1,4 --seeds 5 --clip 0.1
    python experiments/experiment_saddle_window.py --tables experiments/results/saddle_window_ijcnn1_clip0.1.json

writes a JSON record (default experiments/results/saddle_window_DATA[_clipC][_stepS].json) and prints the
Markdown tables of docs/experiment-saddle-window.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from experiment_saddles_phase import (
    OVERRIDES,
    SADDLE_RADIUS,
    TRUST_REGION,
    choose,
    evaluate,
    planted_w,
    real_rows,
    run_method,
)

from dpreg.results import jsonable

#: the public grid of offsets c; the rule below picks one per data set
C_GRID = (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2)
NEG_TOL = 1e-9          # eigenvalues below -NEG_TOL count as negative (a9a's E[x x^T] is singular)
ALPHA_TR = 0.1          # the trust-region methods' default alpha: the alpha of the alpha-SOSP column
OPNORM_DRAWS = 200      # public draws of the Hessian noise per operator-norm estimate
CONTROL = "dp-trust-region without curvature (control)"
CONTROL_S = "dp-stochastic-trust-region without curvature (control)"
#: the controls: per-record Hessians clipped to 1e-9 (experiment_saddles_phase.OVERRIDES), so the released
#: Hessian is ~0 and every step is -r g~/|g~|, same budget, batches and gradient noise as the method
CONTROLS = {**OVERRIDES, CONTROL_S: {"hess_clip": 1e-9}}
FIRST_ORDER = ("dp-gd", "dp-sgd", "dp-spider")
METHODS = (("dp-gd", "dp-gd"), ("dp-sgd", "dp-sgd"), ("dp-spider", "dp-spider"),
           ("dp-trust-region", "dp-trust-region"),
           ("dp-stochastic-trust-region", "dp-stochastic-trust-region"),
           (CONTROL, "dp-trust-region"), (CONTROL_S, "dp-stochastic-trust-region"))


def offset_problem(X: np.ndarray, w_star: np.ndarray, c: float, name: str = "phase-offset"):
    """The phase-retrieval problem on rows X with labels y = <x, w*>^2 - c."""
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry

    loss = get_registry().get("loss", "phase-retrieval")
    return make_problem(loss, X, (X @ w_star) ** 2 - c, name)


def spectrum(X: np.ndarray, w_star: np.ndarray, c: float, hess_clip: float | None) -> dict:
    """Exact facts of H(0) for offset c (numpy, non-private): its eigenvalues'
    extremes and counts, and lambda_min of the per-record-clipped Hessian at 0
    (each term (c - m*^2) x x^T scaled to operator norm <= hess_clip), which is
    the signal of the trust-region methods' released Hessian."""
    n = X.shape[0]
    h = c - (X @ w_star) ** 2                    # d2phi(0, y) = -y
    ev = np.linalg.eigvalsh((X.T * h) @ X / n)
    out = {"c": c, "lambda_min_0": float(ev[0]), "lambda_2_0": float(ev[1]), "lambda_max_0": float(ev[-1]),
           "n_neg": int((ev < -NEG_TOL).sum()), "n_neg_1e-4": int((ev < -1e-4).sum()),
           "n_pos": int((ev > NEG_TOL).sum()), "frac_y_neg": float(np.mean(h > 0)),
           "F0": float(0.25 * np.mean(h ** 2))}
    if hess_clip is not None:
        norm = np.abs(h) * (X ** 2).sum(1)
        s = np.minimum(1.0, hess_clip / np.maximum(norm, 1e-300))
        evc = np.linalg.eigvalsh((X.T * (h * s)) @ X / n)
        out.update({"hess_clip": hess_clip, "lambda_min_0_clipped": float(evc[0]),
                    "n_neg_clipped": int((evc < -NEG_TOL).sum()), "frac_clipped": float(np.mean(norm > hess_clip))})
    return out


def rule_c(grid: list[dict], d: int) -> float | None:
    """The stated rule: the smallest grid c with 1 <= (eigenvalues of H(0) below -1e-9) <= d/4."""
    for s in grid:
        if 1 <= s["n_neg"] <= d / 4:
            return s["c"]
    return None


def opnorm(d: int, sigma: float, draws: int = OPNORM_DRAWS, seed: int = 12345) -> dict:
    """Mean and 95th percentile of the operator norm of the trust-region methods'
    symmetric Gaussian noise (upper triangle i.i.d. N(0, sigma^2), mirrored), from
    public draws; and 2 sqrt(d) sigma, its large-d value."""
    from dpreg_plugins.algorithms.trust_region import symmetric_gaussian

    rng = np.random.default_rng(seed)
    v = [float(np.abs(np.linalg.eigvalsh(symmetric_gaussian(rng, d, 1.0))).max()) for _ in range(draws)]
    return {"sigma": sigma, "mean": sigma * float(np.mean(v)), "p95": sigma * float(np.quantile(v, 0.95)),
            "two_sqrt_d_sigma": 2 * math.sqrt(d) * sigma}


def gap_left_at(pb, out, F0, Fref):
    """The first kept iterate of the run with gap <= 1/2, as its step; None if none."""
    tr = out.info.get("trajectory")
    if tr is None:
        return None
    for step, v in zip(tr.steps, tr.iterates):
        if (pb.value(v) - Fref) / (F0 - Fref) <= 0.5:
            return int(step)
    return None


def step_regime(out, first: int = 10) -> dict:
    """Trust-region runs: medians over the first ``first`` steps and over the run of the
    released subproblem multiplier lam and noisy gradient norm (their trajectory series)."""
    tr = out.trajectory or {}
    if "multiplier" not in tr:
        return {}
    lam, gn = np.asarray(tr["multiplier"]), np.asarray(tr["noisy_grad_norm"])
    return {"lam_first": float(np.median(lam[:first])), "lam_all": float(np.median(lam)),
            "gnoisy_first": float(np.median(gn[:first]))}


KEEP = ("noise_multiplier", "noise_std", "noise_multiplier_grad", "noise_multiplier_hess", "noise_std_grad",
        "noise_std_hess", "step", "steps", "radius", "clip", "hess_clip", "batch", "hess_batch", "expected_batch",
        "phase_length")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("ijcnn1", "adult"), default="ijcnn1")
    ap.add_argument("--eps", default="1,4")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--c", type=float, default=None, help="offset c (default: the rule's choice on C_GRID)")
    ap.add_argument("--step", type=float, default=None, help="step of every first-order method (default: own)")
    ap.add_argument("--clip", type=float, default=None, help="every method's gradient clip and the trust-region "
                    "methods' Hessian clip (default: each one's own)")
    ap.add_argument("--hess-clip", type=float, default=None, help="trust-region Hessian clip (default: --clip)")
    ap.add_argument("--wstar-seed", type=int, default=0)
    ap.add_argument("--methods", default=None, help="comma-separated labels (default all)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--grid", action="store_true", help="only print the spectrum of H(0) over C_GRID for both "
                    "data sets (clip --hess-clip/--clip, default 0.1) and the rule's choice")
    ap.add_argument("--choose", action="store_true", help="only print dp-gd's training-data step/clip table "
                    "(experiment_saddles_phase.choose) on the offset problem")
    ap.add_argument("--tables", default=None, help="only print the tables of this JSON record")
    a = ap.parse_args(argv)
    if a.tables:
        with open(a.tables) as f:
            print(tables(json.load(f)))
        return
    hc = a.hess_clip if a.hess_clip is not None else a.clip
    if a.grid:
        print(grid_table(hc if hc is not None else 0.1, a.wstar_seed))
        return
    X = real_rows(a.data)
    d = X.shape[1]
    w_star = planted_w(d, a.wstar_seed)
    grid = [spectrum(X, w_star, c, hc) for c in C_GRID]
    c = a.c if a.c is not None else rule_c(grid, d)
    pb = offset_problem(X, w_star, c, a.data)
    if a.choose:
        print(f"{a.data}, c = {c:g}: dp-gd last-iterate F/F(0), eps 1, seeds 0, 1")
        print(choose(pb))
        return
    from dpreg_plugins.algorithms.trust_region import reference_minimum

    z = np.zeros(d)
    F0 = pb.value(z)
    w_ref, F_ref = reference_minimum(pb)
    # F depends on w only through X w: drop w_ref's components in the null space of X^T X (a9a has 15
    # such directions, along which trust-exact drifts), leaving the minimum-norm minimizer of the same F
    ev, V = np.linalg.eigh(X.T @ X / pb.n)
    V = V[:, ev > 1e-9 * ev[-1]]
    w_ref = V @ (V.T @ w_ref)
    u_ref = w_ref / np.linalg.norm(w_ref)
    spec = next((s for s in grid if s["c"] == c), None) or spectrum(X, w_star, c, hc)
    rho = pb.constants()[2]
    facts = {**spec, "F0": F0, "F_ref": F_ref, "lambda_min_ref": float(np.linalg.eigvalsh(pb.hessian(w_ref))[0]),
             "norm_ref": float(np.linalg.norm(w_ref)), "grad_0": float(np.linalg.norm(pb.gradient(z))),
             "rho": rho, "alpha_crit": spec["lambda_min_0"] ** 2 / rho}
    print(f"{a.data}: n={pb.n} d={d} c={c:g} {facts}", flush=True)
    params = {k: v for k, v in (("step", a.step), ("clip", a.clip)) if v is not None}
    wanted = None if a.methods is None else set(a.methods.split(","))
    runs = []
    for eps in [float(e) for e in a.eps.split(",")]:
        for label, algo in METHODS:
            if wanted is not None and label not in wanted:
                continue
            for seed in range(a.seeds):
                t0 = time.perf_counter()
                p = dict(params)
                if algo in TRUST_REGION:
                    p.pop("step", None)
                    if hc is not None:
                        p["hess_clip"] = hc
                p.update(CONTROLS.get(label, {}))
                w, out, _, spent = run_method(pb, algo, "last", p, eps, seed)
                ev = evaluate(pb, w, u_ref, F0, ALPHA_TR, rho)   # its "cos" is |cos(w, w_ref)|
                ev["gap"] = (pb.value(w) - F_ref) / (F0 - F_ref)
                ev["left"] = bool(ev["gap"] <= 0.5)
                ev["left_at"] = gap_left_at(pb, out, F0, F_ref)
                ev.update(step_regime(out))
                r = {"method": label, "algo": algo, "eps": eps, "seed": seed, "iterations": out.iterations,
                     "epsilon_spent": spent, "info": jsonable({k: out.info[k] for k in KEEP if k in out.info}),
                     "run_s": time.perf_counter() - t0, **ev}
                runs.append(r)
                print(f"eps {eps:g} {label:28s} seed {seed}: |w| {ev['norm']:.3f} F/F0 {ev['loss_ratio']:.3f} "
                      f"gap {ev['gap']:.3f} lam {ev['lambda_min']:+.5f} |g| {ev['grad_norm']:.1e} "
                      f"saddle {ev['is_saddle']} left {ev['left']} {r['run_s']:.1f}s", flush=True)
    rec = {"data": a.data, "n": pb.n, "d": d, "c": c, "c_rule": a.c is None, "wstar_seed": a.wstar_seed,
           "constants": list(pb.constants()), "params": params, "hess_clip": hc, "eps": a.eps, "seeds": a.seeds,
           "cos_ref_unit": True, "saddle_radius": SADDLE_RADIUS, "alpha_sosp": ALPHA_TR, "grid": grid, "facts": facts,
           "windows": windows(runs, d, facts), "runs": runs}
    tag = a.data + ("" if a.clip is None else f"_clip{a.clip:g}") + ("" if a.step is None else f"_step{a.step:g}")
    path = a.out or os.path.join(HERE, "results", f"saddle_window_{tag}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(rec, f, indent=1)
    print(tables(rec))


def windows(runs, d, facts) -> list[dict]:
    """Per eps: the trust-region methods' Hessian-noise operator norms (lower end)
    and each first-order method's eta, T, 3/(eta T) and eta g T (upper end), from
    the first run of each method (its noise, eta and T do not depend on the seed)."""
    g = -facts.get("lambda_min_0_clipped", facts["lambda_min_0"])
    g_exact = -facts["lambda_min_0"]
    out = []
    for eps in sorted({r["eps"] for r in runs}):
        first = {}
        for r in runs:
            if r["eps"] == eps:
                first.setdefault(r["method"], r)
        w = {"eps": eps, "g_clipped": g, "g_exact": g_exact, "trust_region": {}, "first_order": {}}
        for m in ("dp-trust-region", "dp-stochastic-trust-region"):
            if m in first:
                i = first[m]["info"]
                w["trust_region"][m] = {**opnorm(d, i["noise_std_hess"]), "noise_multiplier": i["noise_multiplier_hess"],
                                        "hess_clip": i["hess_clip"], "noise_std_grad": i["noise_std_grad"],
                                        "radius": i["radius"], "steps": i["steps"] if "steps" in i else first[m]["iterations"]}
        for m in FIRST_ORDER:
            if m in first:
                i, T = first[m]["info"], first[m]["iterations"]
                eta = i["step"]
                w["first_order"][m] = {"step": eta, "steps": T, "g_hi": 3.0 / (eta * T), "eta_g_T": eta * g_exact * T}
        out.append(w)
    return out


def grid_table(hess_clip: float, wstar_seed: int = 0) -> str:
    lines = [f"Spectrum of H(0) = E[(c - <x,w*>^2) x x^T] (exact, non-private), w* public seed {wstar_seed}; "
             f"'clipped': each record's term scaled to operator norm <= {hess_clip:g}; rule: smallest c with "
             f"1 <= #(eigenvalues < -1e-9) <= d/4.", "",
             "| data | c | lambda_min(0) | 2nd eigenvalue | lambda_max(0) | # < -1e-9 | # < -1e-4 | # > +1e-9 | "
             "lambda_min(0), clipped | share of records clipped | share of labels < 0 | F(0) | rule |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for data in ("ijcnn1", "adult"):
        X = real_rows(data)
        w_star = planted_w(X.shape[1], wstar_seed)
        grid = [spectrum(X, w_star, c, hess_clip) for c in C_GRID]
        pick = rule_c(grid, X.shape[1])
        es = np.linalg.eigvalsh(X.T @ X / X.shape[0])
        notes.append(f"{data}: eigenvalues of E[x x^T]: largest {es[-1]:.4f}, {es[-2]:.4f}, {es[-3]:.4f}; "
                     f"smallest above 1e-9 {es[es > 1e-9][0]:.2e}; {int((es <= 1e-9).sum())} at or below 1e-9.")
        for s in grid:
            lines.append(f"| {data} (d = {X.shape[1]}) | {s['c']:g} | {s['lambda_min_0']:+.5f} | {s['lambda_2_0']:+.5f} | "
                         f"{s['lambda_max_0']:+.5f} | {s['n_neg']} | {s['n_neg_1e-4']} | {s['n_pos']} | "
                         f"{s['lambda_min_0_clipped']:+.5f} | {s['frac_clipped']:.3f} | {s['frac_y_neg']:.2f} | "
                         f"{s['F0']:.3e} | {'chosen' if s['c'] == pick else ''} |")
    return "\n".join(lines + [""] + notes)


def tables(rec) -> str:
    f = rec["facts"]
    if not rec.get("cos_ref_unit"):
        # records written before the fix: their "cos" is |<w, w_ref>|/|w| with the raw w_ref (not a unit
        # vector, and on a9a with null-space components): divide by |w_ref| to print |cos(w, w_ref)|
        rec = {**rec, "runs": [{**r, "cos": r["cos"] / f["norm_ref"]} for r in rec["runs"]]}
    lines = [f"{rec['data']}: n = {rec['n']}, d = {rec['d']}, labels y = <x,w*>^2 - c with c = {rec['c']:g} "
             f"({'the rule' if rec['c_rule'] else 'given'}), w* public seed {rec['wstar_seed']}; common parameters "
             f"{rec['params'] or 'none (documented defaults)'}; trust-region Hessian clip "
             f"{rec['hess_clip'] if rec['hess_clip'] is not None else 'their default M'}; delta = 1/n.",
             f"At w = 0 (non-private diagnostics): F(0) = {f['F0']:.4e}, |grad F| = {f['grad_0']:.1e}, lambda_min = "
             f"{f['lambda_min_0']:+.5f} ({f['n_neg']} eigenvalues < 0, {f['n_pos']} > 0, largest {f['lambda_max_0']:+.5f})"
             + (f", lambda_min of the Hessian clipped per record at {f['hess_clip']:g} = {f['lambda_min_0_clipped']:+.5f}"
                if "lambda_min_0_clipped" in f else "")
             + f". Reference minimum (5 trust-exact starts{'' if rec.get('cos_ref_unit') else '; w_ref not projected on the row space'}): F_ref = {f['F_ref']:.4e} = {f['F_ref'] / f['F0']:.3f} F(0), "
             f"|w_ref| = {f['norm_ref']:.3f}, lambda_min there {f['lambda_min_ref']:+.5f}. w = 0 is an alpha-SOSP "
             f"for every alpha >= lambda_min(0)^2/rho = {f['alpha_crit']:.2e}.", ""]
    lines += ["Window (lower end: Hessian-noise operator norm of the trust-region method, mean and 95th percentile of "
              "200 public draws at its recorded noise std; upper end: 3/(eta T) of each first-order method):", "",
              "| eps | g = abs lambda_min(0) (clipped; exact) | method | noise multiplier | Hessian noise std | "
              "noise op. norm mean (p95) [2 sqrt(d) sigma] | g / op. norm |",
              "|---|---|---|---|---|---|---|"]
    for w in rec["windows"]:
        for m, t in w["trust_region"].items():
            lines.append(f"| {w['eps']:g} | {w['g_clipped']:.5f}; {w['g_exact']:.5f} | {m} | {t['noise_multiplier']:.3g} | "
                         f"{t['sigma']:.3e} | {t['mean']:.5f} ({t['p95']:.5f}) [{t['two_sqrt_d_sigma']:.5f}] | "
                         f"{w['g_clipped'] / t['mean']:.2f} |")
    groups: dict = {}
    for r in rec["runs"]:
        groups.setdefault((r["eps"], r["method"]), []).append(r)
    lines += ["", "| eps | method | eta | T | upper end 3/(eta T) | eta g T (exact g) |", "|---|---|---|---|---|---|"]
    for w in rec["windows"]:
        for m, t in w["first_order"].items():
            lines.append(f"| {w['eps']:g} | {m} | {t['step']:.4g} | {t['steps']} | {t['g_hi']:.5f} | {t['eta_g_T']:.3f} |")
        for m in (CONTROL, CONTROL_S):  # a step of length r along g~: eta_eff = r / |g~| (medians, first 10 steps)
            rs = groups.get((w["eps"], m))
            if rs and "gnoisy_first" in rs[0]:
                rad, T = rs[0]["info"]["radius"], rs[0]["iterations"]
                eta = rad / float(np.median([r["gnoisy_first"] for r in rs]))
                lines.append(f"| {w['eps']:g} | {m}: eta_eff = r / abs g~ | {eta:.4g} | {T} | {3 / (eta * T):.5f} | "
                             f"{eta * w['g_exact'] * T:.3f} |")

    def rng(rs, key, fmt):
        v = [r[key] for r in rs]
        return f"{min(v):{fmt}} .. {max(v):{fmt}}" if len(v) > 1 else f"{v[0]:{fmt}}"
    trr = [(k, rs) for k, rs in groups.items() if "lam_first" in rs[0]]
    if trr:
        g = -f.get("lambda_min_0_clipped", f["lambda_min_0"])
        lines += ["", f"Trust-region step regime (released values of the run, medians over its first 10 steps; "
                  f"g = {g:.5f}, the clipped curvature at 0): the subproblem multiplier lam, the noisy gradient norm, "
                  f"and the per-step factor 1 + g/(lam - g) (trust region) or 1 + g/lam (control, lam = abs g~/r) "
                  f"on the component along the most negative direction:", "",
                  "| eps | method | lam, first 10 steps | lam, whole run | abs g~, first 10 steps | g / lam |",
                  "|---|---|---|---|---|---|"]
        for (eps, method), rs in trr:
            lines.append(f"| {eps:g} | {method} | {rng(rs, 'lam_first', '.5f')} | {rng(rs, 'lam_all', '.5f')} | "
                         f"{rng(rs, 'gnoisy_first', '.2e')} | {g / np.median([r['lam_first'] for r in rs]):.3f} |")
    lines += ["", f"Outcomes (non-private diagnostics; left: gap (F - F_ref)/(F(0) - F_ref) <= 1/2; the saddle: "
              f"abs w <= {rec['saddle_radius']:g} and lambda_min < 0; alpha-SOSP at alpha = {rec['alpha_sosp']:g}, "
              f"rho = {rec['constants'][2]:g}):", "",
              "| eps | method | steps | returned the saddle | left | moved, not left | alpha-SOSP | F/F(0) | gap | lambda_min | "
              "abs w | abs cos(w, w_ref) | abs grad F | gap <= 1/2 from step |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (eps, method), rs in groups.items():
        la = ", ".join("-" if r["left_at"] is None else str(r["left_at"]) for r in rs)
        lines.append(f"| {eps:g} | {method} | {rng(rs, 'iterations', 'd')} | {sum(r['is_saddle'] for r in rs)}/{len(rs)} | "
                     f"{sum(r['left'] for r in rs)}/{len(rs)} | {sum(not r['left'] and not r['is_saddle'] for r in rs)}/{len(rs)} | "
                     f"{sum(r['alpha_sosp'] for r in rs)}/{len(rs)} | "
                     f"{rng(rs, 'loss_ratio', '.3f')} | {rng(rs, 'gap', '.3f')} | {rng(rs, 'lambda_min', '+.5f')} | "
                     f"{rng(rs, 'norm', '.3f')} | {rng(rs, 'cos', '.2f')} | {rng(rs, 'grad_norm', '.1e')} | {la} |")
    pairs = [(m, c) for m, c in (("dp-trust-region", CONTROL), ("dp-stochastic-trust-region", CONTROL_S))]
    prow = []
    for eps in sorted({r["eps"] for r in rec["runs"]}):
        for m, c in pairs:
            a, b = groups.get((eps, m), []), {r["seed"]: r for r in groups.get((eps, c), [])}
            pr = [(r, b[r["seed"]]) for r in a if r["seed"] in b]
            if not pr:
                continue
            dg = [x["gap"] - y["gap"] for x, y in pr]
            prow.append(f"| {eps:g} | {m} vs its control | {len(pr)} | {sum(x['left'] for x, _ in pr)} vs "
                        f"{sum(y['left'] for _, y in pr)} | {sum(d < 0 for d in dg)} | {min(dg):+.3f} .. {max(dg):+.3f} | "
                        + ", ".join(f"{'-' if x['left_at'] is None else x['left_at']}/{'-' if y['left_at'] is None else y['left_at']}"
                                    for x, y in pr) + " |")
    if prow:
        lines += ["", "Paired by seed (same sampling and gradient-noise streams; the control's Hessian clipped to 1e-9):", "",
                  "| eps | pair | seeds | left (method vs control) | seeds where the method's gap is lower | "
                  "gap(method) - gap(control) | gap <= 1/2 from step (method/control) |", "|---|---|---|---|---|---|---|"]
        lines += prow
    return "\n".join(lines)


if __name__ == "__main__":
    main()
