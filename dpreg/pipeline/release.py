"""The release of a run (safe to publish): the model with its preprocessing,
the privacy statement and the public configuration."""
from __future__ import annotations

import numpy as np

from .build import loss_spec_of, own_biases
from .config import RELATION_TEXT, RELEASE_NOTE, SEEDED_NOTE
from .context import Built, Context, Data, Outcome


def model_dict(w: np.ndarray, loss, prep, label_map, zero_based: bool | None = None,
               loss_spec: str | None = None, target=None) -> dict:
    """The released model: weights over the transformed features (the last is
    the intercept's when ``prep.intercept``), the intercept in margin units,
    the label map, the task (with ``n_classes`` for K classes), the target
    transform of a regression model and the preprocessing to repeat (see
    :mod:`dpreg.model`).  A linear K-class model's ``weights`` are its p x K
    matrix, row-major; ``coef`` is K x n_features and ``intercept`` K values."""
    from ..tasks import loss_task

    w = np.asarray(w, dtype=float)
    own = own_biases(loss)
    task = loss_task(loss)
    K = getattr(loss, "n_classes", None) if task == "multiclass" else None
    coef = None if own else w[:prep.n_weights * (K or 1)]
    if own:
        intercept = 0.0
    elif K:
        W = w.reshape(prep.n_weights, K)
        coef = W[:prep.n_features].T
        intercept = (W[-1] * prep.intercept_scaling).tolist() if prep.intercept else [0.0] * K
    else:
        coef = w[:prep.n_features]
        intercept = float(w[-1] * prep.intercept_scaling) if prep.intercept else 0.0
    out = {
        "kind": "problem" if own else "linear",  # "problem": the loss's own model (e.g. mlp)
        "loss": loss.name,
        "loss_spec": loss_spec or loss.name,
        "task": task,
        "classifier": bool(loss.classifier),
        "weights": w,
        "coef": coef,
        "intercept": intercept,
        "n_features": prep.n_features,
        "label_map": label_map.as_dict() if label_map is not None else None,
        "zero_based": zero_based,
        "preprocessing": prep.as_dict(),
    }
    if K:
        out["n_classes"] = int(K)
    if target is not None:
        out["target"] = target.as_dict()
    return out


def privacy_statement(accountant, algo_cls, noise_name, info, cfg, n, scaling_info, eps_sel,
                      target_info=None) -> dict:
    """The release's privacy statement: what is protected and how."""
    mechanisms = list(algo_cls.release_mechanisms(info if isinstance(info, dict) else {}, noise_name))
    if scaling_info is not None:
        mechanisms.append({"what": "private feature scales", "noise": "gaussian",
                           "noise_multiplier": scaling_info["noise_multiplier"],
                           "epsilon_share": scaling_info["epsilon"]})
    if target_info is not None:
        mechanisms.append({"what": "private target bounds", "noise": "laplace (above-threshold, pure epsilon-DP)",
                           "epsilon_share": target_info["epsilon"]})
    if eps_sel is not None:
        mechanisms.append({"what": f"{cfg.select} output selection", "noise": "pure epsilon-DP selector",
                           "epsilon_share": eps_sel})
    seeded = cfg.seed is not None
    return {
        "epsilon": accountant.epsilon_spent,
        "epsilon_budget": accountant.epsilon_budget,
        "delta": accountant.delta,
        "unit": "one record",
        "relation": "zero-out" if accountant.relation == "add-remove" else accountant.relation,
        "relation_text": RELATION_TEXT[accountant.relation],
        "n": n,
        "n_public": True,
        "accountant": f"{accountant.name} (Google dp-accounting)",
        "mechanisms": mechanisms,
        "randomness": "seeded" if seeded else "secret",
        "randomness_note": SEEDED_NOTE if seeded else
        "mechanism randomness drawn from the operating system's entropy; not recorded",
        "not_covered": ["hyper-parameter tuning across runs on the same data",
                        "the diagnostics part of the record"],
    }


def make_release(ctx: Context, data: Data, built: Built, outcome: Outcome) -> dict:
    """The record's ``release`` (safe to publish): the model, the privacy
    statement and the public configuration of the run."""
    from ..tasks import loss_task

    cfg, plan = ctx.cfg, ctx.plan
    loss, accountant = data.loss, built.accountant
    return {
        "note": RELEASE_NOTE,
        "model": model_dict(outcome.w, loss, built.prep, data.label_map, data.zero_based,
                            loss_spec=loss_spec_of(loss, data.loss_spec), target=built.target),
        "privacy": privacy_statement(accountant, plan.algo_cls, plan.noise_name, outcome.out.info, cfg, built.n,
                                     built.scaling_info, built.eps_sel, built.target_info),
        "config": {
            "algo": plan.algo_cls.name, "paper": plan.algo_cls.paper, "data_access": plan.algo_cls.data_access,
            "noise": plan.noise_name, "loss": loss.name, "data": data.description, "test_data": data.test_desc,
            "epsilon": cfg.epsilon, "delta": built.delta, "accountant": accountant.name,
            "params_given": plan.given, "params_resolved": plan.params, "alpha": cfg.alpha,
            "select": cfg.select, "select_share": cfg.select_share if cfg.select else None,
            "split_seed": cfg.split_seed, "test_fraction": cfg.test_fraction, "task": loss_task(loss),
            "loss_spec": data.loss_spec,
            "schema": {"n_features": built.prep.n_features,
                       "declared": sorted({"n_features", "zero_based", "labels"} - set(data.inferred))},
        },
    }
