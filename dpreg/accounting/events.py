"""Privacy events: Google dp-accounting's ``DpEvent`` classes, built and read the way the
accountants use them.

An event describes what *one worst-case record* is exposed to by a release.  Convention:
``GaussianDpEvent(z)`` is a release whose noise standard deviation is z times its l2
sensitivity *under the accountant's neighbouring relation* (mechanisms compute that
sensitivity with ``Accountant.sensitivity_factor``).  A pure epsilon-DP release
(the exponential mechanism, AboveThreshold) is :func:`pure_dp_event`.

dp-accounting is imported on first use (:func:`dp_accounting`), so ``import dpreg`` and
``dpreg --help`` do not import it.
"""
from __future__ import annotations

import functools
import logging
import math
from collections import Counter
from typing import Any, Iterable

from ..errors import ParameterError


class _DpAccountingWarnings(logging.Filter):
    """Drops dp-accounting's own warnings (through absl's logger): a calibration search
    tries extreme noise multipliers, at which some orders' series do not converge and
    are left out of epsilon, as dp-accounting says in each warning.  Records of every
    other library pass."""

    def __init__(self, package_dir: str):
        super().__init__()
        self._dir = package_dir

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not record.pathname.startswith(self._dir)


@functools.cache
def dp_accounting() -> Any:
    """The ``dp_accounting`` package, imported on the first call."""
    import os

    import dp_accounting as dpa

    logging.getLogger("absl").addFilter(_DpAccountingWarnings(os.path.dirname(dpa.__file__)))
    return dpa


# ----------------------------------------------------------------- construction
def gaussian_event(noise_multiplier: float):
    """One Gaussian release with noise std = ``noise_multiplier`` x its sensitivity."""
    return dp_accounting().GaussianDpEvent(noise_multiplier)


def self_composed(event, count: int):
    """``event`` composed ``count`` times (count >= 1)."""
    return event if count == 1 else dp_accounting().SelfComposedDpEvent(event, int(count))


def composed(events: Iterable):
    """Several events composed."""
    return dp_accounting().ComposedDpEvent(list(events))


def poisson_sampled(q: float, event):
    """``event`` applied to a Poisson subsample with rate ``q`` (add-remove)."""
    return dp_accounting().PoissonSampledDpEvent(q, event)


def sampled_without_replacement(n: int, size: int, event):
    """``event`` applied to ``size`` of the ``n`` records drawn without replacement
    (replace-one; the rdp accountant)."""
    return dp_accounting().SampledWithoutReplacementDpEvent(n, size, event)


def pure_dp_event(epsilon: float):
    """Event of one release by an ``epsilon``-DP (pure, delta = 0) mechanism.

    dp-accounting has no such event.  Every epsilon-DP mechanism is dominated (in the
    hockey-stick / Blackwell order, hence in every Renyi divergence and in its
    privacy-loss distribution) by binary randomized response with P(truth) =
    e^eps / (1 + e^eps) (Kairouz, Oh & Viswanath 2015), so it is charged as
    ``RandomizedResponseDpEvent(2 / (1 + e^eps), 2)``, whose epsilon is exactly
    ``epsilon``.  ``LaplaceDpEvent`` would *not* be sound: the Laplace mechanism's RDP
    and PLD are strictly smaller than randomized response's at the same epsilon
    (tests/test_selectors.py shows it).  The dominating pair does not depend on the
    neighbouring relation: both accountants take this event under add-remove too,
    with dp-accounting's REPLACE_ONE curve and distribution of randomized response
    (dp-accounting itself accepts randomized response only under REPLACE_ONE).
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ParameterError(f"pure-DP epsilon must be a finite number > 0, got {epsilon!r}")
    if epsilon > 700:  # 2 / (1 + e^eps) underflows towards 0: no randomized response to charge
        raise ParameterError(f"pure-DP epsilon {epsilon:g} is beyond what the accountant represents (<= 700)")
    e = math.exp(-epsilon)  # 2 / (1 + e^eps), without overflow
    return dp_accounting().RandomizedResponseDpEvent(noise_parameter=2.0 * e / (1.0 + e), num_buckets=2)


# ----------------------------------------------------------------- reading
def is_pure(event) -> bool:
    """Whether ``event`` is one :func:`pure_dp_event` release."""
    return isinstance(event, dp_accounting().RandomizedResponseDpEvent) and event.num_buckets == 2


def walk(event, count: int = 1) -> Iterable[tuple[Any, int]]:
    """``(elementary release, count)`` pairs of ``event``, in dp-accounting's composition
    order: Composed events in order, SelfComposed counts multiplied through, NoOp left
    out."""
    dpa = dp_accounting()
    if isinstance(event, dpa.SelfComposedDpEvent):
        yield from walk(event.event, count * event.count)
    elif isinstance(event, dpa.ComposedDpEvent):
        for e in event.events:
            yield from walk(e, count)
    elif not isinstance(event, dpa.NoOpDpEvent):
        yield event, count


def atoms(event) -> Counter:
    """The multiset of elementary releases ``event`` composes."""
    out: Counter = Counter()
    for a, c in walk(event):
        out[a] += c
    return out


def condensed(events: Iterable) -> tuple:
    """``events`` as a canonical tuple of self-compositions, one per distinct
    elementary release (a cache key, and a cheap composition order)."""
    total: Counter = Counter()
    for e in events:
        total += atoms(e)
    return tuple(sorted((self_composed(a, c) for a, c in total.items()), key=repr))


def atomwise_max(counters: Iterable[Counter]) -> Counter:
    """The smallest multiset containing each of ``counters``."""
    out: Counter = Counter()
    for c in counters:
        out |= c
    return out


def min_gaussian_noise(events: Iterable) -> float:
    """Smallest Gaussian noise multiplier among the releases of ``events`` (inf if none)."""
    dpa = dp_accounting()
    z = math.inf
    for e in events:
        for a, _ in walk(e):
            inner = a.event if isinstance(a, dpa.PoissonSampledDpEvent) else a
            if isinstance(inner, dpa.GaussianDpEvent):
                z = min(z, inner.noise_multiplier)
    return z
