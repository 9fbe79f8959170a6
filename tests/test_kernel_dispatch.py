"""Which kernel variant a call runs: parallel for work above PARALLEL_WORK with more
than one thread (want_parallel), and (Kernel.pick) compiled only once it pays
(cached on disk, or after PARALLEL_AMORTIZE_S CPU seconds of serial calls in its
place); the choice never changes a result.  And how the loss's functions reach
the kernels (FunctionRef)."""
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
    monkeypatch.setattr(config, "parallel_variant_cached", lambda name: False)
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
    monkeypatch.setattr(config, "parallel_variant_cached", lambda name: False)
    monkeypatch.setattr(config, "PARALLEL_AMORTIZE_S", 0.0)
    k = _fresh_row_sqnorms()
    assert k.pick(True) is k.fast(True)


_PROBE = textwrap.dedent("""
    import json
    from dpreg_kernels import config
    from dpreg_kernels import linear_model as K
    k = K.Kernel(K.row_sqnorms.signature, K.row_sqnorms.py_func)
    before = config.parallel_variant_cached(k.name)
    k.parallel  # compiles the parallel variant and stores it in the cache
    after = config.parallel_variant_cached(k.name)
    serial_only = config.parallel_variant_cached(K.phi_sum.name)
    print(json.dumps([before, after, serial_only]))
""")


def test_a_stored_parallel_variant_is_known_to_the_next_process(tmp_path):
    """The list of cached parallel variants beside numba's cache: empty in a new
    cache, the kernel listed once its parallel variant is compiled (in this
    process and the next), a kernel compiled serial only never listed."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=600, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    assert runs == [[False, True, False], [True, True, False]]


def test_a_parallel_variant_compiled_in_the_process_is_used(monkeypatch):
    monkeypatch.setattr(config, "parallel_variant_cached", lambda name: False)
    monkeypatch.setattr(config, "PARALLEL_AMORTIZE_S", 1e9)
    k = _fresh_row_sqnorms()
    k.parallel  # compiled (or loaded) by a direct use, e.g. a benchmark
    assert k.pick(True) is k.fast(True)


def test_want_parallel_is_a_work_threshold_and_the_thread_count(monkeypatch):
    import numba

    big = config.PARALLEL_WORK
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    assert config.want_parallel(big) and not config.want_parallel(big - 1)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 1)  # --threads 1
    assert not config.want_parallel(10 * big)


def test_function_arguments_give_the_same_sums_however_passed():
    """The kernels' first-class function arguments: a FunctionRef through the
    compiled entry point, and the plain numba dispatchers or references through
    numba's ordinary dispatch (the serial and parallel variants) all give
    bit-identical sums, equal to a plain-numpy O2 reference; a FunctionRef of
    another loss gives that loss's sums (the reference is really the one used)."""
    from dpreg_kernels.function_ref import FunctionRef, as_ref

    from dpreg.registry import get_registry

    reg = get_registry()
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 5))
    y = np.where(rng.random(300) < 0.5, -1.0, 1.0)
    nx = K.row_sqnorms(X)
    idx = rng.integers(0, 300, 40).astype(np.int64)
    w, wp = rng.standard_normal(5), rng.standard_normal(5)
    r = np.zeros(5)

    def o2(loss_name, how):
        loss = reg.get("loss", loss_name)
        dphi, blk = loss.scalar_kernels()[1], loss.block_kernels()[0]
        refs = (K.scalar_ref(dphi), K.block_ref(blk))
        assert all(isinstance(f, FunctionRef) for f in refs) and as_ref(refs[0], K.SCALAR_SIG) is refs[0]
        args = (X, y, nx, idx, False, w, wp, True, r, r)
        if how == "ref":
            return K.clipped_sum.pick(False)(*args, *refs, 0.5)
        if how == "dispatcher":
            return K.clipped_sum.typed(False)(*args, dphi, blk, 0.5)
        return K.clipped_sum(*args, *refs, 0.5)  # parallel, through numba's dispatch

    got = {how: o2("logistic", how) for how in ("ref", "dispatcher", "parallel")}
    for how in ("dispatcher", "parallel"):
        np.testing.assert_array_equal(got[how][0], got["ref"][0])
        assert got[how][1] == got["ref"][1]
    # plain numpy: logistic dphi(m, y) = -y / (1 + exp(y m)), differences clipped to 0.5
    a = (-y[idx] / (1 + np.exp(y[idx] * (X[idx] @ w)))) - (-y[idx] / (1 + np.exp(y[idx] * (X[idx] @ wp))))
    t = a[:, None] * X[idx]
    t *= np.minimum(1.0, 0.5 / np.maximum(np.linalg.norm(t, axis=1), 1e-300))[:, None]
    np.testing.assert_allclose(got["ref"][0], t.sum(axis=0), rtol=1e-10, atol=1e-12)
    other = o2("sigmoid-l2", "ref")[0]
    assert not np.allclose(other, got["ref"][0])
