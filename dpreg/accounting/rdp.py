"""The Renyi-DP accountant, on dp-accounting's ``rdp.RdpAccountant`` and ``rdp.compute_epsilon``."""
from __future__ import annotations

import functools
import math
from typing import Callable, Hashable

import numpy as np

from ..errors import DpregError, ParameterError
from .accountant import Accountant
from .calibration import argmin_unimodal, calibration_memo, smallest_fitting
from .events import dp_accounting, is_pure, walk


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


#: process-wide memo of :func:`_curve_now` (a calibration asks about ~150 one-order curves)
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
        """As :meth:`Accountant.calibrate` (the same answer, to ``rtol``), searched order
        by order.

        Epsilon is the least over the orders of each order's conversion, so the smallest
        fitting z is the least over the orders of each order's smallest fitting z.  That
        z is found for one order at a time
        (:func:`~dpreg.accounting.calibration.smallest_fitting` on one-order
        dp-accounting curves, each a small fraction of a whole curve's cost), and the
        order that gives the least by golden-section search over the orders
        (:func:`~dpreg.accounting.calibration.argmin_unimodal`).  An order fits either
        because its conversion reaches the budget or, at a far larger z, through
        dp-accounting's zero case for a curve below ~delta^2; only the first kind is
        searched (an order that fits only the second way counts as not fitting), and
        for the events here the smallest z then falls and rises along the orders, after
        the low orders whose conversion never reaches the budget.

        The answer is checked on the whole curve, which the charge of the plan then
        reuses: it is accepted when it is ``low`` or its order attains the least epsilon
        there and that epsilon is the budget to 1e-5 (no order fits at a smaller z).
        Otherwise, or when the search cannot decide, :meth:`Accountant.calibrate`
        searches on whole curves."""
        base = self._worst_record(self._max_pass)
        orders, budget, delta = self._orders, self.epsilon_budget, self.delta
        solved: dict[int, float] = {}

        def order_epsilon(i: int, z: float) -> float:
            r = base[i] + self._compose(make_event(z), (orders[i],))[0]
            return float(dp_accounting().rdp.compute_epsilon((orders[i],), (r,), delta)[0])

        def smallest_z(i: int) -> float:
            near = sorted((abs(j - i), z) for j, z in solved.items() if math.isfinite(z))
            try:
                z = smallest_fitting(lambda x: order_epsilon(i, x), budget, low=low, high=high, rtol=rtol,
                                     start=near[0][1] if near else start, step=1.25 if near else 4.0)
            except ParameterError:  # this order does not fit even at high
                z = math.inf
            if low < z < math.inf and order_epsilon(i, z) == 0.0:  # fits only through the zero case
                z = math.inf
            solved[i] = z
            return z

        best = argmin_unimodal(smallest_z, 0, len(orders) - 1, floor=low)
        z = math.inf if best is None else solved[best] if best in solved else smallest_z(best)
        if math.isfinite(z):
            plan = make_event(z)
            eps = self._eps_order(base + self.rdp_of(plan))[0]
            if z == low or (eps >= order_epsilon(best, z) * (1 - 1e-12) and eps >= budget * (1 - 1e-5)):
                self.reserve(plan)
                return z
        return Accountant.calibrate(self, make_event, low=low, high=high, what=what, rtol=rtol, start=start)
