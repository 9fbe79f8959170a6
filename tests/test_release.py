"""The record's two parts, the released model, and models that learn.

* the release holds the model, its preprocessing, the privacy statement and
  the public configuration - and no data-dependent count or metric;
* diagnostics are labelled non-private, and ``diagnostics=False`` writes the
  release alone;
* the released model repeats its preprocessing: predictions from raw records
  equal the margins the run's own problem computes;
* the defaults learn on the shipped data.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

import dpreg
from dpreg.cli import cli
from dpreg.errors import DpregError

DATA = "synthetic-logistic:n=3000,d=5"

#: names of data-dependent quantities that must never appear in the release
FORBIDDEN = ("clipped", "records_used", "accuracy", "grad_norm", "lambda_min", "loss_at", "majority",
             "iterations", "gradient_evaluations", "checkpoints", "timing", "trajectory")


def _keys(o, prefix=""):
    if isinstance(o, dict):
        for k, v in o.items():
            yield prefix + str(k)
            yield from _keys(v, prefix + str(k) + ".")
    elif isinstance(o, list):
        for v in o:
            yield from _keys(v, prefix)


@pytest.mark.parametrize("algo,extra", [("dp-sgd", {"steps": 20}), ("adaptive-spider", {}),
                                        ("dp-spider", {"steps": 6})])
def test_release_holds_no_data_dependent_count(algo, extra):
    rec = dpreg.run(algo=algo, data=DATA, epsilon=1.0, seed=0, params=extra)
    rel = rec["release"]
    assert set(rel) == {"note", "model", "privacy", "config"}
    keys = list(_keys(rel))
    bad = [k for k in keys if any(f in k.split(".")[-1] for f in FORBIDDEN)]
    assert not bad, bad
    assert rec["diagnostics"]["non_private"] is True and "NOT private" in rec["diagnostics"]["note"]
    # what used to leak sits in the diagnostics
    assert "metrics" in rec["diagnostics"] and "run_info" in rec["diagnostics"]


def test_no_diagnostics_writes_the_release_alone(tmp_path):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-sgd", "--data", DATA, "--param", "steps=10",
                                 "--no-diagnostics", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text())
    assert set(rec) == {"dpreg_record", "release"}
    assert "diagnostics: not computed" in r.output


def test_privacy_statement_fields():
    rec = dpreg.run(algo="dp-sgd", data=DATA, epsilon=2.0, params={"steps": 10})
    pr = rec["release"]["privacy"]
    assert pr["epsilon"] <= 2.0 * (1 + 1e-9) and pr["epsilon_budget"] == 2.0
    assert pr["relation"] == "zero-out" and "n public" in pr["relation_text"]
    assert pr["randomness"] == "secret" and pr["n"] == 3000 and pr["unit"] == "one record"
    assert pr["mechanisms"] and pr["mechanisms"][0]["noise_multiplier"] > 0
    # delta default: min(1e-5, 1/(10 n))
    assert pr["delta"] == pytest.approx(min(1e-5, 1 / 30000))


def _algorithms():
    from dpreg.registry import get_registry

    return get_registry().names("algorithm")


#: small, fast settings per algorithm (the rest at its defaults)
SMALL = {"dp-gd": {"steps": 5}, "dp-sgd": {"steps": 5}, "dp-spider": {"steps": 6},
         "dp-trust-region": {"steps": 4}, "dp-stochastic-trust-region": {"steps": 4}}
#: runs that add a mechanism to the algorithm's own (a selection stage)
EXTRA = [("warm-start", {"warm": "exponential", "select": "above-threshold", "alpha": 0.5,
                         "then_params": "steps=6"}),
         ("distributed-spider", {"select": "distributed-selection"})]


@pytest.mark.parametrize("algo,params", [(a, SMALL.get(a, {})) for a in _algorithms()] + EXTRA)
def test_every_algorithm_lists_its_mechanisms(algo, params):
    """The release's privacy statement names every mechanism of the run - each
    with its noise and its multiplier (or its share of a pure-DP budget) - and
    the plain-words statement shows them."""
    from dpreg.privacy_statement import render

    rec = dpreg.run(algo=algo, data="synthetic-logistic:n=2000,d=4", params=params, warn=False,
                    diagnostics="light")
    pr = rec["release"]["privacy"]
    mech = pr["mechanisms"]
    assert mech, f"{algo}: no mechanism listed"
    for m in mech:
        assert m["what"] and m["noise"]
        z, share = m.get("noise_multiplier"), m.get("epsilon_share")
        assert (z is not None and math.isfinite(z) and z > 0) or (share is not None and 0 < share <= 1.0), m
    text = render(rec["release"])
    assert all(m["what"] in " ".join(text.split()) for m in mech)
    if params.get("select"):
        assert any(("selection" in m["what"] or "above-threshold" in m["what"]) for m in mech), mech


@pytest.mark.parametrize("algo", ["dp-gd", "dp-trust-region"])
def test_listed_mechanisms_account_for_the_reported_epsilon(algo):
    """For the full-batch Gaussian algorithms the listed mechanisms, composed by
    dp-accounting itself over the run's steps, give the reported epsilon: the
    list is the whole of what was released (the trust region's Hessian noise
    included)."""
    import dp_accounting as dpa

    rec = dpreg.run(algo=algo, data="synthetic-logistic:n=2000,d=4", params=SMALL[algo], warn=False,
                    diagnostics="light")
    pr, ri = rec["release"]["privacy"], rec["diagnostics"]["run_info"]
    steps = ri.get("steps_run", rec["diagnostics"]["usage"]["iterations"])
    events = [dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(m["noise_multiplier"]), steps) for m in pr["mechanisms"]]
    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.ComposedDpEvent(events))
    assert acc.get_epsilon(pr["delta"]) == pytest.approx(pr["epsilon"], rel=1e-8)
    assert len(pr["mechanisms"]) == (2 if algo == "dp-trust-region" else 1)


def test_plain_words_statement_names_epsilon_and_delta(tmp_path):
    from dpreg.privacy_statement import render

    rec = dpreg.run(algo="dp-gd", data=DATA, epsilon=1.0, params={"steps": 3}, warn=False, diagnostics=False)
    text = " ".join(render(rec["release"]).split())
    pr = rec["release"]["privacy"]
    assert f"ε = {pr['epsilon']:.4g}" in text and f"δ = {pr['delta']:.3g}" in text
    assert "(ε, δ)-differentially private" in text and "except with probability at most δ" in text
    assert f"e^ε = {math.exp(pr['epsilon']):.3g}" in text


def test_delta_at_or_above_one_over_n_warns():
    msgs = []
    dpreg.run(algo="dp-gd", data="synthetic-logistic:n=200,d=3", epsilon=1.0, delta=0.01, seed=0,
              params={"steps": 3}, warn=msgs.append)
    assert any("1/n" in m for m in msgs)
    msgs.clear()
    dpreg.run(algo="dp-gd", data="synthetic-logistic:n=200,d=3", epsilon=1.0, seed=0, params={"steps": 3},
              warn=msgs.append)
    assert not any("1/n" in m for m in msgs)


def test_privacy_warnings_are_python_warnings_from_python_and_lines_from_the_cli(tmp_path):
    """From Python, the run's privacy warnings are warnings.warn(PrivacyWarning):
    `-W error::UserWarning` turns the seeded-randomness note into an exception
    (the command a careful user types); the CLI prints each one once."""
    import subprocess
    import sys
    import warnings

    res = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", "import dpreg; dpreg.run(seed=0)"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode != 0 and "PrivacyWarning: randomness is seeded" in res.stderr, res.stderr[-2000:]
    assert not list(tmp_path.iterdir())  # raised before any record
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dpreg.run(algo="dp-gd", data=(np.eye(3)[[0, 1, 2] * 10], np.arange(30) % 2), seed=1, delta=0.05,
                  params={"steps": 2}, diagnostics=False)
    got = [str(w.message) for w in caught if issubclass(w.category, dpreg.PrivacyWarning)]
    assert len(got) == 2 and any("seeded" in m for m in got) and any("1/n" in m for m in got), got
    assert all(w.filename == __file__ for w in caught if issubclass(w.category, dpreg.PrivacyWarning))
    svm = tmp_path / "d.svm"  # no declared schema: feature count and index base read off the file
    svm.write_text("".join(f"{1 if i % 2 else -1} 1:{i / 40:.3f} 2:0.5\n" for i in range(40)))
    with pytest.warns(dpreg.PrivacyWarning, match="schema inferred"):
        dpreg.run(algo="dp-gd", data=str(svm), params={"steps": 2}, diagnostics=False)
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--data", "synthetic-logistic:n=200,d=3", "--seed", "0",
                                 "--delta", "0.01", "--param", "steps=2", "--out", "none"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("warning: ")]
    assert len(lines) == 2 and sum("seeded" in ln for ln in lines) == 1 and sum("1/n" in ln for ln in lines) == 1


def test_released_model_repeats_its_preprocessing(tmp_path):
    """load_model(record).decision_function(raw X) equals the run's margins on
    its own (transformed) data; the intercept is one coordinate of w."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4)) * np.array([1.0, 10.0, 0.1, 3.0]) + 2.0
    y = np.where(X[:, 0] + 0.1 * X[:, 1] > 3.0, 1.0, 0.0)
    out = tmp_path / "m.json"
    rec = dpreg.run(algo="dp-gd", data=(X, y), epsilon=5.0, seed=0, params={"steps": 30}, out=str(out))
    model = dpreg.load_model(str(out))
    m = rec["release"]["model"]
    assert m["label_map"] == {"negative": 0.0, "positive": 1.0, "source": "fixed"}
    s = m["preprocessing"]["intercept_scaling"]
    assert len(m["weights"]) == 5 and m["intercept"] == pytest.approx(m["weights"][-1] * s)
    # the same transformation the pipeline applied: row scaling then a constant column
    Xs = X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    Xs = np.hstack([Xs, np.full((400, 1), s)])
    np.testing.assert_allclose(model.decision_function(X), Xs @ np.asarray(m["weights"]), rtol=1e-12, atol=1e-14)
    pred = model.predict(X)
    assert set(np.unique(pred)) <= {0.0, 1.0}
    acc = rec["diagnostics"]["metrics"]["train_accuracy"]
    assert np.mean(pred == y) == pytest.approx(acc)
    p = model.predict_proba(X)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert np.all((p[:, 1] > 0.5) == (model.decision_function(X) > 0))


def test_predict_and_privacy_commands(tmp_path):
    rec_path = tmp_path / "run.json"
    data = tmp_path / "d.csv"
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    data.write_text("\n".join(f"{t}," + ",".join(f"{v:.6f}" for v in row) for t, row in zip(y, X)))
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--data", str(data), "--epsilon", "4",
                                 "--param", "steps=20", "--out", str(rec_path)])
    assert r.exit_code == 0, r.output
    pred = tmp_path / "pred.csv"
    r = CliRunner().invoke(cli, ["predict", str(rec_path), "--data", str(data), "--out", str(pred)])
    assert r.exit_code == 0, r.output
    rows = pred.read_text().strip().splitlines()
    assert rows[0] == "prediction,margin" and len(rows) == 301
    labels = np.array([float(r.split(",")[0]) for r in rows[1:]])
    assert set(np.unique(labels)) <= {0.0, 1.0} and np.mean(labels == y) > 0.8
    r = CliRunner().invoke(cli, ["privacy", str(rec_path)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    for phrase in ("differentially private", "one record", "n = 300", "public", "Randomness: secret",
                   "Not covered", "Mironov"):
        assert phrase in text, phrase
    # a file that is not a record: one line, exit 2
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    r = CliRunner().invoke(cli, ["predict", str(bad), "--data", str(data)])
    assert r.exit_code == 2 and "not a dpreg record" in r.output


def test_model_refuses_wrong_width():
    rec = dpreg.run(algo="dp-gd", data=DATA, seed=0, params={"steps": 2})
    model = dpreg.load_model(rec)
    with pytest.raises(DpregError, match="expected 5 features"):
        model.predict(np.ones((3, 4)))


def test_private_scales_noise_has_the_calibrated_scale():
    """The log-magnitude sums are released with std z * 2 * 6 sqrt(d) (replace-one):
    on a column of constant magnitude 10 the estimate's spread over many
    secret draws matches it (a sigma off by 1.5x fails)."""
    from dpreg.accounting import RdpAccountant
    from dpreg.preprocess import private_scales

    n, d = 20000, 3
    X = np.full((n, d), 10.0)
    devs, zs = [], []
    for s in range(300):
        acc = RdpAccountant(1.0, 1e-6)
        lo, hi, info = private_scales(X, acc, np.random.default_rng(s), 0.5)
        assert acc.epsilon_spent <= 0.5 * (1 + 1e-9) and hi[0] == -lo[0]
        devs.append((np.log10(hi) - 1.0) * n)  # count is n up to noise of relative size 1e-3
        zs.append(info["noise_multiplier"])
    sd = np.std(np.concatenate(devs))
    expect = zs[0] * 2 * 6 * math.sqrt(d)
    assert 0.85 * expect < sd < 1.15 * expect


def test_scaling_private_is_charged_to_the_one_accountant():
    rec = dpreg.run(algo="dp-gd", data="breast-cancer", scaling="private", epsilon=1.0, seed=0,
                    params={"steps": 20})
    pr = rec["release"]["privacy"]
    assert pr["epsilon"] <= 1.0 * (1 + 1e-9)
    assert any(m["what"] == "private feature scales" for m in pr["mechanisms"])
    assert rec["release"]["model"]["preprocessing"]["feature_map"] == "private"
    assert rec["diagnostics"]["privacy"]["charges"] == 20 + 2


def test_defaults_learn_on_the_shipped_data():
    """Models that learn: dp-sgd at its defaults, eps = 1, beats the majority
    class clearly on adult (>= 0.82; majority 0.764) and on breast-cancer's
    seeded 80/20 split (>= 0.90 with the declared public bounds)."""
    rec = dpreg.run(algo="dp-sgd", epsilon=1.0, seed=0)
    m, b = rec["diagnostics"]["metrics"], rec["diagnostics"]["baselines"]
    assert rec["release"]["config"]["data"] == "adult"
    assert m["test_accuracy"] >= 0.82 > b["test_majority_rate"] + 0.05
    accs = []
    for seed in range(3):
        rec = dpreg.run(algo="dp-sgd", data="breast-cancer", test_fraction=0.2, epsilon=1.0, seed=seed)
        accs.append(rec["diagnostics"]["metrics"]["test_accuracy"])
        assert rec["release"]["model"]["preprocessing"]["feature_map"] == "bounds"
    assert np.mean(accs) >= 0.90, accs


def test_scaling_auto_follows_its_public_rule():
    """--scaling auto: declared bounds when the data set has them; else private
    scales on dense data where the rule on public n, d and the budget says the
    estimate is precise; else per-record scaling.  The rule reads no data."""
    from dpreg.accounting import RdpAccountant
    from dpreg.preprocess import (AUTO_PRIVATE_MAX_LOG_STD, private_scale_log_std, private_scaling_pays,
                                  scale_event)

    acc = RdpAccountant(1.0, 1e-6)
    # the std is z * factor * 6 sqrt(d) / n with z the multiplier 0.1 eps buys
    z = acc.fresh(0.1, 1e-6).calibrate(scale_event)
    assert math.isclose(private_scale_log_std(20000, 5, acc, 0.1), z * 2 * 6 * math.sqrt(5) / 20000, rel_tol=1e-9)
    assert private_scaling_pays(20000, 5, acc, 0.1) and not private_scaling_pays(1000, 5, acc, 0.1)
    assert private_scale_log_std(1000, 5, acc, 0.1) > AUTO_PRIVATE_MAX_LOG_STD
    assert acc.epsilon_spent == 0 and acc._reserved is None  # asking charges and reserves nothing

    def fmap(data, **kw):
        rec = dpreg.run(algo="dp-gd", data=data, epsilon=1.0, seed=0, params={"steps": 5}, **kw)
        return rec, rec["release"]["model"]["preprocessing"]["feature_map"]

    rng = np.random.default_rng(0)
    X = rng.standard_normal((20000, 5)) * np.array([1e-3, 1.0, 10.0, 100.0, 1e3])  # columns on wild scales
    y = np.where(X[:, 1] + X[:, 2] / 10 > 0, 1.0, -1.0)
    rec, fm = fmap((X, y))
    assert fm == "private"
    assert any(m["what"] == "private feature scales" for m in rec["release"]["privacy"]["mechanisms"])
    assert rec["release"]["privacy"]["epsilon"] <= 1.0 * (1 + 1e-9)
    up = rec["release"]["model"]["preprocessing"]["upper"]
    assert all(0.1 < u / s < 10 for u, s in zip(up, [1e-3, 1.0, 10.0, 100.0, 1e3])), up  # scales found
    assert fmap((X[:1000], y[:1000]))[1] == "none"  # n too small for a precise estimate
    assert fmap((X, y), scaling="none")[1] == "none"
    assert fmap("breast-cancer")[1] == "bounds"  # declared public bounds
    assert fmap("adult")[1] == "none"  # declares a common scale (one-hot indicators)
    assert fmap("synthetic-logistic:n=20000,d=5")[1] == "none"  # generated at unit scale


def test_scaling_auto_decides_by_format_not_density(tmp_path):
    """The same wild-scale data as a CSV gets private scales under --scaling
    auto; as an svmlight file it gets none, whether its density makes the loader
    store it dense or CSR (density is read off the data, the format is public)."""
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(1)
    scales = np.array([1e-3, 1.0, 10.0, 100.0, 1e3])
    y = np.where(rng.random(20000) < 0.5, 1.0, -1.0)
    dense = rng.standard_normal((20000, 5)) * scales
    sparse = dense * (rng.random((20000, 5)) < 0.1)  # 10 % dense: the loader keeps it CSR
    csv = tmp_path / "d.csv"
    np.savetxt(csv, np.column_stack([y, dense]), delimiter=",")
    maps = {}
    for name, X in (("dense", dense), ("sparse", sparse)):
        path = tmp_path / f"{name}.svm"
        dump_svmlight_file(sp.csr_matrix(X), y, str(path), zero_based=False)
        rec = dpreg.run(algo="dp-gd", data=str(path), features=5, zero_based=False, epsilon=1.0, seed=0,
                        params={"steps": 3})
        maps[name] = rec["release"]["model"]["preprocessing"]["feature_map"]
    assert maps == {"dense": "none", "sparse": "none"}
    rec = dpreg.run(algo="dp-gd", data=str(csv), epsilon=1.0, seed=0, params={"steps": 3})
    assert rec["release"]["model"]["preprocessing"]["feature_map"] == "private"


def test_record_readers_share_one_error_path(tmp_path):
    """load_model, the privacy statement and the plots read records through
    dpreg.results.read_json: one-line errors naming what was being read."""
    from dpreg.errors import DpregError
    from dpreg.privacy_statement import load_statement

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DpregError, match=r"^model file not found: .*missing\.json$"):
        dpreg.load_model(str(tmp_path / "missing.json"))
    with pytest.raises(DpregError, match=r"^cannot read model .*bad\.json: "):
        dpreg.load_model(str(bad))
    with pytest.raises(DpregError, match=r"^cannot read record .*bad\.json: "):
        load_statement(str(bad))
