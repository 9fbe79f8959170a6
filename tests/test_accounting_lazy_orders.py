"""RdpAccountant's lazy orders: a Poisson-subsampled Gaussian's dp-accounting
curve is computed only at the orders that decide epsilon; the epsilon it
reports must be dp-accounting's over every order (never below it, above it by
no more than the numpy formula's ~1e-13 disagreement), for any charge history
(global, grouped, several passes), and be dp-accounting's conversion of
dp-accounting's own curve at one order."""
import dp_accounting as dpa
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpreg import accounting
from dpreg.accounting import RdpAccountant, composed, gaussian_event, poisson_sampled, self_composed

ORDERS = list(dpa.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


def full_curve(event):
    """dp-accounting's curve of ``event`` at every default order (add-remove)."""
    ref = dpa.rdp.RdpAccountant(ORDERS, dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    ref.compose(event)
    return np.asarray(ref._rdp, dtype=float)


def reference_epsilon(charges, delta):
    """Worst record's epsilon from full dp-accounting curves: global + sum over
    passes of the elementwise max over the pass's groups."""
    glob = np.zeros(len(ORDERS))
    groups: dict = {}
    for event, key in charges:
        c = full_curve(event)
        if key is None:
            glob = glob + c
        else:
            groups[key] = groups.get(key, 0) + c
    passes: dict = {}
    for (p, _), c in groups.items():
        passes[p] = c if p not in passes else np.maximum(passes[p], c)
    total = glob + sum(passes.values(), np.zeros(len(ORDERS)))
    if not np.any(total):
        return 0.0
    return float(dpa.rdp.rdp_privacy_accountant.compute_epsilon(ORDERS, total, delta)[0])


atoms = st.one_of(
    st.builds(lambda q, z: poisson_sampled(q, gaussian_event(z)),
              st.floats(1e-3, 0.6), st.floats(0.4, 30.0)),
    st.builds(gaussian_event, st.floats(0.5, 50.0)),
)
events = st.builds(lambda a, c: self_composed(a, c) if c > 1 else a, atoms, st.integers(1, 3000))
keys = st.one_of(st.none(), st.tuples(st.sampled_from([None, "warm", "select"]), st.integers(0, 2)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(events, keys), min_size=1, max_size=5), st.sampled_from([1e-5, 1e-8, 0.01]))
def test_lazy_epsilon_is_dp_accountings_over_every_order(charges, delta):
    acc = RdpAccountant(1e9, delta, "add-remove")
    for event, key in charges:
        if key is None:
            acc.charge(event)
        else:
            acc.charge(event, key[1], pass_id=key[0])
    ref = reference_epsilon(charges, delta)
    got = acc.epsilon_spent
    assert got >= ref * (1 - 1e-12) - 1e-300
    assert got == pytest.approx(ref, rel=1e-10, abs=1e-12)


def test_reported_epsilon_is_dp_accountings_conversion_at_an_exact_order():
    ev = composed([self_composed(poisson_sampled(0.01, gaussian_event(1.1)), 900),
                   self_composed(gaussian_event(8.0), 3)])
    acc = RdpAccountant(5.0, 1e-5, "add-remove")
    acc.charge(ev)
    eps = acc.epsilon_spent
    exact = np.flatnonzero(acc._exact)
    assert 1 <= exact.size <= 3  # a handful of orders computed, not 156
    # epsilon = dp-accounting's conversion of its own curve, at one exact order
    one = [float(ORDERS[i]) for i in exact]
    best = min(dpa.rdp.rdp_privacy_accountant.compute_epsilon(
        [o], [full_curve_at(ev, o)], 1e-5)[0] for o in one)
    assert eps == best
    assert eps == pytest.approx(reference_epsilon([(ev, None)], 1e-5), rel=1e-12)


def full_curve_at(event, order):
    ref = dpa.rdp.RdpAccountant([order], dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    ref.compose(event)
    return float(ref._rdp[0])


def test_refusal_and_calibration_agree_with_full_curves():
    """A charge is refused exactly when dp-accounting's full-order epsilon
    exceeds the budget; a calibrated plan spends the budget by that epsilon."""
    make = lambda z: self_composed(poisson_sampled(0.02, gaussian_event(z)), 500)  # noqa: E731
    acc = RdpAccountant(1.0, 1e-5, "add-remove")
    z = acc.calibrate(make)
    spent = reference_epsilon([(make(z), None)], 1e-5)
    assert 1.0 * (1 - 1e-3) <= spent <= 1.0
    assert reference_epsilon([(make(z * (1 - 1e-4)), None)], 1e-5) > spent
    fresh = RdpAccountant(1.0, 1e-5, "add-remove")
    assert fresh.fits(make(z)) and not fresh.fits(make(z * 0.99))


def test_a_cold_curve_costs_one_order_not_156():
    q, z = 0.00731, 1.234  # no other test uses this atom
    before = accounting.rdp_cache_info().misses
    acc = RdpAccountant(1.0, 1e-5, "add-remove")
    acc.charge(self_composed(poisson_sampled(q, gaussian_event(z)), 100))
    assert accounting.rdp_cache_info().misses - before <= 2


@settings(max_examples=200, deadline=None)
@given(log_scale=st.floats(-9, 3), tilt=st.floats(-1, 1), delta=st.sampled_from([1e-5, 1e-9, 0.3]),
       inf_at=st.none() | st.integers(0, len(ORDERS) - 1), zero_from=st.none() | st.integers(0, len(ORDERS) - 1))
def test_search_conversion_is_dp_accountings(log_scale, tilt, delta, inf_at, zero_from):
    """The calibration search's vectorised epsilon conversion against
    dp-accounting's compute_epsilon on curves of every scale and shape (an
    infinite order, a run of tiny values): the same order, epsilon to 1e-13."""
    a = np.asarray(ORDERS, dtype=float)
    rdp = 10.0 ** log_scale * a ** (1 + tilt)
    if inf_at is not None:
        rdp[inf_at] = np.inf
    if zero_from is not None:
        rdp[zero_from:] = 1e-300
    search = accounting._SearchRdp.of(RdpAccountant(1.0, delta, "add-remove"))
    eps, order = search._eps_order(rdp)
    ref_eps, ref_order = dpa.rdp.rdp_privacy_accountant.compute_epsilon(ORDERS, rdp, delta)
    assert eps == pytest.approx(ref_eps, rel=1e-13, abs=1e-300)
    assert order == ref_order or eps == pytest.approx(ref_eps, rel=1e-15)
