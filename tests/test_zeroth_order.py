"""Zeroth-order O2NC (zhang-tran-cutkosky-2024): the fused kernel against its
numpy reference, the GRAD/DIFF/naive estimators against the gradients they
estimate, the enforced sensitivities on worst-case records, the accounting
against dp-accounting, the run's output rule, and the audit."""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest

import naive
from conftest import shared_file, unit_rows
from dpreg.accounting import RdpAccountant
from dpreg.errors import ParameterError
from dpreg.interfaces import LinearModelLoss, Participation
from dpreg.params import bind
from dpreg.problem import Problem
from dpreg_kernels.zeroth_order import _n_zo_chunks, zo_sum
from dpreg_plugins.algorithms.zo_o2nc import ZoO2NC, default_block_length, paper_rho
from dpreg_plugins.oracles.zeroth_order import ZerothOrderOracle, unit_directions

ANY = Participation.disjoint(("test", 0))


def _labels(rng, n):
    return np.where(rng.random(n) < 0.5, -1.0, 1.0)


# ------------------------------------------------------------------ kernel
@pytest.mark.parametrize("loss_name", ["logistic", "ramp", "sigmoid"])
@pytest.mark.parametrize("b, J", [(1, 7), (3, 1), (2000, 7)])  # serial (one chunk) and parallel paths
def test_kernel_matches_numpy_reference(registry, loss_name, b, J):
    rng = np.random.default_rng(1)
    n, d = 2500, 7
    loss = registry.get("loss", loss_name)
    X = unit_rows(rng, n, d)
    y = _labels(rng, n)
    idx = np.sort(rng.choice(n, size=b, replace=False)).astype(np.int64)
    U = unit_directions(rng, (b, J, d))
    wa = rng.standard_normal(d)
    wb = wa + 0.3 * rng.standard_normal(d)
    phi = loss.scalar_kernels()[0]
    for args in ((wa, wa, 0.2, -1.0, 1 / 0.4, 0.3, np.inf, False),   # GRAD form, clip active
                 (wa, wb, 0.2, 1.0, 1.0, 0.05, np.inf, False),        # DIFF form, clip active
                 (wa, wa, 0.2, -1.0, 1 / 0.4, 0.3, 0.05, False),      # GRAD, record clip active
                 (wa, wb, 0.2, 1.0, 0.5, 0.05, 0.02, True),           # symmetric DIFF, both clips
                 (wa, wb, 0.2, 1.0, 0.5, np.inf, np.inf, True),       # symmetric DIFF, no clip
                 (wa, wb, 0.2, 1.0, 1.0, np.inf, np.inf, False)):     # no clip
        s, k = zo_sum(X, y, idx, *args[:2], U, *args[2:], phi)
        s_ref, k_ref = naive.zo_sum(loss, X, y, idx, *args[:2], U, *args[2:])
        np.testing.assert_allclose(s, s_ref, rtol=1e-9, atol=1e-12)
        assert k == k_ref
        if args[6] < np.inf and b == 2000:  # the record clip bites among 2000 records
            assert k_ref > 0
    assert k_ref == 0
    assert (_n_zo_chunks(b, J, d) > 1) == (b == 2000)  # both kernel variants are covered


def test_kernel_result_does_not_depend_on_thread_count(registry):
    import numba

    rng = np.random.default_rng(2)
    X, y = unit_rows(rng, 4000, 6), _labels(rng, 4000)
    idx = np.arange(4000, dtype=np.int64)
    U = unit_directions(rng, (4000, 6, 6))
    w = rng.standard_normal(6)
    phi = registry.get("loss", "ramp").scalar_kernels()[0]
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = zo_sum(X, y, idx, w, w, U, 0.1, -1.0, 5.0, 1.0, 2.0, False, phi)[0]
        numba.set_num_threads(old)
        b = zo_sum(X, y, idx, w, w, U, 0.1, -1.0, 5.0, 1.0, 2.0, False, phi)[0]
    finally:
        numba.set_num_threads(old)
    assert np.array_equal(a, b)


# ------------------------------------------------------------- estimators
def _mean_and_se(draws):
    D = np.array(draws)
    return D.mean(0), np.linalg.norm(D.std(0, ddof=1)) / math.sqrt(len(D))


@pytest.fixture(scope="module")
def smooth_problem(registry):
    rng = np.random.default_rng(3)
    n, d = 300, 5
    X = unit_rows(rng, n, d)
    y = _labels(rng, n)
    return Problem(registry.get("loss", "logistic"), X, y), rng.standard_normal(d)


def test_grad_estimates_the_gradient(smooth_problem):
    """E GRAD = grad F_h; for a smooth loss and small h, grad F_h = grad F +
    O(h^2).  The tolerance (10 % of |grad F|) is > 5 standard errors, and a
    factor-2 error in the estimator's scale would miss by 100 %."""
    pb, w = smooth_problem
    orc = ZerothOrderOracle(pb, smoothing=0.01, rng=np.random.default_rng(4))
    idx = pb.all_rows
    target = pb.gradient(w)
    mean, se = _mean_and_se([orc.grad(w, idx, ANY, factor=2.0).value for _ in range(300)])
    tol = 0.1 * np.linalg.norm(target)
    assert 5 * se < tol
    assert np.linalg.norm(mean - target) < tol


def test_naive_estimates_the_gradient(smooth_problem):
    pb, w = smooth_problem
    orc = ZerothOrderOracle(pb, smoothing=0.01, rng=np.random.default_rng(5))
    target = pb.gradient(w)
    mean, se = _mean_and_se([orc.naive(w, pb.all_rows, ANY, factor=2.0).value for _ in range(1500)])
    tol = 0.1 * np.linalg.norm(target)
    assert 5 * se < tol
    assert np.linalg.norm(mean - target) < tol


def lsq_phi(m, y):
    return 0.5 * (m - y) * (m - y)


def lsq_dphi(m, y):
    return m - y


def lsq_d2phi(m, y):
    return 1.0


class LeastSquares(LinearModelLoss):
    """1/2 (<x,w> - y)^2: quadratic, so smoothing leaves its gradient unchanged
    (grad F_h = grad F for every h: no smoothing bias in the test)."""

    name = "test-least-squares"
    labels = "real"
    classifier = False
    phi = staticmethod(lsq_phi)
    dphi = staticmethod(lsq_dphi)
    d2phi = staticmethod(lsq_d2phi)

    def constants(self, d):
        return 100.0, 1.0, 0.0


@pytest.mark.parametrize("symmetric", [False, True])
def test_diff_estimates_the_gradient_difference(symmetric):
    """E DIFF(x, y) = grad F_h(x) - grad F_h(y) = H (x - y) for a quadratic
    (h = 1: no bias, smaller variance), for Alg 2 and the symmetric form.
    The tolerance (10 %) is > 5 standard errors; a factor-2 error in the
    scale would miss by 100 %."""
    rng = np.random.default_rng(6)
    n, d = 300, 5
    X = unit_rows(rng, n, d)
    pb = Problem(LeastSquares(), X, rng.standard_normal(n))
    w = rng.standard_normal(d)
    x = w + 0.5 * rng.standard_normal(d) / math.sqrt(d)
    orc = ZerothOrderOracle(pb, smoothing=1.0, rng=np.random.default_rng(7), symmetric_diff=symmetric)
    target = pb.gradient(x) - pb.gradient(w)
    draws = [orc.diff(x, w, pb.all_rows, ANY, factor=2.0).value for _ in range(600)]
    mean, se = _mean_and_se(draws)
    tol = 0.1 * np.linalg.norm(target)
    assert orc.diff(x, w, pb.all_rows, ANY, factor=2.0).clipped == 0
    assert 5 * se < tol
    assert np.linalg.norm(mean - target) < tol
    if symmetric:  # the common-mode term <grad f, x - y> u is gone: much less spread than Alg 2
        alg2 = ZerothOrderOracle(pb, smoothing=1.0, rng=np.random.default_rng(7))
        _, se2 = _mean_and_se([alg2.diff(x, w, pb.all_rows, ANY, factor=2.0).value for _ in range(600)])
        assert se < 0.5 * se2


def test_psi_part_is_estimated_too(registry):
    """sigmoid-l2's data-independent term lam/2 |w|^2 enters unclipped: with
    the data part switched off (x = 0) GRAD is an unbiased estimate of lam w."""
    rng = np.random.default_rng(8)
    pb = Problem(registry.get("loss", "sigmoid-l2"), np.zeros((4, 3)), np.ones(4))
    w = np.array([3.0, -2.0, 1.0])
    orc = ZerothOrderOracle(pb, smoothing=0.1, rng=rng)
    mean, se = _mean_and_se([orc.grad(w, pb.all_rows, ANY, factor=2.0).value for _ in range(3000)])
    target = pb.loss.lam * w
    assert 5 * se < 0.15 * np.linalg.norm(target)
    assert np.linalg.norm(mean - target) < 0.15 * np.linalg.norm(target)


# ------------------------------------------------------------ sensitivity
def _hostile_problem(registry, loss_name, d=6):
    """Records far outside the unit ball (|x| up to 1e300: overflowing
    margins, NaN differences) next to ordinary ones."""
    rng = np.random.default_rng(9)
    X = unit_rows(rng, 8, d)
    X[0] *= 1e6
    X[1] = 1e300 * np.ones(d) / math.sqrt(d)
    X[2, 0] = -1e4
    y = _labels(rng, 8)
    return Problem(registry.get("loss", loss_name), X, y)


@pytest.mark.parametrize("loss_name", ["logistic", "ramp", "sigmoid"])
def test_per_record_terms_respect_lemma_bounds_on_hostile_records(registry, loss_name):
    """Each record's term has norm <= d L (GRAD, naive) and d L |x - y| / h
    (DIFF), whatever the record: the clipping enforces Lemmas 3.1-3.2."""
    pb = _hostile_problem(registry, loss_name)
    d, L, h = pb.d, 0.5, 0.01
    orc = ZerothOrderOracle(pb, smoothing=h, lipschitz=L, rng=np.random.default_rng(10))
    rng = np.random.default_rng(11)
    for _ in range(20):
        w = 50 * rng.standard_normal(d)
        v = w + 3 * rng.standard_normal(d)
        for i in range(pb.n):
            one = np.array([i], dtype=np.int64)
            g = orc.grad(w, one, ANY, factor=2.0)
            assert np.linalg.norm(g.value) <= d * L and g.sensitivity == 2 * d * L
            q = orc.diff(w, v, one, ANY, factor=2.0)
            bound = d * L * np.linalg.norm(w - v) / h
            assert np.linalg.norm(q.value) <= bound and q.sensitivity == pytest.approx(2 * bound)
            a = orc.naive(w, one, ANY, factor=2.0)
            assert np.linalg.norm(a.value) <= d * L
    # at w = 0 the hostile records' differences are far above L: clipped (NaN dropped)
    assert orc.grad(np.zeros(d), np.arange(3, dtype=np.int64), ANY, factor=2.0).clipped > 0


@pytest.mark.parametrize("loss_name", ["logistic", "ramp", "sigmoid"])
def test_record_clip_bounds_each_record_and_sets_the_sensitivity(registry, loss_name):
    """With the practical record clip C each record's term has norm <= C
    (GRAD, naive) and C |x - y| / h (DIFF, both forms), and the sensitivity
    is factor C / b (factor C |x - y| / (b h)), whatever the record."""
    pb = _hostile_problem(registry, loss_name)
    d, L, h, C = pb.d, 0.5, 0.01, 0.3
    rng = np.random.default_rng(21)
    for sym in (False, True):
        orc = ZerothOrderOracle(pb, smoothing=h, lipschitz=L, rng=np.random.default_rng(20), record_clip=C,
                                symmetric_diff=sym)
        for _ in range(10):
            w = 50 * rng.standard_normal(d)
            v = w + 3 * rng.standard_normal(d)
            for i in range(pb.n):
                one = np.array([i], dtype=np.int64)
                g = orc.grad(w, one, ANY, factor=2.0)
                assert np.linalg.norm(g.value) <= C and g.sensitivity == 2 * C
                q = orc.diff(w, v, one, ANY, factor=2.0)
                bound = C * np.linalg.norm(w - v) / h
                assert np.linalg.norm(q.value) <= bound and q.sensitivity == pytest.approx(2 * bound)
                a = orc.naive(w, one, ANY, factor=2.0)
                assert np.linalg.norm(a.value) <= C * (1 + 1e-12) and a.sensitivity == 2 * C
    # a clip above d L changes nothing: the sensitivity stays Lemma 3.1's
    big = ZerothOrderOracle(pb, smoothing=h, lipschitz=L, rng=np.random.default_rng(20), record_clip=1e9)
    assert big.grad(np.zeros(d), pb.all_rows[:2], ANY, factor=2.0).sensitivity == pytest.approx(d * L)


def test_replacing_a_record_moves_the_mean_by_at_most_the_sensitivity(registry):
    """Neighbouring batches (one record replaced by a hostile one), same
    directions: |GRAD(Z) - GRAD(Z')| <= sensitivity = 2 d L / b (and DIFF)."""
    pb = _hostile_problem(registry, "logistic")
    rng = np.random.default_rng(12)
    for trial in range(10):
        w = 5 * rng.standard_normal(pb.d)
        v = w + 0.01 * rng.standard_normal(pb.d)
        Z = np.array([3, 4, 5, 6], dtype=np.int64)
        Zp = np.array([3, 4, 5, [0, 1, 2][trial % 3]], dtype=np.int64)
        opts = [{}, {"record_clip": 0.2, "symmetric_diff": True}, {"record_clip": 0.2}][trial % 3]
        for kind, args in (("grad", (w,)), ("diff", (w, v)), ("naive", (w,))):
            a = getattr(ZerothOrderOracle(pb, smoothing=0.05, rng=np.random.default_rng(trial), **opts), kind)(
                *args, Z, ANY, factor=2.0)
            b = getattr(ZerothOrderOracle(pb, smoothing=0.05, rng=np.random.default_rng(trial), **opts), kind)(
                *args, Zp, ANY, factor=2.0)
            assert np.linalg.norm(a.value - b.value) <= a.sensitivity * (1 + 1e-9)


def test_directions_are_drawn_in_blocks_without_b_d_d_arrays(registry, monkeypatch):
    """A GRAD over b records draws (block, d, d) direction arrays of at most
    DIRECTION_FLOATS floats, never one (b, d, d) array."""
    import dpreg_plugins.oracles.zeroth_order as zo

    monkeypatch.setattr(zo, "DIRECTION_FLOATS", 100)
    shapes = []
    real = zo.unit_directions
    monkeypatch.setattr(zo, "unit_directions", lambda rng, shape: shapes.append(shape) or real(rng, shape))
    rng = np.random.default_rng(13)
    pb = Problem(registry.get("loss", "ramp"), unit_rows(rng, 50, 5), _labels(rng, 50))
    w = rng.standard_normal(5)
    a = zo.ZerothOrderOracle(pb, smoothing=0.1, rng=np.random.default_rng(1)).grad(w, pb.all_rows, ANY, factor=2.0)
    assert max(int(np.prod(s)) for s in shapes) <= 100 and sum(s[0] for s in shapes) == 50
    monkeypatch.setattr(zo, "DIRECTION_FLOATS", 1 << 20)
    b = zo.ZerothOrderOracle(pb, smoothing=0.1, rng=np.random.default_rng(1)).grad(w, pb.all_rows, ANY, factor=2.0)
    assert a.value.shape == b.value.shape == (5,)


# ------------------------------------------------------------- algorithm
def _algo(registry, pb, eps=2.0, noise="tree", seed=0, **given):
    acc = RdpAccountant(eps, 1e-5, "replace-one")
    algo = ZoO2NC(pb, bind(ZoO2NC.params, given, "zo-o2nc"), noise=registry.get("noise", noise),
                  accountant=acc, seed=seed)
    return algo, acc


@pytest.fixture(scope="module")
def ramp_problem(registry):
    rng = np.random.default_rng(14)
    n, d = 3000, 5
    w_star = rng.standard_normal(d)
    X = unit_rows(rng, n, d)
    y = np.where(X @ w_star + 0.1 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return Problem(registry.get("loss", "ramp"), X, y)


def test_thm_4_9_defaults(registry, ramp_problem):
    pb = ramp_problem
    algo, acc = _algo(registry, pb, eps=4.0, preset="theory")
    plan = algo.plan()
    rho = paper_rho(4.0, 1e-5)
    assert plan["T"] == default_block_length(pb.n, pb.d, 1.0, 0.1, 1.0, rho, "vr")
    assert plan["B1"] == plan["T"] + 1 and plan["B2"] == 1
    assert plan["K"] == pb.n // (2 * plan["T"]) and plan["D"] == pytest.approx(0.1 / plan["T"])
    assert plan["record_clip"] is None and plan["diff"] == "paper" and plan["output"] == "random"
    # the spec's worked example (IJCNN-sized, d=22, L=1, h=0.1, F=0.7, rho=1): balance
    # points 749.6 (non-private) and 671.9 (private); the spec took the min (671), the
    # proof needs the max
    T = default_block_length(34_990, 22, 1.0, 0.1, 0.7, 1.0, "vr")
    assert T == 749 and 34_990 // (2 * T) == 23
    assert default_block_length(34_990, 22, 1.0, 0.1, 0.7, math.inf, "vr") == 749  # non-private
    assert default_block_length(34_990, 22, 1.0, 0.1, 0.7, 0.1, "vr") == 2124  # privacy-dominated
    # the formula's T is capped so that one block fits in the data (naive at a small eps)
    naive_plan = _algo(registry, pb, eps=0.05, oracle="naive", preset="theory")[0].plan()
    assert default_block_length(pb.n, pb.d, 1.0, 0.1, 1.0, paper_rho(0.05, 1e-5), "naive") > pb.n
    assert naive_plan["T"] == pb.n and naive_plan["K"] == 1
    # rho: the zCDP rho_z = rho^2/2 of the budget converts back to eps
    rz = rho ** 2 / 2
    assert rz + 2 * math.sqrt(rz * math.log(1e5)) == pytest.approx(4.0)


def test_practical_defaults(registry, ramp_problem):
    """preset=practical (the default): Thm 4.9's split with K chosen instead
    of T (T = M/(2 K B2), B1 = T B2, D = h/T), the record clip, the symmetric
    DIFF and the last block average; explicit parameters win over both presets."""
    from dpreg_plugins.algorithms import zo_o2nc as zo

    from dpreg.access import PASSES_MIN_RECORDS

    pb = ramp_problem
    plan = _algo(registry, pb)[0].plan()
    # K: PRACTICAL_BLOCKS per pass from PASSES_MIN_RECORDS records on, one block per pass below
    K = zo.PRACTICAL_BLOCKS if pb.n >= PASSES_MIN_RECORDS else 1
    B2 = zo.practical_batch2(pb.n, K)  # M / (2 K T): a block of PRACTICAL_T steps
    assert B2 == pb.n // (2 * K * zo.PRACTICAL_T)
    assert zo.practical_batch2(49_990, 4) == 1041 and zo.practical_batch2(40, 4) == 1
    T = pb.n // (2 * K * B2)
    assert T == zo.PRACTICAL_T
    assert (plan["T"], plan["B2"], plan["B1"]) == (T, B2, T * B2)
    assert plan["K"] == pb.n // (plan["B1"] + plan["B2"] * (T - 1)) >= K
    assert plan["h"] == zo.PRACTICAL_H and plan["D"] == pytest.approx(zo.PRACTICAL_H / T)
    assert plan["record_clip"] == zo.PRACTICAL_CLIP and plan["diff"] == "symmetric" and plan["output"] == "last"
    assert plan["directions"] == min(pb.d, zo.PRACTICAL_DIRECTIONS)
    mine = _algo(registry, pb, smoothing=0.3, record_clip=2.0, diff="paper", output="random", batch2=2,
                 blocks=3, osd_radius=0.01)[0].plan()
    assert (mine["h"], mine["record_clip"], mine["diff"], mine["output"], mine["B2"], mine["K"], mine["D"]) == \
        (0.3, 2.0, "paper", "random", 2, 3, 0.01)
    assert mine["T"] == pb.n // (2 * 3 * 2)
    theory = _algo(registry, pb, preset="theory", record_clip=2.0)[0].plan()
    assert theory["record_clip"] == 2.0 and theory["h"] == 0.1 and theory["B2"] == 1


@pytest.mark.parametrize("noise", ["tree", "gaussian"])
def test_run_spends_at_most_epsilon_and_charges_dp_accounting_events(registry, ramp_problem, noise):
    """Every batch is charged its mechanism's record event before release;
    the spent epsilon is dp-accounting's for one record's exposure (tree: the
    single-epoch tree aggregation of depth L; gaussian: one Gaussian) and at
    most the budget (one pass: the paper's Alg 3)."""
    algo, acc = _algo(registry, ramp_problem, eps=2.0, noise=noise, passes=1)
    out = algo.run()
    T, K, z = out.info["block_length"], out.info["blocks"], out.info["noise_multiplier"]
    assert acc.epsilon_spent <= 2.0 * (1 + 1e-9)
    ref = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_SPECIAL)
    if noise == "tree":
        ref.compose(dpa.SingleEpochTreeAggregationDpEvent(z, T))
    else:
        ref.compose(dpa.GaussianDpEvent(z))
    assert acc.epsilon_spent == pytest.approx(ref.get_epsilon(1e-5), rel=1e-6)
    assert acc.state()["groups"] == K * T  # one disjoint group per batch
    B1, B2 = out.info["batch1"], out.info["batch2"]
    assert out.records_used == K * (B1 + B2 * (T - 1)) <= ramp_problem.n


@pytest.mark.parametrize("noise", ["tree", "gaussian"])
def test_passes_compose_one_pass_exposure_and_reuse_every_record(registry, ramp_problem, noise):
    """passes=2: K blocks per pass, each pass a fresh permutation under its own
    pass id; dp-accounting's event of one record's exposure in one pass,
    composed twice, is what the run spends (and the budget); the data set's
    records are used once per pass.  Below 20,000 records the default is
    ceil(20,000 / n) passes (at most 16); under preset=theory one."""
    from dpreg_plugins.algorithms import zo_o2nc as zo

    algo, acc = _algo(registry, ramp_problem, eps=2.0, noise=noise, passes=2)
    out = algo.run()
    T, K, z = out.info["block_length"], out.info["blocks"], out.info["noise_multiplier"]
    ref = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_SPECIAL)
    one = dpa.SingleEpochTreeAggregationDpEvent(z, T) if noise == "tree" else dpa.GaussianDpEvent(z)
    ref.compose(dpa.SelfComposedDpEvent(one, 2))
    assert acc.epsilon_spent == pytest.approx(ref.get_epsilon(1e-5), rel=1e-6)
    assert acc.epsilon_spent == pytest.approx(2.0, rel=1e-3)
    assert out.info["passes"] == out.info["passes_made"] == 2 and out.iterations == 2 * K * T
    assert len({key[0] for key in acc._groups}) == 2  # noqa: SLF001 ((pass_id, group) keys)
    per_pass = K * (out.info["batch1"] + out.info["batch2"] * (T - 1))
    assert out.records_used == 2 * per_pass and per_pass <= ramp_problem.n
    assert out.info["trajectory"].steps[-2 * K:] == list(range(1, 2 * K + 1))  # every block of both passes kept
    one_pass, _ = _algo(registry, ramp_problem, eps=2.0, noise=noise, passes=1)
    from dpreg.access import PASSES_MIN_RECORDS

    assert one_pass.passes() == 1 and ramp_problem.n < PASSES_MIN_RECORDS
    small = _algo(registry, ramp_problem, eps=2.0, noise=noise)[0].passes()
    assert small == min(16, -(-20_000 // ramp_problem.n))
    assert _algo(registry, ramp_problem, eps=2.0, noise=noise, preset="theory")[0].passes() == 1
    rng = np.random.default_rng(0)
    big = Problem(registry.get("loss", "ramp"), unit_rows(rng, PASSES_MIN_RECORDS, 3),
                  np.where(rng.random(PASSES_MIN_RECORDS) < 0.5, -1.0, 1.0))
    assert _algo(registry, big)[0].passes() == zo.PASSES > 1
    assert _algo(registry, big, preset="theory")[0].passes() == 1
    assert one_pass.run().info["noise_multiplier"] < z  # two passes: more noise per release


def test_naive_oracle_and_paper_noise_rule(registry, ramp_problem):
    algo, acc = _algo(registry, ramp_problem, eps=2.0, oracle="naive", passes=1)
    out = algo.run()
    assert out.info["oracle"] == "naive" and acc.epsilon_spent <= 2.0 * (1 + 1e-9)
    ref = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_SPECIAL)
    ref.compose(dpa.GaussianDpEvent(out.info["noise_multiplier"]))
    assert acc.epsilon_spent == pytest.approx(ref.get_epsilon(1e-5), rel=1e-6)
    pap, acc_p = _algo(registry, ramp_problem, eps=2.0, noise_rule="paper", block_length=40, batch2=2,
                        blocks=4, passes=1)
    info = pap.run().info
    T = info["block_length"]
    rho = paper_rho(2.0, 1e-5)
    # Cor 4.4, literally: every tree node's std is sqrt(2 ln T) s_max / rho, s_max = max{2dL/B1, 4dL/(B2 T)}
    d, L = ramp_problem.d, info["lipschitz"]
    s_max = max(2 * min(d * L, info["record_clip"]) / info["batch1"],
                4 * min(d * L, info["record_clip"]) / (info["batch2"] * T))
    assert info["noise_rule"] == "paper" and info["paper_sensitivity"] == pytest.approx(s_max, rel=1e-12)
    assert info["noise_multiplier"] == pytest.approx(math.sqrt(2 * math.log(T)) / rho, rel=1e-12)
    assert info["noise_std_max_node"] == pytest.approx(math.sqrt(2 * math.log(T)) * s_max / rho, rel=1e-12)
    assert info["max_sensitivity"] <= s_max * (1 + 1e-9)
    assert acc_p.epsilon_spent < 2.0  # Thm 4.3's 2 ln T >= log2 T + 1 levels (T >= 7): the literal sigma fits


def test_theory_preset_is_cor_4_4_literal_or_refuses(registry, ramp_problem):
    """preset=theory takes Cor 4.4's sigma (noise_rule paper) with Thm 4.9's B1 = T + 1, B2 = 1; it
    refuses in one line where the literal rule cannot run: another noise than the tree, or a block
    too short for Thm 4.3's |OUT(q)| <= 2 ln T (T = 1: sigma = 0, the literal sigma overspends)."""
    algo, acc = _algo(registry, ramp_problem, eps=2.0, preset="theory", block_length=40, blocks=20)
    info = algo.run().info
    assert info["noise_rule"] == "paper" and (info["batch1"], info["batch2"]) == (41, 1)
    assert info["noise_multiplier"] == pytest.approx(math.sqrt(2 * math.log(40)) / paper_rho(2.0, 1e-5))
    assert info["paper_sensitivity"] == pytest.approx(4 * ramp_problem.d * info["lipschitz"] / 40)
    assert acc.epsilon_spent <= 2.0
    with pytest.raises(ParameterError, match="Cor 4.4's tree noise"):
        _algo(registry, ramp_problem, preset="theory", noise="gaussian", block_length=40, blocks=20)[0].run()
    short, acc_s = _algo(registry, ramp_problem, preset="theory", block_length=1, blocks=20)
    with pytest.raises(ParameterError, match="tree levels"):
        short.run()
    assert acc_s.epsilon_spent == 0.0  # refused before any release
    calibrated, _ = _algo(registry, ramp_problem, preset="theory", noise_rule="calibrated", block_length=1,
                          blocks=20)
    assert calibrated.run().info["noise_rule"] == "calibrated"
    naive, acc_n = _algo(registry, ramp_problem, eps=2.0, oracle="naive", noise_rule="paper", passes=1)
    assert naive.run().info["noise_multiplier"] == pytest.approx(1 / paper_rho(2.0, 1e-5))  # App. E
    assert acc_n.epsilon_spent <= 2.0


def test_output_is_a_recorded_block_average_and_runs_are_reproducible(registry, ramp_problem):
    a, _ = _algo(registry, ramp_problem, seed=3, blocks=6, block_length=20, preset="theory")
    a.keep_iterates = True
    out = a.run()
    traj = out.info["trajectory"]
    assert traj.steps == list(range(7))  # w_0 and every w-bar^k
    assert any(np.array_equal(out.w, v) for v in traj.iterates[1:])
    for k, its in enumerate(a.block_iterates, start=1):
        np.testing.assert_allclose(traj.iterates[k], its.mean(0), rtol=1e-12, atol=1e-15)
        steps = np.linalg.norm(np.diff(its, axis=0), axis=1)
        assert np.all(steps <= 2 * out.info["osd_radius"] * (1 + 1e-9))  # Remark 4.1
    b, _ = _algo(registry, ramp_problem, seed=3, blocks=6, block_length=20, preset="theory")
    assert np.array_equal(b.run().w, out.w)


def test_nonprivate_direction_descends_on_ramp(registry, ramp_problem):
    """With a generous budget the run lowers the ramp loss from w = 0."""
    a, _ = _algo(registry, ramp_problem, eps=1e4, smoothing=0.5, output="last")
    out = a.run()
    assert ramp_problem.value(out.w) < ramp_problem.value(np.zeros(ramp_problem.d)) - 0.05


def test_too_little_data_is_refused_before_any_release(registry, ramp_problem):
    from dpreg.errors import ParameterError

    a, acc = _algo(registry, ramp_problem, block_length=2000)
    with pytest.raises(ParameterError, match="records"):
        a.run()
    assert acc.epsilon_spent == 0.0


def test_audit_passes(registry):
    from dpreg.audit import AuditConfig, run_audit

    res = run_audit(AuditConfig(algo="zo-o2nc", trials=40, seed=1))
    assert res.epsilon_lower <= res.epsilon_claimed
    assert 0 < res.epsilon_claimed <= 1.0 * (1 + 1e-9)


def test_adult_ramp_run(registry):
    """`dpreg run --algo zo-o2nc --loss ramp --data adult.trn --test-data
    adult.tst --epsilon 4 --seed 0` (blocks capped at 3 to keep the suite fast;
    the full default run is in docs/experiment-zeroth-order.md)."""
    import dpreg

    rec = dpreg.run(algo="zo-o2nc", loss="ramp", data=str(shared_file("adult.trn.bz2")),
                    test_data=str(shared_file("adult.tst.bz2")), epsilon=4.0, seed=0,
                    params={"blocks": 3})
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 4.0 * (1 + 1e-9)
    assert rec["diagnostics"]["problem"]["d"] == 123 + 1 and rec["diagnostics"]["run_info"]["oracle"] == "vr"
    assert np.all(np.isfinite(rec["release"]["model"]["weights"])) and 0.0 <= rec["diagnostics"]["metrics"]["test_accuracy"] <= 1.0


def test_record_clip_holds_in_exact_arithmetic(registry):
    """The record clip decides on a rounding-safe bound: the float vector the
    kernel adds for one record has exact Euclidean norm <= rec_clip (checked
    with rational arithmetic), for estimates far above and just above it."""
    from fractions import Fraction

    rng = np.random.default_rng(5)
    loss = registry.get("loss", "logistic")
    phi = loss.scalar_kernels()[0]
    d, J = 37, 5
    X = unit_rows(rng, 200, d)
    y = _labels(rng, 200)
    worst = Fraction(0)
    for t in range(200):
        idx = np.array([t], dtype=np.int64)
        U = unit_directions(rng, (1, J, d))
        w = 3 * rng.standard_normal(d)
        probe = zo_sum(X, y, idx, w, w, U, 0.2, -1.0, 1 / 0.4, np.inf, np.inf, False, phi)[0]
        norm = float(np.linalg.norm(probe))
        for rec_clip in (norm / 7, norm * (1 - 1e-15), norm):
            out, _ = zo_sum(X, y, idx, w, w, U, 0.2, -1.0, 1 / 0.4, np.inf, rec_clip, False, phi)
            exact = sum(Fraction(float(v)) ** 2 for v in out)
            assert exact <= Fraction(rec_clip) ** 2, (t, rec_clip)
            worst = max(worst, exact / Fraction(rec_clip) ** 2)
    assert worst > Fraction(99, 100)  # the clip is tight, not a large safety factor
