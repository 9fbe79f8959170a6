"""Assemble a pipeline by name and run it.

:func:`run_pipeline` is the one path from a :class:`RunConfig` to a JSON
record: it validates everything a user can get wrong *before* any private
computation (names, budget, parameters, data, output path), builds the
problem, the accountant and the algorithm through the registry, runs it,
evaluates the result after the run, and writes the record atomically.
"""
from __future__ import annotations

import inspect
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from .accounting import check_budget_args
from .errors import DataError, DpregError, ParameterError
from .params import bind, parse_pairs
from .registry import get_registry

DEFAULTS = {"algo": "adaptive-spider", "noise": "tree", "loss": "logistic", "data": "breast-cancer"}


@dataclass
class RunConfig:
    """Everything ``dpreg run`` accepts (see ``dpreg run --help``)."""

    algo: str = DEFAULTS["algo"]
    noise: str | None = None
    loss: str = DEFAULTS["loss"]
    data: str = DEFAULTS["data"]
    test_data: str | None = None
    test_fraction: float | None = None
    epsilon: float = 1.0
    delta: float | None = None
    accountant: str = "rdp"
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    alpha: float | None = None
    select: str | None = None
    select_share: float = 0.1
    out: str | None = None
    progress: Callable[[int, int], None] | None = None


def _default_noise(algo_cls, reg) -> str | None:
    if not algo_cls.uses_noise:
        return None
    return DEFAULTS["noise"] if DEFAULTS["noise"] in reg.names("noise") else "gaussian"


def _parse_data_name(spec: str) -> tuple[str, dict]:
    name, _, opts = spec.partition(":")
    kw = {}
    if opts:
        for part in opts.split(","):
            k, eq, v = part.partition("=")
            if not eq or not k.strip():
                raise ParameterError(f"data options must look like name:key=value,...; got {spec!r}")
            kw[k.strip()] = v.strip()
    return name, kw


def get_loss(reg, spec: str):
    """The loss named by ``spec`` (``name`` or ``name:key=value,...``): options
    go to the registered loss, which must then be callable (a loss factory:
    ``loss(**options)`` returns the configured loss)."""
    name, kw = _parse_data_name(spec)
    loss = reg.get("loss", name)
    if not kw:
        return loss
    if not callable(loss):
        raise ParameterError(f"loss {name!r} takes no options; got {spec!r}")
    try:
        return loss(**kw)
    except TypeError as exc:
        raise ParameterError(f"loss {name!r}: bad options {kw}: {exc}") from None


def load_data(spec: str, *, seed: int, labels: str, d: int | None = None, test: bool = False):
    """(X, y, source_test_loader_or_None, description) for a data-set name or a file path."""
    from .data import load_file, prepare

    reg = get_registry()
    name, kw = _parse_data_name(spec)
    where = "test data" if test else "data"
    if name in reg.names("dataset"):
        try:
            src = reg.get("dataset", name)(**kw)
            with np.errstate(all="ignore"):  # bad options: one error line, no warnings
                X, y = src.load(seed)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"data set {name!r}: bad options {kw}: {exc}") from None
        X, y = prepare(X, y, labels=labels, where=f"{where} {name}", d=d, copy=False)
        return X, y, src, name
    if kw or not os.path.exists(spec):
        if os.path.sep in spec or "." in os.path.basename(spec):
            raise DataError(f"{where} file not found: {spec}")
        raise DataError(
            f"no data set or file named {spec!r}; built-in data sets: {', '.join(reg.names('dataset'))}"
        )
    X, y = load_file(spec, n_features=d)
    X, y = prepare(X, y, labels=labels, where=f"{where} {spec}", d=d, copy=False)
    return X, y, None, os.path.abspath(spec)


def run_pipeline(cfg: RunConfig) -> dict:
    """Run one configured pipeline; return the JSON-ready record (and write it
    to ``cfg.out`` if given).  Raises DpregError for anything the user got wrong,
    before any private computation when it can be known in advance."""
    from . import metrics
    from .problem import make_problem
    from .results import check_writable, to_json, versions, write_atomic

    t_start = time.perf_counter()
    reg = get_registry()
    # ---- names and budget first (cheap, no data touched)
    algo_cls = reg.get("algorithm", cfg.algo)
    loss = get_loss(reg, cfg.loss)
    acc_cls = reg.get("accountant", cfg.accountant)
    if cfg.noise is not None and not algo_cls.uses_noise:
        raise ParameterError(f"algorithm {cfg.algo!r} keeps no running sum and takes no --noise")
    noise_name = cfg.noise or _default_noise(algo_cls, reg)
    noise_cls = reg.get("noise", noise_name) if noise_name else None
    given = parse_pairs(cfg.params) if isinstance(cfg.params, (list, tuple)) else dict(cfg.params)
    params = bind(algo_cls.params, given, f"algorithm {cfg.algo!r}")
    if cfg.delta is not None:
        check_budget_args(cfg.epsilon, cfg.delta)
    else:
        check_budget_args(cfg.epsilon, 0.5)
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, (int, np.integer)) or cfg.seed < 0:
        raise ParameterError(f"seed must be an integer >= 0, got {cfg.seed!r}")
    if cfg.alpha is not None and not cfg.alpha > 0:
        raise ParameterError(f"alpha must be > 0, got {cfg.alpha}")
    if cfg.test_fraction is not None and cfg.test_data is not None:
        raise ParameterError("give either --test-data or --test-fraction, not both")
    sel_cls = None
    if cfg.select is not None:
        sel_cls = reg.get("selector", cfg.select)
        if not (isinstance(cfg.select_share, (int, float)) and 0 < cfg.select_share < 1):
            raise ParameterError(f"select share must be in (0, 1), got {cfg.select_share!r}")
        if "alpha" in inspect.signature(sel_cls.select).parameters and cfg.alpha is None:
            raise ParameterError(f"--select {cfg.select} tests alpha-stationarity: give --alpha")
    if cfg.out is not None:
        check_writable(cfg.out)

    # ---- data
    t0 = time.perf_counter()
    X, y, src, data_desc = load_data(cfg.data, seed=cfg.seed, labels=loss.labels)
    Xte = yte = None
    test_desc = None
    if cfg.test_data is not None:
        Xte, yte, _, test_desc = load_data(cfg.test_data, seed=cfg.seed, labels=loss.labels,
                                           d=X.shape[1], test=True)
    elif cfg.test_fraction is not None:
        from .data import split

        X, y, Xte, yte = split(X, y, cfg.test_fraction, cfg.seed)
        test_desc = f"seeded split {cfg.test_fraction:g} of {data_desc}"
    elif src is not None and src.load_test is not None:
        Xte, yte = src.load_test(cfg.seed)
        from .data import prepare

        Xte, yte = prepare(Xte, yte, labels=loss.labels, where="test data", d=X.shape[1])
        test_desc = f"{data_desc} (held-out draw)"
    t_data = time.perf_counter() - t0
    n = X.shape[0]
    delta = cfg.delta if cfg.delta is not None else 1.0 / n
    check_budget_args(cfg.epsilon, delta)

    problem = make_problem(loss, X, y, name=data_desc)
    test_problem = make_problem(loss, Xte, yte, name=test_desc) if Xte is not None else None
    accountant = acc_cls(cfg.epsilon, delta, algo_cls.relation_for(params))

    # ---- compile (or load cached) kernels before timing the run
    t0 = time.perf_counter()
    problem.gradient(np.zeros(problem.d), problem.all_rows[:1])
    t_compile = time.perf_counter() - t0

    selector = eps_sel = None
    if sel_cls is not None:  # charged before the run: the run calibrates to what is left
        selector, eps_sel = _prepare_selection(sel_cls, problem, accountant, cfg)

    algo = algo_cls(problem, params, noise=noise_cls, accountant=accountant, seed=cfg.seed,
                    progress=cfg.progress)
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

    # ---- evaluation, after the run
    t0 = time.perf_counter()
    G, M, rho = problem.constants()
    alpha = cfg.alpha
    ev = metrics.evaluate(problem, w, alpha=alpha, prefix="train")
    if test_problem is not None:
        ev.update(metrics.evaluate(test_problem, w, alpha=alpha, prefix="test"))
    traj = out.info.pop("trajectory", None)
    tr_summary = traj.summary() if traj is not None else {}
    if traj is not None:
        tr_summary["checkpoints"] = metrics.trajectory_grad_norms(problem, traj.steps, traj.iterates)
    t_eval = time.perf_counter() - t0

    cfg_dict = {k: v for k, v in asdict(cfg).items() if k not in ("progress",)}
    cfg_dict.update({"noise": noise_name, "delta": delta, "params_given": given,
                     "params_resolved": params, "data": data_desc, "test_data": test_desc})
    cfg_dict.pop("params", None)
    record = {
        "dpreg_record": 1,
        "config": cfg_dict,
        "algorithm": {"name": algo_cls.name, "paper": algo_cls.paper,
                      "data_access": algo_cls.data_access},
        "problem": {"n": problem.n, "d": problem.d, "loss": loss.name, "G": G, "M": M, "rho": rho,
                    "n_test": None if test_problem is None else test_problem.n},
        "versions": versions(),
        "privacy": accountant.state(),
        "usage": {"iterations": out.iterations, "records_used": out.records_used,
                  "gradient_evaluations": out.gradient_evaluations},
        "run_info": out.info,
        "selection": selection,
        "trajectory": tr_summary,
        "metrics": ev,
        "timing": {"total_s": time.perf_counter() - t_start, "data_s": t_data,
                   "compile_s": t_compile, "run_s": t_run, "eval_s": t_eval,
                   "threads": _threads()},
        "w": w,
    }
    if cfg.out is not None:
        write_atomic(cfg.out, to_json(record))
    return record


def _threads() -> int:
    import numba

    return int(numba.get_num_threads())


def _prepare_selection(sel_cls, problem, accountant, cfg):
    """Build the output selector and charge its pure-DP release now, before the
    run (the selector gets a :class:`~dpreg.accounting.Prepaid` view that
    matches its own charge against this one)."""
    from .accounting import Prepaid, pure_dp_event

    eps_sel = float(cfg.select_share) * float(cfg.epsilon)
    event = pure_dp_event(eps_sel)
    rng = np.random.default_rng(np.random.SeedSequence([int(cfg.seed), 0x5E1EC7, 1]))
    try:
        selector = sel_cls(problem, accountant=Prepaid(accountant, event), rng=rng)
    except ParameterError:
        if "check" not in inspect.signature(sel_cls.__init__).parameters:
            raise
        selector = sel_cls(problem, accountant=Prepaid(accountant, event), rng=rng, check="fosp")
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
