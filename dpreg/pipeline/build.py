"""What the problem is built from, by public rules: the loss for the public
task, the label map, the regression targets' transform, the accountant, the
intercept and feature map, and the checks that the algorithm fits the problem."""
from __future__ import annotations

import os
from typing import Callable

from ..accounting import check_budget_args
from ..errors import ParameterError
from ..registry import get_loss
from .config import RunConfig, default_delta
from .context import Context


# ------------------------------------------------------- tasks: loss, labels, targets
def public_task(cfg: RunConfig, loaded) -> str | None:
    """The task as public facts give it, or None: the caller's ``cfg.task``;
    declared labels (two: binary, more: multi-class); the data set's declared
    task; explicit ``--target-bounds`` (regression).  Never read off the data."""
    if cfg.task is not None:
        from ..tasks import TASKS

        if cfg.task not in TASKS:
            raise ParameterError(f"task must be one of {', '.join(TASKS)}, got {cfg.task!r}")
        return cfg.task
    declared = loaded.schema.labels if loaded.schema is not None else None
    if declared is not None:
        return "multiclass" if len(declared) > 2 else "binary"
    task = getattr(loaded.source, "task", None)
    if task is not None:
        return task
    tb = cfg.target_bounds
    if tb is not None and not (isinstance(tb, str) and tb.strip().lower() in ("auto", "none")):
        return "regression"
    return None


#: the loss of ``--loss auto`` for each public task
AUTO_LOSS = {"binary": "logistic", "multiclass": "softmax", "regression": "squared"}


def resolve_loss(reg, cfg: RunConfig, loss, loaded):
    """``(loss, spec)`` for the run, from public facts only (:func:`public_task`):
    ``--loss auto`` is softmax for a multi-class task, squared for regression,
    else logistic; a loss that serves several tasks (a network's head:
    ``for_task(task, K)``) is configured for the public task, K the number of
    declared labels (the label map binds it otherwise)."""
    spec = cfg.loss
    task = public_task(cfg, loaded)
    if spec in (None, "auto"):
        spec = AUTO_LOSS.get(task, "logistic")
        loss = get_loss(reg, spec)
    for_task = getattr(loss, "for_task", None)
    if for_task is not None and task is not None:
        declared = loaded.schema.labels if loaded.schema is not None else None
        loss = for_task(task, len(declared) if (task == "multiclass" and declared is not None) else None)
    return loss, spec


def loss_spec_of(loss, spec: str) -> str:
    """The ``--loss`` string that rebuilds ``loss`` (its own ``spec()`` when it
    has one: a network's, with its head), else the one given."""
    own = getattr(loss, "spec", None)
    own = own() if callable(own) else own
    return own if isinstance(own, str) and own else spec


def training_label_map(loss, y, declared, where):
    """``(label map, loss)`` for the loss's task: a two-class
    :class:`~dpreg.data.LabelMap` (binary), a K-class
    :class:`~dpreg.data.ClassMap` with the loss bound to K classes
    (multi-class: :func:`dpreg.tasks.bind_classes`), or None (regression).
    The map is the declared one when the schema declares it, else read off the
    training labels (``source`` "inferred": the caller reports it)."""
    from ..data import ClassMap, LabelMap
    from ..tasks import bind_classes, loss_task

    task = loss_task(loss)
    if task == "binary":
        return LabelMap.for_training(y, declared, where), loss
    if task == "multiclass":
        cmap = ClassMap.for_training(y, declared, where)
        return cmap, bind_classes(loss, cmap.n_classes)
    if declared is not None:
        raise ParameterError(f"loss {loss.name!r} is a regression loss: it takes no --labels")
    return None, loss


def own_biases(loss) -> bool:
    """Whether the loss builds a model with its own bias terms (``mlp``): no
    intercept column then.  A loss that builds its own problem but is linear in
    the features (``softmax``: ``intercept_column``) takes the column."""
    return getattr(loss, "make_problem", None) is not None and not getattr(loss, "intercept_column", False)


def target_transform(cfg: RunConfig, loss, source, y, accountant, rng):
    """``(TargetTransform or None, info or None)`` for the run's regression
    targets (None for a loss that does not predict its target):

    * ``cfg.target_bounds`` (lo, hi) / "LO,HI": public bounds, declared;
    * "none": targets as they are (a robust loss's gradient is bounded anyway;
      every gradient is clipped in the kernel whatever the transform);
    * "auto" (default): the data set's declared ``target_bounds``, else
      symmetric bounds estimated privately with ``target_share`` of epsilon
      (:func:`dpreg.tasks.private_target_bounds`, pure DP, charged to the one
      accountant before the estimate and before the run, which calibrates to
      what is left).

    Nothing about the targets is read without one of these."""
    from ..tasks import (TargetTransform, check_regression_targets, parse_target_bounds, predicts_target,
                        private_target_bounds, target_event)

    raw = cfg.target_bounds
    if not predicts_target(loss):
        if raw is not None and not (isinstance(raw, str) and raw.strip().lower() in ("auto", "none")):
            raise ParameterError(f"--target-bounds applies to regression losses (squared, huber); "
                                 f"loss {loss.name!r} does not predict its target")
        return None, None
    check_regression_targets(y, "data")
    if isinstance(raw, str) and raw.strip().lower() == "none":
        return TargetTransform(), None
    parsed = parse_target_bounds(raw)
    if parsed not in (None, "auto"):
        return TargetTransform.bounds(*parsed, source="declared"), None
    declared = getattr(source, "target_bounds", None)
    if declared is not None:
        return TargetTransform.bounds(*declared, source="declared"), None
    eps_t = float(cfg.target_share) * float(cfg.epsilon)
    accountant.charge(target_event(eps_t), None, label="private target bounds (charged before the run)")
    lo, hi, info = private_target_bounds(y, eps_t, rng)
    return TargetTransform.bounds(lo, hi, source="private"), info


def check_algorithm_fits(algo_cls, params, problem, loss_spec: str) -> None:
    """Refuse, in one line and before any release, an algorithm whose
    requirements (:meth:`dpreg.interfaces.Algorithm.requirements`: e.g. the
    trust region's clipped per-record Hessians, zo-o2nc's zeroth-order sums)
    the problem does not provide (:func:`dpreg.interfaces.problem_supports`)."""
    from ..interfaces import problem_supports

    for cap, why in algo_cls.requirements(params).items():
        reason = problem_supports(problem, cap)
        if reason is not None:
            raise ParameterError(f"algorithm {algo_cls.name!r} needs {why}, which loss {loss_spec!r} does not "
                                 f"provide ({reason})")


def check_size(problem, algo_cls, params: dict, cfg: RunConfig) -> None:
    """Refuse, before anything of the model's size is allocated, a run whose
    estimated work or memory is out of reach (:func:`dpreg.limits.check_run_size`:
    public n, d and the run lengths given)."""
    from ..limits import check_run_size

    threads = cfg.threads or os.cpu_count() or 1
    loss = cfg.loss if isinstance(cfg.loss, str) and ":" in cfg.loss else ""
    check_run_size(problem, algo_cls, params, threads=threads, what=loss)


# ------------------------------------------------------- the accountant and the preprocessing
def make_accountant(ctx: Context, n: int):
    """``(accountant, delta)``: the run's one accountant over its budget, delta
    the given one or :func:`~.config.default_delta` of the public n (a warning
    when delta >= 1/n)."""
    cfg, plan = ctx.cfg, ctx.plan
    delta = cfg.delta if cfg.delta is not None else default_delta(n)
    check_budget_args(cfg.epsilon, delta)
    if delta >= 1.0 / n:
        ctx.warn(f"delta={delta:g} >= 1/n={1.0 / n:.3g}: a mechanism that publishes one random record in the clear "
                 f"meets this guarantee; use delta well below 1/n (default min(1e-5, 1/(10 n)))")
    return plan.acc_cls(cfg.epsilon, delta, plan.algo_cls.relation_for(plan.params)), delta


def intercept_for(cfg: RunConfig, loss, loss_spec: str) -> bool:
    """Whether the model gets an intercept column: ``--intercept`` if given,
    else on for classifiers and regression losses; never for a loss with its
    own bias terms (a network), which refuses ``--intercept``."""
    from ..tasks import predicts_target

    own_model = own_biases(loss)  # e.g. mlp: its own biases
    if own_model and cfg.intercept:
        raise ParameterError(f"loss {loss_spec!r} has its own bias terms: it takes no --intercept")
    return ((loss.classifier or predicts_target(loss)) and not own_model) if cfg.intercept is None \
        else bool(cfg.intercept)


def scaling_mode(cfg: RunConfig, declared, sparse_format: bool, common_scale: bool, n: int, d: int,
                 accountant) -> str:
    """The feature map of ``--scaling`` ("auto" resolved by a public rule:
    declared bounds, else none for sparse formats and sources that declare a
    common scale, else private scales where they pay for public n, d and the
    budget, else none)."""
    from ..preprocess import private_scaling_pays

    if cfg.scaling != "auto":
        return cfg.scaling
    return ("bounds" if declared is not None else
            "none" if common_scale or sparse_format else
            "private" if private_scaling_pays(n, d, accountant, cfg.scaling_share * cfg.epsilon) else "none")


def preprocessing(cfg: RunConfig, mode: str, d: int, intercept: bool, declared, private: Callable[[], tuple]):
    """``(Preprocessing, scaling info or None)`` of the feature map ``mode``:
    the bounds of ``--bounds`` (or the data set's declared ones), private
    scales (``private()``: releases and charges them, returns ``(lower, upper,
    info)``) or none."""
    from ..preprocess import Preprocessing, read_bounds

    if mode == "bounds":
        src = cfg.bounds if cfg.scaling == "bounds" else declared
        lo, hi = read_bounds(src, d) if isinstance(src, str) else (list(src[0]), list(src[1]))
        return Preprocessing(d, "bounds", lo, hi, intercept), None
    if mode == "private":
        lo, hi, info = private()
        return Preprocessing(d, "private", lo, hi, intercept), info
    return Preprocessing(d, "none", intercept=intercept), None
