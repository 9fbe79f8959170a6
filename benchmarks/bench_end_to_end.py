"""End-to-end measurements: ``dpreg run`` per registered algorithm on IJCNN1,
peak resident memory on 581,012 x 54, CLI start-up, and the first run's
compile time against a cold numba cache (second run: loaded from the cache).

Memory, start-up and compile run ``dpreg`` in subprocesses (what a user sees);
the per-algorithm runs call :func:`dpreg.pipeline.run_pipeline` in-process so
the record's timing breakdown is kept.  Rounds are few: these take seconds.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED_DATA

IJCNN1 = SHARED_DATA / "ijcnn1.trn.bz2"


def _dpreg():
    exe = Path(sys.executable).with_name("dpreg")
    return str(exe) if exe.exists() else shutil.which("dpreg")


def _algorithms():
    from dpreg.registry import get_registry

    return get_registry().names("algorithm")


# ------------------------------------------------------------ per algorithm
@pytest.mark.slow
@pytest.mark.parametrize("algo", _algorithms())
def test_e2e_ijcnn1(benchmark, algo):
    if not IJCNN1.exists():
        pytest.skip(f"{IJCNN1} not present")
    from dpreg.errors import DpregError
    from dpreg.pipeline import RunConfig, run_pipeline

    rec = {}

    def body():
        rec.update(run_pipeline(RunConfig(algo=algo, loss="sigmoid-l2", data=str(IJCNN1), epsilon=1.0, seed=0)))

    def guarded():
        try:
            body()
        except DpregError as exc:
            rec["skip"] = str(exc)

    benchmark.group = "e2e-ijcnn1"
    benchmark.pedantic(guarded, rounds=1, iterations=1)  # kernels come from numba's cache
    if "skip" in rec:
        pytest.skip(f"{algo} does not run with sigmoid-l2 on IJCNN1: {rec['skip']}")
    t = rec["diagnostics"]["timing"]
    benchmark.extra_info.update({
        "kind": "e2e", "algo": algo, "noise": rec["release"]["config"].get("noise"), "data_s": t["data_s"],
        "compile_s": t["compile_s"], "run_s": t["run_s"], "eval_s": t["eval_s"], "threads": t["threads"],
        "grad_evals": rec["diagnostics"]["usage"]["gradient_evaluations"],
    })
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 1.0 + 1e-9


# ------------------------------------------------------------------ memory
_RSS = r"""
import json, resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def peak_rss_mb(args, env=None) -> float:
    """Peak resident set size of one command (its own child of a fresh wrapper)."""
    res = subprocess.run([sys.executable, "-c", _RSS, *args], capture_output=True, text=True, env=env,
                         timeout=1800)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])["maxrss_kb"] / 1024.0


def test_peak_rss_covtype(benchmark, tmp_path):
    """dp-gd on synthetic-covtype (581,012 x 54, 251 MB): peak RSS minus the
    same command's peak on breast-cancer (interpreter, numba, scipy, sklearn)
    must stay within the data size + 100 MB: no (n x d) temporary anywhere."""
    n, d = 581_012, 54
    data_mb = n * d * 8 / 2**20
    cmd = [_dpreg(), "run", "--algo", "dp-gd", "--data", "synthetic-covtype", "--out", str(tmp_path / "c.json")]
    base_cmd = [_dpreg(), "run", "--algo", "dp-gd", "--data", "breast-cancer", "--out", str(tmp_path / "b.json")]
    out = {}

    def body():
        out["base"] = peak_rss_mb(base_cmd)
        out["peak"] = peak_rss_mb(cmd)

    benchmark.pedantic(body, rounds=1, iterations=1)
    excess = out["peak"] - out["base"] - data_mb
    benchmark.group = "memory"
    benchmark.extra_info.update({"kind": "rss", "command": "dpreg run --algo dp-gd --data synthetic-covtype",
                                 "peak_mb": out["peak"], "base_mb": out["base"], "data_mb": data_mb,
                                 "excess_mb": excess})
    assert excess <= 100.0, f"peak {out['peak']:.0f} MB = base {out['base']:.0f} + data {data_mb:.0f} + {excess:.0f} MB"


# ---------------------------------------------------------------- start-up
@pytest.mark.parametrize("args", [["--help"], ["list"]], ids=["help", "list"])
def test_startup(benchmark, args):
    cmd = [_dpreg(), *args]

    def body():
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

    benchmark.group = "startup"
    benchmark.extra_info.update({"kind": "startup", "command": "dpreg " + " ".join(args)})
    benchmark.pedantic(body, rounds=5, iterations=1, warmup_rounds=1)


# ----------------------------------------------------------------- compile
@pytest.mark.slow
def test_compile_cold_then_cached(benchmark, tmp_path):
    """The default pipeline (``dpreg run``) twice against an empty
    NUMBA_CACHE_DIR: the first run compiles every kernel it uses, the second
    loads them all from numba's cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    recs = []

    def run_once(k):
        out = tmp_path / f"run{k}.json"
        import time

        t0 = time.perf_counter()
        subprocess.run([_dpreg(), "run", "--out", str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        recs.append((wall, json.loads(out.read_text())["diagnostics"]["timing"]["compile_s"]))

    def body():
        recs.clear()
        shutil.rmtree(tmp_path / "numba-cache", ignore_errors=True)
        run_once(0)
        run_once(1)

    benchmark.pedantic(body, rounds=1, iterations=1)
    (cw, cc), (ww, wc) = recs
    benchmark.group = "compile"
    benchmark.extra_info.update({"kind": "compile", "command": "dpreg run", "cold_wall_s": cw,
                                 "cold_compile_s": cc, "warm_wall_s": ww, "warm_compile_s": wc})
    assert wc < cc
