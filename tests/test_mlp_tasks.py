"""Networks beyond binary labels, end to end: every algorithm runs a softmax
or regression network (or refuses in one line), ``dpreg run`` binds the head
to the public task and learns ten digit classes with two hidden layers,
``predict`` returns class labels, probabilities and values, and the released
model round-trips."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import dpreg
from dpreg.cli import cli
from dpreg.errors import ParameterError
from dpreg.results import to_json

ALGOS = ("dp-gd", "dp-sgd", "dp-spider", "adaptive-spider", "perturbed-sgd", "warm-start", "dp-trust-region",
         "dp-stochastic-trust-region", "zo-o2nc", "distributed-spider")
#: algorithms refused for every network, and a phrase of the reason
REFUSED = {"dp-trust-region": "per-record Hessians", "dp-stochastic-trust-region": "per-record Hessians",
           "zo-o2nc": "zeroth-order"}


def _blobs(n=600, d=4, K=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((K, d)) * 2.0
    y = rng.integers(0, K, n)
    return centres[y] + rng.standard_normal((n, d)) * 0.7, y.astype(float)


def _curve(n=2000, d=3, seed=0):
    """A smooth non-linear target in public bounds [0, 100]."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, d))
    y = 50.0 + 30.0 * np.tanh(2.0 * X[:, 0]) - 10.0 * X[:, 1] ** 2 + rng.standard_normal(n)
    return X, np.clip(y, 0.0, 100.0)


@pytest.mark.parametrize("task", ["multiclass", "regression"])
@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_runs_a_network_of_each_task_or_refuses_in_one_line(algo, task):
    if task == "multiclass":
        X, y = _blobs()
        extra = dict(labels=(0, 1, 2))
    else:
        X, y = _curve()
        extra = dict(target_bounds=(0, 100))
    loss = "mlp:hidden=8,4"
    params = {}
    if algo == "warm-start":
        params = {"warm_params": "steps=20"}
    if algo in REFUSED:
        with pytest.raises(ParameterError) as exc:
            dpreg.run(algo=algo, loss=loss, data=(X, y), epsilon=8.0, seed=0, params=params, warn=False, **extra)
        msg = str(exc.value)
        assert "\n" not in msg and REFUSED[algo] in msg and algo in msg
        return
    rec = dpreg.run(algo=algo, loss=loss, data=(X, y), epsilon=8.0, seed=0, params=params, diagnostics="light",
                    warn=False, **extra)
    assert rec["release"]["privacy"]["epsilon"] <= 8.0 * (1 + 1e-9)
    m = rec["release"]["model"]
    w = np.asarray(m["weights"], dtype=float)
    assert np.all(np.isfinite(w))
    model = dpreg.load_model(json.loads(to_json(rec)))
    pred = model.predict(X)
    if task == "multiclass":
        assert m["task"] == "multiclass" and m["n_classes"] == 3 and w.shape == (4 * 8 + 8 + 8 * 4 + 4 + 4 * 3 + 3,)
        assert "head=softmax" in m["loss_spec"] and "n_classes=3" in m["loss_spec"]
        assert set(np.unique(pred)) <= {0.0, 1.0, 2.0}
        acc = float(np.mean(pred == y))
        if algo in ("dp-gd", "dp-sgd"):
            assert acc > 0.8, acc
    else:
        assert m["task"] == "regression" and m["target"]["kind"] == "bounds" and w.shape == (3 * 8 + 8 + 8 * 4 + 4 + 5,)
        assert "head=squared" in m["loss_spec"]
        r2 = 1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2)
        if algo in ("dp-gd", "dp-sgd"):
            assert r2 > 0.5, r2


def test_a_huber_head_learns_a_regression_through_outliers():
    """Huber's bounded gradient: a tenth of the targets at the far bound
    barely moves the fit of the rest."""
    X, y = _curve(4000)
    y_bad = y.copy()
    y_bad[::10] = 100.0
    rec = dpreg.run(algo="dp-sgd", loss="mlp:hidden=8,4,head=huber,delta=0.2", data=(X, y_bad), epsilon=8.0,
                    seed=0, target_bounds=(0, 100), warn=False, diagnostics="light")
    m = rec["release"]["model"]
    assert "head=huber" in m["loss_spec"] and m["task"] == "regression"
    pred = dpreg.load_model(json.loads(to_json(rec))).predict(X)
    clean = np.ones(len(y), dtype=bool)
    clean[::10] = False
    r2 = 1 - np.sum((y[clean] - pred[clean]) ** 2) / np.sum((y[clean] - y[clean].mean()) ** 2)
    assert r2 > 0.5, r2


@pytest.mark.slow
@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_dp_sgd_defaults_fit_a_small_regression_with_a_network(eps):
    """diabetes' 353 training records: at dp-sgd's defaults for a network with a
    regression head (step 2/M) the training R^2 is well above the training
    mean's 0 (step 1, the classification heads' default, ends far below 0)."""
    rec = dpreg.run(algo="dp-sgd", loss="mlp:hidden=32,16", data="diabetes", target_bounds=(0, 400),
                    epsilon=eps, seed=1, warn=False)
    r2 = rec["diagnostics"]["metrics"]["train_r2"]
    assert r2 > 0.3, r2


def test_binary_networks_give_probabilities(tmp_path):
    X, y = _blobs(K=2)
    rec = dpreg.run(algo="dp-sgd", loss="mlp:hidden=8", data=(X, y), epsilon=8.0, seed=0, labels=(0, 1),
                    warn=False, diagnostics="light")
    model = dpreg.load_model(json.loads(to_json(rec)))
    P = model.predict_proba(X)
    assert P.shape == (len(y), 2)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert np.array_equal(model.predict(X), np.where(P[:, 1] > 0.5, 1.0, 0.0))


# ------------------------------------------------------------------ the CLI
@pytest.fixture(scope="module")
def digits_csv(tmp_path_factory):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    d = tmp_path_factory.mktemp("digits")
    rng = np.random.default_rng(0)  # a fixed public split
    perm = rng.permutation(len(y))
    te, tr = perm[:360], perm[360:]
    for name, rows in (("train.csv", tr), ("test.csv", te)):
        (d / name).write_text("\n".join(f"{int(y[i])}," + ",".join(f"{v:g}" for v in X[i]) for i in rows))
    return d / "train.csv", d / "test.csv", y[te]


@pytest.mark.slow
def test_cli_two_hidden_layers_learn_ten_classes_and_predict_returns_labels(digits_csv, tmp_path):
    """``dpreg run --algo dp-sgd --loss mlp:hidden=64,32 --labels 0,...,9`` on
    a 10-class file at eps = 2: the softmax head is bound to the declared ten
    classes and the network learns far above the majority rate; predict
    writes class labels and probabilities."""
    train, test, yte = digits_csv
    out = tmp_path / "run.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--loss", "mlp:hidden=64,32", "--data", str(train),
                                 "--test-data", str(test), "--labels", ",".join(str(k) for k in range(10)),
                                 "--epsilon", "2", "--seed", "0", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text())
    m = rec["diagnostics"]["metrics"]
    base = rec["diagnostics"]["baselines"]
    assert base["test_majority_rate"] < 0.12
    assert m["test_accuracy"] > base["test_majority_rate"] + 0.5, m
    model = rec["release"]["model"]
    assert model["task"] == "multiclass" and model["n_classes"] == 10 and model["kind"] == "problem"
    assert model["loss_spec"] == "mlp:hidden=64,32,head=softmax,n_classes=10"
    assert model["label_map"]["source"] == "declared"
    pred = tmp_path / "pred.csv"
    r = CliRunner().invoke(cli, ["predict", str(out), "--data", str(test), "--out", str(pred), "--proba"])
    assert r.exit_code == 0, r.output
    rows = pred.read_text().strip().splitlines()
    assert rows[0] == "prediction," + ",".join(f"p_{k}" for k in range(10)) and len(rows) == 361
    table = np.array([[float(v) for v in row.split(",")] for row in rows[1:]])
    assert np.mean(table[:, 0] == yte) == pytest.approx(m["test_accuracy"])
    np.testing.assert_allclose(table[:, 1:].sum(axis=1), 1.0, atol=1e-12)
    assert np.array_equal(table[:, 0], np.argmax(table[:, 1:], axis=1))


def test_cli_a_head_that_does_not_fit_the_declared_labels_is_refused(digits_csv, tmp_path):
    train, _, _ = digits_csv
    out = tmp_path / "run.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--loss", "mlp:hidden=8,head=huber", "--data",
                                 str(train), "--labels", ",".join(str(k) for k in range(10)), "--out", str(out)])
    assert r.exit_code != 0 and "Traceback" not in r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "head=huber" in lines[0] and "leave head out" in lines[0], r.output
    assert not out.exists()
