"""Evaluation metrics, computed after a run on the returned point (privacy
rule 5: they are not private and never feed back into a run).

lambda_min of the Hessian: dense eigvalsh for d <= DENSE_MAX_D, otherwise
Lanczos (scipy ``eigsh``, which='SA') on the Hessian-vector-product kernel, so
no d x d matrix (or n x d temporary) is formed for large d.  A diagnostic must
never cost more than a run: Lanczos is capped at LANCZOS_MAX_MATVECS
Hessian-vector products (an unconverged estimate is reported as such) and is
skipped above LANCZOS_MAX_D (environment DPREG_LAMBDA_MIN_MAX_D raises it).
"""
from __future__ import annotations

import math

import numpy as np

DENSE_MAX_D = 300
LANCZOS_MAX_MATVECS = 300


def _lanczos_max_d() -> int:
    import os

    try:
        return int(os.environ.get("DPREG_LAMBDA_MIN_MAX_D", "2000"))
    except ValueError:
        return 2000


def lambda_min(problem, w) -> float | None:
    """Smallest eigenvalue of the empirical Hessian at w (None when skipped:
    d above the Lanczos limit, or no Ritz value within the matvec cap); a
    problem that knows it exactly answers itself (its ``lambda_min(w)``:
    softmax, whose Hessian is singular and positive semi-definite)."""
    own = getattr(problem, "lambda_min", None)
    if own is not None:
        return float(own(w))
    if problem.d <= DENSE_MAX_D:
        return float(np.linalg.eigvalsh(problem.hessian(w))[0])
    if problem.d > _lanczos_max_d():
        return None
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

    op = LinearOperator((problem.d, problem.d), matvec=lambda v: problem.hvp(w, np.ravel(v)), dtype=float)
    try:
        vals = eigsh(op, k=1, which="SA", tol=1e-6, maxiter=LANCZOS_MAX_MATVECS,
                     v0=np.ones(problem.d) / math.sqrt(problem.d), return_eigenvectors=False)
    except ArpackNoConvergence as exc:
        vals = exc.eigenvalues
        if vals is None or len(vals) == 0:
            return None
    return float(vals[0])


def accuracy(problem, w) -> float:
    """Fraction of records classified right: sign(decision function) == y for
    a binary model (labels -1/+1, <x, w> for linear models; ties count as
    wrong), the class of the largest output == y for a K-class model (labels
    0..K-1; ties go to the first class)."""
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


def evaluate(problem, w, *, alpha: float | None = None, prefix: str = "train") -> dict:
    """Gradient norm, lambda_min, loss and (for classifiers) accuracy at w, and
    whether w is an alpha-SOSP: |grad| <= alpha and lambda_min >= -sqrt(rho alpha)."""
    g = problem.gradient(w)
    out = {
        f"{prefix}_grad_norm": float(np.linalg.norm(g)),
        f"{prefix}_loss": float(problem.value(w)),
        f"{prefix}_lambda_min": lambda_min(problem, w),
    }
    if problem.loss.classifier:
        out[f"{prefix}_accuracy"] = accuracy(problem, w)
    if alpha is not None:
        rho = problem.constants()[2]
        lam = out[f"{prefix}_lambda_min"]
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


def trajectory_grad_norms(problem, steps, iterates) -> dict:
    """True gradient norm at the recorded checkpoints (evaluation only)."""
    return {"steps": [int(s) for s in steps],
            "grad_norm": [float(np.linalg.norm(problem.gradient(w))) for w in iterates]}
