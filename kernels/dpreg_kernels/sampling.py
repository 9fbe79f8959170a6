"""Poisson subsample rows from exponential draws in one compiled pass.

:func:`dpreg.access.poisson_rows_many` turns standard exponential draws
``E`` (drawn by the caller from its secret generator: no random number is
drawn here, privacy rule 4) into the rows of ``k`` independent Poisson
subsamples of ``range(n)``: the gaps between consecutive selected rows are
``floor(min(E * inv_lam, n)) + 1`` with ``inv_lam = 1 / -log(1 - q)``
(Geometric(q) gaps), the positions their partial sums, the rows the
positions ``<= n`` minus one.  :func:`gaps_to_rows` does the arithmetic of
``dpreg.access.geometric_gaps`` and the partial sums bit for bit (plain IEEE
operations, no fastmath), in one pass instead of five numpy passes.
"""
from __future__ import annotations

from numba import types

from .config import CACHE, njit

_SIG = types.void(types.Array(types.float64, 2, "C"), types.float64, types.int64,
                  types.Array(types.int64, 1, "C"), types.Array(types.int64, 1, "C"),
                  types.Array(types.int64, 1, "C"))


@njit(_SIG, cache=CACHE, nogil=True)
def gaps_to_rows(E, inv_lam, n, rows, counts, last):
    """For each sample ``i`` (row ``i`` of ``E``, shape (k, m)): positions
    ``p_j = sum_{l <= j} (floor(min(E[i, l] * inv_lam, n)) + 1)``; writes
    ``p_j - 1`` for every ``p_j <= n``, samples one after another, into
    ``rows`` (size >= k m), their number into ``counts[i]`` and the sample's
    last position computed into ``last[i]``: the first position past ``n``,
    or ``p_{m-1} <= n`` when the block ran out before ``n`` (the caller then
    draws more for that sample)."""
    k, m = E.shape
    cap = float(n)
    o = 0
    for i in range(k):
        p = 0
        c = 0
        for j in range(m):
            e = E[i, j] * inv_lam
            if e > cap:
                e = cap
            p += int(e) + 1
            if p > n:  # every later position is past n too
                break
            rows[o] = p - 1
            o += 1
            c += 1
        counts[i] = c
        last[i] = p
