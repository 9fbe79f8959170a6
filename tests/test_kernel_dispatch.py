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
import pytest

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


class _FakeProc:
    """A machine as the load check reads it: ``/proc/loadavg``, ``/proc/stat``,
    the clock, this process's CPU time and running threads, set by the test."""

    def __init__(self, monkeypatch):
        import io
        import time

        self.avg, self.runnable, self.own_running = 0.0, 1, 1
        self.wall, self.machine_busy_s, self.own_s = 1000.0, 0.0, 0.0
        real_open = open

        def _open(path, *a, **kw):
            if path == "/proc/loadavg":
                return io.StringIO(f"{self.avg} {self.avg} {self.avg} {self.runnable}/300 12345\n")
            if path == "/proc/stat":
                ticks = round(self.machine_busy_s * config._CLK_TCK)  # all of it as user time
                return io.StringIO(f"cpu  {ticks} 0 0 999999 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")
            return real_open(path, *a, **kw)

        monkeypatch.setattr("builtins.open", _open)
        monkeypatch.setattr(time, "monotonic", lambda: self.wall)
        monkeypatch.setattr(time, "process_time", lambda: self.own_s)
        monkeypatch.setattr(config, "_own_running", lambda: self.own_running)
        monkeypatch.setattr(config, "LOAD_LOOK_S", -1.0)  # look every call
        monkeypatch.setattr(config, "_window", [None, 0.0])
        monkeypatch.setattr(config, "_load", [-1.0, 0.0])  # no look kept from another test's clock
        config._busy()  # the first sample

    def run(self, seconds, own_cpus, other_cpus):
        """``seconds`` pass with this process on ``own_cpus`` CPUs and other work on ``other_cpus``."""
        self.wall += seconds
        self.own_s += seconds * own_cpus
        self.machine_busy_s += seconds * (own_cpus + other_cpus)


def test_load_check_does_not_count_this_process(monkeypatch):
    """The others' load is the machine's busy CPU time minus this process's:
    a long run's own parallel kernels, which push the 1-minute load average
    past the threshold, leave the check reading an idle machine (the former
    rule took the average, and a long run lost its parallel kernels:
    benchmarks/load_check.py)."""
    cpus = os.cpu_count() or 1
    if cpus < 2 or config.numba.get_num_threads() < 2:
        return  # one CPU or one thread: never parallel, nothing to check
    m = _FakeProc(monkeypatch)
    big = config.PARALLEL_WORK
    m.avg, m.runnable, m.own_running = cpus + 1.0, cpus, cpus  # our threads: all the running ones
    m.run(2.0, cpus, 0.0)
    assert config._busy() == 0.0 and config.want_parallel(big)
    threads = min(config.numba.get_num_threads(), cpus)
    m.run(2.0, 1, cpus - threads + 0.75)                        # others on part of the threads' CPUs
    assert abs(config._busy() - (cpus - threads + 0.75)) < 1e-9 and not config.want_parallel(big)
    m.run(2.0, 1, cpus - threads + 0.25)                        # others leave the threads their CPUs
    assert abs(config._busy() - (cpus - threads + 0.25)) < 1e-9 and config.want_parallel(big)
    assert not config.want_parallel(big - 1)                    # small work: serial whatever the load


def test_load_check_sees_a_load_that_has_just_started(monkeypatch):
    """A load that started late in a long window (the first look of a run, after
    loading) is seen by the others' runnable tasks at the look, which the mean
    hardly shows (two busy processes next to the run: parallel kernels then
    wait for CPUs they do not get); in a run's frequent looks the mean alone
    decides, so a task runnable at the instant of a look changes nothing, and a
    load that has just ended is over at the next look."""
    cpus = os.cpu_count() or 1
    if cpus < 2 or config.numba.get_num_threads() < 2:
        return
    m = _FakeProc(monkeypatch)
    big = config.PARALLEL_WORK
    m.run(5.0, 1, 0.0)                                          # idle: the caller alone runs
    assert config._busy() == 0.0 and config.want_parallel(big)
    m.run(3.0, 1, 0.0)
    m.run(0.2, 1, cpus)                                         # started 0.2 s before the look
    m.runnable = 1 + cpus
    assert config._busy() == cpus and not config.want_parallel(big)
    m.run(0.25, 1, cpus)                                        # the next look: a short window
    assert config._busy() == cpus and not config.want_parallel(big)
    m.run(0.25, 1, 0.0)                                         # ended
    m.runnable = 1
    assert config._busy() == 0.0 and config.want_parallel(big)
    m.run(0.25, 1, 0.0)
    m.runnable = 2                                              # another task runnable at the instant
    assert config._busy() == 0.0 and config.want_parallel(big)
    m.run(0.05, 1, cpus)                                        # too short a window to read: kept
    assert config._busy() == 0.0
    m.run(0.25, 1, cpus)
    assert config._busy() == pytest.approx(cpus * 0.3 / 0.3)    # read over the whole 0.3 s since the last


def test_load_check_without_proc_falls_back_to_the_load_average(monkeypatch):
    """Without /proc (not Linux) the former rule stands in: the 1-minute load
    average (which counts this process too) below the CPU count minus one
    half; with no load information at all, parallel kernels are allowed."""
    cpus = os.cpu_count() or 1

    def no_proc():
        raise OSError("no /proc/stat")

    monkeypatch.setattr(config, "_cpu_times", no_proc)
    assert config._busy() is None
    monkeypatch.setattr(config.os, "getloadavg", lambda: (cpus - 0.4, 0.0, 0.0))
    assert not config.machine_has_idle_cores()
    monkeypatch.setattr(config.os, "getloadavg", lambda: (cpus - 0.6, 0.0, 0.0))
    assert config.machine_has_idle_cores()
    monkeypatch.delattr(config.os, "getloadavg")
    assert config.machine_has_idle_cores()


def test_load_check_reads_this_machine():
    """On Linux the check reads /proc without error: a finite, non-negative
    load, this process's own running threads among the runnable ones."""
    if not os.path.exists("/proc/stat"):
        return  # not Linux: the 1-minute load average stands in
    assert config._own_running() >= 1
    t = config._cpu_times()
    assert len(t) == 3 and t[1] > 0 and t[2] > 0
    b = config._busy()
    assert np.isfinite(b) and b >= 0.0


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
