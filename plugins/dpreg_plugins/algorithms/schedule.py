"""Practical run lengths that adapt to the public size of a problem (n, d, eps,
delta): the passes of the single-pass algorithms and the iteration count of
the full-batch ones.  Not a plugin (registers nothing); every function reads
only public numbers, never the data.
"""
from __future__ import annotations

import math

from dpreg.access import PASSES_MIN_RECORDS

#: on fewer than PASSES_MIN_RECORDS records a single-pass algorithm makes enough
#: passes for about this many record uses in all, at most SMALL_DATA_MAX_PASSES
SMALL_DATA_RECORD_USES = 20_000
SMALL_DATA_MAX_PASSES = 16


def practical_passes(given: int | None, preset: str, n: int, large: int) -> int:
    """Passes over the records of a single-pass algorithm (each pass a fresh
    secret permutation of disjoint batches, the noise calibrated for all of
    them): ``given`` if set; 1 under preset "theory" (the papers' single pass);
    ``large`` from PASSES_MIN_RECORDS records on; below, ceil(20,000 / n) up
    to 16 - one pass of a few hundred records is a handful of steps, too few
    to learn from (a record's exposure is one pass's, composed over the passes)."""
    if given is not None:
        return int(given)
    if preset == "theory":
        return 1
    if n >= PASSES_MIN_RECORDS:
        return int(large)
    return int(min(SMALL_DATA_MAX_PASSES, max(1, math.ceil(SMALL_DATA_RECORD_USES / max(n, 1)))))


def privacy_scale(n: int, d: int, eps: float, delta: float) -> float:
    """S = n eps / sqrt(d ln(1/delta)): how many noisy full-batch gradient
    steps a budget carries at a fixed signal-to-noise ratio grows with S (the
    Gaussian noise of T full-batch releases has norm about C sqrt(T d
    ln(1/delta))/(n eps), and noisy gradient descent balances its optimisation
    error M Delta / T against that noise at T proportional to S)."""
    return n * eps / math.sqrt(d * math.log(1.0 / delta))
