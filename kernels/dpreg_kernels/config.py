"""Compiler flags, the stale-cache guard and the serial/parallel rule of every kernel, in one place.

``jit_parallel`` and ``jit_serial`` turn one undecorated Python function into the
parallel (``prange`` over row chunks) and serial variants; ``jit_inline`` makes a
helper that only kernels call (no Python or C entry point), ``jit_scalar`` a loss's
small function that the kernels take as a first-class function.  Kernels are
compiled from explicit signatures with ``cache=True``, so a second process loads
them from numba's on-disk cache instead of recompiling.  Only numba's public API
is used: the decorators and their documented options.

numba checks a cached function against its own source file only, while the
kernels link compiled code across this package's modules; :func:`guard_cache`
makes the package's cache stale as a whole when any of its modules changes.

Environment:
  DPREG_FASTMATH=0   disable fastmath (default on: the inner dot products only
                     vectorize with reassociation allowed).
  DPREG_PARALLEL_WORK, DPREG_PARALLEL_AMORTIZE_S: when a kernel runs (and
                     first compiles) its parallel variant; see want_parallel
                     and PARALLEL_AMORTIZE_S.
"""
from __future__ import annotations

import functools
import hashlib
import os
import types

import numba

FASTMATH: bool = os.environ.get("DPREG_FASTMATH", "1") != "0"
#: LLVM fast-math flags used when FASTMATH is on: all of "fast" except nnan and
#: ninf, so the clipping guards against overflowed or NaN per-record norms (see
#: linear_model) are not optimized away.
_FM = {"nsz", "arcp", "contract", "afn", "reassoc"} if FASTMATH else False
CACHE: bool = True

#: Rows are split into at most this many fixed chunks.  The split does not depend
#: on the thread count, and partial sums are combined serially in chunk order, so
#: a kernel returns bit-identical results for any NUMBA_NUM_THREADS.
MAX_CHUNKS: int = 64
#: Chunks are never smaller than this many rows (small batches stay in one chunk
#: per few threads instead of paying scheduling overhead).
MIN_CHUNK_ROWS: int = 256
#: Rows processed together in the two hot kernels (one pass over BLOCK rows for
#: the dot products, one for the accumulation).  The code is written for 4.
BLOCK: int = 4


#: Parallelism comes from explicit ``prange`` loops only: numba's automatic
#: conversions (np.zeros, array expressions, reductions, fusion) would turn every
#: allocation into one more parallel region to compile (measured: they cost
#: seconds of compile time per kernel and gain nothing here).
PARALLEL = {"prange": True, "comprehension": False, "reduction": False, "inplace_binop": False,
            "setitem": False, "numpy": False, "stencil": False, "fusion": False}

#: ``numba.njit`` itself: every compiled function of this package is made with it
#: (through the decorators below, or directly with ``cache=CACHE``).
njit = numba.njit


def jit_parallel(signature):
    """Decorator: eager, cached, parallel njit with the project's flags."""
    return njit(signature, parallel=PARALLEL, fastmath=_FM, cache=CACHE, nogil=True)


def jit_serial(signature):
    """Decorator: eager, cached, serial njit with the project's flags.

    The serial variant is compiled from a copy of the function renamed
    ``<name>__serial``: numba's on-disk cache is keyed by the function's
    qualified name, line and signature but not by the ``parallel`` flag, so
    without the rename the serial and parallel variants of one function would
    load each other's machine code from the cache."""

    def deco(func):
        return njit(signature, parallel=False, fastmath=_FM, cache=CACHE, nogil=True)(renamed(func, "__serial"))

    return deco


def renamed(func, suffix: str, globals_: dict | None = None):
    """A copy of ``func`` named ``<name><suffix>`` (its qualified name too, so
    numba's on-disk cache keeps it apart from ``func``), with ``globals_`` as
    its globals when given (a compiled function that links other compiled
    functions through module globals binds them there)."""
    clone = types.FunctionType(func.__code__, func.__globals__ if globals_ is None else globals_,
                               func.__name__ + suffix, func.__defaults__, func.__closure__)
    clone.__qualname__ = func.__qualname__ + suffix
    clone.__module__ = func.__module__
    clone.__doc__ = func.__doc__
    return clone


def jit_scalar(signature):
    """Decorator for a loss's compiled helpers, which the kernels call or take
    as first-class function arguments (scalar derivatives,
    :data:`dpreg_kernels.linear_model.SCALAR_SIG`; block derivatives,
    ``BLOCK_SIG``; psi gradients, :data:`dpreg_kernels.sgd.PSI_SIG`): cached,
    eager, inlinable."""
    # error_model="numpy": a division by zero gives inf/nan (which the kernels
    # clip away) instead of an exception that a first-class function call
    # cannot propagate
    return njit(signature, fastmath=_FM, cache=CACHE, error_model="numpy")


def jit_inline(func):
    """Decorator for helpers called only from kernels: compiled with the
    caller's types, cached, and callable from compiled code only - numba's
    ``no_cpython_wrapper`` and ``no_cfunc_wrapper`` options: no Python or C
    entry point is generated for them; LLVM inlines the small ones into their
    callers.  Numba-IR inlining (``inline="always"``) was measured slower to
    compile for no run-time gain."""
    return njit(fastmath=_FM, cache=CACHE, no_cpython_wrapper=True, no_cfunc_wrapper=True)(func)


# ----------------------------------------------------------------- the stale-cache guard
_HERE = os.path.dirname(os.path.abspath(__file__))
#: name of the stamp file beside the package's cache files: the hash of the sources
#: the cache was compiled from
STAMP_NAME = "dpreg_kernels.source-hash"
#: name of the file beside it that lists the kernels whose parallel variant was
#: compiled (and so saved in the cache) since the stamp was written
PARALLEL_NAME = "dpreg_kernels.parallel"


def package_modules() -> list[str]:
    """The module names (file stems) of this package's Python sources, sorted."""
    return sorted(name[:-3] for name in os.listdir(_HERE) if name.endswith(".py"))


@functools.cache
def package_source_hash() -> str:
    """sha256 (hex) over the sources of every module of this package (name and content)."""
    h = hashlib.sha256()
    for stem in package_modules():
        with open(os.path.join(_HERE, stem + ".py"), "rb") as f:
            h.update(stem.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def _cache_probe():
    """A function of this package's directory whose dispatcher only asks numba where
    it would cache this package's functions (never compiled)."""


@functools.cache
def cache_dir() -> str | None:
    """The directory where numba caches this package's compiled functions: the one
    numba's cache picks for a function of this package's directory (its
    ``__pycache__``, ``$NUMBA_CACHE_DIR``'s directory for it, or numba's user-wide
    cache when the package is read-only) - asked once per process through a cached
    dispatcher that is never compiled (``stats.cache_path``).  None when numba gives
    no path."""
    try:
        path = njit(cache=True)(_cache_probe).stats.cache_path
    except (AttributeError, OSError, RuntimeError):  # no cache for this directory: nothing to guard
        return None
    return path if isinstance(path, str) and path else None


def _is_package_cache_file(name: str, modules: list[str]) -> bool:
    """Whether ``name`` is one of numba's cache files (index ``.nbi``, data
    ``.nbc``) of a function of this package's modules."""
    return name.endswith((".nbi", ".nbc")) and name.split(".", 1)[0] in modules


def guard_cache(directory: str | None = None) -> list[str]:
    """Make numba's on-disk cache of this package stale when *any* of its modules
    changes, not only the compiled function's own file.

    numba checks a cached function against its own source file alone, but the
    kernels link compiled code from other modules: dp-sgd's fused steps (``sgd``)
    and dp-spider's (``spider``) call the clipped sums of ``linear_model`` and
    ``sparse``, the CSR kernels ``linear_model``'s clip factors, the losses' block
    functions ``vmath``'s ``exp``; after an edit of ``linear_model.py`` alone the
    fused steps would load from the cache with the old clipping code in them.  So
    a stamp file (:data:`STAMP_NAME`) beside the cache records
    :func:`package_source_hash`; when it differs (or is missing), this removes the
    package's cache files from ``directory`` (default :func:`cache_dir`) - those
    of its modules, and the list of cached parallel variants - and writes the new
    stamp.  Runs when this module is imported, before any kernel is compiled or
    loaded.  Returns the names of the files removed; a directory that cannot be
    read or written is left alone (numba then compiles as usual)."""
    directory = directory if directory is not None else cache_dir()
    if directory is None:
        return []
    stamp = os.path.join(directory, STAMP_NAME)
    current = package_source_hash()
    try:
        with open(stamp) as f:
            if f.read().strip() == current:
                return []
    except OSError:
        pass
    removed = []
    try:
        os.makedirs(directory, exist_ok=True)
        modules = package_modules()
        for name in sorted(os.listdir(directory)):
            if _is_package_cache_file(name, modules) or name == PARALLEL_NAME:
                try:
                    os.remove(os.path.join(directory, name))
                    removed.append(name)
                except FileNotFoundError:  # removed by a concurrent process
                    pass
        tmp = f"{stamp}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(current + "\n")
        os.replace(tmp, stamp)
    except OSError:  # unreadable or read-only: numba's own checks still apply
        pass
    _parallel_cached.cache_clear()
    return removed


# ----------------------------------------------------------------- serial or parallel
#: A kernel runs its parallel variant only when its work (rows x d, or rows x
#: d^2 for the Hessian) reaches this many elements (about 50 us of serial
#: work) and numba has more than one thread (``dpreg run --threads``); below,
#: the serial variant: a prange launch waits for the OpenMP workers (0.04 ms on
#: an idle machine, 1-2 ms on a busy one, against ~10 us of work for a 256 x 22
#: batch).  ``python benchmarks/bench_sparse.py``, first table, gives parallel /
#: serial time for growing batches (O1 gather path at d = 22): about 1.2 at
#: 5,632 elements, 0.7 at 22,528, 0.45 at 360,448 on an idle 2-core machine;
#: 2^16 leaves a margin above the crossover.  ``DPREG_PARALLEL_WORK``
#: overrides it (0: always parallel).  On a machine that other work keeps busy,
#: ``--threads 1`` runs every kernel serial.
PARALLEL_WORK: int = int(os.environ.get("DPREG_PARALLEL_WORK", str(1 << 16)))

#: A kernel whose parallel variant is neither compiled in this process nor in
#: numba's on-disk cache runs its serial variant, even where
#: :func:`want_parallel` says parallel, until those serial calls have taken
#: this many CPU seconds in the process: compiling a parallel variant costs about
#: this much CPU (the parallel clipped sum, after the serial one: about 3.5 s on
#: the 2-vCPU machine of docs/benchmarks.md), more than a short run's whole kernel time, so it is bought only
#: once the work has shown it pays (the ski-rental rule: rent until the rent paid
#: equals the price).  Serial and parallel variants give bit-identical results,
#: so the switch never changes a run.  ``DPREG_PARALLEL_AMORTIZE_S=0``: compile it
#: as soon as it is wanted.
PARALLEL_AMORTIZE_S: float = float(os.environ.get("DPREG_PARALLEL_AMORTIZE_S", "3.0"))


def want_parallel(work: int) -> bool:
    """Whether a kernel of ``work`` elements should run its parallel variant:
    work >= :data:`PARALLEL_WORK` and numba has more than one thread.  Serial
    and parallel variants give bit-identical results (fixed chunking), so the
    choice never changes a run."""
    return work >= PARALLEL_WORK and numba.get_num_threads() >= 2


@functools.cache
def _parallel_cached() -> frozenset:
    """The kernels listed in the cache directory's :data:`PARALLEL_NAME` file."""
    directory = cache_dir()
    if directory is None:
        return frozenset()
    try:
        with open(os.path.join(directory, PARALLEL_NAME)) as f:
            return frozenset(line.strip() for line in f if line.strip())
    except OSError:
        return frozenset()


def parallel_variant_cached(name: str) -> bool:
    """Whether the parallel variant of the kernel named ``name`` was compiled with
    the current sources and saved in numba's on-disk cache (so using it costs a
    load, not a compile): it is listed in the cache directory's
    :data:`PARALLEL_NAME` file, which :func:`mark_parallel_cached` appends to and
    :func:`guard_cache` clears with the cache.  Read once per process."""
    return name in _parallel_cached()


def mark_parallel_cached(name: str) -> None:
    """Record that the parallel variant of kernel ``name`` is now in numba's
    on-disk cache (see :func:`parallel_variant_cached`); a cache directory that
    cannot be written is left alone."""
    if name in _parallel_cached():
        return
    directory = cache_dir()
    if directory is None:
        return
    try:
        with open(os.path.join(directory, PARALLEL_NAME), "a") as f:
            f.write(name + "\n")
    except OSError:
        return
    _parallel_cached.cache_clear()


if CACHE:
    guard_cache()
