"""One front door: ``DPClassifier``, ``dpreg.run`` and ``dpreg run`` resolve the
same defaults (feature scaling, epochs, batch, every algorithm parameter) and,
for the same inputs and research seed, release the same model."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import dpreg
from dpreg.cli import cli
from dpreg.sklearn import DPClassifier


def _data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.1, 30.0, size=d)  # unequal feature scales
    y = np.where(X @ rng.standard_normal(d) / np.sqrt(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def _releases(tmp_path, X, y, algo, **opts):
    """The release of the same fit through the three front doors."""
    clf = DPClassifier(algorithm=algo, epsilon=1.0, random_state=3, classes=(-1.0, 1.0), **opts).fit(X, y)
    rec_run = dpreg.run(algo=algo, data=(X, y), epsilon=1.0, seed=3, warn=lambda m: None, diagnostics="light",
                        **opts)
    path = tmp_path / "data.npz"
    np.savez(path, X=X, y=y)
    out = tmp_path / "rec.json"
    args = ["run", "--algo", algo, "--data", str(path), "--epsilon", "1", "--seed", "3", "--out", str(out),
            "--quiet", "--no-diagnostics"]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    rec_cli = json.loads(out.read_text())
    return clf.record_["release"], rec_run["release"], rec_cli["release"]


@pytest.mark.parametrize("n, d, algo", [(3000, 5, "dp-sgd"), (400, 8, "dp-sgd"), (400, 8, "dp-gd"),
                                        (400, 8, "adaptive-spider"), (400, 8, "dp-spider")])
def test_same_defaults_same_release(tmp_path, n, d, algo):
    """n = 3,000, d = 5: ``--scaling auto`` takes private feature scales (the
    rule of dpreg.preprocess); n = 400: none.  Either way the three doors
    resolve the same preprocessing, parameters and noise, and release the
    same weights."""
    X, y = _data(n, d)
    releases = _releases(tmp_path, X, y, algo)
    first = releases[0]
    for rel in releases[1:]:
        assert rel["model"]["preprocessing"] == first["model"]["preprocessing"]
        assert rel["config"]["params_resolved"] == first["config"]["params_resolved"]
        assert rel["privacy"]["epsilon"] == first["privacy"]["epsilon"]
        assert rel["privacy"]["mechanisms"] == first["privacy"]["mechanisms"]
        np.testing.assert_array_equal(np.asarray(rel["model"]["weights"]), np.asarray(first["model"]["weights"]))
    private = first["model"]["preprocessing"]["feature_map"] == "private"
    assert private == (n == 3000)


def test_practitioner_names_agree(tmp_path):
    """Epochs, batch size and learning rate given by their practitioner names
    reach the algorithm the same way through every door."""
    X, y = _data(500, 6, seed=1)
    rels = _releases(tmp_path, X, y, "dp-sgd", epochs=3, batch_size=50, lr=0.5)
    for rel in rels:  # the command line gives strings, Python numbers: the same values
        assert {k: float(v) for k, v in rel["config"]["params_given"].items()} == {"epochs": 3.0, "batch": 50.0,
                                                                                 "step": 0.5}
        assert rel["config"]["params_resolved"] == rels[0]["config"]["params_resolved"]
    for rel in rels[1:]:
        np.testing.assert_array_equal(np.asarray(rel["model"]["weights"]), np.asarray(rels[0]["model"]["weights"]))
