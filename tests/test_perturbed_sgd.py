"""perturbed-sgd (Alg 1 + Alg 2 of perturbed-sgd-adaptive-spider-distributed-sosp.txt):
logic against a plain-numpy reference, privacy accounting, noise scale,
refusal before release, descent, CLI."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import naive
from dpreg_plugins.algorithms.perturbed_sgd import PASSES
from dpreg.access import SinglePass
from dpreg.accounting import RdpAccountant, gaussian_event, self_composed
from dpreg.errors import BudgetExceededError
from dpreg.params import bind
from test_saddle_escape import NoNoise

EPS = 1.0


@pytest.fixture(scope="module")
def logistic_problem(registry):
    from dpreg.pipeline import load_prepared
    from dpreg.problem import Problem

    X, y, _, _ = load_prepared("synthetic-logistic:n=20000,d=10", seed=3, labels="binary")
    return Problem(registry.get("loss", "logistic"), X, y)


@pytest.fixture(scope="module")
def algo_cls(registry):
    return registry.get("algorithm", "perturbed-sgd")


def _algo(algo_cls, pb, noise_cls, seed=0, eps=EPS, **params):
    acc = RdpAccountant(eps, 1.0 / pb.n, algo_cls.relation)
    p = bind(algo_cls.params, params, "perturbed-sgd")
    return algo_cls(pb, p, noise=noise_cls, accountant=acc, seed=seed), acc


# ------------------------------------------------------------ naive reference
def reference_run(pb, r, perms, *, init):
    """Alg 1 driven by Alg 2 with exact (noiseless) running sums, in plain numpy:
    the same batches (each pass a prefix-consumed permutation of ``perms``;
    a batch that does not fit moves to the next pass, whose first query is
    O1), drift = squared distance moved since the last O1 (or a phase of
    ``horizon`` adds) triggers O1, a repeated query at the same point reuses g."""
    loss, X, y, n = pb.loss, pb.X, pb.y, pb.n
    M2, C = r["diff_clip"], r["clip"]
    st = {"ptr": 0, "used": 0, "pass": 0, "prev": None, "g": None, "drift": math.inf, "o1": 0, "o2": 0, "steps": 0,
          "adds": 0}

    class Out(Exception):
        pass

    def take(b):
        idx = np.sort(perms[st["pass"]][st["ptr"]:st["ptr"] + b])
        st["ptr"] += b
        st["used"] += b
        return idx

    def fits(o1):
        if st["ptr"] + (r["batch1"] if o1 else r["batch2"]) <= n:
            return o1
        if st["pass"] + 1 >= len(perms):
            raise Out
        st["pass"] += 1
        st["ptr"] = 0
        st["drift"] = math.inf
        return True

    def query(x):
        if st["prev"] is not None:
            mv = float(np.sum((x - st["prev"]) ** 2))
            if mv == 0.0:
                st["steps"] += 1
                return st["g"]
            st["drift"] += mv
        if fits(st["g"] is None or st["drift"] >= r["kappa"] or st["adds"] >= r["horizon"]):
            idx = take(r["batch1"])
            st["g"] = naive.clipped_grad_sum(loss, X, y, idx, x, C)[0] / r["batch1"]
            st["drift"] = 0.0
            st["o1"] += 1
            st["adds"] = 1
        else:
            idx = take(r["batch2"])
            c = min(M2 * np.linalg.norm(x - st["prev"]), 2 * C)
            st["g"] = st["g"] + naive.clipped_diff_sum(loss, X, y, idx, x, st["prev"], c)[0] / r["batch2"]
            st["o2"] += 1
            st["adds"] += 1
        st["prev"] = x.copy()
        st["steps"] += 1
        return st["g"]

    def move(x, g):  # a step eta g, shortened to the step cap when longer
        m = r["eta"] * g
        ln = np.linalg.norm(m)
        if r["step_cap"] > 0 and ln > r["step_cap"]:
            m = m * (r["step_cap"] / ln)
        return x - m

    x = init.copy()
    out, certified = x, False
    try:
        while True:
            g = query(x)
            if not r["escape_tests_enabled"] or np.linalg.norm(g) > 3 * r["chi"]:
                x = move(x, g)
                out = x
                continue
            xt = x.copy()
            out = xt
            esc = False
            for _ in range(r["repeats"]):
                x = xt.copy()
                for _ in range(r["escape_steps"]):
                    x = move(x, query(x))
                    if np.linalg.norm(x - xt) >= r["escape_radius"]:
                        esc = True
                        break
                if esc:
                    break
            if not esc:
                out, certified = xt, True
                break
            out = x
    except Out:
        out = x
    return out, certified, st


@pytest.mark.parametrize("passes", [1, 2])
def test_matches_plain_numpy_reference(registry, algo_cls, passes):
    from dpreg.pipeline import load_prepared
    from dpreg.problem import Problem

    X, y, _, _ = load_prepared("synthetic-logistic:n=3000,d=5", seed=1, labels="binary")
    pb = Problem(registry.get("loss", "logistic"), X, y)
    params = dict(alpha=0.08, batch1=300, batch2=30, kappa=0.05, step=4.0, clip=1.0,
                  diff_clip=0.25, escape_steps=6, escape_radius=0.05, repeats=3, passes=passes, step_cap=0.03)
    algo, _ = _algo(algo_cls, pb, NoNoise, seed=7, **params)
    out = algo.run()
    r = out.info
    rng = algo.rng("perturbed-sgd batches")  # the run's stream: one permutation per pass, in order
    perms = [SinglePass(pb.n, rng)._perm for _ in range(passes)]
    w_ref, cert_ref, st = reference_run(pb, r, perms, init=np.zeros(pb.d))
    assert r["passes_made"] == st["pass"] + 1
    np.testing.assert_allclose(out.w, w_ref, rtol=1e-9, atol=1e-12)
    assert r["certified"] == cert_ref
    assert (r["o1_queries"], r["o2_queries"], out.iterations) == (st["o1"], st["o2"], st["steps"])
    assert out.records_used == st["used"] == r["batch1"] * st["o1"] + r["batch2"] * st["o2"]
    assert r["escape_tests"] >= 1 and r["o2_queries"] > 0  # both branches were exercised
    assert r["longest_phase"] <= r["horizon"]


# ------------------------------------------------------------------- privacy
@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_spent_epsilon_within_budget_parallel_composition(registry, algo_cls, logistic_problem, noise):
    algo, acc = _algo(algo_cls, logistic_problem, registry.get("noise", noise), seed=1)
    out = algo.run()
    st = acc.state()
    assert 0.97 * EPS <= acc.epsilon_spent <= EPS * (1 + 1e-9)
    # passes of disjoint batches: one disjoint group per release, each charged exactly once, nothing
    # global; every pass the plan paid for is made, each under its own pass id
    releases = out.info["o1_queries"] + out.info["o2_queries"]
    assert st["groups"] == releases == st["charges"] and st["global_events"] == 0
    assert all(len(ev) == 1 for ev in acc._groups.values())
    passes = out.info["passes"]
    assert passes == PASSES > 1 and out.info["passes_made"] == passes == len({k[0] for k in acc._groups})
    assert (passes - 1) * logistic_problem.n < out.records_used <= passes * logistic_problem.n


def test_calibration_single_release_vs_tree_levels(registry, algo_cls, logistic_problem):
    """gaussian: one Gaussian release per record and pass spends exactly eps;
    tree: the record's L = floor(log2 H)+1 node releases per pass do, so
    z_tree > z_gauss."""
    from dpreg_plugins.noise.tree import tree_levels

    algo, acc = _algo(algo_cls, logistic_problem, registry.get("noise", "gaussian"))
    r = algo.resolve()
    assert r["passes"] == PASSES
    assert acc.epsilon_if(self_composed(gaussian_event(r["noise_multiplier"]), PASSES)) == pytest.approx(EPS, rel=1e-6)
    algo_t, acc_t = _algo(algo_cls, logistic_problem, registry.get("noise", "tree"))
    rt = algo_t.resolve()
    tree = registry.get("noise", "tree")
    ev = tree.record_event(rt["noise_multiplier"], rt["horizon"], "disjoint", 1)
    assert acc_t.epsilon_if(self_composed(ev, PASSES)) == pytest.approx(EPS, rel=1e-6)
    assert tree_levels(rt["horizon"]) >= 2 and rt["noise_multiplier"] > r["noise_multiplier"]


def test_over_budget_plan_refused_before_any_release(registry, algo_cls, logistic_problem):
    """A plan whose noise is too small for the budget: the very first add is
    refused by the accountant, nothing is charged and no estimate is returned."""
    algo, acc = _algo(algo_cls, logistic_problem, registry.get("noise", "gaussian"))
    real = algo.resolve

    def under_noised():
        r = real()
        r["noise_multiplier"] *= 0.3
        return r

    algo.resolve = under_noised
    with pytest.raises(BudgetExceededError, match="refused"):
        algo.run()
    assert acc.n_charges == 0 and acc.epsilon_spent == 0.0


def test_noise_scale_of_first_release(registry, algo_cls):
    """At w = 0 on phase retrieval every per-record gradient is exactly 0, so
    the first release is pure noise: per-coordinate std z * 2C / b1."""
    from dpreg.pipeline import load_prepared
    from dpreg.problem import Problem
    from dpreg_plugins.algorithms.perturbed_sgd import AdaptiveSpiderOracle
    from dpreg_plugins.algorithms.spider_core import SpiderEstimator

    X, y, _, _ = load_prepared("phase-retrieval:n=400,d=40", seed=0, labels="real")
    pb = Problem(registry.get("loss", "phase-retrieval"), X, y)
    z, C, b1 = 2.0, 1.0, 100
    samples = []
    for seed in range(50):
        acc = RdpAccountant(50.0, 1e-3)
        est = SpiderEstimator(pb, registry.get("noise", "gaussian"), noise_multiplier=z, horizon=4,
                              accountant=acc, seed=seed, clip=C, smoothness=12.0)
        orc = AdaptiveSpiderOracle(est, SinglePass(pb.n, np.random.default_rng(seed)), b1=b1, b2=10, kappa=1.0)
        samples.append(orc.query(np.zeros(pb.d)))
    s = np.concatenate(samples)
    want = z * 2 * C / b1
    k = s.size  # 2000 samples: the variance ratio has sd sqrt(2/k) ~ 0.032
    assert abs(np.var(s) / want**2 - 1) < 5 * math.sqrt(2 / k)
    assert abs(np.mean(s)) < 5 * want / math.sqrt(k)


# ----------------------------------------------------------------- utility
def test_gradient_norm_falls(registry, algo_cls, logistic_problem):
    pb = logistic_problem
    g0 = np.linalg.norm(pb.gradient(np.zeros(pb.d)))
    for noise in ("gaussian", "tree"):
        ratios = []
        for seed in range(3):
            algo, _ = _algo(algo_cls, pb, registry.get("noise", noise), seed=seed, eps=2.0)
            out = algo.run()
            ratios.append(np.linalg.norm(pb.gradient(out.w)) / g0)
        # at w = 0 |grad F| = g0; a run that does not descend keeps ratio ~ 1
        assert np.median(ratios) < 0.5 and max(ratios) < 0.75, (noise, ratios)


def test_drift_threshold_decides_o1_or_o2(registry, algo_cls, logistic_problem):
    gauss = registry.get("noise", "gaussian")
    small, _ = _algo(algo_cls, logistic_problem, gauss, kappa=1e-12, batch1=500, batch2=50, max_steps=30)
    o = small.run()
    assert o.info["o2_queries"] == 0 and o.info["o1_queries"] == o.iterations - o.info["reused_queries"]
    big, _ = _algo(algo_cls, logistic_problem, gauss, kappa=1e9, batch1=500, batch2=50, max_phase=10 ** 6, passes=1)
    o = big.run()
    assert o.info["o1_queries"] == 1 and o.info["stop_reason"] in ("records exhausted",
                                                                     "no escape from x~ in Q attempts")
    assert o.records_used == 500 + 50 * o.info["o2_queries"]


def test_reproducible_from_seed(registry, algo_cls, logistic_problem):
    tree = registry.get("noise", "tree")
    a = _algo(algo_cls, logistic_problem, tree, seed=5, max_steps=40)[0].run().w
    b = _algo(algo_cls, logistic_problem, tree, seed=5, max_steps=40)[0].run().w
    c = _algo(algo_cls, logistic_problem, tree, seed=6, max_steps=40)[0].run().w
    assert np.array_equal(a, b) and not np.array_equal(a, c)


# ---------------------------------------------------------- docs and the CLI
def test_every_parameter_documented_with_a_formula(algo_cls):
    assert algo_cls.uses_noise and algo_cls.data_access == "single-pass"
    for s in algo_cls.params:
        assert s.help and s.formula, s.name


def test_cli_run_with_tree_noise(tmp_path):
    from click.testing import CliRunner

    from dpreg.cli import cli

    out = tmp_path / "run.json"
    res = CliRunner().invoke(cli, ["run", "--algo", "perturbed-sgd", "--noise", "tree", "--loss", "phase-retrieval",
                                   "--data", "phase-retrieval:n=4000,d=3", "--epsilon", "1",
                                   "--param", "clip=1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    assert rec["release"]["config"]["noise"] == "tree"
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0 + 1e-9
    assert {"certified", "escape_tests", "escapes", "escape_attempts"} <= set(rec["diagnostics"]["run_info"])
    info = CliRunner().invoke(cli, ["info", "perturbed-sgd"])
    assert info.exit_code == 0 and "escape_radius" in info.output and "sqrt(alpha/rho)" in info.output


def test_batch_larger_than_data_is_a_user_error(registry, algo_cls, logistic_problem):
    from dpreg.errors import ParameterError

    algo, acc = _algo(algo_cls, logistic_problem, registry.get("noise", "gaussian"), batch1=10**6)
    with pytest.raises(ParameterError, match="batch1"):
        algo.run()
    assert acc.n_charges == 0


def test_starts_from_a_meta_algorithm_initial_point(algo_cls, logistic_problem):
    # two queries: at the defaults' coarser alpha (alpha_scale) the first exact gradient at w0 may already be
    # below 3 chi, and the step is then taken by the escape attempt's first query (a reuse of the estimate)
    algo, _ = _algo(algo_cls, logistic_problem, NoNoise, max_steps=2)
    w0 = np.linspace(-0.5, 0.5, logistic_problem.d)
    algo.init = w0
    out = algo.run()
    traj = out.info["trajectory"]
    assert np.array_equal(traj.iterates[0], w0) and not np.array_equal(out.w, w0)


# ------------------------------------------------------- practical defaults
def test_practical_o2_clip_is_a_quarter_of_the_declared_smoothness(registry, algo_cls, logistic_problem):
    """preset=practical clips O2 differences to M/4 |x - y| (the kernel enforces whatever
    diff_clip resolves to: test_matches_plain_numpy_reference); preset=theory keeps Alg 2's M;
    a given diff_clip wins over both."""
    gauss = registry.get("noise", "gaussian")
    _, M, _ = logistic_problem.constants()
    assert _algo(algo_cls, logistic_problem, gauss)[0].resolve()["diff_clip"] == pytest.approx(M / 4)
    assert _algo(algo_cls, logistic_problem, gauss, preset="theory")[0].resolve()["diff_clip"] == pytest.approx(M)
    assert _algo(algo_cls, logistic_problem, gauss, diff_clip=0.2)[0].resolve()["diff_clip"] == 0.2


def test_defaults_learn_on_adult_and_run_escape_tests():
    """The defaults (shipped adult, eps = 1, research seed 0): test accuracy
    >= 0.82, clear of the majority class (0.764), and the run reaches
    its escape test and records how many ran and their outcomes."""
    import dpreg

    rec = dpreg.run(algo="perturbed-sgd", epsilon=1.0, seed=0)
    m, b, ri = (rec["diagnostics"][k] for k in ("metrics", "baselines", "run_info"))
    assert rec["release"]["config"]["data"] == "adult"
    assert m["test_accuracy"] >= 0.82 > b["test_majority_rate"] + 0.05
    assert ri["escape_tests"] >= 1 and sum(ri["escape_test_outcomes"].values()) == ri["escape_tests"]
    assert ri["escape_test_note"] == f"{ri['escape_tests']} escape test(s) ran"
    assert rec["release"]["privacy"]["epsilon"] <= 1.0 * (1 + 1e-9)


def test_practical_rules_alpha_step_mu_kappa_b2(registry, algo_cls, logistic_problem):
    """preset=practical: alpha = max{alpha_scale x Thm 2 alpha, the o1_budget
    floor 16 f z C sqrt(d) K1/n}, eta = 2/M, mu = 3, kappa = max{Thm 2 kappa, P (3 eta chi)^2} with P = 1,
    b1 >= its floor, b2 = its floor 2 f z M' sqrt(d kappa)/chi (not raised to Thm 2's b2); only public
    n, d, eps, the declared constants and the calibrated z enter."""
    from dpreg_plugins.algorithms.perturbed_sgd import theorem2_alpha, theorem2_kappa

    pb = logistic_problem
    gauss = registry.get("noise", "gaussian")
    algo, acc = _algo(algo_cls, pb, gauss)
    r = algo.resolve()
    G, M, rho = pb.constants()
    n, d, f, z, C = pb.n, pb.d, 2.0, r["noise_multiplier"], r["clip"]
    a_thm = theorem2_alpha(n, d, EPS, G, M, rho, 1.0)
    floor = 16 * f * z * C * math.sqrt(d) * 4 / n
    assert r["alpha_theorem"] == pytest.approx(a_thm) and r["alpha_floor"] == pytest.approx(floor)
    assert r["alpha"] == pytest.approx(max(4 * a_thm, floor))
    assert 4 * a_thm > floor and r["alpha"] == pytest.approx(4 * a_thm)  # here the scaled theorem decides
    assert r["eta"] == pytest.approx(2 / M) and r["mu"] == 3.0
    chi, eta = r["chi"], r["eta"]
    assert r["kappa"] == pytest.approx(max(theorem2_kappa(n, d, EPS, G, M, rho, 1.0), (3 * eta * chi) ** 2))
    assert r["batch2"] == math.ceil(2 * f * z * r["diff_clip"] * math.sqrt(d * r["kappa"]) / chi)
    assert r["batch1"] >= math.ceil(2 * f * z * C * math.sqrt(d) / chi)
    assert r["escape_steps"] == math.ceil(3.0 / (eta * math.sqrt(rho * r["alpha"])))
    assert r["escape_radius"] == pytest.approx(math.sqrt(r["alpha"] / rho) / 3.0 ** 1.5)
    # alpha_scale is the rule's constant: 1 gives the floor here, a large value scales the theorem's alpha
    assert _algo(algo_cls, pb, gauss, alpha_scale=1)[0].resolve()["alpha"] == pytest.approx(max(a_thm, floor))
    assert _algo(algo_cls, pb, gauss, alpha_scale=10)[0].resolve()["alpha"] == pytest.approx(10 * a_thm)
    # given values win over the rules
    given = _algo(algo_cls, pb, gauss, step=1.5, mu=2, drift_steps=2)[0].resolve()
    assert given["eta"] == 1.5 and given["mu"] == 2.0
    assert given["kappa"] == pytest.approx(max(theorem2_kappa(n, d, EPS, G, M, rho, 1.0),
                                               2 * (3 * 1.5 * given["chi"]) ** 2))


def test_theory_preset_keeps_the_papers_formulas(registry, algo_cls, logistic_problem):
    """preset=theory is untouched by the practical rules: Thm 2's alpha, kappa, b1 = n kappa/(2U eta),
    b2 = n eta chi^2/(2U), eq. (4)'s eta = sqrt(rho alpha)/(M^2 iota^2), mu = 2 (so T_esc and S of eq. (4)
    with iota = 2), O2 clip M;
    alpha_scale and drift_steps do not enter."""
    from dpreg_plugins.algorithms.perturbed_sgd import theorem2_alpha, theorem2_kappa

    pb = logistic_problem
    gauss = registry.get("noise", "gaussian")
    G, M, rho = pb.constants()
    n, d = pb.n, pb.d
    for extra in ({}, {"alpha_scale": 7, "drift_steps": 5}):
        r = _algo(algo_cls, pb, gauss, preset="theory", **extra)[0].resolve()
        alpha, kappa = theorem2_alpha(n, d, EPS, G, M, rho, 1.0), theorem2_kappa(n, d, EPS, G, M, rho, 1.0)
        eta = math.sqrt(rho * alpha) / (M ** 2 * 2.0 ** 2)  # eq. (4), iota = s mu = 2
        chi = alpha / 4
        assert (r["alpha"], r["kappa"], r["eta"], r["mu"]) == (pytest.approx(alpha), pytest.approx(kappa),
                                                                pytest.approx(eta), 2.0)
        assert r["batch1"] == max(1, math.ceil(n * kappa / (2 * eta)))
        assert r["batch2"] == max(1, math.ceil(n * eta * chi ** 2 / 2))
        assert r["escape_steps"] == max(1, math.ceil(2.0 / (eta * math.sqrt(rho * alpha))))
        assert r["escape_radius"] == pytest.approx(math.sqrt(alpha / rho) / 2.0 ** 1.5)
        assert r["diff_clip"] == pytest.approx(M)


@pytest.mark.slow
def test_escape_noise_below_bar_lets_the_landscape_decide(registry, algo_cls):
    """escape_noise=below-bar floors b1 so that the O1 noise norm is below the
    escape bar S/(T_esc eta): no escape test is then decided by noise, where the
    default floor (noise ~ alpha/8, about twice the bar) decides every one; on
    too few records it refuses in one line before any release."""
    from conftest import unit_rows
    from dpreg.errors import ParameterError
    from dpreg.problem import make_problem

    rng = np.random.default_rng(5)
    X = unit_rows(rng, 20000, 4) * np.array([1.0, 0.5, 0.4, 0.3])
    pb = make_problem(registry.get("loss", "matrix-factorisation"), X, np.zeros(len(X)), "mf")
    noise = registry.get("noise", "gaussian")
    out = {}
    for rule in ("floor", "below-bar"):
        algo, acc = _algo(algo_cls, pb, noise, eps=1.0, escape_noise=rule)
        dec = algo.run().info["sosp_decisions"]
        out[rule] = dec
        assert acc.epsilon_spent <= 1.0 * (1 + 1e-9)
    lo, hi = out["below-bar"], out["floor"]
    assert lo["noise_norm"] <= 0.8 * lo["escape_bar"] * (1 + 1e-9) and not lo["noise_decides"]
    assert lo["escape_tests"]["decided_by_noise"] == 0 and lo["escape_tests"]["total"] >= 1
    assert hi["noise_norm"] >= hi["escape_bar"] and hi["noise_decides"]
    assert hi["escape_tests"]["escaped"] == 0 and hi["escape_tests"]["decided_by_noise"] >= 1
    small = make_problem(registry.get("loss", "matrix-factorisation"), X[:300], np.zeros(300), "mf")
    algo, acc = _algo(algo_cls, small, noise, eps=1.0, escape_noise="below-bar")
    with pytest.raises(ParameterError, match="escape_noise=below-bar needs an O1 batch"):
        algo.run()
    assert acc.epsilon_spent == 0.0
