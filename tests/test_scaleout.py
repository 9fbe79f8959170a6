"""Data-parallel training on sharded data (dpreg.backends): the same bits from
the in-process holder and from Dask worker processes, the sums of the shards
against the plain problem, the shard readers and their schema rules, and
refusals.  One LocalCluster of two worker processes on 127.0.0.1 serves the
module, and for the seeded runs a stand-in for a remote cluster: a ``dask
scheduler`` and two ``dask worker`` processes started from the command line
on 127.0.0.1 (both started by their fixtures, stopped after the last test)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpreg.errors import DataError, DpregError, ParameterError

distributed = pytest.importorskip("distributed")

CUTS = (0, 900, 2600, 4000)  # three shards of unequal size


def _warm():
    """Import dpreg and load the kernels in a worker process (numba's cache)."""
    from dpreg.problem import Problem
    from dpreg.registry import get_registry

    pb = Problem(get_registry().get("loss", "logistic"), np.full((2, 2), 0.1), np.ones(2))
    return float(pb.clipped_diff_sum(np.zeros(2), np.ones(2), None, 1.0)[0][0])


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes (one Dask thread, one numba thread each) on
    127.0.0.1, their kernels loaded; closed after the module's last test."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, env={"NUMBA_NUM_THREADS": "1"}) as c:
        with distributed.Client(c, set_as_default=False) as client:
            client.run(_warm)
        yield c.scheduler_address


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """A scheduler and two single-thread workers started as separate
    programs (``dask scheduler``, ``dask worker``: how a remote cluster is
    run) on 127.0.0.1, with nothing of this test module on their path; their
    address.  The processes
    (each the leader of its own process group) are stopped after the
    module's last test."""
    dask = Path(sys.executable).with_name("dask")
    if not dask.exists():
        pytest.skip("the dask command is not installed beside this interpreter")
    root = tmp_path_factory.mktemp("remote")
    sched_file = root / "scheduler.json"
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    procs = []

    def start(*args):
        log = open(root / f"{len(procs)}.log", "w")
        procs.append(subprocess.Popen([str(dask), *args], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
                                      start_new_session=True))

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
              str(sched_file))
        deadline = time.monotonic() + 120
        while not sched_file.exists():
            assert time.monotonic() < deadline and procs[0].poll() is None, (root / "0.log").read_text()
            time.sleep(0.2)
        time.sleep(0.2)  # the file written whole
        address = json.loads(sched_file.read_text())["address"]
        for _ in range(2):
            start("worker", address, "--nthreads", "1", "--nworkers", "1", "--host", "127.0.0.1",
                  "--no-dashboard", "--memory-limit", "2GiB")
        with distributed.Client(address, set_as_default=False, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for p in reversed(procs):  # workers first, then the scheduler: each by its own process group
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    n, d = CUTS[-1], 6
    X = rng.standard_normal((n, d)) * np.array([1, 2, 0.5, 1, 3, 1])
    y = np.where(X @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n) > 0, 1.0, 0.0)
    return X, y


@pytest.fixture(scope="module")
def shards(tmp_path_factory, data):
    """The same records as npz shards, Parquet shards, one npz file and
    svmlight shards (zero-based), in directories of their own."""
    X, y = data
    root = tmp_path_factory.mktemp("shards")
    for sub in ("npz", "parquet", "svm"):
        (root / sub).mkdir()
    for i in range(len(CUTS) - 1):
        lo, hi = CUTS[i], CUTS[i + 1]
        np.savez(root / "npz" / f"part-{i:02d}.npz", X=X[lo:hi], y=y[lo:hi])
        _write_parquet(root / "parquet" / f"part-{i:02d}.parquet", X[lo:hi], y[lo:hi])  # needs pyarrow
        with open(root / "svm" / f"part-{i:02d}.svm", "w") as fh:
            for r in range(lo, hi):
                fh.write(f"{y[r]:g} " + " ".join(f"{j}:{X[r, j]:.17g}" for j in range(X.shape[1])) + "\n")
    (root / "npz" / "_SUCCESS").write_text("")  # marker files are skipped
    np.savez(root / "all.npz", X=X, y=y)
    return root


def _write_parquet(path, X, y):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # the test of Parquet shards skips; the others run
        return

    cols = {f"f{j}": X[:, j] for j in range(X.shape[1])}
    cols["y"] = y
    pq.write_table(pa.table(cols), path, row_group_size=500)


def _run(**kw):
    import dpreg

    kw.setdefault("scaling", "none")
    kw.setdefault("seed", 11)
    return dpreg.run(**kw)


def _w(rec):
    return np.asarray(rec["release"]["model"]["weights"])


ALGOS = {"dp-sgd": {"steps": 40, "batch": 300}, "dp-gd": {"steps": 15},
         "dp-spider": {"steps": 12, "batch2": 400, "phase": 4}, "adaptive-spider": {"batch": 500}}


# ------------------------------------------------------------ reproducibility
@pytest.mark.slow  # the module's worker processes (started once, about 10-20 s on 2 busy cores)
@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_worker_processes_give_the_in_process_bits(cluster, remote, shards, algo):
    """The same seeded run, its shards held by this process, by the two
    worker processes of a LocalCluster, or by the two workers of a scheduler
    run as separate programs (neither worker holding every shard): the same
    weights bit for bit, the same privacy spent, within the budget."""
    kw = dict(algo=algo, data=str(shards / "npz"), params=ALGOS[algo], epsilon=1.0)
    loc = _run(**kw)
    assert loc["diagnostics"]["backend"]["backend"] == "local"
    pids_seen = set()
    for address in (cluster, remote):
        dsk = _run(**kw, backend="dask", scheduler=address)
        assert np.array_equal(_w(loc), _w(dsk)), address
        assert loc["release"]["privacy"] == dsk["release"]["privacy"]
        assert dsk["release"]["privacy"]["epsilon"] <= 1.0 + 1e-9
        be = dsk["diagnostics"]["backend"]
        assert be["backend"] == "dask" and be["workers"] == 2 and sorted(be["shards_per_worker"]) == [1, 2]
        assert be["records_per_shard"] == [900, 1700, 1400]
        assert be["traffic"]["calls"] >= dsk["diagnostics"]["usage"]["iterations"]
        pids = {m["pid"] for m in be["worker_memory"]}
        assert len(pids) == 2 and os.getpid() not in pids  # two processes, neither this one
        assert be["driver_memory"]["pid"] == os.getpid() and be["driver_memory"]["peak_rss"] > 0
        pids_seen |= pids
    assert len(pids_seen) == 4  # the two clusters' workers are four processes
    assert loc["diagnostics"]["metrics"]["train_accuracy"] > loc["diagnostics"]["baselines"]["train_majority_rate"]


@pytest.mark.slow  # the module's worker processes (started once, about 10-20 s on 2 busy cores)
@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_one_shard_gives_the_plain_run(cluster, shards, algo):
    """One shard is the plain problem: a seeded run on one .npz file through
    a worker process spends the same privacy, charged to the same accountant,
    as the ordinary in-memory run, and gives its weights - bit for bit, but
    for dp-sgd, whose in-memory run takes its steps in one compiled call
    (whose update the kernels' fastmath may contract): the same to rounding."""
    kw = dict(algo=algo, data=str(shards / "all.npz"), params=ALGOS[algo], epsilon=1.0)
    plain, dsk = _run(**kw), _run(**kw, scheduler=cluster)  # an address: the dask backend
    assert "backend" not in plain["diagnostics"] and dsk["diagnostics"]["backend"]["backend"] == "dask"
    assert plain["release"]["privacy"] == dsk["release"]["privacy"]
    assert dsk["release"]["privacy"]["epsilon"] <= 1.0 + 1e-9
    if algo == "dp-sgd":
        np.testing.assert_allclose(_w(plain), _w(dsk), rtol=0, atol=1e-12)
    else:
        assert np.array_equal(_w(plain), _w(dsk))


@pytest.mark.slow  # the module's worker processes (started once, about 10-20 s on 2 busy cores)
def test_private_scaling_from_shard_sums(cluster, shards):
    """--scaling private releases the same two noisy sums: on one shard the
    plain run's bits; on three shards the same scales up to rounding."""
    kw = dict(algo="dp-gd", params={"steps": 10}, scaling="private", epsilon=2.0)
    one = _run(data=str(shards / "all.npz"), **kw)
    assert np.array_equal(_w(one), _w(_run(data=str(shards / "all.npz"), backend="dask", scheduler=cluster, **kw)))
    three = _run(data=str(shards / "npz"), **kw)
    pa, pb = one["release"]["model"]["preprocessing"], three["release"]["model"]["preprocessing"]
    assert pa["feature_map"] == pb["feature_map"] == "private"
    np.testing.assert_allclose(pa["upper"], pb["upper"], rtol=1e-12)
    assert three["release"]["privacy"]["epsilon"] <= 2.0 + 1e-9


def test_parquet_and_npz_shards_train_the_same_model(shards):
    pytest.importorskip("pyarrow")
    kw = dict(algo="dp-sgd", params={"steps": 30, "batch": 200})
    assert np.array_equal(_w(_run(data=str(shards / "npz"), **kw)), _w(_run(data=str(shards / "parquet"), **kw)))
    glob = _run(data=str(shards / "parquet" / "part-*.parquet"), **kw)
    assert glob["release"]["config"]["shards"] == 3 and np.array_equal(_w(glob), _w(_run(data=str(shards / "npz"),
                                                                                          **kw)))


def test_initial_point_is_honoured_on_shards(data, tmp_path):
    """A given initial point (a warm start) starts a sharded run as it starts
    the run in one process: one shard, the same model bit for bit, and not
    the model of a run from the default start."""
    X, y = data
    (tmp_path / "one").mkdir()
    np.savez(tmp_path / "one" / "part.npz", X=X, y=y)
    np.savez(tmp_path / "all.npz", X=X, y=y)
    from dpreg.pipeline import RunConfig, run_pipeline

    def run(data, init=None):
        return run_pipeline(RunConfig(algo="dp-gd", data=str(data), params={"steps": 5}, epsilon=1.0, seed=11,
                                      scaling="none", init=init, warn=False, diagnostics=False))

    init = np.linspace(-0.5, 0.5, X.shape[1] + 1)
    warm = run(tmp_path / "one", init)
    assert np.array_equal(_w(warm), _w(run(tmp_path / "all.npz", init)))
    assert not np.array_equal(_w(warm), _w(run(tmp_path / "one")))


def test_svmlight_shards_need_their_schema_declared(shards):
    with pytest.raises(DataError, match="--features"):
        _run(algo="dp-gd", data=str(shards / "svm"), params={"steps": 5})
    rec = _run(algo="dp-gd", data=str(shards / "svm"), params={"steps": 15}, features=6, zero_based=True)
    assert rec["release"]["privacy"]["n"] == 4000
    m = rec["diagnostics"]
    assert m["metrics"]["train_accuracy"] > m["baselines"]["train_majority_rate"]


# ---------------------------------------------------------------- the problem
def _sharded(registry, X, y, cuts, loss="logistic"):
    from dpreg.backends.problem import ShardedProblem
    from dpreg.backends.shards import ShardOptions
    from dpreg.backends.workers import ArrayShard, LocalExecutor
    from dpreg.data import LabelMap
    from dpreg.preprocess import Preprocessing
    from dpreg.problem import Problem

    lossobj = registry.get("loss", loss)
    srcs = [ArrayShard(i, X[cuts[i]:cuts[i + 1]], y[cuts[i]:cuts[i + 1]]) for i in range(len(cuts) - 1)]
    ex = LocalExecutor(srcs, ShardOptions())
    ex.call("survey", [()])
    prep = Preprocessing(X.shape[1], "none", intercept=False)
    ex.call("prepare", [(prep, "binary", LabelMap(-1.0, 1.0, "fixed"), lossobj)])
    proto = Problem(lossobj, np.zeros((1, X.shape[1])), np.ones(1))
    return ShardedProblem(ex, lossobj, np.diff(cuts), X.shape[1], proto)


def test_sharded_sums_are_the_plain_sums(registry, rng):
    """Clipped sums, exact values, gradients, Hessian-vector products and
    Hessians over shards against the plain problem on the same records, for
    sorted, unsorted and repeated row numbers and the full batch."""
    from dpreg.problem import Problem

    n, d = 700, 5
    X = rng.standard_normal((n, d))
    X /= np.maximum(1, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(rng.random(n) < 0.4, -1.0, 1.0)
    cuts = (0, 100, 101, 450, 700)
    loss = "logistic-nonconvex-reg"  # a psi term: it enters every clipped term
    sp = _sharded(registry, X, y, cuts, loss)
    pb = Problem(registry.get("loss", loss), X, y)
    w, wp, v = rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal(d)
    batches = [None, np.sort(rng.choice(n, 200, replace=False)), rng.choice(n, 300, replace=True),
               np.arange(n), np.array([100]), np.array([], dtype=np.int64)]
    for idx in batches:
        for clip in (0.05, np.inf):
            a, ka = sp.clipped_grad_sum(w, idx, clip)
            b, kb = pb.clipped_grad_sum(w, idx, clip)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
            assert ka == kb
            a, ka = sp.clipped_diff_sum(w, wp, idx, clip)
            b, kb = pb.clipped_diff_sum(w, wp, idx, clip)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
            assert ka == kb
        if idx is not None and len(idx) == 0:
            continue
        assert sp.value(w, idx) == pytest.approx(pb.value(w, idx), rel=1e-12)
        np.testing.assert_allclose(sp.gradient(w, idx), pb.gradient(w, idx), rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(sp.hvp(w, v, idx), pb.hvp(w, v, idx), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(sp.hessian(w), pb.hessian(w), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(sp.hessian(w, clip=0.1), pb.hessian(w, clip=0.1), rtol=1e-11, atol=1e-13)
    H1, k1 = sp.clipped_hessian_sum(w, None, 0.1)
    H2, k2 = pb.clipped_hessian_sum(w, None, 0.1)
    np.testing.assert_allclose(H1, H2, rtol=1e-11, atol=1e-13) and k1 == k2
    assert sp.accuracy(w) == pytest.approx(np.mean(np.sign(X @ w) == y))
    assert sp.majority_rate() == pytest.approx(max(np.mean(y > 0), np.mean(y < 0)))
    assert not sp.sgd_steps_available(10) and not sp.spider_steps_available()


def test_one_shard_sums_are_the_plain_bits(registry, rng):
    from dpreg.problem import Problem

    X = rng.standard_normal((300, 4))
    X *= 0.9 / np.linalg.norm(X, axis=1).max()  # inside the unit ball: the preparation keeps every bit
    y = np.where(rng.random(300) < 0.5, -1.0, 1.0)
    sp = _sharded(registry, X, y, (0, 300))
    pb = Problem(registry.get("loss", "logistic"), X, y)
    w = rng.standard_normal(4)
    for idx in (None, np.arange(300), np.sort(rng.choice(300, 77, replace=False))):
        assert np.array_equal(sp.clipped_grad_sum(w, idx, 0.3)[0], pb.clipped_grad_sum(w, idx, 0.3)[0])


def test_routing_sends_local_rows_and_full_shards_as_none(registry, rng):
    X = rng.standard_normal((50, 3)) / 3
    y = np.ones(50)
    sp = _sharded(registry, X, y, (0, 10, 30, 50))
    parts, sizes = sp.route(np.array([0, 5, 12, 10, 10, 49]))
    got = {s: list(p) for s, p in parts[0].items()}
    assert got == {0: [0, 5], 1: [2, 0, 0], 2: [19]} and list(sizes) == [2, 3, 1]
    parts, sizes = sp.route(np.concatenate([np.arange(10, 30), [31]]))
    assert parts[0][1] is None and list(parts[0][2]) == [1] and 0 not in parts[0]
    assert parts[0][2].dtype == np.int32
    with pytest.raises(IndexError):
        sp.route(np.array([3, 50]))
    for bad in ("X", "y", "all_rows"):
        with pytest.raises(ParameterError, match="one process"):
            getattr(sp, bad)


# ------------------------------------------------------------------ the CLI
@pytest.mark.slow  # the module's worker processes (started once, about 10-20 s on 2 busy cores)
def test_cli_backend_dask_on_a_directory_of_shards(cluster, shards, tmp_path):
    """``dpreg run --algo dp-sgd --backend dask --data DIR`` writes the record
    the in-process run writes, bit for bit: on its own LocalCluster of two
    worker processes (started and stopped by the run) and on a running one."""
    from click.testing import CliRunner

    from dpreg.cli import cli

    args = ["run", "--algo", "dp-sgd", "--data", str(shards / "npz"), "--seed", "3", "--scaling", "none",
            "--param", "steps=25", "--param", "batch=250"]
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    r1 = CliRunner().invoke(cli, args + ["--out", str(a)])
    r2 = CliRunner().invoke(cli, args + ["--backend", "dask", "--workers", "2", "--out", str(b)])
    r3 = CliRunner().invoke(cli, args + ["--scheduler", cluster, "--out", str(c)])
    assert r1.exit_code == r2.exit_code == r3.exit_code == 0, r1.output + r2.output + r3.output
    ra, rb, rc = (json.loads(f.read_text()) for f in (a, b, c))
    assert ra["release"]["model"]["weights"] == rb["release"]["model"]["weights"] == rc["release"]["model"]["weights"]
    assert ra["diagnostics"]["backend"]["backend"] == "local"
    for r in (rb, rc):
        assert r["diagnostics"]["backend"]["workers"] == 2
    assert rb["diagnostics"]["backend"]["cluster"].startswith("LocalCluster") and "backend   dask" in r2.output
    assert "memory    peak GiB: driver" in r2.output


@pytest.mark.slow  # the module's worker processes (started once, about 10-20 s on 2 busy cores)
def test_sklearn_estimator_on_dask_workers(cluster, data):
    from dpreg.sklearn import DPClassifier

    X, y = data
    clf = DPClassifier(algorithm="dp-sgd", epsilon=1.0, random_state=0, backend="dask", scheduler=cluster,
                       workers=2, params={"steps": 60}, classes=(0.0, 1.0), diagnostics="light").fit(X, y)
    assert clf.score(X, y) > max(np.mean(y), 1 - np.mean(y)) + 0.1
    assert clf.record_["diagnostics"]["backend"]["workers"] == 2 and clf.get_params()["backend"] == "dask"
    assert clf.privacy_["epsilon"] <= 1.0 + 1e-9


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("kw, match", [
    (dict(algo="zo-o2nc"), "one process"),
    (dict(algo="dp-gd", select="exponential"), "--select"),
    (dict(algo="dp-gd", test_fraction=0.2), "--test-fraction"),
])
def test_refused_before_any_work(shards, kw, match):
    with pytest.raises(ParameterError, match=match):
        _run(data=str(shards / "npz"), **kw)


def test_privacy_warnings_point_at_the_caller(shards):
    """A sharded run's privacy warnings (seeded randomness, delta >= 1/n)
    are PrivacyWarnings attributed to the caller's line, as on one machine."""
    import warnings

    import dpreg

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(algo="dp-gd", data=str(shards / "npz"), params={"steps": 2}, delta=0.01, diagnostics=False)
    got = [w for w in caught if issubclass(w.category, dpreg.PrivacyWarning)]
    assert sorted("seeded" in str(w.message) for w in got) == [False, True], [str(w.message) for w in got]
    assert all(w.filename == __file__ for w in got)


def test_schema_and_label_errors_name_the_shard(shards, tmp_path):
    X = np.random.default_rng(0).standard_normal((20, 3))
    (tmp_path / "mixed").mkdir()
    np.savez(tmp_path / "mixed" / "a.npz", X=X, y=np.ones(20))
    (tmp_path / "mixed" / "b.svm").write_text("1 0:1\n")
    with pytest.raises(DataError, match="mix formats"):
        _run(algo="dp-gd", data=str(tmp_path / "mixed"))
    (tmp_path / "widths").mkdir()
    np.savez(tmp_path / "widths" / "a.npz", X=X, y=np.r_[np.ones(10), -np.ones(10)])
    np.savez(tmp_path / "widths" / "b.npz", X=X[:, :2], y=np.ones(20))
    with pytest.raises(DataError, match="different feature counts"):
        _run(algo="dp-gd", data=str(tmp_path / "widths"))
    (tmp_path / "labels").mkdir()
    np.savez(tmp_path / "labels" / "a.npz", X=X, y=np.r_[np.full(10, 3.0), np.full(10, 7.0)])
    with pytest.raises(DataError, match="--labels"):
        _run(algo="dp-gd", data=str(tmp_path / "labels"))
    with pytest.raises(DataError, match=r"a\.npz.*label 7 at record 11"):
        _run(algo="dp-gd", data=str(tmp_path / "labels"), labels="3,5")
    bad = X.copy()
    bad[4, 1] = np.nan
    (tmp_path / "nan").mkdir()
    np.savez(tmp_path / "nan" / "a.npz", X=bad, y=np.r_[np.ones(10), -np.ones(10)])
    with pytest.raises(DataError, match="record 5, column 2"):
        _run(algo="dp-gd", data=str(tmp_path / "nan"))
    with pytest.raises(DataError, match="no shard files"):
        _run(algo="dp-gd", data=str(tmp_path / "nan" / "*.parquet"))


@pytest.mark.slow  # the module's worker processes (started once, about 10-20 s on 2 busy cores)
def test_a_bad_shard_fails_on_its_worker_in_one_line(cluster, tmp_path):
    X = np.random.default_rng(0).standard_normal((20, 3))
    np.savez(tmp_path / "a.npz", X=X, y=np.r_[np.ones(10), -np.ones(10)])
    X[7, 2] = np.inf
    np.savez(tmp_path / "b.npz", X=X, y=np.r_[np.ones(10), -np.ones(10)])
    with pytest.raises(DataError) as exc:
        _run(algo="dp-gd", data=str(tmp_path), backend="dask", scheduler=cluster)
    assert "b.npz" in str(exc.value) and "record 8, column 3" in str(exc.value) and "\n" not in str(exc.value)


def test_bad_scheduler_address_fails_in_seconds(shards):
    """A scheduler that refuses, or that accepts and never answers, fails the
    run in one line within its connect timeout."""
    import socket
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections (the kernel's backlog), never speaks
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()
    try:
        for addr in (f"tcp://127.0.0.1:{refused}", f"tcp://127.0.0.1:{silent.getsockname()[1]}"):
            t0 = time.monotonic()
            with pytest.raises(DpregError) as exc:
                _run(algo="dp-gd", data=str(shards / "npz"), backend="dask", scheduler=addr, scheduler_timeout=2.0)
            assert time.monotonic() - t0 < 15
            assert "cannot reach the Dask scheduler" in str(exc.value) and "\n" not in str(exc.value)
    finally:
        silent.close()


def test_parquet_label_column_option_and_missing_values(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 3))
    cols = {"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "target": np.where(X[:, 0] > 0, 1.0, -1.0)}
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table(cols), tmp_path / "p" / "part-0.parquet")
    with pytest.raises(DataError, match="no label column 'y'.*label=NAME"):
        _run(algo="dp-gd", data=str(tmp_path / "p"), params={"steps": 3})
    rec = _run(algo="dp-gd", data=f"{tmp_path / 'p'}:label=target", params={"steps": 3})
    assert rec["release"]["model"]["n_features"] == 3
    b = pa.array([1.0, None] + [0.5] * 298)
    (tmp_path / "q").mkdir()
    pq.write_table(pa.table({"a": X[:, 0], "b": b, "y": cols["target"]}), tmp_path / "q" / "part-0.parquet")
    with pytest.raises(DataError, match="missing value in column 'b' at record 2"):
        _run(algo="dp-gd", data=str(tmp_path / "q"), params={"steps": 3})


@pytest.mark.slow  # loads the softmax and squared-loss kernels (5-12 s on 2 busy cores)
def test_k_classes_and_regression_on_shards(tmp_path):
    """Softmax on K declared classes and least squares on public target
    bounds run on sharded data (the maps and transforms applied where the
    records are); the classes are never inferred, nor the targets' bounds."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((1500, 4))
    k = np.argmax(X[:, :3], axis=1).astype(float) * 10  # classes 0, 10, 20
    t = X @ np.array([2.0, -1.0, 0.5, 0.0]) + 0.1 * rng.standard_normal(1500)
    for name, y in (("cls", k), ("reg", t)):
        (tmp_path / name).mkdir()
        for i, (lo, hi) in enumerate(((0, 600), (600, 1500))):
            np.savez(tmp_path / name / f"part-{i}.npz", X=X[lo:hi], y=y[lo:hi])
    rec = _run(algo="dp-gd", loss="softmax", labels="0,10,20", data=str(tmp_path / "cls"), params={"steps": 40},
               epsilon=4.0)
    assert rec["release"]["config"]["task"] == "multiclass"
    assert rec["release"]["model"]["label_map"]["classes"] == [0.0, 10.0, 20.0]
    m = rec["diagnostics"]
    assert m["metrics"]["train_accuracy"] > m["baselines"]["train_majority_rate"] + 0.2
    with pytest.raises(DataError, match="declare the classes"):
        _run(algo="dp-gd", loss="softmax", data=str(tmp_path / "cls"))
    reg = _run(algo="dp-gd", loss="squared", data=str(tmp_path / "reg"), target_bounds="-8,8", params={"steps": 40},
               epsilon=4.0)
    assert reg["release"]["config"]["task"] == "regression" and reg["release"]["model"]["target"]
    assert reg["diagnostics"]["metrics"]["train_loss"] < reg["diagnostics"]["baselines"]["train_loss_at_zero"]
    with pytest.raises(ParameterError, match="target-bounds"):
        _run(algo="dp-gd", loss="squared", data=str(tmp_path / "reg"))
