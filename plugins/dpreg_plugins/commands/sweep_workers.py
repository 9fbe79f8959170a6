"""The worker processes of ``dpreg sweep`` and how a sweep stops.

:class:`WorkerPool` runs cells in spawned processes (one numba thread each),
one cell at a time per process, each fed through its own pipe:

* a worker that dies (killed, out of memory) turns its cell into an error
  row and is replaced; the sweep goes on;
* :meth:`WorkerPool.close` with ``kill=True`` ends every worker (SIGTERM,
  then SIGKILL after a grace period): the sweep's answer to Ctrl-C, SIGTERM
  and a failure it cannot go on after;
* a worker whose parent dies - even by SIGKILL, where the parent cleans up
  nothing - exits at once: the kernel sends it SIGKILL (Linux
  ``PR_SET_PDEATHSIG``), and a watchdog thread that sees its parent
  change exits it elsewhere (and on Linux too, should the signal be missed).

:func:`stopping_on_signals` turns SIGTERM into :class:`Terminated` for the
duration of a sweep (SIGINT stays Python's KeyboardInterrupt), so both end in
the same clean-up: workers ended, the table of the finished cells written.
"""
from __future__ import annotations

import os
import signal
import threading
from collections import deque
from contextlib import contextmanager
from typing import Callable

#: seconds a worker has to exit after SIGTERM before it is killed
GRACE_S = 2.0
#: seconds between the watchdog's looks at the parent process
WATCH_S = 0.5


class Terminated(BaseException):
    """The sweep received SIGTERM (a BaseException, like KeyboardInterrupt:
    no ``except Exception`` of a cell swallows it)."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(f"signal {signum}")
        self.signum = signum


@contextmanager
def stopping_on_signals():
    """Within the block (main thread only), SIGTERM raises :class:`Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit when ``parent_pid`` (its parent) dies: the
    kernel's parent-death signal where there is one (Linux), and a daemon
    thread that exits the process once its parent has changed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog alone
        pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)

    def watch():
        import time

        while True:
            time.sleep(WATCH_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="dpreg-parent-watch", daemon=True).start()


def _worker_main(conn, parent_pid: int) -> None:
    """A worker process: run the cells it is sent, one at a time, until told
    to stop (None), its pipe closes or its parent dies."""
    os.environ["NUMBA_NUM_THREADS"] = "1"  # before numba is imported: one thread per worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    die_with_parent(parent_pid)
    from .sweep import _guarded

    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        i, cell, path = job
        conn.send((i, _guarded(cell, path)))


class WorkerPool:
    """``n`` spawned worker processes (see the module docstring)."""

    def __init__(self, n: int):
        import multiprocessing

        self.ctx = multiprocessing.get_context("spawn")  # numba's threads do not survive fork
        self.n = int(n)
        self.workers: list = []  # [process, connection, job or None]

    def _start(self) -> list:
        parent, child = self.ctx.Pipe(duplex=True)
        p = self.ctx.Process(target=_worker_main, args=(child, os.getpid()), name="dpreg-sweep-worker",
                             daemon=True)
        p.start()
        child.close()  # the worker's end lives in the worker: its death closes the pipe
        w = [p, parent, None]
        self.workers.append(w)
        return w

    def pids(self) -> list[int]:
        return [w[0].pid for w in self.workers if w[0].pid is not None]

    def run(self, jobs: list, finished: Callable[[int, dict], None], lost: Callable[[int, str], dict]) -> None:
        """Run ``jobs`` ((i, cell, path) each); ``finished(i, row)`` for each
        result as it comes (it may raise to stop the sweep); a worker that
        dies gives ``finished(i, lost(i, reason))`` and is replaced."""
        from multiprocessing.connection import wait

        queue = deque(jobs)
        for _ in range(min(self.n, len(queue))):
            self._give(self._start(), queue)
        while any(w[2] is not None for w in self.workers):
            busy = {w[1]: w for w in self.workers if w[2] is not None}
            for conn in wait(list(busy), timeout=1.0):
                w = busy[conn]
                i = w[2][0]
                try:
                    j, row = conn.recv()
                except (EOFError, OSError):
                    w[0].join(GRACE_S)
                    code = w[0].exitcode
                    self.workers.remove(w)
                    conn.close()
                    w[2] = None
                    reason = (f"worker process died (exit status {code}: killed, or out of memory)"
                              if code is not None else "worker process lost")
                    finished(i, lost(i, reason))
                    if queue:
                        self._give(self._start(), queue)
                    continue
                w[2] = None
                finished(j, row)
                self._give(w, queue)

    def _give(self, w: list, queue: deque) -> None:
        if queue:
            w[2] = queue.popleft()
            w[1].send(w[2])
        else:
            w[2] = None
            try:
                w[1].send(None)
            except OSError:
                pass

    def close(self, kill: bool = False) -> None:
        """End every worker: let idle ones exit (``kill=False``), or SIGTERM
        all of them, then SIGKILL any still there after :data:`GRACE_S`."""
        for p, conn, _ in self.workers:
            if kill and p.is_alive():
                p.terminate()
        for p, conn, _ in self.workers:
            p.join(GRACE_S if kill else 30.0)
            if p.is_alive():
                p.kill()
                p.join(GRACE_S)
            conn.close()
        self.workers = []
