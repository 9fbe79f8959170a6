"""Accountant proxies for composite runs: a stage's budget-limited view of the run's
accountant (:class:`BudgetView`) and a component whose release was charged in advance
(:class:`Prepaid`)."""
from __future__ import annotations

from typing import Hashable

from ..errors import BudgetExceededError
from .accountant import SLACK, Accountant


class BudgetView(Accountant):
    """One stage's view of a parent accountant (composite runs: warm start,
    hyper-parameter selection).

    * Every charge goes to the parent (which refuses it if the *total* would
      exceed the parent's budget) and to the view's own record, which refuses
      it if the *stage's own* charges would exceed (epsilon, delta) - so the
      stage is (epsilon, delta)-DP on its own and the whole run stays within
      the parent's budget, with the parent composing all stages tightly.
    * :meth:`fits` (hence :meth:`calibrate`) requires both, so a stage
      calibrates to the smaller of its sub-budget and what the parent has left.
    * ``epsilon_budget``/``delta`` are the stage's, ``epsilon_spent`` is the
      stage's own spend at the stage's delta; ``relation`` is the parent's.
    """

    name = "view"

    def __init__(self, parent: Accountant, epsilon: float, delta: float):
        super().__init__(epsilon, delta, parent.relation)
        self.parent = parent
        self._own = parent.fresh(epsilon, delta)

    def fresh(self, epsilon, delta):
        return self.parent.fresh(epsilon, delta)

    def fits(self, event) -> bool:
        return self._own.fits(event) and self.parent.fits(event)

    def calibrate(self, make_event, *, low: float = 1e-3, high: float = 1e6,
                  what: str = "noise multiplier", **kw) -> float:
        """The smallest z meeting both budgets is the larger of the two
        calibrations (each constraint is monotone in z); each uses its own
        accountant's (possibly bracketed, faster) calibration."""
        z = self._own.calibrate(make_event, low=low, high=high, what=what)
        if not self.parent.fits(make_event(z)):  # else the parent's smallest z is <= z
            z = max(z, self.parent.calibrate(make_event, low=low, high=high, what=what))
        self.reserve(make_event(z))
        return z

    def charge(self, event, group=None, *, label: str = "", pass_id=None) -> float:
        eps = self._own.epsilon_if(event, group, pass_id=pass_id)
        if eps > self.epsilon_budget * (1 + SLACK):
            raise BudgetExceededError(
                f"release {label or type(event).__name__} refused: this stage would spend "
                f"epsilon={eps:.4g} > its budget {self.epsilon_budget:g} at delta={self.delta:g}"
            )
        self.parent.charge(event, group, label=label, pass_id=pass_id)  # raises, recording nothing, if over
        self._own.charge(event, group, label=label, pass_id=pass_id)
        self._eps = self._own.epsilon_spent
        self.n_charges += 1
        return self._eps

    def state(self) -> dict:
        out = super().state()
        out["accountant"] = f"view of {self.parent.name}"
        return out

    def reserve(self, plan_event) -> None:
        """Reserve the plan in the stage's own record and in the parent."""
        self._own.reserve(plan_event)
        self.parent.reserve(plan_event)

    def _what_if(self, event, key):
        return self._own._what_if(event, key)  # noqa: SLF001 (same class family)

    def _exact_epsilon(self):
        return self._own.epsilon_spent

    def _commit(self, event, key):  # pragma: no cover - charge() is overridden
        raise NotImplementedError


class Prepaid:
    """An accountant proxy for a component whose release was charged in advance.

    A pipeline that selects an output after a run charges the selection's
    event *before* the run (so the run calibrates to what is left and the
    whole stays within budget), then hands the selector this proxy: the
    selector's own ``charge`` of exactly that event (globally) is matched
    against the prepayment once and records nothing new; any other charge, or
    a second one, goes to the real accountant as usual.  Everything else
    (relation, sensitivity factor, budget queries) is the real accountant's.
    """

    def __init__(self, accountant: Accountant, event):
        self._acc = accountant
        self._event = event
        self.used = False

    def charge(self, event, group: Hashable | None = None, *, label: str = "",
               pass_id: Hashable | None = None) -> float:
        if not self.used and group is None and event == self._event:
            self.used = True
            return self._acc.epsilon_spent
        return self._acc.charge(event, group, label=label, pass_id=pass_id)

    def __getattr__(self, name):
        return getattr(self._acc, name)
