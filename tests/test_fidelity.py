"""The SOSP algorithms' second-order machinery runs.

* perturbed-sgd: the practical floors keep Lemma 5's oracle error within chi
  (O1 noise <= chi/2, a phase's O2 noise <= chi/2), so the escape test runs;
  the run records how many tests ran and their outcomes;
* adaptive-spider: the public phase cap H bounds every phase and sets the
  tree depth; the literal-eps kappa gives several O1 refreshes;
* dp-spider: separate O1/O2 multipliers, calibrated jointly to the budget,
  release O1 with sigma_1 = z1 * sens (a statistical test that fails for z2);
* OutputChoice: 'random' without a known T is uniform over the iterates;
* lowy-synthetic: the declared constants are the true suprema (not looser
  than needed by more than the rounding, never below).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from dpreg.accounting import RdpAccountant
from dpreg.params import bind
from dpreg.problem import Problem
from dpreg.trajectory import OutputChoice
from dpreg_plugins.algorithms.adaptive_spider import AdaptiveSpider
from dpreg_plugins.algorithms.dp_spider import DPSpider
from dpreg_plugins.algorithms.perturbed_sgd import PerturbedSGD
from dpreg_plugins.losses.linear import Logistic, LowySynthetic
from dpreg_plugins.noise.gaussian import GaussianMechanism
from dpreg_plugins.noise.tree import TreeMechanism

from conftest import unit_rows


def logistic_problem(n=20000, d=10, seed=0):
    rng = np.random.default_rng(seed)
    X = unit_rows(rng, n, d)
    w_star = np.linspace(3.0, -3.0, d)
    y = np.where(X @ w_star + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return Problem(Logistic(), X, y)


@pytest.fixture(scope="module")
def pb():
    return logistic_problem()


def make(cls, pb, noise, eps=1.0, seed=0, **params):
    acc = RdpAccountant(eps, 1e-5, cls.relation)
    return cls(pb, bind(cls.params, params, cls.name), noise=noise, accountant=acc, seed=seed), acc


# ---------------------------------------------------------------- perturbed-sgd
@pytest.mark.parametrize("noise", [GaussianMechanism, TreeMechanism])
def test_perturbed_sgd_floors_meet_lemma_5_budget(pb, noise):
    algo, _ = make(PerturbedSGD, pb, noise)
    r = algo.resolve()
    f, d = 2.0, pb.d  # replace-one
    z, chi = r["noise_multiplier"], r["chi"]
    o1 = f * z * r["clip"] * math.sqrt(d) / r["batch1"]
    o2 = f * z * r["diff_clip"] * math.sqrt(d * r["kappa"]) / r["batch2"]
    assert o1 == pytest.approx(r["o1_noise_norm"]) and o1 <= chi / 2 * (1 + 1e-12)
    assert o2 <= chi / 2 * (1 + 1e-12)
    assert r["horizon"] <= 16 and r["alpha"] >= r["alpha_theorem"]


def test_perturbed_sgd_theory_preset_is_the_literal_theorem(pb):
    algo, _ = make(PerturbedSGD, pb, GaussianMechanism, preset="theory")
    r = algo.resolve()
    assert r["alpha"] == pytest.approx(r["alpha_theorem"]) and r["kappa"] == pytest.approx(r["kappa_theorem"])
    assert (r["batch1"], r["batch2"]) == (r["batch1_paper"], r["batch2_paper"])


@pytest.mark.parametrize("seed", [0, 1])
def test_perturbed_sgd_runs_escape_tests_and_records_them(pb, seed):
    # the defaults' alpha (alpha_scale x Thm 2's; before it, o1_budget=8 had to double the floor's) lets
    # the noisy gradient reach 3 chi; max_steps keeps every test within the log's first 50 entries, so
    # the log accounts for every outcome (a whole pass at eta = 2/M, mu = 3 runs 60-70 tests here)
    algo, acc = make(PerturbedSGD, pb, GaussianMechanism, seed=seed, max_steps=100)
    out = algo.run()
    i = out.info
    assert 1 <= i["escape_tests"] <= 50
    oc = i["escape_test_outcomes"]
    assert oc["escaped"] + oc["not_escaped"] + oc["interrupted"] == i["escape_tests"]
    assert oc["escaped"] == i["escapes"] and oc["not_escaped"] == int(i["certified"])
    assert "escape test(s) ran" in i["escape_test_note"]
    assert len(i["escape_log"]) == min(i["escape_tests"], 50)
    assert sum(e["escaped"] for e in i["escape_log"]) == oc["escaped"]
    # the same tests by what decided them: the public noise norm against the escape bar S/(T_esc eta)
    dec = i["sosp_decisions"]
    esc = dec["escape_tests"]
    assert esc["total"] == i["escape_tests"] and esc["certified"] == int(i["certified"])
    assert esc["escaped"] + esc["decided_by_noise"] == i["escapes"]
    assert dec["escape_bar"] == pytest.approx(i["escape_radius"] / (i["escape_steps"] * i["eta"]))
    assert dec["noise_norm"] == pytest.approx(i["o1_noise_norm"])
    by_noise = esc["decided_by_noise"]
    assert (by_noise == i["escapes"]) if dec["noise_norm"] >= dec["escape_bar"] else by_noise == 0
    for e in i["escape_log"]:
        assert e["outcome"] in ("escaped", "decided_by_noise", "certified", "interrupted")
    ref = dec["o1_refreshes"]
    assert ref["total"] == i["o1_queries"] and ref["start"] == 1
    assert acc.epsilon_spent <= 1.0 * (1 + 1e-9)


def test_perturbed_sgd_says_when_no_escape_test_ran(pb):
    # a threshold no noisy gradient reaches: alpha tiny, batches given (floors off)
    algo, _ = make(PerturbedSGD, pb, GaussianMechanism, alpha=1e-6, batch1=2000, batch2=500, kappa=1.0)
    i = algo.run().info
    assert i["escape_tests"] == 0 and "never reached an escape test" in i["escape_test_note"]


def test_perturbed_sgd_random_output_is_an_iterate(pb):
    algo, _ = make(PerturbedSGD, pb, GaussianMechanism, output="random")
    out = algo.run()
    assert out.info["output"] == "random" and 1 <= out.info["output_step"] <= out.iterations
    assert np.all(np.isfinite(out.w))


# ------------------------------------------------------------- adaptive-spider
@pytest.mark.parametrize("H", [4, 16])
def test_adaptive_spider_phase_cap_bounds_phases_and_tree_depth(pb, H):
    algo, acc = make(AdaptiveSpider, pb, TreeMechanism, eps=2.0, max_phase=H)
    i = algo.run().info
    assert i["horizon"] == H and i["tree_levels"] == H.bit_length()
    assert max(i["phase_lengths"]) <= H and i["max_phase_steps"] <= H
    assert len(i["phase_lengths"]) == i["o1_refreshes"] >= 2 and sum(i["phase_lengths"]) == i["steps"]
    # a refresh is forced only where a phase reached H adds
    assert i["o1_forced_by_phase_cap"] <= sum(1 for L in i["phase_lengths"][:-1] if L == H)
    if H == 4:  # drift phases on this problem run 4-12 adds: the cap of 4 must bite
        assert i["o1_forced_by_phase_cap"] >= 1
    assert acc.epsilon_spent <= 2.0 * (1 + 1e-9)


def test_adaptive_spider_literal_kappa_is_the_theorem_formula(pb):
    algo, acc = make(AdaptiveSpider, pb, TreeMechanism, kappa_scale=1.0)  # the formula itself, no practical factor
    z = 5.0
    r_lit = algo.resolve(z)
    G, M, _ = pb.constants()
    expected = max(r_lit["alpha"] * math.sqrt(pb.d) / 1.0, (r_lit["B"] * G * M) ** (1 / 3))
    assert r_lit["kappa"] == pytest.approx(expected)
    algo_na, _ = make(AdaptiveSpider, pb, TreeMechanism, kappa_eps="noise-aware", kappa_scale=1.0)
    r_na = algo_na.resolve(z)
    assert r_na["kappa"] == pytest.approx(max(r_na["alpha"] * math.sqrt(pb.d) * 2 * z,
                                              (r_na["B"] * G * M) ** (1 / 3)))


def test_adaptive_spider_set_output_keeps_every_iterate(pb):
    algo, _ = make(AdaptiveSpider, pb, GaussianMechanism, eps=2.0)
    out = algo.run()
    traj = out.info["trajectory"]
    assert out.info["output"] == "set" and traj.keeps_every_iterate
    assert traj.steps == list(range(out.iterations + 1))  # w_0 .. w_T, every one a --select candidate
    np.testing.assert_array_equal(out.w, traj.iterates[-1])


# ------------------------------------------------------------------- dp-spider
def test_dp_spider_separate_multipliers_fit_budget_and_split_loss():
    pb = logistic_problem(n=4000, d=5)
    algo, acc = make(DPSpider, pb, GaussianMechanism, eps=2.0, steps=20, phase=5, batch1=4000, batch2=4000)
    i = algo.run().info
    z1, z2 = i["o1_noise_multiplier"], i["noise_multiplier"]
    k1, k2 = 4, 16  # O1 and O2 adds of the plan
    # equal shares of the Gaussian loss: k1/z1^2 == k2/z2^2
    assert k1 / z1 ** 2 == pytest.approx(k2 / z2 ** 2, rel=1e-9)
    assert 0.999 * 2.0 <= acc.epsilon_spent <= 2.0 * (1 + 1e-9)
    algo0, acc0 = make(DPSpider, pb, GaussianMechanism, eps=2.0, steps=20, phase=5, batch1=4000, batch2=4000,
                       o1_share=0.0)
    i0 = algo0.run().info
    assert i0["o1_noise_multiplier"] == i0["noise_multiplier"] and z1 < i0["noise_multiplier"] < z2


def test_dp_spider_o1_release_has_sigma_1():
    """At w = 0 no logistic gradient reaches the clip, so the O1 release minus the exact mean is
    the O1 noise: its per-coordinate std must be z1 * C / b1 (not z2 * C / b1)."""
    from dpreg_plugins.algorithms.spider_core import SpiderEstimator
    from dpreg.interfaces import Participation

    pb = logistic_problem(n=500, d=50)
    idx = np.arange(pb.n)
    exact = pb.clipped_grad_sum(np.zeros(pb.d), idx, 1.0)[0] / pb.n
    z1, z2, res = 0.5, 5.0, []
    for seed in range(40):
        acc = RdpAccountant(1e6, 1e-5, "add-remove")
        est = SpiderEstimator(pb, GaussianMechanism, noise_multiplier=z2, horizon=3, accountant=acc,
                              seed=np.random.SeedSequence(seed), clip=1.0, smoothness=0.25,
                              o1_noise_multiplier=z1, o1_seed=np.random.SeedSequence([seed, 1]))
        res.append(est.refresh(np.zeros(pb.d), idx, Participation.all()).value - exact)
    std = np.std(np.concatenate(res))
    assert std == pytest.approx(z1 / pb.n, rel=0.1)  # 2000 draws: 10 % is > 6 standard errors


# ---------------------------------------------------------------- OutputChoice
def test_reservoir_random_output_is_uniform():
    counts = np.zeros(5)
    rng = np.random.default_rng(0)
    for _ in range(5000):
        oc = OutputChoice("random", None, rng, np.zeros(1))
        for t in range(1, 6):
            oc.see(t, np.array([float(t)]))
        counts[int(oc.result(np.array([5.0]), 5)[0]) - 1] += 1
    # chi-square with 4 d.o.f.: 0.1 % quantile 18.5
    chi2 = float(((counts - 1000) ** 2 / 1000).sum())
    assert chi2 < 18.5


def test_output_modes():
    rng = np.random.default_rng(1)
    ws = [np.array([1.0, 0.0]), np.array([3.0, 2.0])]
    for mode, want in (("last", ws[1]), ("set", ws[1]), ("average", np.array([2.0, 1.0]))):
        oc = OutputChoice(mode, 2, rng, np.zeros(2))
        for t, w in enumerate(ws, 1):
            oc.see(t, w)
        np.testing.assert_allclose(oc.result(ws[1], 2), want)
    with pytest.raises(ValueError):
        OutputChoice("best", 2, rng, np.zeros(2))


# -------------------------------------------------------------- lowy-synthetic
def test_lowy_synthetic_constants_are_true_suprema():
    G, M, rho = LowySynthetic().constants(10)
    r = np.linspace(0.0, 2.0, 200001)
    s = r * r
    g_true = (r * (1 + np.cos(s))).max() + 1.0
    m_true = max(np.abs(1 + np.cos(s) - 2 * s * np.sin(s)).max(), np.abs(1 + np.cos(s)).max())
    a = np.linspace(-2.0, 2.0, 2001)[:, None]   # <w,u>, |a| <= |w|
    rr = np.linspace(0.0, 2.0, 401)[None, :]
    third = np.where(np.abs(a) <= rr + 1e-12, np.abs(-4 * np.cos(rr ** 2) * a ** 3 - 6 * np.sin(rr ** 2) * a), 0)
    for declared, true in ((G, g_true), (M, m_true), (rho, third.max())):
        assert true <= declared <= true * 1.01


def test_adaptive_spider_theory_preset_uses_the_literal_eps(pb):
    algo, _ = make(AdaptiveSpider, pb, TreeMechanism, preset="theory")
    assert algo.resolve(7.0)["eps"] == 1.0
    algo_p, _ = make(AdaptiveSpider, pb, TreeMechanism)
    assert algo_p.resolve(7.0)["eps"] == pytest.approx(1.0 / (2 * 7.0))


def test_refusal_says_what_to_do():
    from dpreg.errors import ParameterError

    small = logistic_problem(n=300, d=10)
    # an O1 batch the data cannot hold, and batches an accuracy of 1e-3 needs: refused before any release
    algo, acc = make(AdaptiveSpider, small, TreeMechanism, eps=0.1, batch=400)
    with pytest.raises(ParameterError, match=r"Raise --epsilon, use more data.*--param alpha=.*--param batch="):
        algo.run()
    assert acc.n_charges == 0
    algo2, acc2 = make(PerturbedSGD, small, GaussianMechanism, eps=0.1, alpha=1e-3)
    with pytest.raises(ParameterError, match=r"Raise --epsilon, use more data"):
        algo2.run()
    assert acc2.n_charges == 0
    # the practical defaults' batch floors keep within the data: both run
    for cls, noise in ((AdaptiveSpider, TreeMechanism), (PerturbedSGD, GaussianMechanism)):
        algo3, acc3 = make(cls, small, noise, eps=0.1)
        out = algo3.run()
        assert out.iterations >= 10 and acc3.epsilon_spent <= 0.1 * (1 + 1e-9)


@pytest.mark.parametrize("algo,params", [("dp-spider", {"steps": 30}), ("perturbed-sgd", {}),
                                         ("adaptive-spider", {})])
def test_select_scans_every_iterate(algo, params):
    """--select gets every iterate of the run as a candidate, not ~20 checkpoints."""
    import dpreg

    rec = dpreg.run(algo=algo, noise="gaussian", loss="logistic", data="synthetic-logistic:n=20000,d=5",
                    epsilon=4.0, delta=1e-5, seed=2, params=params, select="exponential", select_share=0.2)
    sel = rec["diagnostics"]["selection"]
    steps = sel["steps"][:-1] if sel["steps"][-1] is None else sel["steps"]  # None: the returned point, appended
    assert steps == list(range(len(steps))) and sel["candidates"] == len(sel["steps"])
    assert sel["candidates"] >= 22  # more than the 20 checkpoints (+ w_0) of the old trajectory
    assert "every" in rec["diagnostics"]["run_info"]["select_candidates"]
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 4.0 * (1 + 1e-9)
