"""adaptive-spider (Liu-Talwar Alg 2 + 3): single-pass accounting with every
noise plugin, refusal of a too-small noise, sensitivities enforced against a
worst-case record, the batch-size rule, saddle perturbations, gradient norm
falling on a small problem, real data from Python and from the CLI."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import shared_file, unit_rows
from dpreg_plugins.algorithms import adaptive_spider as AS
from dpreg_plugins.algorithms.adaptive_spider import (
    AdaptiveSpider,
    default_B,
    theorem_alpha,
)
from dpreg_plugins.algorithms.spider_core import SpiderEstimator, calibrate_noise, planned_event
from dpreg_plugins.losses.linear import Logistic, Sigmoid
from dpreg_plugins.noise.gaussian import GaussianMechanism
from dpreg_plugins.noise.tree import TreeMechanism

from dpreg.accounting import RdpAccountant, self_composed
from dpreg.errors import BudgetExceededError
from dpreg.interfaces import Participation
from dpreg.params import bind
from dpreg.problem import Problem

NOISES = {"gaussian": GaussianMechanism, "tree": TreeMechanism}


def problem(n=30000, d=5, seed=0, X_override=None):
    rng = np.random.default_rng(seed)
    X = unit_rows(rng, n, d)
    w_star = np.array([3.0, -2.0, 1.0, 0.5, -1.0])[:d]
    y = np.where(X @ w_star + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    if X_override is not None:
        X_override(X, y)
    return Problem(Logistic(), X, y)


def run(pb, noise, eps=2.0, delta=1e-5, seed=0, **params):
    acc = RdpAccountant(eps, delta, AdaptiveSpider.relation)
    noise_cls = NOISES[noise] if isinstance(noise, str) else noise
    algo = AdaptiveSpider(pb, bind(AdaptiveSpider.params, params, "adaptive-spider"), noise=noise_cls,
                          accountant=acc, seed=seed)
    return algo.run(), acc


def test_defaults_follow_theorem_3_11():
    assert default_B(Logistic()) == pytest.approx(math.log(2))
    assert default_B(Sigmoid()) == pytest.approx(0.5)
    n, d, eps, B, G, M = 10_000, 20, 1.0, 0.5, 1.0, 0.25
    a = theorem_alpha(n, d, eps, B, G, M)
    expected = (((B * G * M) ** (1 / 3) + (B * M) ** 0.5) * (d ** 0.5 / (n * eps)) ** 0.5
                + (B ** (2 / 9) * M ** (2 / 9) * G ** (5 / 9) + B ** (4 / 9) * M ** (4 / 9) * G ** (1 / 9)) / n ** (1 / 3)
                + (M * B) ** 0.5 / n ** 0.5)
    assert a == pytest.approx(expected)
    pb = problem(n=2000)
    G, M, rho = pb.constants()
    thm = theorem_alpha(2000, 5, 1.0, math.log(2), G, M)
    # preset=theory: the literal formulas, every practical factor 1
    algo = AdaptiveSpider(pb, bind(AdaptiveSpider.params, {"preset": "theory"}, "x"), noise=TreeMechanism,
                          accountant=RdpAccountant(1.0, 1e-5), seed=0)
    r = algo.resolve(z=3.0)  # theory ignores the calibrated multiplier
    assert r["alpha"] == pytest.approx(thm)
    assert r["kappa"] == pytest.approx(max(r["alpha"] * 5 ** 0.5, (math.log(2) * G * M) ** (1 / 3)))
    assert r["b"] == math.ceil(G * (5 ** 0.5 / r["alpha"] + 1 / r["alpha"] ** 2))
    s = 0.3
    assert algo.adaptive_batch(s, r) == math.ceil(max(s * 5 ** 0.5 / r["alpha"], r["kappa"] * s / r["alpha"] ** 2, 1))
    assert algo.adaptive_batch(0.0, r) == 1
    assert r["step"] == pytest.approx(1 / M)
    assert r["diff_clip"] == pytest.approx(M)
    # practical (the default): the same formulas times the documented factors
    algo = AdaptiveSpider(pb, bind(AdaptiveSpider.params, {"noise_aware": "false"}, "x"), noise=TreeMechanism,
                          accountant=RdpAccountant(1.0, 1e-5), seed=0)
    r = algo.resolve()
    c = {"alpha_scale": AS.ALPHA_SCALE, "kappa_scale": AS.KAPPA_SCALE, "adaptive_scale": AS.ADAPTIVE_SCALE,
         "diff_clip_over_M": 1.0 / AS.DIFF_CLIP_DIVISOR}
    assert r["alpha"] == pytest.approx(c["alpha_scale"] * thm)
    assert r["kappa"] == pytest.approx(c["kappa_scale"] * max(r["alpha"] * 5 ** 0.5, (math.log(2) * G * M) ** (1 / 3)))
    assert r["b"] == math.ceil(G * (5 ** 0.5 / r["alpha"] + 1 / r["alpha"] ** 2))
    assert algo.adaptive_batch(s, r) == math.ceil(
        c["adaptive_scale"] * max(s * 5 ** 0.5 / r["alpha"], r["kappa"] * s / r["alpha"] ** 2, 1))
    assert r["diff_clip"] == pytest.approx(c["diff_clip_over_M"] * M)
    assert r["step"] == pytest.approx(1 / M)
    # a given factor wins over either preset
    algo = AdaptiveSpider(pb, bind(AdaptiveSpider.params, {"preset": "theory", "alpha_scale": 2.0, "diff_clip": 0.01},
                                   "x"), noise=TreeMechanism, accountant=RdpAccountant(1.0, 1e-5), seed=0)
    r = algo.resolve()
    assert r["alpha"] == pytest.approx(2 * thm) and r["diff_clip"] == 0.01


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_single_pass_accounting_hits_budget(noise):
    pb = problem(n=20000)
    out, acc = run(pb, noise, eps=2.0, steps=60, passes=1)
    assert acc.epsilon_spent <= 2.0 * (1 + 1e-9)
    assert acc.epsilon_spent >= 2.0 * 0.995
    assert out.records_used <= pb.n
    assert out.info["steps"] == out.iterations > 5
    assert out.info["phases"] >= 1 and out.info["noise_multiplier"] > 0
    # every add is its own disjoint group: n_charges = steps, all groups equal
    assert acc.n_charges == out.iterations
    if noise == "tree":
        ref = RdpAccountant(2.0, 1e-5).epsilon_if(
            TreeMechanism.record_event(out.info["noise_multiplier"], out.info["horizon"], "disjoint", 1))
        assert acc.epsilon_spent == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_passes_are_accounted_together_and_spend_the_budget(noise):
    """passes=2: each pass a fresh permutation of all records under its own
    pass id, a record in one add of each pass; z is calibrated for both
    passes (larger than one pass's), and the accountant's rule - the worst
    group of each pass, summed over passes - spends exactly the planned
    one-pass exposure composed twice, within the budget."""
    pb = problem(n=4000)
    one, _ = run(pb, noise, eps=2.0, passes=1)
    out, acc = run(pb, noise, eps=2.0, passes=2)
    assert one.info["passes_made"] == 1 and out.info["passes"] == out.info["passes_made"] == 2
    assert one.records_used <= pb.n < out.records_used <= 2 * pb.n
    z1, z2 = one.info["noise_multiplier"], out.info["noise_multiplier"]
    assert 1.2 * z1 < z2 < 1.6 * z1            # about sqrt(2) more noise for twice the exposure
    passes = {key[0] for key in acc._groups}   # noqa: SLF001 (the accountant's (pass_id, group) keys)
    assert len(passes) == 2
    if noise == "tree":
        worst = TreeMechanism.record_event(z2, out.info["horizon"], "disjoint", 1)
    else:
        worst = GaussianMechanism.record_event(z2, out.info["horizon"], "disjoint", 1)
    ref = RdpAccountant(2.0, 1e-5).epsilon_if(self_composed(worst, 2))
    assert acc.epsilon_spent == pytest.approx(ref, rel=1e-9)
    assert 2.0 * 0.995 <= acc.epsilon_spent <= 2.0 * (1 + 1e-9)
    # one pass's exposure alone is well inside the budget: the second pass is what spends the rest
    assert RdpAccountant(2.0, 1e-5).epsilon_if(worst) < 0.8 * 2.0


def test_passes_default_practical_on_enough_records_more_on_few_and_one_under_theory():
    def make(pb, **params):
        return AdaptiveSpider(pb, bind(AdaptiveSpider.params, params, "x"), noise=TreeMechanism,
                              accountant=RdpAccountant(1.0, 1e-5), seed=0)

    from dpreg.access import PASSES_MIN_RECORDS

    big, small = problem(n=PASSES_MIN_RECORDS), problem(n=PASSES_MIN_RECORDS - 1)
    assert make(big).passes() == AS.PASSES > 1 and make(big).resolve()["T"] == AS.PASSES * big.n
    assert make(big, preset="theory").passes() == 1 and make(big, preset="theory").resolve()["T"] == big.n
    # below: ceil(20,000 / n) passes, at most 16 (schedule.practical_passes)
    assert make(small).passes() == 2 and make(small, passes=5).passes() == 5
    assert make(problem(n=1250)).passes() == 16 and make(problem(n=400)).passes() == 16
    assert make(problem(n=5000)).passes() == 4
    assert make(problem(n=400), preset="theory").passes() == 1


def test_planned_event_composes_one_pass_per_pass():
    plan = [(1, [Participation.disjoint(("plan", 0))])]
    one = planned_event(TreeMechanism, 5.0, 8, plan)
    three = planned_event(TreeMechanism, 5.0, 8, plan, passes=3)
    acc = RdpAccountant(100.0, 1e-5)
    assert acc.epsilon_if(three) == pytest.approx(acc.epsilon_if(self_composed(one, 3)), rel=1e-12)
    assert acc.epsilon_if(three) > acc.epsilon_if(one)
    with pytest.raises(ValueError, match="passes"):
        planned_event(TreeMechanism, 5.0, 8, plan, passes=0)


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_too_small_noise_refused_at_the_first_release(noise):
    pb = problem(n=3000)
    horizon = 3000
    plan = [(1, [Participation.disjoint(("plan", 0))])]
    z = calibrate_noise(RdpAccountant(1.0, 1e-5), NOISES[noise], horizon, plan)
    for factor, ok in ((1.0, True), (0.97, False)):
        acc = RdpAccountant(1.0, 1e-5)
        est = SpiderEstimator(pb, NOISES[noise], noise_multiplier=z * factor, horizon=horizon, accountant=acc,
                              seed=0, clip=1.0, smoothness=0.25)
        if ok:
            est.refresh(np.zeros(pb.d), np.arange(100), Participation.disjoint(1))
            est.update(np.full(pb.d, 0.1), np.zeros(pb.d), np.arange(100, 150), Participation.disjoint(2))
            assert acc.epsilon_spent <= 1.0 * (1 + 1e-9)
        else:
            with pytest.raises(BudgetExceededError):
                est.refresh(np.zeros(pb.d), np.arange(100), Participation.disjoint(1))
            assert acc.n_charges == 0 and est.phases == 0


def _recording(base):
    class Recording(base):
        releases: list = []

        def add(self, increment, sensitivity, participation):
            out = super().add(increment, sensitivity, participation)
            if self.dim > 1:  # skip the calibration dry runs (dim 1)
                type(self).releases.append((out.copy(), float(sensitivity), participation.group))
            return out

    Recording.releases = []
    Recording.name = base.name
    return Recording


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_worst_case_record_moves_a_release_at_most_its_sensitivity(noise):
    def plant(X, y):
        X[11] = 1e8 * np.ones(X.shape[1])  # a record far outside |x| <= 1
        y[11] = -1.0

    runs = []
    for override in (None, plant):
        pb = problem(n=8000, X_override=override)
        rec = _recording(NOISES[noise])
        run(pb, rec, eps=2.0, seed=3, steps=40)
        runs.append(rec.releases)
    a, b = runs
    k = next(i for i, (x, y) in enumerate(zip(a, b)) if not np.array_equal(x[0], y[0]))
    diff = np.linalg.norm(a[k][0] - b[k][0])
    assert a[k][1] == b[k][1]  # the declared sensitivity did not depend on the data
    assert 0 < diff <= a[k][1] * (1 + 1e-9)


def test_batch_rule_bounds_every_o2_sensitivity():
    # Lemma 3.8: s/b_t <= min(alpha eps/sqrt(d), alpha^2/kappa) for every O2 step (eps: the formulas' eps)
    pb = problem(n=20000)
    rec = _recording(TreeMechanism)
    out, acc = run(pb, rec, eps=2.0, steps=60)
    info = out.info
    bound = 2 * min(info["alpha"] * info["eps_in_formulas"] / math.sqrt(pb.d), info["alpha"] ** 2 / info["kappa"])
    o1 = 2 * info["clip"] / info["batch_o1"]
    sens = [s for _, s, _ in rec.releases]
    assert all(s == pytest.approx(o1) or s <= bound * (1 + 1e-9) for s in sens)
    assert info["o2_calls"] > 0


def test_saddle_perturbation_spacing():
    # labels independent of X: the gradient at 0 is ~0, so perturbations fire; then frozen = Gamma
    rng = np.random.default_rng(2)
    n, d = 20000, 5
    X = unit_rows(rng, n, d)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    pb = Problem(Sigmoid(), X, y)
    out, _ = run(pb, "tree", eps=4.0, saddle_threshold=1.0, frozen=3, steps=40)
    steps = out.info["perturbation_steps"]
    assert len(steps) >= 2
    assert min(np.diff(steps)) >= 3 + 1
    out0, _ = run(pb, "tree", eps=4.0, saddle_threshold=0.0, steps=40)
    assert out0.info["perturbations"] == 0


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_gradient_norm_falls_on_a_small_problem(noise):
    pb = problem(n=40000)
    g0 = np.linalg.norm(pb.gradient(np.zeros(pb.d)))
    out, _ = run(pb, noise, eps=4.0)
    g1 = np.linalg.norm(pb.gradient(out.w))
    assert g1 < 0.5 * g0, (g0, g1)
    assert pb.value(out.w) < pb.value(np.zeros(pb.d))


def test_deterministic_from_seed():
    pb = problem(n=5000)
    a, _ = run(pb, "tree", seed=1, steps=20)
    b, _ = run(pb, "tree", seed=1, steps=20)
    c, _ = run(pb, "tree", seed=2, steps=20)
    assert np.array_equal(a.w, b.w) and not np.array_equal(a.w, c.w)


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_real_data_from_python(noise):
    import dpreg

    path = shared_file("ijcnn1.trn.bz2")
    rec = dpreg.run(algo="adaptive-spider", noise=noise, loss="sigmoid-l2", data=str(path), epsilon=1.0)
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0 * (1 + 1e-9)
    info, n = rec["diagnostics"]["run_info"], rec["diagnostics"]["problem"]["n"]
    assert info["passes"] == info["passes_made"] == AS.PASSES  # the practical default, every pass made
    assert (AS.PASSES - 1) * n < rec["diagnostics"]["usage"]["records_used"] <= AS.PASSES * n
    assert rec["diagnostics"]["metrics"]["train_grad_norm"] < rec["diagnostics"]["trajectory"]["checkpoints"]["grad_norm"][0]


def test_cli_default_run_is_adaptive_spider_with_tree(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from dpreg.cli import cli as main

    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["run"])
    assert res.exit_code == 0, res.output
    rec = json.loads((tmp_path / "run.json").read_text())
    assert rec["release"]["config"]["algo"] == "adaptive-spider" and rec["release"]["config"]["noise"] == "tree"
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0 * (1 + 1e-9)
    assert all(np.isfinite(rec["release"]["model"]["weights"]))
    assert rec["diagnostics"]["metrics"]["train_loss"] < 1.0  # sane: near log 2 at worst on this tiny set


def test_cli_real_data(tmp_path):
    from click.testing import CliRunner

    from dpreg.cli import cli as main

    path = shared_file("ijcnn1.trn.bz2")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["run", "--algo", "adaptive-spider", "--noise", "tree", "--loss", "sigmoid-l2",
                                    "--data", str(path), "--epsilon", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    # the public phase cap H = 8 sets the tree depth, not n (bit_length(49990) = 16 levels before)
    assert rec["diagnostics"]["run_info"]["noise"] == "tree" and rec["diagnostics"]["run_info"]["tree_levels"] == 4
    assert rec["diagnostics"]["run_info"]["max_phase_steps"] <= 8
