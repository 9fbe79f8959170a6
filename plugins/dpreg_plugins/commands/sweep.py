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
line in the plots).  Everything is checked before any cell runs (names,
algorithm parameters and their values, data-set options, data files, the
grid's size: at most :data:`MAX_CELLS`); an entry given twice runs once.

Every cell is one :func:`dpreg.pipeline.run_pipeline` call; its record is
written atomically to ``DIR/records/<cell key>.json`` (the key names the cell
and ends in a hash of its whole configuration), and a rerun skips every cell
whose record is a finished record of it (:func:`verify_record`), so an
interrupted sweep resumes where it stopped.  A cell that fails with a
DpregError becomes an ``error`` row (tried again by the next rerun) and the
sweep exits 1.  The table of every cell is written to ``DIR/results.csv`` and
``DIR/results.json``.  ``DIR`` is locked while a sweep runs in it
(:func:`open_out_dir`); Ctrl-C, SIGTERM and a record that cannot be written
stop the workers (:mod:`dpreg_plugins.commands.sweep_workers`) and write the
table of what finished.

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

#: the largest grid a sweep runs (more cells: split the grid into several sweeps)
MAX_CELLS = 100_000

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
    """Parse a TOML file (:func:`dpreg.config_file.read_toml`: a byte-order
    mark ignored); a syntax error or an unreadable file is a one-line DpregError."""
    from dpreg.config_file import read_toml

    return read_toml(path)


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
    from dpreg.registry import get_loss, get_registry

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
        entry = (label, name, {**params_tab.get(name, {}), **params_tab.get(label, {}), **p},
                 None if own_eps is None else _unique(own_eps))
        _check_params(reg, f"algorithms[{i}]" if not p else f"algorithms[{i}].params", entry)
        if entry not in algos:  # an entry given twice runs once
            algos.append(entry)
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

    noises = _unique(_str_list(cfg, "noises", required=False))
    for i, nz in enumerate(noises):
        if nz is not None and (not isinstance(nz, str) or nz not in reg.names("noise")):
            _fail(f"noises[{i}]", f"unknown noise {nz!r} (dpreg list noise)")
    losses = _unique(_str_list(cfg, "loss", required=False, default="logistic"))
    for i, ls in enumerate(losses):
        if not isinstance(ls, str):
            _fail("loss", f"must be a name or a list of names, got {ls!r}")
        try:
            if ls != "auto":  # auto: resolved per data set, as by dpreg run
                get_loss(reg, ls)
        except DpregError as exc:
            _fail("loss", str(exc))
    eps = _unique([_number(f"epsilons[{i}]", e) for i, e in
                   enumerate(_str_list(cfg, "epsilons", required=all(a[3] is None for a in algos))) if e is not None])
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
        if r > MAX_CELLS:
            _fail("replicates", f"{r:,} runs per configuration; a sweep has at most {MAX_CELLS:,} cells")
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
    datas = _unique(datas)  # an entry given twice runs once
    if len({d[0] for d in datas}) != len(datas):
        _fail("data", "two entries share a name")
    for i, (dname, train, test) in enumerate(datas):
        _check_data(reg, f"data[{i}]", train, base)
        if test is not None:
            _check_data(reg, f"data[{i}] test", test, base)

    count = len(datas) * len(losses) * len(runs) * sum(
        (len(noises) if reg.get("algorithm", name).uses_noise else 1) * len(own if own is not None else eps)
        for _, name, _, own in algos)
    if count > MAX_CELLS:
        _fail("(grid)", f"{count:,} cells ({len(datas)} data x {len(losses)} losses x {len(algos)} algorithms x "
                        f"noises x epsilons x {len(runs)} runs); a sweep has at most {MAX_CELLS:,}: split the grid")
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


def _unique(items: list) -> list:
    """``items`` without repeats, first occurrences in order (a grid entry
    given twice - an epsilon, a noise, a loss, a data set, an algorithm -
    runs once and counts once in the table and the plots)."""
    out: list = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _check_params(reg, key: str, entry) -> None:
    """The fixed parameters of an algorithm entry, checked as a run checks
    them (names, types, ranges: :func:`dpreg.params.bind`) before any cell runs."""
    from dpreg.params import bind

    label, name, params, _ = entry
    try:
        bind(reg.get("algorithm", name).params, params, f"algorithm {name!r}")
    except DpregError as exc:
        _fail(key if label == name else f"{key} ({label})", str(exc))


def _check_data(reg, key: str, spec: str, base: Path) -> None:
    """A data entry checked before any cell runs: a registered data set with
    options it takes (built, not loaded: an option's value is checked when the
    first cell loads it), or a file that exists, as a file, in a format dpreg
    reads."""
    from dpreg.data import COMPRESSED, SVM_EXT
    from dpreg.registry import parse_name_options

    try:
        name, kw = parse_name_options(spec)
    except DpregError as exc:
        _fail(key, str(exc))
    if name in reg.names("dataset"):
        try:
            reg.get("dataset", name)(**kw)
        except (TypeError, ValueError, DpregError) as exc:
            _fail(key, f"data set {name!r}: bad options {kw}: {str(exc).splitlines()[0]}")
        return
    if not os.path.exists(spec):
        where = f" (relative paths are read from the configuration's folder {base})" if not os.path.isabs(spec) \
            else ""
        _fail(key, f"no data set or file named {spec!r}{where}; built-in data sets: "
                   f"{', '.join(reg.names('dataset'))}")
    if os.path.isdir(spec):
        _fail(key, f"{spec} is a directory, not a data file")
    low = spec.lower()
    for ext in COMPRESSED:
        if low.endswith(ext):
            low = low[:-len(ext)]
    if not (low.endswith((".csv", ".npz", *SVM_EXT)) or "." not in os.path.basename(low)):
        _fail(key, f"unknown data format for {spec}: use .svm/.libsvm/.txt (svmlight), .csv or .npz")


# --------------------------------------------------------------------------- one cell
def run_cell(cell: Cell, path: str) -> dict:
    """Run one cell and write its record atomically to ``path``; return its
    table row (an ``error`` row if the run raised a DpregError), with the
    run's privacy warnings under ``"warnings"`` (the sweep prints each once).
    A record that cannot be written gives an error row marked ``"fatal"``:
    the sweep stops (a full disk or a read-only folder fails every cell)."""
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
    try:
        write_atomic(path, to_json(rec))
    except OSError as exc:
        return dict(error_row(cell, f"cannot write its record {path}: {exc.strerror or exc}"), fatal=True)
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


#: table columns that must be finite numbers >= 0 (or empty) in a row read off a record
_NONNEGATIVE = ("epsilon_spent", "noise_multiplier", "iterations", "records_used", "gradient_evaluations",
                "n", "d", "train_loss", "test_loss", "train_grad_norm", "test_grad_norm", "run_s",
                "train_grad_norm_at_zero", "test_grad_norm_at_zero", "alpha", "kappa", "batch1", "batch2",
                "o1_refreshes", "escape_tests")
#: columns that must be in [0, 1] (or empty)
_RATES = ("train_accuracy", "test_accuracy", "test_majority_rate")


def verify_record(cell: Cell, rec) -> str | None:
    """Why ``rec`` is not a finished record of ``cell`` (None when it is):
    a record a resumed sweep counts must hold a privacy statement dpreg could
    have written (:func:`dpreg.privacy_statement.check_statement`: epsilon
    finite, >= 0 and within the budget, delta in [0, 1), ...), for this
    cell's algorithm, epsilon, delta, accountant, noise and randomness mode,
    a model that loads, the diagnostics the cell asks for, and table values
    that are finite numbers in their ranges.  A record that fails is run
    again, never counted."""
    import math

    from dpreg.model import load_model
    from dpreg.privacy_statement import check_statement

    if not isinstance(rec, dict) or not isinstance(rec.get("release"), dict):
        return "no release part"
    rel = rec["release"]
    try:
        check_statement(rel, "the record")
        load_model(rec)
    except DpregError as exc:
        return str(exc)
    c, pr = rel["config"], rel["privacy"]
    want = {"algo": cell.algorithm, "epsilon": cell.epsilon, "accountant": cell.accountant}
    if cell.delta is not None:
        want["delta"] = cell.delta
    if cell.noise is not None:
        want["noise"] = cell.noise
    for k, v in want.items():
        if c.get(k) != v:
            return f"its {k} is {c.get(k)!r}, the cell's {v!r}"
    if pr.get("epsilon_budget") != cell.epsilon:
        return f"its budget is {pr.get('epsilon_budget')!r}, the cell's epsilon {cell.epsilon!r}"
    if pr["randomness"] != ("secret" if cell.seed is None else "seeded"):
        return f"its randomness is {pr['randomness']}"
    if cell.diagnostics and not isinstance(rec.get("diagnostics"), dict):
        return "no diagnostics"
    row = record_row(cell, rec, "")
    for k in (*_NONNEGATIVE, *_RATES, "train_lambda_min", "nonprivate_train_loss"):
        v = row.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return f"its {k} is {v!r}, not a finite number"
        if (k in _NONNEGATIVE and v < 0) or (k in _RATES and not 0 <= v <= 1):
            return f"its {k} is {v!r}, out of range"
    return None


def format_params(params: dict) -> str | None:
    """A cell's fixed parameters as one table cell: ``k=v; k=v`` in key order (None if none)."""
    return "; ".join(f"{k}={v}" for k, v in sorted(params.items())) or None


# --------------------------------------------------------------------------- the sweep
class SweepError(DpregError):
    """A sweep that stopped before its end (its folder could not be written):
    the finished cells' records are kept."""


def open_out_dir(out_dir: str):
    """Create ``DIR`` and ``DIR/records``, check that a file can be written
    there (a read-only or full file system fails here, before any cell runs),
    remove temporary files a killed sweep left, and lock ``DIR`` for this
    sweep: a second sweep on the same folder is refused in one line.  Returns
    the open lock file (the lock lasts until it is closed, or the process
    ends however it ends)."""
    import fcntl

    from dpreg.results import check_writable

    rec_dir = Path(out_dir).resolve() / "records"
    try:
        rec_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DpregError(f"cannot create the sweep folder {rec_dir}: {exc.strerror or exc}") from None
    lock_path = rec_dir.parent / ".dpreg-sweep.lock"
    try:
        lock = open(lock_path, "a+")
    except OSError as exc:
        raise DpregError(f"cannot write to the sweep folder {rec_dir.parent}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip()
        lock.close()
        raise DpregError(f"another sweep is running in {out_dir}" + (f" ({holder})" if holder else "")
                         + "; wait for it to end, or give another --out-dir") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}")
    lock.flush()
    try:
        check_writable(str(rec_dir / "probe.json"))
        check_writable(str(rec_dir.parent / "results.json"))
    except DpregError:
        lock.close()
        raise
    for stale in rec_dir.glob(".dpreg-*.tmp"):  # a record being written when a sweep was killed
        try:
            stale.unlink()
        except OSError:
            pass
    return lock


def resume(cells: list[Cell], paths: list[str], echo) -> tuple[list, list]:
    """(rows, todo): the row of every cell whose record exists and is a
    finished record of it (:func:`verify_record`), and the indices of the
    cells to run; a record that fails the check is named and run again."""
    rows: list = [None] * len(cells)
    todo = []
    for i, (c, p) in enumerate(zip(cells, paths)):
        if os.path.isfile(p):
            try:
                with open(p, encoding="utf-8") as fh:
                    rec = json.load(fh)
                why = verify_record(c, rec)
            except (OSError, ValueError) as exc:
                why = f"unreadable ({type(exc).__name__})"
            if why is None:
                rows[i] = record_row(c, rec, p)
                continue
            echo(f"record {os.path.basename(p)} is not a finished record of its cell ({why}); running it again")
        todo.append(i)
    return rows, todo


def pending_row(cell: Cell) -> dict:
    """The row of a cell a stopped sweep did not finish."""
    row = _base_row(cell)
    row.update(status="not run", error="the sweep stopped before this cell finished (run it again to resume)")
    return row


def run_sweep(cells: list[Cell], out_dir: str, *, workers: int = 2, scheduler: str | None = None,
              echo=lambda msg: None) -> tuple[list[dict], int]:
    """Run every cell whose record is missing or not a finished record of it
    (in ``workers`` processes, or on the Dask scheduler at ``scheduler``, an
    address or a ``Client``), then write the table of all cells.  Returns
    (rows in grid order, cells run).  On Ctrl-C (KeyboardInterrupt), SIGTERM
    (:class:`~dpreg_plugins.commands.sweep_workers.Terminated`) or a record
    that cannot be written (:class:`SweepError`) the workers are ended and
    the table of the finished cells (the others ``not run``) written before
    the exception goes on."""
    own = scheduler is not None and not hasattr(scheduler, "submit")
    client = connect_scheduler(scheduler) if own else scheduler  # an unreachable scheduler: before anything else
    try:
        return _sweep_in(cells, out_dir, workers, client, scheduler, echo)
    finally:
        if own:
            client.close()


def _sweep_in(cells, out_dir, workers, client, scheduler, echo):
    """:func:`run_sweep` once the scheduler (if any) answered."""
    from .sweep_workers import stopping_on_signals

    lock = open_out_dir(out_dir)
    try:
        rec_dir = Path(out_dir).resolve() / "records"  # absolute: Dask workers may run elsewhere
        paths = [str(rec_dir / f"{c.key()}.json") for c in cells]
        rows, todo = resume(cells, paths, echo)
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
            fatal = row.pop("fatal", False)
            rows[i] = row
            done += 1
            c = cells[i]
            run = f"rep={c.replicate}" if c.seed is None else f"seed={c.seed}"
            what = f"{c.data} {c.loss} {c.algo}{'/' + c.noise if c.noise else ''} eps={c.epsilon:g} {run}"
            echo(f"[{done}/{len(todo)}] {what}: " + (row["status"] if row["status"] == "ok"
                                                     else f"error: {row['error']}"))
            if fatal:
                raise SweepError(row["error"])

        try:
            with stopping_on_signals():
                if todo and client is not None:
                    _run_dask(client, [(i, cells[i], paths[i]) for i in todo], finished)
                elif todo and workers <= 1:
                    for i in todo:
                        finished(i, _guarded(cells[i], paths[i]))
                elif todo:
                    _run_local(workers, [(i, cells[i], paths[i]) for i in todo], cells, finished)
        finally:  # finished records are kept; the table says what is done (and what is not)
            full = [r if r is not None else pending_row(c) for r, c in zip(rows, cells)]
            try:
                write_table(full, out_dir)
            except OSError as exc:
                raise SweepError(f"cannot write the table in {out_dir}: {exc.strerror or exc} "
                                 f"({sum(r is not None and r['status'] == 'ok' for r in rows)} finished "
                                 f"records are kept under {rec_dir}; run the sweep again to rebuild it)") from None
        return full, len(todo)
    finally:
        lock.close()


def _run_local(workers: int, jobs: list, cells: list, finished) -> None:
    """The jobs in a :class:`~dpreg_plugins.commands.sweep_workers.WorkerPool`;
    every worker ended however the loop ends."""
    from .sweep_workers import WorkerPool

    pool = WorkerPool(workers)
    ok = False
    try:
        pool.run(jobs, finished, lambda i, reason: error_row(cells[i], reason))
        ok = True
    finally:
        pool.close(kill=not ok)


def _guarded(cell: Cell, path: str) -> dict:
    """run_cell, with any other exception also turned into an error row (a
    crashed cell never loses the rest of the sweep)."""
    try:
        return run_cell(cell, path)
    except Exception as exc:  # noqa: BLE001
        msg = str(exc).splitlines()[0] if str(exc) else ""
        return error_row(cell, f"{type(exc).__name__}: {msg}")


#: seconds to reach a Dask scheduler (a refused port fails at once)
CONNECT_TIMEOUT = 10.0


def connect_scheduler(address: str, timeout: float = CONNECT_TIMEOUT):
    """A ``distributed.Client`` on the scheduler at ``address``, or a
    one-line DpregError within about ``timeout`` seconds: a malformed address
    or a refused port at once (a plain TCP connection first), a peer that
    accepts and never answers or is not a Dask scheduler after ``timeout``
    (Dask's ``identity`` request, with a deadline), a scheduler without
    workers after ``timeout`` too."""
    import asyncio
    import concurrent.futures
    import socket

    try:
        from distributed import Client
        from distributed.comm import connect
    except ImportError:
        raise DpregError("--scheduler needs dask.distributed: pip install 'dpreg[distributed]'") from None

    def fail(why):
        raise DpregError(f"cannot reach the Dask scheduler at {address}: {why}")

    from urllib.parse import urlsplit

    u = urlsplit(address.strip() if "://" in address else "tcp://" + address.strip())
    scheme = u.scheme
    try:
        host, port = u.hostname, u.port
    except ValueError:
        host = port = None
    if scheme in ("tcp", "tls"):  # a plain TCP connection first: a refused or unroutable port fails at once
        if not host or not port:
            fail("not an address of the form tcp://HOST:PORT")
        address = f"{scheme}://{u.netloc}"
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as exc:
            fail(f"no answer in {timeout:g} s" if isinstance(exc, socket.timeout) else f"{exc.strerror or exc}")
    elif scheme not in ("inproc", "ws", "wss", "ucx"):
        fail("not a Dask address (tcp://HOST:PORT)")

    async def ask():
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # its own event loop: the caller may run one
        try:
            who = pool.submit(asyncio.run, asyncio.wait_for(ask(), timeout)).result(timeout + 5)
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError, TimeoutError):
            fail(f"no answer in {timeout:g} s")
        except Exception as exc:  # noqa: BLE001 - whatever answers there (garbage, another protocol)
            fail(f"what answers there is not a Dask scheduler ({type(exc).__name__})")
    if not isinstance(who, dict) or who.get("type") != "Scheduler":
        fail("what answers there is not a Dask scheduler")
    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        client.close()
        fail(f"the scheduler has no workers ({str(exc).splitlines()[0] if str(exc) else 'none came'})")
    return client


def _run_dask(client, jobs, finished) -> None:
    """The jobs as tasks of ``client``; the ones not done are cancelled however the loop ends."""
    from distributed import as_completed

    futs = {client.submit(_guarded, c, p, pure=False): (i, c) for i, c, p in jobs}
    try:
        for f in as_completed(list(futs)):
            i, c = futs[f]
            finished(i, _result(f, c))
    finally:
        client.cancel([f for f in futs if not f.done()])


def _result(future, cell: Cell) -> dict:
    """A future's row; a worker that died (killed, out of memory) gives an error row."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001
        return error_row(cell, f"worker failed: {type(exc).__name__}: {exc}")


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
    from dpreg.cli import _quiet_everywhere, user_errors

    from .sweep_workers import Terminated

    quiet = _quiet_everywhere()

    def echo(msg: str) -> None:
        if not quiet or msg.startswith("warning"):
            click.echo(msg)

    def stopped(d: str, what: str, code: int):
        click.echo(f"{what}: the workers are stopped; finished cells keep their records and "
                   f"{os.path.join(d, 'results.csv')} lists every cell (unfinished ones 'not run'); run the "
                   f"same command again to resume", err=True)
        sys.exit(code)

    @user_errors
    def go():
        cells = parse_config(load_toml(config), Path(config).resolve().parent)
        d = out_dir or f"{Path(config).stem}-sweep"
        try:
            return d, *run_sweep(cells, d, workers=workers, scheduler=scheduler, echo=echo)
        except KeyboardInterrupt:
            stopped(d, "interrupted", 130)
        except Terminated as exc:
            stopped(d, f"terminated (signal {exc.signum})", 128 + exc.signum)
        except SweepError as exc:
            click.echo(f"error: sweep stopped: {exc}", err=True)
            sys.exit(1)

    d, rows, ran = go()
    failed = [r for r in rows if r["status"] != "ok"]
    echo(f"sweep: {len(rows)} cells ({ran} run now), {len(failed)} error{'s' if len(failed) != 1 else ''}; "
         f"table {os.path.join(d, 'results.csv')}")
    if plot_metric and len(failed) < len(rows):  # after the table is safely written: a plotting error loses no cell
        from .plot import plot_sweep

        png = user_errors(lambda: plot_sweep(d, plot_metric, os.path.join(d, f"{plot_metric}.png")))()
        echo(f"plot  {png}")
    if failed:
        click.echo(f"error: {len(failed)} of {len(rows)} cells failed: {error_summary(failed)} (the error "
                   f"column of the table; a rerun tries them again)", err=True)
        sys.exit(1)


def error_summary(rows: list[dict], most: int = 2) -> str:
    """The commonest errors of failed rows, counted: ``3 x DataError: ...; 1 x ...``."""
    from collections import Counter

    counts = Counter(r.get("error") or r.get("status") for r in rows)
    text = "; ".join(f"{k} x {msg}" for msg, k in counts.most_common(most))
    return text + (f"; and {len(counts) - most} other errors" if len(counts) > most else "")


@hookimpl
def dpreg_register_commands(cli):
    cli.add_command(sweep)
