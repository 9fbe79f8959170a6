"""Private output selection after a run (``--select``): the selector's release
is charged before the run, the run calibrates to what is left, the whole spends
at most epsilon, and the chosen point is one of the run's iterates."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

import dpreg
from dpreg.accounting import Prepaid, RdpAccountant, gaussian_event, pure_dp_event
from dpreg.cli import cli
from dpreg.errors import BudgetExceededError, ParameterError

DATA = "synthetic-logistic:n=3000,d=5"


def _run(**kw):
    base = dict(algo="dp-sgd", loss="logistic", data=DATA, epsilon=2.0, delta=1e-5, seed=3,
                params={"steps": 60})
    base.update(kw)
    return dpreg.run(**base)


def test_above_threshold_selection_is_accounted_and_picks_an_iterate():
    rec = _run(select="above-threshold", alpha=0.2, select_share=0.2)
    sel, pr = rec["diagnostics"]["selection"], rec["diagnostics"]["privacy"]
    assert sel["selector"] == "above-threshold" and sel["epsilon"] == pytest.approx(0.4)
    assert 0.99 * 2.0 <= pr["epsilon_spent"] <= 2.0 * (1 + 1e-9)   # run + selection = budget
    assert pr["global_events"] >= 1                                 # the selection's pure release
    assert sel["candidates"] == len(sel["steps"]) >= 2
    assert sel["index"] is not None                                 # alpha = 0.2 is easy here
    # the reported point is that candidate's: its gradient is small
    assert rec["diagnostics"]["metrics"]["train_grad_norm"] <= 0.2 + 0.1


def test_selection_takes_its_share_from_the_run():
    plain = _run()
    sel = _run(select="above-threshold", alpha=0.2, select_share=0.5)
    # half the budget goes to the selection, so the run itself must add more noise
    assert sel["diagnostics"]["run_info"]["noise_multiplier"] > plain["diagnostics"]["run_info"]["noise_multiplier"]


def test_no_candidate_passes_falls_back_to_the_final_iterate():
    # a large selection budget makes the scan's noise small against the deficits
    rec = _run(select="above-threshold", alpha=1e-9, epsilon=8.0, select_share=0.5)
    assert rec["diagnostics"]["selection"]["index"] is None and rec["diagnostics"]["selection"]["fallback_to_last"] is True
    # the output is the run's final iterate: its gradient norm is the last checkpoint's
    last = rec["diagnostics"]["trajectory"]["checkpoints"]["grad_norm"][-1]
    assert rec["diagnostics"]["metrics"]["train_grad_norm"] == pytest.approx(last, rel=1e-12)


def test_exponential_selection_over_iterates():
    rec = _run(select="exponential", select_share=0.5, epsilon=8.0)
    sel = rec["diagnostics"]["selection"]
    assert sel["index"] is not None and 0 <= sel["index"] < sel["candidates"]
    assert sel["index"] > 0  # at eps 4 for the selection the first iterate (w = 0) is unlikely
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 8.0 * (1 + 1e-9)


def test_above_threshold_needs_alpha_before_anything_runs(tmp_path):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--data", DATA, "--select", "above-threshold",
                                 "--out", str(out)])
    assert r.exit_code == 2 and "--alpha" in r.output and not out.exists()
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--data", DATA, "--select", "nope"])
    assert r.exit_code == 2 and "above-threshold" in r.output and "exponential" in r.output
    with pytest.raises(ParameterError, match="share"):
        _run(select="exponential", select_share=1.5)


def test_cli_prints_and_records_the_selection(tmp_path):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "adaptive-spider", "--noise", "tree", "--loss", "logistic",
                                 "--data", "synthetic-logistic:n=20000,d=5", "--alpha", "0.3",
                                 "--select", "above-threshold", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "selection above-threshold" in r.output
    rec = json.loads(out.read_text())
    assert rec["diagnostics"]["selection"]["selector"] == "above-threshold"
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0 * (1 + 1e-9)


def test_prepaid_matches_exactly_one_charge():
    acc = RdpAccountant(1.0, 1e-5)
    ev = pure_dp_event(0.3)
    acc.charge(ev)
    spent = acc.epsilon_spent
    pre = Prepaid(acc, ev)
    pre.charge(ev)                       # the prepaid release: nothing new recorded
    assert acc.epsilon_spent == spent and pre.used and acc.n_charges == 1
    pre.charge(gaussian_event(50.0))     # anything else is charged for real
    assert acc.n_charges == 2
    with pytest.raises(BudgetExceededError):
        for _ in range(50):              # a second identical release is not prepaid
            pre.charge(ev)


def test_exponential_selection_refuses_a_network_before_the_run(tmp_path, monkeypatch):
    """The exponential selector scores candidates with the loss's margin kernel,
    which a network has not: refused when the selector is built, before the run
    spends any time or budget."""
    from dpreg_plugins.algorithms.dp_gd import DPGD

    def must_not_run(self):
        raise AssertionError("the algorithm ran before the selector was refused")

    monkeypatch.setattr(DPGD, "run", must_not_run)
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--loss", "mlp:hidden=2", "--data", DATA,
                                 "--select", "exponential", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "mlp" in r.output and "above-threshold" in r.output and not out.exists()
    assert "Traceback" not in r.output


@pytest.mark.parametrize("seed", [0, 1])
def test_selector_options_reach_the_selector_fosp_returns_the_saddle_sosp_does_not(seed):
    """``--select above-threshold:check=...`` sets the selector's declared
    option: from the strict saddle w = 0 of phase retrieval (lambda_min(0) =
    -3/8 < -sqrt(rho alpha) = -0.245), the first-order test accepts the start
    (candidate 0, the saddle) and the second-order test rejects it."""
    kw = dict(algo="dp-gd", loss="phase-retrieval", data="phase-retrieval:n=20000,d=2", epsilon=4.0,
              seed=seed, intercept=False, alpha=0.005, params={"steps": 100, "step": 1.0, "clip": 1.0}, warn=False)
    fo = dpreg.run(select="above-threshold:check=fosp", **kw)
    so = dpreg.run(select="above-threshold:check=sosp", **kw)
    rho = 12.0  # the phase-retrieval loss's declared rho
    assert fo["diagnostics"]["selection"]["index"] == 0
    assert fo["diagnostics"]["metrics"]["train_lambda_min"] < -np.sqrt(rho * 0.005)
    assert so["diagnostics"]["selection"]["index"] not in (None, 0)
    assert so["diagnostics"]["metrics"]["train_lambda_min"] > 0


@pytest.mark.parametrize("spec, message", [
    ("above-threshold:chek=fosp", "unknown parameter 'chek' for selector above-threshold"),
    ("above-threshold:check=xx", "must be one of sosp, fosp"),
    ("above-threshold:alpha=0.1", "give alpha with --alpha"),
    ("above-threshold:check", "options must look like name:key=value"),
])
def test_bad_selector_options_fail_before_the_run(tmp_path, spec, message):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--data", DATA, "--epsilon", "1", "--alpha", "0.1",
                                   "--select", spec, "--out", str(out)])
    assert res.exit_code != 0 and message in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_sosp_selection_beyond_the_dense_limit_is_refused_not_downgraded(tmp_path):
    """d above the dense eigendecomposition limit: the default check=sosp is
    refused with advice (it used to fall back to the gradient test silently);
    check=fosp, asked for, runs."""
    data = "synthetic-logistic:n=400,d=310"
    out = tmp_path / "r.json"
    base = ["run", "--algo", "dp-sgd", "--data", data, "--epsilon", "1", "--alpha", "0.5", "--out", str(out)]
    res = CliRunner().invoke(cli, base + ["--select", "above-threshold"])
    assert res.exit_code != 0 and "--select above-threshold:check=fosp" in res.output
    assert "Traceback" not in res.output and not out.exists()
    res = CliRunner().invoke(cli, base + ["--select", "above-threshold:check=fosp"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["diagnostics"]["selection"]["check"] == "fosp"
