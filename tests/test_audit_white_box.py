"""The white-box audit (dpreg.audit.whitebox, ``dpreg audit --white-box``): the
known-shift bound's coverage, its verdict on every correct mechanism (below
the claim, yet close to it), and that it catches each injected fault that
under-states a sensitivity by 1.3 or more (test-only faults,
dpreg.testing.faults) - in the mechanisms alone, in the mechanism calls
algorithms make, and in the trust region's Hessian noise."""
from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpreg.audit import AuditConfig, gaussian_epsilon, known_shift_lower_bound, run_audit
from dpreg.errors import ParameterError

UNDER = f"noise-scale={1 / 1.3:.6f}"  # every sensitivity under-stated by 1.3


# ------------------------------------------------------------------ statistics
def test_known_shift_bound_covers_the_truth_at_its_confidence():
    """On exact Gaussian samples the bound exceeds the true mu in about 5 % of
    repetitions at 95 % confidence - not more (validity), and not never (a
    bound that is never close to the truth would have no power)."""
    rng = np.random.default_rng(0)
    mu, sigma, reps = 0.3, 2.0, 400
    s0 = rng.normal(5.0, sigma, (reps, 200))
    mu_lo = np.array([known_shift_lower_bound(s, mu * sigma, 0.5, 0.95)[1] for s in s0])
    over = int(np.sum(mu_lo > mu))
    assert 0.02 * reps <= over <= 0.085 * reps, over
    eps, m, _ = known_shift_lower_bound(s0[0], mu * sigma, 1e-5, 0.95)
    assert m == mu_lo[0] and eps == pytest.approx(gaussian_epsilon(m, 1e-5))


def test_known_shift_bound_zero_noise_and_zero_shift():
    assert known_shift_lower_bound(np.ones(50), 0.1, 1e-5, 0.95)[0] == math.inf
    assert known_shift_lower_bound(np.random.default_rng(1).normal(size=50), 0.0, 1e-5, 0.95)[0] == 0.0


def test_gaussian_epsilon_is_finite_and_monotone_for_large_mu():
    eps = [gaussian_epsilon(mu, 1e-5) for mu in (0.5, 5.0, 50.0, 500.0)]
    assert all(math.isfinite(e) for e in eps) and eps == sorted(eps)
    assert eps[-1] > 500.0 ** 2 / 2 * 0.9  # ~ mu^2 / 2 for a large mu
    assert gaussian_epsilon(math.inf, 1e-5) == math.inf


# -------------------------------------------------- correct mechanisms: below
CORRECT = [
    dict(noise="gaussian", participation="disjoint"),
    dict(noise="gaussian", participation="all"),
    dict(noise="tree", participation="disjoint"),
    dict(noise="tree", participation="all"),
    dict(noise="tree-honaker", participation="disjoint"),
    dict(noise="sqrt-factorization", participation="disjoint"),
    dict(noise="sqrt-factorization", participation="disjoint", schedule="decreasing"),
    dict(noise="tree", participation="disjoint", schedule="decreasing"),
]


@pytest.mark.parametrize("spec", CORRECT, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_white_box_passes_correct_mechanisms(spec):
    """Below the claim, and informative: above half of it (the rdp claim is
    itself an upper bound on the exact Gaussian epsilon, so the gap is partly
    the accountant's)."""
    r = run_audit(AuditConfig(white_box=True, trials=600, epsilon=1.0, seed=3, **spec))
    assert r.method == "gaussian" and r.white_box
    assert r.epsilon_claimed == pytest.approx(1.0, rel=1e-6)
    assert 0.5 < r.epsilon_lower <= r.epsilon_claimed, r.as_dict()


def test_white_box_is_tight_against_an_exact_accountant():
    """With the pld accountant (exact for a Gaussian) the bound on the
    Gaussian mechanism comes within 15 % of the claim, from below."""
    r = run_audit(AuditConfig(white_box=True, noise="gaussian", participation="disjoint", accountant="pld",
                              trials=2000, epsilon=1.0, seed=4))
    assert 0.85 * r.epsilon_claimed < r.epsilon_lower <= r.epsilon_claimed, r.as_dict()


# ------------------------------------------------ faults of 1.3 or more: caught
FAULTY = [
    # the column norm (1.31 at 8 adds) dropped from the factorisation's sensitivity
    dict(noise="sqrt-factorization", participation="disjoint", fault="no-column-norm", trials=1000),
    # the running maximum dropped: shows once a large add is followed by smaller ones
    dict(noise="sqrt-factorization", participation="disjoint", schedule="decreasing", fault="no-running-max",
         trials=300),
    dict(noise="tree", participation="disjoint", fault=UNDER, trials=1000),
    dict(noise="tree", participation="all", fault=UNDER, trials=1000),
    dict(noise="tree", participation="disjoint", schedule="decreasing", fault="no-running-max", trials=300),
    dict(noise="tree-honaker", participation="disjoint", schedule="decreasing", fault="no-running-max",
         trials=300),
    dict(noise="gaussian", participation="disjoint", fault=UNDER, trials=1000),
    # the charged-one-level tree: a charge, not a noise, fault
    dict(noise="tree", participation="disjoint", steps=16, fault="tree-one-level", trials=400),
]


@pytest.mark.parametrize("spec", FAULTY, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_white_box_catches_faults(spec):
    r = run_audit(AuditConfig(white_box=True, epsilon=1.0, seed=5, **spec))
    assert r.violated, r.as_dict()


@pytest.mark.slow
def test_white_box_catches_honaker_understated_by_1_3():
    """tree-honaker releases GLS estimates, which carry a little less of a
    record's exposure than the nodes it is charged for (mu 0.93 of the claim at
    8 adds): a sensitivity under-stated by 1.3 needs more runs to show."""
    r = run_audit(AuditConfig(white_box=True, noise="tree-honaker", participation="disjoint", fault=UNDER,
                              trials=2000, epsilon=1.0, seed=5))
    assert r.violated, r.as_dict()


# ------------------------------------------------- algorithms: replayed calls
@pytest.mark.parametrize("algo,n,params", [("adaptive-spider", 200, {}), ("zo-o2nc", 20, {"passes": 1}),
                                           ("distributed-spider", 200, {"passes": 1})])
def test_replay_catches_a_dropped_running_max_in_algorithms(algo, n, params):
    """The mechanism calls each single-pass algorithm makes (recorded from one
    run, replayed with the canary as a worst-case increment): the correct
    factorisation passes, the one that forgets the running maximum is caught
    (the O1 add's sensitivity is far above the O2 adds' after it).  zo-o2nc
    and distributed-spider make one pass here (on small data their defaults
    make up to 16: the replay's first 32 adds would then be a small part of the
    exposure the claim covers)."""
    common = dict(white_box=True, algo=algo, noise="sqrt-factorization", n=n, trials=300, epsilon=1.0, seed=6,
                  params=params)
    good = run_audit(AuditConfig(**common))
    assert not good.violated and good.epsilon_lower > 0.3 * good.epsilon_claimed, good.as_dict()
    bad = run_audit(AuditConfig(fault="no-running-max", **common))
    assert bad.violated and bad.epsilon_lower > 2.0, bad.as_dict()
    assert "sqrt-factorization mechanism calls replayed" in bad.target


def test_replay_catches_a_dropped_column_norm_in_adaptive_spider():
    """adaptive-spider's mechanism with the column norm dropped (1.31 at its
    horizon 8), against the charge of the one add the canary is in."""
    r = run_audit(AuditConfig(white_box=True, algo="adaptive-spider", noise="sqrt-factorization", n=200,
                              trials=1000, epsilon=1.0, seed=7, fault="no-column-norm"))
    assert r.violated, r.as_dict()
    assert r.epsilon_claimed < 1.0  # one add of a three-pass run: its share of the budget


def test_replay_of_full_batch_adds():
    """dp-spider's adds take every record: the canary sits in every add of a
    phase, and the noise scaled down by 1.3 is caught."""
    common = dict(white_box=True, algo="dp-spider", noise="tree", trials=1000, epsilon=1.0, seed=8)
    assert not run_audit(AuditConfig(**common)).violated
    bad = run_audit(AuditConfig(fault=UNDER, **common))
    assert bad.violated and "every add" in bad.canary, bad.as_dict()


# ----------------------------------------------- trust region: reported releases
def test_trust_region_releases_pass():
    r = run_audit(AuditConfig(white_box=True, algo="dp-trust-region", params={"steps": 1}, trials=200,
                              epsilon=1.0, seed=9))
    assert not r.violated and r.features >= 1 and r.canary.startswith("release"), r.as_dict()


@pytest.mark.slow
def test_trust_region_hessian_understated_by_1_3_is_caught():
    """The Hessian noise of DP-TR scaled down by 1.3 (its sensitivity
    under-stated): its release is audited against its own charge."""
    common = dict(white_box=True, algo="dp-trust-region", params={"steps": 1}, trials=500, epsilon=1.0, seed=9)
    bad = run_audit(AuditConfig(fault=f"{UNDER}@hessian", **common))
    assert bad.violated and "hessian" in bad.canary, bad.as_dict()
    good = run_audit(AuditConfig(**common))
    assert not good.violated, good.as_dict()


def test_trust_region_hessian_noise_halved_is_caught():
    r = run_audit(AuditConfig(white_box=True, algo="dp-trust-region", params={"steps": 1}, trials=200,
                              epsilon=1.0, seed=9, fault="noise-scale=0.5@hessian"))
    assert r.violated and "hessian" in r.canary, r.as_dict()


# ------------------------------------------------------------- the model check
def test_data_dependent_noise_stops_the_white_box_audit(registry):
    """A mechanism whose noise depends on the increment is not 'noise plus the
    canary's shift': the audit refuses to bound it instead of reporting a
    number its model does not support."""
    from dpreg.accounting import RdpAccountant
    from dpreg.audit.whitebox import MechanismCalls, ReplayExperiment, measure
    from dpreg.interfaces import Participation

    base = registry.get("noise", "gaussian")

    class Leaky(base):
        def add(self, increment, sensitivity, participation):
            return super().add(increment, sensitivity * (1.0 + abs(float(increment[0]))), participation)

    calls = MechanismCalls(2, 4.0, 4, [[(1.0, Participation.disjoint(t)) for t in range(4)]])
    exp = ReplayExperiment(Leaky, [calls], acc_cls=RdpAccountant, delta=1e-5, relation="add-remove",
                           target="leaky", noise="leaky", params={})
    seeds = list(range(100))
    with pytest.raises(ParameterError, match="differs between runs"):
        measure(exp, AuditConfig(white_box=True, trials=100), seeds, "gaussian", lambda i, n: None)


def test_replay_refuses_poisson_adds(registry):
    from dpreg.accounting import RdpAccountant
    from dpreg.audit.whitebox import MechanismCalls, ReplayExperiment
    from dpreg.interfaces import Participation

    calls = MechanismCalls(2, 4.0, 4, [[(1.0, Participation.poisson(0.1)) for _ in range(4)]])
    exp = ReplayExperiment(registry.get("noise", "gaussian"), [calls], acc_cls=RdpAccountant, delta=1e-5,
                           relation="add-remove", target="poisson", noise="gaussian", params={})
    with pytest.raises(ParameterError, match="Poisson"):
        exp.placements(np.zeros((10, 4)), None)


def test_white_box_errors():
    with pytest.raises(ParameterError, match="reports no releases"):
        run_audit(AuditConfig(white_box=True, algo="dp-gd", trials=20))
    with pytest.raises(ParameterError, match="not selectors"):
        run_audit(AuditConfig(white_box=True, selector="exponential", trials=20))
    with pytest.raises(ParameterError, match="schedule"):
        run_audit(AuditConfig(noise="tree", schedule="decreasing", trials=20))
    with pytest.raises(ParameterError, match="no-clip"):
        run_audit(AuditConfig(white_box=True, algo="dp-trust-region", fault="no-clip", trials=20))
    with pytest.raises(ParameterError, match="needs an algorithm"):
        run_audit(AuditConfig(white_box=True, noise="tree", fault="noise-scale=0.5@hessian", trials=20))


# ------------------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def cli():
    from dpreg.cli import _load_plugin_commands, cli

    _load_plugin_commands()
    return cli


def test_cli_white_box_violation_and_ok(cli):
    args = ["audit", "--noise", "sqrt-factorization", "--participation", "disjoint", "--white-box", "--trials", "1000"]
    res = CliRunner().invoke(cli, args + ["--fault", "no-column-norm"])
    assert res.exit_code == 1, res.output
    assert "VIOLATION" in res.output and "canary    phase 1, add 1 of 8" in res.output and "mu >=" in res.output
    res = CliRunner().invoke(cli, args + ["--json"])
    assert res.exit_code == 0, res.output
    import json

    rec = json.loads(res.output)
    assert rec["white_box"] and rec["method"] == "gaussian" and not rec["violated"]
    assert 0 < rec["mu_lower"] < rec["mu_claimed"]


@pytest.mark.parametrize("args,msg", [
    (["--trials", str(10 ** 12)], "error: trials must be at most 200,000"),
    (["--n", str(10 ** 9)], "error: n x d must be at most"),
    (["--schedule", "decreasing"], "error: --schedule applies to a white-box audit"),
])
def test_cli_absurd_sizes_are_one_line_errors(cli, args, msg):
    res = CliRunner().invoke(cli, ["audit", "--noise", "tree"] + args)
    assert res.exit_code == 2 and res.output.strip().startswith(msg), res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_white_box_clopper_pearson_is_valid_and_can_fail():
    """The assumption-free bound on the same white-box statistic: below the
    claim for the correct mechanism, above it once the noise is a fifth."""
    common = dict(white_box=True, noise="gaussian", participation="disjoint", method="clopper-pearson",
                  trials=600, epsilon=1.0, seed=10)
    good = run_audit(AuditConfig(**common))
    assert good.method == "clopper-pearson" and not good.violated, good.as_dict()
    bad = run_audit(AuditConfig(fault="noise-scale=0.2", **common))
    assert bad.violated and bad.fpr_upper < 0.2, bad.as_dict()
