"""How the kernels are compiled (dpreg_kernels.config): numba's own compiler with
documented options only - helpers without Python or C entry points, linked into
their callers also when they come from numba's on-disk cache - and the stale-cache
guard: a stamp of the package's source hash beside numba's cache, the package's
cache files removed when it differs."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

from dpreg_kernels import config


def test_kernels_and_helpers_use_documented_numba_options():
    import dpreg_kernels.linear_model as lm
    import dpreg_kernels.sparse as sp

    kernels = [k for mod in (lm, sp) for k in vars(mod).values() if isinstance(k, lm.Kernel)]
    assert len(kernels) >= 8
    for k in kernels:
        assert isinstance(k.serial, numba.core.registry.CPUDispatcher), k.name
        assert k.serial.stats.cache_path == config.cache_dir()  # cached, beside the stamp
    helpers = [lm._chunk, lm._margins, lm._stage_finish, lm._reduce_parts, sp._csr_chunk]
    for h in helpers:
        # compiled-code callees only: no Python entry point, no C wrapper
        assert h.targetoptions["no_cpython_wrapper"] and h.targetoptions["no_cfunc_wrapper"]


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


def test_a_helper_is_linked_into_its_callers():
    inner, outer, kernel = _helpers()
    a = np.linspace(0.0, 2.0, 37)

    def ref(v):
        return sum((x * x + 1.0) / (i + 1.0) for i, x in enumerate(v))

    assert kernel(a) == pytest.approx(ref(a) + ref(a[::-1]), rel=1e-12)
    with pytest.raises(ValueError, match="negative entry"):  # a helper's exception reaches Python
        kernel(a - 1.0)


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
        print(f(a), sum(m.helper.stats.cache_hits.values()))
    """)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{':'.join(sys.path)}", "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
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


def test_the_guard_removes_the_packages_cache_files_when_the_sources_change(tmp_path):
    """guard_cache on a cache directory: a missing stamp removes the package's cache
    files (and the list of cached parallel variants) but nothing else and writes the
    stamp; a matching stamp removes nothing; a different one removes them again."""
    d = tmp_path / "cache"
    d.mkdir()
    ours = ["linear_model._clipped_sum-411.py311.nbi", "linear_model._clipped_sum-411.py311.1.nbc",
            "vmath.exp_nonpos-40.py311.nbi", config.PARALLEL_NAME]
    others = ["mymodule.f-3.py311.nbi", "linear_model.cpython-311.pyc", "notes.txt"]
    for name in ours + others:
        (d / name).write_text("x")
    assert sorted(config.guard_cache(str(d))) == sorted(ours)
    assert sorted(os.listdir(d)) == sorted(others + [config.STAMP_NAME])
    assert (d / config.STAMP_NAME).read_text().strip() == config.package_source_hash()
    for name in ours:
        (d / name).write_text("x")
    assert config.guard_cache(str(d)) == []                    # same sources: the cache stays
    (d / config.STAMP_NAME).write_text("0" * 64 + "\n")         # another version of the package
    assert sorted(config.guard_cache(str(d))) == sorted(ours)
    assert config.guard_cache(str(tmp_path / "absent")) == []  # created with its stamp
    assert (tmp_path / "absent" / config.STAMP_NAME).exists()


def test_the_guard_leaves_an_unwritable_directory_alone(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert config.guard_cache(str(blocker / "cache")) == []


def test_the_cache_directory_is_numbas_for_this_package():
    """cache_dir() is where numba stores this package's functions: the stamp sits
    beside their index files."""
    import dpreg_kernels.linear_model as lm

    d = config.cache_dir()
    assert d is not None and os.path.isdir(d)
    assert os.path.exists(os.path.join(d, config.STAMP_NAME))
    lm.n_chunks(5)  # compiled or loaded: its index is in that directory
    assert any(n.startswith("linear_model._n_chunks__serial-") and n.endswith(".nbi") for n in os.listdir(d))
