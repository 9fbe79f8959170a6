"""Noise calibration: the search for the smallest noise multiplier whose planned release
fits a budget, and the process-wide memos of what a calibration computes.

:func:`smallest_fitting` is the search every accountant's ``calibrate`` runs (on its own
epsilon); :func:`argmin_unimodal` and :func:`argmin_near` are the searches over RDP orders
of :meth:`dpreg.accounting.rdp.RdpAccountant.calibrate`.  :func:`calibration_memo` is
``functools.lru_cache`` for pure functions a calibration asks again in every run of the
same plan (a sweep's seeds, a repeated run); :func:`clear_calibration_memos` forgets them
all, so a benchmark can time a cold calibration.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

from ..errors import ParameterError

#: every memo made by :func:`calibration_memo`
_MEMOS: list = []


def calibration_memo(fn: Callable | None = None, *, maxsize: int = 4096):
    """``functools.lru_cache(maxsize)`` of ``fn``, a pure function of hashable arguments,
    registered so that :func:`clear_calibration_memos` forgets it.  Callers that mutate
    an answer must copy it.  Usable as ``@calibration_memo`` or
    ``@calibration_memo(maxsize=...)``."""
    def wrap(f: Callable):
        memo = functools.lru_cache(maxsize=maxsize)(f)
        _MEMOS.append(memo)
        return memo

    return wrap if fn is None else wrap(fn)


def clear_calibration_memos() -> None:
    """Forget every :func:`calibration_memo` answer (RDP curves, epsilon conversions,
    the algorithms' dry runs)."""
    for memo in _MEMOS:
        memo.cache_clear()


def smallest_fitting(epsilon: Callable[[float], float], budget: float, *, low: float, high: float,
                     rtol: float = 1e-7, start: float | None = None, step: float = 4.0,
                     what: str = "noise multiplier", delta: float | None = None) -> float:
    """Smallest z in [low, high] with ``epsilon(z) <= budget``, to a relative precision
    ``rtol`` in z, for ``epsilon`` non-increasing in z; the returned z always fits.
    Raises ParameterError if even ``high`` does not fit.

    A bracket grown geometrically from ``start`` (default 1, clamped to [low, high];
    first factor ``step``, doubling in log scale), then Brent's method on
    log(epsilon / budget) as a function of log z: about 8-12 evaluations of
    ``epsilon``, each z at most once."""
    from scipy.optimize import brentq

    memo: dict[float, float] = {}

    def eps(u: float) -> float:
        if u not in memo:
            memo[u] = epsilon(math.exp(u))
        return memo[u]

    lo_b, hi_b = math.log(low), math.log(high)
    u = min(max(math.log(start) if start else 0.0, lo_b), hi_b)
    du = math.log(step)
    if eps(u) <= budget:  # feasible: walk down to an infeasible point
        b = u
        while True:
            a = max(b - du, lo_b)
            if eps(a) > budget:
                break
            if a == lo_b:
                return low
            b, du = a, 2 * du
    else:  # infeasible: walk up to a feasible point
        a = u
        while True:
            b = min(a + du, hi_b)
            if eps(b) <= budget:
                break
            if b == hi_b:
                at = "" if delta is None else f", delta={delta:g}"
                raise ParameterError(f"cannot meet epsilon={budget:g}{at}: even {what}={high:g} spends more")
            a, du = b, 2 * du

    def h(v: float) -> float:  # log(eps / budget), finite for brentq
        e = eps(v)
        return 700.0 if not e < math.inf else (-700.0 if e <= 0 else min(700.0, math.log(e / budget)))

    root = brentq(h, a, b, xtol=rtol, rtol=4 * 2.220446049250313e-16)
    # the root is within rtol of the boundary: the first feasible of root, root + rtol,
    # root + 2 rtol and b (b is feasible)
    for v in (root, min(root + rtol, b), min(root + 2 * rtol, b), b):
        if eps(v) <= budget:
            break
    return math.exp(v)


def argmin_unimodal(f: Callable[[int], float], lo: int, hi: int, *, floor: float = -math.inf) -> int | None:
    """An index in [lo, hi] minimising ``f``, for ``f`` that is +inf on a prefix of the
    range (possibly empty) and quasi-convex on the rest (non-increasing, then
    non-decreasing): golden-section search, each index evaluated at most once.  Two
    finite probes that tie leave the side of the minimum undecided (a plateau): the
    answer is then one of them if their value is ``floor`` (a value ``f`` never goes
    below), else None."""
    memo: dict[int, float] = {}

    def val(i: int) -> float:
        if i not in memo:
            memo[i] = f(i)
        return memo[i]

    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    while b - a > 2:
        m1 = b - round((b - a) * inv_phi)
        m2 = a + round((b - a) * inv_phi)
        if m1 >= m2:
            m1, m2 = (a + b) // 2, (a + b) // 2 + 1
        f1, f2 = val(m1), val(m2)
        if f1 < f2:  # m2 is past the minimum
            b = m2 - 1
        elif f2 < f1:  # m1 is before it
            a = m1 + 1
        elif f1 == math.inf:  # both in the infinite prefix
            a = m2 + 1
        else:
            return m1 if f1 <= floor else None
    return min(range(a, b + 1), key=val)


def argmin_near(f: Callable[[int], float], start: int, lo: int, hi: int, *,
                floor: float = -math.inf) -> int | None:
    """:func:`argmin_unimodal` of ``f`` on [lo, hi], starting from ``start`` (an index
    near the minimum): steps of 1, 2, 4, ... from ``start`` the way ``f`` decreases
    bracket the minimum, which golden-section search then finds; ``f`` is evaluated
    about 2 log2(distance) + 3 times, each index at most once.  From an index where
    ``f`` is infinite, the search is :func:`argmin_unimodal`'s; a tie between
    neighbours or steps above ``floor`` (a plateau) answers None."""
    memo: dict[int, float] = {}

    def val(i: int) -> float:
        if i not in memo:
            memo[i] = f(i)
        return memo[i]

    f0 = val(start)
    if f0 == math.inf:  # in the infinite prefix: no direction to follow
        return argmin_unimodal(val, lo, hi, floor=floor)
    right = val(start + 1) if start < hi else math.inf
    left = val(start - 1) if start > lo and not right < f0 else math.inf
    if right < f0:
        d = 1
    elif left < f0:
        d = -1
    else:
        return start if f0 <= floor or (right > f0 and left > f0) else None
    prev, cur, step = start, start + d, 2
    while True:
        nxt = min(max(cur + d * step, lo), hi)
        if nxt == cur:
            break
        fn, fc = val(nxt), val(cur)
        if fn == fc and fc > floor:
            return None
        if fn > fc:
            break
        prev, cur, step = cur, nxt, 2 * step
    a, b = sorted((prev, nxt))
    return argmin_unimodal(val, a, b, floor=floor)
