"""The hostile tester's cases, one command each, with what a careful user
expects of it: the exit status, a one-line error naming the problem (a
substring of it), and bounds on wall time and peak memory.  Replayed by
tests/test_hostile_cases.py, which asserts them.

Every case runs ``python -m dpreg ...`` (or ``python -c ...``) in a fresh
directory holding the files its ``setup`` writes; :func:`run_case` measures
the child's peak resident memory with ``os.wait4``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

WIDE_SVM = "\n".join(["1 1:0.5 3:1", "-1 2:1"] * 100 + ["1 10000000:1"]) + "\n"
GRID = ('algorithms = ["dp-gd"]\nepsilons = [1.0, 2.0]\ndata = ["synthetic-logistic:n=300,d=3"]\n'
        'diagnostics = "light"\n[params.dp-gd]\nsteps = 5\n')
SMALL = ["--algo", "dp-gd", "--data", "synthetic-logistic:n=400,d=4", "--param", "steps=3"]
#: seconds a refused request may take (start-up and loading included, on a busy machine)
QUICK_S = 90.0
#: peak memory of a refused request (the interpreter, numpy, scipy, numba and the data: ~0.2-0.5 GB)
SMALL_MB = 1200.0


@dataclass
class Case:
    name: str
    what: str                                   # the hostile input, in words
    argv: list                                  # after ``python``: ["-m", "dpreg", ...] or ["-c", code]
    code: int = 2                               # expected exit status
    says: tuple = ()                            # substrings of the last stderr line (the error)
    files: dict = field(default_factory=dict)   # name -> text written before the run
    max_s: float = QUICK_S
    max_mb: float = SMALL_MB
    needs: str = ""                             # a file under ../shared/data the case needs
    one_line: bool = True                       # stderr is exactly one line "error: ..."


def dpreg(*args) -> list:
    return ["-m", "dpreg", *map(str, args)]


def py(code: str) -> list:
    return ["-c", code]


SK_HUGE = ("import numpy as np, dpreg.errors as E\n"
           "from dpreg.sklearn import DPClassifier\n"
           "X = np.random.default_rng(0).standard_normal((200, 3)); y = (X[:, 0] > 0).astype(int)\n"
           "try:\n    DPClassifier(algorithm='dp-sgd', params={'steps': 10**12}, classes=(0, 1)).fit(X, y)\n"
           "except E.DpregError as exc:\n    import sys; print(f'error: {exc}', file=sys.stderr); sys.exit(2)\n")
RUN_STR = ("import dpreg, dpreg.errors as E, sys\n"
           "try:\n    dpreg.run(algo='dp-gd', data='synthetic-logistic:n=300,d=3', params='kappa=2')\n"
           "except E.DpregError as exc:\n    print(f'error: {exc}', file=sys.stderr); sys.exit(2)\n")

CASES = [
    Case("run-steps-1e12", "--param steps=1000000000000", dpreg("run", "--algo", "dp-sgd", "--param",
         "steps=1000000000000", "--out", "none"), says=("operations", "limit")),
    Case("run-steps-float", "--param steps=1e12 (an integer written as a float)",
         dpreg("run", "--algo", "dp-sgd", "--param", "steps=1e12", "--out", "none"), says=("expects an integer",)),
    Case("run-epochs-1e9", "dp-sgd --epochs 1e9", dpreg("run", "--algo", "dp-sgd", "--epochs", "1e9", "--out",
                                                         "none"), says=("operations",)),
    Case("run-epochs-1e9-default", "--epochs 1e9 (adaptive-spider: passes)",
         dpreg("run", "--epochs", "1e9", "--out", "none"), says=("operations",)),
    Case("sklearn-steps-1e12", "DPClassifier(params={'steps': 10**12}).fit", py(SK_HUGE), says=("operations",)),
    Case("run-mlp-hidden-1e9", "--loss mlp:hidden=1000000000",
         dpreg("run", "--loss", "mlp:hidden=1000000000", "--out", "none"), says=("memory",)),
    Case("audit-trials-1e12", "dpreg audit --trials 1000000000000",
         dpreg("audit", "--noise", "gaussian", "--trials", "1000000000000"), says=("trials must be at most",)),
    Case("run-wide-svmlight", "a 2 kB svmlight file with one index at 10^7",
         dpreg("run", "--algo", "dp-sgd", "--data", "wide.svm"), files={"wide.svm": WIDE_SVM},
         says=("10,000,000 features", "--features")),
    Case("python-run-params-string", "dpreg.run(params='kappa=2')", py(RUN_STR), says=("params must be a dict",)),
    Case("run-quiet-first", "dpreg -q run", dpreg("-q", "run", *SMALL, "--out", "none"), code=0, one_line=False),
    Case("run-threads-999", "--threads 999", dpreg("run", *SMALL, "--threads", "999", "--out", "none"), code=0,
         one_line=False, says=()),
    Case("run-toml-bom", "--config with a UTF-8 byte-order mark",
         dpreg("run", "-q", "--config", "bom.toml", "--out", "none"), code=0, one_line=False,
         files={"bom.toml": "\ufeffalgo = \"dp-gd\"\ndata = \"synthetic-logistic:n=400,d=4\"\n[params]\nsteps = 3\n"}),
    Case("run-csv-label-last", "a CSV whose label is its last column",
         dpreg("run", "--algo", "dp-gd", "--data", "last.csv", "--out", "none"),
         files={"last.csv": "a,b,label\n" + "".join(f"0,{i / 10:.1f},{i % 2}\n" for i in range(10))},
         says=("one class only", "FIRST column")),
    Case("sweep-param-typo", "a typo in [params]", dpreg("sweep", "g.toml", "--out-dir", "out"),
         files={"g.toml": GRID.replace("steps = 5", "stepz = 5")}, says=("stepz",)),
    Case("sweep-missing-file", "a data file that is not there", dpreg("sweep", "g.toml", "--out-dir", "out"),
         files={"g.toml": GRID.replace('"synthetic-logistic:n=300,d=3"', '"missing.svm"')}, says=("missing.svm",)),
    Case("sweep-dataset-option-typo", "a data-set option typo (N=300)", dpreg("sweep", "g.toml", "--out-dir", "out"),
         files={"g.toml": GRID.replace("n=300,d=3", "N=300")}, says=("bad options",)),
    Case("sweep-huge-grid", "a grid of 2*10^7 cells", dpreg("sweep", "g.toml", "--out-dir", "out"),
         files={"g.toml": GRID.replace("epsilons = [1.0, 2.0]", "epsilons = [1.0, 2.0]\nreplicates = 10000000")},
         says=("at most 100,000",)),
    Case("sweep-read-only-dir", "--out-dir on a file system that refuses writes",
         dpreg("sweep", "g.toml", "--out-dir", "/proc/dpreg-sweep"), files={"g.toml": GRID},
         says=("cannot create the sweep folder",)),
    Case("sweep-all-cells-fail", "every cell fails while it runs (a noise multiplier over the budget)",
         dpreg("sweep", "g.toml", "--workers", "1", "--out-dir", "out"),
         files={"g.toml": GRID.replace("steps = 5", "steps = 5\nnoise_multiplier = 0.01")}, code=1,
         one_line=False, says=("2 of 2 cells failed",)),
    Case("sweep-scheduler-not-a-port", "--scheduler tcp://127.0.0.1:notaport",
         dpreg("sweep", "g.toml", "--out-dir", "out", "--scheduler", "tcp://127.0.0.1:notaport"),
         files={"g.toml": GRID}, says=("cannot reach the Dask scheduler",)),
    Case("sweep-scheduler-refused", "--scheduler on a closed local port",
         dpreg("sweep", "g.toml", "--out-dir", "out", "--scheduler", "tcp://127.0.0.1:9"),
         files={"g.toml": GRID}, says=("cannot reach the Dask scheduler",)),
    Case("run-scheduler-not-a-port", "dpreg run --backend dask --scheduler tcp://127.0.0.1:notaport",
         dpreg("run", *SMALL, "--backend", "dask", "--scheduler", "tcp://127.0.0.1:notaport", "--out", "none"),
         says=("cannot reach the Dask scheduler",), max_s=60.0),
    Case("run-scheduler-refused", "dpreg run --backend dask --scheduler on a closed local port",
         dpreg("run", *SMALL, "--backend", "dask", "--scheduler", "tcp://127.0.0.1:9", "--out", "none"),
         says=("cannot reach the Dask scheduler",), max_s=60.0),
    Case("predict-readme-adult-model-on-ijcnn1", "README: adult's model predicting IJCNN1 (22 of 123 features)",
         dpreg("predict", "adult-model.json", "--data", str(Path(__file__).resolve().parents[2] / "shared" / "data"
                                                              / "ijcnn1.tst.bz2")),
         needs="ijcnn1.tst.bz2", says=("but the model has 123",)),
]


def data_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def env_for(checkout: Path | None = None) -> dict:
    """The environment of a case: this interpreter's, or ``checkout``'s
    modules first on PYTHONPATH (to replay the cases against another tree)."""
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(checkout / p) for p in ("", "kernels", "plugins"))
    return env


def run_case(argv: list, cwd: Path, *, timeout: float, env: dict | None = None) -> dict:
    """Run ``python *argv`` in ``cwd``: exit status (None if killed at
    ``timeout``), seconds, peak resident MB (``os.wait4``), stdout, stderr."""
    t0 = time.perf_counter()
    with open(cwd / ".stdout", "w+") as out, open(cwd / ".stderr", "w+") as err:
        p = subprocess.Popen([sys.executable, *argv], cwd=cwd, stdout=out, stderr=err, env=env,
                             start_new_session=True)
        killed = False
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(p.pid, 0)
                killed = True
                break
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {"code": None if killed else p.returncode, "s": time.perf_counter() - t0,
                "mb": usage.ru_maxrss / 1024.0, "stdout": out.read(), "stderr": err.read()}


def prepare(case: Case, cwd: Path, env: dict | None = None) -> str | None:
    """Write the case's files into ``cwd`` (and what it needs: a model of the
    shipped adult set); the reason it cannot run here, or None."""
    if case.needs and not (data_dir() / case.needs).exists():
        return f"{data_dir() / case.needs} not present"
    for name, text in case.files.items():
        (cwd / name).write_text(text, encoding="utf-8")
    if "adult-model.json" in case.argv:
        r = run_case(dpreg("run", "-q", "--algo", "dp-gd", "--param", "steps=3", "--no-diagnostics",
                           "--out", "adult-model.json"), cwd, timeout=600, env=env)
        if r["code"] != 0:
            return f"could not train the adult model: {r['stderr'][-300:]}"
    return None


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def children(pid: int) -> list[int]:
    """Live (not zombie) child processes of ``pid`` (Linux /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(d))
    return out


def alive(pids: list[int]) -> list[int]:
    live = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    live.append(p)
        except OSError:
            pass
    return live


LONG_GRID = ('algorithms = ["dp-gd"]\nepsilons = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]\n'
             'data = ["synthetic-logistic:n=4000,d=20"]\ndiagnostics = "light"\n[params.dp-gd]\nsteps = 4000\n')


def sweep_signal(cwd: Path, sig: int, *, env: dict | None = None, wait_s: float = 120.0) -> dict:
    """Start a 2-worker sweep of long cells, send ``sig`` once both workers
    run, and report: exit status, seconds from the signal to the exit, the
    workers still alive 5 s later, the last stderr line and whether the table
    was written."""
    (cwd / "long.toml").write_text(LONG_GRID)
    with open(cwd / ".stderr", "w+") as err:
        p = subprocess.Popen([sys.executable, *dpreg("sweep", "long.toml", "--workers", "2", "--out-dir", "out")],
                             cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
        t0 = time.perf_counter()
        workers: list = []
        while time.perf_counter() - t0 < wait_s and p.poll() is None and len(children(p.pid)) < 2:
            time.sleep(0.5)
        time.sleep(3.0)
        workers = children(p.pid)
        ts = time.perf_counter()
        p.send_signal(sig)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        after = time.perf_counter() - ts
        time.sleep(5.0)
        left = alive(workers)
        for w in left:  # never leave them behind, whatever the code under test does
            try:
                os.kill(w, signal.SIGKILL)
            except OSError:
                pass
        err.seek(0)
        return {"code": p.returncode, "s": after, "workers": len(workers), "left": len(left),
                "last": last_line(err.read()), "table": (cwd / "out" / "results.csv").exists()}


def concurrent_out(cwd: Path, k: int = 4, *, env: dict | None = None) -> dict:
    """``k`` runs started together with the same ``--out``: the record files
    they name and the files there afterwards."""
    procs = [subprocess.Popen([sys.executable, *dpreg("run", *SMALL, "--out", "r.json")], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(k)]
    named = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        named += [ln.split()[-1] for ln in out.splitlines() if ln.startswith("record")]
    files = sorted(f.name for f in cwd.glob("r*.json"))
    return {"named": named, "files": files, "codes": [p.returncode for p in procs]}


def make_record(cwd: Path, name: str = "rec.json", env: dict | None = None) -> Path:
    r = run_case(dpreg("run", "-q", *SMALL, "--out", name), cwd, timeout=600, env=env)
    assert r["code"] == 0, r["stderr"]
    return cwd / name


def tamper(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    import json

    rec = json.loads(src.read_text())
    edit(rec)
    dst.write_text(json.dumps(rec))
    return dst


#: edits of a record's privacy statement that make an impossible claim
TAMPER = {
    "epsilon=-5": lambda r: r["release"]["privacy"].__setitem__("epsilon", -5),
    "epsilon=NaN": lambda r: r["release"]["privacy"].__setitem__("epsilon", float("nan")),
    "delta=7": lambda r: r["release"]["privacy"].__setitem__("delta", 7),
}
