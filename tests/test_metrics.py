"""Evaluation metrics: Lanczos lambda_min agrees with the dense one."""
import numpy as np
import pytest

from dpreg import metrics
from dpreg.problem import Problem
from dpreg.registry import get_registry


@pytest.mark.parametrize("loss_name", ["sigmoid", "phase-retrieval", "logistic-nonconvex-reg"])
def test_lanczos_matches_dense(monkeypatch, loss_name):
    loss = get_registry().get("loss", loss_name)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 12))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(rng.random(400) < 0.5, -1.0, 1.0) if loss.labels == "binary" else rng.random(400)
    pb = Problem(loss, X, y)
    w = 0.5 * rng.standard_normal(12)
    dense = metrics.lambda_min(pb, w)
    assert dense == pytest.approx(np.linalg.eigvalsh(pb.hessian(w))[0])
    monkeypatch.setattr(metrics, "DENSE_MAX_D", 5)
    assert metrics.lambda_min(pb, w) == pytest.approx(dense, abs=1e-6)


def test_sosp_flag_follows_definition():
    loss = get_registry().get("loss", "phase-retrieval")
    rng = np.random.default_rng(1)
    X = rng.standard_normal((500, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = X[:, 0] ** 2
    pb = Problem(loss, X, y)
    at_saddle = metrics.evaluate(pb, np.zeros(5), alpha=1e-4)
    assert at_saddle["train_grad_norm"] == pytest.approx(0.0, abs=1e-12)
    assert at_saddle["train_lambda_min"] < -np.sqrt(12 * 1e-4)  # strict saddle: not an alpha-SOSP
    assert at_saddle["train_is_alpha_sosp"] is False
    at_min = metrics.evaluate(pb, np.eye(5)[0], alpha=1e-4)
    assert at_min["train_is_alpha_sosp"] is True
