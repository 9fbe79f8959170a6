"""Beyond binary labels, end to end: every algorithm on the multi-class and
regression losses (or a one-line refusal), ``dpreg run``/``predict``/
``privacy``/``sweep`` with K classes and real targets, the public label map and
target range, the released model's round trip, and the private target range."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

import dpreg
from dpreg.cli import cli
from dpreg.errors import DataError, DpregError, ParameterError
from dpreg.results import to_json

ALGOS = ("dp-gd", "dp-sgd", "dp-spider", "adaptive-spider", "perturbed-sgd", "warm-start", "dp-trust-region",
         "dp-stochastic-trust-region", "zo-o2nc", "distributed-spider")
#: (algorithm, loss) pairs refused in one line, and a phrase of the reason
REFUSED = {("zo-o2nc", "softmax"): "margin loss"}


def _blobs(n=400, d=4, K=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((K, d)) * 2.0
    y = rng.integers(0, K, n)
    X = centres[y] + rng.standard_normal((n, d)) * 0.7
    return X, y.astype(float)


def _linear(n=400, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = 50.0 + X @ np.array([8.0, -5.0, 3.0, 0.0][:d]) + rng.standard_normal(n)
    return X, y


@pytest.mark.parametrize("loss", ["softmax", "squared", "huber"])
@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_runs_the_new_losses_or_refuses_in_one_line(algo, loss):
    if loss == "softmax":
        X, y = _blobs()
        extra = dict(labels=(0, 1, 2))
    else:
        X, y = _linear()
        extra = dict(target_bounds=(0, 100))
    params = {"steps": 40} if algo in ("dp-gd", "dp-sgd") else {}
    if algo == "warm-start":
        params = {"warm_params": "steps=20"}
    if (algo, loss) in REFUSED:
        with pytest.raises(ParameterError) as exc:
            dpreg.run(algo=algo, loss=loss, data=(X, y), epsilon=8.0, seed=0, params=params, **extra)
        msg = str(exc.value)
        assert "\n" not in msg and REFUSED[(algo, loss)] in msg and algo in msg
        return
    rec = dpreg.run(algo=algo, loss=loss, data=(X, y), epsilon=8.0, seed=0, params=params, diagnostics="light",
                    **extra)
    assert rec["release"]["privacy"]["epsilon"] <= 8.0 * (1 + 1e-9)
    m = rec["release"]["model"]
    w = np.asarray(m["weights"], dtype=float)
    assert np.all(np.isfinite(w))
    model = dpreg.load_model(json.loads(to_json(rec)))
    pred = model.predict(X)
    if loss == "softmax":
        assert m["task"] == "multiclass" and m["n_classes"] == 3 and w.shape == (5 * 3,)
        assert set(np.unique(pred)) <= {0.0, 1.0, 2.0}
        acc = float(np.mean(pred == y))
        if algo in ("dp-gd", "dp-sgd", "dp-trust-region"):
            assert acc > 0.8, acc
    else:
        assert m["task"] == "regression" and m["target"]["kind"] == "bounds" and w.shape == (5,)
        r2 = 1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2)
        if algo in ("dp-gd", "dp-sgd", "dp-trust-region"):
            assert r2 > 0.5, r2


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
def test_cli_softmax_learns_ten_classes_and_predict_returns_labels(digits_csv, tmp_path):
    """dp-sgd with softmax on a 10-class file at eps = 2
    learns far above the majority rate; predict writes class labels (and
    probabilities on request); privacy states the run."""
    train, test, yte = digits_csv
    out = tmp_path / "run.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--loss", "softmax", "--data", str(train),
                                 "--test-data", str(test), "--epsilon", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "schema inferred" in r.output and "labels=" in r.output  # K read off the data: stated and warned
    rec = json.loads(out.read_text())
    m = rec["diagnostics"]["metrics"]
    base = rec["diagnostics"]["baselines"]
    assert base["test_majority_rate"] < 0.12
    assert m["test_accuracy"] > 0.75 and m["test_accuracy"] > base["test_majority_rate"] + 0.6
    model = rec["release"]["model"]
    assert model["task"] == "multiclass" and model["n_classes"] == 10
    assert model["label_map"] == {"classes": [float(k) for k in range(10)], "source": "inferred"}
    pred = tmp_path / "pred.csv"
    r = CliRunner().invoke(cli, ["predict", str(out), "--data", str(test), "--out", str(pred), "--proba"])
    assert r.exit_code == 0, r.output
    rows = pred.read_text().strip().splitlines()
    assert rows[0] == "prediction," + ",".join(f"p_{k}" for k in range(10)) and len(rows) == 361
    table = np.array([[float(v) for v in row.split(",")] for row in rows[1:]])
    assert set(np.unique(table[:, 0])) <= set(range(10))
    assert np.mean(table[:, 0] == yte) == pytest.approx(m["test_accuracy"])
    np.testing.assert_allclose(table[:, 1:].sum(axis=1), 1.0, atol=1e-12)
    assert np.array_equal(table[:, 0], np.argmax(table[:, 1:], axis=1))
    r = CliRunner().invoke(cli, ["privacy", str(out)])
    assert r.exit_code == 0 and "one record" in " ".join(r.output.split())


@pytest.mark.slow
def test_cli_declared_labels_pick_softmax_and_are_not_inferred(digits_csv, tmp_path):
    train, test, _ = digits_csv
    out = tmp_path / "run.json"
    labels = ",".join(str(k) for k in range(10))
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--data", str(train), "--labels", labels,
                                 "--epsilon", "2", "--out", str(out), "--param", "steps=50"])
    assert r.exit_code == 0, r.output
    assert "schema inferred" not in r.output
    rec = json.loads(out.read_text())
    assert rec["release"]["config"]["loss"] == "softmax"  # --loss auto with K > 2 declared classes
    assert rec["release"]["model"]["label_map"]["source"] == "declared"
    # a binary loss with K declared classes, a label outside the map: one line each
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--loss", "logistic", "--data", str(train),
                                 "--labels", labels, "--out", "none"])
    assert r.exit_code == 2 and "use --loss softmax" in r.output and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--data", str(train), "--labels", "0,1,2",
                                 "--out", "none"])
    assert r.exit_code == 2 and "is not one of the 3 classes" in r.output
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--loss", "logistic", "--data", str(train),
                                 "--out", "none"])
    assert r.exit_code == 2 and "--loss softmax" in r.output and "Traceback" not in r.output


def test_cli_regression_writes_values_in_the_users_units(tmp_path):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    data = tmp_path / "diabetes.csv"
    data.write_text("\n".join(f"{t:g}," + ",".join(f"{v:.8g}" for v in row) for t, row in zip(y, X)))
    out = tmp_path / "run.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--loss", "squared", "--data", str(data),
                                 "--target-bounds", "0,400", "--scaling", "bounds", "--bounds",
                                 str(_bounds_file(tmp_path, 10, 0.2)), "--epsilon", "4", "--test-fraction", "0.2",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "R2=" in r.output and "RMSE=" in r.output
    rec = json.loads(out.read_text())
    m, base = rec["diagnostics"]["metrics"], rec["diagnostics"]["baselines"]
    assert m["train_r2"] > 0.3 and m["test_r2"] > base["test_r2_of_train_mean"] + 0.2
    assert rec["release"]["model"]["target"] == {"kind": "bounds", "lower": 0.0, "upper": 400.0,
                                                 "source": "declared"}
    pred = tmp_path / "pred.csv"
    r = CliRunner().invoke(cli, ["predict", str(out), "--data", str(data), "--out", str(pred)])
    assert r.exit_code == 0, r.output
    rows = pred.read_text().strip().splitlines()
    assert rows[0] == "prediction"
    values = np.array([float(v) for v in rows[1:]])
    assert 100 < np.mean(values) < 200  # the target's units (its mean is 152)
    np.testing.assert_allclose(values, dpreg.load_model(str(out)).predict(X), rtol=1e-6)  # the CSV rounds X
    r = CliRunner().invoke(cli, ["predict", str(out), "--data", str(data), "--proba"])
    assert r.exit_code == 2 and "no class probabilities" in r.output
    # target bounds are for regression losses; malformed ones are one line
    for args, phrase in ((["--loss", "logistic", "--labels", "0,1", "--target-bounds", "0,1"], "regression"),
                         (["--target-bounds", "5,1"], "LO < HI"), (["--target-bounds", "a"], "two numbers")):
        r = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--data", str(data), *args, "--out", "none"])
        assert r.exit_code == 2 and phrase in r.output and "Traceback" not in r.output, r.output


def _bounds_file(tmp_path, d, b):
    f = tmp_path / "bounds.csv"
    f.write_text(",".join(["-%g" % b] * d) + "\n" + ",".join(["%g" % b] * d))
    return f


@pytest.mark.slow
def test_registered_data_sets_declare_their_schema():
    for name, K, loss in (("digits", 10, "softmax"), ("wine", 3, "softmax")):
        rec = dpreg.run(algo="dp-sgd", data=name, epsilon=2.0, seed=0, test_fraction=0.25, diagnostics=True)
        assert rec["release"]["config"]["loss"] == loss and rec["release"]["model"]["n_classes"] == K
        assert rec["diagnostics"]["schema_inferred"] is None
        m, base = rec["diagnostics"]["metrics"], rec["diagnostics"]["baselines"]
        assert m["test_accuracy"] > base["test_majority_rate"] + 0.3, (name, m, base)
    rec = dpreg.run(algo="dp-sgd", data="diabetes", epsilon=4.0, seed=0, test_fraction=0.25)
    assert rec["release"]["config"]["loss"] == "squared"
    assert rec["release"]["model"]["target"]["source"] == "private"
    assert rec["diagnostics"]["metrics"]["test_r2"] > 0.2


def test_model_round_trip_and_refusals():
    from dpreg.model import Model

    X, y = _blobs()
    rec = dpreg.run(algo="dp-gd", loss="softmax", data=(X, y), labels=(0, 1, 2), epsilon=4.0, seed=1,
                    params={"steps": 30}, diagnostics=False)
    back = json.loads(to_json(rec))
    a, b = dpreg.load_model(rec), dpreg.load_model(back)
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))
    assert a.decision_function(X).shape == (400, 3) and np.array_equal(a.predict(X), b.predict(X))
    m = back["release"]["model"]
    assert np.asarray(m["coef"]).shape == (3, 4) and len(m["intercept"]) == 3
    bad = dict(m, weights=m["weights"][:-1])
    with pytest.raises(DpregError, match="finite numbers"):
        Model.from_release(bad)
    with pytest.raises(DpregError, match="3 classes"):
        Model.from_release(dict(m, n_classes=4, weights=m["weights"] + [0.0] * 5))
    old = {k: v for k, v in back["release"]["model"].items() if k not in ("task", "n_classes")}
    with pytest.raises(DpregError):
        Model.from_release(old)  # a K x p weight vector is not a binary model's


def test_label_maps_for_k_classes():
    from dpreg.data import ClassMap

    cm = ClassMap.for_training(np.array([3.0, 1.0, 2.0, 1.0]), None, "t")
    assert cm.classes == (1.0, 2.0, 3.0) and cm.source == "inferred"
    np.testing.assert_array_equal(cm.apply(np.array([3.0, 1.0, 2.0]), "t"), [2.0, 0.0, 1.0])
    dm = ClassMap.for_training(np.array([0.0]), (7, 5, 0), "t")  # declared order kept, unseen classes allowed
    np.testing.assert_array_equal(dm.apply(np.array([0.0, 7.0, 5.0]), "t"), [2.0, 0.0, 1.0])
    with pytest.raises(DataError, match="record 2"):
        dm.apply(np.array([0.0, np.nan]), "t")
    with pytest.raises(DataError, match="differ"):
        ClassMap.for_training(np.zeros(3), (1, 1, 2), "t")
    with pytest.raises(DataError, match="one class"):
        ClassMap.for_training(np.zeros(3), None, "t")
    from dpreg.pipeline import parse_labels

    assert parse_labels("0,1,2") == (0.0, 1.0, 2.0) and parse_labels("-1,1") == (-1.0, 1.0)
    for bad in ("1", "a,b", "1,1", "1,inf"):
        with pytest.raises(ParameterError):
            parse_labels(bad)


@pytest.mark.slow
def test_sweep_and_plot_over_multiclass_and_regression(tmp_path):
    from dpreg.cli import _load_plugin_commands

    _load_plugin_commands()  # dpreg sweep and dpreg plot are command plugins
    cfg = tmp_path / "grid.toml"
    cfg.write_text('algorithms = ["dp-sgd"]\nepsilons = [2.0]\nseeds = [0]\nloss = "auto"\n'
                   'data = ["wine", "diabetes"]\n[params.dp-sgd]\nsteps = 50\n')
    r = CliRunner().invoke(cli, ["sweep", str(cfg), "--out-dir", str(tmp_path / "sweep"), "--workers", "1"])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "sweep" / "results.json").read_text())
    by = {r["data"]: r for r in rows}
    assert by["wine"]["status"] == "ok" and by["wine"]["train_accuracy"] > 0.5 and by["wine"]["loss"] == "auto"
    assert by["diabetes"]["status"] == "ok" and by["diabetes"]["train_r2"] is not None
    assert by["diabetes"]["train_accuracy"] is None
    png = tmp_path / "r2.png"
    r = CliRunner().invoke(cli, ["plot", "sweep", str(tmp_path / "sweep"), "--metric", "train_r2", "--out", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------- the private target range
def test_private_target_range_finds_the_scale():
    from dpreg.tasks import TARGET_GRID, private_target_bounds

    rng = np.random.default_rng(0)
    for scale in (1e-3, 1.0, 300.0, 1e6):
        y = scale * rng.standard_normal(5000)
        q95 = np.quantile(np.abs(y), 0.95)
        bs = [private_target_bounds(y, 0.5, np.random.default_rng(s))[1] for s in range(20)]
        assert all(q95 / 2 <= b <= 4 * q95 for b in bs), (scale, q95, bs)
    # tiny n epsilon: the margin keeps the scan from running past the data
    y = 25 + 320 * rng.random(353)
    bs = np.array([private_target_bounds(y, 0.1, np.random.default_rng(s))[1] for s in range(400)])
    assert np.mean((bs >= 128) & (bs <= 1024)) >= 0.99
    assert TARGET_GRID[0] < 1e-5 and TARGET_GRID[-1] > 1e17


def test_private_target_range_is_epsilon_dp_on_a_worst_case_pair():
    """The output distribution of :func:`private_target_bounds` on two
    neighbouring data sets stays within e^epsilon of each other: the count at
    the grid points from 1 to 2^29 sits on the threshold in one and one below
    it in the other (one record moved from 1 to 2^30).  Estimated from 20,000
    runs each, with a margin for sampling error, at every output with enough
    mass to measure.  The same check on the mechanism run at 4 epsilon (a
    quarter of the noise), held to epsilon, sees the leak."""
    from dpreg.tasks import TARGET_GRID, private_target_bounds

    n = 40
    runs = 20_000

    def pair(eps):
        T = int(round(private_target_bounds(np.ones(n), eps, np.random.default_rng(0))[2]["threshold"]))
        D = np.concatenate([np.ones(T), np.full(n - T, 2.0 ** 30)])
        D2 = D.copy()
        D2[0] = 2.0 ** 30
        return D, D2

    def dist(y, eps, seed):
        rng = np.random.default_rng(seed)
        k = [private_target_bounds(y, eps, rng)[2]["grid_index"] for _ in range(runs)]
        return np.bincount(k, minlength=TARGET_GRID.size) / runs

    def worst_log_ratio(eps_run, eps_pair):
        D, D2 = pair(eps_pair)
        p, q = dist(D, eps_run, 1), dist(D2, eps_run, 2)
        ok = (p > 0.02) & (q > 0.02)
        se = 3 * (np.sqrt(p * (1 - p) / runs) + np.sqrt(q * (1 - q) / runs))
        return float(np.max(np.maximum(np.log((p[ok] - se[ok]) / (q[ok] + se[ok])),
                                        np.log((q[ok] - se[ok]) / (p[ok] + se[ok])))))

    assert worst_log_ratio(1.0, 1.0) <= 1.0
    assert worst_log_ratio(4.0, 4.0) > 1.0


def test_tasks_of_the_losses_and_the_target_transform(registry):
    from dpreg.tasks import TargetTransform, loss_task, origin_bound, parse_target_bounds, predicts_target

    tasks = {n: loss_task(registry.get("loss", n)) for n in ("logistic", "sigmoid", "ramp", "softmax", "squared",
                                                             "huber", "phase-retrieval", "lowy-synthetic")}
    assert tasks == {"logistic": "binary", "sigmoid": "binary", "ramp": "binary", "softmax": "multiclass",
                     "squared": "regression", "huber": "regression", "phase-retrieval": "regression",
                     "lowy-synthetic": "regression"}
    assert predicts_target(registry.get("loss", "squared")) and not predicts_target(registry.get("loss",
                                                                                                "phase-retrieval"))
    assert origin_bound(registry.get("loss", "softmax").with_classes(10)) == pytest.approx(math.log(10))
    assert origin_bound(registry.get("loss", "logistic")) == pytest.approx(math.log(2))
    assert origin_bound(registry.get("loss", "squared")) == 0.5
    t = TargetTransform.bounds(25, 345)
    y = np.array([25.0, 185.0, 345.0, 400.0, -10.0])
    np.testing.assert_allclose(t.apply(y), [-1.0, 0.0, 1.0, 1.0, -1.0])  # beyond the range: clipped
    np.testing.assert_allclose(t.inverse(t.apply(y[:3])), y[:3])
    assert TargetTransform.from_dict(t.as_dict()) == t and TargetTransform.from_dict(None).kind == "none"
    assert parse_target_bounds("0,1") == (0.0, 1.0) and parse_target_bounds("auto") == "auto"
    for bad in ("1,0", "0", "a,b", "0,inf"):
        with pytest.raises(ParameterError):
            parse_target_bounds(bad)
    with pytest.raises(ParameterError):
        TargetTransform("bounds", 1.0, 1.0)
