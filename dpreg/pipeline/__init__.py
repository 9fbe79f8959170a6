"""Assemble a pipeline by name and run it.

:func:`run_pipeline` is the one path from a :class:`RunConfig` to a JSON
record, in stages (:mod:`dpreg.pipeline.stages`), each a function that
states what it promises:

1. **validate** - everything a user can get wrong, *before* any private
   computation (names, budget, parameters, options, output path);
2. **load** - the raw records, validated; the loss for the public task; labels mapped;
3. **build** - the accountant, every charge made before the run, the
   preprocessing, the problems, the kernels;
4. **run** - the algorithm (and the private output selection);
5. **release** and **evaluate** - the record, in two parts (below);
6. **write** - the record to ``out``, atomically.

The record's two parts:

* ``release`` - the model (weights, intercept, label map, preprocessing to
  repeat), the privacy statement (epsilon, delta, relation, accountant,
  mechanisms, randomness mode) and the public configuration: safe to publish;
* ``diagnostics`` - everything computed on the raw data after the run
  (metrics, baselines, trajectory, usage, clip counts, timings, what of the
  schema was inferred), labelled non-private.  ``diagnostics=False`` writes
  the release alone (and computes none of it).

The modules: :mod:`~.config` (RunConfig, defaults), :mod:`~.validation`,
:mod:`~.loading`, :mod:`~.build` (the public rules the problem is built by),
:mod:`~.selection`, :mod:`~.release`, :mod:`~.diagnostics`,
:mod:`~.reference` (the non-private optimum), :mod:`~.context` (what the
stages hand each other).  Sharded data take the same stages in
:mod:`dpreg.backends.pipeline`.

Randomness (privacy rule 4): the mechanisms' root seed is secret - OS entropy
unless ``seed`` is given (research mode, flagged in the release).  Public
randomness (the ``test_fraction`` split, synthetic data) uses ``split_seed``.
"""
from __future__ import annotations

from ..registry import get_loss, parse_name_options
from . import stages
from .build import (AUTO_LOSS, check_algorithm_fits, check_size, intercept_for, loss_spec_of, make_accountant,
                    own_biases, public_task, resolve_loss, target_transform, training_label_map)
from .config import (DEFAULTS, DIAGNOSTICS_NOTE, RELATION_TEXT, RELEASE_NOTE, SEEDED_NOTE, RunConfig,
                     default_delta)
from .context import Built, Context, Data, Outcome, Plan, pipeline_rng
from .diagnostics import DIAGNOSTICS_MIN_BUDGET_S, diagnostics_budget
from .loading import Loaded, load_data, load_prepared, public_file_name
from .reference import nonprivate_optimum
from .release import make_release, model_dict, privacy_statement
from .selection import prepare_selection, select_output
from .validation import (parse_labels, privacy_warner, runs_data_parallel, selector_options, set_threads, validate,
                       warn_at_caller)

#: the names scripts and benchmarks reach by their former spelling
_parse_name_options = parse_name_options
_pipeline_rng = pipeline_rng
_prepare_selection = prepare_selection
_select_output = select_output
_set_threads = set_threads


def run_pipeline(cfg: RunConfig) -> dict:
    """Run one configured pipeline; return the JSON-ready record (and write it
    to ``cfg.out`` if given).  Raises DpregError for anything the user got wrong,
    before any private computation when it can be known in advance.  Sharded
    data (or ``backend="dask"``) take the data-parallel path
    (:func:`dpreg.backends.pipeline.run_sharded`), with the same stages."""
    if runs_data_parallel(cfg):
        from ..backends.pipeline import run_sharded

        return run_sharded(cfg)
    ctx = stages.start(cfg)                 # validate: everything a user can get wrong, before any data
    data = stages.load(ctx)                 # load: raw records; the loss for the public task; labels mapped
    built = stages.build(ctx, data)         # build: accountant, pre-run charges, preprocessing, problems
    outcome = stages.run(ctx, built)        # run: the algorithm, then the private output selection
    record = {"dpreg_record": 2, "release": make_release(ctx, data, built, outcome)}
    if cfg.diagnostics:                     # evaluate: non-private, after the run, never fed back into it
        record["diagnostics"] = stages.evaluate(ctx, data, built, outcome)
    stages.write(cfg, record)               # write: atomically, nothing after a Ctrl-C
    return record


__all__ = [
    "AUTO_LOSS", "DEFAULTS", "DIAGNOSTICS_MIN_BUDGET_S", "DIAGNOSTICS_NOTE", "RELATION_TEXT", "RELEASE_NOTE",
    "SEEDED_NOTE", "Built", "Context", "Data", "Loaded", "Outcome", "Plan", "RunConfig", "check_algorithm_fits",
    "check_size", "default_delta", "diagnostics_budget", "get_loss", "intercept_for", "load_data", "load_prepared",
    "loss_spec_of", "make_accountant", "model_dict", "nonprivate_optimum", "own_biases", "parse_labels",
    "parse_name_options", "pipeline_rng", "prepare_selection", "privacy_statement", "privacy_warner", "public_file_name",
    "public_task", "make_release", "resolve_loss", "run_pipeline", "runs_data_parallel", "select_output",
    "selector_options", "set_threads", "stages", "target_transform", "training_label_map", "validate",
    "warn_at_caller",
]
