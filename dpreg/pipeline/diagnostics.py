"""The non-private diagnostics of a run: computed on the raw data after the
run, never fed back into it, labelled non-private in the record (metrics and
baselines, the non-private reference, the trajectory, usage, timings)."""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from .config import DIAGNOSTICS_NOTE, RunConfig
from .context import Built, Data, Outcome
from .reference import nonprivate_optimum


#: the least time budget of a costly diagnostic (``RunConfig.diagnostics_budget`` None: the
#: run's own time, but at least this): below it a budget would only measure Python's overhead
DIAGNOSTICS_MIN_BUDGET_S = 0.05


def diagnostics_budget(given: float | None, run_s: float) -> float:
    """Seconds the costly diagnostics may take together: ``given``, else the
    run's own time (at least :data:`DIAGNOSTICS_MIN_BUDGET_S`)."""
    if given is not None:
        return float(given)
    return max(float(run_s), DIAGNOSTICS_MIN_BUDGET_S)


def guard(errors: list, fatal: tuple = ()) -> Callable:
    """``guarded(what, f)``: ``f()`` under ``np.errstate(all="ignore")``, or
    None with a line in ``errors`` when it raises (a diagnostic that fails is
    reported, never fatal: the release is kept); ``fatal`` exceptions pass, and
    a failure that follows a dropped Ctrl-C ends the run as interrupted."""
    from .. import interrupts

    def guarded(what, f):
        try:
            with np.errstate(all="ignore"):
                return f()
        except fatal:
            raise
        except Exception as exc:  # noqa: BLE001
            interrupts.check()
            errors.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return None

    return guarded


def usage(out) -> dict:
    """What the run used: iterations, records touched, gradient evaluations."""
    return {"iterations": out.iterations, "records_used": out.records_used,
            "gradient_evaluations": out.gradient_evaluations}


def did_not_learn(ev: dict, base: dict) -> list:
    """The warning (a list of at most one) when the release's training loss is
    worse than the loss at w = 0."""
    loss_w, loss0 = ev.get("train_loss"), base.get("train_loss_at_zero")
    if loss_w is not None and loss0 is not None and loss_w > loss0 + 1e-9:
        return [f"the released model's training loss {loss_w:.4g} is worse than at w = 0 ({loss0:.4g}): "
                f"the run did not learn; try a smaller step size or a larger epsilon"]
    return []


def light_diagnostics(data: Data, built: Built, outcome: Outcome, timing: dict) -> dict:
    """``diagnostics="light"``: counts and accounting only, nothing evaluated
    on the data."""
    out = outcome.out
    info = {k: v for k, v in out.info.items() if k not in ("trajectory", "goldstein")}
    return {
        "non_private": True, "note": DIAGNOSTICS_NOTE, "schema_inferred": data.inferred or None,
        "privacy": built.accountant.state(), "run_info": info, "usage": usage(out), "timing": timing}


def baselines(problem, prefix: str) -> dict:
    """Non-private reference points: the majority-class rate, the loss and
    the gradient norm at w = 0 (the data-independent output)."""

    from ..metrics import majority_rate

    out: dict = {}
    zero = np.zeros(problem.d)
    out[f"{prefix}_loss_at_zero"] = float(problem.value(zero))
    out[f"{prefix}_grad_norm_at_zero"] = float(np.linalg.norm(problem.gradient(zero)))
    if problem.loss.classifier:
        out[f"{prefix}_majority_rate"] = majority_rate(problem)
    return out


def a_reference(problem, w_np, base: dict):
    """The non-private optimum as the diagnostics' reference, or None (with a
    note in ``base``) when the solver did not improve on w = 0: a loss that is
    flat or has a kink at the origin (ramp: every margin 0, subgradient 0)
    stops it there, and a model with every margin 0 is no reference (its
    accuracy is 0: every prediction a tie)."""
    if w_np is None:
        return None
    zero = base.get("train_loss_at_zero")
    if zero is not None and not float(problem.value(w_np)) < zero - 1e-12:
        base["nonprivate_reference"] = ("none: L-BFGS from w = 0 did not improve on w = 0 (the loss is flat "
                                        "or not differentiable there)")
        return None
    return w_np


def regression_diagnostics(problem, test_problem, w, w_np, targets, guarded) -> tuple[dict, dict]:
    """(metrics, baselines) of a regression model in the user's units: R^2
    and RMSE of the release (train, test), of the non-private optimum, and the
    R^2 / RMSE of predicting the training mean (``targets``: the transform, the
    raw training and test targets)."""
    from .. import metrics

    target, y_raw, yte_raw = targets
    ev: dict = {}
    base: dict = {}
    mean = float(np.mean(y_raw))
    ev.update(guarded("train regression metrics", lambda: metrics.regression(problem, w, target, y_raw)) or {})
    base["train_rmse_of_mean"] = float(np.sqrt(np.mean((np.asarray(y_raw) - mean) ** 2)))
    if test_problem is not None and yte_raw is not None:
        te = guarded("test regression metrics",
                     lambda: metrics.regression(test_problem, w, target, yte_raw, "test", reference_mean=mean)) or {}
        base["test_r2_of_train_mean"] = te.pop("test_r2_of_train_mean", None)
        base["test_rmse_of_train_mean"] = float(np.sqrt(np.mean((np.asarray(yte_raw) - mean) ** 2)))
        ev.update(te)
    if w_np is not None:
        r = guarded("non-private regression metrics",
                    lambda: metrics.regression(problem, w_np, target, y_raw, "nonprivate_train")) or {}
        if test_problem is not None and yte_raw is not None:
            r.update(guarded("non-private regression metrics", lambda: metrics.regression(
                test_problem, w_np, target, yte_raw, "nonprivate_test")) or {})
        base.update(r)
    return ev, base


def diagnostics(cfg: RunConfig, data: Data, built: Built, outcome: Outcome, timing: dict) -> dict:
    """The record's ``diagnostics`` (non-private, computed after the run and
    never fed back into it): metrics and baselines on train and test, the
    non-private reference, the regression metrics in the user's units, the
    trajectory's checkpoints, usage, accounting and ``timing``.  A diagnostic
    that fails is listed under ``errors``, never fatal; the costly ones share
    :func:`diagnostics_budget` in equal parts."""
    from .. import metrics

    problem, test_problem, w, out = built.problem, built.test_problem, outcome.w, outcome.out
    t0 = time.perf_counter()
    alpha = cfg.alpha
    ev: dict = {}
    base: dict = {}
    errors: list = []
    warnings: list = []
    guarded = guard(errors)
    # the costly diagnostics of the run (the lambda_min certificates, the trajectory) share this many
    # seconds from the start of the evaluation: each gets an equal part of what is left when it starts
    # (so the cheap passes before it count too, the non-private optimum not: it is the data set's,
    # solved once and cached)
    budget = diagnostics_budget(cfg.diagnostics_budget, timing["run_s"])
    parts = 2 + (test_problem is not None)

    solve_s = [0.0]  # the data set's optimum (solved once, then cached) is not the run's to pay for

    def share(left: int):
        """What is left of the budget, over the ``left`` parts still to run; never below the
        least budget's equal part (a small problem's record does not depend on the load)."""
        spent = time.perf_counter() - t0 - solve_s[0]
        floor = min(budget, DIAGNOSTICS_MIN_BUDGET_S) / parts
        return None if math.isinf(budget) else max(floor, (budget - spent) / left)

    lim = share(parts)
    ev.update(guarded("train metrics", lambda: metrics.evaluate(problem, w, alpha=alpha, prefix="train",
                                                                 lambda_budget_s=lim)) or {})
    base.update(guarded("train baselines", lambda: baselines(problem, "train")) or {})
    if test_problem is not None:
        lim = share(parts - 1)
        ev.update(guarded("test metrics", lambda: metrics.evaluate(test_problem, w, alpha=alpha, prefix="test",
                                                                   lambda_budget_s=lim)) or {})
        base.update(guarded("test baselines", lambda: baselines(test_problem, "test")) or {})
    t_solve = time.perf_counter()
    w_np = guarded("non-private optimum", lambda: nonprivate_optimum(problem, public=data.public))
    solve_s[0] = time.perf_counter() - t_solve
    w_np = a_reference(problem, w_np, base)
    if w_np is not None:
        base["nonprivate_train_loss"] = float(problem.value(w_np))
        if problem.loss.classifier:
            base["nonprivate_train_accuracy"] = metrics.accuracy(problem, w_np)
            if test_problem is not None:
                base["nonprivate_test_accuracy"] = metrics.accuracy(test_problem, w_np)
    if built.target is not None:
        reg_ev, reg_base = regression_diagnostics(problem, test_problem, w, w_np,
                                                  (built.target, built.y_raw, built.yte_raw), guarded)
        ev.update(reg_ev)
        base.update(reg_base)
    warnings += did_not_learn(ev, base)
    gold = out.info.pop("goldstein", None)
    if gold is not None:  # zo-o2nc's (h, proxy)-Goldstein stationarity of its output
        for prb, pre in ((problem, "train"), (test_problem, "test")):
            if prb is not None:
                ev.update(guarded("goldstein proxy", lambda: metrics.goldstein(
                    prb, gold["iterates"], gold["block"], gold["radius"], prefix=pre)) or {})
    # the loss and accuracy at the kept checkpoints cost about what their gradients do: half each
    tr_summary = trajectory_summary(problem, out, guarded, lambda: share(2))
    G, M, rho = problem.constants()
    # the certificates' wall times go with the timings (the rest of the record is the same for the same seed)
    lam_s = {p: (ev.get(f"{p}_lambda_min_status") or {}).pop("seconds", None) for p in ("train", "test")}
    timing = dict(timing, eval_s=time.perf_counter() - t0, threads=threads(),
                  diagnostics_budget_s=None if math.isinf(budget) else budget,
                  lambda_min_s={p: v for p, v in lam_s.items() if v is not None})
    return {
        "non_private": True,
        "note": DIAGNOSTICS_NOTE,
        "schema_inferred": data.inferred or None,
        "problem": {"n": problem.n, "d": problem.d, "loss": problem.loss.name, "G": G, "M": M, "rho": rho,
                    "n_test": None if test_problem is None else test_problem.n,
                    "n_classes": getattr(problem.loss, "n_classes", None)},
        "privacy": built.accountant.state(),
        "usage": usage(out),
        "run_info": out.info,
        "selection": outcome.selection,
        "scaling": built.scaling_info,
        "trajectory": tr_summary,
        "metrics": ev,
        "baselines": base,
        "warnings": warnings,
        "errors": errors,
        "timing": timing,
        "versions": versions(),
    }


def trajectory_summary(problem, out, guarded, budget_s: Callable[[], float | None]) -> dict:
    """The run's trajectory (taken out of ``out.info``) summarised, with the
    gradient norms and loss values at its checkpoints (the gradient norms
    within ``budget_s()`` seconds, asked when they start)."""
    from .. import metrics

    traj = out.info.pop("trajectory", None)
    tr_summary = traj.summary() if traj is not None else {}
    if traj is not None:
        lim = budget_s()
        cp = guarded("trajectory", lambda: metrics.trajectory_grad_norms(problem, traj.steps, traj.iterates,
                                                                         budget_s=lim))
        if cp is not None:
            cp.update(guarded("trajectory values", lambda: metrics.checkpoint_values(
                problem, cp["steps"], traj.steps, traj.iterates)) or {})
            tr_summary["checkpoints"] = cp
    return tr_summary


def versions() -> dict:
    """The versions of the packages a run depends on (:func:`dpreg.results.versions`)."""
    from ..results import versions as package_versions

    return package_versions()


def threads() -> int:
    """numba's thread count for the kernels."""
    import numba

    return int(numba.get_num_threads())
