"""The Renyi-DP accountant, on dp-accounting's ``rdp.RdpAccountant`` and ``rdp.compute_epsilon``."""
from __future__ import annotations

import functools
import math
from typing import Callable, Hashable

import numpy as np

from ..errors import DpregError, ParameterError
from .accountant import Accountant
from .calibration import argmin_near, argmin_unimodal, calibration_memo, smallest_fitting
from .events import atoms, dp_accounting, is_pure, walk


@functools.cache
def default_orders() -> tuple[float, ...]:
    """dp-accounting's default RDP orders (those of a default ``RdpAccountant``)."""
    return tuple(float(o) for o in dp_accounting().rdp.RdpAccountant().orders)


def _curve_now(relation: str, atom, orders: tuple) -> np.ndarray:
    """:func:`atom_curve`, computed."""
    dpa = dp_accounting()
    rel = (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if relation == "add-remove" and not is_pure(atom)
           else dpa.NeighboringRelation.REPLACE_ONE)
    acc = dpa.rdp.RdpAccountant(list(orders), rel)
    try:
        acc.compose(atom)
    except dpa.UnsupportedEventError as exc:
        raise DpregError(f"the rdp accountant cannot account {atom!r}: {exc}") from None
    curve = acc.rdp
    curve.setflags(write=False)
    return curve


#: process-wide memo of :func:`_curve_now` (a calibration asks for dozens of one-order curves)
_curve_memo = calibration_memo(_curve_now, maxsize=65536)


def atom_curve(relation: str, atom, orders: tuple) -> np.ndarray:
    """dp-accounting's RDP curve (read-only) of one elementary release ``atom`` (an event
    that is not Composed or SelfComposed) at ``orders`` under ``relation``: a fresh
    ``RdpAccountant`` composed with it.  A pure-DP release (:func:`~.events.pure_dp_event`)
    has its REPLACE_ONE curve under either relation.  Cached process-wide (unless the
    atom is unhashable): a calibration's trials, a repeated plan and the final charges
    compute each curve once."""
    try:
        return _curve_memo(relation, atom, orders)
    except TypeError:  # an unhashable event
        return _curve_now(relation, atom, orders)


def rdp_cache_info():
    """``functools`` statistics of the process-wide curve cache (a miss is one curve
    computed by dp-accounting)."""
    return _curve_memo.cache_info()


@calibration_memo
def _epsilon_and_order(orders: tuple, delta: float, rdp: bytes) -> tuple[float, float]:
    """dp-accounting's ``compute_epsilon`` of the RDP curve ``rdp`` (float64 bytes, one
    value per order) at ``delta``: (epsilon, the order attaining it)."""
    eps, order = dp_accounting().rdp.compute_epsilon(orders, np.frombuffer(rdp, dtype=np.float64), delta)
    return float(eps), float(order)


def _subsampled(atom) -> bool:
    """Whether ``atom`` is a subsampled release (Poisson or without replacement)."""
    dpa = dp_accounting()
    return (isinstance(atom, dpa.SampledWithoutReplacementDpEvent)
            or (isinstance(atom, dpa.PoissonSampledDpEvent) and 0 < atom.sampling_probability < 1))


class RdpAccountant(Accountant):
    """Renyi-DP accountant built on ``dp_accounting.rdp``.

    Keeps one RDP curve for global charges and one per disjoint group, at
    dp-accounting's default orders; the reported epsilon converts ``global + sum over
    passes of the max over the pass's groups`` (elementwise: an upper bound on every
    record's curve) with dp-accounting's ``compute_epsilon``.  The curve of an event is
    dp-accounting's composition (``+= count x curve`` over its elementary releases in
    dp-accounting's order), each elementary curve dp-accounting's own
    (:func:`atom_curve`, cached process-wide).
    """

    name = "rdp"

    def __init__(self, epsilon, delta, relation="replace-one"):
        super().__init__(epsilon, delta, relation)
        self._orders = default_orders()
        self._rdp_global = np.zeros(len(self._orders))
        self._rdp_groups: dict[tuple, np.ndarray] = {}
        #: per pass, the elementwise max of its groups' curves
        self._max_pass: dict[Hashable, np.ndarray] = {}
        #: curves of the events this accountant has seen (a run charges the
        #: same few events thousands of times: one hash lookup per charge)
        self._curves: dict = {}

    # -- curves -------------------------------------------------------------------
    def _compose(self, event, orders: tuple) -> np.ndarray:
        """RDP curve of ``event`` at ``orders``: dp-accounting's composition order and
        arithmetic over cached elementary curves."""
        out = np.zeros(len(orders))
        for atom, count in walk(event):
            out += count * atom_curve(self.relation, atom, orders)
        return out

    def rdp_of(self, event) -> np.ndarray:
        """RDP curve (read-only) of one event at this accountant's orders and relation."""
        try:
            return self._curves[event]
        except (KeyError, TypeError):
            pass
        out = self._compose(event, self._orders)
        out.setflags(write=False)
        if len(self._curves) > 4096:
            self._curves.clear()
        try:
            self._curves[event] = out
        except TypeError:
            pass
        return out

    def _eps_order(self, rdp: np.ndarray) -> tuple[float, float]:
        """dp-accounting's conversion of the curve ``rdp`` at ``self.delta``:
        (epsilon, the order attaining it); memoised process-wide
        (:func:`_epsilon_and_order`)."""
        if not np.any(rdp):
            return 0.0, self._orders[0]
        r = np.ascontiguousarray(rdp, dtype=np.float64)
        return _epsilon_and_order(self._orders, self.delta, r.tobytes())

    def _worst_record(self, passes: dict) -> np.ndarray:
        """Global curve + the sum over passes of each pass's worst group."""
        out = self._rdp_global
        for curve in passes.values():
            out = out + curve
        return out

    # -- the accountant's hooks ----------------------------------------------------
    def _what_if(self, event, key):
        r = self.rdp_of(event)
        if key is None:
            return self._eps_order(self._worst_record(self._max_pass) + r)[0]
        g = self._rdp_groups.get(key)
        new_g = r if g is None else g + r
        old = self._max_pass.get(key[0])
        passes = dict(self._max_pass)
        passes[key[0]] = new_g if old is None else np.maximum(old, new_g)
        return self._eps_order(self._worst_record(passes))[0]

    def _exact_epsilon(self):
        return self._eps_order(self._worst_record(self._max_pass))[0]

    def epsilon_of_events(self, events) -> float:
        """Epsilon of ``events`` composed (this accountant's orders, relation and delta;
        nothing charged or recorded)."""
        return self._eps_order(sum((self.rdp_of(e) for e in events), np.zeros(len(self._orders))))[0]

    def _commit(self, event, key):
        r = self.rdp_of(event)
        if key is None:
            self._global.append(event)
            self._rdp_global = self._rdp_global + r
            return
        self._groups.setdefault(key, []).append(event)
        g = self._rdp_groups.get(key)
        new_g = r if g is None else g + r
        self._rdp_groups[key] = new_g
        old = self._max_pass.get(key[0])
        self._max_pass[key[0]] = new_g if old is None else np.maximum(old, new_g)

    # -- calibration ----------------------------------------------------------------
    def calibrate(self, make_event: Callable[[float], object], *, low: float = 1e-3, high: float = 1e6,
                  what: str = "noise multiplier", rtol: float = 1e-7, start: float | None = None) -> float:
        """As :meth:`Accountant.calibrate`; for a plan with a subsampled release (whose
        dp-accounting curve costs tens of milliseconds over all orders), each trial's
        epsilon is found on a few orders instead of the whole curve.

        A trial's epsilon is dp-accounting's least conversion over the orders of the
        charged curve plus the plan's; each order's value is computed alone from
        one-order dp-accounting curves (bit for bit the whole curve's value at that
        order), and the least is found by searching along the orders, from the order
        that gave the previous trial's least
        (:func:`~dpreg.accounting.calibration.argmin_near`; the first trial:
        :func:`~dpreg.accounting.calibration.argmin_unimodal`).  Along the orders the
        conversion falls, then rises, for the events here (after any low orders that
        dp-accounting leaves out as infinite), so a trial's epsilon is the whole curve's
        and the search takes the steps of the plain one.

        The answer is checked on the whole curve, which the charge of the plan then
        reuses: it is accepted when the whole curve's epsilon there is the one found and
        is the budget to 1e-5 (or the answer is ``low``).  Otherwise, or if no trial up
        to ``high`` fits (a trial whose least lies beyond the searched orders, e.g.
        dp-accounting's zero epsilon for a curve below ~delta^2 at a low order),
        :meth:`Accountant.calibrate` searches on whole curves."""
        if not any(_subsampled(a) for a in atoms(make_event(start or 1.0))):  # whole curves are cheap
            return Accountant.calibrate(self, make_event, low=low, high=high, what=what, rtol=rtol, start=start)
        base = self._worst_record(self._max_pass)
        orders, delta, last = self._orders, self.delta, len(self._orders) - 1
        near: list[int] = []

        def epsilon(z: float) -> float:
            event = make_event(z)
            values: dict[int, float] = {}

            def at(i: int) -> float:
                if i not in values:
                    r = base[i] + self._compose(event, (orders[i],))[0]
                    values[i] = float(dp_accounting().rdp.compute_epsilon((orders[i],), (r,), delta)[0])
                return values[i]

            i = argmin_near(at, near[-1], 0, last, floor=0.0) if near else argmin_unimodal(at, 0, last, floor=0.0)
            if i is None:  # a plateau: the whole curve decides
                return self._eps_order(base + self.rdp_of(event))[0]
            near.append(i)
            return at(i)

        try:
            z = smallest_fitting(epsilon, self.epsilon_budget, low=low, high=high, rtol=rtol, start=start,
                                 what=what, delta=delta)
        except ParameterError:  # the whole curve decides whether even high fits
            z = math.inf
        if math.isfinite(z):
            plan = make_event(z)
            eps = self._eps_order(base + self.rdp_of(plan))[0]
            if z == low or (eps >= epsilon(z) * (1 - 1e-12) and eps >= self.epsilon_budget * (1 - 1e-5)):
                self.reserve(plan)
                return z
        return Accountant.calibrate(self, make_event, low=low, high=high, what=what, rtol=rtol, start=start)
