"""dp-spider (and the spider_core pieces it uses): accounting of every
noise/sampling combination, refusal of a too-small noise before the first
release, enforced sensitivities against a worst-case record, and the
gradient norm falling on a small synthetic problem."""
from __future__ import annotations

import numpy as np
import pytest

from dpreg.accounting import PldAccountant, RdpAccountant, gaussian_event
from dpreg.errors import BudgetExceededError
from dpreg.interfaces import NoiseMechanism, Participation, charge
from dpreg.params import bind
from dpreg.problem import Problem
from dpreg_plugins.algorithms.dp_spider import DPSpider, spider_plan
from dpreg_plugins.losses.linear import Logistic
from dpreg_plugins.noise.gaussian import GaussianMechanism
from dpreg_plugins.noise.tree import TreeMechanism
from dpreg_plugins.algorithms.spider_core import (RecordingAccountant, SpiderEstimator, calibrate_noise, planned_event,
                                                  prepay)

from conftest import shared_file, unit_rows

NOISES = {"gaussian": GaussianMechanism, "tree": TreeMechanism}


def logistic_problem(n=4000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = unit_rows(rng, n, d)
    w_star = np.array([3.0, -2.0, 1.0, 0.5, -1.0])[:d]
    y = np.where(X @ w_star + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return Problem(Logistic(), X, y)


def run_spider(pb, noise, eps=2.0, delta=1e-5, acc_cls=RdpAccountant, seed=0, **params):
    acc = acc_cls(eps, delta, DPSpider.relation)
    algo = DPSpider(pb, bind(DPSpider.params, params, "dp-spider"), noise=NOISES[noise], accountant=acc, seed=seed)
    return algo.run(), acc


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
@pytest.mark.parametrize("batches", [{}, {"batch1": 800, "batch2": 200}])
def test_calibrated_run_spends_exactly_the_budget(noise, batches):
    pb = logistic_problem()
    out, acc = run_spider(pb, noise, steps=30, phase=5, **batches)
    assert acc.epsilon_spent <= 2.0 * (1 + 1e-9)
    assert acc.epsilon_spent >= 2.0 * 0.995  # the calibrated plan hits the budget
    assert acc.n_charges == 1  # the fixed plan, charged once before the first release
    assert out.info["releases"] == 30  # ... and every add of both mechanisms checked off against it
    assert out.info["noise_multiplier"] > 0 and np.all(np.isfinite(out.w))


def test_poisson_amplification_helps_gaussian_not_tree():
    pb = logistic_problem()
    zs = {}
    for noise in NOISES:
        for b in (None, 400):
            out, _ = run_spider(pb, noise, steps=6, phase=3, batch1=b, batch2=b)
            zs[noise, b] = out.info["noise_multiplier"]
    assert zs["gaussian", 400] < 0.8 * zs["gaussian", None]  # amplified
    assert zs["tree", 400] == pytest.approx(zs["tree", None], rel=1e-6)  # no amplification claimed


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_too_small_noise_refused_before_first_release(noise):
    pb = logistic_problem(n=500)
    acc = RdpAccountant(1.0, 1e-5, "add-remove")
    est = SpiderEstimator(pb, NOISES[noise], noise_multiplier=0.05, horizon=10, accountant=acc, seed=0,
                          clip=1.0, smoothness=0.25)
    with pytest.raises(BudgetExceededError):
        est.refresh(np.zeros(pb.d), pb.all_rows, Participation.all())
    assert acc.n_charges == 0 and acc.epsilon_spent == 0 and est.phases == 0


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_slightly_too_small_noise_is_refused_within_the_plan(noise):
    # calibrated z fits the plan; 0.9 z is refused at some add, before that add's release
    pb = logistic_problem(n=1000)
    T, q, rate = 24, 6, 0.2
    plan = spider_plan(T, q, Participation.poisson(rate), Participation.poisson(rate))
    acc = RdpAccountant(1.0, 1e-5, "add-remove")
    z = calibrate_noise(acc, NOISES[noise], q, plan)
    for factor, should_fit in ((1.0, True), (0.9, False)):
        acc = RdpAccountant(1.0, 1e-5, "add-remove")
        est = SpiderEstimator(pb, NOISES[noise], noise_multiplier=z * factor, horizon=q, accountant=acc,
                              seed=0, clip=1.0, smoothness=0.25)
        w, released = np.zeros(pb.d), 0
        try:
            for t in range(T):
                idx = np.arange(0, pb.n, 5)
                part = Participation.poisson(rate)
                if t % q == 0:
                    est.refresh(w, idx, part, denom=rate * pb.n)
                else:
                    est.update(w + 0.01 * t, w + 0.01 * (t - 1), idx, part, denom=rate * pb.n)
                released += 1
            fitted = True
        except BudgetExceededError:
            fitted = False
            assert acc.n_charges == released  # nothing charged (or released) for the refused add
        assert fitted == should_fit
        assert acc.epsilon_spent <= 1.0 * (1 + 1e-9)


def test_planned_event_matches_what_a_run_charges():
    # the dry run is the mechanism itself: a real run of the plan charges the same epsilon
    for noise in NOISES.values():
        plan = spider_plan(13, 4, Participation.poisson(0.1), Participation.poisson(0.05))
        ev = planned_event(noise, 3.0, 4, plan, relation="add-remove")
        acc = RdpAccountant(1e6, 1e-5, "add-remove")
        mech = noise(dim=2, noise_multiplier=3.0, horizon=4, accountant=acc, seed=0)
        for t in range(13):
            if t % 4 == 0 and t:
                mech.reset()
            mech.add(np.zeros(2), 1.0, Participation.poisson(0.1 if t % 4 == 0 else 0.05))
        assert RdpAccountant(1e6, 1e-5, "add-remove").epsilon_if(ev) == pytest.approx(acc.epsilon_spent, rel=1e-9)


def _release_plan(mechs, T, q, rates):
    """Make the releases of a SPIDER plan through ``mechs`` (one mechanism, or
    an O1 one and an O2 one): O1 at rate rates[0] every q steps, O2 between."""
    o1, o2 = (mechs[0], mechs[-1])
    for t in range(T):
        if t % q == 0:
            if t:
                o1.reset()
                if o2 is not o1:
                    o2.reset()
            o1.add(np.zeros(2), 1.0, Participation.poisson(rates[0]))
        else:
            o2.add(np.zeros(2), 1.0, Participation.poisson(rates[1]))


@pytest.mark.parametrize("noise", sorted(NOISES))
@pytest.mark.parametrize("separate", [False, True])
def test_prepaid_plan_costs_what_per_release_charges_cost(noise, separate):
    # one charge of the plan before the first release = the releases charged one by one; every
    # release is checked off, and one release more is refused before it is made
    cls, T, q, rates = NOISES[noise], 13, 4, (0.1, 0.05)
    plan = spider_plan(T, q, Participation.poisson(rates[0]), Participation.poisson(rates[1]))
    if separate:
        parts = [(2.0, 1, [(rep, ps[:1]) for rep, ps in plan]), (3.0, q - 1, [(rep, ps[1:]) for rep, ps in plan])]
    else:
        parts = [(3.0, q, plan)]
    per_release = RdpAccountant(1e6, 1e-5, "add-remove")
    mechs = [cls(dim=2, noise_multiplier=z, horizon=h, accountant=per_release, seed=0) for z, h, _ in parts]
    _release_plan(mechs, T, q, rates)
    acc = RdpAccountant(1e6, 1e-5, "add-remove")
    paid = prepay(acc, cls, parts)
    assert acc.n_charges == 1 and paid.left() == T
    assert acc.epsilon_spent == pytest.approx(per_release.epsilon_spent, rel=1e-12)
    mechs = [cls(dim=2, noise_multiplier=z, horizon=h, accountant=paid, seed=0) for z, h, _ in parts]
    _release_plan(mechs, T, q, rates)
    assert paid.released == T and paid.left() == 0 and acc.n_charges == 1
    steps = mechs[-1].steps
    with pytest.raises(RuntimeError, match="not in the prepaid plan"):
        mechs[-1].add(np.zeros(2), 1.0, Participation.poisson(rates[1]))
    assert mechs[-1].steps == steps and paid.released == T  # refused before the release


def test_prepaid_plan_refuses_a_release_it_did_not_plan_and_an_over_budget_plan():
    plan = spider_plan(8, 4, Participation.poisson(0.1), Participation.poisson(0.05))
    acc = RdpAccountant(1e6, 1e-5, "add-remove")
    paid = prepay(acc, GaussianMechanism, [(3.0, 4, plan)])
    mech = GaussianMechanism(dim=2, noise_multiplier=3.0, horizon=4, accountant=paid, seed=0)
    for rate in (0.2, 0.1 + 1e-12):  # a larger rate, or any other rate, was not paid for
        with pytest.raises(RuntimeError, match="not in the prepaid plan"):
            mech.add(np.zeros(2), 1.0, Participation.poisson(rate))
    other = GaussianMechanism(dim=2, noise_multiplier=2.9, horizon=4, accountant=paid, seed=0)
    with pytest.raises(RuntimeError, match="not in the prepaid plan"):  # less noise was not paid for
        other.add(np.zeros(2), 1.0, Participation.poisson(0.1))
    assert paid.released == 0 and mech.steps == 0 and other.steps == 0
    # one event object charged k times (a draw of k adds): checked off one by one, refused once used up
    with pytest.raises(RuntimeError, match="not in the prepaid plan"):
        charge(paid, gaussian_event(3.0), Participation.poisson(0.05), count=7)
    assert paid.released == 6 and paid.left() == 2
    with pytest.raises(RuntimeError, match="not in the prepaid plan"):
        GaussianMechanism(dim=2, noise_multiplier=3.0, horizon=4, accountant=paid, seed=0).draw(
            1, Participation.poisson(0.05))
    small = RdpAccountant(0.5, 1e-5, "add-remove")
    with pytest.raises(BudgetExceededError):
        prepay(small, GaussianMechanism, [(0.5, 4, plan)])
    assert small.n_charges == 0 and small.epsilon_spent == 0


def test_pld_accountant_also_calibrates():
    pb = logistic_problem(n=2000)
    out, acc = run_spider(pb, "tree", acc_cls=PldAccountant, steps=6, phase=3)
    assert 0.99 * 2.0 <= acc.epsilon_spent <= 2.0 * (1 + 1e-9)


class ExactMechanism(NoiseMechanism):
    """Test double: releases the exact prefix sum and records increments."""

    name = "exact-test"

    def reset(self):
        super().reset()
        self.sum = np.zeros(self.dim)
        self.log = []

    def add(self, increment, sensitivity, participation):
        self.accountant.charge(None, None)
        self.log.append((np.array(increment), float(sensitivity)))
        self.sum = self.sum + increment
        return self.sum.copy()

    @classmethod
    def record_event(cls, *a):
        return None


@pytest.mark.parametrize("relation", ["replace-one", "add-remove"])
def test_worst_case_record_moves_increment_at_most_the_sensitivity(relation):
    rng = np.random.default_rng(1)
    n, d = 200, 5
    X = unit_rows(rng, n, d)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    X_bad = X.copy()
    X_bad[7] = 1e6 * rng.standard_normal(d)  # violates |x| <= 1 by far
    y_bad = y.copy()
    y_bad[7] = -y[7]
    idx = np.arange(n)
    w0, w1 = np.zeros(d), 0.3 * rng.standard_normal(d)
    incs = []
    for Xs, ys, rows in ((X_bad, y_bad, idx), (X, y, idx), (X_bad, y_bad, np.delete(idx, 7))):
        pb = Problem(Logistic(), Xs, ys)
        est = SpiderEstimator(pb, ExactMechanism, noise_multiplier=1.0, horizon=4,
                              accountant=RecordingAccountant(relation), seed=0, clip=1.0, smoothness=0.25)
        est.refresh(w0, rows, Participation.all(), denom=n)
        est.update(w1, w0, rows, Participation.all(), denom=n)
        incs.append((est.mechanism.log[0], est.mechanism.log[1]))
    # neighbours of the data set holding the huge record 7: replace it (replace-one) or remove it
    # (add-remove), same public denominator
    other = 1 if relation == "replace-one" else 2
    for k in range(2):
        (a, s), (b, _) = incs[0][k], incs[other][k]
        assert np.linalg.norm(a - b) <= s * (1 + 1e-9)
        assert np.linalg.norm(a - b) > 0.2 * s  # the bound is nearly attained (a real check)
    factor = 2.0 if relation == "replace-one" else 1.0
    assert incs[0][0][1] == pytest.approx(factor * 1.0 / n)
    assert incs[0][1][1] == pytest.approx(factor * 0.25 * np.linalg.norm(w1 - w0) / n)


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_gradient_norm_falls_on_a_small_problem(noise):
    pb = logistic_problem(n=20000)
    g0 = np.linalg.norm(pb.gradient(np.zeros(pb.d)))
    out, acc = run_spider(pb, noise, eps=4.0, steps=40, phase=5, step=2.0)
    g1 = np.linalg.norm(pb.gradient(out.w))
    assert g1 < 0.5 * g0, (g0, g1)
    assert pb.value(out.w) < pb.value(np.zeros(pb.d))


def test_deterministic_from_seed():
    pb = logistic_problem(n=1000)
    a, _ = run_spider(pb, "tree", steps=10, phase=5, batch1=300, batch2=300, seed=4)
    b, _ = run_spider(pb, "tree", steps=10, phase=5, batch1=300, batch2=300, seed=4)
    c, _ = run_spider(pb, "tree", steps=10, phase=5, batch1=300, batch2=300, seed=5)
    assert np.array_equal(a.w, b.w) and not np.array_equal(a.w, c.w)


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_runs_on_real_data_from_python(noise):
    import dpreg

    path = shared_file("ijcnn1.trn.bz2")
    rec = dpreg.run(algo="dp-spider", noise=noise, loss="sigmoid-l2", data=str(path), epsilon=1.0,
                    params={"steps": 20, "phase": 5})
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0 * (1 + 1e-9)
    assert rec["diagnostics"]["metrics"]["train_grad_norm"] < rec["diagnostics"]["trajectory"]["checkpoints"]["grad_norm"][0]


# ------------------------------------------------ compiled steps (dpreg_kernels.spider)
class StepwiseGaussian(GaussianMechanism):
    """The gaussian plugin without ``independent_adds``: dp-spider then runs its
    step-at-a-time loop (refresh/update, one ``add`` per release)."""

    independent_adds = False


def _run_both(pb, params, seed=7, eps=2.0):
    """dp-spider twice with the same seed: compiled steps (gaussian) and a step at
    a time (StepwiseGaussian); returns ((out, acc), (out, acc), compiled calls).
    The compiled calls take no step cap: both runs are uncapped (step_cap=0)."""
    params = {"step_cap": 0, **params}
    calls = []
    orig = Problem.spider_steps

    def counted(self, *a, **k):
        calls.append(len(a[3]) - 1)
        return orig(self, *a, **k)

    Problem.spider_steps = counted
    try:
        outs = []
        for cls in (GaussianMechanism, StepwiseGaussian):
            acc = RdpAccountant(eps, 1e-5, DPSpider.relation)
            algo = DPSpider(pb, bind(DPSpider.params, params, "dp-spider"), noise=cls, accountant=acc, seed=seed)
            outs.append((algo.run(), acc))
    finally:
        Problem.spider_steps = orig
    return outs[0], outs[1], calls


@pytest.mark.parametrize("params", [
    {},                                                      # separate O1/O2 multipliers, full O1, Poisson O2
    {"o1_share": 0.0, "steps": 23, "phase": 4},              # one multiplier; T not a multiple of q
    {"batch1": 900, "batch2": 150, "output": "random"},      # Poisson O1 too; the random iterate
    {"output": "average", "noise_multiplier": 8.0, "lipschitz_cap": False},
    {"clip": 0.05, "radius": 0.4},                           # clipped terms; the projection
    {"steps": 600, "phase": 7, "batch2": 100},               # three compiled calls (256, 256, 88 steps)
])
def test_compiled_steps_equal_step_at_a_time(params):
    """With the gaussian plugin on dense rows dp-spider runs whole phases per compiled
    call (SpiderEstimator.steps -> Problem.spider_steps -> dpreg_kernels.spider); the
    same seed gives exactly the same iterates, released series, counters and charges
    as the step-at-a-time loop through refresh/update."""
    pb = logistic_problem(n=3000)
    p = {"steps": 30, "phase": 5, **params}
    (a, acc_a), (b, acc_b), calls = _run_both(pb, p)
    T = p["steps"]
    assert sum(calls) == T and all(k % p["phase"] == 0 for k in calls[:-1])  # whole phases per call
    assert np.array_equal(a.w, b.w)
    assert a.trajectory.keys() == b.trajectory.keys() == {"noisy_grad_norm", "batch", "sensitivity"}
    assert all(a.trajectory[k] == b.trajectory[k] for k in a.trajectory)
    ta, tb = a.info["trajectory"], b.info["trajectory"]
    assert ta.steps == tb.steps and all(np.array_equal(u, v) for u, v in zip(ta.iterates, tb.iterates))
    for key in ("phases", "o2_calls", "clipped_terms", "releases", "noise_multiplier", "o1_noise_multiplier"):
        assert a.info[key] == b.info[key], key
    assert a.info["releases"] == T
    assert (a.iterations, a.records_used, a.gradient_evaluations) == (b.iterations, b.records_used,
                                                                       b.gradient_evaluations)
    assert acc_a.epsilon_spent == acc_b.epsilon_spent and acc_a.n_charges == acc_b.n_charges == 1
    assert not np.array_equal(a.w, np.zeros(pb.d))
    if "clip" in params:
        assert a.info["clipped_terms"] > 0


@pytest.mark.parametrize("params", [{}, {"batch1": 500, "clip": 0.05}])
def test_compiled_steps_equal_step_at_a_time_on_csr_rows(params):
    """CSR rows (the sparse kernels' clipped sums linked in): the same numbers as the
    step-at-a-time loop, bit for bit."""
    import scipy.sparse as sp

    rng = np.random.default_rng(5)
    n, d = 2500, 40
    X = sp.random(n, d, density=0.1, format="csr", random_state=rng)
    X = sp.diags(1.0 / np.maximum(1.0, np.sqrt(X.multiply(X).sum(axis=1).A.ravel()))) @ X
    y = np.where(X @ rng.standard_normal(d) > 0, 1.0, -1.0)
    pb = Problem(Logistic(), sp.csr_matrix(X), y)
    assert pb._csr is not None
    (a, acc_a), (b, acc_b), calls = _run_both(pb, {"steps": 30, "phase": 5, **params})
    assert sum(calls) == 30
    assert np.array_equal(a.w, b.w) and all(a.trajectory[k] == b.trajectory[k] for k in a.trajectory)
    assert a.info["clipped_terms"] == b.info["clipped_terms"] and acc_a.epsilon_spent == acc_b.epsilon_spent
    assert not np.array_equal(a.w, np.zeros(d))


def test_compiled_steps_equal_step_at_a_time_with_psi():
    """A loss with a data-independent term (its psi gradient compiled for the steps,
    numpy's in the step loop): the same numbers to rounding."""
    from dpreg_plugins.losses.linear import LogisticNonconvexReg

    base = logistic_problem(n=3000)
    pb = Problem(LogisticNonconvexReg(), base.X, base.y)
    (a, _), (b, _), calls = _run_both(pb, {"steps": 30, "phase": 5})
    assert calls and np.allclose(a.w, b.w, rtol=1e-12, atol=1e-14)
    assert np.allclose(a.trajectory["noisy_grad_norm"], b.trajectory["noisy_grad_norm"], rtol=1e-12)


def test_compiled_steps_parallel_form_equals_serial_form():
    """The parallel form (the parallel clipped sum for batches of at least par_work
    elements) gives bit-identical steps to the serial form."""
    from dpreg.problem import _inner
    from dpreg_kernels.config import PARALLEL_WORK
    from dpreg_kernels.spider import spider_steps

    pb = logistic_problem(n=20_000)
    rng = np.random.default_rng(3)
    q, K, d = 4, 10, pb.d
    batches = [np.sort(rng.choice(pb.n, 3000 if t % q else 0, replace=False)) for t in range(K)]
    offsets = np.zeros(K + 1, dtype=np.int64)
    np.cumsum([len(x) for x in batches], out=offsets[1:])
    rows = np.concatenate(batches).astype(np.int64)
    n1 = -(-K // q)
    noise1, noise2 = rng.standard_normal((n1, d)), rng.standard_normal((K - n1, d))
    assert pb.n * d >= PARALLEL_WORK and 3000 * d < PARALLEL_WORK  # O1 parallel, O2 serial in the parallel form
    res = []
    for parallel in (False, True):
        W, gn, sens, ncl = np.empty((K, d)), np.empty(K), np.empty(K), np.empty(K, dtype=np.int64)
        wp = np.zeros(d)
        w = spider_steps.form(parallel)(
            (pb.X,), pb.y, pb._nx, rows, offsets, True, float(d), float(PARALLEL_WORK if parallel else 2 ** 62),
            np.zeros(d), wp,
            noise1, noise2, 0.001, 0.002, 0.5, 2.0, True, _inner(1.0), 1.0 - 1e-12, 0.25, 2.0, float(pb.n), 3000.0,
            2.0, 0.0, q, pb._psi_ref, pb._psi_params, pb._refs[1], pb._dphi_block, W, gn, sens, ncl)
        res.append((w, wp, W, gn, sens, ncl))
    for u, v in zip(*res):
        assert np.array_equal(u, v)
    assert np.all(res[0][3] > 0) and not np.array_equal(res[0][2][0], res[0][2][1])


def test_compiled_steps_only_where_they_are_the_same_algorithm():
    """The compiled steps serve the gaussian plugin on a problem with its own clipped
    sums, dense or CSR; tree noise, a mechanism whose add a subclass changes (the
    audit's faults and recorders) and a problem whose clipped sums a subclass
    changes run a step at a time."""
    import scipy.sparse as sp

    pb = logistic_problem(n=500)

    def est(noise, problem=pb):
        acc = RdpAccountant(2.0, 1e-5, DPSpider.relation)
        return SpiderEstimator(problem, noise, noise_multiplier=3.0, horizon=4, accountant=acc, seed=0, clip=1.0,
                               smoothness=0.25, o1_noise_multiplier=2.0, o1_seed=1)

    class Instrumented(GaussianMechanism):
        def add(self, increment, sensitivity, participation):
            return super().add(increment, sensitivity, participation)

    class Counting(Problem):
        def clipped_diff_sum(self, w, w_prev, idx, clip):
            return super().clipped_diff_sum(w, w_prev, idx, clip)

    assert est(GaussianMechanism).compiled_steps
    assert not est(TreeMechanism).compiled_steps
    assert not est(Instrumented).compiled_steps and not est(StepwiseGaussian).compiled_steps
    assert not est(GaussianMechanism, Counting(Logistic(), pb.X, pb.y)).compiled_steps
    assert est(GaussianMechanism, Problem(Logistic(), sp.csr_matrix(pb.X), pb.y)).compiled_steps
    with pytest.raises(RuntimeError):
        est(TreeMechanism).steps(np.zeros(pb.d), np.zeros(pb.d), [(np.arange(pb.n), Participation.all())], phase=4,
                                 step=1.0, radius=None, full1=True, denom1=500.0, denom2=50.0)


def test_gaussian_draw_charges_and_matches_add():
    """GaussianMechanism.draw(k): the k adds' standard normals in add order (row i scaled
    by z s_i is add's noise), k charges made at once, the horizon enforced."""
    rec = RecordingAccountant("add-remove")
    p = Participation.poisson(0.25)
    m1 = GaussianMechanism(dim=4, noise_multiplier=2.0, horizon=5, accountant=rec, seed=3)
    rows = m1.draw(3, p)
    assert rows.shape == (3, 4) and len(rec.global_events) == 3 and m1.steps == 3
    m2 = GaussianMechanism(dim=4, noise_multiplier=2.0, horizon=5, accountant=RecordingAccountant("add-remove"),
                           seed=3)
    sums = [m2.add(np.zeros(4), s, p) for s in (0.5, 1.0, 2.0)]
    steps = np.diff(np.vstack([np.zeros(4)] + sums), axis=0)
    assert np.allclose(steps, rows * (2.0 * np.array([0.5, 1.0, 2.0]))[:, None], rtol=1e-14, atol=0)
    assert rec.global_events == m2.accountant.global_events
    with pytest.raises(RuntimeError):
        m1.draw(3, p)  # 3 + 3 > horizon 5
    assert not TreeMechanism.independent_adds and GaussianMechanism.draws_as_it_adds()
    with pytest.raises(NotImplementedError):
        TreeMechanism(dim=4, noise_multiplier=2.0, horizon=4, accountant=rec, seed=0).draw(1, p)


def test_gaussian_draw_phases_is_the_phase_by_phase_draws():
    """GaussianMechanism.draw_phases (one charge per participation, one draw) gives
    what the base class's phase-by-phase loop of reset and draw gives: the same
    normals in the same order, the same charges (as a multiset), the same phase and
    step counters; a phase past the horizon raises and charges and draws nothing."""
    p1, p2 = Participation.all(), Participation.poisson(0.25)
    phases = [[(1, p1), (3, p2)], [(1, p1), (0, p2)], [(1, p1), (2, p2)]]

    def mech():
        return GaussianMechanism(dim=4, noise_multiplier=2.0, horizon=5, accountant=RecordingAccountant("add-remove"),
                                 seed=7)

    for reset_first in (False, True):
        fast, slow = mech(), mech()
        fast.draw(1, p1), slow.draw(1, p1)  # an add already made in the current phase
        a = fast.draw_phases(phases, reset_first=reset_first)
        b = NoiseMechanism.draw_phases(slow, phases, reset_first=reset_first)
        assert a.shape == (8, 4) and np.array_equal(a, b)
        assert sorted(map(repr, fast.accountant.global_events)) == sorted(map(repr, slow.accountant.global_events))
        assert len(fast.accountant.global_events) == 9
        assert (fast.phase, fast.steps) == (slow.phase, slow.steps) == (3 if reset_first else 2, 3)
        assert np.array_equal(fast.draw(1, p2), slow.draw(1, p2))  # the generators are in the same state
    m = mech()
    with pytest.raises(RuntimeError):
        m.draw_phases([[(1, p1), (3, p2)], [(1, p1), (5, p2)]])  # 6 adds > horizon 5 in the second phase
    assert m.accountant.global_events == [] and (m.phase, m.steps) == (0, 0)
    assert np.array_equal(m.draw(1, p1), mech().draw(1, p1))  # nothing drawn


def test_compiled_steps_count_serial_time_towards_the_parallel_variant(monkeypatch):
    """Where the parallel clipped sum is wanted but not yet cheap to have, the serial
    form runs and its CPU time counts towards compiling the parallel variant
    (Kernel.pick's rule), as the step-at-a-time loop's serial calls do."""
    import dpreg.problem as problem_mod

    pb = logistic_problem(n=3000)
    ck = pb._k.clipped_sum
    forms = []
    from dpreg_kernels.spider import spider_steps

    real_form = spider_steps.form
    monkeypatch.setattr(problem_mod, "_want_parallel", lambda work: True)
    monkeypatch.setattr(type(ck), "parallel_ready", lambda self: False)  # parallel variant "not had"
    monkeypatch.setattr(spider_steps, "form", lambda parallel, sparse=False: (forms.append(parallel),
                                                                           real_form(parallel, sparse))[1])
    before = ck.serial_large_s
    run_spider(pb, "gaussian", steps=20, phase=5, step_cap=0)  # the compiled calls take no step cap
    assert forms and not any(forms) and ck.serial_large_s > before


def test_dry_runs_are_memoised_as_computed_and_handed_out_as_copies():
    """planned_event's dry run is memoised process-wide by its arguments: the memo gives
    what a fresh dry run computes, each caller its own copies (changing one changes no
    later answer), and a different multiplier, horizon or plan is a different entry."""
    from dpreg_plugins.algorithms import spider_core as sc

    plan = spider_plan(10, 4, Participation.all(), Participation.poisson(0.1))
    for cls in (GaussianMechanism, TreeMechanism):
        a = sc._dry_run(cls, 2.0, 4, plan, "add-remove")
        assert a == sc._dry_run_now(cls, 2.0, 4, plan, "add-remove")
        a[0].clear()
        a[1].append("junk")
        b = sc._dry_run(cls, 2.0, 4, plan, "add-remove")
        assert b == sc._dry_run_now(cls, 2.0, 4, plan, "add-remove") and b[0]
        assert sc._dry_run(cls, 2.5, 4, plan, "add-remove") != b
        assert sc._dry_run(cls, 2.0, 4, spider_plan(12, 4, Participation.all(), Participation.poisson(0.1)),
                           "add-remove") != b


def test_clearing_the_rdp_cache_forgets_the_calibration_memos():
    """accounting.clear_rdp_cache (what a benchmark calls to time a cold calibration) empties
    the dry-run and epsilon-conversion memos too, and they fill again on the next use."""
    from dpreg import accounting
    from dpreg_plugins.algorithms import spider_core as sc

    plan = spider_plan(10, 4, Participation.all(), Participation.poisson(0.1))
    sc._dry_run(GaussianMechanism, 2.0, 4, plan, "add-remove")
    acc = accounting.RdpAccountant(epsilon=100.0, delta=1e-5)
    acc.charge(accounting.gaussian_event(1.5))
    acc.epsilon_spent
    assert sc._dry_run_memo.cache_info().currsize > 0
    assert accounting._epsilon_and_order.cache_info().currsize > 0
    accounting.clear_rdp_cache()
    assert sc._dry_run_memo.cache_info().currsize == 0
    assert accounting._epsilon_and_order.cache_info().currsize == 0
    sc._dry_run(GaussianMechanism, 2.0, 4, plan, "add-remove")
    assert sc._dry_run_memo.cache_info().currsize == 1
