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


def test_function_arguments_unbox_the_same_however_passed():
    """The kernels' first-class function arguments: a FunctionRef (its stored
    address, read in one attribute access), a reference without that attribute
    (numba's own unboxing, asking __wrapper_address__) and the plain numba
    dispatchers all run the same machine code: bit-identical sums, equal to a
    plain-numpy O2 reference; a FunctionRef of the wrong loss gives that loss's
    sums (the address is really the one used)."""
    from dpreg_kernels.function_ref import ADDRESS_ATTR, FunctionRef

    from dpreg.registry import get_registry

    reg = get_registry()
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 5))
    y = np.where(rng.random(300) < 0.5, -1.0, 1.0)
    nx = K.row_sqnorms(X)
    idx = rng.integers(0, 300, 40).astype(np.int64)
    w, wp = rng.standard_normal(5), rng.standard_normal(5)
    r = np.zeros(5)

    class Unboxed(FunctionRef):
        def __init__(self, ref):
            self.__dict__.update(ref.__dict__)
            self._address = self.__dict__.pop(ADDRESS_ATTR)

        def __wrapper_address__(self):
            return self._address

    def o2(loss_name, how):
        loss = reg.get("loss", loss_name)
        dphi, blk = loss.scalar_kernels()[1], loss.block_kernels()[0]
        fns = (K.scalar_ref(dphi), K.block_ref(blk))
        if how == "unboxed":
            fns = tuple(Unboxed(f) for f in fns)
        elif how == "dispatcher":
            fns = (dphi, blk)
        return K.clipped_sum.pick(False)(X, y, nx, idx, False, w, wp, True, r, r, *fns, 0.5)

    got = {how: o2("logistic", how) for how in ("ref", "unboxed", "dispatcher")}
    for how in ("unboxed", "dispatcher"):
        np.testing.assert_array_equal(got[how][0], got["ref"][0])
        assert got[how][1] == got["ref"][1]
    # plain numpy: logistic dphi(m, y) = -y / (1 + exp(y m)), differences clipped to 0.5
    a = (-y[idx] / (1 + np.exp(y[idx] * (X[idx] @ w)))) - (-y[idx] / (1 + np.exp(y[idx] * (X[idx] @ wp))))
    t = a[:, None] * X[idx]
    t *= np.minimum(1.0, 0.5 / np.maximum(np.linalg.norm(t, axis=1), 1e-300))[:, None]
    np.testing.assert_allclose(got["ref"][0], t.sum(axis=0), rtol=1e-10, atol=1e-12)
    other = o2("sigmoid-l2", "ref")[0]
    assert not np.allclose(other, got["ref"][0])
