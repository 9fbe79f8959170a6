"""The stages of :func:`dpreg.pipeline.run_pipeline`, in order:

validate (:func:`start`, :func:`~.validation.validate`) -> :func:`load` -> :func:`build` -> :func:`run` ->
release (:func:`dpreg.pipeline.release.make_release`) -> :func:`evaluate` -> :func:`write`.

Each takes the run's :class:`~.context.Context` and what the stages before it
produced, and returns one typed result (:mod:`dpreg.pipeline.context`).  The
sharded path (:mod:`dpreg.backends.pipeline`) shares :func:`start`, :func:`run`,
the release and :func:`write`, and builds its problem from the same rules
(:mod:`dpreg.pipeline.build`).
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..data import is_sparse, is_svmlight_path
from ..errors import DpregError, ParameterError
from ..registry import get_registry
from .build import (check_algorithm_fits, check_size, intercept_for, make_accountant, own_biases, preprocessing,
                    resolve_loss, scaling_mode, target_transform, training_label_map)
from .config import SEEDED_NOTE, RunConfig
from .context import Built, Context, Data, Outcome, Plan
from .diagnostics import diagnostics, light_diagnostics
from .loading import Loaded, load_data
from .selection import prepare_selection, select_output
from .validation import parse_labels, privacy_warner, set_threads, validate


def start(cfg: RunConfig, check: Callable[[RunConfig, Plan], None] | None = None) -> Context:
    """Validate ``cfg`` (:func:`~.validation.validate`, then ``check(cfg,
    plan)`` when given: the refusals of another path), check the output path is writable and set the kernels'
    threads - all before any data is read - and draw the secret root of the
    pipeline's own mechanisms (scaling, selection, target bounds)."""
    from ..interfaces import secret_seed
    from ..results import check_writable

    t_start = time.perf_counter()
    warn = privacy_warner(cfg.warn)
    stage = cfg.stage or (lambda name: None)
    reg = get_registry()
    plan = validate(cfg, reg)
    if check is not None:
        check(cfg, plan)
    if cfg.out is not None:
        check_writable(cfg.out)
    if cfg.threads is not None:
        set_threads(cfg.threads, cfg.warn)
    return Context(cfg, plan, reg, warn, stage, secret_seed(cfg.seed), t_start)


def load(ctx: Context) -> Data:
    """The training records (and the test records: ``--test-data``, a
    ``--test-fraction`` split or the data set's held-out set), validated
    (shape, finite values) but not yet scaled; the loss resolved from public
    facts and the labels mapped for its task (the map declared or inferred,
    what was inferred reported).  Adds ``data_s`` to the timings."""
    from ..data import LabelMap, Schema, prepare

    cfg = ctx.cfg
    ctx.stage("loading data")
    t0 = time.perf_counter()
    tr = load_data(cfg.data, schema=Schema(cfg.features, cfg.zero_based, parse_labels(cfg.labels)),
                   split_seed=cfg.split_seed)
    inferred = dict(tr.inferred)
    # validate (shape, finite values); labels mapped below, rows scaled with the preprocessing
    X, y = prepare(tr.X, tr.y, labels="real", where=f"data {tr.description}", scale_rows=False)
    loss, loss_spec = resolve_loss(ctx.reg, cfg, ctx.plan.loss, tr)
    label_map, loss = training_label_map(loss, y, tr.schema.labels if tr.schema else None, f"data {tr.description}")
    if label_map is not None and label_map.source == "inferred":
        inferred["labels"] = ([label_map.negative, label_map.positive] if isinstance(label_map, LabelMap)
                              else list(label_map.classes))
    X, y, Xte, yte, test_desc = load_test_data(cfg, tr, X, y, inferred)
    if label_map is not None:
        y = label_map.apply(y, f"data {tr.description}")
        if Xte is not None:
            yte = label_map.apply(yte, "test data")
    # warnings only once the input is known to be usable (a user error stays one line)
    if cfg.seed is not None:
        ctx.warn(SEEDED_NOTE)
    if inferred:
        ctx.warn("schema inferred from the data (" + ", ".join(f"{k}={v}" for k, v in inferred.items())
                 + "): one record can change it; declare --features/--zero-based/--one-based/--labels")
    ctx.timing["data_s"] = time.perf_counter() - t0
    return Data(X, y, Xte, yte, tr.description, test_desc, tr.source, tr.schema, inferred, loss, loss_spec,
                label_map, tr)


def load_test_data(cfg: RunConfig, tr: Loaded, X, y, inferred: dict):
    """``(X, y, Xte, yte, description)``: the test records of ``--test-data``
    (read with the training data's width and index base), of a public
    ``--test-fraction`` split of the training records, or the data set's
    held-out set; validated.  All None (but X, y) without test data."""
    from ..data import Schema, prepare, split

    Xte = yte = None
    test_desc = None
    if cfg.test_data is not None:
        te_schema = Schema(X.shape[1], inferred.get("zero_based", (tr.schema or Schema()).zero_based))
        te = load_data(cfg.test_data, schema=te_schema, split_seed=cfg.split_seed, test=True)
        Xte, yte, test_desc = te.X, te.y, te.description
    elif cfg.test_fraction is not None:
        X, y, Xte, yte = split(X, y, cfg.test_fraction, cfg.split_seed)
        test_desc = f"split {cfg.test_fraction:g} of {tr.description} (split seed {cfg.split_seed})"
    elif tr.source is not None and tr.source.load_test is not None:
        Xte, yte = tr.source.load_test(cfg.split_seed)
        test_desc = f"{tr.description} (held-out set)"
    if Xte is not None:
        Xte, yte = prepare(Xte, yte, labels="real", where="test data", d=X.shape[1], scale_rows=False,
                           min_rows=1)
    return X, y, Xte, yte, test_desc


def build(ctx: Context, data: Data) -> Built:
    """The accountant, every charge made before the run (private target
    bounds, private feature scales, the output selection), the preprocessing
    applied, the train and test problems checked against the algorithm's
    requirements and the run's size, and the kernels loaded.  Adds
    ``compile_s`` to the timings."""
    from ..preprocess import private_scales

    cfg, plan, loss = ctx.cfg, ctx.plan, data.loss
    X = data.X
    n, d_raw = X.shape
    accountant, delta = make_accountant(ctx, n)
    intercept = intercept_for(cfg, loss, data.loss_spec)
    # regression targets into the model's units (public bounds, or private and charged first)
    target, target_info = target_transform(cfg, loss, data.source, data.y, accountant, ctx.rng(4))
    y, yte = data.y, data.yte
    if target is not None:
        y = target.apply(y)
        if yte is not None:
            yte = target.apply(yte)
    if is_sparse(X):
        if plan.sel_cls is not None and not getattr(plan.sel_cls, "sparse_data", False):
            raise ParameterError(f"--select {cfg.select} needs dense data; this data set is sparse")
        if cfg.scaling in ("bounds", "private"):
            raise ParameterError(f"--scaling {cfg.scaling} maps features into [-1, 1], which fills in a "
                                 "sparse data set; use --scaling none for sparse input")
    declared = getattr(data.source, "bounds", None)
    # "sparse" by the input's format, never by its density (which decides CSR storage of an
    # svmlight file but is read off the data): svmlight files and sparse arrays get no map
    sparse_format = (is_svmlight_path(cfg.data) if isinstance(cfg.data, str) and data.source is None
                     else is_sparse(X))
    mode = scaling_mode(cfg, declared, sparse_format, getattr(data.source, "common_scale", False), n, d_raw,
                        accountant)
    prep, scaling_info = preprocessing(cfg, mode, d_raw, intercept, declared, lambda: private_scales(
        X, accountant, ctx.rng(3), cfg.scaling_share * cfg.epsilon))
    problem, test_problem = make_problems(ctx, data, prep, y, yte)
    check_algorithm_fits(plan.algo_cls, plan.params, problem, data.loss_spec)
    check_size(problem, plan.algo_cls, plan.params, cfg)
    load_kernels(ctx, problem)
    selector = eps_sel = None
    if plan.sel_cls is not None:  # charged before the run: the run calibrates to what is left
        selector, eps_sel = prepare_selection(plan.sel_cls, plan.sel_opts, problem, accountant, cfg, ctx.rng(1))
    return Built(problem, test_problem, accountant, delta, n, prep, target, target_info, scaling_info,
                 y_raw=data.y, yte_raw=data.yte, selector=selector, eps_sel=eps_sel)


def make_problems(ctx: Context, data: Data, prep, y, yte):
    """``(problem, test problem or None)``: the preprocessing applied to the
    raw records (in place) and the loss's problems over them."""
    from ..problem import make_problem

    X = prep.transform(data.X, where=f"data {data.description}", in_place=True)
    Xte = None if data.Xte is None else prep.transform(data.Xte, where="test data", in_place=True)
    if own_biases(data.loss) and is_sparse(X):  # its kernels read dense rows: the copy must fit
        from ..limits import check_dense_copy

        check_dense_copy((X.shape[0] + (0 if Xte is None else Xte.shape[0]), X.shape[1]), f"loss {ctx.cfg.loss!r}")
    problem = make_problem(data.loss, X, y, name=data.description, row_bound=prep.row_bound)
    test_problem = (make_problem(data.loss, Xte, yte, name=data.test_desc, row_bound=prep.row_bound)
                    if Xte is not None else None)
    return problem, test_problem


def load_kernels(ctx: Context, problem) -> None:
    """Compile (or load cached) the problem's kernels before the run is timed;
    adds ``compile_s`` to the timings."""
    ctx.stage("loading kernels (compiled on the first run only)")
    t0 = time.perf_counter()
    problem.gradient(np.zeros(problem.d), problem.all_rows[:1])
    ctx.timing["compile_s"] = time.perf_counter() - t0


def run(ctx: Context, built: Built, where: str = "") -> Outcome:
    """Run the algorithm on the built problem with the run's accountant
    (which it calibrates to what is left of the budget), from ``cfg.init``
    when given (public input; refused by an algorithm that does not honour
    an initial point), refuse a diverged
    output, and pick the output privately when ``--select`` asked.  Adds
    ``run_s`` to the timings."""
    cfg, plan = ctx.cfg, ctx.plan
    algo = plan.algo_cls(built.problem, plan.params, noise=plan.noise_cls, accountant=built.accountant,
                         seed=cfg.seed, progress=cfg.progress)
    if cfg.init is not None:
        if not plan.algo_cls.honours_init:
            raise ParameterError(f"algorithm {plan.algo_cls.name!r} does not start from a given point: "
                                 f"a warm start needs one that does (dp-sgd, dp-gd, adaptive-spider, ...)")
        algo.init = np.array(cfg.init, dtype=float)
    ctx.stage(f"{plan.algo_cls.name}: calibrating noise, running{where}")
    t0 = time.perf_counter()
    with np.errstate(all="ignore"):  # a diverging run is reported below, in one line
        out = algo.run()
    ctx.timing["run_s"] = time.perf_counter() - t0
    w = np.asarray(out.w, dtype=float)
    if not np.all(np.isfinite(w)):
        raise DpregError("the run diverged (non-finite iterate); try a smaller step size")
    selection = None
    if built.selector is not None:
        w, selection = select_output(built.selector, built.eps_sel, out, w, cfg)
    return Outcome(out, w, selection)


def evaluate(ctx: Context, data: Data, built: Built, outcome: Outcome) -> dict:
    """The record's non-private ``diagnostics``, after the run and never fed
    back into it: counts and accounting only for ``diagnostics="light"``, else
    everything of :func:`~.diagnostics.diagnostics`."""
    ctx.stage("evaluating (non-private diagnostics)")
    timing = {"total_s": time.perf_counter() - ctx.t_start, **ctx.timing}
    if ctx.cfg.diagnostics == "light":
        return light_diagnostics(data, built, outcome, timing)
    return diagnostics(ctx.cfg, data, built, outcome, timing)


def write(cfg: RunConfig, record: dict) -> None:
    """Write the record to ``cfg.out`` (atomically) when the run writes it;
    nothing after a Ctrl-C, even one a compiled call dropped."""
    from ..interrupts import check
    from ..results import to_json, write_atomic

    if cfg.out is not None and cfg.write_record:
        check()
        write_atomic(cfg.out, to_json(record))
