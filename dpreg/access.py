"""Data access modes (privacy rule 3).

* :class:`SinglePass` - each record is used at most once.  Batches are drawn
  from a seeded random permutation; each batch gets a fresh group id within
  the object's *pass* (a fresh pass identity per object unless the caller
  gives one), and the accountant composes the disjoint groups of a pass in
  parallel and different passes sequentially (two single-pass stages over the
  same records add up).  ``take`` raises :class:`Exhausted` when too few
  unused records remain.
* :class:`Resample` - ERM over many passes: Poisson subsamples (amplified) or
  the full batch.
"""
from __future__ import annotations

import itertools
import math
from typing import Hashable

import numpy as np

from .interfaces import Participation


class Exhausted(Exception):
    """Not enough unused records for the requested batch (single pass)."""


_PASSES = itertools.count(1)


def new_pass_id() -> tuple:
    """A pass identity no other pass of this process has."""
    return ("pass", next(_PASSES))


def geometric_gaps(rng: np.random.Generator, q: float, size, cap: int) -> np.ndarray:
    """Geometric(q) draws (support 1, 2, ...) as int64, capped at ``cap + 1``:
    ``floor(E / lam) + 1`` with ``E`` standard exponential and ``lam =
    -log(1 - q)``, since ``P(floor(E / lam) >= k) = exp(-lam k) = (1 - q)^k``.
    One exponential (numpy's ziggurat) per draw: 22 against 40 us for 5,600
    draws of ``rng.geometric``, which takes a logarithm per draw.  The cap
    (any gap past it ends a sample of ``range(cap)`` anyway) keeps the
    conversion to int64 exact for tiny q."""
    e = rng.standard_exponential(size) * _inv_lam(q)
    np.minimum(e, float(cap), out=e)
    return e.astype(np.int64) + 1


def _inv_lam(q: float) -> float:
    """``1 / -log(1 - q)``: the scale that turns a standard exponential into
    a Geometric(q) gap (:func:`geometric_gaps`, and the compiled pass of
    :func:`poisson_rows_many`, which must agree with it bit for bit)."""
    return 1.0 / -math.log1p(-float(q))


def poisson_rows_many(rng: np.random.Generator, n: int, q: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``k`` independent Poisson subsamples of ``range(n)`` (each row in each
    independently with probability ``q``, 0 < q < 1), as ``(rows, offsets)``:
    sample ``i`` is ``rows[offsets[i]:offsets[i + 1]]``, sorted, int64.
    O(k q n) time, not O(k n).

    The gaps between consecutive selected rows of a Bernoulli(q) sequence are
    independent Geometric(q) variables, so each sample's rows are the partial
    sums of geometric draws (:func:`geometric_gaps`), minus one, below n: the
    same law as ``flatnonzero(rng.random(n) < q)``.  The draws come as one
    (k, q n + 6 sqrt(q n) + 16) block; a sample whose block ends before n
    (rare) draws more, after the block.  Every draw is from ``rng``; the
    gaps, partial sums and rows are computed in one compiled pass
    (:func:`dpreg_kernels.sampling.gaps_to_rows`, the same arithmetic as
    :func:`geometric_gaps` and ``cumsum``: the same rows for the same draws)."""
    from dpreg_kernels.sampling import gaps_to_rows

    k = int(k)
    mean = q * n
    block = int(mean + 6.0 * math.sqrt(mean) + 16)
    E = rng.standard_exponential((k, block))  # geometric_gaps' draws, turned into rows in one compiled pass
    rows = np.empty(k * block, dtype=np.int64)
    counts = np.empty(k, dtype=np.int64)
    last = np.empty(k, dtype=np.int64)
    gaps_to_rows(E, _inv_lam(q), int(n), rows, counts, last)
    short = np.flatnonzero(last <= n)
    if short.size == 0:
        rows = rows[:int(counts.sum())]
    else:  # rare: some sample's block ended before n; keep drawing for it
        ends = np.cumsum(counts)
        parts = []
        for i in range(k):
            p = rows[ends[i] - counts[i]:ends[i]] + 1  # positions
            if last[i] <= n:
                more = [p]
                while more[-1][-1] <= n:
                    more.append(more[-1][-1] + np.cumsum(geometric_gaps(rng, q, block, n)))
                p = np.concatenate(more)
            parts.append(p[:int(np.searchsorted(p, n, side="right"))] - 1)
        counts = np.array([len(p) for p in parts], dtype=np.int64)
        rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return np.ascontiguousarray(rows, dtype=np.int64), offsets


def poisson_rows(rng: np.random.Generator, n: int, q: float) -> np.ndarray:
    """Sorted int64 row numbers of one Poisson subsample of ``range(n)`` (each
    row independently with probability ``q``, 0 < q < 1), in O(q n) time:
    :func:`poisson_rows_many` with one sample."""
    rows, _ = poisson_rows_many(rng, n, q, 1)
    return rows


#: the single-pass algorithms' practical ``passes`` for large data apply from this many
#: records on (n is public; per oracle, i.e. per client where clients hold shards); below it
#: they make more, shorter passes (dpreg_plugins.algorithms.schedule.practical_passes)
PASSES_MIN_RECORDS = 20_000


def default_passes(given: int | None, preset: str, n: int, practical: int) -> int:
    """Passes over the records of a single-pass algorithm: ``given`` (the
    ``passes`` parameter) if set, else 1 under ``preset`` "theory" (the
    papers' single pass) or below :data:`PASSES_MIN_RECORDS` records, else
    ``practical``.  Reads nothing but the public record count ``n``."""
    if given is not None:
        return int(given)
    if preset == "theory" or n < PASSES_MIN_RECORDS:
        return 1
    return int(practical)


class SinglePass:
    """Disjoint batches from a seeded permutation of ``range(n)``: one pass.

    ``pass_id``: the pass the batches belong to for the accountant; None
    (default) gives this object a fresh one.  Share an id only between
    objects whose batches are disjoint from each other's too."""

    mode = "single-pass"
    #: one pass: :meth:`next_pass` never starts another (the interface of :class:`Passes`)
    passes = number = 1

    def __init__(self, n: int, rng: np.random.Generator, pass_id: Hashable | None = None):
        self.n = int(n)
        self.pass_id = new_pass_id() if pass_id is None else pass_id
        self._perm = rng.permutation(self.n).astype(np.int64)
        self._next = 0
        self._batches = 0

    @property
    def remaining(self) -> int:
        return self.n - self._next

    @property
    def used(self) -> int:
        return self._next

    def take(self, b: int) -> tuple[np.ndarray, Participation]:
        """The next ``b`` unused records (sorted for memory locality) and their
        disjoint participation; raises Exhausted if fewer than ``b`` remain."""
        b = int(b)
        if b < 1:
            raise ValueError(f"batch size must be >= 1, got {b}")
        if b > self.remaining:
            raise Exhausted(f"{b} records requested, {self.remaining} unused")
        idx = np.sort(self._perm[self._next:self._next + b])
        self._next += b
        self._batches += 1
        return idx, Participation.disjoint(("batch", self._batches), pass_id=self.pass_id)

    def next_pass(self) -> bool:
        """False: a single pass has no next one."""
        return False


class Passes:
    """``passes`` passes of disjoint batches over ``range(n)``: each pass a
    :class:`SinglePass` (a fresh permutation drawn from ``rng``, its own pass
    id), the next made by :meth:`next_pass`, so a record is in at most one
    batch of each pass - the accountant's per-pass rule (worst group of each
    pass, summed over passes).  ``take``, ``remaining`` and ``pass_id`` are
    the current pass's; ``used`` counts record uses over all passes;
    ``number`` is the current pass (1-based)."""

    mode = "single-pass"

    def __init__(self, n: int, rng: np.random.Generator, passes: int = 1):
        if int(passes) < 1:
            raise ValueError(f"passes must be >= 1, got {passes!r}")
        self.n, self.passes, self._rng = int(n), int(passes), rng
        self.current = SinglePass(self.n, rng)
        self.number = 1
        self._used_before = 0

    @property
    def remaining(self) -> int:
        return self.current.remaining

    @property
    def used(self) -> int:
        return self._used_before + self.current.used

    @property
    def pass_id(self) -> Hashable:
        return self.current.pass_id

    def take(self, b: int) -> tuple[np.ndarray, Participation]:
        """The current pass's :meth:`SinglePass.take`."""
        return self.current.take(b)

    def next_pass(self) -> bool:
        """Start the next pass (a fresh permutation and pass id); False, and
        nothing changes, once every pass has been started."""
        if self.number >= self.passes:
            return False
        self._used_before += self.current.used
        self.current = SinglePass(self.n, self._rng)
        self.number += 1
        return True


class Resample:
    """Poisson subsamples or the full batch, any number of times."""

    mode = "resample"

    def __init__(self, n: int, rng: np.random.Generator):
        self.n = int(n)
        self.rng = rng
        self.used = 0  # record-uses, counted for the report
        self._all = np.arange(self.n, dtype=np.int64)

    def poisson(self, q: float) -> tuple[np.ndarray, Participation]:
        """Each record independently with probability q (0 < q <= 1); the
        selected row numbers in increasing order.  O(q n) time (see
        :func:`poisson_rows`), not O(n)."""
        if q >= 1.0:
            return self.full()
        idx = poisson_rows(self.rng, self.n, q)
        self.used += len(idx)
        return idx, Participation.poisson(q)

    def poisson_many(self, q: float, k: int) -> tuple[np.ndarray, np.ndarray, Participation]:
        """``k`` independent Poisson subsamples at rate ``q`` (0 < q < 1) at
        once, as ``(rows, offsets, participation)`` (see
        :func:`poisson_rows_many`); each is one Poisson-sampled release."""
        rows, offsets = poisson_rows_many(self.rng, self.n, q, k)
        self.used += len(rows)
        return rows, offsets, Participation.poisson(q)

    def full(self) -> tuple[np.ndarray, Participation]:
        """All records (no amplification)."""
        self.used += self.n
        return self._all, Participation.all()

    def poisson_stream(self, q: float, total: int, chunk: int | None = None) -> PoissonStream:
        """A source of ``total`` independent Poisson subsamples at rate ``q``
        (the full batch for ``q >= 1``), drawn ``chunk`` at a time with
        :meth:`poisson_many`: the same law as ``total`` calls of
        :meth:`poisson`, about 5x cheaper per sample for small batches.
        ``chunk`` defaults to :func:`stream_chunk` (a chunk's draws fit in
        :data:`STREAM_DRAW_FLOATS`)."""
        return PoissonStream(self, q, total, stream_chunk(self.n, q) if chunk is None else chunk)

    def fixed(self, b: int) -> tuple[np.ndarray, Participation]:
        """A uniformly random subset of size b, sorted; accounted without
        amplification (participation "all") - use ``poisson`` for amplification."""
        idx = np.sort(self.rng.choice(self.n, size=int(b), replace=False)).astype(np.int64)
        self.used += len(idx)
        return idx, Participation.all()


#: a chunk of a :class:`PoissonStream` draws at most about this many exponentials at
#: once (512 kB: an L2-sized block; measured, benchmarks/bench_sampling.py
#: ``test_stream_chunk``)
STREAM_DRAW_FLOATS = 1 << 16
#: and at most this many samples
STREAM_MAX_CHUNK = 256


def stream_chunk(n: int, q: float) -> int:
    """Samples per chunk of a Poisson stream of rate ``q`` over ``n`` records:
    as many as fit in :data:`STREAM_DRAW_FLOATS` draws (each sample draws
    about ``q n + 6 sqrt(q n) + 16``), between 1 and :data:`STREAM_MAX_CHUNK`.
    A function of the public (n, q) alone; the chunking never changes the law."""
    mean = min(float(q), 1.0) * n
    block = mean + 6.0 * math.sqrt(mean) + 16
    return int(max(1, min(STREAM_MAX_CHUNK, STREAM_DRAW_FLOATS // block)))


class PoissonStream:
    """``total`` Poisson subsamples from a :class:`Resample`, drawn in chunks
    (see :meth:`Resample.poisson_stream`); never draws more than ``total``
    samples (``Resample.used`` counts only samples drawn), and raises
    RuntimeError when asked for sample ``total + 1``."""

    def __init__(self, access: Resample, q: float, total: int, chunk: int = STREAM_MAX_CHUNK):
        self.access, self.q, self.left, self.chunk = access, float(q), int(total), max(1, int(chunk))
        self._rows = self._off = None
        self._i = self._k = 0

    def next(self) -> tuple[np.ndarray, Participation]:
        """The next sample's rows (sorted) and participation."""
        if self.q >= 1.0:
            if self.left <= 0:
                raise RuntimeError("PoissonStream: more samples than planned")
            self.left -= 1
            return self.access.full()
        if self._i >= self._k:
            k = min(self.chunk, self.left)
            if k <= 0:
                raise RuntimeError("PoissonStream: more samples than planned")
            self._rows, self._off, self._part = self.access.poisson_many(self.q, k)
            self._i, self._k = 0, k
            self.left -= k
        i = self._i
        self._i += 1
        return self._rows[self._off[i]:self._off[i + 1]], self._part
