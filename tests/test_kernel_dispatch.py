"""Which kernel variant a call runs (Kernel.pick): the parallel variant is
compiled only once it pays (cached on disk, or after PARALLEL_AMORTIZE_S CPU
seconds of serial calls in its place); the choice never changes a result."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from dpreg_kernels import config
from dpreg_kernels import linear_model as K


def _fresh_row_sqnorms():
    """A Kernel object of its own (nothing compiled or picked yet)."""
    return K.Kernel(K.row_sqnorms.signature, K.row_sqnorms.py_func)


def test_parallel_variant_is_not_compiled_before_it_pays(monkeypatch):
    monkeypatch.setattr(config, "parallel_variant_cached", lambda func, sig: False)
    monkeypatch.setattr(config, "PARALLEL_AMORTIZE_S", 1e9)
    k = _fresh_row_sqnorms()
    X = np.random.default_rng(0).standard_normal((3000, 7))
    f = k.pick(True)
    out = f(X)
    assert True not in k.compiled()                   # wanted, but not compiled
    assert k.serial_large_s > 0                       # the serial calls are counted
    assert k.pick(False) is k.fast(False)             # small work: serial, untimed
    monkeypatch.setattr(config, "PARALLEL_AMORTIZE_S", k.serial_large_s)  # the serial calls have paid
    par = k.pick(True)
    assert True in k.compiled() and par is k.fast(True)
    np.testing.assert_array_equal(par(X), out)        # bit-identical: the switch changes nothing
    np.testing.assert_allclose(out, np.einsum("ij,ij->i", X, X), rtol=1e-12)


def test_amortize_zero_compiles_at_once(monkeypatch):
    monkeypatch.setattr(config, "parallel_variant_cached", lambda func, sig: False)
    monkeypatch.setattr(config, "PARALLEL_AMORTIZE_S", 0.0)
    k = _fresh_row_sqnorms()
    assert k.pick(True) is k.fast(True)


_PROBE = textwrap.dedent("""
    import json
    from dpreg_kernels import config
    from dpreg_kernels import linear_model as K
    k = K.Kernel(K.row_sqnorms.signature, K.row_sqnorms.py_func)
    before = config.parallel_variant_cached(k.py_func, k.signature)
    k.parallel  # compiles the parallel variant and stores it in the cache
    after = config.parallel_variant_cached(k.py_func, k.signature)
    serial_only = config.parallel_variant_cached(K.phi_sum.py_func, K.phi_sum.signature)
    print(json.dumps([before, after, serial_only]))
""")


def test_cache_probe_sees_a_stored_parallel_variant(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    before, after, serial_only = json.loads(res.stdout.strip().splitlines()[-1])
    assert (before, after, serial_only) == (False, True, False)


def test_a_parallel_variant_compiled_in_the_process_is_used(monkeypatch):
    monkeypatch.setattr(config, "parallel_variant_cached", lambda func, sig: False)
    monkeypatch.setattr(config, "PARALLEL_AMORTIZE_S", 1e9)
    k = _fresh_row_sqnorms()
    k.parallel  # compiled (or loaded) by a direct use, e.g. a benchmark
    assert k.pick(True) is k.fast(True)


def test_load_check_sees_a_load_that_has_just_started(monkeypatch):
    """want_parallel reads the runnable tasks right now, not only the 1-minute
    average, which lags a load that has just started (two busy processes next
    to the run: parallel kernels then wait for CPUs they do not get)."""
    import io

    cpus = os.cpu_count() or 1
    if cpus < 2 or config.numba.get_num_threads() < 2:
        return  # one CPU or one thread: never parallel, nothing to check
    monkeypatch.setattr(config, "LOAD_LOOK_S", -1.0)  # look every call
    real_open = open

    def fake(avg, running):
        def _open(path, *a, **kw):
            if path == "/proc/loadavg":
                return io.StringIO(f"{avg} {avg} {avg} {running}/300 12345\n")
            return real_open(path, *a, **kw)
        return _open

    big = config.PARALLEL_WORK
    monkeypatch.setattr("builtins.open", fake(0.1, 1))           # idle: the caller alone is runnable
    assert config._busy() == 0.1 and config.want_parallel(big)
    monkeypatch.setattr("builtins.open", fake(0.1, 1 + cpus))    # just started: cpus others runnable
    assert config._busy() == cpus and not config.want_parallel(big)
    monkeypatch.setattr("builtins.open", fake(cpus + 1.0, 1))    # a load that has just ended: still busy
    assert not config.want_parallel(big)
    assert not config.want_parallel(big - 1)                     # small work: serial whatever the load
