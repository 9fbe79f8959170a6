"""Size limits, checked before a run allocates or computes anything large.

A request that cannot finish - ``--param steps=1000000000000``, ``--epochs
1e9``, a network of 10^9 hidden units, a model of 10^7 weights read off one
stray svmlight index - is refused in one line within seconds, with the
estimate and the limit, instead of running for days or dying of a
``MemoryError`` after gigabytes.  Everything is estimated from public
quantities only: the number of records n, the parameter count d (the
problem's), the input's width and stored non-zeros, the algorithm's declared
parameters and the run lengths the user gave.

* **Work**: a lower bound on the element operations of the run, from the run
  lengths given (``steps``/``max_steps``: every step touches a d-vector and
  at least one record - every record for a full-batch algorithm, one that
  has a ``steps`` parameter and no batch parameter -; ``epochs``/``passes``:
  every pass touches every record).  Refused above :func:`work_limit`
  (:data:`WORK_LIMIT`, about half an hour to a few hours of one core;
  ``DPREG_WORK_LIMIT`` sets another).
* **Memory**: the run's working vectors (O(threads x d)), its trajectory
  checkpoints, its per-step released series (O(steps)) and the JSON record
  of a d-vector model, next to :data:`MEMORY_FRACTION` of the memory
  available now.  The data are already loaded and not counted.
* **Inferred width**: an svmlight file's feature count read off its largest
  index is refused above :data:`INFERRED_FEATURES_LIMIT` unless declared
  (``--features D``): one record with a stray index would otherwise make
  the model, and the record, that wide.
"""
from __future__ import annotations

import os

from .errors import ParameterError

#: element operations (a multiply-add on one coordinate) a run may need; at
#: the kernels' 10^8 - 10^9 per second on one core, 30 minutes to 3 hours
WORK_LIMIT = 1e12
#: share of the memory available now that a run's estimated peak may use
MEMORY_FRACTION = 0.5
#: the widest svmlight feature space accepted without a declared --features
INFERRED_FEATURES_LIMIT = 1 << 20
#: working d-vectors a run holds besides its per-thread partial sums (iterate,
#: gradient estimates, noise, tree nodes, the output choice, evaluation)
WORK_VECTORS = 32
#: trajectory checkpoints kept at most, and the floats kept when every iterate is
#: (:data:`dpreg.trajectory.KEEP_ALL_FLOATS`)
CHECKPOINTS = 21
KEEP_ALL_FLOATS = 10_000_000
#: bytes per step of the released per-step series (a few Python floats in lists)
SERIES_BYTES_PER_STEP = 4 * 32
#: peak bytes per model parameter while the record is built and written
#: (weights and coefficients as Python floats, then as JSON text)
RECORD_BYTES_PER_PARAMETER = 200

STEP_PARAMS = ("steps", "max_steps")
PASS_PARAMS = ("epochs", "passes")


def available_memory() -> int:
    """Bytes of memory available now (MemAvailable on Linux; else physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 33


def work_limit() -> float:
    """:data:`WORK_LIMIT`, or ``DPREG_WORK_LIMIT`` when set to a positive number."""
    raw = os.environ.get("DPREG_WORK_LIMIT")
    if raw:
        try:
            v = float(raw)
            if v > 0:
                return v
        except ValueError:
            pass
        raise ParameterError(f"DPREG_WORK_LIMIT must be a positive number of operations, got {raw!r}")
    return WORK_LIMIT


def _size(b: float) -> str:
    for unit, k in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= k:
            return f"{b / k:.3g} {unit}"
    return f"{b / 1e3:.3g} kB"


def _count(x: float) -> str:
    return f"{x:.3g}" if x >= 1e7 else f"{int(x):,}"


def full_batch(algo_cls) -> bool:
    """Whether every step of ``algo_cls`` reads every record, by its declared
    parameters: a resampling algorithm with a run length in steps and no
    batch-size parameter (dp-gd, dp-trust-region)."""
    names = {s.name for s in getattr(algo_cls, "params", ())}
    return (getattr(algo_cls, "data_access", "") == "resample" and bool(names & set(STEP_PARAMS))
            and not any("batch" in nm for nm in names))


def run_length(params: dict, n: int, algo_cls=None) -> tuple[float, float]:
    """(steps, passes): lower bounds on a run's steps and passes over the
    data from the run lengths given in ``params`` (bound values; None where
    the algorithm derives them), 0 where none is given.  A pass of a
    full-batch algorithm is one of its steps."""
    steps = max([float(params[k]) for k in STEP_PARAMS if params.get(k) is not None] or [0.0])
    passes = max([float(params[k]) for k in PASS_PARAMS if params.get(k) is not None] or [0.0])
    if algo_cls is not None and full_batch(algo_cls):
        passes = max(passes, steps)
    return steps, passes


def estimate(problem, algo_cls, params: dict, *, threads: int = 1) -> dict:
    """Lower-bound estimates of a run of ``algo_cls`` with bound ``params`` on
    ``problem``: ``work`` (element operations), ``memory`` (bytes, beyond
    the data), and the pieces they come from."""
    n, d = int(problem.n), int(problem.d)
    X = problem.X
    width = int(X.shape[1]) if getattr(X, "ndim", 2) == 2 else d
    nnz = getattr(X, "nnz", None)
    per_row = (nnz / max(n, 1)) if nnz is not None else width
    per_record = max(1.0, per_row) * max(1.0, d / max(width, 1))  # a record's gradient: its non-zeros x outputs
    steps, passes = run_length(params, n, algo_cls)
    work = steps * (d + per_record) + passes * n * per_record
    kept = max(CHECKPOINTS * d, min(steps * d, KEEP_ALL_FLOATS))
    memory = 8.0 * d * (WORK_VECTORS + 2 * max(1, int(threads))) + 8.0 * kept \
        + SERIES_BYTES_PER_STEP * steps + RECORD_BYTES_PER_PARAMETER * d
    return {"work": work, "memory": memory, "n": n, "d": d, "steps": steps, "passes": passes,
            "per_record": per_record}


def check_run_size(problem, algo_cls, params: dict, *, threads: int = 1, what: str = "") -> dict:
    """Refuse (ParameterError, one line) a run whose estimated work exceeds
    :func:`work_limit` or whose estimated memory exceeds
    :data:`MEMORY_FRACTION` of the memory available now; return the
    estimate otherwise.  Called after the problem is built (public n and d
    known) and before anything of size d x steps is allocated."""
    est = estimate(problem, algo_cls, params, threads=threads)
    name = getattr(algo_cls, "name", "") or getattr(algo_cls, "__name__", "the algorithm")
    model = f"{_count(est['d'])} parameters{(' (' + what + ')') if what else ''}"
    given = ", ".join(f"{k}={params[k]:g}" if isinstance(params[k], float) else f"{k}={params[k]:,}"
                      for k in (*STEP_PARAMS, *PASS_PARAMS) if params.get(k) is not None)
    limit = work_limit()
    if est["work"] > limit:
        raise ParameterError(
            f"{name} with {given} on n={est['n']:,} records and {model} needs at least "
            f"{est['work']:.2g} operations, more than the limit of {limit:.2g} (hours of computing; "
            f"DPREG_WORK_LIMIT raises it); ask for fewer steps or passes")
    avail = available_memory()
    if est["memory"] > MEMORY_FRACTION * avail:
        raise ParameterError(
            f"{name} with {given + ' and ' if given else ''}a model of {model} on n={est['n']:,} records needs "
            f"at least {_size(est['memory'])} of memory (working vectors, checkpoints, per-step series and the "
            f"record), more than {MEMORY_FRACTION:.0%} of the {_size(avail)} available; use a smaller model"
            + (" or fewer steps" if given else ""))
    return est


def check_inferred_width(d: int, path: str, n: int) -> None:
    """Refuse an svmlight feature count read off the data above
    :data:`INFERRED_FEATURES_LIMIT` (DataError, one line): one stray index
    would make the model that wide.  A declared ``--features`` is never
    refused here."""
    from .errors import DataError

    if d > INFERRED_FEATURES_LIMIT:
        raise DataError(
            f"{path}: its largest feature index makes d = {d:,} features for {n:,} records (read off the data, "
            f"a model of {d:,} weights and a record of about {_size(RECORD_BYTES_PER_PARAMETER / 2 * d)}); "
            f"above {INFERRED_FEATURES_LIMIT:,} the feature count must be declared: --features D")


def check_dense_copy(shape, what: str) -> None:
    """Refuse (ParameterError, one line) a dense copy of sparse records that
    would not fit in :data:`MEMORY_FRACTION` of the memory available now
    (a loss whose kernels read dense rows, e.g. a network, on svmlight data)."""
    n, d = int(shape[0]), int(shape[1])
    need, avail = 8.0 * n * d, available_memory()
    if need > MEMORY_FRACTION * avail:
        raise ParameterError(f"{what} reads dense rows: {n:,} records x {d:,} features need {_size(need)}, more "
                             f"than {MEMORY_FRACTION:.0%} of the {_size(avail)} available; use a linear loss "
                             f"(sparse kernels) or fewer features")
