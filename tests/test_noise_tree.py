"""The ``tree`` noise mechanism: accounting against dp-accounting's tree
aggregation event, prefix-noise statistics, node structure, determinism,
phases, budget refusal and O(log T) memory."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpreg.accounting import RdpAccountant, gaussian_event
from dpreg.errors import BudgetExceededError
from dpreg.interfaces import Participation
from dpreg_plugins.noise.gaussian import GaussianMechanism
from dpreg_plugins.noise.tree import TreeMechanism, tree_levels


def make(dim=4, z=1.0, horizon=16, eps=1e6, delta=1e-6, seed=0, relation="replace-one"):
    acc = RdpAccountant(eps, delta, relation)
    return TreeMechanism(dim=dim, noise_multiplier=z, horizon=horizon, accountant=acc, seed=seed), acc


def test_registered(registry):
    assert registry.get("noise", "tree") is TreeMechanism


@pytest.mark.parametrize("T", [1, 2, 3, 7, 8, 1023, 1024, 1600])
def test_levels_match_dp_accounting_depth(T):
    assert tree_levels(T) == math.floor(math.log2(T)) + 1 == math.ceil(math.log2(T + 1))


@pytest.mark.parametrize("sigma, expected", [(1.13, 18.71), (8.83, 1.773)])
def test_disjoint_charging_equals_single_epoch_tree_aggregation(sigma, expected):
    import dp_accounting as dpa

    ref = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_SPECIAL)
    ref.compose(dpa.SingleEpochTreeAggregationDpEvent(sigma, 1600))
    eps_ref = ref.get_epsilon(1e-6)
    assert eps_ref == pytest.approx(expected, rel=2e-3)
    # our record event (L-fold Gaussian) ...
    acc = RdpAccountant(1e6, 1e-6)
    assert acc.epsilon_if(TreeMechanism.record_event(sigma, 1600, "disjoint", 1)) == pytest.approx(eps_ref, rel=1e-9)
    # ... and what a run actually charges: every record in one leaf of a 1600-step phase
    mech, acc = make(dim=2, z=sigma, horizon=1600)
    for t in range(40):
        mech.add(np.zeros(2), 1.0, Participation.disjoint(("b", t)))
    assert acc.epsilon_spent == pytest.approx(eps_ref, rel=1e-9)


def test_global_participation_charges_one_gaussian_per_completed_node():
    mech, acc = make(z=2.0, horizon=64)
    for t in range(10):
        mech.add(np.zeros(4), 1.0, Participation.all())
    ref = RdpAccountant(1e6, 1e-6)
    for _ in range(10):
        ref.charge(gaussian_event(2.0))
    assert acc.epsilon_spent == pytest.approx(ref.epsilon_spent, rel=1e-12)
    assert acc.epsilon_if(TreeMechanism.record_event(2.0, 64, "all", 10)) > 0
    assert RdpAccountant(1e6, 1e-6).epsilon_if(TreeMechanism.record_event(2.0, 64, "all", 10)) == \
        pytest.approx(acc.epsilon_spent, rel=1e-12)


def _standardized_ok(x, sd):
    """KS and chi-square of x/sd against N(0,1) at level 1e-4."""
    u = np.ravel(x) / sd
    chi = float(np.sum(u * u))
    lo, hi = stats.chi2.ppf([1e-4, 1 - 1e-4], u.size)
    return lo < chi < hi and stats.kstest(u, "norm").pvalue > 1e-4


def test_prefix_noise_variance_is_popcount():
    # unit node noise (z * s = 1): the prefix noise at step t has variance popcount(t)
    dim, T = 3000, 40
    mech, _ = make(dim=dim, z=1.0, horizon=T, seed=11)
    for t in range(1, T + 1):
        rel = mech.add(np.zeros(dim), 1.0, Participation.disjoint(t))
        pc = bin(t).count("1")
        assert TreeMechanism.noise_std_per_step(1.0, 1.0, t) == pytest.approx(math.sqrt(pc))
        assert _standardized_ok(rel, math.sqrt(pc)), t
        if pc > 1:  # a wrong sigma is rejected: e.g. the Gaussian mechanism's sqrt(t), or one node
            assert not _standardized_ok(rel, math.sqrt(t)) or t == pc
            assert not _standardized_ok(rel, 1.0)
        assert not _standardized_ok(rel, 1.25 * math.sqrt(pc))


def test_node_structure_shared_noise_and_max_sensitivity():
    dim = 5
    mech, _ = make(dim=dim, z=2.0, horizon=8, seed=5)
    r1 = mech.add(np.zeros(dim), 1.0, Participation.disjoint(1))
    np.testing.assert_allclose(r1, 2.0 * 1.0 * mech.node_noise(0, 0))
    r2 = mech.add(np.zeros(dim), 3.0, Participation.disjoint(2))
    # node (level 1, index 0) covers leaves 1-2: sensitivity max(1, 3) = 3
    np.testing.assert_allclose(r2, 2.0 * 3.0 * mech.node_noise(1, 0))
    r3 = mech.add(np.zeros(dim), 0.5, Participation.disjoint(3))
    np.testing.assert_allclose(r3 - r2, 2.0 * 0.5 * mech.node_noise(0, 2))
    r4 = mech.add(np.ones(dim), 0.5, Participation.disjoint(4))
    np.testing.assert_allclose(r4, np.ones(dim) + 2.0 * 3.0 * mech.node_noise(2, 0))


def test_global_node_sensitivity_is_sum_of_leaves():
    dim = 2000
    mech, _ = make(dim=dim, z=1.0, horizon=8, seed=2)
    sens = [1.0, 2.0, 0.5, 0.25]
    for s in sens:
        rel = mech.add(np.zeros(dim), s, Participation.all())
    np.testing.assert_allclose(rel, sum(sens) * mech.node_noise(2, 0))
    assert _standardized_ok(rel, sum(sens))
    assert TreeMechanism.noise_std_per_step(1.0, 1.0, 4, participation_kind="all") == 4.0
    assert TreeMechanism.noise_std_per_step(1.0, 1.0, 3, participation_kind="all") == pytest.approx(math.sqrt(5))


def test_prefix_sums_exact_plus_decomposition_noise():
    # release(t) = exact prefix sum + sum over set bits j of t of node (j, t>>j - 1)'s noise
    rng = np.random.default_rng(0)
    dim, T, z = 3, 37, 0.7
    mech, _ = make(dim=dim, z=z, horizon=T)
    incs = rng.standard_normal((T, dim))
    for t in range(1, T + 1):
        rel = mech.add(incs[t - 1], 1.0, Participation.disjoint(t))
        noise = sum(z * mech.node_noise(j, (t >> j) - 1) for j in range(t.bit_length()) if (t >> j) & 1)
        np.testing.assert_allclose(rel, incs[:t].sum(axis=0) + noise, atol=1e-12)


def test_deterministic_from_seed_and_node_noise_is_pure():
    inc = np.linspace(-1, 1, 6)
    runs = []
    for seed in (3, 3, 4):
        mech, _ = make(dim=6, seed=seed, horizon=16)
        runs.append([mech.add(inc, 1.0, Participation.disjoint(t)) for t in range(9)])
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert not np.array_equal(runs[0][-1], runs[2][-1])
    mech, _ = make(dim=6, seed=3)
    a = mech.node_noise(2, 1)
    mech.node_noise(0, 0)
    assert np.array_equal(a, mech.node_noise(2, 1))
    # SeedSequence seeds work too and are deterministic
    acc = RdpAccountant(1e6, 1e-6)
    m1 = TreeMechanism(dim=3, noise_multiplier=1.0, horizon=4, accountant=acc, seed=np.random.SeedSequence(9))
    m2 = TreeMechanism(dim=3, noise_multiplier=1.0, horizon=4, accountant=acc, seed=np.random.SeedSequence(9))
    assert np.array_equal(m1.add(np.zeros(3), 1.0, Participation.all()), m2.add(np.zeros(3), 1.0, Participation.all()))


def test_reset_restarts_with_fresh_noise():
    dim = 4
    mech, _ = make(dim=dim, z=1.0, horizon=4, seed=1)
    first = [mech.add(np.full(dim, 1e6), 1.0, Participation.disjoint(("a", t))) for t in range(4)]
    with pytest.raises(RuntimeError):
        mech.add(np.zeros(dim), 1.0, Participation.disjoint("x"))
    mech.reset()
    assert mech.phase == 1 and mech.steps == 0 and mech.stored_vectors() == 0
    rel = mech.add(np.zeros(dim), 1.0, Participation.disjoint(("b", 0)))
    assert np.all(np.abs(rel) < 10)  # the old sum is gone
    np.testing.assert_allclose(rel, mech.node_noise(0, 0))
    assert not np.allclose(rel, first[0] - 1e6)  # phase 1 noise differs from phase 0 noise


def test_budget_refused_before_release_and_state_unchanged():
    z = 1.0
    single = RdpAccountant(1e6, 1e-6).epsilon_if(gaussian_event(z))
    levels = RdpAccountant(1e6, 1e-6).epsilon_if(TreeMechanism.record_event(z, 1024, "disjoint", 1))
    budget = 0.5 * (single + levels)
    # the Gaussian mechanism fits one disjoint release, the tree (11 levels) does not
    acc_g = RdpAccountant(budget, 1e-6)
    GaussianMechanism(dim=3, noise_multiplier=z, horizon=1024, accountant=acc_g, seed=0).add(
        np.ones(3), 1.0, Participation.disjoint(0))
    mech, acc = make(dim=3, z=z, horizon=1024, eps=budget)
    with pytest.raises(BudgetExceededError):
        mech.add(np.ones(3), 1.0, Participation.disjoint(0))
    assert mech.steps == 0 and mech.stored_vectors() == 0 and acc.n_charges == 0 and acc.epsilon_spent == 0
    # global: the k-th node fits, the (k+1)-th is refused, state intact
    ref = RdpAccountant(1e6, 1e-6)
    for _ in range(3):
        ref.charge(gaussian_event(z))
    mech, acc = make(dim=3, z=z, horizon=16, eps=ref.epsilon_spent * 1.0001)
    for _ in range(3):
        mech.add(np.ones(3), 1.0, Participation.all())
    with pytest.raises(BudgetExceededError):
        mech.add(np.ones(3), 1.0, Participation.all())
    assert mech.steps == 3 and acc.n_charges == 3
    assert mech.stored_vectors() == 4  # nodes of 3 = 0b11


def test_memory_is_logarithmic():
    T = 4096
    mech, _ = make(dim=8, z=1.0, horizon=T)
    L = tree_levels(T)
    peak = 0
    for t in range(T):
        mech.add(np.ones(8), 1.0, Participation.disjoint(t))
        peak = max(peak, mech.stored_vectors())
    assert peak <= 2 * L
    assert peak >= 2 * (L - 1)  # step 4095 = 0b111111111111 holds 12 levels
    arrays = [v for v in vars(mech).values() if isinstance(v, (list, tuple))]
    assert all(len(a) <= L for a in arrays)


def test_refuses_mixed_participation_and_duplicate_groups():
    mech, _ = make()
    mech.add(np.zeros(4), 1.0, Participation.disjoint("g"))
    with pytest.raises(ValueError):
        mech.add(np.zeros(4), 1.0, Participation.all())
    with pytest.raises(ValueError):
        mech.add(np.zeros(4), 1.0, Participation.disjoint("g"))
    mech.reset()
    mech.add(np.zeros(4), 1.0, Participation.disjoint("g"))  # a new phase may reuse nothing else
