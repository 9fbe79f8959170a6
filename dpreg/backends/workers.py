"""Shard holders and the executors that call them.

:class:`ShardWorker` holds some shards of a source for the length of a run:
it reads and prepares them where it runs, keeps one
:class:`~dpreg.problem.Problem` per shard, and answers per-shard sums (clipped
gradient and difference sums, exact values, gradients, Hessian-vector
products, Hessians, correct-prediction counts) for the row numbers the driver
sends.  It never sends a record: only sums over its shards, one d-vector (a
d x d matrix for Hessians, a number for values and counts) per shard.

Two executors call the holders:

* :class:`LocalExecutor` - one holder of every shard, a plain object in the
  driver process (``--backend local``);
* :class:`DaskExecutor` - one holder per Dask worker, a Dask actor pinned to
  its worker (``workers=[address], allow_other_workers=False``), shards
  assigned in source order, balanced by bytes.  By default a
  :class:`distributed.LocalCluster` of worker *processes* on 127.0.0.1 (one
  Dask thread each; numba threads: the cores shared out); with an address, a
  running scheduler, reached within ``connect_timeout`` seconds.

Failure semantics (the page ``docs/scale-out.md``): a call that a holder
cannot answer because its worker is gone - killed, out of memory, its
connection lost - raises one :class:`~dpreg.errors.DpregError` and the run
writes nothing.  A call is never retried: a per-shard sum carries no
randomness and releases nothing (the driver adds the noise), so a retry would
be safe, but the lost holder's shards are gone with it and reloading them
elsewhere is not attempted.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Sequence

import numpy as np

from ..errors import DataError, DpregError, ParameterError
from .shards import ShardOptions, ShardReader, label_values, map_labels, prepare_shard

__all__ = ["ShardWorker", "LocalExecutor", "DaskExecutor", "ArrayShard", "assign", "peak_rss_bytes"]


def peak_rss_bytes() -> int:
    """This process's peak resident set size in bytes: ``VmHWM`` of
    ``/proc/self/status`` (its own memory's high-water mark), else
    ``getrusage``'s ``ru_maxrss`` - which on Linux a spawned worker inherits
    from the process that forked it, so a worker started by a driver holding
    gigabytes would report the driver's peak."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def rss_bytes() -> int:
    """This process's resident set size now, in bytes (``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class ArrayShard:
    """A shard given as arrays (``DPClassifier(backend="dask")``, ``dpreg.run``
    with arrays): ``index``, its rows ``X`` (dense or CSR) and raw labels ``y``."""

    format = "arrays"

    def __init__(self, index: int, X, y):
        self.index = int(index)
        self.path = f"arrays (shard {index})"
        self.X, self.y = X, np.asarray(y, dtype=np.float64)
        self.bytes = int(getattr(X, "nbytes", 0) or (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes))


class _ArrayReader(ShardReader):
    """:class:`ShardReader` over an :class:`ArrayShard`'s arrays."""

    def __init__(self, shard: ArrayShard, opts: ShardOptions):
        self.file = shard
        self.where = f"data {shard.path}"
        self.opts = opts
        X = shard.X
        if getattr(X, "ndim", 2) != 2:
            raise DataError(f"{self.where}: features must be a 2-D array, got shape {X.shape}")
        self._whole = (X if not isinstance(X, np.ndarray) else np.asarray(X, dtype=np.float64), shard.y)
        self.rows, self.features = int(X.shape[0]), int(X.shape[1])


def assign(sizes: Sequence[int], k: int) -> list[list[int]]:
    """Shard positions ``0..len(sizes)-1`` cut into at most ``k`` consecutive
    groups of about equal total size (greedy on the running total); groups
    are never empty.  A public function of the shard sizes (bytes)."""
    m = len(sizes)
    k = max(1, min(int(k), m))
    total = float(sum(sizes)) or 1.0
    groups: list[list[int]] = []
    cum = 0.0
    for i, s in enumerate(sizes):
        left_groups = k - len(groups)
        left_shards = m - i
        if not groups or (left_groups > 0 and (cum >= total * len(groups) / k or left_shards <= left_groups)):
            groups.append([])
        groups[-1].append(i)
        cum += s
    return groups


# ---------------------------------------------------------------------- holder
class ShardWorker:
    """The holder of some shards for a run (see the module docstring).

    ``sources``: :class:`~.shards.ShardFile` s (or :class:`ArrayShard` s,
    whose arrays come as ``arrays``: one ``(X, y)`` pair each, in order, for
    Dask to resolve on the worker); ``opts``: how to read them; ``threads``:
    numba threads for this holder's kernels (None: leave the process's)."""

    def __init__(self, sources: Sequence[Any], opts: ShardOptions, threads: int | None = None,
                 arrays: Sequence[tuple] | None = None):
        self.rss_start = rss_bytes()
        self.opts = opts
        self.threads = threads
        if arrays is not None:
            sources = [ArrayShard(s.index, X, y) for s, (X, y) in zip(sources, arrays)]
        self.sources = list(sources)
        self.readers: dict[int, ShardReader] = {}
        self.labels: dict[int, np.ndarray] = {}
        self.problems: dict = {}
        #: the sums' calls, and the CPU and wall seconds they took here (the thread's CPU
        #: time: what a core of its own would have spent; the wall: what this one took)
        self.calls, self.cpu_s, self.wall_s = 0, 0.0, 0.0

    def _threads(self) -> None:
        if self.threads:
            import numba

            numba.set_num_threads(max(1, min(int(self.threads), int(numba.config.NUMBA_NUM_THREADS))))

    def _timed(self, f):
        """``f()``, its CPU and wall seconds added to this holder's counters."""
        self._threads()
        c0, t0 = time.thread_time(), time.perf_counter()
        try:
            return f()
        finally:
            self.calls += 1
            self.cpu_s += time.thread_time() - c0
            self.wall_s += time.perf_counter() - t0

    def counters(self) -> dict:
        """Calls answered and the CPU and wall seconds they took on this holder."""
        return {"calls": self.calls, "cpu_s": self.cpu_s, "wall_s": self.wall_s}

    # ------------------------------------------------------------- loading
    def survey(self) -> dict[int, dict]:
        """Open every shard and read its labels: per shard its public size
        (rows, features) and :func:`~.shards.label_values`."""
        out = {}
        for s in self.sources:
            r = _ArrayReader(s, self.opts) if isinstance(s, ArrayShard) else ShardReader(s, self.opts)
            y = r.labels()
            self.readers[s.index], self.labels[s.index] = r, y
            out[s.index] = {"rows": r.rows, "features": r.features, "labels": label_values(y),
                            "sparse": r.matrix() is not None and not isinstance(r.matrix(), np.ndarray)}
        return out

    def scale_statistics(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per shard, the sums of :func:`dpreg.preprocess.private_scales`."""
        from .shards import scale_statistics

        return {i: scale_statistics(r) for i, r in self.readers.items()}

    def prepare(self, prep, labels: str, label_map, loss, target=None) -> dict:
        """Prepare every shard (:func:`~.shards.prepare_shard`; labels through
        :func:`~.shards.map_labels`) and load or compile its kernels (one
        gradient on one row); returns per shard the problem's dimension and the
        bytes it holds, and this process's memory."""
        self._threads()
        held = {}
        for s in self.sources:
            r = self.readers.pop(s.index)
            y = map_labels(self.labels.pop(s.index), labels, label_map, target, r.where)
            pb = prepare_shard(r, y, prep, loss)
            pb.gradient(np.zeros(pb.d), np.zeros(1, dtype=np.int64))  # kernels loaded before the run
            self.problems[s.index] = pb
            held[s.index] = {"d": int(pb.d), "bytes": _held_bytes(pb)}
        return {"shards": held, "memory": self.memory()}

    def memory(self) -> dict:
        """This process's memory: RSS when the holder was made, now, and at its peak; bytes held."""
        return {"pid": os.getpid(), "rss_start": self.rss_start, "rss": rss_bytes(), "peak_rss": peak_rss_bytes(),
                "held_bytes": sum(_held_bytes(pb) for pb in self.problems.values()), **self.counters()}

    # -------------------------------------------------------------- sums
    def clipped_sums(self, w, w_prev, parts: dict, clip: float) -> dict:
        """Per shard of ``parts`` (shard -> local row numbers, or None for all
        its rows): ``(clipped gradient sum, clipped count)`` at ``w``, or of
        the gradient differences between ``w_prev`` and ``w`` when ``w_prev``
        is given (:meth:`dpreg.problem.Problem.clipped_grad_sum` / ``clipped_diff_sum``)."""
        def run():
            out = {}
            for i, part in parts.items():
                pb = self.problems[i]
                ix = _rows(part)
                s, k = (pb.clipped_grad_sum(w, ix, clip) if w_prev is None else
                        pb.clipped_diff_sum(w, w_prev, ix, clip))
                out[i] = (s, int(k))
            return out

        return self._timed(run)

    def clipped_hessian_sums(self, w, parts: dict, clip: float) -> dict:
        """Per shard: ``(clipped data-Hessian sum, clipped count)``."""
        def run():
            out = {}
            for i, part in parts.items():
                ix = _rows(part)
                H, k = self.problems[i].clipped_hessian_sum(w, self.problems[i].all_rows if ix is None else ix,
                                                            clip)
                out[i] = (H, int(k))
            return out

        return self._timed(run)

    def evaluate(self, what: str, w, v, parts: dict) -> dict:
        """Per shard, an exact (evaluation-only) quantity over its rows of
        ``parts``: "value", "gradient", "hvp" (along ``v``), "hessian" (the
        shard's mean), "correct" (records whose predicted class is their
        label), "classes" (label value -> records)."""
        return self._timed(lambda: self._evaluate(what, w, v, parts))

    def _evaluate(self, what, w, v, parts) -> dict:
        out = {}
        for i, part in parts.items():
            pb = self.problems[i]
            ix = _rows(part)
            if what == "value":
                out[i] = float(pb.value(w, ix))
            elif what == "gradient":
                out[i] = pb.gradient(w, ix)
            elif what == "hvp":
                out[i] = pb.hvp(w, v, ix)
            elif what == "hessian":
                out[i] = pb.hessian(w, ix)
            elif what == "correct":  # sign for two classes (-1/+1), the largest output for K (0..K-1)
                m = np.asarray(pb.decision_function(w))
                pred = np.argmax(m, axis=1) if m.ndim == 2 else np.sign(m)
                out[i] = int(np.sum(pred == pb.y)) if ix is None else int(np.sum(pred[ix] == pb.y[ix]))
            elif what == "classes":  # label value -> count
                vals, counts = np.unique(pb.y if ix is None else pb.y[ix], return_counts=True)
                out[i] = {float(v): int(c) for v, c in zip(vals, counts)}
            else:
                raise ValueError(f"unknown quantity {what!r}")
        return out


def _rows(part):
    return None if part is None else np.ascontiguousarray(part, dtype=np.int64)


def _held_bytes(pb) -> int:
    X = pb.X
    arrays = (X.data, X.indices, X.indptr) if not isinstance(X, np.ndarray) else (X,)
    return int(sum(a.nbytes for a in arrays) + pb.y.nbytes + 8 * pb.n)  # + the row norms the kernels keep


# ------------------------------------------------------------------ executors
class LocalExecutor:
    """Every shard held by one :class:`ShardWorker` in this process."""

    name = "local"

    def __init__(self, sources: Sequence[Any], opts: ShardOptions, threads: int | None = None):
        self.sources = list(sources)
        self.holders = [ShardWorker(self.sources, opts, threads)]
        self.groups = [[s.index for s in self.sources]]
        self.addresses = ["in-process"]

    def call(self, method: str, args: Sequence[tuple | None]) -> list:
        """``method(*args[k])`` on holder k (None: not called, no result),
        results in holder order."""
        return [None if a is None else getattr(h, method)(*a) for h, a in zip(self.holders, args)]

    def info(self) -> dict:
        return {"backend": self.name, "workers": 1, "addresses": self.addresses, "shards_per_worker":
                [len(g) for g in self.groups]}

    def close(self) -> None:
        self.holders = []


#: seconds to wait for a scheduler before giving up (``--scheduler`` that does not answer)
CONNECT_TIMEOUT = 10.0


class DaskExecutor:
    """One :class:`ShardWorker` actor per Dask worker (see the module docstring).

    ``scheduler``: None (start a LocalCluster of ``workers`` processes on
    127.0.0.1, each with ``memory_limit``; closed with the executor) or an
    address.  ``threads``: numba threads per holder (default: the cores
    shared out over a LocalCluster's workers; a remote worker's numba default).
    ``connect_timeout``: seconds to reach the scheduler and see a worker.
    ``timeout``: seconds one call may take (None: no limit)."""

    name = "dask"

    def __init__(self, sources: Sequence[Any], opts: ShardOptions, *, scheduler: str | None = None,
                 workers: int | None = None, threads: int | None = None, memory_limit=None,
                 connect_timeout: float = CONNECT_TIMEOUT, timeout: float | None = None):
        try:
            from distributed import Client, LocalCluster
        except ImportError:  # pragma: no cover - depends on the environment
            raise ParameterError("--backend dask needs the distributed extra: "
                                 "pip install 'dpreg[distributed]'") from None
        self.sources = list(sources)
        self.timeout = timeout
        self.cluster = self.client = None
        self._holders: list = []
        self.actors: list = []
        self._quiet()
        try:
            if scheduler is None:
                n = int(workers) if workers else max(1, min(len(self.sources), os.cpu_count() or 1))
                if threads is None:
                    threads = max(1, (os.cpu_count() or 1) // n)
                # the workers' own warnings stay quiet: their shards are "unmanaged memory" to Dask by design,
                # and a worker that is lost ends the run with one line of its own
                self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                            dashboard_address=None, memory_limit=memory_limit or "auto",
                                            silence_logs=logging.ERROR)
                self.client = Client(self.cluster, set_as_default=False, timeout=connect_timeout)
            else:
                probe_scheduler(scheduler, connect_timeout)
                self.client = Client(scheduler, set_as_default=False, timeout=connect_timeout)
                self.client.wait_for_workers(1, timeout=connect_timeout)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise DpregError(f"cannot reach the Dask scheduler {scheduler}: {_one_line(exc)} (gave up after "
                             f"{connect_timeout:g} s)") from None
        except BaseException:
            self.close()
            raise
        try:
            self._place(opts, threads)
        except BaseException:
            self.close()
            raise

    def _place(self, opts, threads) -> None:
        addrs = sorted(self._workers())
        if not addrs:
            raise DpregError("the Dask cluster has no workers")
        self.groups_pos = assign([s.bytes for s in self.sources], len(addrs))
        self.groups = [[self.sources[i].index for i in g] for g in self.groups_pos]
        self.addresses = addrs[:len(self.groups)]
        for g, addr in zip(self.groups_pos, self.addresses):
            srcs = [self.sources[i] for i in g]
            arrays = None
            if isinstance(srcs[0], ArrayShard):  # arrays: scattered to the worker that holds them
                arrays = [tuple(self.client.scatter([s.X, s.y], workers=[addr], direct=True)) for s in srcs]
                srcs = [_Stub(s.index) for s in srcs]
            fut = self.client.submit(ShardWorker, srcs, opts, threads, arrays, actor=True, workers=[addr],
                                     allow_other_workers=False, pure=False)
            self._holders.append(fut)
        with self.client.as_current():  # the actors' proxies bind to this client (not a default one)
            for j, fut in enumerate(self._holders):
                self.actors.append(self._wait(j, fut, actor=True))

    def call(self, method: str, args: Sequence[tuple | None]) -> list:
        """``method(*args[k])`` on actor k (None: not called, no result),
        concurrently; results in actor order.  The answers are collected in
        the client's event loop, all in one hand-over per half second (not one
        per actor), watching that every called worker is still there."""
        pending = {j: getattr(a, method)(*x) for j, (a, x) in enumerate(zip(self.actors, args)) if x is not None}
        out: list = [None] * len(args)
        start = time.monotonic()
        while pending:
            try:
                got = self.client.sync(_settle, list(pending.items()), callback_timeout=0.5)
            except (TimeoutError, _dask_timeout()):
                got = []
            for j, ok, value in got:
                del pending[j]
                if ok:
                    out[j] = value
                elif isinstance(value, DpregError):
                    raise value
                elif isinstance(value, OSError) or self._lost(j):  # the worker cannot be reached, or is gone
                    raise self._lost_error(j) from None
                else:
                    raise value
            for j in pending:
                if self._lost(j):
                    raise self._lost_error(j)
            if pending and self.timeout is not None and time.monotonic() - start > self.timeout:
                j = min(pending)
                raise DpregError(f"data-parallel run aborted: the Dask worker {self.addresses[j]} did not answer "
                                 f"within {self.timeout:g} s; no record written")
        return out

    def _wait(self, j: int, fut, actor: bool = False):
        """The result of actor j's call (or, ``actor``, the actor itself),
        watching that its worker is still there."""
        start = time.monotonic()
        while True:
            try:
                return fut.result(timeout=0.5)
            except DpregError:
                raise
            except (TimeoutError, _dask_timeout()):
                pass
            except Exception as exc:  # noqa: BLE001 - the holder's own error, or the transport's
                if isinstance(exc, OSError) or self._lost(j):
                    raise self._lost_error(j) from None
                raise
            if self._lost(j):
                raise self._lost_error(j)
            if self.timeout is not None and time.monotonic() - start > self.timeout:
                raise DpregError(f"data-parallel run aborted: the Dask worker {self.addresses[j]} did not answer "
                                 f"within {self.timeout:g} s; no record written")

    def _lost(self, j: int) -> bool:
        """Whether actor j's worker is gone: its actor's task no longer held
        (while the actor is being made: lost or cancelled), or its worker no
        longer in the scheduler's list (a restarted worker has another address)."""
        st = self._holders[j].status
        if (st != "finished") if j < len(self.actors) else (st in ("lost", "cancelled")):
            return True
        try:
            workers = self._workers()
        except Exception:  # noqa: BLE001 - no answer now (a busy scheduler): the holder's status decides
            return False
        return self.addresses[j] not in workers

    def _workers(self) -> dict:
        """The scheduler's workers now (address -> information), asked of the
        scheduler itself: ``Client.scheduler_info`` returns the client's cached
        identity, which its periodic refresh overwrites with one that lists no
        worker - a worker "gone" that never left."""
        return dict(self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"])

    def _lost_error(self, j: int) -> DpregError:
        return DpregError(f"data-parallel run aborted: the Dask worker {self.addresses[j]} holding shards "
                          f"{_ranges(self.groups[j])} was lost (killed, out of memory or disconnected); "
                          f"no record written")

    def info(self) -> dict:
        return {"backend": self.name, "workers": len(self.actors), "addresses": list(self.addresses),
                "shards_per_worker": [len(g) for g in self.groups],
                "cluster": "LocalCluster (processes, 127.0.0.1)" if self.cluster is not None else "scheduler"}

    _LOGGERS = ("distributed", "tornado.application")

    def _quiet(self) -> None:
        """A lost worker makes distributed log tracebacks; the run reports one line instead."""
        self._levels = {n: logging.getLogger(n).level for n in self._LOGGERS}
        for n in self._LOGGERS:
            logging.getLogger(n).setLevel(logging.CRITICAL)

    def _loud(self) -> None:
        for n, lvl in getattr(self, "_levels", {}).items():
            logging.getLogger(n).setLevel(lvl)

    def close(self) -> None:
        try:
            for f in self._holders:
                try:
                    f.release()
                except Exception:  # noqa: BLE001 - closing after a failure
                    pass
            self._holders, self.actors = [], []
            if self.client is not None:
                self.client.close()
            if self.cluster is not None:
                self.cluster.close()
        finally:
            self.client = self.cluster = None
            self._loud()


async def _settle(futs: list) -> list:
    """``(j, ok, result or exception)`` of every ``(j, actor future)``, awaited
    in the client's event loop."""
    out = []
    for j, f in futs:
        try:
            out.append((j, True, await f))
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            out.append((j, False, exc))
    return out


def probe_scheduler(address: str, timeout: float) -> None:
    """Ask ``address`` who it is (Dask's ``identity`` request, over Dask's own
    comm layer) and wait at most ``timeout`` seconds for a Dask scheduler to
    answer; DpregError otherwise.  A ``Client`` would wait without end on a
    peer that accepts the connection and never answers; this probe cannot."""
    import asyncio
    import concurrent.futures

    from distributed.comm import connect
    from distributed.security import Security

    args = Security().get_connection_args("client")  # TLS as Dask's configuration says (tls:// addresses)

    async def ask():
        comm = await connect(address, timeout=timeout, **args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()

    # its own thread and event loop: the caller may be running one (a notebook)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            who = pool.submit(asyncio.run, asyncio.wait_for(ask(), timeout)).result()
        except (OSError, TimeoutError, asyncio.TimeoutError, ValueError, TypeError) as exc:
            raise DpregError(f"cannot reach the Dask scheduler {address}: {_one_line(exc) or 'no answer'} "
                             f"(gave up after {timeout:g} s)") from None
    if not isinstance(who, dict) or who.get("type") != "Scheduler":
        raise DpregError(f"cannot reach the Dask scheduler {address}: what answers there is not a Dask scheduler")


class _Stub:
    """A shard's index, standing in for an :class:`ArrayShard` whose arrays travel separately."""

    def __init__(self, index: int):
        self.index = index


def _dask_timeout():
    from distributed.utils import TimeoutError as DaskTimeout  # noqa: N814

    return DaskTimeout


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _ranges(ix: Sequence[int]) -> str:
    ix = list(ix)
    return f"{ix[0]}-{ix[-1]}" if len(ix) > 1 and ix[-1] - ix[0] == len(ix) - 1 else ",".join(map(str, ix))


def make_executor(backend: str, sources: Sequence[Any], opts: ShardOptions, *, scheduler=None, workers=None,
                  threads=None, memory_limit=None, connect_timeout: float = CONNECT_TIMEOUT):
    """The executor of ``backend`` ("local" or "dask") holding ``sources``."""
    if backend == "local":
        if scheduler is not None:
            raise ParameterError("a scheduler address needs --backend dask")
        return LocalExecutor(sources, opts, threads)
    if backend == "dask":
        return DaskExecutor(sources, opts, scheduler=scheduler, workers=workers, threads=threads,
                            memory_limit=memory_limit, connect_timeout=connect_timeout)
    raise ParameterError(f"backend must be local or dask, got {backend!r}")


def split_arrays(X, y, shards: int) -> list[ArrayShard]:
    """``(X, y)`` cut into ``shards`` consecutive blocks of about equal size."""
    n = X.shape[0]
    k = max(1, min(int(shards), n))
    cuts = [round(n * i / k) for i in range(k + 1)]
    return [ArrayShard(i, X[cuts[i]:cuts[i + 1]], y[cuts[i]:cuts[i + 1]]) for i in range(k)]

