"""Hostile input: malformed files, degenerate data and absurd options each
give one line ``error: ...`` on stderr, exit status 2, no traceback and no
output file (property-based over the loaders and the CLI options, plus fixed
cases and real subprocess runs)."""
from __future__ import annotations

import os
import subprocess
import sys

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpreg.data import Schema, load_file, prepare
from dpreg.errors import DataError

SETTINGS = settings(deadline=None, suppress_health_check=list(HealthCheck))
OK_CSV = "1,0.5,0.1\n-1,0.2,0.3\n1,0.1,0.1\n-1,0.9,0.2\n1,0.4,-0.2\n-1,-0.3,0.8\n"
OK_SVM = "1 1:0.5 2:0.1\n-1 1:-0.3 3:1\n1 2:0.2\n-1 3:-0.4\n"


@pytest.fixture(scope="module")
def cli():
    from dpreg.cli import _load_plugin_commands, cli

    _load_plugin_commands()
    return cli


def _assert_user_error(res, *, contains=None):
    """exit 2, exactly one stderr line 'error: ...', no traceback."""
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2, (res.exit_code, res.stderr, repr(res.exception))
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    if contains:
        assert contains in lines[0], lines[0]


def _check_loaded(path, n_features=None):
    """Either a clean (X, y) or a one-line DataError - never anything else."""
    try:
        X, y, _ = load_file(str(path), Schema(n_features))
        X, y = prepare(X, y, labels="binary", where="data", d=n_features)
        X = X.toarray() if hasattr(X, "toarray") else X  # sparse files stay CSR
    except DataError as exc:
        assert "\n" not in str(exc) and str(exc)
        return None
    assert X.ndim == 2 and X.shape[0] == y.shape[0] >= 2 and np.all(np.isfinite(X))
    assert np.all(np.linalg.norm(X, axis=1) <= 1 + 1e-12)
    assert set(np.unique(y)) <= {-1.0, 1.0}
    return X, y


# ------------------------------------------------------------------ loaders, property
TOKENS = st.sampled_from(["0", "1", "-1", "2", "0.5", "-3.25", "1e308", "-1e308", "1e400", "nan", "inf",
                          "-inf", "", " ", "abc", "1e-320", "0x1", "+1", "1,", "NaN", "--1"])


@SETTINGS
@given(rows=st.lists(st.lists(TOKENS, min_size=1, max_size=5), min_size=0, max_size=8),
       header=st.booleans())
def test_csv_loader_property(tmp_path_factory, rows, header):
    p = tmp_path_factory.mktemp("csv") / "d.csv"
    text = ("y,a,b\n" if header else "") + "\n".join(",".join(r) for r in rows)
    p.write_text(text)
    _check_loaded(p)


SVM_LINE = st.one_of(
    st.builds(lambda lab, feats: " ".join([lab] + [f"{i}:{v}" for i, v in feats]),
              st.sampled_from(["1", "-1", "+1", "0", "2", "abc", "nan"]),
              st.lists(st.tuples(st.integers(-1, 6), TOKENS), max_size=4)),
    st.text(alphabet="0123456789 :.-+eanx#\t", max_size=20),
)


@SETTINGS
@given(lines=st.lists(SVM_LINE, max_size=8))
def test_svmlight_loader_property(tmp_path_factory, lines):
    p = tmp_path_factory.mktemp("svm") / "d.svm"
    p.write_text("\n".join(lines) + "\n")
    _check_loaded(p)


@SETTINGS
@given(n=st.integers(0, 5), d=st.integers(0, 3), ny=st.integers(0, 5),
       fill=st.sampled_from([0.5, np.nan, np.inf, 1e308, -1e308]),
       kind=st.sampled_from(["f8", "i4", "c16", "U3", "bool"]))
def test_npz_loader_property(tmp_path_factory, n, d, ny, fill, kind):
    p = tmp_path_factory.mktemp("npz") / "d.npz"
    rng = np.random.default_rng(n * 7 + d)
    X = rng.standard_normal((n, d))
    if n and d:
        X[0, 0] = fill
    y = np.where(rng.random(ny) < 0.5, -1.0, 1.0)
    with np.errstate(invalid="ignore"):  # nan/inf cast to int: whatever it gives
        np.savez(p, X=X.astype(kind) if kind != "U3" else X.astype(str), y=y)
    _check_loaded(p)


@SETTINGS
@given(train_d=st.integers(1, 4), test_d=st.integers(1, 6), fmt=st.sampled_from(["csv", "npz", "svm"]))
def test_test_set_dimension_property(tmp_path_factory, train_d, test_d, fmt):
    """A held-out file with more features than the training data is an error;
    fewer is an error too, except svmlight (which may omit trailing zero features)."""
    p = tmp_path_factory.mktemp("te") / f"t.{fmt}"
    X = np.full((3, test_d), 0.25)
    y = np.array([1.0, -1.0, 1.0])
    if fmt == "csv":
        p.write_text("\n".join(",".join(["%g" % a] + ["%g" % v for v in row]) for a, row in zip(y, X)))
    elif fmt == "npz":
        np.savez(p, X=X, y=y)
    else:
        p.write_text("\n".join(f"{a:g} " + " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(row))
                               for a, row in zip(y, X)))
    out = _check_loaded(p, n_features=train_d)
    if test_d > train_d or (test_d < train_d and fmt != "svm"):
        assert out is None
    else:
        assert out is not None and out[0].shape == (3, train_d)


# ------------------------------------------------------------------ CLI: fixed cases
FILES = {
    "bad1.svm": ("1 1:0.5 2:abc\n-1 1:0.2\n", "cannot parse svmlight"),
    "unsorted.svm": ("1 2:0.5 1:0.3\n-1 1:1\n", "sorted and unique"),
    "negidx.svm": ("1 -3:0.5\n-1 1:1\n", "Invalid index"),
    "infval.svm": ("1 1:1e400\n-1 2:1\n", "non-finite feature value inf"),
    "empty.svm": ("", "contains no records"),
    "oneclass.svm": ("1 1:0.5\n1 2:0.3\n1 3:1\n", "one class only"),
    "multiclass.csv": ("1,1\n2,2\n3,3\n", "not binary"),
    "empty.csv": ("", "contains no records"),
    "header.csv": ("y,a,b\n", "header but no records"),
    "ragged.csv": ("1,2,3\n-1,2\n", "record 2 has 2 columns"),
    "nan.csv": ("1,2,nan\n-1,2,3\n", "non-finite feature value nan"),
    "nanlabel.csv": ("nan,1,2\n1,2,3\n", "non-finite label"),
    "labelonly.csv": ("1\n-1\n", "at least one feature column"),
    "onerow.csv": ("1,2,3\n", "at least 2 records"),
    "weird.xyz": ("1,2\n", "unknown data format"),
    "garbage.npz": ("not a zip", "cannot read"),
}

OPTS = [
    (["--epsilon", "0"], "epsilon must be a finite number > 0"),
    (["--epsilon", "-1"], "epsilon must be a finite number > 0"),
    (["--epsilon", "nan"], "epsilon must be a finite number > 0"),
    (["--epsilon", "inf"], "epsilon must be a finite number > 0"),
    (["--epsilon", "abc"], "is not a valid float"),
    (["--delta", "0"], "delta must be in (0, 1)"),
    (["--delta", "1"], "delta must be in (0, 1)"),
    (["--delta", "2"], "delta must be in (0, 1)"),
    (["--delta", "nan"], "delta must be in (0, 1)"),
    (["--algo", "nope"], "valid algorithm names: adaptive-spider, "),
    (["--algo", "dp-spider", "--noise", "nope"], "valid noise names: gaussian, sqrt-factorization, tree, tree-honaker"),
    (["--loss", "nope"], "valid loss names: huber, logistic"),
    (["--accountant", "nope"], "valid accountant names: pld, rdp"),
    (["--data", "missing.svm"], "data file not found: missing.svm"),
    (["--data", "nosuchset"], "built-in data sets: adult, breast-cancer"),
    (["--test-data", "missing.csv"], "test data file not found"),
    (["--param", "steps=-1"], "parameter 'steps' must be >= 1"),
    (["--param", "steps=abc"], "parameter 'steps' expects an integer"),
    (["--param", "steps=1e3"], "parameter 'steps' expects an integer (digits, not a float"),
    (["--param", "steps=1e400"], "parameter 'steps'"),
    (["--param", "clip=nan"], "parameter 'clip' must be finite"),
    (["--param", "bogus=1"], "valid parameters: clip"),
    (["--param", "steps"], "--param expects key=value"),
    (["--test-fraction", "1"], "test fraction must be in (0, 1)"),
    (["--seed", "-1"], "seed must be an integer >= 0"),
    (["--alpha", "nan"], "alpha must be > 0"),
    (["--out", "nodir/x.json"], "output directory does not exist"),
    (["--bogus-option"], "No such option"),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.csv").write_text(OK_CSV)
    (tmp_path / "ok.svm").write_text(OK_SVM)
    return tmp_path


def _invoke(cli, workdir, args):
    before = set(os.listdir(workdir))
    res = CliRunner().invoke(cli, ["run", *args])
    new = set(os.listdir(workdir)) - before
    return res, new


@pytest.mark.parametrize("name", sorted(FILES))
def test_cli_malformed_files(cli, workdir, name):
    text, msg = FILES[name]
    (workdir / name).write_text(text)
    res, new = _invoke(cli, workdir, ["--algo", "dp-gd", "--param", "steps=1", "--data", name])
    _assert_user_error(res, contains=msg)
    assert not new


@pytest.mark.parametrize("opts,msg", OPTS, ids=[" ".join(o) for o, _ in OPTS])
def test_cli_absurd_options(cli, workdir, opts, msg):
    base = ["--data", "ok.csv", "--param", "steps=1"] if "--param" not in opts else ["--data", "ok.csv"]
    algo = [] if "--algo" in opts else ["--algo", "dp-gd"]
    res, new = _invoke(cli, workdir, [*algo, *base, *opts])
    _assert_user_error(res, contains=msg)
    assert not new


def test_cli_test_data_dimension_mismatch(cli, workdir):
    (workdir / "wide.svm").write_text("1 1:0.5 9:0.1\n-1 1:-0.3 3:1\n")
    (workdir / "narrow.csv").write_text("1,0.5\n-1,0.2\n")
    for te, msg in (("wide.svm", "beyond the declared"), ("narrow.csv", "1 features, but")):
        res, new = _invoke(cli, workdir, ["--algo", "dp-gd", "--param", "steps=1", "--data", "ok.csv",
                                          "--test-data", te])
        _assert_user_error(res, contains=msg)
        assert not new


def test_cli_huge_values_are_scaled_not_refused(cli, workdir):
    (workdir / "huge.svm").write_text("1 1:1e308 2:1e308\n-1 1:-1e308\n1 3:1e-308\n-1 2:5\n")
    res, new = _invoke(cli, workdir, ["--algo", "dp-gd", "--param", "steps=2", "--data", "huge.svm",
                                      "--out", "r.json"])
    assert res.exit_code == 0, res.stderr
    assert new == {"r.json"}


@pytest.mark.parametrize("exc", ["error", "interrupt"])
def test_failure_after_the_run(cli, workdir, monkeypatch, exc):
    """A failing diagnostic never loses the run: the record is written with the
    failure noted in its diagnostics.  An interrupt leaves no file, exit 130."""
    import dpreg.metrics

    def boom(*a, **k):
        raise RuntimeError("evaluation failed") if exc == "error" else KeyboardInterrupt()

    monkeypatch.setattr(dpreg.metrics, "evaluate", boom)
    res, new = _invoke(cli, workdir, ["--algo", "dp-gd", "--param", "steps=2", "--data", "ok.csv",
                                      "--out", "r.json"])
    if exc == "interrupt":
        assert res.exit_code == 130 and not new
        return
    assert res.exit_code == 0, res.stderr
    assert new == {"r.json"}
    rec = json.loads((workdir / "r.json").read_text())
    assert rec["release"]["model"]["weights"]
    assert any("evaluation failed" in e for e in rec["diagnostics"]["errors"])


# ------------------------------------------------------------------ CLI, property
NUM = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, 2.0, -1.0, 1e-300]))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(eps=NUM, delta=NUM, algo=st.sampled_from(["dp-gd", "dp-sgd", "nope", "DP-GD", ""]),
       loss=st.sampled_from(["logistic", "sigmoid", "nope", "phase-retrieval"]),
       param=st.sampled_from(["steps=1", "steps=0", "steps=x", "clip=-1", "step=inf", "k=v", "steps=2"]))
def test_cli_options_property(cli, tmp_path_factory, eps, delta, algo, loss, param):
    d = tmp_path_factory.mktemp("cli")
    (d / "ok.csv").write_text(OK_CSV)
    out = d / "out.json"
    res = CliRunner().invoke(cli, ["run", "--algo", algo, "--loss", loss, "--data", str(d / "ok.csv"),
                                   "--epsilon", repr(eps), "--delta", repr(delta), "--param", param,
                                   "--out", str(out)])
    if res.exit_code == 0:
        assert out.exists()
    else:
        _assert_user_error(res)
        assert sorted(os.listdir(d)) == ["ok.csv"]


# ------------------------------------------------------------------ real subprocesses
@pytest.mark.parametrize("args,msg", [
    (["run", "--data", "definitely-missing.svm"], "data file not found"),
    (["run", "--algo", "dp-gd", "--epsilon", "nan"], "epsilon must be a finite number > 0"),
    (["run", "--delta", "oops"], "is not a valid float"),
])
def test_subprocess_one_line_errors(tmp_path, args, msg):
    p = subprocess.run([sys.executable, "-m", "dpreg.cli", *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and msg in lines[0], p.stderr
    assert list(tmp_path.iterdir()) == []
