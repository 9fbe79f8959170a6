"""Privacy accounting: the single source of every reported (epsilon, delta).

Events are Google dp-accounting ``DpEvent`` objects describing what *one
worst-case record* is exposed to.  A charge is either

* **global** (``group=None``): the release may involve every record (full-batch
  gradients, Poisson-subsampled steps, selections over the whole data set);
  global charges compose with everything; or
* **grouped** (``group=g``): only the records of the disjoint batch ``g`` are
  involved (single-pass algorithms, which use each record at most once).
  Disjoint groups compose in parallel: the privacy loss of a record is the
  global charges composed with the charges of *its* group, and the reported
  epsilon is the maximum over groups.

:meth:`Accountant.charge` is called *before* the release it describes; if the
release would make epsilon exceed the budget it raises
:class:`~dpreg.errors.BudgetExceededError` and records nothing.

Neighbouring relation: ``"add-remove"`` (Poisson subsampling, dp-accounting's
default) or ``"replace-one"`` (fixed-size and disjoint batches).  Mechanisms
compute their sensitivities under the relation of the accountant they charge
(``Accountant.sensitivity_factor``: 1 for add-remove, 2 for replace-one, times
the per-record clipping bound).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Callable, Hashable

import numpy as np

from .errors import BudgetExceededError, DpregError, ParameterError

RELATIONS = ("add-remove", "replace-one")
#: relative slack when comparing a spent epsilon with the budget (calibration
#: brackets land just under the target; floating noise must not refuse them)
_SLACK = 1e-9


def check_budget_args(epsilon: float, delta: float) -> None:
    """Raise ParameterError unless 0 < epsilon < inf and 0 < delta < 1."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")


def _dpa():
    import dp_accounting  # lazy: keeps `dpreg --help` fast

    return dp_accounting


class Accountant(ABC):
    """Composes charged events; enforces an (epsilon, delta) budget.

    Subclasses implement :meth:`_epsilon_of` (epsilon of the global charges
    composed with one group's charges, at ``self.delta``).
    """

    name = "accountant"

    def __init__(self, epsilon: float, delta: float, relation: str = "replace-one"):
        check_budget_args(epsilon, delta)
        if relation not in RELATIONS:
            raise ParameterError(f"relation must be one of {', '.join(RELATIONS)}, got {relation!r}")
        self.epsilon_budget = float(epsilon)
        self.delta = float(delta)
        self.relation = relation
        self._global: list = []
        self._groups: dict[Hashable, list] = {}
        self._eps = 0.0
        self.n_charges = 0

    # -- the interface mechanisms use ------------------------------------------
    @property
    def sensitivity_factor(self) -> float:
        """Multiplier turning a per-record clip bound C into the l2 sensitivity
        of a sum under this accountant's relation (C or 2C)."""
        return 1.0 if self.relation == "add-remove" else 2.0

    def charge(self, event, group: Hashable | None = None, *, label: str = "") -> float:
        """Record ``event`` (globally, or for disjoint ``group``) if the budget
        allows it; return the epsilon spent so far.  Raises BudgetExceededError
        *without recording* if it does not."""
        eps = self.epsilon_if(event, group)
        if eps > self.epsilon_budget * (1 + _SLACK):
            raise BudgetExceededError(
                f"release {label or type(event).__name__} refused: it would spend "
                f"epsilon={eps:.4g} > budget {self.epsilon_budget:g} at delta={self.delta:g}"
            )
        self._commit(event, group)
        self._eps = eps
        self.n_charges += 1
        return eps

    def epsilon_if(self, event, group: Hashable | None = None) -> float:
        """Epsilon that would be spent after charging ``event`` (nothing recorded)."""
        return self._what_if(event, group)

    @property
    def epsilon_spent(self) -> float:
        """Epsilon of everything charged so far, at ``self.delta``."""
        return self._eps

    def state(self) -> dict:
        """JSON-ready summary of what was charged and spent."""
        return {
            "accountant": self.name,
            "relation": self.relation,
            "epsilon_budget": self.epsilon_budget,
            "delta": self.delta,
            "epsilon_spent": self._eps,
            "charges": self.n_charges,
            "global_events": len(self._global),
            "groups": len(self._groups),
        }

    # -- calibration -------------------------------------------------------------
    def epsilon_of_plan(self, event) -> float:
        """Epsilon of a whole planned run described as one global event, on
        top of what is already charged."""
        return self.epsilon_if(event, None)

    def calibrate(self, make_event: Callable[[float], object], *, low: float = 1e-3,
                  high: float = 1e6, what: str = "noise multiplier") -> float:
        """Smallest noise multiplier z in [low, high] whose planned event
        ``make_event(z)`` (the worst-case record's whole exposure) fits the
        remaining budget; raises ParameterError if even ``high`` does not."""
        if self.epsilon_of_plan(make_event(high)) > self.epsilon_budget:
            raise ParameterError(
                f"cannot meet epsilon={self.epsilon_budget:g}, delta={self.delta:g}: "
                f"even {what}={high:g} spends more"
            )
        if self.epsilon_of_plan(make_event(low)) <= self.epsilon_budget:
            return low
        lo, hi = math.log(low), math.log(high)
        for _ in range(60):  # bisection on log z: ~1e-9 relative
            mid = 0.5 * (lo + hi)
            if self.epsilon_of_plan(make_event(math.exp(mid))) <= self.epsilon_budget:
                hi = mid
            else:
                lo = mid
            if hi - lo < 1e-7:
                break
        return math.exp(hi)

    # -- subclass hooks -----------------------------------------------------------
    @abstractmethod
    def _what_if(self, event, group) -> float: ...

    @abstractmethod
    def _commit(self, event, group) -> None: ...


class RdpAccountant(Accountant):
    """Renyi-DP accountant built on ``dp_accounting.rdp``.

    Keeps one RDP curve for global charges and one per disjoint group; the
    reported epsilon converts ``global + max over groups`` (elementwise - an
    upper bound on every record's curve) with dp-accounting's
    ``compute_epsilon``.  RDP curves of events are cached, so a long run that
    repeats the same event pays for its RDP computation once.
    """

    name = "rdp"

    def __init__(self, epsilon, delta, relation="replace-one"):
        super().__init__(epsilon, delta, relation)
        dpa = _dpa()
        self._orders = np.array(dpa.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=float)
        self._rdp_global = np.zeros_like(self._orders)
        self._rdp_groups: dict[Hashable, np.ndarray] = {}
        self._max_group = np.zeros_like(self._orders)
        self._cache: dict = {}

    def rdp_of(self, event) -> np.ndarray:
        """RDP curve of one event at this accountant's orders and relation."""
        try:
            return self._cache[event]
        except (KeyError, TypeError):
            pass
        dpa = _dpa()
        rel = (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if self.relation == "add-remove"
               else dpa.NeighboringRelation.REPLACE_ONE)
        acc = dpa.rdp.RdpAccountant(list(self._orders), rel)
        try:
            acc.compose(event)
        except dpa.UnsupportedEventError as exc:
            raise DpregError(f"the rdp accountant cannot account {event!r}: {exc}") from None
        curve = np.asarray(acc._rdp, dtype=float).copy()  # noqa: SLF001 (see tests)
        try:
            self._cache[event] = curve
        except TypeError:
            pass
        return curve

    def _eps_from(self, rdp: np.ndarray) -> float:
        dpa = _dpa()
        if not np.any(rdp):
            return 0.0
        eps, _ = dpa.rdp.rdp_privacy_accountant.compute_epsilon(self._orders, rdp, self.delta)
        return float(eps)

    def _what_if(self, event, group):
        r = self.rdp_of(event)
        if group is None:
            return self._eps_from(self._rdp_global + r + self._max_group)
        g = self._rdp_groups.get(group)
        new_g = r if g is None else g + r
        return self._eps_from(self._rdp_global + np.maximum(self._max_group, new_g))

    def _commit(self, event, group):
        r = self.rdp_of(event)
        if group is None:
            self._rdp_global = self._rdp_global + r
            self._global.append(event)
        else:
            g = self._rdp_groups.get(group)
            new_g = r if g is None else g + r
            self._rdp_groups[group] = new_g
            self._max_group = np.maximum(self._max_group, new_g)
            self._groups.setdefault(group, []).append(event)


class PldAccountant(Accountant):
    """Privacy-loss-distribution accountant built on ``dp_accounting.pld``
    (tighter than RDP, slower).  Grouped charges: epsilon is the maximum, over
    the distinct group histories, of the global events composed with that
    history (identical histories are evaluated once)."""

    name = "pld"

    def __init__(self, epsilon, delta, relation="replace-one"):
        super().__init__(epsilon, delta, relation)
        self._cache: dict[tuple, float] = {}

    def _eps_events(self, events: tuple) -> float:
        if not events:
            return 0.0
        key = events
        if key in self._cache:
            return self._cache[key]
        dpa = _dpa()
        rel = (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if self.relation == "add-remove"
               else dpa.NeighboringRelation.REPLACE_ONE)
        acc = dpa.pld.PLDAccountant(rel)
        try:
            acc.compose(dpa.ComposedDpEvent(list(events)))
        except dpa.UnsupportedEventError as exc:
            raise DpregError(f"the pld accountant cannot account this event: {exc}") from None
        eps = float(acc.get_epsilon(self.delta))
        self._cache[key] = eps
        return eps

    def _histories(self) -> set:
        return {tuple(h) for h in self._groups.values()} or {()}

    def _what_if(self, event, group):
        glob = tuple(self._global)
        if group is None:
            return max(self._eps_events(glob + (event,) + h) for h in self._histories())
        hist = tuple(self._groups.get(group, ())) + (event,)
        return max(self._eps, self._eps_events(glob + hist))

    def _commit(self, event, group):
        if group is None:
            self._global.append(event)
        else:
            self._groups.setdefault(group, []).append(event)


def gaussian_event(noise_multiplier: float):
    """dp-accounting event of one Gaussian release with std = z * sensitivity."""
    return _dpa().GaussianDpEvent(noise_multiplier)


def self_composed(event, count: int):
    """``event`` composed ``count`` times (count >= 1)."""
    dpa = _dpa()
    return event if count == 1 else dpa.SelfComposedDpEvent(event, int(count))


def composed(events):
    """Several events composed."""
    return _dpa().ComposedDpEvent(list(events))


def poisson_sampled(q: float, event):
    """``event`` applied to a Poisson subsample with rate ``q``."""
    return _dpa().PoissonSampledDpEvent(q, event)
