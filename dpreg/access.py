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
from typing import Hashable

import numpy as np

from .interfaces import Participation


class Exhausted(Exception):
    """Not enough unused records for the requested batch (single pass)."""


_PASSES = itertools.count(1)


def new_pass_id() -> tuple:
    """A pass identity no other pass of this process has."""
    return ("pass", next(_PASSES))


def poisson_rows(rng: np.random.Generator, n: int, q: float) -> np.ndarray:
    """Sorted int64 row numbers of a Poisson subsample of ``range(n)``: each row
    independently with probability ``q`` (0 < q < 1), in O(q n) time.

    The gaps between consecutive selected rows of a Bernoulli(q) sequence are
    independent Geometric(q) variables (support 1, 2, ...), so the selected
    rows are the partial sums of geometric draws, minus one, below n: the same
    distribution as ``flatnonzero(rng.random(n) < q)``, drawn without n
    uniforms.  Draws come in blocks of about q n + 6 sqrt(q n) + 16 (rarely a
    second block); every draw is from ``rng``."""
    mean = q * n
    block = int(mean + 6.0 * np.sqrt(mean) + 16)
    pos = np.cumsum(rng.geometric(q, size=block), dtype=np.int64)
    if pos[-1] <= n:  # not yet past the end: keep drawing (rare)
        parts = [pos]
        while parts[-1][-1] <= n:
            parts.append(parts[-1][-1] + np.cumsum(rng.geometric(q, size=block), dtype=np.int64))
        pos = np.concatenate(parts)
    k = int(np.searchsorted(pos, n, side="right"))
    return pos[:k] - 1


class SinglePass:
    """Disjoint batches from a seeded permutation of ``range(n)``: one pass.

    ``pass_id``: the pass the batches belong to for the accountant; None
    (default) gives this object a fresh one.  Share an id only between
    objects whose batches are disjoint from each other's too."""

    mode = "single-pass"

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

    def full(self) -> tuple[np.ndarray, Participation]:
        """All records (no amplification)."""
        self.used += self.n
        return self._all, Participation.all()

    def fixed(self, b: int) -> tuple[np.ndarray, Participation]:
        """A uniformly random subset of size b, sorted; accounted without
        amplification (participation "all") - use ``poisson`` for amplification."""
        idx = np.sort(self.rng.choice(self.n, size=int(b), replace=False)).astype(np.int64)
        self.used += len(idx)
        return idx, Participation.all()
