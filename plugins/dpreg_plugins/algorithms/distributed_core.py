"""Client/server machinery of the distributed algorithms (Alg 3 and Alg 4 of
perturbed-sgd-adaptive-spider-distributed-sosp.txt).  Not a plugin (registers
nothing); a library module used by ``distributed-spider`` and
``distributed-selection``:

* :func:`shard` - deterministic sharding of the records over m clients by
  public information only (a permutation of the record indices from a public
  seed, consecutive blocks of the records' order, or a client assignment given
  with the data - never the labels or features), each shard split into a
  training part and an optional fresh *selection share*;
* :class:`ClientNode` - one client: its shard, its passes over its shard, its own
  noise mechanism (seeded from a stream derived from the run's secret seed), its
  SPIDER running sum and its own accountant, which refuses any release its
  (epsilon, delta) budget does not cover (inter-client record-level DP: the
  client trusts neither the server nor the other clients);
* backends that hold the clients and call them round by round:
  :class:`LocalBackend` (in-process, sequential; the default and the tests')
  and :class:`DaskBackend` (each client a Dask actor pinned to one worker, its
  shard scattered once to that worker and kept there; one thread per worker).
  Both count the floats and pickled bytes sent each way.

Determinism and safety.  A client's noise is a pure function of (its secret
seed stream, phase, step): the mechanism's generator is consumed in a fixed
order by a fixed sequence of rounds.  :meth:`ClientNode.step` is idempotent
in the round number: asked again for the round it has just answered it re-sends
the *same* message (no new draw, no new charge), and it refuses any other
out-of-order round, so a client step is never retried with fresh randomness.
A client whose worker is lost aborts the run with one :class:`DpregError`.
"""
from __future__ import annotations

import logging
import math
import pickle
import time
from typing import Any, Sequence

import numpy as np

from dpreg.access import Passes
from dpreg.errors import DpregError, ParameterError
from dpreg.problem import Problem, make_problem

from .spider_core import SpiderEstimator

__all__ = ["shard", "read_assignment", "ClientNode", "LocalBackend", "DaskBackend", "make_backend", "client_stream"]

SHARDINGS = ("iid", "contiguous", "given")
BACKENDS = ("local", "dask")


# ----------------------------------------------------------------- sharding
def shard(n: int, m: int, *, scheme: str = "iid", seed: int = 0, selection_fraction: float = 0.0,
          assignment=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Split record indices ``0..n-1`` over ``m`` clients; returns one
    ``(train_rows, selection_rows)`` pair of sorted int64 arrays per client.

    This simulates *where the data lives* (public set-up, like a test split):
    a deterministic function of public information only - n, m, the scheme,
    its public ``seed`` and a given ``assignment`` - never of a record's label
    or features, so changing one record moves no other record between clients
    (each client's epsilon then bounds the run against a neighbouring data
    set).  ``iid``: a permutation of the indices drawn from ``seed``, cut into
    m near-equal parts (m = 1 keeps every record, in order).  ``contiguous``:
    the records in their order, cut into m consecutive near-equal blocks (the
    heterogeneity of data gathered client by client).  ``given``:
    ``assignment[i]`` (an integer in [0, m)) is the client of record i - a
    public client assignment given with the data.  Each shard then keeps the
    last ``ceil(selection_fraction * n_j)`` records of a ``seed``-permutation
    of itself as its selection share (fresh data for Alg 4, disjoint from
    training).
    """
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ParameterError(f"records must be a positive integer, got {n!r}")
    n = int(n)
    if not (isinstance(m, (int, np.integer)) and 1 <= m <= n):
        raise ParameterError(f"clients must be an integer in [1, n={n}], got {m!r}")
    if scheme not in SHARDINGS:
        raise ParameterError(f"sharding must be one of {', '.join(SHARDINGS)}, got {scheme!r}")
    if (scheme == "given") != (assignment is not None):
        raise ParameterError("sharding=given takes the client assignment (assignment=FILE), and only it does")
    if not 0.0 <= selection_fraction < 1.0:
        raise ParameterError(f"selection_fraction must be in [0, 1), got {selection_fraction!r}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5A4D, int(m)]))
    if scheme == "given":
        a = np.asarray(assignment)
        if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer) or a.min() < 0 or a.max() >= m:
            raise ParameterError(f"the client assignment must give each of the {n} records a client in 0..{m - 1} "
                                 f"(got {a.size} entries{'' if a.size == 0 else f' in {a.min()}..{a.max()}'})")
        parts = [np.flatnonzero(a == j).astype(np.int64) for j in range(m)]
    elif m == 1:
        parts = [np.arange(n, dtype=np.int64)]
    elif scheme == "iid":
        parts = np.array_split(rng.permutation(n).astype(np.int64), m)
    else:  # contiguous
        parts = np.array_split(np.arange(n, dtype=np.int64), m)
    out = []
    for j, rows in enumerate(parts):
        rows = np.sort(rows)
        k = int(math.ceil(selection_fraction * rows.size)) if selection_fraction > 0 else 0
        if rows.size - k < 2:
            raise ParameterError(
                f"client {j} holds {rows.size} records ({scheme} sharding over {m} clients): too few to train; "
                f"use fewer clients")
        if k:
            sel = np.sort(rng.permutation(rows)[rows.size - k:])
            rows = np.setdiff1d(rows, sel, assume_unique=True)
        else:
            sel = np.zeros(0, dtype=np.int64)
        out.append((rows.astype(np.int64), sel.astype(np.int64)))
    return out


def read_assignment(path: str, n: int):
    """The public client assignment of ``sharding=given``: a text file with
    one integer per line (record i's client, in the data's record order) or
    a ``.npy`` integer vector; a one-line ParameterError for anything else."""
    try:
        if str(path).endswith(".npy"):
            a = np.load(path, allow_pickle=False)
        else:
            a = np.loadtxt(path, dtype=np.float64, ndmin=1, comments="#")
    except (OSError, ValueError) as exc:
        msg = (exc.strerror if isinstance(exc, OSError) else None) or str(exc).splitlines()[0]
        raise ParameterError(f"cannot read the client assignment {path}: {msg}") from None
    try:
        f = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        f = np.full(2, np.nan)
    if f.ndim != 1 or not np.all(np.isfinite(f)) or not np.array_equal(f, np.round(f)):
        raise ParameterError(f"the client assignment {path} must be one integer per record")
    a = f
    if a.size != n:
        raise ParameterError(f"the client assignment {path} has {a.size} entries for {n} records (one per "
                             f"training record, in the data's order)")
    return a.astype(np.int64)


def client_stream(base: str, j: int, m: int) -> str:
    """Name of client j's randomness stream ``base``: with one client the
    distributed algorithm *is* the single-machine one and uses its stream
    names (so m = 1 reproduces it bit for bit); otherwise ``"<base> client j"``.
    Streams of different names are independent (Algorithm.seed_sequence)."""
    return base if m == 1 else f"{base} client {j}"


# ------------------------------------------------------------------ client
class ClientNode:
    """One client of the distributed adaptive DP-SPIDER (Alg 3, lines 4-8 and
    11-15) and of the distributed selection (Alg 4, lines 2-5).

    Constructed (on its worker, for the dask backend) from its shard alone:
    ``X``, ``y`` hold its training rows followed by ``n_select`` selection rows.
    ``seeds`` maps "noise", "batches" and "selection" to SeedSequences derived
    on the server from the run's secret root seed: the client gets its own
    streams, never the root seed.  ``accountant_cls(epsilon, delta, relation)``
    is the client's own accountant; every release is charged to it before it
    is computed (BudgetExceededError: nothing released).  ``config`` holds the
    public plan: noise multiplier z, horizon, clip C, diff_clip M', batch1,
    batch2, passes (over the shard; default 1), epsilon, delta, relation, and ``threads`` (numba threads to use
    inside the client's calls; None: leave the process setting).
    """

    def __init__(self, j: int, X: np.ndarray, y: np.ndarray, *, n_select: int, loss, noise_cls,
                 accountant_cls, seeds: dict, config: dict):
        self.j = int(j)
        self.cfg = dict(config)
        self.threads = self.cfg.get("threads")
        n_train = X.shape[0] - int(n_select)
        self.accountant = accountant_cls(self.cfg["epsilon"], self.cfg["delta"], self.cfg["relation"])
        row_bound = float(self.cfg.get("row_bound", 1.0))
        self.problem = make_problem(loss, X[:n_train], y[:n_train], name=f"client {j}", row_bound=row_bound)
        self.select_problem = (make_problem(loss, X[n_train:], y[n_train:], name=f"client {j} selection share",
                                            row_bound=row_bound) if n_select else None)
        # the client's own secret stream; the plan's passes over its shard, each started by the server
        self.access = Passes(n_train, np.random.default_rng(seeds["batches"]), self.cfg.get("passes", 1))
        self.est = SpiderEstimator(self.problem, noise_cls, noise_multiplier=self.cfg["noise_multiplier"],
                                   horizon=self.cfg["horizon"], accountant=self.accountant,
                                   seed=seeds["noise"], clip=self.cfg["clip"],
                                   smoothness=self.cfg["diff_clip"], diff_cap=2 * self.cfg["clip"])
        self._select_seed = seeds.get("selection")
        self._round = 0
        self._last: np.ndarray | None = None
        self._selected = None
        self.clipped = 0

    def _threads(self):
        if self.threads:
            import numba

            numba.set_num_threads(int(self.threads))

    def step(self, t: int, mode: str, x: np.ndarray, x_prev: np.ndarray | None, pass_no: int = 1) -> np.ndarray:
        """Round ``t`` of Alg 3: O1 (``mode == "O1"``: next batch1 unused
        records, a new running sum at ``x``) or O2 (next batch2, the clipped
        difference between ``x_prev`` and ``x`` added); returns the client's
        noisy running estimate g_j.  Asked again for round t, returns the same
        message; any other round but t + 1 is refused.  ``pass_no``: the
        server's pass; a round of the next pass (an O1 round) starts a fresh
        secret permutation of the client's shard under a new pass id, any
        other change of pass is refused."""
        if t == self._round and self._last is not None:
            return self._last  # a recomputed call re-sends the same message: no new draw
        if t != self._round + 1:
            raise RuntimeError(f"client {self.j}: round {t} requested after round {self._round}")
        if pass_no != self.access.number:
            if pass_no != self.access.number + 1 or mode != "O1" or not self.access.next_pass():
                raise RuntimeError(f"client {self.j}: pass {pass_no} ({mode}) requested in pass "
                                   f"{self.access.number} of {self.access.passes}")
        self._threads()
        x = np.asarray(x, dtype=float)
        if mode == "O1":
            idx, part = self.access.take(self.cfg["batch1"])  # Exhausted: nothing released
            rel = self.est.refresh(x, idx, part)
        elif mode == "O2":
            idx, part = self.access.take(self.cfg["batch2"])
            rel = self.est.update(x, np.asarray(x_prev, dtype=float), idx, part)
        else:
            raise ValueError(f"mode must be 'O1' or 'O2', got {mode!r}")
        self.clipped += rel.clipped
        self._round = t
        self._last = np.array(rel.value, dtype=float)
        return self._last

    def selection_release(self, candidates: np.ndarray, z_grad: float, z_hess: float,
                          grad_clip: float, hess_clip: float) -> tuple[np.ndarray, np.ndarray]:
        """Alg 4 lines 3-5 on this client's selection share S_j (fresh records,
        used by no training release): for every candidate x_t, the clipped mean
        gradient + N(0, (z_grad * f C / n_s)^2 I) and the clipped mean Hessian
        (each record's rank-one data part scaled to norm <= M, so Frobenius
        sensitivity f M / n_s) + a symmetric Gaussian matrix whose upper
        triangle has std z_hess * f M / n_s; f = 2 (replace-one) or 1.  Both
        are charged to the client's accountant, group "selection", before
        anything is computed.  Returns (K x d gradients, K x d(d+1)/2 packed
        upper triangles).  Called once per run (a second call is refused)."""
        from dpreg.accounting import composed, gaussian_event, self_composed
        from dpreg.interfaces import Participation, charge

        if self._selected is not None:
            return self._selected  # same message again, nothing new released
        pb = self.select_problem
        if pb is None:
            raise ParameterError(f"client {self.j} holds no selection share (selection_fraction = 0)")
        self._threads()
        W = np.atleast_2d(np.asarray(candidates, dtype=float))
        K, d = W.shape
        event = composed([self_composed(gaussian_event(z_grad), K), self_composed(gaussian_event(z_hess), K)])
        # the selection share and the training batches are disjoint parts of one
        # partition of the shard: one pass, so they compose in parallel
        charge(self.accountant, event, Participation.disjoint("selection", pass_id=self.access.pass_id),
               label="distributed selection")
        f = self.accountant.sensitivity_factor
        sg, sh = z_grad * f * grad_clip / pb.n, z_hess * f * hess_clip / pb.n
        rng = np.random.default_rng(self._select_seed)
        iu = np.triu_indices(d)
        grads = np.empty((K, d))
        hess = np.empty((K, iu[0].size))
        for k, w in enumerate(W):
            s, _ = pb.clipped_grad_sum(w, None, grad_clip)
            grads[k] = s / pb.n + rng.standard_normal(d) * sg
            H = self._clipped_data_hessian(pb, w, hess_clip)
            hess[k] = H[iu] + rng.standard_normal(iu[0].size) * sh
        self._selected = (grads, hess)
        return self._selected

    @staticmethod
    def _clipped_data_hessian(pb: Problem, w: np.ndarray, clip: float) -> np.ndarray:
        """Mean Hessian over the selection share, each record's part clipped to
        operator (= Frobenius, rank one) norm ``clip``, plus the
        data-independent regularizer's Hessian."""
        return pb.hessian(w, None, clip=clip)

    def status(self) -> dict:
        """The client's public counters and its accountant's state."""
        return {"client": self.j, "records": self.problem.n,
                "selection_records": 0 if self.select_problem is None else self.select_problem.n,
                "records_used": self.access.used, "passes_made": self.access.number,
                "gradient_evaluations": self.est.gradient_evaluations,
                "o1_queries": self.est.phases, "o2_queries": self.est.o2_calls,
                "longest_phase": self.est.max_phase_steps, "clipped_terms": self.clipped,
                "privacy": self.accountant.state()}


# ---------------------------------------------------------------- backends
class _Traffic:
    """Floats and pickled bytes sent each way (server -> clients, clients -> server)."""

    def __init__(self):
        self.calls = 0
        self.floats_down = self.floats_up = 0
        self.bytes_down = self.bytes_up = 0

    def note(self, args: Sequence[Any], results: Sequence[Any]) -> None:
        m = len(results)
        self.calls += 1
        self.floats_down += m * _floats(args)
        self.bytes_down += m * len(pickle.dumps(tuple(args), protocol=5))
        for r in results:
            self.floats_up += _floats(r)
            self.bytes_up += len(pickle.dumps(r, protocol=5))

    def as_dict(self) -> dict:
        return {"calls": self.calls, "floats_down": self.floats_down, "floats_up": self.floats_up,
                "bytes_down": self.bytes_down, "bytes_up": self.bytes_up}


def _floats(obj) -> int:
    """Numbers in a message (strings count as one float: the mode flag)."""
    if obj is None:
        return 0
    if isinstance(obj, np.ndarray):
        return int(obj.size)
    if isinstance(obj, (tuple, list)):
        return sum(_floats(o) for o in obj)
    return 1


class LocalBackend:
    """The clients as plain objects in this process, called one after another."""

    name = "local"

    def __init__(self, specs: Sequence[dict]):
        self.nodes = [ClientNode(**s) for s in specs]
        self.traffic = _Traffic()

    def __len__(self) -> int:
        return len(self.nodes)

    def call(self, method: str, *args) -> list:
        """``method(*args)`` on every client (same broadcast), results in client order."""
        out = [getattr(n, method)(*args) for n in self.nodes]
        if method != "status":
            self.traffic.note(args, out)
        return out

    def close(self) -> None:
        self.nodes = []


class DaskBackend:
    """Each client a Dask actor on its own worker (``distributed`` extra).

    ``scheduler=None`` starts a ``LocalCluster(n_workers=m, threads_per_worker=1,
    processes=True)`` on 127.0.0.1: every client in its own worker process, its
    shard and its noise state in no other address space; an address connects to a running cluster (start its
    workers with ``--nthreads 1`` and ``NUMBA_NUM_THREADS=1``), clients placed
    round-robin on its workers.  Every client's shard is scattered once to its
    worker, and ``client.submit(ClientNode, ..., actor=True, workers=[addr],
    allow_other_workers=False)`` keeps the client there.  A round calls the
    actors' method concurrently and waits; a lost worker (its actor's task no
    longer held) or a round longer than ``timeout`` seconds aborts the run
    with a :class:`DpregError` - the step is never retried elsewhere.

    In-process workers (a cluster started with ``processes=False``) would call
    the numba kernels from several threads at once, which needs a thread-safe
    numba threading layer (``omp`` or ``tbb``; ``workqueue`` is not); separate
    worker processes do not.
    """

    name = "dask"

    def __init__(self, specs: Sequence[dict], *, scheduler: str | None = None, timeout: float = 3600.0):
        try:
            from distributed import Client, LocalCluster
        except ImportError:  # pragma: no cover - depends on the environment
            raise ParameterError("backend=dask needs the distributed extra: pip install 'dpreg[distributed]'") from None
        self.traffic = _Traffic()
        self.timeout = float(timeout)
        self._quiet()
        m = len(specs)
        self.cluster = None
        try:
            if scheduler is None:
                self.cluster = LocalCluster(n_workers=m, threads_per_worker=1, processes=True, host="127.0.0.1",
                                            dashboard_address=None)
                self.client = Client(self.cluster, set_as_default=False)
            else:
                from dpreg.backends.workers import probe_scheduler

                probe_scheduler(scheduler, 30.0)  # a peer that accepts and never answers would hang Client()
                self.client = Client(scheduler, set_as_default=False, timeout=30)
        except OSError as exc:
            self._loud()
            raise DpregError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
        except DpregError:
            self._loud()
            raise
        try:
            workers = sorted(self.client.scheduler_info()["workers"])
            if not workers:
                raise DpregError("the Dask cluster has no workers")
            self.addresses = [workers[j % len(workers)] for j in range(m)]
            self._holders = []  # the actors' task futures: keep them, or the actors are released
            self.actors = []
            for s, addr in zip(specs, self.addresses):
                s = dict(s)
                s["config"] = dict(s["config"], threads=1)
                fx, fy = self.client.scatter([s.pop("X"), s.pop("y")], workers=[addr], direct=True)
                fut = self.client.submit(ClientNode, s.pop("j"), fx, fy, **s, actor=True,
                                         workers=[addr], allow_other_workers=False, pure=False)
                self._holders.append(fut)
                with self.client.as_current():  # the actor's proxy binds to this client
                    self.actors.append(fut.result(timeout=self.timeout))
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, method: str, *args) -> list:
        futs = [getattr(a, method)(*args) for a in self.actors]
        out: list = [None] * len(futs)
        pending = set(range(len(futs)))
        start = time.monotonic()
        while pending:
            for j in sorted(pending):
                if futs[j].done():
                    try:
                        out[j] = futs[j].result()
                    except DpregError:
                        raise
                    except Exception:  # the client's own error, or the transport's
                        if self._holders[j].status != "finished":
                            raise self._lost(j) from None
                        raise
                    pending.discard(j)
            for j in pending:
                if self._holders[j].status != "finished":
                    raise self._lost(j)
            if pending:
                if time.monotonic() - start > self.timeout:
                    raise DpregError(f"distributed run aborted: client(s) {sorted(pending)} did not answer "
                                     f"within {self.timeout:g} s; no record written")
                time.sleep(0.0005)
        if method != "status":
            self.traffic.note(args, out)
        return out

    def _lost(self, j: int) -> DpregError:
        return DpregError(f"distributed run aborted: the Dask worker {self.addresses[j]} holding client {j} "
                          f"was lost (its shard, cursor and noise state are gone; a client step is never "
                          f"retried with fresh randomness); no record written")

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
            for f in getattr(self, "_holders", []):
                f.release()
            self._holders = []
            self.actors = []
            if getattr(self, "client", None) is not None:
                self.client.close()
            if self.cluster is not None:
                self.cluster.close()
        finally:
            self._loud()


def make_backend(name: str, specs: Sequence[dict], *, scheduler: str | None = None):
    """The backend ``name`` ("local" or "dask") holding one client per spec."""
    if name == "local":
        if scheduler is not None:
            raise ParameterError("a scheduler address needs backend=dask")
        return LocalBackend(specs)
    if name == "dask":
        return DaskBackend(specs, scheduler=scheduler)
    raise ParameterError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
