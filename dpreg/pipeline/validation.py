"""The validate stage: everything a user can get wrong, checked before any
private computation (names, budget, parameters, schema options, selector),
and the run's reporting channels."""
from __future__ import annotations

import inspect
import math
import os
from typing import Callable

import numpy as np

from ..accounting import check_budget_args
from ..errors import ParameterError
from ..params import bind, params_dict
from ..registry import get_loss, parse_name_options
from .config import RunConfig
from .context import Plan


def validate(cfg: RunConfig, reg) -> Plan:
    """The run's :class:`~.context.Plan`: every name looked up in the
    registry, the parameters bound to the algorithm's ParamSpecs, every option
    checked - before any data is read.  Raises a one-line DpregError for the
    first thing the user got wrong."""
    algo_cls = reg.get("algorithm", cfg.algo)
    loss = None if cfg.loss in (None, "auto") else get_loss(reg, cfg.loss)  # "auto": resolved with the data
    acc_cls = reg.get("accountant", cfg.accountant)
    if cfg.noise is not None and not algo_cls.uses_noise:
        raise ParameterError(f"algorithm {cfg.algo!r} keeps no running sum and takes no --noise")
    noise_name = cfg.noise or ((algo_cls.default_noise or ("tree" if "tree" in reg.names("noise") else "gaussian"))
                               if algo_cls.uses_noise else None)
    noise_cls = reg.get("noise", noise_name) if noise_name else None
    given = params_dict(cfg.params)
    params = bind(algo_cls.params, given, f"algorithm {cfg.algo!r}")
    check_options(cfg, loss)
    sel_cls, sel_opts = check_selection(cfg, reg)
    return Plan(algo_cls, loss, acc_cls, noise_name, noise_cls, given, params, sel_cls, sel_opts)


def check_options(cfg: RunConfig, loss) -> None:
    """The numeric and schema options of ``cfg``: budget, seeds, diagnostics
    budget, alpha, test split, features, scaling, target bounds and shares."""
    check_budget_args(cfg.epsilon, cfg.delta if cfg.delta is not None else 0.5)
    for name in ("seed", "split_seed"):
        v = getattr(cfg, name)
        if v is None and name == "seed":
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ParameterError(f"{name.replace('_', '-')} must be an integer >= 0, got {v!r}")
    if cfg.diagnostics_budget is not None and not (
            isinstance(cfg.diagnostics_budget, (int, float)) and not isinstance(cfg.diagnostics_budget, bool)
            and cfg.diagnostics_budget >= 0 and not math.isnan(cfg.diagnostics_budget)):
        raise ParameterError(f"diagnostics budget must be a number of seconds >= 0, got {cfg.diagnostics_budget!r}")
    if cfg.alpha is not None and not (isinstance(cfg.alpha, (int, float)) and cfg.alpha > 0):
        raise ParameterError(f"alpha must be > 0, got {cfg.alpha}")
    if cfg.test_fraction is not None and cfg.test_data is not None:
        raise ParameterError("give either --test-data or --test-fraction, not both")
    if cfg.features is not None and not (isinstance(cfg.features, (int, np.integer)) and cfg.features >= 1):
        raise ParameterError(f"features must be an integer >= 1, got {cfg.features!r}")
    from ..preprocess import MODES

    if cfg.scaling not in MODES:
        raise ParameterError(f"scaling must be one of {', '.join(MODES)}, got {cfg.scaling!r}")
    if (cfg.scaling == "bounds") != (cfg.bounds is not None):
        raise ParameterError("--bounds FILE goes with --scaling bounds (and only with it)")
    if not (isinstance(cfg.target_share, (int, float)) and 0 < cfg.target_share < 1):
        raise ParameterError(f"target share must be in (0, 1), got {cfg.target_share!r}")
    if cfg.target_bounds is not None and not (isinstance(cfg.target_bounds, str)
                                              and cfg.target_bounds.strip().lower() in ("auto", "none")):
        from ..tasks import parse_target_bounds, predicts_target

        parse_target_bounds(cfg.target_bounds)
        # known before any data is read, unless the loss takes its task from the data (a network's head)
        if loss is not None and not predicts_target(loss) and not hasattr(loss, "for_task"):
            raise ParameterError(f"--target-bounds applies to regression losses (squared, huber); "
                                 f"loss {loss.name!r} does not predict its target")
    if cfg.scaling == "private" and not (0 < cfg.scaling_share < 1):
        raise ParameterError(f"scaling share must be in (0, 1), got {cfg.scaling_share!r}")


def check_selection(cfg: RunConfig, reg) -> tuple:
    """``(selector class, its options)`` of ``--select`` (both None without
    one); bad options and a missing ``--alpha`` fail here, before any work."""
    sel_cls = sel_opts = None
    if cfg.select is not None:
        sel_name, sel_given = parse_name_options(cfg.select)
        sel_cls = reg.get("selector", sel_name)
        sel_opts = selector_options(sel_cls, sel_name, sel_given)  # bad options fail here, before any work
        if not (isinstance(cfg.select_share, (int, float)) and 0 < cfg.select_share < 1):
            raise ParameterError(f"select share must be in (0, 1), got {cfg.select_share!r}")
        if "alpha" in inspect.signature(sel_cls.select).parameters and cfg.alpha is None:
            raise ParameterError(f"--select {cfg.select} tests alpha-stationarity: give --alpha")
    return sel_cls, sel_opts


def parse_labels(raw) -> tuple[float, ...] | None:
    """``"NEG,POS"`` or ``"a,b,c"`` (or a sequence) -> the raw label values in
    order: two for a binary task (negative, positive), K for K classes."""
    if raw is None:
        return None
    parts = raw.split(",") if isinstance(raw, str) else list(raw)
    try:
        vals = tuple(float(v) for v in parts)
    except (TypeError, ValueError):
        raise ParameterError(f"labels must be numbers NEG,POS (two classes) or a,b,c,... (K classes); "
                             f"got {raw!r}") from None
    if len(vals) < 2 or not all(math.isfinite(v) for v in vals):
        raise ParameterError(f"labels must be at least two finite numbers; got {raw!r}")
    if len(set(vals)) != len(vals):
        raise ParameterError(f"labels must be different numbers; got {raw!r}")
    return vals


def selector_options(sel_cls, name: str, given: dict) -> dict:
    """The constructor options of ``--select NAME:key=value,...`` (``given``,
    value strings), parsed by the selector's declared ParamSpecs (``dpreg info
    NAME``); only the options given.  ``alpha`` is the run's ``--alpha`` (one way
    to set it), never an option here."""
    if "alpha" in given:
        raise ParameterError(f"--select {name}: give alpha with --alpha, not as a selector option")
    specs = [s for s in getattr(sel_cls, "params", ()) if s.name != "alpha"]
    values = bind(specs, given, f"selector {name}")
    return {k: values[k] for k in given}


def privacy_warner(warn) -> Callable[[str], None]:
    """The function a run reports its privacy warnings through: ``warn`` if
    callable, nothing for False, else :func:`warnings.warn` with
    :class:`dpreg.PrivacyWarning` (aimed at the caller of :func:`dpreg.run`
    or of ``DPClassifier.fit``)."""
    if callable(warn):
        return warn
    if warn is False:
        return lambda msg: None

    def raise_warning(msg: str) -> None:
        from ..errors import PrivacyWarning

        warn_at_caller(msg, PrivacyWarning)

    return raise_warning


def warn_at_caller(msg: str, category) -> None:
    """``warnings.warn(msg, category)`` aimed at the first frame outside the
    dpreg package: the user's line that called :func:`dpreg.run`, ``fit`` or
    :func:`run_pipeline`, however deep in the stages the warning arises."""
    import inspect
    import warnings

    inside = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(inside):
        frame = frame.f_back
        level += 1
    warnings.warn(msg, category, stacklevel=level)


def runs_data_parallel(cfg: RunConfig) -> bool:
    """Whether ``cfg`` runs on sharded data (:mod:`dpreg.backends`): its data
    are a directory or glob of shard files, or its backend is "dask" (or it
    names a scheduler) - the backend of the data, for algorithms that have no
    backend parameter of their own (distributed-spider has)."""
    from ..backends.shards import looks_sharded

    if cfg.backend not in (None, "local", "dask"):
        raise ParameterError(f"backend must be local or dask, got {cfg.backend!r}")
    return looks_sharded(cfg.data) or cfg.backend == "dask" or cfg.scheduler is not None


def set_threads(k: int, warn=None) -> None:
    """numba's thread count for the kernels: ``k``, or at most the threads
    numba started (``NUMBA_NUM_THREADS``, the cores by default) - saying so,
    through ``warn`` (the CLI's one-line warnings) or a DpregWarning."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ParameterError(f"threads must be an integer >= 1, got {k!r}")
    import numba

    top = int(numba.config.NUMBA_NUM_THREADS)
    if k > top:
        msg = (f"threads={int(k)}: numba runs at most {top} thread{'s' if top != 1 else ''} here "
               f"(NUMBA_NUM_THREADS, by default the {os.cpu_count()} cores); using {top}")
        if callable(warn):
            warn(msg)
        elif warn is not False:
            from ..errors import DpregWarning

            warn_at_caller(msg, DpregWarning)
    numba.set_num_threads(min(int(k), top))
