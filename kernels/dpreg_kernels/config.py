"""Compiler flags for every kernel, in one place.

``jit_parallel`` and ``jit_serial`` turn one undecorated Python function into the
parallel (``prange`` over row chunks) and serial variants.  Kernels are compiled
from explicit signatures with ``cache=True`` so a second process loads them
from numba's on-disk cache instead of recompiling.

Environment:
  DPREG_FASTMATH=0   disable fastmath (default on: the inner dot products only
                     vectorize with reassociation allowed).
  DPREG_PARALLEL_WORK, DPREG_PARALLEL_AMORTIZE_S: when a kernel runs (and
                     first compiles) its parallel variant; see want_parallel
                     and PARALLEL_AMORTIZE_S.
  DPREG_KERNEL_OPT   LLVM optimisation level of the kernels (default 1; see
                     KERNEL_OPT and kernel_compiler).
"""
from __future__ import annotations

import functools
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


#: LLVM optimisation level of the kernels' IR passes (numba's default, NUMBA_OPT, is 3; the
#: machine-code generator keeps numba's level).  Level 1 keeps the loop vectoriser and the
#: inliner, and the kernels run as fast as at 3 (``benchmarks/kernel_shapes.py``, one thread:
#: every shape and case within run-to-run noise), while LLVM's part of the first run's compile
#: is smaller (docs/benchmarks.md, "Tenth session").  ``DPREG_KERNEL_OPT=3`` restores numba's
#: level (it does not change code already in numba's on-disk cache: clear the cache after it).
KERNEL_OPT: int = int(os.environ.get("DPREG_KERNEL_OPT", "1"))
if KERNEL_OPT not in (0, 1, 2, 3):
    raise ValueError(f"DPREG_KERNEL_OPT must be 0, 1, 2 or 3, not {KERNEL_OPT}")

@functools.cache
def helper_library_class():
    """numba code library class for the helpers (:func:`jit_inline`: no Python or C entry point).

    Such a helper's code runs only inside its callers: numba links the helper's IR into each
    caller's module (``_get_module_for_linking``) and the caller's module passes optimise it
    there, with the caller's own code, before the caller's machine code is made.  numba's own
    library also optimises the helper's module with its callees linked in (the module passes)
    and makes machine code of it, which no caller ever runs: measured on the serial clipped
    sum, 0.89-0.99 s and 0.45-0.63 s of its 4.1-4.7 s compile (``benchmarks/compile_parts.py``,
    docs/benchmarks.md, "Sixteenth session"; it now compiles in 2.7-2.9 s).  This library keeps the function passes (cheap;
    they shrink what callers link) and skips both:

    * no module passes: callers link the helper's function-optimised IR and optimise it once,
      in their own module (the kernels ran within the machine's noise of the doubly
      optimised code, ``benchmarks/kernel_shapes.py``);
    * the execution engine gets a stub module holding only the environment globals of the
      helper's module: numba writes each function's environment pointer into that global
      through the engine (``codegen.set_env``), so it must exist there; the stub's
      (near-empty) object code is what numba's on-disk cache stores beside the linking
      bitcode, and a helper loaded from that cache is linked into new callers as before.

    Made on first use (it subclasses numba's JIT library class, and uses only names that
    numba 0.59 to 0.68 share); None where numba's library lacks them (numba's own library
    is then used)."""
    import llvmlite.binding as ll
    from numba.core.codegen import JITCodeLibrary

    needed = ("_optimize_final_module", "_finalize_final_module", "_finalize_dynamic_globals",
              "_verify_declare_only_symbols", "_get_module_for_linking")
    if not all(callable(getattr(JITCodeLibrary, name, None)) for name in needed):
        return None

    class HelperLibrary(JITCodeLibrary):
        """A :func:`jit_inline` helper's library: IR for linking, no machine code of its own."""

        def _optimize_final_module(self):
            """Nothing: every caller optimises the helper's IR in its own module."""

        def _finalize_final_module(self):
            """numba's finalisation, given a stub of the environment globals in place of the
            helper's module: callers still link the module (``_get_module_for_linking``)."""
            full = self._final_module
            self._finalize_dynamic_globals()  # of the helper's module: numba's cachability check reads them
            self._verify_declare_only_symbols()
            env = [str(gv) for gv in full.global_variables if gv.name.startswith("_ZN08NumbaEnv")]
            stub = ll.parse_assembly("\n".join(env) + "\n")
            stub.name = full.name + ".env"
            stub.triple = full.triple
            stub.data_layout = full.data_layout
            self._final_module = stub
            try:
                super()._finalize_final_module()  # the engine gets the stub; numba's hooks find us
            finally:
                self._final_module = full

    return HelperLibrary


#: names numba gives the code libraries of a ``prange`` loop's parts: the loop body compiled as a
#: gufunc kernel, its gufunc wrapper and the parallel-for wrapper (numba.parfors.parfor_lowering,
#: numba.np.ufunc.wrappers, numba.np.ufunc.parallel)
_PARFOR_PART_LIBRARIES = ("__numba_parfor_gufunc_", "<numba.np.ufunc.wrappers._GufuncWrapper ",
                          "parallelgufuncwrapper")


def _parfor_parts_library(codegen, helper):
    """``codegen.create_library`` while a parallel kernel is lowered: the libraries of its
    ``prange`` loop's parts (:data:`_PARFOR_PART_LIBRARIES`) are ``helper`` libraries, every
    other library numba's own.  numba links each part's IR into the next and the last into
    the kernel (``add_linking_library``), and calls none of their machine code: the kernel's
    module holds all of it.  (numba also makes a Python function object for the gufunc kernel and
    files it in its registry of compiled functions; nothing calls it, and it now has no machine
    code behind it.)  Made on the compiler lock, which numba holds while it lowers."""
    own = codegen.create_library

    def create_library(name, **kwargs):
        if isinstance(name, str) and name.startswith(_PARFOR_PART_LIBRARIES):
            return helper(codegen, name, **kwargs)
        return own(name, **kwargs)

    return create_library


@functools.cache
def kernel_compiler():
    """numba compiler pipeline for every compiled function of this package: numba's own
    nopython pipeline whose lowering pass

    * runs numba's LLVM passes at :data:`KERNEL_OPT` (numba reads its optimisation level from
      ``config.OPT`` when it builds each pass manager; the pass sets it for its own run only,
      under numba's compiler lock, and restores it);
    * gives a helper without entry points (:func:`jit_inline`) a
      :func:`helper_library_class` library: IR for its callers, no module passes or machine
      code of its own;
    * in a parallel kernel, gives the parts numba compiles a ``prange`` loop into such
      libraries too (:func:`_parfor_parts_library`).

    Built on first use."""
    from numba.core import config as nconfig
    from numba.core.compiler import CompilerBase, DefaultPassBuilder
    from numba.core.compiler_machinery import register_pass
    from numba.core.typed_passes import NativeLowering, NativeParforLowering

    def at_kernel_opt(base):
        """``base`` (one of numba's lowering passes), run at KERNEL_OPT, with a helper's library
        for a helper and for the parts a ``prange`` loop is compiled into."""
        def run_pass(self, state):
            helper = helper_library_class()
            codegen = state.targetctx.codegen()
            if (helper is not None and state.library is None and state.flags.no_cpython_wrapper
                    and state.flags.no_cfunc_wrapper):
                # numba's lowering makes the library only when none is given (as here)
                state.library = helper(codegen, state.func_id.func_qualname)
                state.library.enable_object_caching()
            parfor_parts = helper is not None and base is NativeParforLowering
            if parfor_parts:
                before = codegen.__dict__.get("create_library")  # None: numba's own method
                codegen.create_library = _parfor_parts_library(codegen, helper)
            old = nconfig.OPT
            nconfig.OPT = nconfig._OptLevel(str(KERNEL_OPT))  # noqa: SLF001 - numba's level type
            try:
                return base.run_pass(self, state)
            finally:
                nconfig.OPT = old
                if parfor_parts:
                    if before is None:
                        del codegen.create_library
                    else:
                        codegen.create_library = before

        cls = type(f"Kernel{base.__name__}", (base,), {"_name": f"dpreg_{base._name}", "run_pass": run_pass})
        return register_pass(mutates_CFG=True, analysis_only=False)(cls)

    lowering = {base: at_kernel_opt(base) for base in (NativeLowering, NativeParforLowering)}

    class KernelCompiler(CompilerBase):
        def define_pipelines(self):
            if self.state.flags.force_pyobject:  # never for the kernels (nopython), kept as numba's
                return [DefaultPassBuilder.define_objectmode_pipeline(self.state)]
            pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
            pm.passes = [(lowering.get(p, p), d) for p, d in pm.passes]
            return [pm]

    return KernelCompiler


def njit(*args, **kwargs):
    """``numba.njit`` with :func:`kernel_compiler`: every compiled function of this package is
    made with it."""
    kwargs["pipeline_class"] = kernel_compiler()
    return numba.njit(*args, **kwargs)


@functools.cache
def _package_source_hash() -> bytes:
    """sha256 over the sources of every module of this package (name and content);
    read once per process, when numba first asks for a cache stamp (not at import)."""
    import hashlib

    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.digest()


def _stamp_package_caches() -> None:
    """Make numba's on-disk cache of every function of this package stale when *any*
    module of the package changes, not only the function's own file.

    numba checks a cached function against its own source file alone, but the kernels
    link compiled code from other modules: dp-sgd's fused steps (``sgd``) call the
    clipped sum of ``linear_model`` and ``sparse``, the CSR kernels ``linear_model``'s clip
    factors, the losses' block functions ``vmath``'s ``exp``.  Measured before this: after an
    edit of ``linear_model.py`` the clipped sum recompiled while the fused steps loaded
    from the cache, with the old clipping code in them.  A locator placed before numba's
    own ones (numba's ``CacheImpl._locator_classes``) takes this package's functions,
    delegates to the locator numba would have used, and stamps the cache entries with
    that locator's stamp *and* the hash of the package's sources
    (:func:`_package_source_hash`)."""
    from numba.core import caching

    here = os.path.dirname(os.path.abspath(__file__))

    class PackageLocator(caching._CacheLocator):  # noqa: SLF001 - numba's locator interface
        def __init__(self, inner):
            self._inner = inner
            # numba names the source file from here when it warns that a function cannot be
            # cached (check_cachable); without it that warning was an AttributeError
            self._py_file = getattr(inner, "_py_file", None)

        def ensure_cache_path(self):
            self._inner.ensure_cache_path()

        def get_cache_path(self):
            return self._inner.get_cache_path()

        def get_source_stamp(self):
            return self._inner.get_source_stamp(), _package_source_hash()

        def get_disambiguator(self):
            return self._inner.get_disambiguator()

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.dirname(os.path.abspath(py_file)) != here:
                return None
            for other in caching.CacheImpl._locator_classes:  # noqa: SLF001
                if other is not cls:
                    inner = other.from_function(py_func, py_file)
                    if inner is not None:
                        return cls(inner)
            return None

    classes = caching.CacheImpl._locator_classes  # noqa: SLF001
    if not any(getattr(c, "__qualname__", "").endswith("PackageLocator") and c.__module__ == __name__
               for c in classes):
        classes.insert(0, PackageLocator)


if CACHE:
    _stamp_package_caches()


def jit_parallel(signature):
    """Decorator: eager, cached, parallel njit with the project's flags."""
    return njit(signature, parallel=PARALLEL, fastmath=_FM, cache=CACHE, nogil=True)


def parallel_variant_cached(func, signature) -> bool:
    """Whether numba's on-disk cache holds the parallel variant of ``func`` at
    ``signature`` (so using it costs a load, not a compile).  Probes the cache
    through a lazy dispatcher with the parallel variant's flags; any failure of
    numba's internals answers False (the caller then treats the variant as
    uncompiled)."""
    try:
        probe = njit(parallel=PARALLEL, fastmath=_FM, cache=CACHE, nogil=True)(func)
        return probe._cache.load_overload(signature, probe.targetctx) is not None  # noqa: SLF001
    except Exception:  # noqa: BLE001 - a probe, never an error
        return False


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
    """Decorator for helpers called only from kernels (compiled with the
    caller's types, cached; LLVM inlines the small ones; callable from compiled code only:
    no Python or C entry point is generated for them, and no machine code or module passes of
    their own: :func:`helper_library_class`).  Numba-IR inlining
    (``inline="always"``) was measured slower to compile for no run-time gain."""
    return njit(fastmath=_FM, cache=CACHE, no_cpython_wrapper=True, no_cfunc_wrapper=True)(func)


#: A kernel runs its parallel variant only when its work (rows x d, or rows x
#: d^2 for the Hessian) reaches this many elements (about 50 us of serial
#: work); below, the serial variant: a prange launch waits for the OpenMP
#: workers (0.04 ms on an idle machine, 1-2 ms on a busy one, against ~10 us of
#: work for a 256 x 22 batch).  Measured on an idle 2-core machine with the
#: staged kernels (``python benchmarks/bench_sparse.py``, first table, O1 gather
#: path at d = 22): parallel / serial time 1.24 at 5,632 elements, 0.72 at
#: 22,528, 0.45 at 360,448; 2^16 leaves a margin above the crossover (it was 2^20
#: for the former kernels, whose crossover was higher).  On a busy machine
#: :func:`want_parallel` says serial whatever the work.  ``DPREG_PARALLEL_WORK``
#: overrides it (0: always parallel when the machine has idle cores).
PARALLEL_WORK: int = int(os.environ.get("DPREG_PARALLEL_WORK", str(1 << 16)))

#: A kernel whose parallel variant is neither compiled in this process nor in
#: numba's on-disk cache runs its serial variant, even where
#: :func:`want_parallel` says parallel, until those serial calls have taken
#: this many CPU seconds in the process: compiling a parallel variant costs about
#: this much CPU (the parallel clipped sum, after the serial one: 1.1-1.2 s on the
#: 2-vCPU Zen 4 machine since the sixteenth session, 2.8-3.0 s before it;
#: ``python benchmarks/compile_parts.py --parallel``, docs/benchmarks.md), more than a
#: short run's whole kernel time, so it is bought only once the work has shown it
#: pays (the ski-rental rule: rent until the rent paid equals the price; it was 3 s
#: while the compile cost that).  Serial and parallel variants give
#: bit-identical results, so the switch never changes a run.
#: ``DPREG_PARALLEL_AMORTIZE_S=0``: compile it as soon as it is wanted.
PARALLEL_AMORTIZE_S: float = float(os.environ.get("DPREG_PARALLEL_AMORTIZE_S", "1.5"))

_load = [-1.0, 0.0]  # (time of the last look, whether the machine had idle cores)
#: seconds a look at the machine's load is reused
LOAD_LOOK_S: float = 0.25
#: a window of the machine's CPU time shorter than this is too coarse to read
#: (``/proc/stat`` counts in clock ticks, 10 ms on Linux): the last reading
#: of the others' load is kept
MIN_WINDOW_S: float = 0.1
#: a window longer than this also takes the others' runnable tasks at the
#: instant of the look (see :func:`_busy`)
INSTANT_WINDOW_S: float = 1.0


def _cpu_times():
    """``(wall seconds, CPU seconds the whole machine has spent busy, CPU
    seconds of this process)``, now: the machine's from ``/proc/stat``'s
    first line (user, nice, system, irq, softirq and steal ticks: a vCPU the
    hypervisor lends elsewhere is as unavailable as a busy one), the
    process's from ``time.process_time`` (all its threads).  Raises OSError
    where there is no ``/proc/stat``."""
    import time

    with open("/proc/stat") as f:
        v = f.readline().split()
    if not v or v[0] != "cpu":
        raise OSError("no cpu line in /proc/stat")
    t = [int(x) for x in v[1:9]]
    busy = t[0] + t[1] + t[2] + t[5] + t[6] + t[7]
    return time.monotonic(), busy / _CLK_TCK, time.process_time()


def _own_running() -> int:
    """How many of this process's threads are running or runnable right now
    (state R in ``/proc/self/task/*/stat``; at least 1: the caller)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                s = f.read()
        except OSError:  # the thread has just ended
            continue
        if s[s.rindex(")") + 2:s.rindex(")") + 3] == "R":
            n += 1
    return max(n, 1)


try:
    _CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):
    _CLK_TCK = 100.0
#: the last sample of :func:`_cpu_times` and :func:`_busy`'s reading then
#: (first sample: when this module is imported, so the first look has a
#: window - the data loading before a run's first kernel)
_window: list = [None, 0.0]
try:
    _window[0] = _cpu_times()
except (OSError, ValueError):
    pass


def _busy() -> float | None:
    """How many CPUs other work keeps busy - other processes only, never this
    one (None where there is no ``/proc``):

    * the others' mean load since the previous look: the CPU time the whole
      machine spent busy (``/proc/stat``) minus this process's own
      (``time.process_time``, all its threads), over the wall time (a look
      within :data:`MIN_WINDOW_S` of the last one gets the last reading);
    * after a long window (over :data:`INSTANT_WINDOW_S`, or none yet), at
      least the others' runnable tasks right now (``/proc/loadavg``'s fourth
      field minus this process's running threads): a load that started late
      in a long window hardly moves its mean.  In a run's frequent looks the
      mean alone decides, so a task that happens to be runnable at the
      instant of a look does not turn kernels serial.

    The 1-minute load average, used before, counts this process too: on an
    idle 2-core machine a run's own parallel kernels raised it to 1.5 within
    100 s, and from then on whole 10-second windows ran most kernel calls
    serial (14 of 136 calls parallel in one) with the machine otherwise idle
    (``benchmarks/load_check.py --rule loadavg``, fifteenth session)."""
    try:
        cur = _cpu_times()
        prev = _window[0]
        long_window = prev is None or cur[0] - prev[0] > INSTANT_WINDOW_S
        if long_window:
            with open("/proc/loadavg") as f:
                fields = f.read().split()
            now = max(0.0, float(int(fields[3].split("/")[0]) - _own_running()))
    except (OSError, ValueError, IndexError):
        return None
    if prev is None or cur[0] - prev[0] >= MIN_WINDOW_S:
        mean = 0.0 if prev is None else max(0.0, ((cur[1] - prev[1]) - (cur[2] - prev[2])) / (cur[0] - prev[0]))
        _window[0], _window[1] = cur, max(now, mean) if long_window else mean
    return _window[1]


def machine_has_idle_cores() -> bool:
    """Whether other work leaves a parallel kernel's threads their CPUs: the
    others' load (:func:`_busy`) below the CPU count minus the threads a
    parallel kernel runs (numba's thread count, at most the CPU count) plus
    one half - on 2 CPUs and 2 threads, below half a CPU.  A parallel kernel
    waits at its end for its slowest thread: with one busy process beside it
    on 2 CPUs, dp-spider's race run took 220 ms with the parallel kernels
    and 122 ms with the serial ones (idle: 63 and 121 ms;
    ``benchmarks/load_check.py --compare 1``, fifteenth session).  Without
    ``/proc`` (not Linux) the former rule stands in: the 1-minute load
    average, which counts this process too, below the CPU count minus one
    half; True where the platform gives no load information at all.  Not cached:
    :func:`want_parallel` keeps its own look for :data:`LOAD_LOOK_S`
    seconds."""
    cpus = os.cpu_count() or 1
    others = _busy()
    if others is not None:
        return others < cpus - min(numba.get_num_threads(), cpus) + 0.5
    try:  # no /proc (not Linux): the 1-minute load average, this process included, as before
        return os.getloadavg()[0] < cpus - 0.5
    except (OSError, AttributeError):  # no load information at all (Windows)
        return True


def want_parallel(work: int) -> bool:
    """Whether a kernel of ``work`` elements should run its parallel variant:
    work >= :data:`PARALLEL_WORK`, numba has more than one thread, and the
    machine is not oversubscribed (:func:`machine_has_idle_cores`, looked up
    at most every :data:`LOAD_LOOK_S` seconds).  On a busy
    machine a parallel kernel's threads wait for CPUs that other processes
    hold: measured 1.5-3x slower than the serial variant at every size.
    Serial and parallel variants give bit-identical results (fixed chunking),
    so the choice never changes a run."""
    if work < PARALLEL_WORK or numba.get_num_threads() < 2:
        return False
    import time

    now = time.monotonic()
    if now - _load[0] > LOAD_LOOK_S:
        _load[0], _load[1] = now, float(machine_has_idle_cores())
    return bool(_load[1])
