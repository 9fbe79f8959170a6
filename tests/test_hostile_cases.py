"""The hostile tester's afternoon, replayed: every case of tests/hostile_cases.py
behaves as a careful user expects - a one-line error naming the problem and a
non-zero exit, within seconds, with bounded memory, nothing lost and no
partial or misleading output - and the cases that need more than one
command: concurrent runs on one --out, tampered records for dpreg privacy,
dpreg predict on data of another width, and the sweep's signals, lock,
resume, duplicates and a full disk."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

import hostile_cases as H
from dpreg.cli import _load_plugin_commands, cli

_load_plugin_commands()


def _one_error(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("case", H.CASES, ids=[c.name for c in H.CASES])
def test_case(case, tmp_path):
    why = H.prepare(case, tmp_path)
    if why:
        pytest.skip(why)
    r = H.run_case(case.argv, tmp_path, timeout=600)
    assert r["code"] == case.code, (r["code"], r["stderr"][-2000:])
    assert "Traceback" not in r["stderr"], r["stderr"][-3000:]
    if case.one_line:
        line = _one_error(r["stderr"])
    else:
        line = H.last_line(r["stderr"])
    for s in case.says:
        assert s in line, line
    assert r["s"] < case.max_s, f"{r['s']:.1f} s"
    assert r["mb"] < case.max_mb, f"{r['mb']:.0f} MB"
    if case.name == "run-quiet-first":
        assert r["stdout"] == ""
    if case.name == "run-threads-999":
        assert "threads=999" in r["stderr"] and "using" in r["stderr"]
    if case.name.startswith("sweep-") and case.code == 2:
        assert not (tmp_path / "out").exists()  # refused before anything was written
    if case.name == "sweep-all-cells-fail":
        rows = json.loads((tmp_path / "out" / "results.json").read_text())
        assert [row["status"] for row in rows] == ["error", "error"]


# ----------------------------------------------------------------- run and privacy
@pytest.mark.slow
def test_four_concurrent_runs_with_one_out_keep_four_records(tmp_path):
    got = H.concurrent_out(tmp_path, 4)
    assert got["codes"] == [0, 0, 0, 0]
    assert len(set(got["named"])) == 4 and sorted(got["named"]) == got["files"], got
    for f in got["files"]:
        assert json.loads((tmp_path / f).read_text())["release"]["privacy"]["epsilon"] > 0


def test_write_new_never_replaces_and_never_shares_a_name(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from dpreg.results import write_new

    (tmp_path / "r.json").write_text("mine")
    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda k: write_new(str(tmp_path / "r.json"), f'{{"k": {k}}}'), range(16)))
    assert (tmp_path / "r.json").read_text() == "mine"
    assert len(set(names)) == 16 and all(os.path.basename(n).startswith("r-") for n in names)
    assert sorted(json.loads(open(n).read())["k"] for n in names) == list(range(16))
    assert not list(tmp_path.glob(".dpreg-*"))  # no temporary file left


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    return H.make_record(d)


@pytest.mark.parametrize("edit", sorted(H.TAMPER))
def test_privacy_refuses_an_impossible_statement(record, tmp_path, edit):
    bad = H.tamper(record, tmp_path / "bad.json", H.TAMPER[edit])
    r = CliRunner().invoke(cli, ["privacy", str(bad)])
    assert r.exit_code == 2
    line = _one_error(r.stderr)
    assert "edited or damaged" in line and edit.split("=")[0] in line
    assert CliRunner().invoke(cli, ["privacy", str(record)]).exit_code == 0


def test_release_names_the_data_file_by_its_base_name(tmp_path):
    import numpy as np

    import dpreg

    f = tmp_path / "secret-project" / "patients.csv"
    f.parent.mkdir()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3))
    f.write_text("\n".join(f"{int(x[0] > 0)},{x[0]:.3f},{x[1]:.3f},{x[2]:.3f}" for x in X))
    rec = dpreg.run(algo="dp-gd", data=str(f), params={"steps": 3}, warn=False)
    assert rec["release"]["config"]["data"] == "patients.csv"
    from dpreg.results import to_json

    assert str(tmp_path) not in to_json(rec["release"])


# ----------------------------------------------------------------- predict
@pytest.fixture(scope="module")
def model4(tmp_path_factory):
    """A model trained on a 4-feature CSV file."""
    import numpy as np

    d = tmp_path_factory.mktemp("m4")
    rng = np.random.default_rng(1)
    X = rng.standard_normal((80, 4))
    (d / "train.csv").write_text("\n".join(f"{int(x[0] > 0)}," + ",".join(f"{v:.3f}" for v in x) for x in X))
    r = CliRunner().invoke(cli, ["run", "--algo", "dp-gd", "--param", "steps=3", "--data", str(d / "train.csv"),
                                 "--out", str(d / "m.json"), "-q"])
    assert r.exit_code == 0, r.output
    return d / "m.json"


@pytest.mark.parametrize("width", [3, 5])
def test_predict_refuses_csv_of_another_width(model4, tmp_path, width):
    f = tmp_path / "x.csv"
    f.write_text("\n".join("1," + ",".join(["0.5"] * width) for _ in range(3)))
    r = CliRunner().invoke(cli, ["predict", str(model4), "--data", str(f)])
    line = _one_error(r.stderr)
    assert r.exit_code == 2 and ("model has 4" in line or "4 are expected" in line) and r.stdout == ""


def test_predict_svmlight_width_must_be_the_models_unless_declared(model4, tmp_path):
    f = tmp_path / "x.svm"
    f.write_text("1 1:0.5 2:0.1\n-1 3:0.2\n")  # largest index 3: 3 features read off the file, the model has 4
    r = CliRunner().invoke(cli, ["predict", str(model4), "--data", str(f)])
    line = _one_error(r.stderr)
    assert r.exit_code == 2 and "--features 4" in line and r.stdout == ""
    r = CliRunner().invoke(cli, ["predict", str(model4), "--data", str(f), "--features", "4"])
    assert r.exit_code == 0 and r.stdout.splitlines()[0] == "prediction,margin" and len(r.stdout.splitlines()) == 3
    f.write_text("1 1:0.5 7:0.1\n")
    r = CliRunner().invoke(cli, ["predict", str(model4), "--data", str(f)])
    assert r.exit_code == 2 and "beyond the model's 4 features" in _one_error(r.stderr)


def test_predict_detects_an_edited_width(model4, tmp_path):
    for edit in (lambda m: m.__setitem__("n_features", 22), lambda m: m.__setitem__("coef", m["coef"][:2])):
        bad = H.tamper(model4, tmp_path / "bad.json", lambda r: edit(r["release"]["model"]))
        r = CliRunner().invoke(cli, ["predict", str(bad), "--data", "synthetic-logistic:n=10,d=4"])
        assert r.exit_code == 2 and "edited or damaged" in _one_error(r.stderr)


def test_predict_out_never_clobbers_and_force_replaces(model4, tmp_path):
    data = "synthetic-logistic:n=10,d=4"
    out = tmp_path / "p.csv"
    out.write_text("keep me")
    r = CliRunner().invoke(cli, ["predict", str(model4), "--data", data, "--out", str(out)])
    assert r.exit_code == 0 and out.read_text() == "keep me" and (tmp_path / "p-1.csv").exists()
    assert "p-1.csv" in r.stderr
    r = CliRunner().invoke(cli, ["predict", str(model4), "--data", data, "--out", str(out), "--force"])
    assert r.exit_code == 0 and out.read_text().startswith("prediction,margin")


# ----------------------------------------------------------------- limits, in process
def test_integer_parameters_refuse_float_spellings():
    from dpreg.errors import ParameterError
    from dpreg.params import ParamSpec

    spec = ParamSpec("steps", "int", None, "")
    assert spec.parse("1000") == 1000 and spec.parse("1_000") == 1000 and spec.parse(7) == 7
    import numpy as np

    assert spec.parse(np.int64(5)) == 5
    for bad in ("1e12", "1e3", "100.0", 100.0, 1e12, True, "ten"):
        with pytest.raises(ParameterError, match="expects an integer"):
            spec.parse(bad)


def test_epochs_as_a_whole_number_still_sets_passes():
    from dpreg.params import practitioner_params

    assert practitioner_params("adaptive-spider", [], {"epochs": 3.0}, style="cli")["passes"] == 3


def test_work_and_memory_estimates_are_lower_bounds_that_refuse_the_absurd(monkeypatch):
    import numpy as np

    from dpreg import limits
    from dpreg.errors import ParameterError
    from dpreg.registry import get_registry

    class P:  # the public shape of a problem
        n, d = 10_000, 100
        X = np.zeros((1, 99))

    algo = get_registry().get("algorithm", "dp-gd")
    assert limits.full_batch(algo) and not limits.full_batch(get_registry().get("algorithm", "dp-sgd"))
    est = limits.estimate(P, algo, {"steps": 100})
    assert est["work"] >= 100 * P.n * 99  # full batch: every step reads every record
    limits.check_run_size(P, algo, {"steps": 100})
    with pytest.raises(ParameterError, match="operations"):
        limits.check_run_size(P, algo, {"steps": 10**9})
    monkeypatch.setenv("DPREG_WORK_LIMIT", "1e20")  # then the steps' released series are what does not fit
    with pytest.raises(ParameterError, match="memory"):
        limits.check_run_size(P, algo, {"steps": 10**12})
    monkeypatch.setattr(limits, "available_memory", lambda: 10**4)
    with pytest.raises(ParameterError, match="memory"):
        limits.check_run_size(P, algo, {"steps": 10})
    with pytest.raises(ParameterError, match="reads dense rows"):
        limits.check_dense_copy((201, 10**7), "loss 'mlp'")


# ----------------------------------------------------------------- sweeps
def _sweep(tmp_path, text, *extra):
    cfg = tmp_path / "g.toml"
    cfg.write_text(text)
    return CliRunner().invoke(cli, ["sweep", str(cfg), "--workers", "1", "--out-dir", str(tmp_path / "out"),
                                    *extra])


def test_sweep_duplicate_entries_run_once(tmp_path):
    text = H.GRID.replace("epsilons = [1.0, 2.0]", "epsilons = [1.0, 1.0, 2.0]\nnoises = [\"tree\", \"tree\"]")
    text = text.replace('algorithms = ["dp-gd"]', 'algorithms = ["dp-gd", "dp-gd"]')
    r = _sweep(tmp_path, text)
    assert r.exit_code == 0, r.output
    assert "2 cells, 0 done before, 2 to run" in r.output
    assert len(json.loads((tmp_path / "out" / "results.json").read_text())) == 2


def test_sweep_reruns_a_tampered_record_and_never_counts_it(tmp_path):
    assert _sweep(tmp_path, H.GRID).exit_code == 0
    recs = sorted((tmp_path / "out" / "records").glob("*.json"))
    recs[0].write_text("{}")
    H.tamper(recs[1], recs[1], H.TAMPER["epsilon=-5"])
    r = _sweep(tmp_path, H.GRID)
    assert r.exit_code == 0, r.output
    assert r.output.count("is not a finished record of its cell") == 2 and "2 to run" in r.output
    rows = json.loads((tmp_path / "out" / "results.json").read_text())
    assert all(row["status"] == "ok" and 0 < row["epsilon_spent"] <= row["epsilon"] for row in rows)
    # columns are checked too: an edited accuracy is a record to run again
    rec = json.loads(recs[0].read_text())
    rec["diagnostics"]["usage"]["iterations"] = -3
    recs[0].write_text(json.dumps(rec))
    assert "its iterations is -3, out of range" in _sweep(tmp_path, H.GRID).output


def test_a_second_sweep_on_a_locked_folder_is_refused(tmp_path):
    from dpreg_plugins.commands.sweep import open_out_dir

    lock = open_out_dir(str(tmp_path / "out"))
    try:
        r = _sweep(tmp_path, H.GRID)
        assert r.exit_code == 2 and "another sweep is running" in _one_error(r.stderr)
        assert not list((tmp_path / "out" / "records").glob("*.json"))
    finally:
        lock.close()
    assert _sweep(tmp_path, H.GRID).exit_code == 0  # the lock ends with its holder


def test_a_full_disk_stops_the_sweep_in_one_line_and_keeps_what_finished(tmp_path, monkeypatch):
    import dpreg.results

    real = dpreg.results.write_atomic
    calls = []

    def fills_up(path, text, **kw):
        calls.append(path)
        if len(calls) >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, text, **kw)

    monkeypatch.setattr(dpreg.results, "write_atomic", fills_up)
    text = H.GRID.replace("epsilons = [1.0, 2.0]", "epsilons = [1.0, 2.0, 3.0]")
    r = _sweep(tmp_path, text)
    assert r.exit_code == 1
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "Traceback" not in r.output
    assert len(list((tmp_path / "out" / "records").glob("*.json"))) == 1  # the finished cell is kept
    assert "[3/3]" not in r.output  # stopped at the first record it could not write


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sweep_signals_stop_the_workers_and_write_the_table(tmp_path, sig, code):
    got = H.sweep_signal(tmp_path, sig)
    assert got["workers"] >= 2, got
    assert got["code"] == code and got["left"] == 0 and got["table"], got
    assert "run the same command again to resume" in got["last"], got
    assert got["s"] < 30, got


@pytest.mark.slow
def test_sweep_workers_exit_when_the_sweep_is_killed(tmp_path):
    got = H.sweep_signal(tmp_path, signal.SIGKILL)
    assert got["workers"] >= 2 and got["code"] == -9 and got["left"] == 0, got


@pytest.mark.slow
def test_a_scheduler_that_accepts_and_never_answers_fails_within_seconds(tmp_path):
    """A sweep and a run, each in one line, well before a user would give up."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.5)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    addr = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    try:
        (tmp_path / "g.toml").write_text(H.GRID)
        r = H.run_case(H.dpreg("sweep", "g.toml", "--out-dir", "out", "--scheduler", addr), tmp_path, timeout=300)
        run = H.run_case(H.dpreg("run", *H.SMALL, "--backend", "dask", "--scheduler", addr, "--out", "r.json"),
                         tmp_path, timeout=300)
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    assert r["code"] == 2 and "no answer in 10 s" in _one_error(r["stderr"])
    assert r["s"] < 60 and not (tmp_path / "out").exists()
    assert run["code"] == 2 and "cannot reach the Dask scheduler" in _one_error(run["stderr"])
    assert run["s"] < 60 and not (tmp_path / "r.json").exists()


def test_an_orphaned_worker_exits(tmp_path):
    """A process that armed die_with_parent exits when its parent dies."""
    code = (
        "import os, sys, time\n"
        "from dpreg_plugins.commands.sweep_workers import die_with_parent\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    die_with_parent(os.getppid())\n"
        "    open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "time.sleep(1.0)\n"
        "os._exit(0)\n")
    flag = tmp_path / "child.pid"
    subprocess.run([sys.executable, "-c", code, str(flag)], timeout=60)
    import time

    for _ in range(100):
        if flag.exists() and flag.read_text():
            break
        time.sleep(0.1)
    child = int(flag.read_text())
    time.sleep(3.0)
    assert H.alive([child]) == [], "the orphaned worker is still running"


@pytest.mark.slow
def test_a_worker_that_dies_is_an_error_row_and_the_others_run(tmp_path):
    import threading
    import time

    from dpreg_plugins.commands.sweep import Cell, error_row
    from dpreg_plugins.commands.sweep_workers import WorkerPool

    def cell(steps, eps):
        return Cell("dp-gd", "dp-gd", None, "logistic", "s", "synthetic-logistic:n=4000,d=20", None, eps, None,
                    None, "rdp", "light", {"steps": steps})

    jobs = [(0, cell(200000, 1.0), str(tmp_path / "a.json")), (1, cell(3, 2.0), str(tmp_path / "b.json"))]
    pool = WorkerPool(1)
    rows = {}

    def killer():
        time.sleep(8.0)
        for pid in pool.pids():
            os.kill(pid, signal.SIGKILL)

    threading.Thread(target=killer, daemon=True).start()
    try:
        pool.run(jobs, rows.__setitem__, lambda i, why: error_row(jobs[i][1], why))
    finally:
        pool.close(kill=True)
    assert rows[0]["status"] == "error" and "worker process died" in rows[0]["error"], rows[0]
    assert rows[1]["status"] == "ok", rows[1]


@pytest.mark.slow
def test_the_time_line_states_the_wall_time_a_user_sees(tmp_path):
    """The summary's time line gives the seconds since the process started
    (start-up and imports included), which the pipeline's own total leaves out."""
    import re

    r = H.run_case(H.dpreg("run", *H.SMALL, "--out", "none"), tmp_path, timeout=600)
    assert r["code"] == 0, r["stderr"]
    line = [ln for ln in r["stdout"].splitlines() if ln.strip().startswith("time ")][0]
    since = float(re.search(r"([0-9.]+)s since the process started", line).group(1))
    total = float(re.search(r"total=([0-9.]+)s", line).group(1))
    assert total <= since <= r["s"] + 0.5, (line, r["s"])
    assert since >= 0.5 * r["s"], (line, r["s"])  # the wall clock, not the pipeline's share of it


# ----------------------------------------------------------------- the run plot
@pytest.fixture(scope="module")
def full_record(tmp_path_factory):
    """A record with full diagnostics (the checkpoints the run plot draws), as JSON text reads back."""
    import dpreg
    from dpreg.results import to_json

    rec = dpreg.run(algo="dp-gd", data="synthetic-logistic:n=600,d=5", params={"steps": 40}, warn=False)
    return json.loads(to_json(rec))


def test_run_plot_shows_loss_and_accuracy_against_their_references(full_record):
    from dpreg_plugins.commands.plot import run_panels

    panels = {p["title"]: p for p in run_panels(full_record)}
    loss, acc = panels["training loss"], panels["accuracy"]
    steps, values = loss["series"]["train loss"]
    assert len(steps) >= 3 and values[-1] < values[0]  # the model learned: the curve goes down
    assert {"loss at w = 0", "non-private optimum"} <= set(loss["refs"])
    assert {"majority class (train)", "non-private optimum (test)", "final test accuracy"} <= set(acc["refs"])
    assert acc["refs"]["final test accuracy"] > acc["refs"]["majority class (test)"]


def test_run_plot_uses_a_log_axis_where_scales_differ_and_names_no_directory(full_record, tmp_path, monkeypatch):
    import copy

    from dpreg_plugins.commands import plot as P

    rec = copy.deepcopy(full_record)
    cps = rec["diagnostics"]["trajectory"]["checkpoints"]
    cps["grad_norm"] = [250.0 / 10 ** i for i in range(len(cps["steps"]))]  # from ~250 down past 0.01
    panels = {p["title"]: p for p in P.run_panels(rec)}
    assert panels[P.NICE.get("grad_norm", "grad_norm")]["log"] is True
    assert panels["accuracy"]["log"] is False  # accuracies and their references within a factor of 20
    rec["release"]["config"]["data"] = str(tmp_path / "secret-project" / "patients.csv")  # an absolute path
    (tmp_path / "r.json").write_text(json.dumps(rec))
    titles = []
    monkeypatch.setattr(P, "_save", lambda fig, plt, out: titles.append(" ".join(t.get_text() for t in fig.texts)) or plt.close(fig) or out)
    P.plot_run(str(tmp_path / "r.json"), str(tmp_path / "r.png"))
    assert "patients.csv" in titles[0] and "secret-project" not in titles[0] and str(tmp_path) not in titles[0]
