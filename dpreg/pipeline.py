"""Assemble a pipeline by name and run it.

:func:`run_pipeline` is the one path from a :class:`RunConfig` to a JSON
record: it validates everything a user can get wrong *before* any private
computation (names, budget, parameters, data, output path), builds the
problem, the accountant and the algorithm through the registry, runs it, and
writes a record in two parts:

* ``release`` - the model (weights, intercept, label map, preprocessing to
  repeat), the privacy statement (epsilon, delta, relation, accountant,
  mechanisms, randomness mode) and the public configuration: safe to publish;
* ``diagnostics`` - everything computed on the raw data after the run
  (metrics, baselines, trajectory, usage, clip counts, timings, what of the
  schema was inferred), labelled non-private.  ``diagnostics=False`` writes
  the release alone (and computes none of it).

Randomness (privacy rule 4): the mechanisms' root seed is secret - OS entropy
unless ``seed`` is given (research mode, flagged in the release).  Public
randomness (the ``test_fraction`` split, synthetic data) uses ``split_seed``.
"""
from __future__ import annotations

import inspect
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .accounting import check_budget_args
from .data import is_sparse, is_svmlight_path
from .errors import DataError, DpregError, ParameterError
from .params import bind, params_dict
from .registry import get_registry

DEFAULTS = {"algo": "adaptive-spider", "noise": "tree", "loss": "auto", "data": "adult"}

#: one sentence, in the record and on the terminal, whenever a seed is given
SEEDED_NOTE = ("randomness is seeded (--seed): the privacy guarantee holds only while the seed stays "
               "secret; anyone who knows it can recompute the noise")
RELEASE_NOTE = ("safe to publish: the model, its preprocessing and this privacy statement are "
                "(epsilon, delta)-differentially private outputs of the run")
DIAGNOSTICS_NOTE = ("NOT private: computed on the raw data after the run (metrics, baselines, "
                    "trajectory, counts, timings); do not publish")
#: the neighbouring relations in words (record, ``dpreg info``, README)
RELATION_TEXT = {
    "replace-one": "replace-one: neighbouring data sets differ in one record, replaced by any other",
    "add-remove": "zero-out (add/remove with n public): a neighbour replaces one record by a null "
                  "record whose gradient is zero, so n stays public and fixed",
}


#: the least time budget of a costly diagnostic (``RunConfig.diagnostics_budget`` None: the
#: run's own time, but at least this): below it a budget would only measure Python's overhead
DIAGNOSTICS_MIN_BUDGET_S = 0.05


def diagnostics_budget(given: float | None, run_s: float) -> float:
    """Seconds the costly diagnostics may take together: ``given``, else the
    run's own time (at least :data:`DIAGNOSTICS_MIN_BUDGET_S`)."""
    if given is not None:
        return float(given)
    return max(float(run_s), DIAGNOSTICS_MIN_BUDGET_S)


def default_delta(n: int) -> float:
    """min(1e-5, 1/(10 n)): well below 1/n, the delta at which releasing one
    random record in the clear is already (0, delta)-DP, and the customary
    1e-5 for data sets of up to 10^4 records."""
    return min(1e-5, 1.0 / (10.0 * n))


@dataclass
class RunConfig:
    """Everything ``dpreg run`` accepts (see ``dpreg run --help``).

    ``data`` / ``test_data``: a data-set name (``name:key=value,...``), a file
    path, or an ``(X, y)`` pair of arrays.  ``seed``: None (secret OS entropy,
    the default) or a research seed.  ``features`` / ``zero_based`` /
    ``labels``: the public schema (None: the data set's declared one, else
    inferred and reported; two values NEG,POS or K values for K classes).
    ``loss`` "auto": softmax when K > 2 classes are declared, squared for a
    data set that declares a regression task, else logistic.
    ``intercept``: None = on for classifiers and regression losses.
    ``scaling``: "auto" (the data set's declared public bounds if any; none
    for a source that declares a common scale, an svmlight file or a sparse
    array; else private scales where ``preprocess.private_scaling_pays``
    -- a rule on public n, d and the budget --, else none), "none", "bounds" (with ``bounds``: a CSV file or a (lower, upper)
    pair of per-feature lists) or "private" (spends
    ``scaling_share`` of epsilon).
    """

    algo: str = DEFAULTS["algo"]
    noise: str | None = None
    loss: str = DEFAULTS["loss"]
    data: Any = DEFAULTS["data"]
    test_data: Any = None
    test_fraction: float | None = None
    epsilon: float = 1.0
    delta: float | None = None
    accountant: str = "rdp"
    params: Any = field(default_factory=dict)
    seed: int | None = None
    split_seed: int = 0
    features: int | None = None
    zero_based: bool | None = None
    labels: Any = None
    #: regression targets: "auto" (the data set's declared bounds, else a
    #: private estimate spending ``target_share`` of epsilon), (lo, hi) / "LO,HI"
    #: public bounds, or "none" (targets as they are); see :mod:`dpreg.tasks`
    target_bounds: Any = "auto"
    target_share: float = 0.1
    #: the task when the caller knows it ("binary", "multiclass", "regression":
    #: the scikit-learn estimators); None: from the public schema (declared
    #: labels, the data set's declared task, explicit target bounds)
    task: str | None = None
    intercept: bool | None = None
    scaling: str = "auto"
    bounds: str | None = None
    scaling_share: float = 0.1
    alpha: float | None = None
    select: str | None = None
    select_share: float = 0.1
    out: str | None = None
    #: True (everything), "light" (counts and accounting, no evaluation) or False (the release alone)
    diagnostics: bool | str = True
    #: wall seconds the costly diagnostics of the run (the lambda_min certificates of train and
    #: test, the trajectory's gradient norms) may take together, in equal parts; None: the run's own
    #: time (at least DIAGNOSTICS_MIN_BUDGET_S), so they cost no more than the run; inf: no limit
    #: (the non-private optimum is the data set's reference: solved once, then cached)
    diagnostics_budget: float | None = None
    progress: Callable[[int, int], None] | None = None
    #: privacy warnings (one line each): None raises them with ``warnings.warn`` as
    #: :class:`dpreg.PrivacyWarning`; a callable gets each message instead (the CLI
    #: prints them); False drops them
    warn: Callable[[str], None] | bool | None = None
    #: called with the name of each stage (loading data, kernels, running, evaluating)
    stage: Callable[[str], None] | None = None
    #: numba threads for the kernels (None: numba's default, all cores)
    threads: int | None = None
    #: write ``out`` at the end of the run (the CLI writes it itself, after
    #: printing the summary, so a failing write loses nothing it printed)
    write_record: bool = True
    #: where the records are held for a data-parallel run (:mod:`dpreg.backends`):
    #: None or "local" (this process), "dask" (Dask worker processes); data that
    #: are a directory or glob of shard files always run data-parallel
    backend: str | None = None
    #: address of a running Dask scheduler (backend "dask"; None: a LocalCluster)
    scheduler: str | None = None
    #: worker processes of the LocalCluster (None: one per shard, at most one per core)
    workers: int | None = None
    #: numba threads per worker (None: the cores shared out over the workers)
    worker_threads: int | None = None
    #: memory limit per LocalCluster worker (bytes or a string such as "2GiB"; None: Dask's share)
    worker_memory: Any = None
    #: seconds to reach the scheduler before giving up
    scheduler_timeout: float = 10.0
    #: where the algorithm starts: None (its own start) or a parameter vector of the problem, public
    #: input such as an earlier release's ``model["weights"]`` (the scikit-learn estimators'
    #: ``warm_start``); only algorithms that honour an initial point accept one
    init: Any = None


def _parse_name_options(spec: str) -> tuple[str, dict]:
    """``"name:key=value,..."`` -> (name, {key: value string}) (data sets, losses, selectors).
    A part without ``=`` continues the value before it: ``mlp:hidden=64,32,activation=tanh``
    gives ``{"hidden": "64,32", "activation": "tanh"}``."""
    name, _, opts = spec.partition(":")
    kw = {}
    if opts:
        last = None
        for part in opts.split(","):
            k, eq, v = part.partition("=")
            if not eq and last is not None and part.strip():
                kw[last] += "," + part.strip()
                continue
            if not eq or not k.strip():
                raise ParameterError(f"options must look like name:key=value,...; got {spec!r}")
            last = k.strip()
            kw[last] = v.strip()
    return name, kw


def get_loss(reg, spec: str):
    """The loss named by ``spec`` (``name`` or ``name:key=value,...``): options
    go to the registered loss, which must then be callable (a loss factory:
    ``loss(**options)`` returns the configured loss)."""
    name, kw = _parse_name_options(spec)
    loss = reg.get("loss", name)
    if not kw:
        return loss
    if not callable(loss):
        raise ParameterError(f"loss {name!r} takes no options; got {spec!r}")
    try:
        return loss(**kw)
    except TypeError as exc:
        raise ParameterError(f"loss {name!r}: bad options {kw}: {exc}") from None


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


@dataclass
class Loaded:
    """Raw data as loaded, before any preprocessing."""

    X: np.ndarray
    y: np.ndarray
    description: str
    source: Any = None          # a DatasetSource for registered names
    schema: Any = None          # the schema the data was read with
    inferred: dict = field(default_factory=dict)
    #: whether X is the loader's own array (False: the caller's array, which is never written into)
    owned: bool = True


def load_data(spec, *, schema, split_seed: int, test: bool = False) -> Loaded:
    """Raw (X, y) of a data-set name, a file path or an (X, y) pair; nothing
    preprocessed.  ``schema`` (a :class:`dpreg.data.Schema`) overrides the
    source's declared one; what neither declares is inferred and listed."""
    from .data import DatasetSource, Schema, load_file

    where = "test data" if test else "data"
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        X, y = spec
        try:
            if is_sparse(X):
                X = X.tocsr().astype(np.float64)
                owned = True
            else:  # the caller's array is not copied: nothing writes into an array the pipeline does not own
                X0 = X
                X = np.asarray(X, dtype=np.float64)
                owned = X is not X0 and not np.shares_memory(X, X0)
            y = np.array(y, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{where}: arrays must hold real numbers: {exc}") from None
        if X.ndim != 2:
            raise DataError(f"{where}: features must be a 2-D array, got shape {X.shape}")
        return Loaded(X, y, f"arrays ({X.shape[0]} x {X.shape[1] if X.ndim == 2 else '?'})",
                      schema=schema, owned=owned)
    if not isinstance(spec, str):
        raise DataError(f"{where} must be a data-set name, a file path or an (X, y) pair; got {type(spec).__name__}")
    reg = get_registry()
    name, kw = _parse_name_options(spec)
    if name in reg.names("dataset"):
        factory = reg.get("dataset", name)
        try:
            src: DatasetSource = factory(**kw)
            with np.errstate(all="ignore"):  # bad options: one error line, no warnings
                X, y = src.load(split_seed)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"data set {name!r}: bad options {kw}: {exc}") from None
        except MemoryError:
            raise ParameterError(f"data set {spec!r} does not fit in memory") from None
        return Loaded(X, y, spec, src, schema.merged(src.schema))
    if kw or not os.path.exists(spec):
        if os.path.sep in spec or "." in os.path.basename(spec):
            raise DataError(f"{where} file not found: {spec}")
        raise DataError(
            f"no data set or file named {spec!r}; built-in data sets: {', '.join(reg.names('dataset'))}"
        )
    X, y, inferred = load_file(spec, schema if isinstance(schema, Schema) else Schema())
    return Loaded(X, y, public_file_name(spec), schema=schema, inferred=inferred)


def public_file_name(path: str) -> str:
    """How a data file is named in a run's release and messages: its base
    name.  The release is published; the absolute path - or a relative one,
    which depends on where the command ran - would tell readers the user's
    directory layout (account, project and folder names) and mean nothing on
    their machine, while the base name still says which file it was."""
    return os.path.basename(os.path.normpath(path)) or path


def load_prepared(spec, *, seed: int = 0, labels: str = "binary", d: int | None = None, test: bool = False):
    """``(X, y, source, description)`` ready for a :class:`~dpreg.problem.Problem`
    without an intercept: loaded (``seed`` is the public split seed of
    synthetic sets), validated, labels mapped to -1/+1 (fixed or inferred
    map), rows scaled into the unit ball.  For scripts, benchmarks and tests;
    ``dpreg run`` goes through :func:`run_pipeline`."""
    from .data import Schema, prepare

    tr = load_data(spec, schema=Schema(n_features=d), split_seed=seed, test=test)
    X, y = prepare(tr.X, tr.y, labels=labels, where=str(tr.description), d=d, copy=False)
    return X, y, tr.source, tr.description


def _validate(cfg: RunConfig, reg):
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
    from .preprocess import MODES

    if cfg.scaling not in MODES:
        raise ParameterError(f"scaling must be one of {', '.join(MODES)}, got {cfg.scaling!r}")
    if (cfg.scaling == "bounds") != (cfg.bounds is not None):
        raise ParameterError("--bounds FILE goes with --scaling bounds (and only with it)")
    if not (isinstance(cfg.target_share, (int, float)) and 0 < cfg.target_share < 1):
        raise ParameterError(f"target share must be in (0, 1), got {cfg.target_share!r}")
    if cfg.target_bounds is not None and not (isinstance(cfg.target_bounds, str)
                                              and cfg.target_bounds.strip().lower() in ("auto", "none")):
        from .tasks import parse_target_bounds, predicts_target

        parse_target_bounds(cfg.target_bounds)
        # known before any data is read, unless the loss takes its task from the data (a network's head)
        if loss is not None and not predicts_target(loss) and not hasattr(loss, "for_task"):
            raise ParameterError(f"--target-bounds applies to regression losses (squared, huber); "
                                 f"loss {loss.name!r} does not predict its target")
    if cfg.scaling == "private" and not (0 < cfg.scaling_share < 1):
        raise ParameterError(f"scaling share must be in (0, 1), got {cfg.scaling_share!r}")
    sel_cls = sel_opts = None
    if cfg.select is not None:
        sel_name, sel_given = _parse_name_options(cfg.select)
        sel_cls = reg.get("selector", sel_name)
        sel_opts = selector_options(sel_cls, sel_name, sel_given)  # bad options fail here, before any work
        if not (isinstance(cfg.select_share, (int, float)) and 0 < cfg.select_share < 1):
            raise ParameterError(f"select share must be in (0, 1), got {cfg.select_share!r}")
        if "alpha" in inspect.signature(sel_cls.select).parameters and cfg.alpha is None:
            raise ParameterError(f"--select {cfg.select} tests alpha-stationarity: give --alpha")
    return algo_cls, loss, acc_cls, noise_name, noise_cls, given, params, sel_cls, sel_opts


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
        import warnings

        from .errors import PrivacyWarning

        warnings.warn(msg, PrivacyWarning, stacklevel=4)

    return raise_warning


def _pipeline_rng(cfg: RunConfig, root: int, stream: int) -> np.random.Generator:
    """A mechanism Generator of the pipeline itself (scaling, selection),
    from the run's secret root."""
    return np.random.default_rng(np.random.SeedSequence([root, 0x5E1EC7, stream]))


# ------------------------------------------------------- tasks: loss, labels, targets
def public_task(cfg: RunConfig, loaded) -> str | None:
    """The task as public facts give it, or None: the caller's ``cfg.task``;
    declared labels (two: binary, more: multi-class); the data set's declared
    task; explicit ``--target-bounds`` (regression).  Never read off the data."""
    if cfg.task is not None:
        from .tasks import TASKS

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
    from .data import ClassMap, LabelMap
    from .tasks import bind_classes, loss_task

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
    from .tasks import (TargetTransform, check_regression_targets, parse_target_bounds, predicts_target,
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
    from .interfaces import problem_supports

    for cap, why in algo_cls.requirements(params).items():
        reason = problem_supports(problem, cap)
        if reason is not None:
            raise ParameterError(f"algorithm {algo_cls.name!r} needs {why}, which loss {loss_spec!r} does not "
                                 f"provide ({reason})")


def run_pipeline(cfg: RunConfig) -> dict:
    """Run one configured pipeline; return the JSON-ready record (and write it
    to ``cfg.out`` if given).  Raises DpregError for anything the user got wrong,
    before any private computation when it can be known in advance."""
    from .data import LabelMap, Schema, prepare, split
    from .interfaces import secret_seed
    from .tasks import loss_task, predicts_target
    from .preprocess import Preprocessing, private_scales, private_scaling_pays, read_bounds
    from .problem import make_problem
    from .results import check_writable, to_json, write_atomic

    if runs_data_parallel(cfg):
        from .backends.pipeline import run_sharded

        return run_sharded(cfg)
    t_start = time.perf_counter()
    warn = privacy_warner(cfg.warn)
    stage = cfg.stage or (lambda name: None)
    reg = get_registry()
    algo_cls, loss, acc_cls, noise_name, noise_cls, given, params, sel_cls, sel_opts = _validate(cfg, reg)
    if cfg.out is not None:
        check_writable(cfg.out)
    if cfg.threads is not None:
        _set_threads(cfg.threads, cfg.warn)
    root = secret_seed(cfg.seed)  # the pipeline's own mechanisms (scaling, selection)

    # ---- data (raw) and the public schema
    stage("loading data")
    t0 = time.perf_counter()
    user_schema = Schema(cfg.features, cfg.zero_based, parse_labels(cfg.labels))
    tr = load_data(cfg.data, schema=user_schema, split_seed=cfg.split_seed)
    X, y = tr.X, tr.y
    inferred = dict(tr.inferred)
    # validate (shape, finite values); labels mapped below, rows scaled with the preprocessing
    X, y = prepare(X, y, labels="real", where=f"data {tr.description}", scale_rows=False)
    loss, loss_spec = resolve_loss(reg, cfg, loss, tr)
    label_map, loss = training_label_map(loss, y, tr.schema.labels if tr.schema else None,
                                         f"data {tr.description}")
    if label_map is not None and label_map.source == "inferred":
        inferred["labels"] = ([label_map.negative, label_map.positive] if isinstance(label_map, LabelMap)
                              else list(label_map.classes))
    Xte = yte = callers_test_X = None
    test_desc = None
    if cfg.test_data is not None:
        te_schema = Schema(X.shape[1], inferred.get("zero_based", (tr.schema or Schema()).zero_based))
        te = load_data(cfg.test_data, schema=te_schema, split_seed=cfg.split_seed, test=True)
        Xte, yte, test_desc = te.X, te.y, te.description
        callers_test_X = None if te.owned else te.X  # never written into
    elif cfg.test_fraction is not None:
        X, y, Xte, yte = split(X, y, cfg.test_fraction, cfg.split_seed)
        test_desc = f"split {cfg.test_fraction:g} of {tr.description} (split seed {cfg.split_seed})"
    elif tr.source is not None and tr.source.load_test is not None:
        Xte, yte = tr.source.load_test(cfg.split_seed)
        test_desc = f"{tr.description} (held-out set)"
    if Xte is not None:
        Xte, yte = prepare(Xte, yte, labels="real", where="test data", d=X.shape[1], scale_rows=False,
                           min_rows=1)
    if label_map is not None:
        y = label_map.apply(y, f"data {tr.description}")
        if Xte is not None:
            yte = label_map.apply(yte, "test data")
    # warnings only once the input is known to be usable (a user error stays one line)
    if cfg.seed is not None:
        warn(SEEDED_NOTE)
    if inferred:
        warn("schema inferred from the data (" + ", ".join(f"{k}={v}" for k, v in inferred.items())
             + "): one record can change it; declare --features/--zero-based/--one-based/--labels")
    t_data = time.perf_counter() - t0
    n, d_raw = X.shape
    delta = cfg.delta if cfg.delta is not None else default_delta(n)
    check_budget_args(cfg.epsilon, delta)
    if delta >= 1.0 / n:
        warn(f"delta={delta:g} >= 1/n={1.0 / n:.3g}: a mechanism that publishes one random record in the clear "
             f"meets this guarantee; use delta well below 1/n (default min(1e-5, 1/(10 n)))")
    accountant = acc_cls(cfg.epsilon, delta, algo_cls.relation_for(params))

    # ---- preprocessing (public, or private and charged first)
    own_model = own_biases(loss)  # e.g. mlp: its own biases
    if own_model and cfg.intercept:
        raise ParameterError(f"loss {loss_spec!r} has its own bias terms: it takes no --intercept")
    intercept = ((loss.classifier or predicts_target(loss)) and not own_model) if cfg.intercept is None \
        else bool(cfg.intercept)
    # ---- regression targets into the model's units (public bounds, or private and charged first)
    target, target_info = target_transform(cfg, loss, tr.source, y, accountant, _pipeline_rng(cfg, root, 4))
    y_raw, yte_raw = y, yte
    if target is not None:
        y = target.apply(y)
        if yte is not None:
            yte = target.apply(yte)
    scaling_info = None
    if is_sparse(X):
        if sel_cls is not None and not getattr(sel_cls, "sparse_data", False):
            raise ParameterError(f"--select {cfg.select} needs dense data; this data set is sparse")
        if cfg.scaling in ("bounds", "private"):
            raise ParameterError(f"--scaling {cfg.scaling} maps features into [-1, 1], which fills in a "
                                 "sparse data set; use --scaling none for sparse input")
    declared = getattr(tr.source, "bounds", None)
    mode = cfg.scaling
    if mode == "auto":  # a public rule: declared bounds, else private scales where they pay (n, d, eps public)
        # "sparse" by the input's format, never by its density (which decides CSR storage of an
        # svmlight file but is read off the data): svmlight files and sparse arrays get no map
        sparse_format = (is_svmlight_path(cfg.data) if isinstance(cfg.data, str) and tr.source is None
                         else is_sparse(X))
        mode = ("bounds" if declared is not None else
                "none" if getattr(tr.source, "common_scale", False) or sparse_format else
                "private" if private_scaling_pays(n, d_raw, accountant, cfg.scaling_share * cfg.epsilon)
                else "none")
    if mode == "bounds":
        src = cfg.bounds if cfg.scaling == "bounds" else declared
        lo, hi = read_bounds(src, d_raw) if isinstance(src, str) else (list(src[0]), list(src[1]))
        prep = Preprocessing(d_raw, "bounds", lo, hi, intercept)
    elif mode == "private":
        lo, hi, scaling_info = private_scales(X, accountant, _pipeline_rng(cfg, root, 3),
                                              cfg.scaling_share * cfg.epsilon)
        prep = Preprocessing(d_raw, "private", lo, hi, intercept)
    else:
        prep = Preprocessing(d_raw, "none", intercept=intercept)
    X = prep.transform(X, where=f"data {tr.description}", in_place=tr.owned or X is not tr.X)  # the caller's: never
    if Xte is not None:
        Xte = prep.transform(Xte, where="test data", in_place=Xte is not callers_test_X)
    if own_model and is_sparse(X):  # its kernels read dense rows: the copy must fit
        from .limits import check_dense_copy

        check_dense_copy((X.shape[0] + (0 if Xte is None else Xte.shape[0]), X.shape[1]), f"loss {cfg.loss!r}")
    problem = make_problem(loss, X, y, name=tr.description, row_bound=prep.row_bound)
    test_problem = (make_problem(loss, Xte, yte, name=test_desc, row_bound=prep.row_bound)
                    if Xte is not None else None)
    check_algorithm_fits(algo_cls, params, problem, loss_spec)
    check_size(problem, algo_cls, params, cfg)

    # ---- compile (or load cached) kernels before timing the run
    stage("loading kernels (compiled on the first run only)")
    t0 = time.perf_counter()
    problem.gradient(np.zeros(problem.d), problem.all_rows[:1])
    t_compile = time.perf_counter() - t0

    selector = eps_sel = None
    if sel_cls is not None:  # charged before the run: the run calibrates to what is left
        selector, eps_sel = _prepare_selection(sel_cls, sel_opts, problem, accountant, cfg,
                                               _pipeline_rng(cfg, root, 1))

    algo = algo_cls(problem, params, noise=noise_cls, accountant=accountant, seed=cfg.seed,
                    progress=cfg.progress)
    if cfg.init is not None:
        if not algo_cls.honours_init:
            raise ParameterError(f"algorithm {algo_cls.name!r} does not start from a given point: "
                                 f"a warm start needs one that does (dp-sgd, dp-gd, adaptive-spider, ...)")
        algo.init = np.array(cfg.init, dtype=float)
    stage(f"{algo_cls.name}: calibrating noise, running")
    t0 = time.perf_counter()
    with np.errstate(all="ignore"):  # a diverging run is reported below, in one line
        out = algo.run()
    t_run = time.perf_counter() - t0
    w = np.asarray(out.w, dtype=float)
    if not np.all(np.isfinite(w)):
        raise DpregError("the run diverged (non-finite iterate); try a smaller step size")
    selection = None
    if selector is not None:
        w, selection = _select_output(selector, eps_sel, out, w, cfg)

    # ---- the release
    release = {
        "note": RELEASE_NOTE,
        "model": model_dict(w, loss, prep, label_map,
                            inferred.get("zero_based", getattr(tr.schema, "zero_based", None)),
                            loss_spec=loss_spec_of(loss, loss_spec), target=target),
        "privacy": privacy_statement(accountant, algo_cls, noise_name, out.info, cfg, n, scaling_info,
                                     eps_sel, target_info),
        "config": {
            "algo": algo_cls.name, "paper": algo_cls.paper, "data_access": algo_cls.data_access,
            "noise": noise_name, "loss": loss.name, "data": tr.description, "test_data": test_desc,
            "epsilon": cfg.epsilon, "delta": delta, "accountant": accountant.name,
            "params_given": given, "params_resolved": params, "alpha": cfg.alpha,
            "select": cfg.select, "select_share": cfg.select_share if cfg.select else None,
            "split_seed": cfg.split_seed, "test_fraction": cfg.test_fraction, "task": loss_task(loss),
            "loss_spec": loss_spec,
            "schema": {"n_features": d_raw, "declared": sorted({"n_features", "zero_based", "labels"}
                                                               - set(inferred))},
        },
    }
    record = {"dpreg_record": 2, "release": release}

    # ---- diagnostics, after the run (never fed back into it)
    if cfg.diagnostics:
        stage("evaluating (non-private diagnostics)")
    if cfg.diagnostics == "light":  # counts and accounting only: no evaluation on the data
        info = {k: v for k, v in out.info.items() if k != "trajectory"}
        record["diagnostics"] = {
            "non_private": True, "note": DIAGNOSTICS_NOTE, "schema_inferred": inferred or None,
            "privacy": accountant.state(), "run_info": info,
            "usage": {"iterations": out.iterations, "records_used": out.records_used,
                      "gradient_evaluations": out.gradient_evaluations},
            "timing": {"total_s": time.perf_counter() - t_start, "data_s": t_data, "compile_s": t_compile,
                       "run_s": t_run}}
    elif cfg.diagnostics:
        record["diagnostics"] = _diagnostics(cfg, problem, test_problem, w, out, accountant, inferred,
                                             selection, scaling_info, (target, y_raw, yte_raw),
                                             {"total_s": time.perf_counter() - t_start, "data_s": t_data,
                                              "compile_s": t_compile, "run_s": t_run},
                                             public_data=bool(getattr(tr.source, "public", False)))
    if cfg.out is not None and cfg.write_record:
        from .interrupts import check

        check()  # no record after a Ctrl-C, even one a compiled call dropped
        write_atomic(cfg.out, to_json(record))
    return record


def check_size(problem, algo_cls, params: dict, cfg: RunConfig) -> None:
    """Refuse, before anything of the model's size is allocated, a run whose
    estimated work or memory is out of reach (:func:`dpreg.limits.check_run_size`:
    public n, d and the run lengths given)."""
    from .limits import check_run_size

    threads = cfg.threads or os.cpu_count() or 1
    loss = cfg.loss if isinstance(cfg.loss, str) and ":" in cfg.loss else ""
    check_run_size(problem, algo_cls, params, threads=threads, what=loss)


def runs_data_parallel(cfg: RunConfig) -> bool:
    """Whether ``cfg`` runs on sharded data (:mod:`dpreg.backends`): its data
    are a directory or glob of shard files, or its backend is "dask" (or it
    names a scheduler) - the backend of the data, for algorithms that have no
    backend parameter of their own (distributed-spider has)."""
    from .backends.shards import looks_sharded

    if cfg.backend not in (None, "local", "dask"):
        raise ParameterError(f"backend must be local or dask, got {cfg.backend!r}")
    return looks_sharded(cfg.data) or cfg.backend == "dask" or cfg.scheduler is not None


def _set_threads(k: int, warn=None) -> None:
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
            import warnings

            from .errors import DpregWarning

            warnings.warn(msg, DpregWarning, stacklevel=3)
    numba.set_num_threads(min(int(k), top))


def model_dict(w: np.ndarray, loss, prep, label_map, zero_based: bool | None = None,
               loss_spec: str | None = None, target=None) -> dict:
    """The released model: weights over the transformed features (the last is
    the intercept's when ``prep.intercept``), the intercept in margin units,
    the label map, the task (with ``n_classes`` for K classes), the target
    transform of a regression model and the preprocessing to repeat (see
    :mod:`dpreg.model`).  A linear K-class model's ``weights`` are its p x K
    matrix, row-major; ``coef`` is K x n_features and ``intercept`` K values."""
    from .tasks import loss_task

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


def _baselines(problem, prefix: str) -> dict:
    """Non-private reference points: the majority-class rate, the loss and
    the gradient norm at w = 0 (the data-independent output)."""

    from .metrics import majority_rate

    out: dict = {}
    zero = np.zeros(problem.d)
    out[f"{prefix}_loss_at_zero"] = float(problem.value(zero))
    out[f"{prefix}_grad_norm_at_zero"] = float(np.linalg.norm(problem.gradient(zero)))
    if problem.loss.classifier:
        out[f"{prefix}_majority_rate"] = majority_rate(problem)
    return out


#: non-private optima computed in this process, by content (:func:`_optimum_key`):
#: a loop of runs on the same data (seeds, epsilons, algorithms; ``dpreg sweep``)
#: solves the reference once.  A few entries; behind them, the on-disk copies of
#: :func:`_optimum_file`, so the next process does not solve it again either.
_OPTIMA: dict = {}
_OPTIMA_MAX = 8


def _optimum_key(problem, max_iter: int) -> bytes:
    """blake2b of everything the reference depends on: the rows (dense, or the
    CSR arrays), the labels, the problem and loss classes, the loss's name,
    radius, public scalar attributes and psi parameters, and ``max_iter``."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    X = problem.X
    arrays = (X.data, X.indices, X.indptr) if is_sparse(X) else (X,)
    for a in (*arrays, problem.y):
        a = np.ascontiguousarray(a)
        h.update(repr((a.dtype.str, a.shape)).encode())
        h.update(a.view(np.uint8).reshape(-1))
    import scipy

    loss = problem.loss
    simple = sorted((k, v) for k, v in vars(loss).items()
                    if not k.startswith("_") and isinstance(v, (bool, int, float, str, tuple)))
    h.update(repr((type(problem).__module__, type(problem).__qualname__, type(loss).__module__,
                   type(loss).__qualname__, loss.name, loss.radius, simple, X.shape, int(max_iter),
                   scipy.__version__, _OPTIMUM_FORMAT)).encode())
    psi = getattr(loss, "psi_params", None)
    if psi is not None:
        h.update(np.ascontiguousarray(psi(), dtype=np.float64).tobytes())
    h.update(_reference_start(problem).tobytes())
    return h.digest()


def _reference_start(problem) -> np.ndarray:
    """Where the non-private reference starts: the problem's
    ``reference_start()`` when it has one (a network: a fixed public draw of
    its initial point, away from the symmetric saddle at 0), else 0."""
    start = getattr(problem, "reference_start", None)
    return np.zeros(problem.d) if start is None else np.ascontiguousarray(start(), dtype=np.float64)


#: bumped when the solver or the on-disk layout of the optima changes (old files are then ignored)
_OPTIMUM_FORMAT = 1


def _optimum_file(key: bytes, public: bool):
    """Where the optimum of ``key`` is kept on disk: ``optima/<key>.npy`` in the
    user data cache, or None when it is not kept (:mod:`dpreg.usercache`: by
    default only the optima of public data sets; those of the user's data
    with ``DPREG_DATA_CACHE=1``)."""
    from .usercache import cache_root, safe_dir

    root = cache_root(public=public)
    d = None if root is None else safe_dir(root / "optima")
    return None if d is None else d / f"{key.hex()}.npy"


def _read_optimum(file, d: int):
    try:
        w = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    return w if (w.dtype == np.float64 and w.shape == (d,) and np.all(np.isfinite(w))) else None


def _write_optimum(file, w) -> None:
    from .usercache import store

    store(file, lambda fh: np.save(fh, np.ascontiguousarray(w, dtype=np.float64), allow_pickle=False))


def nonprivate_optimum(problem, max_iter: int = 200, *, public: bool = False):
    """A non-private minimiser of the empirical loss (L-BFGS from 0 or the
    problem's ``reference_start()``, capped iterations): a reference for how
    much of the gap a private model closed.
    None when the problem is too large for a cheap reference.  Solved once for
    the same data and loss: kept in this process (:data:`_OPTIMA`) and on disk
    in the user data cache (:func:`_optimum_file`) when the data are public
    (``public=True``: a data set that declares itself public) or the user
    opted in (``DPREG_DATA_CACHE=1``), keyed by content (:func:`_optimum_key`,
    which includes scipy's version); a copy is returned.  The solve is most of a warm ``dpreg run``'s
    diagnostics (on adult, the record's ``diagnostics.timing.eval_s``: 2.74 s
    with the optimum not yet cached, then 0.37 and 0.41 s)."""
    if problem.n * problem.d > 5e7:
        return None
    try:
        key = _optimum_key(problem, max_iter)
    except Exception:  # noqa: BLE001 - an unusual problem or loss: solve it, uncached
        return _solve_optimum(problem, max_iter)
    if key in _OPTIMA:
        w = _OPTIMA[key]
        return None if w is None else w.copy()
    file = _optimum_file(key, public)
    w = None if file is None else _read_optimum(file, problem.d)
    if w is None:
        w = _solve_optimum(problem, max_iter)
        if w is not None and file is not None:
            _write_optimum(file, w)
    if len(_OPTIMA) >= _OPTIMA_MAX:
        _OPTIMA.pop(next(iter(_OPTIMA)))
    _OPTIMA[key] = None if w is None else w.copy()
    return w


def _solve_optimum(problem, max_iter: int):
    from scipy.optimize import minimize

    radius = problem.loss.radius
    with np.errstate(all="ignore"):
        res = minimize(problem.value, _reference_start(problem), jac=problem.gradient, method="L-BFGS-B",
                       options={"maxiter": max_iter})
    w = res.x
    if radius is not None:
        from .problem import project

        w = project(w, radius)
    return w if np.all(np.isfinite(w)) else None


def _a_reference(problem, w_np, base: dict):
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


def _regression_diagnostics(problem, test_problem, w, w_np, targets, guarded) -> tuple[dict, dict]:
    """(metrics, baselines) of a regression model in the user's units: R^2
    and RMSE of the release (train, test), of the non-private optimum, and the
    R^2 / RMSE of predicting the training mean (``targets``: the transform, the
    raw training and test targets)."""
    from . import metrics

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


def _diagnostics(cfg, problem, test_problem, w, out, accountant, inferred, selection, scaling_info,
                 targets, timing, public_data: bool = False) -> dict:
    from . import interrupts, metrics

    t0 = time.perf_counter()
    alpha = cfg.alpha
    ev: dict = {}
    base: dict = {}
    errors: list = []
    warnings: list = []

    def guarded(what, f):
        """A diagnostic that fails is reported, never fatal: the release is kept."""
        try:
            with np.errstate(all="ignore"):
                return f()
        except Exception as exc:  # noqa: BLE001
            interrupts.check()  # a failure that follows a dropped Ctrl-C ends the run as interrupted
            errors.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return None

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
    base.update(guarded("train baselines", lambda: _baselines(problem, "train")) or {})
    if test_problem is not None:
        lim = share(parts - 1)
        ev.update(guarded("test metrics", lambda: metrics.evaluate(test_problem, w, alpha=alpha, prefix="test",
                                                                   lambda_budget_s=lim)) or {})
        base.update(guarded("test baselines", lambda: _baselines(test_problem, "test")) or {})
    t_solve = time.perf_counter()
    w_np = guarded("non-private optimum", lambda: nonprivate_optimum(problem, public=public_data))
    solve_s[0] = time.perf_counter() - t_solve
    w_np = _a_reference(problem, w_np, base)
    if w_np is not None:
        base["nonprivate_train_loss"] = float(problem.value(w_np))
        if problem.loss.classifier:
            base["nonprivate_train_accuracy"] = metrics.accuracy(problem, w_np)
            if test_problem is not None:
                base["nonprivate_test_accuracy"] = metrics.accuracy(test_problem, w_np)
    if targets is not None and targets[0] is not None:
        reg_ev, reg_base = _regression_diagnostics(problem, test_problem, w, w_np, targets, guarded)
        ev.update(reg_ev)
        base.update(reg_base)
    loss_w, loss0 = ev.get("train_loss"), base.get("train_loss_at_zero")
    if loss_w is not None and loss0 is not None and loss_w > loss0 + 1e-9:
        warnings.append(f"the released model's training loss {loss_w:.4g} is worse than at w = 0 ({loss0:.4g}): "
                        f"the run did not learn; try a smaller step size or a larger epsilon")
    traj = out.info.pop("trajectory", None)
    tr_summary = traj.summary() if traj is not None else {}
    if traj is not None:
        # the loss and accuracy at the kept checkpoints cost about what their gradients do: half each
        lim = share(2)
        cp = guarded("trajectory", lambda: metrics.trajectory_grad_norms(problem, traj.steps, traj.iterates,
                                                                         budget_s=lim))
        if cp is not None:
            cp.update(guarded("trajectory values", lambda: metrics.checkpoint_values(
                problem, cp["steps"], traj.steps, traj.iterates)) or {})
            tr_summary["checkpoints"] = cp
    G, M, rho = problem.constants()
    # the certificates' wall times go with the timings (the rest of the record is the same for the same seed)
    lam_s = {p: (ev.get(f"{p}_lambda_min_status") or {}).pop("seconds", None) for p in ("train", "test")}
    timing = dict(timing, eval_s=time.perf_counter() - t0, threads=_threads(),
                  diagnostics_budget_s=None if math.isinf(budget) else budget,
                  lambda_min_s={p: v for p, v in lam_s.items() if v is not None})
    return {
        "non_private": True,
        "note": DIAGNOSTICS_NOTE,
        "schema_inferred": inferred or None,
        "problem": {"n": problem.n, "d": problem.d, "loss": problem.loss.name, "G": G, "M": M, "rho": rho,
                    "n_test": None if test_problem is None else test_problem.n,
                    "n_classes": getattr(problem.loss, "n_classes", None)},
        "privacy": accountant.state(),
        "usage": {"iterations": out.iterations, "records_used": out.records_used,
                  "gradient_evaluations": out.gradient_evaluations},
        "run_info": out.info,
        "selection": selection,
        "scaling": scaling_info,
        "trajectory": tr_summary,
        "metrics": ev,
        "baselines": base,
        "warnings": warnings,
        "errors": errors,
        "timing": timing,
        "versions": _versions(),
    }


def _versions():
    from .results import versions

    return versions()


def _threads() -> int:
    import numba

    return int(numba.get_num_threads())


def selector_options(sel_cls, name: str, given: dict) -> dict:
    """The constructor options of ``--select NAME:key=value,...`` (``given``,
    value strings), parsed by the selector's declared ParamSpecs (``dpreg info
    NAME``); only the options given.  ``alpha`` is the run's ``--alpha`` (one way
    to set it), never an option here."""
    from .params import bind

    if "alpha" in given:
        raise ParameterError(f"--select {name}: give alpha with --alpha, not as a selector option")
    specs = [s for s in getattr(sel_cls, "params", ()) if s.name != "alpha"]
    values = bind(specs, given, f"selector {name}")
    return {k: values[k] for k in given}


def _prepare_selection(sel_cls, opts, problem, accountant, cfg, rng):
    """Build the output selector and charge its pure-DP release now, before the
    run (the selector gets a :class:`~dpreg.accounting.Prepaid` view that
    matches its own charge against this one)."""
    from .accounting import Prepaid, pure_dp_event

    eps_sel = float(cfg.select_share) * float(cfg.epsilon)
    event = pure_dp_event(eps_sel)
    selector = sel_cls(problem, accountant=Prepaid(accountant, event), rng=rng, **opts)
    accountant.charge(event, None, label=f"{cfg.select} output selection (charged before the run)")
    return selector, eps_sel


def _select_output(selector, eps_sel, out, w, cfg):
    """Privately pick the output among the run's checkpoint iterates and its
    final point (candidates are post-processing of private releases).  An
    AboveThreshold scan that passes no candidate returns the final point."""
    traj = out.info.get("trajectory")
    cands = [np.asarray(v, dtype=float) for v in (traj.iterates if traj is not None else [])]
    if not cands or not np.array_equal(cands[-1], w):
        cands.append(w)
    kw = {"alpha": float(cfg.alpha)} if "alpha" in inspect.signature(selector.select).parameters else {}
    res = selector.select(cands, eps_sel, **kw)
    if not selector.accountant.used:  # the selector must have charged exactly the prepaid event
        raise DpregError(f"selector {cfg.select!r} did not charge its release as planned")
    chosen = w if res.index is None else np.asarray(res.w, dtype=float)
    info = {"selector": cfg.select, "epsilon": eps_sel, "candidates": len(cands),
            "index": res.index, "steps": (list(traj.steps) + ([] if len(traj.steps) == len(cands) else [None]))
            if traj is not None else None,
            "fallback_to_last": res.index is None}
    info.update({k: v for k, v in res.info.items() if k != "candidates"})
    return chosen, info
