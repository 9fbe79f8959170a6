"""Failure semantics of the data-parallel backend (docs/scale-out.md): a
worker process killed in the middle of a run fails the run with one line and
writes nothing - no record, no epsilon for an unfinished model - and leaves an
existing record as it was.  The module's own LocalCluster (two worker
processes on 127.0.0.1): a killed worker is restarted by its nanny, which the
other modules' clusters never see."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from dpreg.errors import DpregError

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, env={"NUMBA_NUM_THREADS": "1"}) as c:
        yield c.scheduler_address


@pytest.mark.slow  # two worker processes, one of them killed (10-20 s on 2 busy cores)
def test_killed_worker_fails_the_run_in_one_line_and_writes_nothing(cluster, tmp_path):
    from dpreg.pipeline import RunConfig, run_pipeline

    rng = np.random.default_rng(3)
    for i in range(2):
        X = rng.standard_normal((500, 4))
        np.savez(tmp_path / f"part-{i}.npz", X=X, y=np.where(X[:, 0] > 0, 1.0, -1.0))
    out = tmp_path / "run.json"
    out.write_text("the previous record\n")
    killed = {}

    def kill_at_step_5(step, total):
        if step == 5 and not killed:
            with distributed.Client(cluster, set_as_default=False) as c:
                pids = c.run(os.getpid)
            victim = sorted(pids)[1]
            killed[victim] = pids[victim]
            os.kill(pids[victim], signal.SIGKILL)

    cfg = RunConfig(algo="dp-gd", data=str(tmp_path / "*.npz"), params={"steps": 400}, seed=0, scaling="none",
                    backend="dask", scheduler=cluster, out=str(out), progress=kill_at_step_5)
    with pytest.raises(DpregError) as exc:
        run_pipeline(cfg)
    msg = str(exc.value)
    assert killed and "\n" not in msg
    assert "was lost" in msg and "no record written" in msg and next(iter(killed)) in msg
    assert out.read_text() == "the previous record\n"  # the old record stands; nothing new was written
    assert sorted(os.listdir(tmp_path)) == ["part-0.npz", "part-1.npz", "run.json"]  # no partial file either
