"""What a practitioner expects of a command line: a config file, quiet and
verbose, python -m, threads, no silent clobbering, shell completion, and the
failures a hostile tester found (interrupts, devices, pseudo file systems, a
full disk at write time)."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from dpreg.cli import cli

DATA = "synthetic-logistic:n=1500,d=4"
FAST = ["--algo", "dp-gd", "--data", DATA, "--param", "steps=3", "--seed", "1"]


def _run(args, **kw):
    return CliRunner().invoke(cli, ["run", *args], **kw)


def _one_error_line(res, code=2):
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == code, (res.exit_code, res.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    return lines[0]


def test_config_file_sets_defaults_and_options_win(tmp_path):
    conf = tmp_path / "run.toml"
    conf.write_text('algo = "dp-gd"\ndata = "%s"\nepsilon = 2.0\nseed = 4\n[params]\nsteps = 7\n' % DATA)
    out = tmp_path / "r.json"
    res = _run(["--config", str(conf), "--epsilon", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rel = json.loads(out.read_text())["release"]
    assert rel["config"]["algo"] == "dp-gd" and rel["config"]["params_resolved"]["steps"] == 7
    assert rel["config"]["epsilon"] == 3.0  # the command line wins
    bad = tmp_path / "bad.toml"
    bad.write_text('algorithm = "dp-gd"\n')
    assert "unknown key 'algorithm'" in _one_error_line(_run(["--config", str(bad)]))
    bad.write_text('algo = \n')
    assert "not valid TOML" in _one_error_line(_run(["--config", str(bad)]))


def test_quiet_prints_nothing_and_verbose_prints_the_statement(tmp_path):
    res = _run([*FAST, "--quiet", "--out", str(tmp_path / "q.json")])
    assert res.exit_code == 0 and res.output == ""
    res = _run([*FAST, "--verbose", "--out", "none"])
    assert res.exit_code == 0 and "Unit of privacy" in res.output


def test_python_dash_m_and_threads(tmp_path):
    out = tmp_path / "m.json"
    p = subprocess.run([sys.executable, "-m", "dpreg", "run", *FAST, "--threads", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["diagnostics"]["timing"]["threads"] == 1


def test_no_silent_clobbering_and_force_keeps_the_mode(tmp_path):
    out = tmp_path / "run.json"
    out.write_text("{}")
    os.chmod(out, 0o640)
    res = _run([*FAST, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text() == "{}"  # the earlier file is untouched
    assert (tmp_path / "run-1.json").exists() and "run-1.json" in res.output
    res = _run([*FAST, "--out", str(out), "--force"])
    assert res.exit_code == 0
    assert json.loads(out.read_text())["release"] and (os.stat(out).st_mode & 0o777) == 0o640


def test_never_replace_a_non_regular_file_and_check_the_directory_first(tmp_path):
    line = _one_error_line(_run([*FAST, "--out", "/dev/null", "--force"]))
    assert "not a regular file" in line and os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    line = _one_error_line(_run([*FAST, "--out", "/proc/x.json"]))
    assert "cannot write" in line


def test_full_disk_at_write_time_keeps_the_summary(tmp_path, monkeypatch):
    import dpreg.results

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dpreg.results, "write_atomic", full)
    monkeypatch.setattr(dpreg.results, "write_new", full)
    res = _run([*FAST, "--out", str(tmp_path / "r.json")])
    assert res.exit_code == 1
    assert "privacy   epsilon=" in res.stdout  # the summary came first
    errors = [ln for ln in res.stderr.strip().splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and not (tmp_path / "r.json").exists()
    assert "Traceback" not in res.output


def test_ctrl_c_during_the_run_is_one_line_exit_130(tmp_path):
    out = tmp_path / "i.json"
    p = subprocess.Popen([sys.executable, "-m", "dpreg", "run", "--algo", "dp-gd", "--data",
                          "synthetic-logistic:n=20000,d=50", "--param", "steps=200000", "--seed", "0",
                          "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted; no output written" and not out.exists()
    assert "Traceback" not in err and "SystemError" not in err


def test_shell_completion_lists_plugin_names():
    env = dict(os.environ, _DPREG_COMPLETE="bash_complete", COMP_WORDS="dpreg run --algo dp-", COMP_CWORD="3")
    p = subprocess.run([sys.executable, "-c", "from dpreg.cli import main; main()"], capture_output=True,
                       text=True, env=env, timeout=120)
    names = [ln.split(",", 1)[1] for ln in p.stdout.splitlines() if "," in ln]
    assert {"dp-gd", "dp-sgd", "dp-spider"} <= set(names), p.stdout + p.stderr


# ------------------------------------------------ the hostile tester's remaining cases
@pytest.mark.parametrize("spec,msg", [
    ("synthetic-logistic:N=100", "bad options"),                # a typo is an error, not ignored
    ("synthetic-logistic:n=100000000000,d=100000", "memory"),   # refused before allocating
])
def test_data_set_options_are_checked(spec, msg):
    assert msg in _one_error_line(_run(["--algo", "dp-gd", "--data", spec]))


def test_csv_byte_order_mark_keeps_the_first_record(tmp_path):
    f = tmp_path / "bom.csv"
    f.write_bytes("\ufefflabel,a,b\n1,0.5,0.1\n0,0.2,0.3\n1,0.0,1.0\n0,0.1,0.1\n".encode("utf-8"))
    from dpreg.data import load_file

    X, y, _ = load_file(str(f))
    assert X.shape == (4, 2) and list(y) == [1, 0, 1, 0]
    g = tmp_path / "bom-noheader.csv"
    g.write_bytes("\ufeff1,0.5,0.1\n0,0.2,0.3\n".encode("utf-8"))
    X, y, _ = load_file(str(g))
    assert X.shape == (2, 2) and list(y) == [1, 0]  # the first record is not taken for a header


def test_npy_named_npz_and_label_last_hint(tmp_path):
    import numpy as np

    f = tmp_path / "x.npz"
    with open(f, "wb") as fh:
        np.save(fh, np.ones((3, 3)))
    assert "single array (.npy)" in _one_error_line(_run(["--algo", "dp-gd", "--data", str(f)]))
    c = tmp_path / "last.csv"
    c.write_text("\n".join(f"{i * 0.37 % 1:.3f},{i % 2}" for i in range(10)))
    line = _one_error_line(_run(["--algo", "dp-gd", "--data", str(c)]))
    assert "not binary" in line and "FIRST column" in line


def test_huge_feature_index_is_refused_unless_declared(tmp_path):
    """A 2 kB svmlight file with one index at 10^7 is refused in one line (the
    width read off the data is above 2^20: it must be declared), before any
    model of that width exists."""
    f = tmp_path / "wide.svm"
    f.write_text("\n".join(["1 1:0.5 3:1", "-1 2:1"] * 100 + ["1 10000000:1"]))
    line = _one_error_line(_run(["--algo", "dp-sgd", "--data", str(f), "--param", "steps=3"]))
    assert "10,000,000 features" in line and "--features D" in line
    assert not list(tmp_path.glob("*.json"))


def test_default_output_lands_in_the_working_directory_not_the_checkout(tmp_path):
    """Every test runs in its own temporary directory (tests/conftest.py), so a
    run without --out writes run.json there; the session fails if anything is
    written into the checkout."""
    from pathlib import Path

    assert Path.cwd() == tmp_path
    res = _run(FAST)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "run.json").exists()


def test_divergence_is_warned(tmp_path):
    res = _run(["--algo", "dp-gd", "--data", DATA, "--param", "step=1e6", "--param", "steps=20", "--seed", "0",
                "--epsilon", "0.5", "--out", str(tmp_path / "d.json")])
    assert res.exit_code in (0, 2)
    assert ("worse than at w = 0" in res.stderr) or ("diverged" in res.stderr), res.output
