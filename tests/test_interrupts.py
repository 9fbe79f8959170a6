"""Ctrl-C is never lost (dpreg.interrupts): one that a ctypes callback drops -
as llvmlite's object-cache hook does while numba compiles - is remembered,
printed nowhere, stops the run at its next step, and turns whatever failure
follows it into the interrupted exit (status 130, one line, no file)."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from dpreg import interrupts
from dpreg.accounting import RdpAccountant
from dpreg.params import bind
from dpreg.problem import Problem
from dpreg.registry import get_registry


def _dropping_callback():
    """A C callback that raises KeyboardInterrupt, as a Ctrl-C landing in it does:
    ctypes hands the exception to sys.unraisablehook and returns normally."""
    def raises():
        raise KeyboardInterrupt

    cb = ctypes.CFUNCTYPE(None)(raises)
    return cb


def test_an_interrupt_dropped_by_a_callback_is_remembered_not_printed(capfd):
    cb = _dropping_callback()
    with interrupts.watching() as watch:
        assert not interrupts.interrupted()
        cb()  # returns: the exception was dropped
        assert interrupts.interrupted()
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert "Traceback" not in capfd.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    assert watch.hit and not interrupts.interrupted()  # kept by the block, cleared for the process
    interrupts.check()  # a later run in the same process starts clean


def test_a_real_sigint_inside_watching_is_recorded_and_raised():
    with interrupts.watching() as watch:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**7):  # the handler runs at the next bytecode
                pass
        assert interrupts.interrupted()
    assert watch.hit


def _problem():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    return Problem(get_registry().get("loss", "logistic"), X, y)


@pytest.mark.parametrize("algo", ["dp-gd", "dp-spider"])
def test_a_dropped_interrupt_stops_the_run_at_its_next_step(algo):
    reg = get_registry()
    cls = reg.get("algorithm", algo)
    params = bind(cls.params, {"steps": 50}, algo)
    seen = []
    cb = _dropping_callback()

    def progress(step, total):
        seen.append(step)
        if step == 3:
            cb()  # a Ctrl-C lands in compiled code and is dropped there

    noise = reg.get("noise", "gaussian") if cls.uses_noise else None
    a = cls(_problem(), params, noise=noise, accountant=RdpAccountant(1.0, 1e-5, cls.relation_for(params)), seed=0,
            progress=progress)
    with interrupts.watching():
        with pytest.raises(KeyboardInterrupt):
            a.run()
    assert seen[-1] == 3  # stopped at the very next step's report


def test_the_command_line_turns_a_failure_after_a_dropped_interrupt_into_exit_130(tmp_path, monkeypatch):
    """numba, when a Ctrl-C was dropped mid-compile, later fails with a
    RuntimeError on its half-built library: that is the interrupted exit,
    not a crash with a traceback."""
    from dpreg.cli import _load_plugin_commands, cli

    _load_plugin_commands()
    import dpreg.metrics

    cb = _dropping_callback()

    def boom(*a, **k):
        cb()
        raise RuntimeError("no compiled object yet for <Library '_clipped_sum__serial'>")

    monkeypatch.setattr(dpreg.metrics, "evaluate", boom)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--param", "steps=2", "--data", "breast-cancer",
                                   "--out", "r.json"])
    assert res.exit_code == 130, (res.stderr, repr(res.exception))
    assert res.stderr.strip().splitlines()[-1] == "interrupted; no output written"
    assert "Traceback" not in res.stderr and os.listdir(tmp_path) == []


def test_without_an_interrupt_a_failure_is_still_a_failure(tmp_path, monkeypatch):
    from dpreg.cli import _load_plugin_commands, cli

    _load_plugin_commands()
    import dpreg.problem

    def boom(*a, **k):
        raise RuntimeError("a real bug")

    monkeypatch.setattr(dpreg.problem.Problem, "clipped_grad_sum", boom)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--param", "steps=2", "--data", "breast-cancer",
                                   "--out", "r.json"])
    assert res.exit_code not in (0, 2, 130) and isinstance(res.exception, RuntimeError)


def test_the_process_exits_130_without_a_crash_at_shutdown(tmp_path):
    """The console entry point leaves with os._exit(130) on an interrupt (a
    Ctrl-C in LLVM code generation can leave llvmlite crashing the normal
    shutdown): status 130, the one line, nothing after it."""
    script = textwrap.dedent("""
        import dpreg.metrics
        def boom(*a, **k):
            raise KeyboardInterrupt
        dpreg.metrics.evaluate = boom
        from dpreg.cli import main
        main(["run", "--algo", "dp-gd", "--param", "steps=2", "--data", "breast-cancer", "--out", "r.json"])
    """)
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 130, p.stderr
    assert p.stderr.strip().splitlines()[-1] == "interrupted; no output written"
    assert not (tmp_path / "r.json").exists()
