"""Practitioner names beside the paper symbols, preset=theory
for every algorithm (or a refusal saying why the paper gives none), and
refusals that tell a practitioner what to change."""
from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

import dpreg
from dpreg.accounting import RdpAccountant
from dpreg.cli import cli
from dpreg.errors import ParameterError
from dpreg.interfaces import Algorithm
from dpreg.params import PRACTITIONER, ParamSpec, apply_practitioner, bind, practitioner_table
from dpreg.problem import Problem
from dpreg_plugins.algorithms.adaptive_spider import AdaptiveSpider
from dpreg_plugins.algorithms.dp_gd import DPGD
from dpreg_plugins.algorithms.dp_sgd import DPSGD
from dpreg_plugins.algorithms.dp_spider import DPSpider
from dpreg_plugins.algorithms.perturbed_sgd import PerturbedSGD
from dpreg_plugins.algorithms.zo_o2nc import ZoO2NC
from dpreg_plugins.algorithms.trust_region import DPTrustRegion, paper_phi
from dpreg_plugins.losses.linear import Logistic

from conftest import unit_rows

SMALL = "synthetic-logistic:n=300,d=4"


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def refusal(r) -> str:
    """The one stderr line of a refused run (exit 2, no traceback)."""
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in r.output
    return lines[0]


def small_problem(n=300, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = unit_rows(rng, n, d)
    y = np.where(X @ np.linspace(2.0, -2.0, d) > 0, 1.0, -1.0)
    return Problem(Logistic(), X, y)


def make(cls, pb, eps=1.0, delta=1e-5, noise=None, **params):
    acc = RdpAccountant(eps, delta, cls.relation_for(bind(cls.params, params, cls.name)))
    return cls(pb, bind(cls.params, params, cls.name), noise=noise, accountant=acc, seed=0), acc


class _OnePass(Algorithm):
    """A third-party single-pass algorithm without a ``passes`` parameter."""

    name = "one-pass"
    data_access = "single-pass"
    params = (ParamSpec("step", "float", None, "step size", "none"),)

    def run(self):  # pragma: no cover - never run
        raise NotImplementedError


# ------------------------------------------------------------------ the tables
def test_every_algorithm_declares_a_consistent_table(registry):
    for entry in registry.entries("algorithm"):
        cls = entry.obj
        names = {s.name for s in cls.params}
        table = practitioner_table(cls)
        assert set(table) <= set(PRACTITIONER), cls.name
        for key, value in table.items():  # a parameter name, or a sentence saying why not
            assert value in names or " " in value, (cls.name, key, value)
        if cls.data_access == "single-pass":  # epochs are its passes of disjoint batches, or refused
            if "passes" in names:
                assert table["epochs"] == "passes", cls.name
            else:
                assert table["epochs"] not in names and "single-pass" in table["epochs"]
    assert "single-pass" in practitioner_table(_OnePass)["epochs"]  # without passes: refused, saying why


def test_names_map_to_each_algorithms_own_parameters():
    names = dict(epochs=3, lr=0.1, batch_size=32, max_grad_norm=0.5, noise_multiplier=1.2)
    assert apply_practitioner(DPSGD, ["output=average"], names) == {
        "output": "average", "epochs": 3, "step": 0.1, "batch": 32, "clip": 0.5, "noise_multiplier": 1.2}
    gd = apply_practitioner(DPGD, {}, dict(epochs=7, lr=0.2))
    assert gd == {"steps": 7, "step": 0.2}
    # derived table (adaptive-spider declares none): lr -> step, batch_size -> batch, max_grad_norm -> clip
    assert apply_practitioner(AdaptiveSpider, {}, dict(lr=0.3, batch_size=500, max_grad_norm=2.0)) == {
        "step": 0.3, "batch": 500, "clip": 2.0}


def test_refusals_name_the_algorithm_and_what_it_takes():
    with pytest.raises(ParameterError, match=r"'one-pass' has no counterpart for --epochs: it is "
                                             r"single-pass.*it takes --lr \(step\)"):
        apply_practitioner(_OnePass, {}, dict(epochs=2), style="cli")
    for cls in (PerturbedSGD, ZoO2NC):  # single-pass algorithms with passes take --epochs as them
        assert apply_practitioner(cls, {}, dict(epochs=2.0), style="cli") == {"passes": 2.0}
    # adaptive-spider makes passes of disjoint batches: --epochs is its 'passes', a whole number
    assert apply_practitioner(AdaptiveSpider, {}, dict(epochs=2.0), style="cli") == {"passes": 2.0}
    with pytest.raises(ParameterError, match=r"--epochs \(adaptive-spider's 'passes'\): parameter 'passes' expects an integer"):
        apply_practitioner(AdaptiveSpider, {}, dict(epochs=2.5), style="cli")
    with pytest.raises(ParameterError, match="'dp-gd' has no counterpart for batch_size=: it is full-batch"):
        apply_practitioner(DPGD, {}, dict(batch_size=10))
    with pytest.raises(ParameterError, match=r"give either --lr or --param step=\.\.\., not both"):
        apply_practitioner(DPSGD, ["step=0.2"], dict(lr=0.1), style="cli")
    with pytest.raises(ParameterError, match="give either --epochs or --param steps"):
        apply_practitioner(DPSGD, ["steps=20"], dict(epochs=1), style="cli")
    with pytest.raises(ParameterError, match="'lr' is a practitioner name, not a parameter of dp-sgd: use --lr"):
        apply_practitioner(DPSGD, ["lr=0.1"], {}, style="cli")
    with pytest.raises(ParameterError, match=r"--batch-size \(dp-sgd's 'batch'\): parameter 'batch' expects an integer"):
        apply_practitioner(DPSGD, {}, dict(batch_size=2.5), style="cli")


# --------------------------------------------------------------- front ends
def test_cli_names_reach_the_run_and_epochs_set_the_steps():
    r = invoke("run", "--algo", "dp-sgd", "--data", SMALL, "--epochs", "2", "--lr", "0.5", "--batch-size", "50",
               "--max-grad-norm", "0.8", "--seed", "0", "--out", "none", "--json")
    assert r.exit_code == 0, r.output
    import json

    rec = json.loads(r.stdout)
    assert rec["release"]["config"]["params_given"] == {"epochs": 2.0, "step": 0.5, "batch": 50, "clip": 0.8}
    info = rec["diagnostics"]["run_info"]
    assert info["steps"] == math.ceil(2 * 300 / 50) and info["step"] == 0.5 and info["clip"] == 0.8


def test_cli_refusals_are_one_line_with_advice():
    line = refusal(invoke("run", "--algo", "zo-o2nc", "--data", SMALL, "--max-grad-norm", "1", "--out", "none"))
    assert "no counterpart for --max-grad-norm" in line and "--epochs (passes)" in line and "--lr" in line
    line = refusal(invoke("run", "--algo", "dp-sgd", "--data", SMALL, "--lr", "0.1", "--param", "step=0.1",
                          "--out", "none"))
    assert "not both" in line
    line = refusal(invoke("run", "--algo", "dp-gd", "--data", SMALL, "--param", "preset=theory", "--out", "none"))
    assert "'dp-gd' offers no preset=theory" in line


def test_fixed_noise_multiplier_reports_the_epsilon_spent_or_is_refused():
    rec = dpreg.run(algo="dp-sgd", data=SMALL, epsilon=1.0, seed=0, epochs=1, batch_size=50, noise_multiplier=3.0)
    pr = rec["release"]["privacy"]
    assert pr["mechanisms"][0]["noise_multiplier"] == 3.0
    assert 0 < pr["epsilon"] < pr["epsilon_budget"] == 1.0   # spent, not the budget
    line = refusal(invoke("run", "--algo", "dp-sgd", "--data", SMALL, "--noise-multiplier", "0.3",
                          "--out", "none"))
    assert "too small for this budget" in line and "nothing was released" in line
    assert "raise --noise-multiplier" in line and "--epochs" in line and "raise --epsilon" in line


def test_dp_spider_takes_a_fixed_noise_multiplier_and_epochs():
    rec = dpreg.run(algo="dp-spider", noise="gaussian", data=SMALL, epsilon=1.0, seed=0,
                    noise_multiplier=8.0, epochs=2, params={"phase": 5})
    info, pr = rec["diagnostics"]["run_info"], rec["release"]["privacy"]
    assert info["noise_multiplier"] == info["o1_noise_multiplier"] == 8.0
    assert info["steps"] == math.ceil(2 * 300 * 5 / (300 + 4 * 30))   # b1 = n, b2 = n/10
    assert 0 < pr["epsilon"] < 1.0


def test_sklearn_estimator_accepts_the_names():
    from dpreg.sklearn import DPClassifier

    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 3))
    y = (X[:, 0] > 0).astype(int)
    clf = DPClassifier(algorithm="dp-sgd", random_state=0, lr=0.4, batch_size=40, epochs=2).fit(X, y)
    assert clf.record_["release"]["config"]["params_given"] == {"step": 0.4, "batch": 40, "epochs": 2}
    assert clf.get_params()["lr"] == 0.4
    with pytest.raises(ParameterError, match="no counterpart for batch_size="):
        DPClassifier(algorithm="dp-gd", batch_size=10).fit(X, y)


def test_info_shows_practitioner_names_and_theory_availability():
    out = invoke("info", "dp-sgd").output
    assert "--lr               -> step" in out and "step (float, default derived; --lr)" in out
    out = invoke("info", "adaptive-spider").output
    assert "--epochs           -> passes" in out and "passes (int, default derived; --epochs)" in out
    out = invoke("info", "zo-o2nc").output
    assert "--epochs           -> passes" in out and "--max-grad-norm    not taken" in out
    out = invoke("info", "dp-spider").output
    assert "preset=theory: not offered: the warm-start paper states" in out


# ------------------------------------------------------------- preset=theory
def test_dp_sgd_theory_is_proposition_d1():
    pb = small_problem()
    eps, delta = 1.0, 1e-5
    algo, acc = make(DPSGD, pb, eps, delta, preset="theory")
    r = algo.resolve()
    n, d = pb.n, pb.d
    G = pb.constants()[0]
    T = int(eps ** 2 * n ** 2 / (d * math.log(1 / delta)))
    b = math.ceil(math.sqrt(d * eps))
    sigma = math.sqrt(1000 * G ** 2 * T * math.log(1 / delta) / (eps ** 2 * n ** 2))
    D = 1.0  # logistic has no feasible radius: the documented public D
    assert (r["steps"], r["batch"], r["output"]) == (T, b, "random")
    assert r["noise_multiplier"] == pytest.approx(sigma * b / (1.0 * G))  # add-remove: factor 1
    assert r["step"] == pytest.approx(D / math.sqrt(T * (G ** 2 + d * sigma ** 2)))
    practical = make(DPSGD, pb, eps, delta)[0].resolve()
    assert practical["steps"] != T and practical["noise_multiplier"] is None
    out = algo.run()                       # runs, and spends at most the budget
    assert out.iterations == T and np.all(np.isfinite(out.w))
    assert 0 < acc.epsilon_spent <= eps


@pytest.mark.parametrize("cls", [DPGD, DPSpider])
def test_algorithms_whose_paper_gives_no_formulas_refuse_theory(cls):
    with pytest.raises(ParameterError, match=f"algorithm '{cls.name}' offers no preset=theory: .*states"):
        apply_practitioner(cls, ["preset=theory"], {})


def test_trust_region_theory_is_the_papers_noise_and_stopping_rule():
    pb = small_problem(n=2000, d=3)
    eps, delta = 1.0, 1e-5
    algo, acc = make(DPTrustRegion, pb, eps, delta, preset="theory", steps=5)
    out = algo.run()
    info = out.info
    assert (info["noise"], info["stop"], info["hess_sensitivity"]) == ("paper", "multiplier", "paper")
    G, M, _ = pb.constants()
    phi = paper_phi(eps, delta)
    assert info["noise_std_grad"] == pytest.approx(math.sqrt(4 * G ** 2 * 5 / (pb.n ** 2 * phi)))
    assert info["noise_std_hess"] == pytest.approx(math.sqrt(4 * pb.d * M ** 2 * 5 / (pb.n ** 2 * phi)))
    assert acc.epsilon_spent <= eps


def test_warm_start_theory_is_algorithm_2():
    rec = dpreg.run(algo="warm-start", data=SMALL, epsilon=1.0, seed=0, noise="gaussian",
                    params={"preset": "theory", "then_params": "steps=10"})
    info = rec["diagnostics"]["run_info"]
    delta = rec["release"]["privacy"]["delta"]
    assert info["split"] == "basic" and info["stage_budget"]["warm"] == pytest.approx([0.5, delta / 2])
    assert info["warm_info"]["preset"] == "theory" and info["warm_info"]["output"] == "random"
    assert info["theory_missing"] == ["dp-spider"]
    assert rec["release"]["privacy"]["epsilon"] <= 1.0


def test_a_name_and_its_parameter_give_the_same_run():
    a = dpreg.run(algo="dp-gd", data=SMALL, seed=3, epochs=5, lr=0.7, max_grad_norm=0.9, diagnostics=False)
    b = dpreg.run(algo="dp-gd", data=SMALL, seed=3, params={"steps": 5, "step": 0.7, "clip": 0.9},
                  diagnostics=False)
    np.testing.assert_array_equal(a["release"]["model"]["weights"], b["release"]["model"]["weights"])
    assert a["release"]["privacy"]["epsilon"] == b["release"]["privacy"]["epsilon"]
