"""The click front end: list, info, run (happy paths; hostile input has its own file)."""
import json

import numpy as np
from click.testing import CliRunner

import dpreg
from dpreg.cli import cli


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_list_shows_every_kind_with_package_and_version():
    r = invoke("list")
    assert r.exit_code == 0
    for kind in ("loss:", "oracle:", "noise:", "algorithm:", "accountant:", "dataset:"):
        assert kind in r.output
    assert "dp-sgd" in r.output and f"dpreg {dpreg.__version__}" in r.output


def test_list_kind_json():
    r = invoke("list", "loss", "--json")
    rows = json.loads(r.output)
    assert {row["kind"] for row in rows} == {"loss"}
    assert {"name", "summary", "package", "version", "provider"} <= set(rows[0])


def test_list_unknown_kind_lists_kinds():
    r = CliRunner().invoke(cli, ["list", "lossy"])
    assert r.exit_code == 2 and "kinds:" in r.output


def test_info_algorithm_prints_parameters_and_formulas():
    r = invoke("info", "dp-sgd")
    assert r.exit_code == 0
    assert "batch" in r.output and "formula:" in r.output and "Algorithm 3" in r.output


def test_run_writes_record_with_everything(tmp_path):
    out = tmp_path / "run.json"
    r = invoke("run", "--algo", "dp-sgd", "--loss", "sigmoid-l2", "--data", "synthetic-logistic:n=2000,d=6",
               "--epsilon", "1", "--delta", "1e-5", "--seed", "3", "--alpha", "0.05",
               "--param", "steps=40", "--out", str(out))
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text())
    assert rec["release"]["config"]["params_resolved"]["steps"] == 40
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0
    assert rec["diagnostics"]["versions"]["numba"] and rec["diagnostics"]["versions"]["dp-accounting"]
    assert rec["diagnostics"]["usage"]["iterations"] == 40
    for key in ("train_grad_norm", "train_lambda_min", "train_loss", "train_accuracy", "test_grad_norm",
                "test_accuracy", "train_is_alpha_sosp"):
        assert key in rec["diagnostics"]["metrics"]
    assert rec["diagnostics"]["timing"]["run_s"] > 0
    model = rec["release"]["model"]
    assert len(model["weights"]) == 7 and np.all(np.isfinite(model["weights"]))  # 6 features + intercept
    assert model["preprocessing"]["intercept"] and len(model["coef"]) == 6
    assert "privacy   epsilon=" in r.output and "NOT private" in r.output


def test_run_json_to_stdout():
    r = invoke("run", "--algo", "dp-gd", "--loss", "logistic", "--data", "synthetic-logistic:n=300,d=4",
               "--param", "steps=5", "--json")
    assert json.loads(r.output)["release"]["config"]["algo"] == "dp-gd"


def test_noise_on_algorithm_without_running_sum_is_an_error(tmp_path):
    out = tmp_path / "x.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--noise", "gaussian", "--out", str(out)])
    assert r.exit_code == 2 and "takes no --noise" in r.output and not out.exists()


def test_unknown_param_lists_valid_ones():
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--param", "stepz=3"])
    assert r.exit_code == 2 and "valid parameters:" in r.output and "steps" in r.output
