"""Noise calibration (Accountant.calibrate): exact, on the feasible side, and cheap
(the RDP accountant searches order by order on one-order dp-accounting curves, cached
process-wide, and checks its answer on the whole curve)."""
import functools
import math

import dp_accounting as dpa
import numpy as np
import pytest

from dpreg import accounting
from dpreg.accounting import rdp as rdp_module
from dpreg.accounting.accountant import Accountant
from dpreg.accounting.calibration import argmin_near, argmin_unimodal
from dpreg.accounting import (PldAccountant, RdpAccountant, composed, gaussian_event, poisson_sampled,
                              pure_dp_event, self_composed)
from dpreg.errors import ParameterError


def brute_bisection(acc, make, lo, hi, rtol=1e-5):
    """Smallest fitting z in [lo, hi] by plain bisection on log z (the reference)."""
    a, b = math.log(lo), math.log(hi)
    assert not acc.fits(make(lo)) and acc.fits(make(hi))
    while b - a > rtol:
        m = 0.5 * (a + b)
        a, b = (a, m) if acc.fits(make(math.exp(m))) else (m, b)
    return math.exp(b)


PLANS = {
    "dp-sgd": ("add-remove", 1.0, 1e-5,
               lambda z: self_composed(poisson_sampled(0.02, gaussian_event(z)), 500)),
    "gaussian+pure": ("replace-one", 2.0, 1e-6,
                      lambda z: composed([self_composed(gaussian_event(z), 40), pure_dp_event(0.1)])),
    "nested": ("add-remove", 0.5, 1e-5,
               lambda z: self_composed(composed([poisson_sampled(0.05, gaussian_event(z)),
                                                 gaussian_event(4 * z)]), 30)),
}


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_calibration_matches_brute_bisection_and_stays_under_budget(plan):
    relation, eps, delta, make = PLANS[plan]
    acc = RdpAccountant(eps, delta, relation)
    z = acc.calibrate(make)
    ref = brute_bisection(RdpAccountant(eps, delta, relation), make, z / 2, z * 2)
    assert z == pytest.approx(ref, rel=1e-3)
    spent = acc.epsilon_of_plan(make(z))
    assert spent <= eps                   # the returned multiplier fits
    assert spent >= eps * (1 - 1e-3)      # and spends the budget
    assert not acc.fits(make(z * (1 - 1e-3)))


def test_calibration_agrees_with_dp_accountings_search():
    make = PLANS["dp-sgd"][3]
    z = RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make)
    ref = dpa.calibrate_dp_mechanism(dpa.rdp.RdpAccountant, make, 1.0, 1e-5)
    assert z == pytest.approx(ref, rel=1e-3)


def test_calibration_from_a_far_start_and_at_the_bounds():
    make = PLANS["dp-sgd"][3]
    z = RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make)
    assert RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make, start=1e5) == pytest.approx(z, rel=1e-6)
    assert RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make, start=1e-3) == pytest.approx(z, rel=1e-6)
    # low already fits: low is the answer
    assert RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make, low=2 * z) == 2 * z
    with pytest.raises(ParameterError, match="cannot meet"):
        RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make, high=z / 2)


def test_repeated_calibration_and_final_charge_compute_no_new_curve():
    q, T = 0.0123, 700  # a plan no other test uses: its curves start uncached
    make = lambda z: self_composed(poisson_sampled(q, gaussian_event(z)), T)  # noqa: E731
    acc = RdpAccountant(1.0, 1e-5, "add-remove")
    z = acc.calibrate(make)
    again = accounting.rdp_cache_info().misses
    z2 = RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make)
    acc.charge(make(z))
    assert z2 == z and accounting.rdp_cache_info().misses == again
    assert acc.epsilon_spent <= 1.0


@pytest.fixture
def whole_curves(monkeypatch):
    """Counts the whole (every-order) elementary curves dp-accounting computes."""
    count = [0]
    real = rdp_module._curve_now

    def spy(relation, atom, orders):
        count[0] += len(orders) == len(rdp_module.default_orders())
        return real(relation, atom, orders)

    monkeypatch.setattr(rdp_module, "_curve_memo", functools.lru_cache(maxsize=None)(spy))
    return count


def test_a_calibration_computes_one_whole_curve(whole_curves):
    """The search runs on one-order curves; the answer's whole curve (which its charge
    then reuses) is the only whole curve dp-accounting computes."""
    make = lambda z: self_composed(poisson_sampled(0.0071, gaussian_event(z)), 900)  # noqa: E731
    acc = RdpAccountant(2.0, 1e-6, "add-remove")
    z = acc.calibrate(make)
    acc.charge(make(z))
    assert acc.epsilon_spent <= 2.0 and whole_curves[0] == 1


def _state(acc):
    """Charges over two passes and globally, before a calibration on top of them."""
    acc.charge(poisson_sampled(0.1, gaussian_event(2.0)) if acc.relation == "add-remove" else gaussian_event(7.0))
    for g in range(3):
        acc.charge(self_composed(gaussian_event(6.0), g + 1), ("b", g), pass_id="A")
    acc.charge(gaussian_event(9.0), ("b", 0), pass_id="B")
    return acc


ORDER_PLANS = dict(PLANS, **{
    "tiny-q": ("add-remove", 0.3, 1e-7, lambda z: self_composed(poisson_sampled(1e-4, gaussian_event(z)), 20000)),
    "few-steps": ("add-remove", 4.0, 1e-5, lambda z: self_composed(poisson_sampled(0.3, gaussian_event(z)), 3)),
    "large-order": ("replace-one", 8.0, 1e-5, lambda z: gaussian_event(z)),
    "without-replacement": ("replace-one", 2.0, 1e-5,
                            lambda z: self_composed(accounting.sampled_without_replacement(3000, 500,
                                                                                          gaussian_event(z)), 10)),
})


@pytest.mark.parametrize("charged", [False, True])
@pytest.mark.parametrize("plan", [pytest.param(p, marks=pytest.mark.slow) if p == "without-replacement" else p
                                  for p in sorted(ORDER_PLANS)])  # slow: the reference's whole curves
def test_search_by_orders_equals_the_whole_curve_search(monkeypatch, plan, charged):
    """The search on a few orders per trial and the plain search on whole curves give
    the same multiplier, on top of an empty or a charged state; the answer passes its
    whole-curve check (no fallback to the plain search).  A plan without a subsampled
    release (cheap whole curves) is searched on whole curves."""
    relation, eps, delta, make = ORDER_PLANS[plan]
    budget = eps + 3.0 if charged else eps
    by_orders, whole = RdpAccountant(budget, delta, relation), RdpAccountant(budget, delta, relation)
    if charged:
        _state(by_orders), _state(whole)
    ref = Accountant.calibrate(whole, make)
    plain = []
    real = Accountant.calibrate
    monkeypatch.setattr(Accountant, "calibrate", lambda *a, **kw: plain.append(1) or real(*a, **kw))
    z = by_orders.calibrate(make)
    subsampled = any(isinstance(a, (dpa.PoissonSampledDpEvent, dpa.SampledWithoutReplacementDpEvent))
                     for a in accounting.atoms(make(1.0)))
    assert bool(plain) != subsampled
    assert z == ref
    assert budget * (1 - 1e-5) <= by_orders.epsilon_of_plan(make(z)) <= budget


@pytest.mark.parametrize("wrong", ["low", "high", "undecided"])
def test_a_wrong_order_search_cannot_change_the_answer(monkeypatch, wrong):
    """If the search along the orders misses the least epsilon (here: it always
    answers the lowest or the highest order, or cannot decide), the whole-curve
    check sends the calibration to the plain search: the same multiplier."""
    make = PLANS["dp-sgd"][3]
    exact = Accountant.calibrate(RdpAccountant(1.0, 1e-5, "add-remove"), make)
    answer = {"low": lambda lo, hi: lo, "high": lambda lo, hi: hi, "undecided": lambda lo, hi: None}[wrong]
    monkeypatch.setattr(rdp_module, "argmin_unimodal", lambda f, lo, hi, **kw: answer(lo, hi))
    monkeypatch.setattr(rdp_module, "argmin_near", lambda f, start, lo, hi, **kw: answer(lo, hi))
    acc = RdpAccountant(1.0, 1e-5, "add-remove")
    z = acc.calibrate(make)
    assert z == exact
    assert 1.0 * (1 - 1e-3) <= acc.epsilon_of_plan(make(z)) <= 1.0


@pytest.mark.parametrize("seed", range(60))
def test_order_searches_find_the_minimum_of_a_falling_then_rising_sequence(seed):
    """On a sequence that is infinite on a prefix, then falls and rises (with flat
    stretches), the golden-section search and the search from any start return an
    index of the minimum, or None when two probes tie (a plateau) - never a wrong
    index - and evaluate each index at most once."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 160))
    down = -np.sort(-rng.integers(0, 6 if seed % 3 else 60, size=n))  # non-increasing, with repeats
    up = np.sort(rng.integers(0, 6 if seed % 3 else 60, size=n))
    turn = int(rng.integers(0, n))
    f = np.concatenate([down[:turn] + up[turn], up[turn:] + down[turn - 1 if turn else 0]]).astype(float)
    f[:int(rng.integers(0, turn + 1))] = np.inf
    for search in ("golden", "near"):
        calls: list = []

        def val(i):
            calls.append(i)
            return f[i]

        if search == "golden":
            i = argmin_unimodal(val, 0, n - 1, floor=f.min() if seed % 2 else -math.inf)
        else:
            i = argmin_near(val, int(rng.integers(0, n)), 0, n - 1)
        assert len(calls) == len(set(calls)) and len(calls) <= 4 * math.log2(n + 1) + 6
        assert i is None or f[i] == f.min(), (search, i, f)


def test_order_searches_on_a_strictly_unimodal_sequence_always_answer():
    for n in range(1, 200):
        for turn in (0, n // 3, n - 1):
            f = [abs(i - turn) + 0.5 * (i > turn) for i in range(n)]
            assert argmin_unimodal(lambda i: f[i], 0, n - 1) == turn
            for start in (0, n // 2, n - 1):
                assert argmin_near(lambda i: f[i], start, 0, n - 1) == turn


def test_pld_calibration_is_tight():
    make = lambda z: self_composed(gaussian_event(z), 20)  # noqa: E731
    acc = PldAccountant(1.0, 1e-5, "replace-one")
    z = acc.calibrate(make)
    spent = acc.epsilon_of_plan(make(z))
    assert 1.0 * (1 - 1e-3) <= spent <= 1.0
    assert z < RdpAccountant(1.0, 1e-5, "replace-one").calibrate(make)


