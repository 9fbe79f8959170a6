"""The kernels' compiler pipeline (dpreg_kernels.config.kernel_compiler): LLVM's
passes run at KERNEL_OPT for the kernels' own lowering only, numba's level is
restored afterwards (also when lowering fails), and every kernel is made with it."""
from __future__ import annotations

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
    """(plain numba.njit, no pipeline, when DPREG_KERNEL_OPT is numba's own level)"""
    import dpreg_kernels.linear_model as lm
    import dpreg_kernels.sparse as sp

    pipeline = config.kernel_compiler() if config.KERNEL_OPT != int(nconfig.OPT) else None
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
