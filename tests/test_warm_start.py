"""The warm-start meta-algorithm and the budget views it runs its stages in:
one accountant, stage A within (eps1, delta1), B from A's output, the whole run
spending exactly (tight split) or at most (basic split) its budget, refusals."""
from __future__ import annotations

import numpy as np
import pytest

from dpreg.accounting import RdpAccountant, gaussian_event, self_composed
from dpreg.errors import BudgetExceededError, ParameterError
from dpreg.interfaces import Algorithm, RunOutput
from dpreg.params import bind
from dpreg.pipeline import RunConfig, run_pipeline
from dpreg.problem import Problem
from dpreg_plugins.algorithms.dp_gd import DPGD
from dpreg_plugins.losses.linear import LowySynthetic
from dpreg_plugins.algorithms.warm_start import WarmStart

from conftest import unit_rows


@pytest.fixture(autouse=True, scope="module")
def _one_numba_thread():
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def _problem(rng, n=300, d=5):
    return Problem(LowySynthetic(), unit_rows(rng, n, d), np.zeros(n))


def _warm(pb, acc, seed=0, **given):
    return WarmStart(pb, bind(WarmStart.params, given, "warm-start"), noise=None, accountant=acc, seed=seed)


# ------------------------------------------------------------------ views
def test_budget_view_charges_parent_and_enforces_both_budgets():
    parent = RdpAccountant(2.0, 1e-5)
    view = parent.view(0.5, 5e-6)
    assert view.relation == parent.relation and view.sensitivity_factor == parent.sensitivity_factor
    z = view.calibrate(lambda z: self_composed(gaussian_event(z), 4))
    solo = RdpAccountant(0.5, 5e-6)  # the stage alone spends its sub-budget at its delta
    solo.charge(self_composed(gaussian_event(z), 4))
    assert solo.epsilon_spent == pytest.approx(0.5, rel=1e-4)
    for _ in range(4):
        view.charge(gaussian_event(z))
    assert view.epsilon_spent == pytest.approx(solo.epsilon_spent, rel=1e-9)
    assert parent.n_charges == 4
    ref = RdpAccountant(2.0, 1e-5)
    ref.charge(self_composed(gaussian_event(z), 4))
    assert parent.epsilon_spent == pytest.approx(ref.epsilon_spent, rel=1e-9)
    # a fifth release would exceed the stage's budget: refused, nothing recorded anywhere
    with pytest.raises(BudgetExceededError, match="this stage"):
        view.charge(gaussian_event(z))
    assert parent.n_charges == 4 and view.n_charges == 4
    # a view with room whose parent has none: refused by the parent
    parent.charge(gaussian_event(3.0))
    spent = parent.epsilon_spent
    v2 = parent.view(1.9, 5e-6)
    big = 3.0
    assert v2.epsilon_if(gaussian_event(big)) < 1.9 < parent.epsilon_if(gaussian_event(big))
    with pytest.raises(BudgetExceededError):
        v2.charge(gaussian_event(big))
    assert parent.epsilon_spent == spent and v2.n_charges == 0
    # and calibration in that view respects the parent
    z2 = v2.calibrate(lambda z: gaussian_event(z))
    assert parent.epsilon_if(gaussian_event(z2)) <= 2.0 and v2.epsilon_if(gaussian_event(z2)) <= 1.9


# -------------------------------------------------------------- warm start
def test_warm_start_tight_split_spends_exactly_its_budget_in_one_accountant(rng):
    pb = _problem(rng)
    acc = RdpAccountant(1.0, 1e-5, "replace-one")
    ws = _warm(pb, acc, warm="dp-gd", then="dp-gd", warm_fraction=0.25,
               warm_params="steps=5,step=0.2", then_params="steps=8,step=0.2")
    out = ws.run()
    # stage A alone: (eps/4, delta/2)
    assert out.info["warm_info"]["epsilon"] == pytest.approx(0.25, rel=1e-4)
    zA, zB = out.info["warm_info"]["noise_multiplier"], out.info["then_info"]["noise_multiplier"]
    solo = RdpAccountant(1.0, 0.5e-5, "replace-one")
    solo.charge(self_composed(gaussian_event(zA), 5))
    assert solo.epsilon_spent <= 0.25 * (1 + 1e-6)
    # the run: exactly eps at delta, both stages composed in the one accountant
    assert acc.epsilon_spent == pytest.approx(1.0, rel=1e-4) and acc.epsilon_spent <= 1.0 * (1 + 1e-9)
    ref = RdpAccountant(10.0, 1e-5, "replace-one")
    ref.charge(self_composed(gaussian_event(zA), 5))
    ref.charge(self_composed(gaussian_event(zB), 8))
    assert acc.epsilon_spent == pytest.approx(ref.epsilon_spent, rel=1e-9)
    assert acc.n_charges == 13 and out.iterations == 13
    # B started from A's output: B's step-0 checkpoint is A's output
    w0 = np.array(out.info["warm_output"])
    tr = out.info["trajectory"]
    at0 = [w for s, w in zip(tr.steps, tr.iterates) if s == 5]
    assert len(at0) == 2 and all(np.array_equal(w, w0) for w in at0)
    assert not np.array_equal(w0, np.zeros(pb.d))


def test_warm_start_basic_split_stays_within_each_share(rng):
    pb = _problem(rng)
    acc = RdpAccountant(1.0, 1e-5, "replace-one")
    out = _warm(pb, acc, warm="dp-gd", then="dp-gd", split="basic",
                warm_params="steps=4", then_params="steps=4").run()
    assert out.info["warm_info"]["epsilon"] <= 0.5 + 1e-9
    assert out.info["then_info"]["epsilon"] <= 0.5 + 1e-9
    assert out.info["then_info"]["epsilon"] == pytest.approx(0.5, rel=1e-4)
    assert acc.epsilon_spent < 0.95  # tight composition of two (0.5, delta/2) stages is below eps


def test_exponential_warm_start_and_init_is_passed_on(rng):
    pb = _problem(rng, n=200, d=3)
    acc = RdpAccountant(1.0, 1e-5, "replace-one")
    out = _warm(pb, acc, warm="exponential", then="dp-gd", net_size=64, then_params="steps=3").run()
    wi = out.info["warm_info"]
    assert 0.99 * 0.5 < wi["epsilon"] <= 0.5 + 1e-9 and 0 <= wi["index"] < 64
    assert wi["sensitivity"] == pytest.approx(4.0)  # phi(m) = m on |m| <= D = 2
    assert acc.epsilon_spent == pytest.approx(1.0, rel=1e-4)
    assert np.linalg.norm(out.info["warm_output"]) <= 2.0 + 1e-12


def test_warm_start_refuses_over_budget_and_bad_stages(rng, monkeypatch):
    pb = _problem(rng, n=100, d=3)
    # a stage whose releases exceed its share is stopped before the release, nothing recorded
    class Greedy(Algorithm):
        name = "greedy"
        honours_init = True
        params = DPGD.params

        def run(self):
            self.accountant.charge(gaussian_event(1.5), label="greedy")  # eps ~ 3 alone
            raise AssertionError("released over budget")

    import dpreg_plugins.algorithms.warm_start as wsmod

    real = wsmod._stage_cls
    monkeypatch.setattr(wsmod, "_stage_cls", lambda name: {"greedy": Greedy}.get(name) or real(name))
    acc = RdpAccountant(2.0, 1e-5, "replace-one")
    with pytest.raises(BudgetExceededError, match="this stage"):  # 3 > eps1 = 1
        _warm(pb, acc, warm="greedy", then="dp-gd").run()
    assert acc.n_charges == 0
    acc = RdpAccountant(2.0, 1e-5, "replace-one")
    with pytest.raises(BudgetExceededError):  # A spends its 1.0 share, B would exceed 2
        _warm(pb, acc, warm="dp-gd", then="greedy", warm_params="steps=3").run()
    assert acc.n_charges == 3 and acc.epsilon_spent <= 1.0 + 1e-9
    with pytest.raises(ParameterError, match="leave budget"):
        _warm(pb, RdpAccountant(1.0, 1e-5), warm="dp-gd", then="dp-gd", warm_fraction=0.95,
              select="above-threshold", select_fraction=0.1, alpha=0.1).run()
    with pytest.raises(ParameterError, match="alpha"):
        _warm(pb, RdpAccountant(1.0, 1e-5), then="dp-gd", select="above-threshold").run()

    class NoInit(Algorithm):
        name = "no-init"
        params = DPGD.params

        def run(self):
            return RunOutput(np.zeros(self.problem.d), 1, 0, 0)

    monkeypatch.setattr(wsmod, "_stage_cls", lambda name: NoInit if name == "no-init" else real(name))
    acc = RdpAccountant(1.0, 1e-5)
    with pytest.raises(ParameterError, match="honour"):
        _warm(pb, acc, warm="dp-gd", then="no-init", warm_params="steps=2").run()


def test_dp_gd_honours_init(rng):
    pb = _problem(rng, n=100, d=3)
    algo = DPGD(pb, bind(DPGD.params, {"steps": 1, "step": 0.1}, "dp-gd"), noise=None,
                accountant=RdpAccountant(1e4, 1e-5), seed=0)
    algo.init = np.array([0.5, -0.2, 0.1])
    out = algo.run()
    expected = algo.init - 0.1 * pb.gradient(algo.init)
    assert np.linalg.norm(out.w - expected) < 0.01  # noise at eps = 1e4 is negligible
    with pytest.raises(ParameterError):
        algo.init = np.zeros(4)
        algo.run()


def test_warm_start_from_the_cli_pipeline_with_selection():
    rec = run_pipeline(RunConfig(
        algo="warm-start", loss="lowy-synthetic", data="lowy-synthetic:n=150,d=4", epsilon=2.0, seed=3,
        params=["warm=dp-sgd", "then=dp-sgd", "warm_params=steps=10,batch=150",
                "then_params=steps=10,batch=30,step=0.2", "select=above-threshold", "alpha=0.3"]))
    assert rec["diagnostics"]["privacy"]["relation"] == "add-remove"
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] == pytest.approx(2.0, rel=1e-4)
    sel = rec["diagnostics"]["run_info"]["selection"]
    assert sel["candidates"] >= 2 and 0.99 * 0.2 < sel["epsilon"] <= 0.2
    assert rec["diagnostics"]["usage"]["iterations"] == 20
