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


def _problem(n, d, seed=0, loss="logistic"):
    loss = get_registry().get("loss", loss)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return Problem(loss, X, y)


class _Counted:
    """A problem whose Hessian-vector products are counted."""

    def __init__(self, pb):
        self.pb, self.hvps, self.d = pb, 0, pb.d

    def hvp(self, w, v):
        self.hvps += 1
        return self.pb.hvp(w, v)

    def hessian(self, w):
        return self.pb.hessian(w)


def test_lanczos_work_is_capped_in_hessian_vector_products(monkeypatch):
    """The cap counts products, not eigensolver restarts: a cap of k makes at
    most k products, and an unconverged estimate says it is truncated (an upper
    bound on lambda_min, not a certificate)."""
    monkeypatch.setattr(metrics, "DENSE_MAX_D", 5)
    pb = _Counted(_problem(500, 150, loss="sigmoid"))
    w = 0.3 * np.random.default_rng(1).standard_normal(150)
    rep = metrics.lambda_min_report(pb, w, max_hvps=7)
    assert pb.hvps == rep["hvps"] == 7
    assert rep["status"] == "truncated" and "cap of 7" in rep["reason"]
    exact = np.linalg.eigvalsh(pb.hessian(w))[0]
    assert rep["value"] >= exact - 1e-12  # a Ritz value is never below lambda_min
    pb.hvps = 0
    full = metrics.lambda_min_report(pb, w)
    assert full["status"] == "certified" and pb.hvps == full["hvps"] <= metrics.LANCZOS_MAX_HVPS
    assert full["value"] == pytest.approx(exact, abs=1e-4 * np.abs(np.linalg.eigvalsh(pb.hessian(w))).max())


def test_lambda_min_time_budget(monkeypatch):
    """A time budget stops Lanczos (truncated, saying why); no budget at all
    skips the certificate; the alpha-SOSP flag is then None, never a guess."""
    monkeypatch.setattr(metrics, "DENSE_MAX_D", 5)
    pb = _problem(3000, 200, loss="sigmoid")
    w = 0.3 * np.random.default_rng(2).standard_normal(200)
    import time

    pb.hvp(w, w)  # the kernel compiled (or loaded) before the clock starts
    t = time.perf_counter()
    rep = metrics.lambda_min_report(pb, w, budget_s=0.002)
    assert time.perf_counter() - t < 0.5
    assert rep["status"] == "truncated" and "time budget" in rep["reason"]
    skipped = metrics.evaluate(pb, w, alpha=0.1, lambda_budget_s=0.0)
    assert skipped["train_lambda_min_status"]["status"] == "skipped"
    assert skipped["train_lambda_min"] is None and skipped["train_is_alpha_sosp"] is None


def test_small_dense_certificates_do_not_depend_on_the_budget():
    """A small problem's dense certificate (a few milliseconds of work) is
    computed whatever the time budget: its record does not depend on the load."""
    small = metrics.lambda_min_report(_problem(300, 8), np.zeros(8), budget_s=1e-12)
    assert small["status"] == "certified" and small["method"] == "dense"


def test_diagnostics_cost_no_more_than_the_run_by_default():
    """At d = 400 (the Lanczos path) a short dp-sgd run: the costly diagnostics
    of the run (the lambda_min certificates of train and test, the trajectory's
    gradient norms) share the run's own time (or the small floor) in equal
    parts, the record says what was cut, and an explicit budget lifts it."""
    import dpreg
    from dpreg.pipeline import DIAGNOSTICS_MIN_BUDGET_S

    rng = np.random.default_rng(4)
    X = rng.standard_normal((3000, 400)) / 20.0
    y = np.where(X @ rng.standard_normal(400) > 0, 1.0, -1.0)
    rec = dpreg.run(algo="dp-sgd", data=(X, y), test_fraction=0.2, epsilon=1.0, seed=0, warn=lambda m: None,
                    params={"steps": 40})
    d = rec["diagnostics"]
    budget = d["timing"]["diagnostics_budget_s"]
    assert budget == pytest.approx(max(d["timing"]["run_s"], DIAGNOSTICS_MIN_BUDGET_S))
    share = budget / 3  # the certificates of train and test, the trajectory
    slack = 0.05 + 0.5 * share  # one last product may end after the deadline
    for part in ("train", "test"):
        st = d["metrics"][f"{part}_lambda_min_status"]
        assert d["timing"]["lambda_min_s"][part] <= share + slack
        assert st["status"] in ("certified", "truncated", "skipped") and st["reason"]
    assert sum(d["timing"]["lambda_min_s"].values()) <= budget + 2 * slack
    rec2 = dpreg.run(algo="dp-sgd", data=(X, y), test_fraction=0.2, epsilon=1.0, seed=0, warn=lambda m: None,
                     params={"steps": 40}, diagnostics_budget=float("inf"))
    assert rec2["diagnostics"]["metrics"]["train_lambda_min_status"]["status"] == "certified"
    assert rec2["diagnostics"]["timing"]["diagnostics_budget_s"] is None
