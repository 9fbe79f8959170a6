"""The kernels' compiler pipeline (dpreg_kernels.config.kernel_compiler): LLVM's
passes run at KERNEL_OPT for the kernels' own lowering only, numba's level is
restored afterwards (also when lowering fails), every kernel is made with it, and
a helper without entry points gets IR for its callers but no machine code of its
own, also when it comes from numba's on-disk cache."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from numba.core import config as nconfig
from numba.core.extending import intrinsic

from dpreg_kernels import config


def _probe(seen, fail=False):
    """An intrinsic that records numba's optimisation level while its caller is lowered."""

    @intrinsic
    def level(typingctx, x):
        def codegen(context, builder, signature, args):
            seen.append(int(nconfig.OPT))
            if fail:
                raise RuntimeError("lowering failed on purpose")
            return args[0]

        return numba.types.float64(numba.types.float64), codegen

    return level


def test_lowering_runs_at_kernel_opt_and_restores_numbas_level():
    seen = []
    level = _probe(seen)
    before = int(nconfig.OPT)

    def f(x):
        return level(x) + 1.0

    kernel = config.njit(cache=False)(f)
    plain = numba.njit(cache=False)(f)
    assert kernel(2.0) == plain(2.0) == 3.0
    assert seen == [config.KERNEL_OPT, before]
    assert int(nconfig.OPT) == before


def test_numbas_level_is_restored_when_lowering_fails():
    seen = []
    level = _probe(seen, fail=True)
    before = int(nconfig.OPT)

    @config.njit(cache=False)
    def f(x):
        return level(x)

    with pytest.raises(Exception, match="lowering failed on purpose"):
        f(1.0)
    assert seen == [config.KERNEL_OPT]
    assert int(nconfig.OPT) == before


def test_parallel_lowering_runs_at_kernel_opt():
    seen = []
    level = _probe(seen)

    @config.jit_parallel("float64(float64[::1])")
    def f(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            s += level(a[i])
        return s

    assert f(np.arange(4.0)) == 6.0
    assert seen and set(seen) == {config.KERNEL_OPT}


def _pipeline(dispatcher):
    """The compiler pipeline class a numba dispatcher was made with (None: numba's default)."""
    cls = dispatcher._compiler.pipeline_class  # noqa: SLF001 - numba keeps it there
    from numba.core.compiler import Compiler

    return None if cls is Compiler else cls


def test_every_kernel_is_made_with_the_kernel_compiler():
    import dpreg_kernels.linear_model as lm
    import dpreg_kernels.sparse as sp

    pipeline = config.kernel_compiler()
    kernels = [k for mod in (lm, sp) for k in vars(mod).values() if isinstance(k, lm.Kernel)]
    assert len(kernels) >= 8
    for k in kernels:
        assert _pipeline(k.serial) is pipeline, k.py_func.__name__
    helpers = [lm._chunk, lm._margins, lm._stage_finish, lm._reduce_parts, sp._csr_chunk]
    for h in helpers:
        assert _pipeline(h) is pipeline
        assert h.targetoptions["no_cpython_wrapper"]  # compiled-code callees only: no Python entry point


def test_the_package_cache_locator_names_the_source_file():
    """numba's cache locator for the kernels' package keeps the source file's name,
    which numba reads when it warns that a function cannot be cached (without it
    the warning was an AttributeError that stopped the compile)."""
    from numba.core import caching

    from dpreg_kernels import linear_model

    if not config.CACHE:
        return
    cls = next(c for c in caching.CacheImpl._locator_classes if c.__qualname__.endswith("PackageLocator"))
    py_func = linear_model._row_sqnorms
    loc = cls.from_function(py_func, linear_model.__file__)
    assert loc is not None and loc._py_file == linear_model.__file__
    assert cls.from_function(test_the_package_cache_locator_names_the_source_file, __file__) is None  # not ours


def _helpers():
    """Two chained helpers (one raises) and a kernel that calls them, compiled without the cache."""

    @config.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)
    def inner(a, i):
        if a[i] < 0.0:
            raise ValueError("negative entry")
        return a[i] * a[i] + 1.0

    @config.njit(cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)
    def outer(a):
        s = 0.0
        for i in range(a.shape[0]):
            s += inner(a, i) / (i + 1.0)
        return s

    @config.njit(cache=False)
    def kernel(a):
        return outer(a) + outer(a[::-1].copy())

    return inner, outer, kernel


def test_a_helper_is_linked_into_its_callers_and_has_no_machine_code_of_its_own():
    inner, outer, kernel = _helpers()
    a = np.linspace(0.0, 2.0, 37)

    def ref(v):
        return sum((x * x + 1.0) / (i + 1.0) for i, x in enumerate(v))

    assert kernel(a) == pytest.approx(ref(a) + ref(a[::-1]), rel=1e-12)
    with pytest.raises(ValueError, match="negative entry"):  # a helper's exception reaches Python
        kernel(a - 1.0)
    helper_lib = config.helper_library_class()
    for h in (inner, outer):
        (cres,) = h.overloads.values()
        assert isinstance(cres.library, helper_lib)
        engine = cres.library._codegen._engine  # noqa: SLF001
        assert not engine.is_symbol_defined(cres.fndesc.mangled_name)  # no machine code of its own
        assert cres.library._get_module_for_linking().get_function(cres.fndesc.mangled_name)  # IR to link
        assert not any(r.name.startswith("Module passes") for r in cres.library.recorded_timings)
    (cres,) = kernel.overloads.values()
    assert not isinstance(cres.library, helper_lib)  # a kernel with an entry point keeps numba's library
    assert cres.library._codegen._engine.is_symbol_defined(cres.fndesc.mangled_name)  # noqa: SLF001


_CACHED = """
import numpy as np
from dpreg_kernels import config

@config.jit_inline
def helper(a, i):
    return a[i] * 2.0 + 1.0

@config.njit(cache=True)
def first(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += helper(a, i)
    return s

@config.njit(cache=True)
def second(a):
    s = 0.0
    for i in range(a.shape[0]):
        s -= helper(a, i) * i
    return s
"""


def test_a_helper_from_numbas_cache_links_into_a_new_caller(tmp_path):
    """A helper compiled and cached in one process, loaded from the cache in the next and
    linked into a caller that process compiles anew, gives the right result."""
    (tmp_path / "cached_helper.py").write_text(_CACHED)
    run = textwrap.dedent("""
        import sys, numpy as np, cached_helper as m
        a = np.arange(5.0)
        f = getattr(m, sys.argv[1])
        print(f(a), m.helper.stats.cache_hits.total() if hasattr(m.helper.stats.cache_hits, "total")
              else sum(m.helper.stats.cache_hits.values()))
    """)
    env = {"PYTHONPATH": f"{tmp_path}:{':'.join(sys.path)}", "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    out = []
    for caller in ("first", "second"):
        p = subprocess.run([sys.executable, "-c", run, caller], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        value, hits = p.stdout.split()
        out.append((float(value), int(hits)))
    a = np.arange(5.0)
    assert out[0] == (float(np.sum(a * 2.0 + 1.0)), 0)  # compiled, then cached
    assert out[1][0] == float(-np.sum((a * 2.0 + 1.0) * np.arange(5))) and out[1][1] >= 1  # from the cache


def test_a_parallel_kernels_loop_parts_have_no_machine_code_of_their_own(monkeypatch):
    """The libraries of a prange loop's parts (the gufunc kernel and its two wrappers) are
    helper libraries, the kernel's own is numba's, the result is right, and numba's
    create_library is its own again afterwards, also when the lowering fails."""
    helper = config.helper_library_class()
    made = []
    init = helper.__init__

    def recording(self, codegen, name, **kwargs):
        made.append(name)
        init(self, codegen, name, **kwargs)

    monkeypatch.setattr(helper, "__init__", recording)

    @config.njit("float64(float64[::1])", parallel=config.PARALLEL, cache=False)
    def f(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            s += a[i] * a[i]
        return s

    assert f(np.arange(1000.0)) == float(np.sum(np.arange(1000.0) ** 2))
    assert any(n.startswith("__numba_parfor_gufunc_") for n in made)
    assert "parallelgufuncwrapper" in made and any("_GufuncWrapper" in n for n in made)
    (cres,) = f.overloads.values()
    assert not isinstance(cres.library, helper)
    codegen = cres.target_context.codegen()
    assert "create_library" not in vars(codegen)

    level = _probe([], fail=True)

    @config.njit(parallel=config.PARALLEL, cache=False)
    def g(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            s += level(a[i])
        return s

    with pytest.raises(Exception, match="lowering failed on purpose"):
        g(np.arange(4.0))
    assert "create_library" not in vars(codegen)
