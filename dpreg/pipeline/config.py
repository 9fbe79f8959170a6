"""What a run is given: :class:`RunConfig` (every option of ``dpreg run``),
the defaults, and the fixed sentences a record carries."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

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
