"""The problem protocol over shards held elsewhere.

:class:`ShardedProblem` is what an algorithm receives when its data are
sharded.  The algorithm draws its batches exactly as on one machine - from its
own secret generators, as global record numbers ``0..n-1`` (record i of shard
s is number ``offsets[s] + i``, the shards in source order) - and calls the
same methods; the problem routes each batch's row numbers to the shards that
hold them, each holder computes its shards' clipped sums with the ordinary
kernels (:class:`~dpreg.problem.Problem`) and sends one d-vector per shard,
and the driver adds them **in shard order**.  The noise, the accountant and
the iterates never leave the driver; no record ever reaches it.

Reproducibility: each shard's sum is a function of (the shard, its rows of
the batch, the point), computed by one kernel call whose result does not
depend on the thread count, and the shard sums are added in one fixed order:
so a seeded run gives the same bits whether the shards are held by the
driver (``--backend local``), one worker process or many, on this machine or
a remote cluster.  Cutting the same records into other shards changes the
rounding of the sums (the same law, other bits); with one shard the sums are
the plain problem's own.

The compiled multi-step paths (``sgd_steps``, ``spider_steps``) need every
row in the calling process and are not offered (``*_available()`` is False):
algorithms then take their steps one by one, each step one round trip.
"""
from __future__ import annotations

import numpy as np

from ..errors import ParameterError

_I32 = np.iinfo(np.int32).max


class ShardedProblem:
    """The problem protocol of :mod:`dpreg.problem` over an executor's shards.

    ``executor``: a :class:`~.workers.LocalExecutor` or
    :class:`~.workers.DaskExecutor` whose holders have prepared their shards;
    ``rows``: every shard's record count, in source order; ``d``: the
    problem's dimension; ``proto``: a one-record problem of the same loss,
    dimension and row bound, for the data-independent parts (constants,
    initial point, predictions on given rows)."""

    def __init__(self, executor, loss, rows, d: int, proto, name: str = "", row_bound: float = 1.0):
        self.executor = executor
        self.loss = loss
        self.name = name
        self.row_bound = float(row_bound)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.offsets = np.zeros(len(self.rows) + 1, dtype=np.int64)
        np.cumsum(self.rows, out=self.offsets[1:])
        self.n = int(self.offsets[-1])
        self.d = int(d)
        self._proto = proto
        # shard -> (holder, position in the holder's group): the route of its rows
        self._holder = np.empty(len(self.rows), dtype=np.int64)
        for k, g in enumerate(executor.groups):
            self._holder[np.asarray(g, dtype=np.int64)] = k
        self.calls = 0
        self.bytes_down = 0
        self.bytes_up = 0

    # ----------------------------------------------------------- public parts
    def constants(self) -> tuple[float, float, float]:
        return self._proto.constants()

    def initial_point(self, rng: np.random.Generator) -> np.ndarray:
        return self._proto.initial_point(rng)

    def decision_function(self, w: np.ndarray, X=None) -> np.ndarray:
        """Margins of the rows of a given ``X`` (the problem's own rows are not here)."""
        if X is None:
            raise ParameterError("the records of a sharded source stay on their holders; predict on given rows")
        return self._proto.decision_function(w, X)

    @property
    def shards(self) -> int:
        return len(self.rows)

    def _absent(self, what: str):
        raise ParameterError(f"{what} needs every record in one process; a sharded source serves the algorithms "
                             f"that reach the data through clipped sums only")

    @property
    def X(self):  # noqa: N802 - the protocol's name
        self._absent("the feature matrix X")

    @property
    def y(self):
        self._absent("the label vector y")

    @property
    def all_rows(self):
        self._absent("the row list all_rows")

    def sgd_steps_available(self, batch: float) -> bool:
        """False: compiled multi-step DP-SGD needs every row in this process."""
        return False

    def spider_steps_available(self) -> bool:
        """False: compiled multi-step dp-spider needs every row in this process."""
        return False

    def clipped_zo_sum(self, *a, **kw):
        self._absent("the zeroth-order oracle")

    # ---------------------------------------------------------------- routing
    def route(self, idx) -> tuple[list[dict], np.ndarray]:
        """``(parts, sizes)``: per holder, shard -> its local row numbers of
        the batch ``idx`` (global, in the batch's order within each shard;
        int32 where a shard has fewer than 2^31 records), or None when the
        batch holds every row of the shard once, in order (the kernels' full
        batch); ``sizes``: rows of the batch per shard.  ``idx`` None: every
        row of every shard."""
        S = len(self.rows)
        parts: list[dict] = [{} for _ in self.executor.groups]
        if idx is None:
            for s in range(S):
                parts[self._holder[s]][s] = None
            return parts, self.rows.copy()
        ix = np.asarray(idx)
        if ix.ndim != 1:
            raise ValueError(f"row numbers must be one-dimensional, got shape {ix.shape}")
        sizes = np.zeros(S, dtype=np.int64)
        b = ix.shape[0]
        if b == 0:
            return parts, sizes
        ix = ix.astype(np.int64, copy=False)
        step = np.diff(ix)
        ordered = b == 1 or int(step.min()) >= 0
        if ordered:
            if ix[0] < 0 or ix[-1] >= self.n:
                raise IndexError(f"row numbers must lie in [0, {self.n}), got {ix[0]}..{ix[-1]}")
            cuts = np.searchsorted(ix, self.offsets)
            for s in range(S):
                lo, hi = int(cuts[s]), int(cuts[s + 1])
                if hi == lo:
                    continue
                sizes[s] = hi - lo
                full = hi - lo == self.rows[s] and (hi - lo == 1 or int(step[lo:hi - 1].min()) > 0)
                parts[self._holder[s]][s] = None if full else self._local(ix[lo:hi], s)
            return parts, sizes
        if ix.min() < 0 or ix.max() >= self.n:
            raise IndexError(f"row numbers must lie in [0, {self.n})")
        sh = np.searchsorted(self.offsets, ix, side="right") - 1
        order = np.argsort(sh, kind="stable")
        cuts = np.searchsorted(sh[order], np.arange(S + 1))
        for s in range(S):
            lo, hi = int(cuts[s]), int(cuts[s + 1])
            if hi > lo:
                sizes[s] = hi - lo
                parts[self._holder[s]][s] = self._local(ix[order[lo:hi]], s)
        return parts, sizes

    def _local(self, rows: np.ndarray, s: int) -> np.ndarray:
        loc = rows - self.offsets[s]
        return loc.astype(np.int32) if self.rows[s] <= _I32 else loc

    def _call(self, method: str, parts: list[dict], make_args) -> dict:
        """``method(*make_args(parts[k]))`` on every holder k with rows of the
        batch (concurrently on a cluster); the per-shard results merged into
        one dict (shard -> result).  Counts the payload bytes each way."""
        args = [make_args(p) if p else None for p in parts]
        if all(a is None for a in args):
            return {}
        results = self.executor.call(method, args)
        out: dict = {}
        for a, r in zip(args, results):
            if a is not None:
                self.bytes_down += _payload(a)
                self.bytes_up += _payload(r)
                out.update(r)
        self.calls += 1
        return out

    # ------------------------------------------------------- clipped (private) sums
    def _clipped(self, w, w_prev, idx, clip):
        w = self._vec(w)
        wp = None if w_prev is None else self._vec(w_prev)
        parts, _ = self.route(idx)
        res = self._call("clipped_sums", parts, lambda p: (w, wp, p, float(clip)))
        return _add_in_order(res, self.d)

    def clipped_grad_sum(self, w: np.ndarray, idx, clip: float):
        """(sum over idx of per-record gradients each clipped to ``clip``,
        n_clipped): the shards' sums added in shard order."""
        return self._clipped(w, None, idx, clip)

    def clipped_diff_sum(self, w: np.ndarray, w_prev: np.ndarray, idx, clip: float):
        """(sum over idx of per-record gradient differences, each clipped to
        ``clip``, n_clipped): the shards' sums added in shard order."""
        return self._clipped(w, w_prev, idx, clip)

    def clipped_hessian_sum(self, w: np.ndarray, idx, clip: float):
        """(sum over idx of per-record data Hessians, each scaled to operator
        norm <= clip, n_clipped)."""
        w = self._vec(w)
        parts, _ = self.route(idx)
        res = self._call("clipped_hessian_sums", parts, lambda p: (w, p, float(clip)))
        tot, ncl = None, 0
        for s in sorted(res):
            H, k = res[s]
            tot = np.array(H, dtype=np.float64) if tot is None else tot + H
            ncl += int(k)
        return (np.zeros((self.d, self.d)) if tot is None else tot), ncl

    # ------------------------------------------------------- exact (evaluation)
    def _mean(self, what: str, w, v, idx):
        """The batch mean of an exact per-shard quantity: sum over shards of
        (rows of the batch in the shard) x (the shard's mean) / (batch size)."""
        parts, sizes = self.route(idx)
        b = int(sizes.sum())
        if b == 0:
            raise ValueError("an empty batch has no mean")
        res = self._call("evaluate", parts, lambda p: (what, w, v, p))
        tot = None
        for s in sorted(res):
            term = np.asarray(res[s], dtype=np.float64) * float(sizes[s])
            tot = term if tot is None else tot + term
        return tot / b

    def value(self, w: np.ndarray, idx=None) -> float:
        """Empirical loss (mean over the batch's rows), exact."""
        return float(self._mean("value", self._vec(w), None, idx))

    def gradient(self, w: np.ndarray, idx=None) -> np.ndarray:
        """Exact empirical gradient (mean over the batch's rows), unclipped."""
        return self._mean("gradient", self._vec(w), None, idx)

    def hvp(self, w: np.ndarray, v: np.ndarray, idx=None) -> np.ndarray:
        """Exact empirical Hessian-vector product."""
        return self._mean("hvp", self._vec(w), self._vec(v), idx)

    def hessian(self, w: np.ndarray, idx=None, clip: float = np.inf) -> np.ndarray:
        """Dense empirical Hessian (small d only); with a finite ``clip``,
        each record's data part scaled to operator norm <= clip."""
        w = self._vec(w)
        if np.isfinite(clip):
            parts, sizes = self.route(idx)
            H, _ = self.clipped_hessian_sum(w, idx, clip)
            H = H / int(sizes.sum())
            eye = np.eye(self.d)
            H += np.stack([self.loss.psi_hvp(w, eye[j]) for j in range(self.d)], axis=1)
            return 0.5 * (H + H.T)
        return self._mean("hessian", w, None, idx)

    def accuracy(self, w: np.ndarray) -> float:
        """Fraction of records whose predicted sign is their label (evaluation)."""
        parts, _ = self.route(None)
        res = self._call("evaluate", parts, lambda p: ("correct", self._vec(w), None, p))
        return sum(res[s] for s in sorted(res)) / self.n

    def class_counts(self) -> dict:
        """Records per label value (as the problem sees them), over every shard."""
        parts, _ = self.route(None)
        res = self._call("evaluate", parts, lambda p: ("classes", None, None, p))
        out: dict = {}
        for s in sorted(res):
            for v, c in res[s].items():
                out[v] = out.get(v, 0) + c
        return out

    def majority_rate(self) -> float:
        """The share of the most frequent class (the majority-class baseline)."""
        return max(self.class_counts().values()) / self.n

    def supports(self, capability: str) -> str | None:
        """None when the problem provides ``capability`` (an optional method of
        the protocol, :func:`dpreg.interfaces.problem_supports`), else why not:
        the multi-step and zeroth-order paths need every record in one process;
        the others are the loss's problem's own."""
        if capability in ("clipped_zo_sum", "sgd_steps", "spider_steps"):
            return "not on sharded data"
        from ..interfaces import problem_supports

        return problem_supports(self._proto, capability)

    def traffic(self) -> dict:
        """Calls and payload bytes (arrays and numbers, before framing) each way."""
        return {"calls": self.calls, "bytes_down": self.bytes_down, "bytes_up": self.bytes_up}

    def _vec(self, v) -> np.ndarray:
        v = np.ascontiguousarray(v, dtype=np.float64)
        if v.shape != (self.d,):
            raise ValueError(f"expected a vector of shape ({self.d},), got {v.shape}")
        return v


def _add_in_order(res: dict, d: int):
    """``(sum of the shards' vectors in shard order, total count)`` of
    ``{shard: (vector, count)}``; zeros for no shard."""
    tot, ncl = None, 0
    for s in sorted(res):
        v, k = res[s]
        tot = np.array(v, dtype=np.float64) if tot is None else tot + v
        ncl += int(k)
    return (np.zeros(d) if tot is None else tot), ncl


def _payload(obj) -> int:
    """Bytes of the arrays and numbers in a message (framing not counted)."""
    if obj is None:
        return 0
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(8 + _payload(v) for v in obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(_payload(o) for o in obj)
    if isinstance(obj, str):
        return len(obj)
    return 8
