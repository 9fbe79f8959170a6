"""dp-gd and dp-sgd: privacy spent within budget and what they promise."""
import numpy as np
import pytest

import dpreg
from dpreg.accounting import RdpAccountant
from dpreg.errors import BudgetExceededError
from dpreg.problem import Problem
from dpreg.registry import get_registry


def _run(algo, eps=2.0, **params):
    return dpreg.run(algo=algo, loss="logistic", data="synthetic-logistic:n=4000,d=8",
                     epsilon=eps, delta=1e-5, params=params, seed=1)


@pytest.mark.parametrize("algo", ["dp-gd", "dp-sgd"])
def test_gradient_norm_falls_and_budget_is_spent(algo):
    rec = _run(algo)
    pr = rec["diagnostics"]["privacy"]
    assert 0.99 * pr["epsilon_budget"] <= pr["epsilon_spent"] <= pr["epsilon_budget"]
    cp = rec["diagnostics"]["trajectory"]["checkpoints"]["grad_norm"]
    assert cp[-1] < 0.5 * cp[0]
    assert rec["diagnostics"]["metrics"]["train_loss"] < np.log(2) - 0.02  # better than w = 0
    assert rec["diagnostics"]["metrics"]["train_accuracy"] > 0.6


def test_dp_sgd_accounting_matches_dp_accounting():
    import dp_accounting as dpa

    rec = _run("dp-sgd", batch=200, steps=300)
    z, q = rec["diagnostics"]["run_info"]["noise_multiplier"], rec["diagnostics"]["run_info"]["sampling_rate"]
    ref = dpa.rdp.RdpAccountant()
    ref.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), 300))
    assert ref.get_epsilon(1e-5) == pytest.approx(rec["diagnostics"]["privacy"]["epsilon_spent"], rel=1e-6)
    assert rec["diagnostics"]["privacy"]["relation"] == "add-remove"


def test_dp_gd_noise_std_is_calibrated_sensitivity():
    rec = _run("dp-gd", steps=20)
    info = rec["diagnostics"]["run_info"]
    # replace-one: sensitivity of the mean of n clipped terms is 2C/n
    assert info["noise_std"] == pytest.approx(info["noise_multiplier"] * 2 * info["clip"] / 4000)


def test_more_budget_means_less_noise():
    lo = _run("dp-gd", eps=0.5, steps=20)["diagnostics"]["run_info"]["noise_multiplier"]
    hi = _run("dp-gd", eps=4.0, steps=20)["diagnostics"]["run_info"]["noise_multiplier"]
    assert hi < lo


def test_worst_case_record_cannot_exceed_its_clip():
    # one record with a huge feature vector changes the clipped sum by at most 2C (replace-one)
    loss = get_registry().get("loss", "logistic")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 6)) * 0.1
    y = np.where(rng.random(50) < 0.5, -1.0, 1.0)
    X2 = X.copy()
    X2[7] = 1e6
    w = rng.standard_normal(6)
    C = 0.3
    a, _ = Problem(loss, X, y).clipped_grad_sum(w, None, C)
    b, _ = Problem(loss, X2, y).clipped_grad_sum(w, None, C)
    assert np.linalg.norm(a - b) <= 2 * C * (1 + 1e-12)


def test_over_budget_release_refused_before_it_happens():
    from dpreg.accounting import gaussian_event

    acc = RdpAccountant(0.1, 1e-5)
    with pytest.raises(BudgetExceededError):
        acc.charge(gaussian_event(0.5))
    assert acc.n_charges == 0


def test_projection_radius_respected():
    rec = _run("dp-sgd", radius=0.05, steps=50)
    assert np.linalg.norm(rec["release"]["model"]["weights"]) <= 0.05 + 1e-12
