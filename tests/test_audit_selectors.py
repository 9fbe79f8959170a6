"""Selector audit (``dpreg audit --selector``): the exponential mechanism and
AboveThreshold run through their own ``select`` on canary data sets; the
audited lower bound stays below the accountant's epsilon (and below the exact
privacy loss of the construction, computed here from the selectors' exact
output laws), and exceeds it for deliberately broken selectors (test-only
fault injection: noise scaled down, clipping off with a huge canary)."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from test_mechanism_audit import _above_threshold_probs

from dpreg.audit import AuditConfig, canary_data, choose_event, run_audit
from dpreg.errors import DpregError, ParameterError
from dpreg.problem import Problem
from dpreg.registry import get_registry


def _pair_loss(p1, p0):
    """Exact max over outcomes of |log P(k | D) / P(k | D')| (pure-DP loss of the pair)."""
    return float(np.max(np.abs(np.log(np.asarray(p1) / np.asarray(p0)))))


def _problems(relation, n=20, d=2):
    loss = get_registry().get("loss", "logistic")
    (X1, y1), (X0, y0) = canary_data(n, d, relation)
    return Problem(loss, X1, y1), Problem(loss, X0, y0)


def test_choose_event_finds_the_informative_outcome():
    rng = np.random.default_rng(0)
    o1 = rng.choice([-1, 0, 1, 2], size=400, p=[0.1, 0.1, 0.7, 0.1])  # canary: index 1 likely
    o0 = rng.choice([-1, 0, 1, 2], size=400, p=[0.3, 0.3, 0.1, 0.3])
    assert choose_event(o1, o0, 1e-5, 0.95) == 1


def test_exponential_audit_is_valid_and_has_power():
    """Correct exponential mechanism at eps = 4: epsilon_lower is clearly
    positive, and below both the claim and the exact loss of the construction."""
    r = run_audit(AuditConfig(selector="exponential", trials=300, epsilon=4.0, seed=1))
    assert r.epsilon_claimed == pytest.approx(4.0, rel=1e-3) and r.relation == "replace-one"
    assert r.event in ("index == 0", "index != 0")
    sel_cls = get_registry().get("selector", "exponential")
    W = np.array([[1.0, 0.0]] + [[-1.0, 0.0]] * 5)
    p1, p0 = (sel_cls(pb, accountant=None, rng=None).probabilities(W, 4.0) for pb in _problems("replace-one"))
    exact = _pair_loss(p1[:2], p0[:2])  # candidates 1..5 are copies: outcomes {0}, {1..5}
    assert 2.5 < exact < 4.0  # the construction is close to the worst case
    assert 1.5 < r.epsilon_lower <= exact, r.as_dict()
    assert not r.violated


def test_above_threshold_audit_is_valid_and_has_power():
    """Correct AboveThreshold at eps = 4: epsilon_lower > 0 and below the exact
    loss of the construction (deficits +1/2 with the canary, -1/2 without, at
    w_move; -1/2 at w_still in both)."""
    r = run_audit(AuditConfig(selector="above-threshold", trials=600, epsilon=4.0, seed=1))
    assert r.epsilon_claimed == pytest.approx(4.0, rel=1e-3) and r.relation == "add-remove"
    sel_cls = get_registry().get("selector", "above-threshold")
    W = [np.zeros(2), np.array([20.0, 0.0])]
    from dpreg.accounting import RdpAccountant

    u = [sel_cls(pb, accountant=RdpAccountant(4.0, 1e-5, "add-remove"), rng=None, grad_clip=0.1,
                 check="fosp").deficits(W, 0.1 / 40) for pb in _problems("add-remove")]
    assert u[0] == pytest.approx([0.5, -0.5], abs=1e-6) and u[1] == pytest.approx([-0.5, -0.5], abs=1e-6)
    exact = _pair_loss(_above_threshold_probs(u[0], 4.0), _above_threshold_probs(u[1], 4.0))
    assert 0.1 < r.epsilon_lower <= exact < 4.0, (r.as_dict(), exact)
    assert not r.violated


@pytest.mark.parametrize("selector", ["exponential", "above-threshold"])
def test_huge_canary_is_harmless_with_clipping(selector):
    r = run_audit(AuditConfig(selector=selector, trials=300, epsilon=1.0, seed=2, canary_norm=1000.0))
    assert not r.violated, r.as_dict()


BROKEN = [
    dict(selector="exponential", fault="noise-scale=0.25"),  # runs at 4 eps
    dict(selector="exponential", fault="no-clip", canary_norm=1000.0),
    dict(selector="above-threshold", fault="noise-scale=0.05"),  # runs at 20 eps
    dict(selector="above-threshold", fault="no-clip", canary_norm=1000.0),
]


@pytest.mark.parametrize("spec", BROKEN, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_selector_audit_catches_broken_selectors(spec):
    r = run_audit(AuditConfig(trials=300, epsilon=1.0, seed=5, **spec))
    assert r.violated, r.as_dict()
    assert r.epsilon_lower > 1.3


def test_relation_override_and_config_errors():
    r = run_audit(AuditConfig(selector="above-threshold", trials=100, epsilon=1.0, relation="replace-one"))
    assert r.relation == "replace-one" and not r.violated
    with pytest.raises(ParameterError, match="no --algo or --noise"):
        run_audit(AuditConfig(selector="exponential", algo="dp-sgd", trials=20))
    with pytest.raises(ParameterError, match="relation applies to selector"):
        run_audit(AuditConfig(algo="dp-sgd", relation="add-remove", trials=20))
    with pytest.raises(ParameterError, match="candidates"):
        run_audit(AuditConfig(selector="exponential", candidates=1, trials=20))
    with pytest.raises(ParameterError, match="unknown parameter"):
        run_audit(AuditConfig(selector="exponential", params={"alpha": 1}, trials=20))
    with pytest.raises(DpregError, match="unknown selector .nope.; valid selector names"):
        run_audit(AuditConfig(selector="nope", trials=20))


def test_selector_audit_cli():
    from dpreg.cli import _load_plugin_commands, cli

    _load_plugin_commands()
    res = CliRunner().invoke(cli, ["audit", "--selector", "exponential", "--trials", "100", "--epsilon", "2"])
    assert res.exit_code == 0, res.output
    assert "selector exponential" in res.output and "event     index" in res.output
    res = CliRunner().invoke(cli, ["audit", "--selector", "above-threshold", "--trials", "100",
                                   "--fault", "no-clip", "--canary-norm", "1000"])
    assert res.exit_code == 1 and "VIOLATION" in res.output, res.output
