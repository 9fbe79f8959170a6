"""Ctrl-C that is never lost.

Python turns SIGINT into a KeyboardInterrupt at the next bytecode the main
thread runs.  When that bytecode is a ctypes callback - llvmlite's object-cache
hook while numba compiles a kernel - the exception is printed as "ignored"
and dropped: measured on a first run, a Ctrl-C in that window either went
unnoticed (the run went on to its end) or left numba's half-built library to
fail later with a RuntimeError and a traceback.

:class:`watching` installs a handler that records the interrupt before raising
it, so it survives being dropped: :func:`check` (called at every step's
progress report, :class:`dpreg.interfaces.Algorithm`) raises it again, and
the block's :attr:`watching.hit` lets the command line tell an interrupt from a
crash whatever exception it arrived as.
"""
from __future__ import annotations

import signal
import sys
import threading

_hit = [False]


def _handler(signum, frame):
    _hit[0] = True
    raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether a Ctrl-C arrived in the current :class:`watching` block."""
    return _hit[0]


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C arrived (and was swallowed on its way)."""
    if _hit[0]:
        raise KeyboardInterrupt


def _unraisable(previous):
    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):  # dropped by a callback: recorded, not printed
            _hit[0] = True
            return
        previous(unraisable)
    return hook


class watching:
    """Record Ctrl-C for the duration of a ``with`` block (main thread only;
    elsewhere a no-op), including one a callback drops: it is not printed as
    an ignored exception with its traceback, it is remembered.  On exit the
    block's outcome is kept in :attr:`hit` and the process-wide record is
    cleared, so a later run in the same process (a notebook, a test) starts
    clean."""

    def __init__(self):
        self.hit = False
        self._active = False

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._active = True
            _hit[0] = False
            self._previous = signal.signal(signal.SIGINT, _handler)
            self._previous_hook = sys.unraisablehook
            sys.unraisablehook = _unraisable(self._previous_hook)
        return self

    def __exit__(self, *exc):
        if self._active:
            signal.signal(signal.SIGINT, self._previous)
            sys.unraisablehook = self._previous_hook
            self.hit = _hit[0]
            _hit[0] = False
        return False
