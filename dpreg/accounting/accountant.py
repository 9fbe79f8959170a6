"""The accountant interface: budget, charges (global, or per group of a pass), reservation
and calibration.  The epsilon of a set of charges is the subclass's
(:mod:`dpreg.accounting.rdp`, :mod:`dpreg.accounting.pld`).

A charge is either

* **global** (``group=None``): the release may involve every record (full-batch
  gradients, Poisson-subsampled steps, selections over the whole data set); global
  charges compose with everything; or
* **grouped** (``group=g``, ``pass_id=p``): only the records of batch ``g`` of the
  *pass* ``p`` are involved.  A pass is one partition of the records into disjoint
  batches (one :class:`dpreg.access.SinglePass`: each record is in at most one of its
  batches); a run may make several passes (warm start and hyper-parameter selection
  run several single-pass stages over the same records).  A record is in at most one
  group of each pass, so its privacy loss is the global charges composed with, for
  every pass, the charges of its group in that pass; the reported epsilon bounds the
  worst record: **global + sum over passes of the worst group of the pass**.  Group
  names are local to their pass: two passes may both name their batches
  ``("batch", 1)``, ...  ``pass_id=None`` is one default pass.

:meth:`Accountant.charge` is called *before* the release it describes; if the release
would make epsilon exceed the budget it raises :class:`~dpreg.errors.BudgetExceededError`
and records nothing.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from typing import TYPE_CHECKING, Callable, Hashable

from ..errors import BudgetExceededError, ParameterError
from .calibration import smallest_fitting
from .events import atoms

if TYPE_CHECKING:
    from .views import BudgetView

RELATIONS = ("add-remove", "replace-one")
#: relative slack when comparing a spent epsilon with the budget (calibration brackets
#: land just under the target; floating noise must not refuse them)
SLACK = 1e-9


def check_budget_args(epsilon: float, delta: float) -> None:
    """Raise ParameterError unless 0 < epsilon < inf and 0 < delta < 1."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")


class Accountant(ABC):
    """Composes charged events; enforces an (epsilon, delta) budget.

    ``relation``: ``"add-remove"`` (Poisson subsampling, dp-accounting's default) or
    ``"replace-one"`` (fixed-size and disjoint batches).  The record count n is public:
    batch denominators and sampling rates use it, and an add-remove neighbour is run
    with the same n (as in Opacus and TF Privacy).  Mechanisms compute their
    sensitivities under the relation of the accountant they charge
    (:attr:`sensitivity_factor`).

    Subclasses implement :meth:`_what_if` (epsilon after one more charge),
    :meth:`_exact_epsilon` (epsilon of the charged state) and :meth:`_commit` (record
    a charge).
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
        #: grouped charges by key (pass_id, group)
        self._groups: dict[tuple, list] = {}
        self._eps = 0.0
        self._stale = False
        self.n_charges = 0
        # reservation (see reserve()): atom counts of the charged events
        self._reserved: Counter | None = None
        self._gcount: Counter = Counter()
        self._groupcount: dict[tuple, Counter] = {}
        #: per pass, the atom-wise maximum over its groups (dominates every group
        #: of the pass); _maxg is their sum over passes (dominates every record)
        self._maxg_pass: dict[Hashable, Counter] = {}
        self._maxg: Counter = Counter()
        self.n_covered = 0
        #: whether what is charged is inside the reservation (every atom: global +
        #: worst record's group count <= reserved): then a charge is covered iff its
        #: own atoms fit, which :meth:`_covered` checks without composing counters
        self._within = False
        #: atoms of the events charged so far (a run charges the same few events
        #: thousands of times; the Counters here are never mutated)
        self._atoms_memo: dict = {}

    # -- the interface mechanisms use ------------------------------------------
    @property
    def sensitivity_factor(self) -> float:
        """Multiplier turning a per-record clip bound C into the l2 sensitivity
        of a sum under this accountant's relation (C or 2C)."""
        return 1.0 if self.relation == "add-remove" else 2.0

    def charge(self, event, group: Hashable | None = None, *, label: str = "",
               pass_id: Hashable | None = None) -> float:
        """Record ``event`` (globally, or for the disjoint batch ``group`` of the
        pass ``pass_id``) if the budget allows it; return the epsilon spent so
        far (after a charge covered by the reservation: the last computed
        value - read :attr:`epsilon_spent` for the exact one).  Raises
        BudgetExceededError *without recording* if it does not.

        A charge covered by the reservation (:meth:`reserve`) is accepted
        without recomputing epsilon: the reserved multiset of releases was
        checked to fit, and composing fewer releases never costs more."""
        if group is None and pass_id is not None:
            raise ParameterError("a pass_id needs a group (a global charge has no pass)")
        key = None if group is None else (pass_id, group)
        try:
            event_atoms = self._atoms_memo[event]
        except KeyError:
            event_atoms = atoms(event)
            if len(self._atoms_memo) < 4096:
                self._atoms_memo[event] = event_atoms
        except TypeError:  # an unhashable event
            event_atoms = atoms(event)
        if self._covered(event_atoms, key):
            self._commit(event, key)
            self._count(event_atoms, key)
            self._stale = True
            self.n_charges += 1
            self.n_covered += 1
            return self._eps  # last computed value; epsilon_spent computes the exact one lazily
        eps = self._what_if(event, key)
        if eps > self.epsilon_budget * (1 + SLACK):
            raise BudgetExceededError(
                f"release {label or type(event).__name__} refused: it would spend "
                f"epsilon={eps:.4g} > budget {self.epsilon_budget:g} at delta={self.delta:g}"
            )
        self._commit(event, key)
        self._count(event_atoms, key)
        self._within = False  # charged outside the reservation: check covers in full from now on
        self._eps = eps
        self._stale = False
        self.n_charges += 1
        return eps

    # -- reservation ---------------------------------------------------------------
    def reserve(self, plan_event) -> None:
        """Reserve a planned global exposure ``plan_event`` on top of what is
        charged (raises BudgetExceededError if it does not fit).  Afterwards a
        charge whose releases, added to those already charged to the worst
        record, stay inside the reserved multiset is accepted without an
        epsilon computation - which makes per-release enforcement cheap for
        the PLD accountant.  :meth:`calibrate` reserves the plan it returns."""
        if not self.fits(plan_event):
            spent = self.epsilon_of_plan(plan_event)
            raise BudgetExceededError(
                f"plan spends epsilon={spent:.4g} > budget "
                f"{self.epsilon_budget:g} (over by {spent - self.epsilon_budget:.4g})"
            )
        self._reserved = self._gcount + self._maxg + atoms(plan_event)
        self._within = True

    def _covered(self, event_atoms: Counter, key) -> bool:
        """Whether, after this charge, every record's releases stay inside the
        reserved multiset.  A record of group ``(p, g)`` is exposed to at most
        the global atoms + its group's + the atom-wise worst group of every
        other pass; every other record's exposure is unchanged.

        While what is charged is inside the reservation (``_within``: set by
        :meth:`reserve`, kept by covered charges, cleared by any other), only
        the charge's own atoms can leave it, so only they are checked - the
        same answer as :meth:`_covered_full` (tests/test_accounting.py checks
        both on random charge sequences), without composing counters."""
        if self._reserved is None:
            return False
        if not self._within:
            return self._covered_full(event_atoms, key)
        r, gc, mg = self._reserved, self._gcount, self._maxg
        if key is None:
            return all(r.get(a, 0) >= gc.get(a, 0) + c + mg.get(a, 0) for a, c in event_atoms.items())
        mp: Counter = self._maxg_pass.get(key[0]) or Counter()
        gk: Counter = self._groupcount.get(key) or Counter()
        return all(r.get(a, 0) >= gc.get(a, 0) + mg.get(a, 0) - mp.get(a, 0) + gk.get(a, 0) + c
                   for a, c in event_atoms.items())

    def _covered_full(self, event_atoms: Counter, key) -> bool:
        """:meth:`_covered` by composing the whole state (any state)."""
        if self._reserved is None:
            return False
        r = self._reserved
        if key is None:
            need = self._gcount + event_atoms + self._maxg
        else:
            others = self._maxg - self._maxg_pass.get(key[0], Counter())  # exact: _maxg sums the passes
            need = self._gcount + others + self._groupcount.get(key, Counter()) + event_atoms
        return all(r.get(a, 0) >= c for a, c in need.items())

    def _count(self, event_atoms: Counter, key) -> None:
        if key is None:
            self._gcount += event_atoms
        else:
            g = self._groupcount.setdefault(key, Counter())
            g += event_atoms
            worst = self._maxg_pass.setdefault(key[0], Counter())
            for a, c in g.items():
                if c > worst.get(a, 0):
                    self._maxg[a] += c - worst.get(a, 0)
                    worst[a] = c

    # -- what is spent ---------------------------------------------------------------
    def epsilon_if(self, event, group: Hashable | None = None, *, pass_id: Hashable | None = None) -> float:
        """Epsilon that would be spent after charging ``event`` (nothing recorded)."""
        return self._what_if(event, None if group is None else (pass_id, group))

    @property
    def epsilon_spent(self) -> float:
        """Epsilon of everything charged so far, at ``self.delta``."""
        if self._stale:
            self._eps = self._exact_epsilon()
            self._stale = False
        return self._eps

    def state(self) -> dict:
        """JSON-ready summary of what was charged and spent."""
        return {
            "accountant": self.name,
            "relation": self.relation,
            "epsilon_budget": self.epsilon_budget,
            "delta": self.delta,
            "epsilon_spent": self.epsilon_spent,
            "charges": self.n_charges,
            "charges_covered_by_reservation": self.n_covered,
            "global_events": len(self._global),
            "groups": len(self._groups),
            "passes": len({k[0] for k in self._groups}),
        }

    # -- plans and calibration -------------------------------------------------------
    def epsilon_of_plan(self, event) -> float:
        """Epsilon of a whole planned run described as one global event, on
        top of what is already charged."""
        return self.epsilon_if(event, None)

    def fits(self, event) -> bool:
        """Whether a planned global ``event`` fits the remaining budget (on top
        of what is charged); :meth:`calibrate` searches on the same
        comparison.  A :class:`~dpreg.accounting.views.BudgetView` also checks
        its parent's budget."""
        return self.epsilon_of_plan(event) <= self.epsilon_budget

    def view(self, epsilon: float, delta: float) -> BudgetView:
        """A budget-limited view for one stage of a composite run (see
        :class:`~dpreg.accounting.views.BudgetView`): charges go to this
        accountant, and the stage's own charges may not exceed (epsilon, delta)."""
        from .views import BudgetView

        return BudgetView(self, epsilon, delta)

    def fresh(self, epsilon: float, delta: float) -> Accountant:
        """An empty accountant of the same kind and relation."""
        return type(self)(epsilon, delta, self.relation)

    def calibrate(self, make_event: Callable[[float], object], *, low: float = 1e-3,
                  high: float = 1e6, what: str = "noise multiplier", rtol: float = 1e-7,
                  start: float | None = None) -> float:
        """Smallest noise multiplier z in [low, high] whose planned event
        ``make_event(z)`` (the worst-case record's whole exposure) fits the
        remaining budget, to a relative precision ``rtol`` in z; raises
        ParameterError if even ``high`` does not fit.  The returned z always
        fits (its epsilon is <= the budget) and its plan is reserved
        (:meth:`reserve`).  The search is
        :func:`~dpreg.accounting.calibration.smallest_fitting` from ``start``
        on :meth:`epsilon_of_plan`, the computation every charge uses."""
        z = smallest_fitting(lambda x: self.epsilon_of_plan(make_event(x)), self.epsilon_budget,
                             low=low, high=high, rtol=rtol, start=start, what=what, delta=self.delta)
        self.reserve(make_event(z))
        return z

    # -- subclass hooks -----------------------------------------------------------
    @abstractmethod
    def _exact_epsilon(self) -> float:
        """Epsilon of the current state computed from scratch."""

    @abstractmethod
    def _what_if(self, event, key) -> float:
        """Epsilon after charging ``event`` globally (``key=None``) or to the
        group ``key = (pass_id, group)``."""

    @abstractmethod
    def _commit(self, event, key) -> None:
        """Record ``event`` (globally, or for the group ``key``)."""
