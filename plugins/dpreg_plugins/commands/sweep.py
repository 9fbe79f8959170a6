"""The ``dpreg sweep`` command: a grid of runs from a TOML file, resumable,
in parallel worker processes or on a Dask cluster, and one tidy table.

``dpreg sweep CONFIG.toml [--workers N] [--scheduler ADDRESS] [--out-dir DIR]``

The configuration (every key but ``algorithms``, ``epsilons`` and ``data`` is
optional; an unknown key or a bad value is a one-line error naming it)::

    algorithms = ["dp-gd", "dp-sgd"]        # or {label = "...", algo = "...", params = {...},
                                            #     epsilons = [...]}: a variant run at those epsilons only
    noises     = ["gaussian", "tree"]       # algorithms that take no noise run once, with none
    epsilons   = [0.5, 1.0, 2.0]
    replicates = 3                          # runs per cell, each with secret randomness (default 1)
    # seeds    = [0, 1, 2]                  # or research seeds instead (see below)
    data       = ["synthetic-logistic:n=2000,d=4"]   # or {name = "...", train = "...", test = "..."}
    loss       = "logistic"                 # or a list: one more axis; "auto" as dpreg run
    test_data  = "FILE"                     # for the plain-string data entries
    delta      = 1e-5                       # default: the pipeline's min(1e-5, 1/(10 n))
    accountant = "rdp"
    diagnostics = true                      # or "light" (no evaluation: no accuracy columns)
    [params.dp-gd]                          # fixed parameters per algorithm name or label
    steps = 100

File paths (data, test_data) are read relative to the configuration's
directory.  Entries of ``algorithms`` may share a label when each gives its
own, disjoint ``epsilons`` (per-epsilon parameters, e.g. a paper's table: one
line in the plots).  Every cell is one :func:`dpreg.pipeline.run_pipeline` call; its
record is written atomically to ``DIR/records/<cell key>.json`` (the key
names the cell and ends in a hash of its whole configuration), and a rerun
skips every cell whose record exists, so an interrupted sweep resumes where it
stopped.  A cell that fails with a DpregError becomes an ``error`` row (and is
tried again by the next rerun).  The table of every cell is written to
``DIR/results.csv`` and ``DIR/results.json``.

Privacy: every cell is a separate run on the same data and each satisfies its
own (epsilon, delta); the sweep as a whole composes them, and choosing the
best cell from the table is non-private hyper-parameter tuning.  Randomness
is secret by default, as for ``dpreg run``: every cell draws its mechanisms'
randomness from OS entropy, and the runs of one configuration are told apart
by a replicate index (``replicates = N``; ``rep0``, ``rep1``, ... in the file
names, the ``replicate`` column), never by a seed - no seed is chosen,
written or shown, so a published cell cannot be re-run with its noise.  Only
a grid that names ``seeds`` (research seeds, exclusive with ``replicates``)
runs seeded cells: reproducible, with ``dpreg run --seed``'s warning (the
guarantee holds only while the seeds stay secret), and only then do the
file names and the table carry a seed.  The records' ``diagnostics`` and the
table's columns read from them (accuracy, loss, gradient norms, counts,
timings) are non-private: publish a cell's ``release`` part, not the table.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from dpreg import hookimpl
from dpreg.errors import DpregError

#: the table's columns, in order
COLUMNS = ("algo", "noise", "loss", "data", "epsilon", "delta", "replicate", "seed", "status", "params", "n", "d",
           "data_access", "epsilon_spent", "noise_multiplier", "iterations", "records_used", "gradient_evaluations",
           "alpha", "kappa", "batch1", "batch2", "o1_refreshes", "escape_tests",
           "train_accuracy", "test_accuracy", "train_loss", "test_loss", "train_grad_norm",
           "train_lambda_min", "test_grad_norm", "train_grad_norm_at_zero", "test_grad_norm_at_zero",
           "test_majority_rate", "nonprivate_train_loss", "train_r2", "test_r2", "test_rmse",
           "test_r2_of_train_mean", "run_s", "record", "error")

#: run_info keys read into the table: column -> the algorithms' names for it, first present wins
#: (batch1: the O1 / large batch; batch2: the O2 batch, its mean when adaptive; o1_refreshes: O1
#: calls - adaptive-spider's phases, perturbed-sgd's O1 queries, dp-spider's phases)
RUN_INFO_COLUMNS = {"alpha": ("alpha",), "kappa": ("kappa",), "batch1": ("batch1", "batch_o1"),
                    "batch2": ("batch2", "batch_o2_mean"), "o1_refreshes": ("o1_refreshes", "o1_queries", "phases"),
                    "escape_tests": ("escape_tests",)}

TOP_KEYS = {"algorithms", "noises", "epsilons", "replicates", "seeds", "data", "loss", "test_data", "delta",
            "accountant", "diagnostics", "params"}


@dataclass(frozen=True)
class Cell:
    """One run of the grid: everything its record depends on."""

    algo: str            # label of the algorithm entry (its name unless a label was given)
    algorithm: str       # registered algorithm name
    noise: str | None
    loss: str
    data: str            # label of the data entry
    train: str
    test: str | None
    epsilon: float
    delta: float | None
    seed: int | None     # None: secret randomness (the default); an int only when the grid names seeds
    accountant: str
    diagnostics: Any
    params: dict = field(default_factory=dict)
    replicate: int = 0   # which run of this configuration (the seed's index in a seeded grid)

    def key(self) -> str:
        """Deterministic file name: readable fields and a hash of the whole
        cell; ``rep<k>`` for a secret cell, ``seed<s>`` only for a seeded one."""
        fields = asdict(self)
        if self.seed is not None:  # the seed names a seeded cell (its index adds nothing)
            del fields["replicate"]
        h = hashlib.sha1(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:10]
        parts = [self.data, self.loss, self.algo, self.noise or "default", f"eps{self.epsilon:g}",
                 f"rep{self.replicate}" if self.seed is None else f"seed{self.seed}"]
        readable = "__".join(re.sub(r"[^A-Za-z0-9.=+-]+", "_", p) for p in parts)
        return f"{readable[:150]}__{h}"


# --------------------------------------------------------------------------- configuration
def load_toml(path: str) -> dict:
    """Parse a TOML file (tomllib, or tomli before Python 3.11); a syntax
    error or an unreadable file is a one-line DpregError."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise DpregError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DpregError(f"{path} is not valid TOML: {str(exc).splitlines()[0]}") from None


def _fail(key: str, msg: str):
    raise DpregError(f"sweep config: {key}: {msg}")


def _str_list(cfg: dict, key: str, *, required: bool, default=None) -> list:
    v = cfg.get(key, default)
    if v is None:
        if required:
            _fail(key, "missing (a list)")
        return [None]
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v:
        _fail(key, f"must be a non-empty list, got {v!r}")
    return v


def _number(key: str, v, *, lo: float = 0.0, lo_open: bool = True, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        _fail(key, f"must be a number, got {v!r}")
    if (v <= lo if lo_open else v < lo) or (hi is not None and v >= hi):
        _fail(key, f"out of range: {v!r}")
    return float(v)


def _resolve_path(spec: str, base: Path) -> str:
    """A path relative to the config's directory if such a file exists, else
    ``spec`` unchanged (a data-set name such as ``synthetic-logistic:n=100``)."""
    p = Path(spec).expanduser()
    if not p.is_absolute() and (base / p).exists():
        return str((base / p).resolve())
    return spec


def parse_config(cfg: dict, base: Path = Path(".")) -> list[Cell]:
    """Validate a parsed sweep configuration and return its cells, in grid
    order (data, loss, algorithm, noise, epsilon, replicate or seed).  Any unknown key,
    unknown name or bad value raises a one-line DpregError naming the key.
    Algorithm parameters are checked by each run (a bad one is an error row)."""
    from dpreg.pipeline import get_loss
    from dpreg.registry import get_registry

    if not isinstance(cfg, dict):
        _fail("(top)", "must be a table")
    unknown = sorted(set(cfg) - TOP_KEYS)
    if unknown:
        _fail(unknown[0], f"unknown key (known: {', '.join(sorted(TOP_KEYS))})")
    reg = get_registry()

    params_tab = cfg.get("params", {})
    if not isinstance(params_tab, dict) or any(not isinstance(v, dict) for v in params_tab.values()):
        _fail("params", "must be tables [params.ALGORITHM] of key = value")
    algos = []  # (label, name, params, own epsilons or None)
    for i, a in enumerate(_str_list(cfg, "algorithms", required=True)):
        own_eps = None
        if isinstance(a, str):
            label, name, p = a, a, {}
        elif isinstance(a, dict):
            bad = sorted(set(a) - {"label", "algo", "params", "epsilons"})
            if bad:
                _fail(f"algorithms[{i}].{bad[0]}", "unknown key (known: label, algo, params, epsilons)")
            if "epsilons" in a:
                own_eps = [_number(f"algorithms[{i}].epsilons[{j}]", e)
                           for j, e in enumerate(_str_list(a, "epsilons", required=True))]
            name = a.get("algo")
            if not isinstance(name, str):
                _fail(f"algorithms[{i}].algo", "missing (the algorithm's name)")
            label = a.get("label", name)
            p = a.get("params", {})
            if not isinstance(label, str) or not label:
                _fail(f"algorithms[{i}].label", f"must be a non-empty string, got {label!r}")
            if not isinstance(p, dict):
                _fail(f"algorithms[{i}].params", "must be a table of key = value")
        else:
            _fail(f"algorithms[{i}]", f"must be a name or a table, got {a!r}")
        if name not in reg.names("algorithm"):
            _fail(f"algorithms[{i}]", f"unknown algorithm {name!r} (dpreg list algorithm)")
        algos.append((label, name, {**params_tab.get(name, {}), **params_tab.get(label, {}), **p}, own_eps))
    labels = [a[0] for a in algos]
    for lab in set(labels):
        same = [a[3] for a in algos if a[0] == lab]
        if len(same) > 1 and (any(e is None for e in same)
                              or sum(len(set(e)) for e in same) != len(set().union(*map(set, same)))):
            _fail("algorithms", f"entries share the label {lab!r}; give each variant its own label "
                                "(or each its own, disjoint epsilons)")
    stray = sorted(set(params_tab) - set(labels) - {a[1] for a in algos})
    if stray:
        _fail(f"params.{stray[0]}", "names no algorithm of the sweep")

    noises = _str_list(cfg, "noises", required=False)
    for i, nz in enumerate(noises):
        if nz is not None and (not isinstance(nz, str) or nz not in reg.names("noise")):
            _fail(f"noises[{i}]", f"unknown noise {nz!r} (dpreg list noise)")
    losses = _str_list(cfg, "loss", required=False, default="logistic")
    for i, ls in enumerate(losses):
        if not isinstance(ls, str):
            _fail("loss", f"must be a name or a list of names, got {ls!r}")
        try:
            if ls != "auto":  # auto: resolved per data set, as by dpreg run
                get_loss(reg, ls)
        except DpregError as exc:
            _fail("loss", str(exc))
    eps = [_number(f"epsilons[{i}]", e) for i, e in enumerate(_str_list(cfg, "epsilons",
                                                                           required=all(a[3] is None for a in algos)))
           if e is not None]
    if eps and all(a[3] is not None for a in algos):
        _fail("epsilons", "unused: every algorithm entry gives its own epsilons")
    if "seeds" in cfg and "replicates" in cfg:
        _fail("seeds", "give either replicates (secret randomness, the default) or seeds (research seeds), "
                       "not both")
    runs: list = [None]  # one secret run per configuration unless told otherwise
    if "replicates" in cfg:
        r = cfg["replicates"]
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            _fail("replicates", f"must be an integer >= 1, got {r!r}")
        runs = [None] * r
    if "seeds" in cfg:
        runs = _str_list(cfg, "seeds", required=True)
        for i, s in enumerate(runs):
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                _fail(f"seeds[{i}]", f"must be an integer >= 0, got {s!r}")
        if len(set(runs)) != len(runs):
            _fail("seeds", "a seed is listed twice")
    delta = cfg.get("delta")
    if delta is not None:
        delta = _number("delta", delta, hi=1.0)
    accountant = cfg.get("accountant", "rdp")
    if not isinstance(accountant, str) or accountant not in reg.names("accountant"):
        _fail("accountant", f"unknown accountant {accountant!r} (dpreg list accountant)")
    diagnostics = cfg.get("diagnostics", True)
    if diagnostics not in (True, "light"):
        _fail("diagnostics", f"must be true or \"light\", got {diagnostics!r}")
    test_default = cfg.get("test_data")
    if test_default is not None and not isinstance(test_default, str):
        _fail("test_data", f"must be a string, got {test_default!r}")

    datas = []  # (label, train, test)
    for i, dspec in enumerate(_str_list(cfg, "data", required=True)):
        if isinstance(dspec, str):
            datas.append((dspec, _resolve_path(dspec, base),
                          _resolve_path(test_default, base) if test_default else None))
        elif isinstance(dspec, dict):
            bad = sorted(set(dspec) - {"name", "train", "test"})
            if bad:
                _fail(f"data[{i}].{bad[0]}", "unknown key (known: name, train, test)")
            train, test = dspec.get("train"), dspec.get("test")
            if not isinstance(train, str):
                _fail(f"data[{i}].train", "missing (a data-set name or file)")
            if test is not None and not isinstance(test, str):
                _fail(f"data[{i}].test", f"must be a string, got {test!r}")
            name = dspec.get("name", train)
            if not isinstance(name, str) or not name:
                _fail(f"data[{i}].name", f"must be a non-empty string, got {name!r}")
            datas.append((name, _resolve_path(train, base), _resolve_path(test, base) if test else None))
        else:
            _fail(f"data[{i}]", f"must be a name, a file or a table, got {dspec!r}")
    if len({d[0] for d in datas}) != len(datas):
        _fail("data", "two entries share a name")

    cells = []
    for dname, train, test in datas:
        for loss in losses:
            for label, name, p, own_eps in algos:
                uses_noise = reg.get("algorithm", name).uses_noise
                for nz in (noises if uses_noise else [None]):
                    for e in (own_eps if own_eps is not None else eps):
                        for k, s in enumerate(runs):
                            cells.append(Cell(label, name, nz, loss, dname, train, test, e, delta, s,
                                              accountant, diagnostics, dict(p), replicate=k))
    return cells


# --------------------------------------------------------------------------- one cell
def _init_worker() -> None:
    """Worker-process initializer: one numba thread per worker (set before
    numba is imported; the cells also pass threads=1)."""
    os.environ["NUMBA_NUM_THREADS"] = "1"


def run_cell(cell: Cell, path: str) -> dict:
    """Run one cell and write its record atomically to ``path``; return its
    table row (an ``error`` row if the run raised a DpregError), with the
    run's privacy warnings under ``"warnings"`` (the sweep prints each once)."""
    from dpreg.pipeline import RunConfig, run_pipeline
    from dpreg.results import to_json, write_atomic

    said: list = []
    try:
        rec = run_pipeline(RunConfig(
            algo=cell.algorithm, noise=cell.noise, loss=cell.loss, data=cell.train, test_data=cell.test,
            epsilon=cell.epsilon, delta=cell.delta, accountant=cell.accountant, params=dict(cell.params),
            seed=cell.seed, diagnostics=cell.diagnostics, threads=1, warn=said.append))
    except DpregError as exc:
        return error_row(cell, f"{type(exc).__name__}: {exc}")
    write_atomic(path, to_json(rec))
    return dict(record_row(cell, rec, path), warnings=said)


def _base_row(cell: Cell) -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(algo=cell.algo, noise=cell.noise, loss=cell.loss, data=cell.data, epsilon=cell.epsilon,
               delta=cell.delta, replicate=cell.replicate, seed=cell.seed, params=format_params(cell.params))
    return row


def error_row(cell: Cell, message: str) -> dict:
    row = _base_row(cell)
    row.update(status="error", error=message.splitlines()[0] if message else "error")
    return row


def record_row(cell: Cell, rec: dict, path: str) -> dict:
    """The table row of a finished cell, read off its record."""
    row = _base_row(cell)
    rel, diag = rec.get("release", {}), rec.get("diagnostics") or {}
    priv = rel.get("privacy", {})
    mech = [m.get("noise_multiplier") for m in priv.get("mechanisms", []) if m.get("noise_multiplier") is not None]
    metrics, timing = diag.get("metrics") or {}, diag.get("timing") or {}
    usage, problem, info = diag.get("usage") or {}, diag.get("problem") or {}, diag.get("run_info") or {}
    base = diag.get("baselines") or {}
    row.update(status="ok", delta=rel.get("config", {}).get("delta", cell.delta),
               data_access=rel.get("config", {}).get("data_access"), n=problem.get("n"), d=problem.get("d"),
               epsilon_spent=priv.get("epsilon"), noise_multiplier=mech[0] if mech else None,
               run_s=timing.get("run_s"), record=str(path))
    for k in ("iterations", "records_used", "gradient_evaluations"):
        row[k] = usage.get(k)
    for col, names in RUN_INFO_COLUMNS.items():
        row[col] = next((info[k] for k in names if isinstance(info.get(k), (int, float))), None)
    for k in ("train_accuracy", "test_accuracy", "train_loss", "test_loss", "train_grad_norm", "train_lambda_min",
              "test_grad_norm", "train_r2", "test_r2", "test_rmse"):
        row[k] = metrics.get(k)
    for k in ("train_grad_norm_at_zero", "test_grad_norm_at_zero", "test_majority_rate", "nonprivate_train_loss",
              "test_r2_of_train_mean"):
        row[k] = base.get(k)
    return row


def format_params(params: dict) -> str | None:
    """A cell's fixed parameters as one table cell: ``k=v; k=v`` in key order (None if none)."""
    return "; ".join(f"{k}={v}" for k, v in sorted(params.items())) or None


# --------------------------------------------------------------------------- the sweep
def run_sweep(cells: list[Cell], out_dir: str, *, workers: int = 2, scheduler: str | None = None,
              echo=lambda msg: None) -> tuple[list[dict], int]:
    """Run every cell whose record is missing (in ``workers`` processes, or on
    the Dask scheduler at ``scheduler``, an address or a ``Client``), then
    write the table of all cells.  Returns (rows in grid order, cells run)."""
    rec_dir = Path(out_dir).resolve() / "records"  # absolute: Dask workers may run elsewhere
    rec_dir.mkdir(parents=True, exist_ok=True)
    paths = [str(rec_dir / f"{c.key()}.json") for c in cells]
    rows: list[dict | None] = [None] * len(cells)
    todo = []
    for i, (c, p) in enumerate(zip(cells, paths)):
        if os.path.isfile(p):
            try:
                with open(p, encoding="utf-8") as fh:
                    rows[i] = record_row(c, json.load(fh), p)
                continue
            except (OSError, ValueError):
                pass  # unreadable: run the cell again
        todo.append(i)
    from dpreg.pipeline import SEEDED_NOTE

    if any(c.seed is not None for c in cells):  # the warning `dpreg run --seed` gives, once
        echo(f"warning: {SEEDED_NOTE}")
    said: set = {SEEDED_NOTE}
    echo(f"sweep: {len(cells)} cells, {len(cells) - len(todo)} done before, {len(todo)} to run"
         + (f" on {scheduler}" if scheduler is not None and todo else
            f" in {workers} worker process{'es' if workers != 1 else ''}" if todo else ""))
    done = 0

    def finished(i, row):
        nonlocal done
        for msg in row.pop("warnings", None) or ():  # each of the runs' privacy warnings once
            if msg not in said:
                said.add(msg)
                echo(f"warning: {msg}")
        rows[i] = row
        done += 1
        c = cells[i]
        run = f"rep={c.replicate}" if c.seed is None else f"seed={c.seed}"
        what = f"{c.data} {c.loss} {c.algo}{'/' + c.noise if c.noise else ''} eps={c.epsilon:g} {run}"
        echo(f"[{done}/{len(todo)}] {what}: " + (row["status"] if row["status"] == "ok" else f"error: {row['error']}"))

    if todo and scheduler is not None:
        _run_dask(scheduler, [(i, cells[i], paths[i]) for i in todo], finished)
    elif todo and workers <= 1:
        for i in todo:
            finished(i, _guarded(cells[i], paths[i]))
    elif todo:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn: a fresh interpreter per worker (numba's threads do not survive fork)
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker)
        try:
            futs = {pool.submit(_guarded, cells[i], paths[i]): i for i in todo}
            for f in as_completed(futs):
                finished(futs[f], _result(f, cells[futs[f]]))
        finally:  # on Ctrl-C: drop the queued cells; finished records stay for the rerun
            pool.shutdown(wait=True, cancel_futures=True)
    write_table(rows, out_dir)
    return rows, len(todo)


def _result(future, cell: Cell) -> dict:
    """A future's row; a worker that died (killed, out of memory) gives an error row."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001
        return error_row(cell, f"worker failed: {type(exc).__name__}: {exc}")


def _guarded(cell: Cell, path: str) -> dict:
    """run_cell, with any other exception also turned into an error row (a
    crashed cell never loses the rest of the sweep)."""
    try:
        return run_cell(cell, path)
    except Exception as exc:  # noqa: BLE001
        msg = str(exc).splitlines()[0] if str(exc) else ""
        return error_row(cell, f"{type(exc).__name__}: {msg}")


def _run_dask(scheduler, jobs, finished) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise DpregError("--scheduler needs dask.distributed: pip install 'dpreg[distributed]'") from None
    own = not hasattr(scheduler, "submit")
    try:
        client = Client(scheduler) if own else scheduler
    except (OSError, TimeoutError, ValueError) as exc:
        raise DpregError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    try:
        futs = {client.submit(_guarded, c, p, pure=False): (i, c) for i, c, p in jobs}
        for f in as_completed(list(futs)):
            i, c = futs[f]
            finished(i, _result(f, c))
    finally:
        if own:
            client.close()


def table_columns(rows: list[dict]) -> tuple[str, ...]:
    """The table's columns: :data:`COLUMNS`, without ``seed`` unless a cell is seeded."""
    seeded = any(r.get("seed") is not None for r in rows)
    return COLUMNS if seeded else tuple(c for c in COLUMNS if c != "seed")


def write_table(rows: list[dict], out_dir: str) -> None:
    """Write the tidy table (one row per cell) as results.csv and results.json, atomically."""
    from dpreg.results import write_atomic

    cols = table_columns(rows)
    rows = [{k: r.get(k) for k in cols} for r in rows]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    write_atomic(os.path.join(out_dir, "results.csv"), buf.getvalue().rstrip("\n"))
    write_atomic(os.path.join(out_dir, "results.json"), json.dumps(rows, indent=1))


@click.command("sweep")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="worker processes (each runs one cell at a time with one numba thread)")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="run the cells on this Dask scheduler (tcp://host:8786) instead; records are written "
                   "by the workers, so DIR must be on a file system they share")
@click.option("--out-dir", default=None, metavar="DIR",
              help="where the records and results.csv/json go [default: ./<config stem>-sweep]")
@click.option("--plot", "plot_metric", default=None, metavar="METRIC",
              help="also draw METRIC (e.g. test_accuracy) against epsilon to DIR/METRIC.png, as "
                   "`dpreg plot sweep DIR --metric METRIC` does")
def sweep(config, workers, scheduler, out_dir, plot_metric):
    """Run a grid of private runs (algorithms x noises x epsilons x
    replicates x data sets) described by a TOML file; resumable; writes
    DIR/results.csv and DIR/results.json.  Every cell's randomness is secret
    unless the grid names research seeds (keep them secret, or the runs'
    privacy guarantee is void).  Configuration keys: docs/sweeps.md."""
    from dpreg.cli import user_errors

    @user_errors
    def go():
        cells = parse_config(load_toml(config), Path(config).resolve().parent)
        d = out_dir or f"{Path(config).stem}-sweep"
        try:
            return d, *run_sweep(cells, d, workers=workers, scheduler=scheduler, echo=click.echo)
        except KeyboardInterrupt:
            click.echo("interrupted; finished cells keep their records: run the same command again to resume",
                       err=True)
            sys.exit(130)

    d, rows, ran = go()
    errors = sum(r["status"] != "ok" for r in rows)
    click.echo(f"sweep: {len(rows)} cells ({ran} run now), {errors} error{'s' if errors != 1 else ''}; "
               f"table {os.path.join(d, 'results.csv')}")
    if plot_metric:  # after the table is safely written: a plotting error loses no cell
        from .plot import plot_sweep

        png = user_errors(lambda: plot_sweep(d, plot_metric, os.path.join(d, f"{plot_metric}.png")))()
        click.echo(f"plot  {png}")


@hookimpl
def dpreg_register_commands(cli):
    cli.add_command(sweep)
