"""Evaluation metrics, computed after a run on the returned point (privacy
rule 5: they are not private and never feed back into a run).

lambda_min of the Hessian (:func:`lambda_min_report`): dense ``eigvalsh`` for
d <= DENSE_MAX_D, otherwise Lanczos on the Hessian-vector-product kernel (so no
d x d matrix, nor an n x d temporary, is formed for large d).  A diagnostic
must never cost more than the run it diagnoses: the work is capped in
Hessian-vector products (``max_hvps``, default LANCZOS_MAX_HVPS, each one
counted - not restarts of an eigensolver) and in wall time (``budget_s``: the
pipeline gives the certificate a budget proportional to the run's own time,
or the one the user sets).  The report says whether the value is certified
(dense, or Lanczos converged), truncated (the cap or the budget stopped
Lanczos first: the smallest Ritz value is an upper bound on lambda_min, not a
certificate) or skipped, and why.
"""
from __future__ import annotations

import math
import time

import numpy as np

#: dense eigendecomposition up to this many parameters
DENSE_MAX_D = 300
#: a dense certificate of at most this much work (n d^2 + d^3, a few milliseconds) is computed
#: whatever the time budget, so a small problem's record does not depend on the machine's load
DENSE_ALWAYS_WORK = 2e7
#: Hessian-vector products one Lanczos run may make (each counted)
LANCZOS_MAX_HVPS = 300
#: Lanczos keeps its basis (k vectors of d floats, full reorthogonalisation): at most this many floats
LANCZOS_MAX_FLOATS = 20_000_000
#: a Ritz value counts as converged when its residual |H s - theta s| is at most this times |H|
LANCZOS_TOL = 1e-5


def _lanczos_max_d() -> int:
    import os

    try:
        return int(os.environ.get("DPREG_LAMBDA_MIN_MAX_D", "100000"))
    except ValueError:
        return 100000


def _start_vector(d: int) -> np.ndarray:
    """A fixed, data-independent start (public pseudo-random: a constant start
    can be orthogonal to the bottom eigenvector of a symmetric problem)."""
    v = np.random.default_rng(0x1A4C205).standard_normal(d)
    return v / np.linalg.norm(v)


def lanczos_smallest(matvec, d: int, *, max_hvps: int = LANCZOS_MAX_HVPS, deadline: float | None = None,
                     tol: float = LANCZOS_TOL, v0: np.ndarray | None = None) -> dict:
    """Smallest eigenvalue of the symmetric operator ``matvec`` (R^d -> R^d) by
    Lanczos with full reorthogonalisation, from ``v0`` (default: a fixed
    public start).  Stops when the smallest Ritz value's residual bound
    ``beta_k |s_k|`` is at most ``tol`` times the largest Ritz value's
    magnitude (converged), when the Krylov space is invariant (exact), after
    ``max_hvps`` products, or at ``deadline`` (``time.perf_counter()`` value).
    Returns ``{"value", "converged", "hvps", "residual", "reason"}``; ``value``
    is the smallest Ritz value (always >= lambda_min), None if no product was
    made."""
    k_max = max(1, min(int(max_hvps), d, LANCZOS_MAX_FLOATS // max(d, 1)))
    Q = np.empty((k_max, d))
    q = _start_vector(d) if v0 is None else np.asarray(v0, dtype=float) / np.linalg.norm(v0)
    alphas: list[float] = []
    betas: list[float] = []
    theta = resid = None
    beta_prev = 0.0
    reason = "hvp cap"
    for j in range(k_max):
        if deadline is not None and time.perf_counter() > deadline:
            reason = "time budget"
            break
        Q[j] = q
        z = np.asarray(matvec(q), dtype=float).reshape(-1)
        a = float(q @ z)
        z -= a * q
        if j:
            z -= beta_prev * Q[j - 1]
        for _ in range(2):  # full reorthogonalisation (twice is enough)
            z -= Q[:j + 1].T @ (Q[:j + 1] @ z)
        b = float(np.linalg.norm(z))
        alphas.append(a)
        from scipy.linalg import eigh_tridiagonal

        vals, vecs = eigh_tridiagonal(np.array(alphas), np.array(betas), select="i", select_range=(0, 0))
        top = eigh_tridiagonal(np.array(alphas), np.array(betas), eigvals_only=True,
                               select="i", select_range=(j, j))[0]
        theta = float(vals[0])
        resid = b * abs(float(vecs[-1, 0]))
        scale = max(abs(theta), abs(float(top)), 1e-300)
        if resid <= tol * scale:
            return {"value": theta, "converged": True, "hvps": j + 1, "residual": resid, "reason": "converged"}
        if b <= 1e-14 * scale:  # invariant subspace: the Ritz values are eigenvalues
            return {"value": theta, "converged": True, "hvps": j + 1, "residual": resid,
                    "reason": "invariant subspace"}
        betas.append(b)
        beta_prev = b
        q = z / b
    else:
        if k_max < max_hvps:
            reason = "dimension" if k_max == d else "memory cap"
    hvps = len(alphas)
    return {"value": theta, "converged": False, "hvps": hvps, "residual": resid, "reason": reason}


def lambda_min_report(problem, w, *, max_hvps: int = LANCZOS_MAX_HVPS, budget_s: float | None = None) -> dict:
    """lambda_min of the empirical Hessian at ``w`` with how it was obtained:
    ``{"value", "status", "method", "hvps", "seconds", "reason"}``.

    ``status``: "certified" (dense eigenvalues, or Lanczos converged: the
    value is lambda_min to the tolerance), "truncated" (Lanczos stopped by the
    product cap or the time budget: ``value`` is an upper bound, not a
    certificate; None if no product fit) or "skipped" (``reason`` says why:
    d above the Lanczos limit, or no time budget at all).  ``budget_s``: wall
    seconds the certificate may take (None: no limit); the dense path is
    taken when it is small (DENSE_ALWAYS_WORK) or one Hessian-vector
    product's time says it fits."""
    t0 = time.perf_counter()
    deadline = None if budget_s is None else t0 + float(budget_s)
    d = int(problem.d)

    def out(value, status, method, hvps, reason):
        return {"value": None if value is None else float(value), "status": status, "method": method,
                "hvps": int(hvps), "seconds": time.perf_counter() - t0, "reason": reason}

    own = getattr(problem, "lambda_min", None)
    if own is not None:  # a problem that knows it exactly (softmax: singular, positive semi-definite)
        return out(own(w), "certified", "the problem's own", 0, "exact")
    if budget_s is not None and budget_s <= 0:
        return out(None, "skipped", None, 0, "no time budget")
    if d > DENSE_MAX_D and d > _lanczos_max_d():
        return out(None, "skipped", None, 0, f"d = {d} above the Lanczos limit {_lanczos_max_d()} "
                                             f"(DPREG_LAMBDA_MIN_MAX_D)")
    w = np.asarray(w, dtype=float)
    if d <= DENSE_MAX_D:
        fits = True
        if deadline is not None and int(getattr(problem, "n", 0)) * d * d + d ** 3 > DENSE_ALWAYS_WORK:  # dense costs up to about d/2 products (the Hessian's per-record
            t1 = time.perf_counter()  # second derivatives from Python, a BLAS product, eigvalsh)
            problem.hvp(w, _start_vector(d))
            fits = time.perf_counter() + (time.perf_counter() - t1) * max(d / 2.0, 1.0) <= deadline
        if fits:
            return out(np.linalg.eigvalsh(problem.hessian(w))[0], "certified", "dense", 0, "dense eigenvalues")
    res = lanczos_smallest(lambda v: problem.hvp(w, v), d, max_hvps=max_hvps, deadline=deadline)
    if res["converged"]:
        return out(res["value"], "certified", "lanczos", res["hvps"], res["reason"])
    why = {"hvp cap": f"Lanczos stopped at the cap of {max_hvps} Hessian-vector products",
           "time budget": f"Lanczos stopped at the time budget of {budget_s or 0:.3g} s",
           "memory cap": "Lanczos stopped at its memory cap"}.get(res["reason"], res["reason"])
    return out(res["value"], "truncated", "lanczos", res["hvps"],
               why + (f" (residual {res['residual']:.2g})" if res["residual"] is not None else "")
               + ": the value is an upper bound on lambda_min, not a certificate")


def lambda_min(problem, w, *, max_hvps: int = LANCZOS_MAX_HVPS, budget_s: float | None = None) -> float | None:
    """Smallest eigenvalue of the empirical Hessian at w (see
    :func:`lambda_min_report`): the certified value, the smallest Ritz value
    when Lanczos was truncated, None when skipped."""
    return lambda_min_report(problem, w, max_hvps=max_hvps, budget_s=budget_s)["value"]


def accuracy(problem, w) -> float:
    """Fraction of records classified right: sign(decision function) == y for
    a binary model (labels -1/+1, <x, w> for linear models; ties count as
    wrong), the class of the largest output == y for a K-class model (labels
    0..K-1; ties go to the first class).  A problem whose records are held
    elsewhere counts them itself (``problem.accuracy``)."""
    own = getattr(problem, "accuracy", None)
    if own is not None:
        return float(own(w))
    m = problem.decision_function(w)
    if m.ndim == 2:
        return float(np.mean(np.argmax(m, axis=1) == problem.y))
    return float(np.mean(np.sign(m) == problem.y))


def majority_rate(problem) -> float:
    """The share of the most frequent class (binary labels -1/+1 or class
    indices 0..K-1): the accuracy of predicting it for every record."""
    from .tasks import loss_task

    y = np.asarray(problem.y)
    if loss_task(problem.loss) == "multiclass":
        return float(np.bincount(y.astype(np.int64)).max() / max(1, y.size))
    pos = float(np.mean(y > 0))
    return max(pos, 1.0 - pos)


def regression(problem, w, target, y_raw, prefix: str = "train", reference_mean: float | None = None) -> dict:
    """R^2 and RMSE of the model's predictions in the user's units
    (``target.inverse`` of the decision function) against the raw targets
    ``y_raw``; with ``reference_mean``, also the R^2 of predicting that constant
    (the training mean: the baseline a model must beat)."""
    pred = target.inverse(problem.decision_function(w))
    y = np.asarray(y_raw, dtype=float)
    ss = float(np.sum((y - y.mean()) ** 2))
    res = float(np.sum((y - pred) ** 2))
    out = {f"{prefix}_r2": (1.0 - res / ss) if ss > 0 else None,
           f"{prefix}_rmse": math.sqrt(res / max(1, y.size))}
    if reference_mean is not None:
        res0 = float(np.sum((y - reference_mean) ** 2))
        out[f"{prefix}_r2_of_train_mean"] = (1.0 - res0 / ss) if ss > 0 else None
    return out


def evaluate(problem, w, *, alpha: float | None = None, prefix: str = "train",
             lambda_budget_s: float | None = None) -> dict:
    """Gradient norm, lambda_min (with its status, :func:`lambda_min_report`),
    loss and (for classifiers) accuracy at w, and whether w is an alpha-SOSP:
    |grad| <= alpha and lambda_min >= -sqrt(rho alpha) (None when lambda_min is
    not certified).  ``lambda_budget_s``: the time budget of the lambda_min
    certificate (None: no limit)."""
    g = problem.gradient(w)
    rep = lambda_min_report(problem, w, budget_s=lambda_budget_s)
    out = {
        f"{prefix}_grad_norm": float(np.linalg.norm(g)),
        f"{prefix}_loss": float(problem.value(w)),
        f"{prefix}_lambda_min": rep["value"],
        f"{prefix}_lambda_min_status": {k: rep[k] for k in ("status", "method", "hvps", "seconds", "reason")},
    }
    if problem.loss.classifier:
        out[f"{prefix}_accuracy"] = accuracy(problem, w)
    if alpha is not None:
        rho = problem.constants()[2]
        lam = rep["value"] if rep["status"] == "certified" else None
        out[f"{prefix}_is_alpha_sosp"] = (None if lam is None else bool(
            out[f"{prefix}_grad_norm"] <= alpha and lam >= -math.sqrt(rho * alpha)))
    return out


def goldstein(problem, blocks, block: int | None, radius: float, prefix: str = "train") -> dict:
    """Goldstein stationarity of a zeroth-order O2NC output (zhang-tran-cutkosky-2024,
    Lemma 4.6 and Corollary 4.7): for each block k, the proxy
    |(1/P) sum_t grad F(w^k_t)| over the block's kept iterates w^k_t (P evenly
    spaced steps of its T).  Every iterate of a block lies within the radius h
    (``radius``: T steps of length at most D = h/T) of the block average
    w-bar^k, so the mean of their gradients lies in the h-Goldstein
    subdifferential there and the proxy bounds its least norm from above: the
    output is an (h, proxy)-Goldstein-stationary point of F (with P < T the
    proxy estimates that of all T iterates).  Returns the proxy at the output
    block (``block``; None for an average over blocks), its minimum over the
    blocks, and the radius.  Non-private: the data's exact gradients."""
    px = [float(np.linalg.norm(np.mean([problem.gradient(w) for w in its], axis=0)))
          for its in blocks if len(its)]
    return {f"{prefix}_goldstein_proxy": None if block is None or not px else px[block],
            f"{prefix}_goldstein_proxy_min": min(px) if px else None, "goldstein_radius": float(radius)}


def trajectory_grad_norms(problem, steps, iterates, *, budget_s: float | None = None) -> dict:
    """True gradient norm at the recorded checkpoints (evaluation only); with
    ``budget_s``, checkpoints past the time budget are left out and counted in
    ``skipped`` (the last and the first - the returned point and the start -
    are always evaluated, then the rest from the end)."""
    t0 = time.perf_counter()
    steps = [int(s) for s in steps]
    k = len(steps)
    order = ([k - 1, 0] if k > 1 else [0][:k]) + list(range(k - 2, 0, -1))
    got = {}
    for i in order:
        if budget_s is not None and len(got) >= 2 and time.perf_counter() - t0 > budget_s:
            break
        got[i] = float(np.linalg.norm(problem.gradient(iterates[i])))
    keep = sorted(got)
    out = {"steps": [steps[i] for i in keep], "grad_norm": [got[i] for i in keep]}
    if len(keep) < len(steps):
        out["skipped"] = len(steps) - len(keep)
        out["skipped_reason"] = f"time budget of {budget_s:.3g} s"
    return out


def checkpoint_values(problem, steps, all_steps, iterates) -> dict:
    """Training loss and (classifiers) accuracy at the checkpoints ``steps``
    (evaluation only), the iterates being those of ``all_steps``: the curves
    ``dpreg plot run`` draws beside the gradient norm."""
    at = {int(s): w for s, w in zip(all_steps, iterates)}
    ws = [at[int(s)] for s in steps if int(s) in at]
    out = {"loss": [float(problem.value(w)) for w in ws]}
    if problem.loss.classifier:
        out["accuracy"] = [accuracy(problem, w) for w in ws]
    return out if len(ws) == len(steps) else {}
