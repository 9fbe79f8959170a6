"""Private selectors: kernels vs naive references, the exponential mechanism's
selection frequencies (chi-square against the exact softmax), enforced score
sensitivity with a worst-case record, the pure-DP charge, AboveThreshold's
noise law, sensitivity and correctness, private hyper-parameter selection."""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from scipy import stats

from dpreg.accounting import PldAccountant, RdpAccountant, pure_dp_event, self_composed
from dpreg.errors import BudgetExceededError, ParameterError
from dpreg.problem import Problem
from dpreg_plugins.losses.linear import LowySynthetic, Logistic
from dpreg_plugins.selectors.private_selection import (AboveThresholdSelector, ExponentialSelector, above_threshold_scan,
                                     ball_net, default_phi_range, exponential_logits, gumbel_argmax,
                                     select_hyperparameters)

import naive_selection as ns
from conftest import unit_rows


@pytest.fixture(autouse=True, scope="module")
def _one_numba_thread():
    """These problems are tiny: parallel kernels only pay thread wake-ups (and
    suffer when the 2 shared cores are oversubscribed)."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def _logistic_problem(rng, n=60, d=3):
    X = unit_rows(rng, n, d)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return Problem(Logistic(), X, y)


def _lowy_problem(rng, n=200, d=4):
    X = unit_rows(rng, n, d)
    return Problem(LowySynthetic(), X, np.zeros(n))


# ------------------------------------------------------------------ kernels
@pytest.mark.parametrize("lo,hi", [(-10.0, 10.0), (0.2, 0.9)])
def test_clipped_phi_sums_matches_naive(rng, lo, hi):
    from dpreg_kernels.selection import clipped_phi_sums

    pb = _logistic_problem(rng, n=700, d=5)  # > 256 rows: several chunks
    W = rng.standard_normal((7, 5))
    s, k = clipped_phi_sums(pb.X, pb.y, pb.all_rows, W, pb.loss.scalar_kernels()[0], lo, hi)
    ref, kref = ns.clipped_phi_sums(pb.loss, pb.X, pb.y, W, lo, hi)
    np.testing.assert_allclose(s, ref, rtol=1e-10, atol=1e-10)
    assert k == kref
    if lo > 0:
        assert k > 0  # the narrow range really clips


def test_clipped_hessian_sum_matches_naive(rng):
    from dpreg_kernels.selection import clipped_hessian_sum

    pb = _logistic_problem(rng, n=600, d=4)
    w = rng.standard_normal(4)
    d2 = pb.loss.scalar_kernels()[2]
    for clip in (10.0, 0.05):
        H, k = clipped_hessian_sum(pb.X, pb.y, pb.all_rows, w, d2, clip)
        ref, kref = ns.clipped_hessian_sum(pb.loss, pb.X, pb.y, w, clip)
        np.testing.assert_allclose(H, ref, rtol=1e-10, atol=1e-12)
        assert k == kref
    # unclipped: the data part of the exact Hessian
    H, _ = clipped_hessian_sum(pb.X, pb.y, pb.all_rows, w, d2, 1e9)
    np.testing.assert_allclose(H / pb.n, pb.hessian(w), rtol=1e-9, atol=1e-12)


# -------------------------------------------------------- exponential mechanism
def test_exponential_selection_frequencies_chi_square(rng):
    pb = _logistic_problem(rng, n=40, d=2)
    sel = ExponentialSelector(pb, accountant=RdpAccountant(1e6, 1e-6), rng=np.random.default_rng(1),
                              lo=0.0, hi=2.0)
    W = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, -1.5], [2.0, 2.0], [-1.0, 0.5]])
    u, _ = sel.utilities(W)
    # utilities = sum of clipped phi - n lo (+ n psi = 0 for logistic): the naive reference
    ref_u, _ = ns.clipped_phi_sums(pb.loss, pb.X, pb.y, W, 0.0, 2.0)
    np.testing.assert_allclose(u, ref_u, rtol=1e-12)
    eps = 0.3
    p = ns.exponential_probabilities(u, eps, 2.0)
    assert p.min() > 0.01 and p.max() < 0.9  # a non-degenerate test
    np.testing.assert_allclose(sel.probabilities(W, eps), p, rtol=1e-12)
    N = 40000
    draws = gumbel_argmax(exponential_logits(u, eps, sel.sensitivity), np.random.default_rng(7), size=N)
    counts = np.bincount(draws, minlength=len(W))
    assert stats.chisquare(counts, N * p).pvalue > 1e-3
    # the test has power: the softmax of a wrong epsilon (eps instead of eps/2) is rejected
    for wrong in (2 * eps, eps / 2):
        assert stats.chisquare(counts, N * ns.exponential_probabilities(u, wrong, 2.0)).pvalue < 1e-8
    # the one-draw path used by select() is the same law
    one = [gumbel_argmax(exponential_logits(u, eps, 2.0), np.random.default_rng(s)) for s in range(3000)]
    assert stats.chisquare(np.bincount(one, minlength=len(W)), 3000 * p).pvalue > 1e-4


def test_score_sensitivity_enforced_with_worst_case_record(rng):
    n, d = 30, 3
    pb = _logistic_problem(rng, n=n, d=d)
    W = np.array([[0.0, 0.0, 0.0], [8.0, 0.0, 0.0], [-8.0, 0.0, 0.0], [0.0, 8.0, 0.0]])
    # worst case for a large-norm candidate: a unit record aligned against it (logistic loss ~ 8)
    X2, y2 = pb.X.copy(), pb.y.copy()
    X2[0], y2[0] = np.array([1.0, 0.0, 0.0]), -1.0
    pb2 = Problem(Logistic(), X2, y2)
    lo, hi, eps = 0.0, 1.0, 1.0
    acc = RdpAccountant(1e6, 1e-6)
    s1 = ExponentialSelector(pb, accountant=acc, rng=rng, lo=lo, hi=hi)
    s2 = ExponentialSelector(pb2, accountant=acc, rng=rng, lo=lo, hi=hi)
    u1, _ = s1.utilities(W)
    u2, _ = s2.utilities(W)
    assert np.max(np.abs(u1 - u2)) <= hi - lo + 1e-12
    ratio = s1.probabilities(W, eps) / s2.probabilities(W, eps)
    assert np.all(ratio <= math.exp(eps) + 1e-9) and np.all(ratio >= math.exp(-eps) - 1e-9)
    # without the clip the same record moves a score by far more than the declared Delta_u
    raw1, _ = ns.clipped_phi_sums(pb.loss, pb.X, pb.y, W, -1e9, 1e9)
    raw2, _ = ns.clipped_phi_sums(pb.loss, X2, y2, W, -1e9, 1e9)
    assert np.max(np.abs(raw1 - raw2)) > 5 * (hi - lo)


def test_select_charges_pure_event_before_drawing(rng):
    pb = _lowy_problem(rng, n=50, d=3)
    acc = PldAccountant(1.0, 1e-5, "add-remove")
    sel = ExponentialSelector(pb, accountant=acc, rng=np.random.default_rng(3))
    W = sel.net(50)
    assert np.all(np.linalg.norm(W, axis=1) <= 2.0 + 1e-12)  # lowy-synthetic's radius D = 2
    s = sel.select(W, 0.6)
    assert 0 <= s.index < 50 and np.array_equal(s.w, W[s.index])
    ref = PldAccountant(1.0, 1e-5, "add-remove")
    ref.charge(pure_dp_event(0.6))
    assert acc.epsilon_spent == pytest.approx(ref.epsilon_spent, rel=1e-12)
    state = sel.rng.bit_generator.state
    with pytest.raises(BudgetExceededError):
        sel.select(W, 0.6)  # 1.2 > 1: refused before any draw
    assert sel.rng.bit_generator.state == state and acc.n_charges == 1


def test_default_range_and_net_are_data_independent():
    lo, hi = default_phi_range(LowySynthetic(), 2.0)  # phi(m) = m on |m| <= 2
    assert (lo, hi) == pytest.approx((-2.0, 2.0))
    lo, hi = default_phi_range(Logistic(), 1.0)
    assert lo == pytest.approx(math.log1p(math.exp(-1.0))) and hi == pytest.approx(math.log1p(math.e))
    a = ball_net(100, 3.0, 4, np.random.default_rng(5))
    b = ball_net(100, 3.0, 4, np.random.default_rng(5))
    assert np.array_equal(a, b) and np.all(np.linalg.norm(a, axis=1) <= 3.0) and not a[0].any()


# --------------------------------------------------------------- pure DP event
@pytest.mark.parametrize("relation", ["replace-one", "add-remove"])
def test_pure_dp_event_is_eps0_dp_in_both_accountants(relation):
    eps0, k = 0.5, 3
    pld = PldAccountant(100.0, 1e-9, relation)
    pld.charge(pure_dp_event(eps0))
    assert pld.epsilon_spent == pytest.approx(eps0, abs=2e-3)  # exactly eps0 up to discretization
    rdp = RdpAccountant(100.0, 1e-9, relation)
    rdp.charge(pure_dp_event(eps0))
    assert eps0 <= rdp.epsilon_spent <= 1.05 * eps0  # RDP conversion: a slightly larger bound
    # k-fold: never more than basic composition, and PLD/RDP agree on the order of magnitude
    pld_k = PldAccountant(100.0, 1e-9, relation)
    pld_k.charge(self_composed(pure_dp_event(eps0), k))
    rdp_k = RdpAccountant(100.0, 1e-9, relation)
    rdp_k.charge(self_composed(pure_dp_event(eps0), k))
    assert pld_k.epsilon_spent <= k * eps0 + 2e-3 and rdp_k.epsilon_spent <= k * eps0 * 1.05
    assert pld_k.epsilon_spent > 2 * eps0 and rdp_k.epsilon_spent > 2 * eps0
    # with delta -> 0 the worst-case pair's k-fold loss is exactly k eps0 (tight, as pure DP is)
    tight = PldAccountant(100.0, 1e-15, relation)
    tight.charge(self_composed(pure_dp_event(eps0), k))
    assert tight.epsilon_spent == pytest.approx(k * eps0, abs=5e-3)


@pytest.mark.parametrize("relation", ["replace-one", "add-remove"])
def test_pure_event_rdp_curve_is_binary_randomized_response(relation):
    """Under either relation the RDP accountant's curve of an eps0-DP release is
    dp-accounting's REPLACE_ONE curve of binary randomized response, which is the
    Renyi divergence of the dominating pair P = (p, 1 - p), Q = (1 - p, p) with
    p = e^eps0 / (1 + e^eps0), and never exceeds eps0."""
    acc = RdpAccountant(100.0, 1e-5, relation)
    orders = np.asarray(dpa.rdp.RdpAccountant().orders, dtype=float)
    for eps0 in (0.05, 0.7, 3.0):
        ref = dpa.rdp.RdpAccountant(list(orders), dpa.NeighboringRelation.REPLACE_ONE)
        ref.compose(pure_dp_event(eps0))
        assert np.array_equal(acc.rdp_of(pure_dp_event(eps0)), ref.rdp)
        lp, lq = eps0 - np.log1p(np.exp(eps0)), -np.log1p(np.exp(eps0))
        pair = np.logaddexp(orders * lp + (1 - orders) * lq, orders * lq + (1 - orders) * lp) / (orders - 1)
        np.testing.assert_allclose(ref.rdp, pair, rtol=1e-9)
        assert np.all(ref.rdp <= eps0 + 1e-12)


def test_laplace_event_would_undercharge_a_pure_mechanism():
    """Why not LaplaceDpEvent(1/eps0): Laplace's RDP curve lies strictly below the
    dominating pair of eps0-DP, so composing several exponential mechanisms as
    Laplace would report too small an epsilon."""
    eps0, k, delta = 0.5, 20, 1e-6
    for A in (RdpAccountant, PldAccountant):
        rr = A(100.0, delta, "add-remove")
        rr.charge(self_composed(pure_dp_event(eps0), k))
        lap = A(100.0, delta, "add-remove")
        lap.charge(self_composed(dpa.LaplaceDpEvent(1.0 / eps0), k))
        assert lap.epsilon_spent < 0.985 * rr.epsilon_spent
        assert rr.epsilon_spent <= k * eps0
    # randomized response with P(truth) = e^eps0/(1+e^eps0) really is eps0-DP (and no better)
    p_true = 1 - pure_dp_event(eps0).noise_parameter / 2
    assert math.log(p_true / (1 - p_true)) == pytest.approx(eps0, rel=1e-12)


# ------------------------------------------------------------- above-threshold
def test_above_threshold_scan_law():
    """One candidate with deficit u passes with P(Lap(4/eps) - Lap(2/eps) >= u)."""
    eps, u, N = 1.0, 2.0, 20000
    hits = sum(above_threshold_scan([u], eps, np.random.default_rng(s)) == 0 for s in range(N))
    p = 1 - ns.laplace_difference_cdf(u, 4 / eps, 2 / eps)
    se = math.sqrt(p * (1 - p) / N)
    assert abs(hits / N - p) < 4.5 * se
    p_wrong = 1 - ns.laplace_difference_cdf(u, 2 / eps, 1 / eps)  # scales of 2 eps
    assert abs(hits / N - p_wrong) > 6 * se


def test_above_threshold_query_sensitivity_worst_case(rng):
    n, d = 40, 3
    pb = _logistic_problem(rng, n=n, d=d)
    X2, y2 = pb.X.copy(), pb.y.copy()
    X2[5] = np.array([0.0, 0.0, 1.0])
    y2[5] = -y2[5]
    pb2 = Problem(Logistic(), X2, y2)
    acc = RdpAccountant(1e6, 1e-6)  # replace-one: factor 2
    cands = [rng.standard_normal(d) * 3 for _ in range(6)]
    a1 = AboveThresholdSelector(pb, accountant=acc, rng=rng, grad_clip=0.3, hess_clip=0.05)
    a2 = AboveThresholdSelector(pb2, accountant=acc, rng=rng, grad_clip=0.3, hess_clip=0.05)
    u1, u2 = a1.deficits(cands, 0.1), a2.deficits(cands, 0.1)
    assert np.max(np.abs(u1 - u2)) <= 1.0 + 1e-9
    assert a1.sensitivities == pytest.approx((2 * 0.3 / n, 2 * 0.05 / n))
    # with no clipping binding, the queries are the exact gradient norm and lambda_min
    a3 = AboveThresholdSelector(pb, accountant=acc, rng=rng, grad_clip=1e6, hess_clip=1e6)
    w = cands[0]
    assert a3.clipped_gradient_norm(w) == pytest.approx(np.linalg.norm(pb.gradient(w)), rel=1e-10)
    assert a3.clipped_lambda_min(w) == pytest.approx(np.linalg.eigvalsh(pb.hessian(w))[0], rel=1e-8, abs=1e-12)


def _stationary_point(pb):
    # lowy-synthetic: grad F(w) = (1 + cos|w|^2) w + mean(x) = 0  (fixed point, |w| small)
    xbar = pb.X.mean(axis=0)
    w = np.zeros(pb.d)
    for _ in range(100):
        w = -xbar / (1.0 + math.cos(float(w @ w)))
    return w


def test_above_threshold_finds_the_sosp_on_an_easy_instance(rng):
    pb = _lowy_problem(rng, n=1000, d=4)
    w_star = _stationary_point(pb)
    assert np.linalg.norm(pb.gradient(w_star)) < 1e-8
    far = [np.array([1.4, 0.0, 0.0, 0.0]), np.array([0.0, -1.2, 0.5, 0.0])]
    eps, alpha = 2.0, 0.2
    picks = []
    for s in range(10):
        acc = RdpAccountant(eps, 1e-6, "replace-one")
        at = AboveThresholdSelector(pb, accountant=acc, rng=np.random.default_rng(s))
        with pytest.raises(BudgetExceededError):  # RDP charges a pure eps slightly more than eps
            at.select(far, eps, alpha)
        r = at.select(far + [w_star] + far, eps, alpha, fit=True)  # the largest eps0 <= eps that fits
        assert 0.99 * eps < r.epsilon <= eps
        picks.append(r.index)
        ref = RdpAccountant(10 * eps, 1e-6, "replace-one")
        ref.charge(pure_dp_event(r.epsilon))
        assert acc.epsilon_spent == pytest.approx(ref.epsilon_spent, rel=1e-12)
        assert acc.epsilon_spent <= eps and acc.n_charges == 1
    assert picks == [2] * 10
    # no candidate passes: no output
    acc = PldAccountant(eps, 1e-6, "replace-one")
    none = AboveThresholdSelector(pb, accountant=acc, rng=np.random.default_rng(0)).select(far, eps, alpha)
    assert none.index is None and none.w is None


def test_above_threshold_dense_limit(rng):
    X = unit_rows(rng, 20, 301)
    pb = Problem(Logistic(), X, np.ones(20))
    with pytest.raises(ParameterError, match="fosp"):
        AboveThresholdSelector(pb, accountant=RdpAccountant(1.0, 1e-5), rng=rng)
    at = AboveThresholdSelector(pb, accountant=RdpAccountant(1.0, 1e-5), rng=rng, check="fosp")
    assert at.deficits([np.zeros(301)], 0.1).shape == (1,)


# ------------------------------------------------ hyper-parameter selection
def test_hyperparameter_selection_accounts_runs_and_selection_together(rng):
    pb = _lowy_problem(rng, n=200, d=3)
    acc = RdpAccountant(2.0, 1e-5, "replace-one")
    grid = [{"step": 0.01, "steps": 5}, {"step": 0.3, "steps": 5}]
    out = select_hyperparameters(pb, "dp-gd", grid, accountant=acc, epsilon_each=0.8, delta_each=5e-6,
                                 epsilon_select=0.3, seed=1)
    assert out["index"] in (0, 1) and out["params"]["step"] == grid[out["index"]]["step"]
    assert len(out["outputs"]) == 2
    # the accountant holds 2 calibrated runs (each <= 0.8 on its own) + the pure selection
    z = [o.info["noise_multiplier"] for o in out["outputs"]]
    ref = RdpAccountant(100.0, 1e-5, "replace-one")
    ref.charge(pure_dp_event(0.3))
    for zi in z:
        ref.charge(self_composed(dpa.GaussianDpEvent(zi), 5))
    assert acc.epsilon_spent == pytest.approx(ref.epsilon_spent, rel=1e-9)
    assert acc.epsilon_spent <= 2.0
    solo = RdpAccountant(100.0, 5e-6, "replace-one")
    solo.charge(self_composed(dpa.GaussianDpEvent(z[0]), 5))
    assert solo.epsilon_spent <= 0.8 * (1 + 1e-6)
