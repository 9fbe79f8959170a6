"""Budget safety: a run whose plan would spend more than (eps, delta) refuses
before its first release and says by how much; the accountant's state is in
the JSON record and agrees with an independent dp-accounting computation."""
from __future__ import annotations

import json
import re

import dp_accounting as dpa
import numpy as np
import pytest
from click.testing import CliRunner

from dpreg.errors import BudgetExceededError
from dpreg.params import bind
from dpreg.problem import Problem
from dpreg.registry import get_registry

OVER = re.compile(r"^error: plan spends eps=([0-9.e+-]+) > budget ([0-9.e+-]+) \(over by ([0-9.e+-]+)\)")


def _rdp_eps(event, delta, relation):
    rel = (dpa.NeighboringRelation.REPLACE_ONE if relation == "replace-one"
           else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc = dpa.rdp.RdpAccountant(neighboring_relation=rel)
    acc.compose(event)
    return acc.get_epsilon(delta)


class SpyProblem(Problem):
    """Counts every touch of the data (clipped sums)."""

    touches = 0

    def clipped_grad_sum(self, *a, **kw):
        SpyProblem.touches += 1
        return super().clipped_grad_sum(*a, **kw)

    def clipped_diff_sum(self, *a, **kw):
        SpyProblem.touches += 1
        return super().clipped_diff_sum(*a, **kw)


def _problem(n=50, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return SpyProblem(get_registry().get("loss", "logistic"), X, y)


@pytest.mark.parametrize("algo,params", [
    ("dp-gd", {"steps": 100, "noise_multiplier": 0.5}),
    ("dp-sgd", {"steps": 200, "batch": 25, "noise_multiplier": 0.3}),
])
def test_over_budget_plan_refuses_before_first_release(algo, params):
    reg = get_registry()
    cls = reg.get("algorithm", algo)
    acc = reg.get("accountant", "rdp")(1.0, 1e-5, cls.relation)
    pb = _problem()
    SpyProblem.touches = 0
    a = cls(pb, bind(cls.params, params, algo), noise=None, accountant=acc, seed=0)
    with pytest.raises(BudgetExceededError, match=r"plan spends eps=.* > budget 1 \(over by"):
        a.run()
    assert acc.n_charges == 0 and acc.epsilon_spent == 0.0
    assert SpyProblem.touches == 0  # the data were never read


def test_fixed_noise_within_budget_spends_its_plan():
    reg = get_registry()
    cls = reg.get("algorithm", "dp-gd")
    acc = reg.get("accountant", "rdp")(1.0, 1e-5, "replace-one")
    out = cls(_problem(), bind(cls.params, {"steps": 4, "noise_multiplier": 10.0}, "dp-gd"),
              noise=None, accountant=acc, seed=0).run()
    assert out.info["noise_multiplier"] == 10.0
    want = _rdp_eps(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(10.0), 4), 1e-5, "replace-one")
    assert acc.epsilon_spent == pytest.approx(want, rel=1e-9) and want < 1.0
    assert acc.n_charges == 4


def test_charge_refused_midway_records_nothing():
    """A release beyond the budget raises before the release and leaves the
    accountant exactly as it was."""
    from dpreg.accounting import gaussian_event

    acc = get_registry().get("accountant", "rdp")(1.0, 1e-5, "replace-one")
    spent = [acc.charge(gaussian_event(20.0)) for _ in range(3)]
    before = acc.state()
    with pytest.raises(BudgetExceededError, match="refused"):
        for _ in range(10_000):
            acc.charge(gaussian_event(5.0))
    k = acc.n_charges
    with pytest.raises(BudgetExceededError):
        acc.charge(gaussian_event(5.0))
    assert acc.n_charges == k and acc.epsilon_spent <= 1.0
    assert spent == sorted(spent) and before["charges"] == 3


@pytest.fixture(scope="module")
def cli():
    from dpreg.cli import _load_plugin_commands, cli

    _load_plugin_commands()
    return cli


@pytest.mark.parametrize("algo,z,steps", [("dp-gd", 0.5, 100), ("dp-sgd", 0.4, 300)])
def test_cli_over_budget_says_by_how_much(cli, tmp_path, algo, z, steps):
    out = tmp_path / "run.json"
    res = CliRunner().invoke(cli, ["run", "--algo", algo, "--data", "synthetic-logistic:n=400,d=5",
                                   "--epsilon", "1", "--delta", "1e-5", "--param", f"noise_multiplier={z}",
                                   "--param", f"steps={steps}", "--out", str(out)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output
    m = OVER.match(lines[0])
    assert m, lines[0]
    spent, budget, over = (float(g) for g in m.groups())
    assert budget == 1.0 and over == pytest.approx(spent - budget, rel=1e-3)
    if algo == "dp-gd":
        want = _rdp_eps(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), steps), 1e-5, "replace-one")
        assert spent == pytest.approx(want, rel=1e-3)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_json_record_holds_accountant_state(cli, tmp_path):
    out = tmp_path / "rec.json"
    res = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--data", "synthetic-logistic:n=300,d=4",
                                   "--epsilon", "0.8", "--delta", "1e-5", "--param", "steps=6",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    pr = rec["diagnostics"]["privacy"]
    assert pr["accountant"] == "rdp" and pr["relation"] == "replace-one"
    assert pr["epsilon_budget"] == 0.8 and pr["delta"] == 1e-5 and pr["charges"] == 6
    z = rec["diagnostics"]["run_info"]["noise_multiplier"]
    want = _rdp_eps(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), 6), 1e-5, "replace-one")
    assert pr["epsilon_spent"] == pytest.approx(want, rel=1e-6)
    assert pr["epsilon_spent"] <= 0.8 * (1 + 1e-9)


def test_json_record_state_spider_family(cli, tmp_path):
    """Single-pass runs: every disjoint group's spend stays within budget and
    the record says how many groups were charged."""
    out = tmp_path / "rec.json"
    res = CliRunner().invoke(cli, ["run", "--algo", "adaptive-spider", "--noise", "gaussian",
                                   "--data", "synthetic-logistic:n=2000,d=4", "--epsilon", "1",
                                   "--delta", "1e-5", "--out", str(out)])
    assert res.exit_code == 0, res.output
    pr = json.loads(out.read_text())["diagnostics"]["privacy"]
    assert pr["relation"] == "replace-one" and pr["groups"] >= 1 and pr["charges"] >= pr["groups"]
    assert 0 < pr["epsilon_spent"] <= 1.0 * (1 + 1e-9)


# ------------------------------------------- passes: two single-pass stages
@pytest.mark.parametrize("naming", ["same", "per-stage"])
def test_two_single_pass_stages_report_the_worst_records_composition(monkeypatch, naming):
    """Hyper-parameter selection of adaptive-spider: two runs over the same
    records (each of its two passes a fresh partition into disjoint batches)
    plus the exponential selection.  Every record's own
    releases are logged (which batches of which run hold it, what each batch
    was charged); the reported epsilon must equal the worst record's
    composition computed directly with dp-accounting, whether the stages
    name their batches alike or per stage (per-stage names must not make the
    stages compose in parallel)."""
    from dpreg import access
    from dpreg.accounting import RdpAccountant
    from dpreg.interfaces import Participation
    from dpreg_plugins.selectors.private_selection import select_hyperparameters

    batches, charges, stage = [], [], []
    take = access.SinglePass.take

    def spy_take(self, b):
        idx, part = take(self, b)
        if naming == "per-stage":
            stage.append(self) if self not in stage else None
            part = Participation.disjoint((f"stage {stage.index(self)}", part.group[1]), pass_id=part.pass_id)
        batches.append((idx.copy(), (part.pass_id, part.group)))
        return idx, part

    monkeypatch.setattr(access.SinglePass, "take", spy_take)
    acc = RdpAccountant(2.0, 1e-5, "replace-one")
    charge = acc.charge

    def spy_charge(event, group=None, *, label="", pass_id=None):
        out = charge(event, group, label=label, pass_id=pass_id)  # logged only once accepted
        charges.append((event, None if group is None else (pass_id, group)))
        return out

    monkeypatch.setattr(acc, "charge", spy_charge)
    pb = _problem(n=400, d=3)
    grid = [{"alpha": 0.3, "steps": 30, "passes": 2}, {"alpha": 0.5, "steps": 30, "passes": 2}]
    select_hyperparameters(pb, "adaptive-spider", grid, accountant=acc, epsilon_each=0.9, delta_each=4e-6,
                           epsilon_select=0.2, seed=3, noise=get_registry().get("noise", "tree"))
    keys_of = [[] for _ in range(pb.n)]
    for idx, key in batches:
        for i in idx:
            keys_of[i].append(key)
    glob = [e for e, k in charges if k is None]
    by_key: dict = {}
    for e, k in charges:
        if k is not None:
            by_key.setdefault(k, []).append(e)
    # each run makes its two passes, each a pass of its own (a fresh permutation)
    n_passes = len({k[0] for k in by_key})
    assert n_passes == 2 * 2
    histories = {tuple(sorted(keys)) for keys in keys_of}
    assert max(len(h) for h in histories) == n_passes  # some record is in a batch of every pass
    worst = max(_rdp_eps(dpa.ComposedDpEvent(glob + [e for k in h for e in by_key.get(k, [])]), 1e-5,
                         "replace-one") for h in histories)
    assert acc.epsilon_spent == pytest.approx(worst, rel=1e-9)
    assert acc.epsilon_spent <= 2.0 * (1 + 1e-9)
