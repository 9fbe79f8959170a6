"""The single-participation prefix-sum mechanisms ``tree-honaker`` and
``sqrt-factorization`` (spec ../shared/specs/remaining-seeds.md section (d)):
coefficients, exact sums without noise, per-step variance over many seeds,
streaming Honaker = brute-force GLS, charges and calibrated variance ranking,
refusals, memory, and end-to-end runs."""
from __future__ import annotations

import json
import math
from math import comb

import numpy as np
import pytest

import dpreg
from dpreg.accounting import RdpAccountant, gaussian_event, self_composed
from dpreg.errors import BudgetExceededError, DpregError
from dpreg.interfaces import Participation
from dpreg_plugins.noise.gaussian import GaussianMechanism
from dpreg_plugins.noise.single_participation import DisjointOnlyError
from dpreg_plugins.noise.sqrt_factorization import (SqrtFactorizationMechanism, column_norm,
                                                    sqrt_coefficients)
from dpreg_plugins.noise.tree import TreeMechanism
from dpreg_plugins.noise.tree_honaker import TreeHonakerMechanism, honaker_unit_variance

MECHS = (TreeHonakerMechanism, SqrtFactorizationMechanism)


def make(cls, dim=3, z=1.0, horizon=16, seed=0, eps=1e6, delta=1e-6):
    acc = RdpAccountant(eps, delta, "replace-one")
    return cls(dim=dim, noise_multiplier=z, horizon=horizon, accountant=acc, seed=seed), acc


def unit_variance(cls, t, horizon):
    """Per-step variance the spec's formula predicts for z = s = 1."""
    if cls is SqrtFactorizationMechanism:
        return cls.noise_std_per_step(1.0, 1.0, t, horizon=horizon) ** 2
    return cls.noise_std_per_step(1.0, 1.0, t) ** 2


def test_registered(registry):
    assert registry.get("noise", "tree-honaker") is TreeHonakerMechanism
    assert registry.get("noise", "sqrt-factorization") is SqrtFactorizationMechanism
    assert set(registry.names("noise")) >= {"gaussian", "tree", "tree-honaker", "sqrt-factorization"}


# ------------------------------------------------------------- 1. coefficients
def test_sqrt_coefficients_square_to_the_prefix_matrix():
    c = sqrt_coefficients(64)
    np.testing.assert_allclose(c, [comb(2 * k, k) / 4.0 ** k for k in range(64)], rtol=1e-13)
    C = np.zeros((64, 64))
    for i in range(64):
        C[i, :i + 1] = c[i::-1]
    assert np.max(np.abs(C @ C - np.tril(np.ones((64, 64))))) < 1e-12


@pytest.mark.parametrize("H", [64, 256, 1024, 4096, 65536])
def test_column_norm_asymptotics(H):
    # spec: sum_{k<H} c_k^2 ~ (ln H + gamma + ln 16) / pi.  Its next term is
    # -1/(4 pi H) (1.2e-3 at H = 64), so "within 1e-3" holds relatively for
    # H >= 64 and absolutely only from H = 80 on; the refined form to O(1/H^2).
    approx = (math.log(H) + np.euler_gamma + math.log(16)) / math.pi
    got = column_norm(H) ** 2
    assert abs(got / approx - 1) < 1e-3
    assert abs(got - (approx - 1 / (4 * math.pi * H))) < 0.01 / H**2


# ------------------------------------------------------ 2. exact without noise
@pytest.mark.parametrize("cls", MECHS)
def test_exact_prefix_sums_with_noise_zeroed(cls, monkeypatch):
    rng = np.random.default_rng(1)
    H, d = 37, 4
    incs = rng.standard_normal((H, d))
    sens = rng.uniform(0.1, 2.0, H)
    # (a) noise draws zeroed, positive sensitivities: the estimator's weights sum to one
    monkeypatch.setattr(cls, "unit_noise", lambda self, *c: np.zeros(self.dim))
    mech, _ = make(cls, dim=d, horizon=H)
    for t in range(1, H + 1):
        out = mech.add(incs[t - 1], sens[t - 1], Participation.disjoint(t))
        np.testing.assert_allclose(out, incs[:t].sum(0), rtol=0, atol=1e-12)
    monkeypatch.undo()
    # (b) zero sensitivity: no noise at all (a node of variance 0 is exact)
    mech, _ = make(cls, dim=d, horizon=H)
    for t in range(1, H + 1):
        out = mech.add(incs[t - 1], 0.0, Participation.disjoint(t))
        np.testing.assert_allclose(out, incs[:t].sum(0), rtol=0, atol=1e-12)


# ------------------------------------------------------- 3. per-step variance
def test_honaker_formula_values():
    assert honaker_unit_variance(1) == 1.0
    for t in range(2, 300):
        assert honaker_unit_variance(t) < bin(t).count("1")
    assert honaker_unit_variance(15) == pytest.approx(1 + 2 / 3 + 4 / 7 + 8 / 15)


@pytest.mark.parametrize("cls", MECHS)
def test_per_step_variance_matches_formula(cls):
    """Empirical variance of the prefix noise at every step, over 200 seeds x
    100 coordinates = 2e4 independent draws (relative sd 1 %), within 5 % of
    the formula; the same data reject the tree's and the gaussian's formulas
    wherever those differ by more than 12 %."""
    H, d, z, s = 16, 100, 1.3, 0.6
    sq = np.zeros(H)
    for seed in range(200):
        mech, _ = make(cls, dim=d, z=z, horizon=H, seed=np.random.SeedSequence([7, seed]))
        for t in range(1, H + 1):
            out = mech.add(np.zeros(d), s, Participation.disjoint(t))
            sq[t - 1] += float(out @ out)
    emp = sq / (200 * d) / (z * s) ** 2
    for t in range(1, H + 1):
        want = unit_variance(cls, t, H)
        assert abs(emp[t - 1] / want - 1) < 0.05, (t, emp[t - 1], want)
        for wrong in (bin(t).count("1"), t):  # tree, gaussian
            if abs(wrong / want - 1) > 0.12:
                assert abs(emp[t - 1] / wrong - 1) > 0.05


# --------------------------------------------- 4. streaming Honaker = GLS
def _released_nodes(t):
    """(level, index) of every dyadic node completed by step t."""
    return [(lev, k) for lev in range(t.bit_length()) for k in range(t >> lev)]


def test_streaming_honaker_equals_bruteforce_gls():
    H, d, z = 16, 3, 0.8
    rng = np.random.default_rng(4)
    incs = rng.standard_normal((H, d))
    sens = rng.uniform(0.2, 3.0, H)  # heteroscedastic nodes: the general GLS
    mech, _ = make(TreeHonakerMechanism, dim=d, z=z, horizon=H, seed=21)
    for t in range(1, H + 1):
        out = mech.add(incs[t - 1], sens[t - 1], Participation.disjoint(t))
        rows, ys, ws = [], [], []
        for lev, k in _released_nodes(t):
            lo, hi = k << lev, (k + 1) << lev  # leaves lo..hi-1 (0-based)
            a = np.zeros(t)
            a[lo:hi] = 1.0
            sigma = z * sens[lo:hi].max()
            rows.append(a)
            ys.append(incs[lo:hi].sum(0) + sigma * mech.node_noise(lev, k))
            ws.append(1.0 / sigma**2)
        A, Y, W = np.array(rows), np.array(ys), np.array(ws)
        xhat = np.linalg.solve(A.T @ (W[:, None] * A), A.T @ (W[:, None] * Y))
        np.testing.assert_allclose(out, xhat.sum(0), rtol=0, atol=1e-10)


# ------------------------------------------------------------- 5. charges
@pytest.mark.parametrize("H", [1, 16, 1000])
def test_record_events(H):
    z = 1.7
    assert TreeHonakerMechanism.record_event(z, H, "disjoint", 3) == \
        self_composed(gaussian_event(z), H.bit_length())
    assert SqrtFactorizationMechanism.record_event(z, H, "disjoint", 3) == gaussian_event(z)


@pytest.mark.parametrize("cls", MECHS)
def test_run_charges_equal_record_event(cls):
    """Every record (one disjoint add) is charged exactly its record event,
    before release: a phase of H adds spends what one record event spends."""
    mech, acc = make(cls, dim=2, z=1.1, horizon=40)
    for t in range(40):
        mech.add(np.zeros(2), 1.0, Participation.disjoint(("b", t)))
    assert acc.n_charges == 40
    ref = RdpAccountant(1e6, 1e-6)
    assert acc.epsilon_spent == pytest.approx(ref.epsilon_if(cls.record_event(1.1, 40, "disjoint", 1)), rel=1e-12)


@pytest.mark.parametrize("cls", MECHS)
def test_refused_charge_releases_nothing(cls):
    mech, acc = make(cls, dim=2, z=0.3, horizon=8, eps=0.5, delta=1e-5)
    with pytest.raises(BudgetExceededError):
        mech.add(np.ones(2), 1.0, Participation.disjoint(0))
    assert mech.steps == 0 and acc.n_charges == 0
    with pytest.raises(BudgetExceededError):  # refused again for budget, not as "added twice"
        mech.add(np.ones(2), 1.0, Participation.disjoint(0))


def test_calibrated_max_variance_ranking():
    """At equal (eps, delta) (each z calibrated on its own record event):
    max-over-t prefix variance sqrt < honaker < gaussian < tree at H = 16, in
    the ratios of the spec's table (16 / 20 / 13.9 / 3.78)."""
    H, s = 16, 1.0
    mv = {}
    for cls in (GaussianMechanism, TreeMechanism, TreeHonakerMechanism, SqrtFactorizationMechanism):
        acc = RdpAccountant(1.0, 1e-5)
        z = acc.calibrate(lambda z, cls=cls: cls.record_event(z, H, "disjoint", 1))
        kw = {"horizon": H} if cls is SqrtFactorizationMechanism else {}
        mv[cls.name] = max(cls.noise_std_per_step(z, s, t, **kw) ** 2 for t in range(1, H + 1))
    g = mv["gaussian"]
    assert mv["sqrt-factorization"] < mv["tree-honaker"] < g < mv["tree"]
    for name, table in (("tree", 20.0), ("tree-honaker", 13.857), ("sqrt-factorization", 3.779)):
        assert mv[name] / g * 16 == pytest.approx(table, rel=2e-3), name


# ------------------------------------------------------- 6. refusal, memory
@pytest.mark.parametrize("cls", MECHS)
@pytest.mark.parametrize("part", [Participation.all(), Participation.poisson(0.1)])
def test_non_disjoint_participation_refused(cls, part):
    mech, acc = make(cls)
    with pytest.raises(DisjointOnlyError, match=cls.name):
        mech.add(np.ones(3), 1.0, part)
    assert acc.n_charges == 0 and mech.steps == 0
    with pytest.raises(ValueError, match=cls.name):
        cls.record_event(1.0, 16, part.kind, 5)
    assert issubclass(DisjointOnlyError, DpregError)  # the CLI prints it as one line


@pytest.mark.parametrize("cls", MECHS)
def test_repeated_group_refused_within_phase_allowed_after_reset(cls):
    mech, acc = make(cls)
    mech.add(np.ones(3), 1.0, Participation.disjoint("g"))
    with pytest.raises(ValueError, match=f"{cls.name}.*added twice"):
        mech.add(np.ones(3), 1.0, Participation.disjoint("g"))
    assert acc.n_charges == 1 and mech.steps == 1
    mech.reset()
    mech.add(np.ones(3), 1.0, Participation.disjoint("g"))  # a new phase: a new running sum


@pytest.mark.parametrize("cls", MECHS)
def test_horizon_enforced_and_reset_gives_fresh_noise(cls):
    mech, _ = make(cls, horizon=4, seed=3)
    first = [mech.add(np.zeros(3), 1.0, Participation.disjoint(t)) for t in range(4)]
    with pytest.raises(RuntimeError):
        mech.add(np.zeros(3), 1.0, Participation.disjoint(9))
    mech.reset()
    second = [mech.add(np.zeros(3), 1.0, Participation.disjoint(t)) for t in range(4)]
    assert not any(np.allclose(a, b) for a, b in zip(first, second))


def test_honaker_memory_is_logarithmic():
    H = 1024
    mech, _ = make(TreeHonakerMechanism, dim=2, horizon=H)
    L = H.bit_length()
    most = 0
    for t in range(H):
        mech.add(np.zeros(2), 1.0, Participation.disjoint(t))
        most = max(most, mech.stored_vectors())
    assert most <= 2 * L <= 3 * L


def test_sqrt_regenerated_noise_equals_cached(monkeypatch):
    """Above the cache limit the noise rows are regenerated from the seed: O(1)
    stored vectors and the same releases as the cached O(H d) path."""
    H, d = 50, 6
    rng = np.random.default_rng(2)
    incs, sens = rng.standard_normal((H, d)), rng.uniform(0.1, 1.0, H)
    cached, _ = make(SqrtFactorizationMechanism, dim=d, horizon=H, seed=5)
    monkeypatch.setattr(SqrtFactorizationMechanism, "cache_bytes", 0)
    regen, _ = make(SqrtFactorizationMechanism, dim=d, horizon=H, seed=5)
    assert cached.cached and not regen.cached
    for t in range(H):
        a = cached.add(incs[t], sens[t], Participation.disjoint(t))
        b = regen.add(incs[t], sens[t], Participation.disjoint(t))
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    assert regen.stored_vectors() == 1 and cached.stored_vectors() == H + 1


def test_sqrt_noise_scale_follows_running_max_sensitivity(monkeypatch):
    """sigma_j = z |C|_col max_{i<=j} s_i: with unit noise draws the release
    is the exact sum plus sum_j c_{t-j} sigma_j."""
    monkeypatch.setattr(SqrtFactorizationMechanism, "unit_noise", lambda self, *c: np.ones(self.dim))
    H, z = 6, 0.5
    sens = [1.0, 3.0, 0.5, 2.0, 4.0, 0.1]
    mech, _ = make(SqrtFactorizationMechanism, dim=1, z=z, horizon=H)
    c, col = sqrt_coefficients(H), column_norm(H)
    sig = z * col * np.maximum.accumulate(sens)
    for t in range(1, H + 1):
        out = mech.add(np.zeros(1), sens[t - 1], Participation.disjoint(t))
        assert out[0] == pytest.approx(sum(c[t - j] * sig[j - 1] for j in range(1, t + 1)), rel=1e-12)


def test_honaker_node_structure():
    """Leaf 1 alone, then the level-1 node: (2 y_12 + (y_1 + y_2)) / 3 with equal sensitivities."""
    mech, _ = make(TreeHonakerMechanism, dim=4, z=2.0, seed=8)
    r1 = mech.add(np.zeros(4), 1.0, Participation.disjoint(1))
    y1 = 2.0 * mech.node_noise(0, 0)
    np.testing.assert_allclose(r1, y1, atol=1e-14)
    r2 = mech.add(np.zeros(4), 1.0, Participation.disjoint(2))
    y2, y12 = 2.0 * mech.node_noise(0, 1), 2.0 * mech.node_noise(1, 0)
    np.testing.assert_allclose(r2, (2 * y12 + y1 + y2) / 3, atol=1e-14)
    r3 = mech.add(np.zeros(4), 1.0, Participation.disjoint(3))
    np.testing.assert_allclose(r3 - r2, 2.0 * mech.node_noise(0, 2), atol=1e-14)


@pytest.mark.parametrize("cls", MECHS)
def test_deterministic_from_secret_seed_and_separate_from_tree(cls):
    runs = []
    for seed in (3, 3, 4):
        mech, _ = make(cls, seed=seed)
        runs.append([mech.add(np.ones(3), 1.0, Participation.disjoint(t)) for t in range(5)])
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert not np.array_equal(runs[0][-1], runs[2][-1])
    tree, _ = make(TreeMechanism, seed=3)
    assert not np.allclose(tree.add(np.ones(3), 1.0, Participation.disjoint(0)), runs[0][0])


# ------------------------------------------------------------- end to end
RUN = dict(data="synthetic-logistic:n=3000,d=5", loss="logistic", epsilon=1.0, delta=1e-5, seed=0)


@pytest.mark.parametrize("noise", ["tree-honaker", "sqrt-factorization"])
def test_cli_adaptive_spider_within_budget(noise, tmp_path):
    """``dpreg run --algo adaptive-spider --noise NAME`` end to end."""
    from click.testing import CliRunner

    from dpreg.cli import cli

    out = tmp_path / "run.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "adaptive-spider", "--noise", noise, "--loss", "logistic",
                                 "--data", RUN["data"], "--epsilon", "1", "--delta", "1e-5", "--seed", "0",
                                 "--out", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text())
    assert 0.5 < rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0 * (1 + 1e-9)
    assert rec["release"]["config"]["noise"] == noise and np.all(np.isfinite(rec["release"]["model"]["weights"]))


@pytest.mark.parametrize("noise", ["tree-honaker", "sqrt-factorization"])
def test_perturbed_sgd_within_budget(noise):
    rec = dpreg.run(algo="perturbed-sgd", noise=noise, **RUN)
    assert 0.5 < rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0 * (1 + 1e-9)
    assert rec["diagnostics"]["run_info"]["noise"] == noise and np.all(np.isfinite(rec["release"]["model"]["weights"]))


def test_resampling_algorithm_refuses_clearly(tmp_path):
    from click.testing import CliRunner

    from dpreg.cli import cli

    with pytest.raises(DpregError, match="sqrt-factorization.*disjoint"):
        dpreg.run(algo="dp-spider", noise="sqrt-factorization", **RUN)
    out = tmp_path / "x.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-spider", "--noise", "tree-honaker", "--data", RUN["data"],
                                 "--seed", "0", "--out", str(out)])
    assert r.exit_code == 2 and "error: noise 'tree-honaker' supports only disjoint" in r.output
    assert not out.exists()


# ------------------------------------------------------------ empirical audit
@pytest.mark.parametrize("noise", ["tree-honaker", "sqrt-factorization"])
def test_empirical_audit(noise):
    """dpreg audit on the mechanism alone (canary in the first of 8 adds, Fisher
    statistic over all releases): no violation of the claimed eps; the same
    audit catches the mechanism with its noise scaled down to 5 %."""
    from dpreg.audit import AuditConfig, run_audit

    ok = run_audit(AuditConfig(noise=noise, participation="disjoint", trials=120, epsilon=4.0, seed=3))
    assert not ok.violated and ok.epsilon_lower <= ok.epsilon_claimed, ok.as_dict()
    bad = run_audit(AuditConfig(noise=noise, participation="disjoint", trials=150, epsilon=1.0, seed=5,
                                fault="noise-scale=0.05"))
    assert bad.violated and bad.epsilon_lower > 1.5, bad.as_dict()
    with pytest.raises(DpregError, match=noise):  # the audit's default "all" participation is refused
        run_audit(AuditConfig(noise=noise, participation="all", trials=20, epsilon=1.0, seed=1))


def test_audit_adaptive_spider_with_sqrt_factorization():
    from dpreg.audit import AuditConfig, run_audit

    r = run_audit(AuditConfig(algo="adaptive-spider", noise="sqrt-factorization", trials=120, epsilon=4.0, seed=3))
    assert not r.violated, r.as_dict()
    bad = run_audit(AuditConfig(algo="adaptive-spider", noise="sqrt-factorization", trials=150, epsilon=1.0,
                                seed=5, fault="noise-scale=0.01"))
    assert bad.violated, bad.as_dict()


@pytest.mark.parametrize("cls", MECHS)
def test_bad_input_refused_before_charging(cls):
    mech, acc = make(cls)
    for inc, s in ((np.ones(3), float("nan")), (np.ones(3), -1.0), (np.ones(3), float("inf")), (np.ones(4), 1.0)):
        with pytest.raises(ValueError):
            mech.add(inc, s, Participation.disjoint("g"))
    assert acc.n_charges == 0 and mech.steps == 0
    mech.add(np.ones(3), 1.0, Participation.disjoint("g"))  # nothing was marked used


@pytest.mark.parametrize("name", ["tree-honaker", "sqrt-factorization"])
def test_charges_carry_the_pass_identity(registry, name):
    """A record's exposure sums over passes: two passes that reuse a group name
    must compose (the mechanism charges through dpreg.interfaces.charge)."""
    from dpreg.accounting import RdpAccountant
    from dpreg.interfaces import Participation

    cls = registry.get("noise", name)
    acc = RdpAccountant(100.0, 1e-6)
    one = RdpAccountant(100.0, 1e-6)
    for pass_id, a in ((("p", 1), acc), (("p", 2), acc), (("p", 1), one)):
        mech = cls(dim=2, noise_multiplier=2.0, horizon=4, accountant=a, seed=0)
        mech.add(np.zeros(2), 1.0, Participation.disjoint(("batch", 1), pass_id=pass_id))
    ev = cls.record_event(2.0, 4, "disjoint", 1)
    from dpreg.accounting import self_composed

    assert acc.epsilon_spent == pytest.approx(RdpAccountant(100.0, 1e-6).epsilon_if(self_composed(ev, 2)), rel=1e-9)
    assert acc.epsilon_spent > one.epsilon_spent


# ------------------------------------------- every running-sum algorithm
#: the algorithms whose gradient estimate is a running sum released through --noise (single pass)
RUNNING_SUM = ("adaptive-spider", "distributed-spider", "perturbed-sgd", "zo-o2nc")


def test_running_sum_algorithms_are_the_single_pass_noise_users(registry):
    """The list below covers every registered single-pass algorithm that takes --noise."""
    found = {n for n in registry.names("algorithm")
             if registry.get("algorithm", n).uses_noise and registry.get("algorithm", n).data_access == "single-pass"}
    assert found == set(RUNNING_SUM)


@pytest.mark.parametrize("noise", ["tree-honaker", "sqrt-factorization"])
@pytest.mark.parametrize("algo", RUNNING_SUM)
def test_every_running_sum_algorithm_runs_with_the_new_mechanisms(registry, algo, noise):
    """``--noise tree-honaker|sqrt-factorization`` end to end with every
    running-sum algorithm: the run releases through the named mechanism,
    calibrated to that mechanism's own per-record charge for the run's horizon
    (one Gaussian(z) for sqrt-factorization, bit_length(H) for tree-honaker),
    and spends the budget without exceeding it."""
    params = {"clients": 2} if algo == "distributed-spider" else {}
    rec = dpreg.run(algo=algo, noise=noise, data="synthetic-logistic:n=4000,d=5", loss="logistic",
                    epsilon=2.0, delta=1e-5, seed=0, params=params, diagnostics="light")
    info, priv = rec["diagnostics"]["run_info"], rec["release"]["privacy"]
    assert info["noise"] == noise and [m["noise"] for m in priv["mechanisms"]] == [noise]
    assert np.all(np.isfinite(rec["release"]["model"]["weights"]))
    assert 0.5 * 2.0 < rec["diagnostics"]["privacy"]["epsilon_spent"] <= 2.0 * (1 + 1e-9)
    H = info["block_length"] if algo == "zo-o2nc" else info["horizon"]
    assert H >= 2  # a phase of several adds: the prefix-sum structure is exercised
    acc = RdpAccountant(2.0, 1e-5, "replace-one")
    cls = registry.get("noise", noise)
    passes = info.get("passes", 1)  # adaptive-spider: one pass's charge composed over its passes
    z = acc.calibrate(lambda z: self_composed(cls.record_event(z, H, "disjoint", 1), passes))
    assert info["noise_multiplier"] == pytest.approx(z, rel=1e-6)
