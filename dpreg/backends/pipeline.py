"""``dpreg run`` on sharded data: :func:`run_sharded`.

The same stages as :func:`dpreg.pipeline.run_pipeline` - validation before any
private computation, the public schema, the preprocessing (public bounds, or
private scales charged first), the algorithm with its own sampling, noise and
accountant on the driver, a record in two parts - with the data held by the
executor's holders instead of one array.  What differs:

* the schema is declared or fixed: svmlight shards need ``--features`` and
  the index base; the label map is ``--labels`` (two classes, or K for a
  multi-class loss) or a fixed map ({-1,+1}, {0,1}) that every shard fits -
  never inferred from a sharded source; regression targets need public
  bounds (``--target-bounds`` or the data set's) or ``none``;
* n is the sum of the shards' sizes; each holder reports only its shards'
  sizes, feature counts and (for the fixed label maps) label values;
* ``--scaling private`` (and ``auto`` where it pays) releases the same two
  noisy sums as on one machine, the sums added from the shards' partial sums;
* the run needs an algorithm that reaches the data through clipped sums only
  (:data:`DATA_PARALLEL`, or a third-party algorithm that sets
  ``data_parallel = True``); ``--select``, ``--test-data`` and
  ``--test-fraction`` are refused (evaluate a release with ``dpreg predict``);
* the diagnostics' metrics are computed by the holders too (sums and counts),
  and the record's diagnostics say where the shards were held, the bytes
  sent each way, each worker's memory and the driver's.

A failure anywhere - a bad shard, a lost worker, a scheduler that does not
answer - raises one :class:`~dpreg.errors.DpregError` and writes nothing.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError, DpregError, ParameterError
from .shards import looks_sharded

#: built-in algorithms that reach the data through the problem's clipped sums only
DATA_PARALLEL = ("dp-gd", "dp-sgd", "dp-spider", "adaptive-spider", "perturbed-sgd", "dp-trust-region")


def data_parallel(algo_cls) -> bool:
    """Whether ``algo_cls`` can run on a sharded problem."""
    return algo_cls.name in DATA_PARALLEL or bool(getattr(algo_cls, "data_parallel", False))


@dataclass
class Source:
    """A data source as the sharded pipeline opens it: its shards, a
    description, how to read them, and what a registered data set declares
    (public bounds, a common feature scale)."""

    shards: list
    description: str
    options: Any
    bounds: Any = None
    common_scale: bool = False
    #: the registered data set's DatasetSource (its declared task, target bounds), else None
    source: Any = None

    @property
    def schema(self):
        """The public schema (what :func:`dpreg.pipeline.resolve_loss` reads)."""
        return self.options.schema


def open_source(data, schema, workers: int | None, split_seed: int = 0) -> Source:
    """The :class:`Source` of a ``--data`` value: a directory or glob of
    shard files, a single file (one shard), a registered data set or an
    ``(X, y)`` pair (both in this process already: cut into ``workers``
    consecutive shards - default: one per core - and sent to the holders;
    the shard count is part of what fixes a seeded run's bits)."""
    from ..registry import get_registry
    from .shards import ShardOptions, discover, split_source
    from .workers import split_arrays

    k = max(1, int(workers or os.cpu_count() or 1))
    if isinstance(data, str) and not os.path.exists(split_source(data)[0]) and not looks_sharded(data):
        from ..pipeline.loading import load_data
        from ..registry import parse_name_options

        if parse_name_options(data)[0] in get_registry().names("dataset"):
            tr = load_data(data, schema=schema, split_seed=split_seed)
            X, y = tr.X, tr.y
            return Source(split_arrays(X, y, k), f"{tr.description} ({X.shape[0]} x {X.shape[1]}, {k} shards)",
                          ShardOptions(tr.schema), getattr(tr.source, "bounds", None),
                          bool(getattr(tr.source, "common_scale", False)), tr.source)
    if isinstance(data, (tuple, list)) and len(data) == 2:
        from ..data import is_sparse

        X, y = data
        try:
            X = X.tocsr() if is_sparse(X) else np.asarray(X, dtype=np.float64)
            y = np.asarray(y, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise DataError(f"data: arrays must hold real numbers: {exc}") from None
        if X.ndim != 2 or X.shape[0] != y.shape[0]:
            raise DataError(f"data: features of shape {X.shape} and {y.shape[0]} labels do not match")
        return Source(split_arrays(X, y, k), f"arrays ({X.shape[0]} x {X.shape[1]}, {k} shards)",
                      ShardOptions(schema))
    if not isinstance(data, str):
        raise DataError(f"data must be a path to shard files, a data-set name or an (X, y) pair; "
                        f"got {type(data).__name__}")
    path, opts = split_source(data)
    unknown = set(opts) - {"label"}
    if unknown:
        raise ParameterError(f"sharded data takes the option label=NAME only; got {', '.join(sorted(unknown))}")
    files = discover(path)
    desc = f"{os.path.abspath(path)} ({len(files)} shard{'s' if len(files) != 1 else ''}, {files[0].format})"
    return Source(files, desc, ShardOptions(schema, opts.get("label", "y")))


def _label_map(survey: dict, declared, loss, where: str):
    """``(label map, loss)``: for two classes the declared map, or a fixed
    one ({-1,+1}, {0,1}) every shard fits; for K classes the declared
    ``ClassMap``, the loss bound to K; None for regression.  A sharded
    source's classes are never inferred."""
    from ..data import ClassMap, LabelMap
    from ..tasks import bind_classes, loss_task

    task = loss_task(loss)
    if task == "multiclass":
        if declared is None:
            raise DataError(f"{where}: declare the classes with --labels a,b,c (a sharded source's classes are "
                            f"never inferred)")
        cmap = ClassMap.for_training(None, declared, where)
        return cmap, bind_classes(loss, cmap.n_classes)
    if task == "regression":
        if declared is not None:
            raise ParameterError(f"loss {loss.name!r} is a regression loss: it takes no --labels")
        return None, loss
    if declared is not None:
        vals = tuple(float(v) for v in declared)
        if len(vals) != 2 or vals[0] == vals[1]:
            raise DataError(f"{where}: a binary loss needs two different declared labels, got {len(vals)}")
        return LabelMap(vals[0], vals[1], "declared"), loss
    vals = set()
    for s in survey.values():
        vals.update(s["labels"])
    if len(vals) == 1:
        raise DataError(f"{where}: labels have one class only ({next(iter(vals)):g}); need two")
    for fixed in ((-1.0, 1.0), (0.0, 1.0)):
        if vals <= set(fixed):
            return LabelMap(fixed[0], fixed[1], "fixed"), loss
    shown = ", ".join(f"{v:g}" for v in sorted(vals)[:3])
    raise DataError(f"{where}: labels ({shown}, ...) are not -1/+1 or 0/1; declare the two classes with "
                    f"--labels NEG,POS (a sharded source's labels are never inferred)")


def _target(cfg, loss, src: Source):
    """The public transform of regression targets (None for a loss that does
    not predict its target): ``--target-bounds LO,HI``, the data set's
    declared bounds, or "none".  The private estimate of bounds (the default
    of one machine) reads every target in one place: refused here."""
    from ..tasks import TargetTransform, parse_target_bounds, predicts_target

    raw = cfg.target_bounds
    explicit = raw is not None and not (isinstance(raw, str) and raw.strip().lower() in ("auto", "none"))
    if not predicts_target(loss):
        if explicit:
            raise ParameterError(f"--target-bounds applies to regression losses (squared, huber); "
                                 f"loss {loss.name!r} does not predict its target")
        return None
    if isinstance(raw, str) and raw.strip().lower() == "none":
        return TargetTransform()
    parsed = parse_target_bounds(raw)
    if parsed not in (None, "auto"):
        return TargetTransform.bounds(*parsed, source="declared")
    declared = getattr(src.source, "target_bounds", None)
    if declared is not None:
        return TargetTransform.bounds(*declared, source="declared")
    raise ParameterError("regression on sharded data needs its targets' public bounds (--target-bounds LO,HI) "
                         "or --target-bounds none (a robust loss); the private estimate reads every target in "
                         "one place")


def _merge(results: list) -> dict:
    out: dict = {}
    for r in results:
        if r is not None:
            out.update(r)
    return out


def run_sharded(cfg) -> dict:
    """Run ``cfg`` (a :class:`dpreg.pipeline.RunConfig` whose data are
    sharded, or whose backend is dask) and return its record; see the module
    docstring.  The stages of :func:`dpreg.pipeline.run_pipeline`: validate
    (with the refusals of sharded data), load (the shards opened and surveyed
    on their holders), build, run, release, evaluate, write."""
    from ..data import Schema
    from ..pipeline import stages
    from ..pipeline.config import DIAGNOSTICS_NOTE
    from ..pipeline.release import make_release
    from ..pipeline.validation import parse_labels
    from .workers import make_executor

    ctx = stages.start(cfg, check=check_sharded)
    backend = cfg.backend or ("dask" if cfg.scheduler is not None else "local")
    src = open_source(cfg.data, Schema(cfg.features, cfg.zero_based, parse_labels(cfg.labels)), cfg.workers,
                      cfg.split_seed)
    ctx.stage("starting the Dask workers" if backend == "dask" else "opening the shards")
    t0 = time.perf_counter()
    executor = make_executor(backend, src.shards, src.options, scheduler=cfg.scheduler, workers=cfg.workers,
                             threads=cfg.worker_threads, memory_limit=cfg.worker_memory,
                             connect_timeout=cfg.scheduler_timeout)
    try:
        data, shards = load(ctx, executor, src, t0)
        built = build(ctx, executor, src, data, shards)
        outcome = stages.run(ctx, built, where=f" ({executor.name} backend)")
        traffic = built.problem.traffic()
        release = make_release(ctx, data, built, outcome)
        release["config"]["shards"] = len(src.shards)
        record = {"dpreg_record": 2, "release": release}
        if cfg.diagnostics:
            ctx.stage("evaluating (non-private diagnostics)")
            record["diagnostics"] = _diagnostics(cfg, built, outcome, executor, shards.rows, traffic,
                                                 dict(ctx.timing), light=cfg.diagnostics == "light")
            record["diagnostics"]["note"] = DIAGNOSTICS_NOTE
            record["diagnostics"]["timing"]["total_s"] = time.perf_counter() - ctx.t_start
    finally:
        executor.close()
    stages.write(cfg, record)
    return record


def check_sharded(cfg, plan) -> None:
    """Refuse, before any data is read, what sharded data do not offer: an
    algorithm that needs every record in one process, ``--select``,
    ``--test-data``, ``--test-fraction``."""
    if not data_parallel(plan.algo_cls):
        raise ParameterError(f"algorithm {cfg.algo!r} needs every record in one process; on sharded data run one "
                             f"of {', '.join(DATA_PARALLEL)}")
    for what, given_opt in (("--select", cfg.select), ("--test-data", cfg.test_data),
                            ("--test-fraction", cfg.test_fraction)):
        if given_opt is not None:
            raise ParameterError(f"{what} is not offered on sharded data (evaluate the released model with "
                                 f"dpreg predict)")


def read_shards(executor, src: Source):
    """Open every shard on its holder: ``(survey, shard order, rows per
    shard, feature count)``; DataError when the shards' widths differ."""
    survey = _merge(executor.call("survey", [()] * len(executor.groups)))
    order = [s.index for s in src.shards]
    rows = [survey[i]["rows"] for i in order]
    feats = {survey[i]["features"] for i in order}
    if len(feats) != 1:
        raise DataError(f"data {src.description}: the shards have different feature counts ({sorted(feats)}); "
                        f"every shard must have the same columns")
    return survey, order, rows, feats.pop()


def prepare_shards(executor, src: Source, rows, prep, loss, label_map, target=None):
    """Prepare every shard on its holder (``prep``, the label map, the
    kernels loaded) and return the :class:`~.problem.ShardedProblem` over them."""
    from ..problem import make_problem
    from .problem import ShardedProblem

    prepared = executor.call("prepare", [(prep, loss.labels, label_map, loss, target)] * len(executor.groups))
    held = _merge([p["shards"] for p in prepared])
    dims = {held[s.index]["d"] for s in src.shards}
    if len(dims) != 1:  # pragma: no cover - every shard has the same columns and loss
        raise DpregError(f"the shards' problems differ in dimension: {sorted(dims)}")
    y0 = np.ones(1) if label_map is not None and not hasattr(label_map, "classes") else np.zeros(1)
    proto = make_problem(loss, np.zeros((1, prep.n_weights)), y0, name="prototype", row_bound=prep.row_bound)
    return ShardedProblem(executor, loss, rows, dims.pop(), proto, name=src.description, row_bound=prep.row_bound)


def open_problem(data, loss, *, backend: str = "local", labels=None, features: int | None = None,
                 zero_based: bool | None = None, intercept: bool = True, **executor_options):
    """A :class:`~.problem.ShardedProblem` over ``data`` (a ``--data`` value)
    for scripts and benchmarks: the pipeline's reading and preparation, with
    no feature map, the given label map (or a fixed one) and an intercept
    column; ``executor_options`` go to :func:`~.workers.make_executor`.  The
    caller closes ``problem.executor``."""
    from ..data import Schema
    from ..pipeline import parse_labels
    from ..preprocess import Preprocessing
    from .workers import make_executor

    src = open_source(data, Schema(features, zero_based, parse_labels(labels)), executor_options.get("workers"))
    executor = make_executor(backend, src.shards, src.options, **executor_options)
    try:
        survey, _, rows, d_raw = read_shards(executor, src)
        label_map, loss = _label_map(survey, src.options.schema.labels, loss, f"data {src.description}")
        return prepare_shards(executor, src, rows, Preprocessing(d_raw, "none", intercept=intercept), loss,
                              label_map)
    except BaseException:
        executor.close()
        raise


@dataclass
class Shards:
    """What the holders report of their shards (sizes, feature counts, label
    values: public facts of the schema, never the records), and the public
    transform of regression targets."""

    survey: dict
    order: list
    rows: list
    d_raw: int
    target: Any = None


def load(ctx, executor, src: Source, t0: float):
    """``(Data, Shards)``: the shards opened and surveyed on their holders,
    the loss resolved from public facts, the declared or fixed label map (never
    inferred) and the targets' public transform.  Adds ``data_s`` (from
    ``t0``, before the executor started) to the timings."""
    from ..pipeline.build import resolve_loss
    from ..pipeline.config import SEEDED_NOTE
    from ..pipeline.context import Data

    cfg = ctx.cfg
    ctx.stage("reading the shards")
    survey, order, rows, d_raw = read_shards(executor, src)
    loss, loss_spec = resolve_loss(ctx.reg, cfg, ctx.plan.loss, src)
    label_map, loss = _label_map(survey, src.options.schema.labels, loss, f"data {src.description}")
    target = _target(cfg, loss, src)
    if cfg.seed is not None:
        ctx.warn(SEEDED_NOTE)
    ctx.timing["data_s"] = time.perf_counter() - t0
    data = Data(None, None, None, None, src.description, None, src.source, src.options.schema, {}, loss, loss_spec,
                label_map)
    return data, Shards(survey, order, rows, d_raw, target)


def build(ctx, executor, src: Source, data, shards: Shards):
    """The accountant, the preprocessing (public bounds, or private scales
    released from the shards' partial sums and charged first), every shard
    prepared on its holder and the :class:`~.problem.ShardedProblem` over
    them, checked against the algorithm's requirements.  Adds ``compile_s``."""
    from ..pipeline.build import check_algorithm_fits, intercept_for, make_accountant, preprocessing, scaling_mode
    from ..pipeline.context import Built
    from ..preprocess import release_scales

    cfg, plan, loss = ctx.cfg, ctx.plan, data.loss
    n, d_raw = int(sum(shards.rows)), shards.d_raw
    accountant, delta = make_accountant(ctx, n)
    intercept = intercept_for(cfg, loss, data.loss_spec)
    sparse = any(shards.survey[i]["sparse"] for i in shards.order) or src.shards[0].format == "svmlight"
    if sparse and cfg.scaling in ("bounds", "private"):
        raise ParameterError(f"--scaling {cfg.scaling} maps features into [-1, 1], which fills in a sparse data "
                             "set; use --scaling none for sparse input")
    mode = scaling_mode(cfg, src.bounds, sparse, src.common_scale, n, d_raw, accountant)

    def private():  # the shards' partial sums, added in shard order
        stats = _merge(executor.call("scale_statistics", [()] * len(executor.groups)))
        sums, counts = np.zeros(d_raw), np.zeros(d_raw)
        for i in shards.order:
            sums, counts = sums + stats[i][0], counts + stats[i][1]
        return release_scales(sums, counts, d_raw, accountant, ctx.rng(3), cfg.scaling_share * cfg.epsilon)

    prep, scaling_info = preprocessing(cfg, mode, d_raw, intercept, src.bounds, private)
    ctx.stage("preparing the shards and loading kernels")
    t0 = time.perf_counter()
    problem = prepare_shards(executor, src, shards.rows, prep, loss, data.label_map, shards.target)
    ctx.timing["compile_s"] = time.perf_counter() - t0
    check_algorithm_fits(plan.algo_cls, plan.params, problem, data.loss_spec)
    return Built(problem, None, accountant, delta, n, prep, shards.target, None, scaling_info)


def driver_memory() -> dict:
    """This (the driver's) process's memory: its pid, resident bytes now and
    at their peak (``VmHWM``) - what the run's driver held, no shard among it."""
    from .workers import peak_rss_bytes, rss_bytes

    return {"pid": os.getpid(), "rss": rss_bytes(), "peak_rss": peak_rss_bytes()}


def _diagnostics(cfg, built, outcome, executor, rows, traffic, timing, light) -> dict:
    """The record's non-private diagnostics of a sharded run: the training
    metrics and baselines computed by the holders (skipped when ``light``),
    the trajectory's checkpoints, usage and accounting, and where the shards
    were held (the bytes sent each way, each worker's memory and the driver's).  A diagnostic
    that fails is listed under ``errors``; a lost worker ends the run."""
    from .. import metrics
    from ..pipeline.diagnostics import did_not_learn, guard, usage, versions

    problem, w, out, accountant = built.problem, outcome.w, outcome.out, built.accountant
    t0 = time.perf_counter()
    ev: dict = {}
    base: dict = {}
    errors: list = []
    warnings: list = []
    guarded = guard(errors, fatal=(DpregError,))

    traj = out.info.pop("trajectory", None)
    tr_summary = traj.summary() if traj is not None else {}
    if not light:
        ev.update(guarded("train metrics", lambda: metrics.evaluate(problem, w, alpha=cfg.alpha, prefix="train")) or {})
        zero = np.zeros(problem.d)
        base["train_loss_at_zero"] = guarded("baselines", lambda: problem.value(zero))
        g0 = guarded("baselines", lambda: problem.gradient(zero))
        base["train_grad_norm_at_zero"] = None if g0 is None else float(np.linalg.norm(g0))
        if problem.loss.classifier:
            base["train_majority_rate"] = guarded("baselines", problem.majority_rate)
        warnings += did_not_learn(ev, base)
        if traj is not None:
            cp = guarded("trajectory", lambda: metrics.trajectory_grad_norms(problem, traj.steps, traj.iterates))
            if cp is not None:
                tr_summary["checkpoints"] = cp
    memory = executor.call("memory", [()] * len(executor.groups))
    G, M, rho = problem.constants()
    steps = max(1, int(out.iterations))
    backend = dict(executor.info(), shards=len(rows), records_per_shard=[int(r) for r in rows],
                   traffic=dict(traffic, bytes_down_per_step=traffic["bytes_down"] / steps,
                                bytes_up_per_step=traffic["bytes_up"] / steps),
                   worker_memory=memory, driver_memory=driver_memory())
    return {
        "non_private": True,
        "schema_inferred": None,
        "problem": {"n": problem.n, "d": problem.d, "loss": problem.loss.name, "G": G, "M": M, "rho": rho,
                    "n_test": None},
        "privacy": accountant.state(),
        "usage": usage(out),
        "run_info": out.info,
        "selection": None,
        "scaling": built.scaling_info,
        "trajectory": tr_summary,
        "metrics": ev,
        "baselines": base,
        "backend": backend,
        "warnings": warnings,
        "errors": errors,
        "timing": dict(timing, eval_s=time.perf_counter() - t0),
        "versions": versions(),
    }
