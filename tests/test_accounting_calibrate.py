"""Noise calibration (Accountant.calibrate): exact, on the feasible side, and cheap
(Brent on log z with a process-wide cache of RDP curves)."""
import math

import dp_accounting as dpa
import numpy as np
import pytest

from dpreg import accounting
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


def test_repeated_calibration_and_final_charge_reuse_cached_curves():
    q, T = 0.0123, 700  # a plan no other test uses: its curves start uncached
    make = lambda z: self_composed(poisson_sampled(q, gaussian_event(z)), T)  # noqa: E731
    before = accounting.rdp_cache_info().misses
    acc = RdpAccountant(1.0, 1e-5, "add-remove")
    z = acc.calibrate(make)
    first = accounting.rdp_cache_info().misses - before
    # the search runs on the numpy formula; dp-accounting's curve checks its answer once,
    # at the one order that decides epsilon (lazy orders: tests/test_accounting_lazy_orders.py)
    assert first == 1
    again = accounting.rdp_cache_info().misses
    z2 = RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make)
    acc.charge(make(z))
    assert z2 == z and accounting.rdp_cache_info().misses == again
    # a longer plan at the same (q, z): the same elementary curve, times the count; its
    # epsilon (larger) is decided at a smaller order: at most that one order is new
    RdpAccountant(10.0, 1e-5, "add-remove").charge(self_composed(poisson_sampled(q, gaussian_event(z)), 5 * T))
    assert accounting.rdp_cache_info().misses <= again + 1
    assert acc.epsilon_spent <= 1.0


def test_cached_curve_is_read_only_and_composition_is_dp_accountings():
    ev = self_composed(composed([poisson_sampled(0.05, gaussian_event(1.3)),
                                 self_composed(gaussian_event(3.0), 2)]), 7)
    acc = RdpAccountant(100.0, 1e-5, "add-remove")
    ref = dpa.rdp.RdpAccountant(list(acc._orders))
    ref.compose(ev)
    # before any order is exact: the subsampled atom is the numpy formula
    np.testing.assert_allclose(acc.rdp_of(ev), ref._rdp, rtol=1e-12)
    eps = acc.epsilon_if(ev)  # makes the deciding order exact
    exact = acc._exact.copy()
    assert exact.sum() == 1 and (acc.rdp_of(ev)[exact] == np.asarray(ref._rdp)[exact]).all()
    assert eps == pytest.approx(ref.get_epsilon(1e-5), rel=1e-12)
    for i in range(len(acc._orders)):
        acc._make_exact(i)
    assert (acc.rdp_of(ev) == ref._rdp).all()  # every order exact: same arithmetic, bit for bit
    atom = accounting._atom_rdp("add-remove", gaussian_event(3.0), acc._orders_key)
    with pytest.raises(ValueError):
        atom[0] = 0.0


def test_pld_calibration_is_tight():
    make = lambda z: self_composed(gaussian_event(z), 20)  # noqa: E731
    acc = PldAccountant(1.0, 1e-5, "replace-one")
    z = acc.calibrate(make)
    spent = acc.epsilon_of_plan(make(z))
    assert 1.0 * (1 - 1e-3) <= spent <= 1.0
    assert z < RdpAccountant(1.0, 1e-5, "replace-one").calibrate(make)


GRID_Q = (1e-5, 1e-3, 256 / 49990, 0.05, 0.3, 0.9, 1.0)
GRID_Z = (0.05, 0.3, 0.7, 1.0, 1.17, 3.0, 10.0, 37.0, 300.0)


def test_search_formula_is_dp_accountings_curve():
    from dp_accounting.rdp import rdp_privacy_accountant as ref_mod

    orders = np.array(ref_mod.DEFAULT_RDP_ORDERS, dtype=float)
    for q in GRID_Q:
        for z in GRID_Z:
            ref = np.asarray(ref_mod._compute_rdp_poisson_subsampled_gaussian(q, z, list(orders)))
            got = accounting._sampled_gaussian_rdp_np(q, z, orders)
            assert np.array_equal(np.isfinite(got), np.isfinite(ref)), (q, z)  # same orders excluded
            fin = np.isfinite(ref)
            # both sum the same terms; rounding differs at the ulp of the log-terms (~1e-17 absolute)
            np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-9, atol=1e-15, err_msg=f"q={q} z={z}")


@pytest.mark.parametrize("wrong", [0.8, 1.25])
def test_a_wrong_search_formula_cannot_change_the_answer(monkeypatch, wrong):
    make = PLANS["dp-sgd"][3]
    exact = RdpAccountant(1.0, 1e-5, "add-remove").calibrate(make)
    real = accounting._sampled_gaussian_rdp_np
    monkeypatch.setattr(accounting, "_sampled_gaussian_rdp_np", lambda q, z, o: wrong * real(q, z, o))
    acc = RdpAccountant(1.0, 1e-5, "add-remove")
    z = acc.calibrate(make)
    assert z == pytest.approx(exact, rel=1e-6)
    assert 1.0 * (1 - 1e-3) <= acc.epsilon_of_plan(make(z)) <= 1.0
