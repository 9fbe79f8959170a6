"""Start-up and compile-cache facts (timings live in benchmarks/).

* ``dpreg --help`` and ``dpreg list`` import no numba, llvmlite or kernels
  (that is what keeps them fast);
* after one warm-up run, a fresh process running the default pipeline compiles
  nothing: every kernel and every loss scalar comes from numba's on-disk cache
  (counted with numba's ``numba:compile`` events, which fire only on a cache
  miss, and the dispatchers' cache-hit statistics).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

_IMPORTS = textwrap.dedent("""
    import json, sys
    from dpreg.cli import main
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite", "dpreg_kernels"))
    print(json.dumps(heavy))
""")


@pytest.mark.parametrize("args", [["--help"], ["list"], ["list", "loss"]])
def test_cli_help_and_list_import_no_numba(args):
    res = subprocess.run([sys.executable, "-c", _IMPORTS, *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    heavy = json.loads(res.stdout.strip().splitlines()[-1])
    assert heavy == [], f"dpreg {' '.join(args)} imported {heavy[:5]}"


_CACHED_RUN = textwrap.dedent("""
    import json
    from numba.core import event as ev
    from numba.core.dispatcher import Dispatcher
    with ev.install_recorder("numba:compile") as rec:
        from dpreg.pipeline import RunConfig, run_pipeline
        from dpreg.registry import get_registry
        out = run_pipeline(RunConfig(seed=0, data="breast-cancer"))  # small: serial kernels only
        # the O2 kernel and the evaluation kernels too, for every loss's scalars
        import numpy as np
        from dpreg.problem import Problem
        reg = get_registry()
        rng = np.random.default_rng(0)
        X = rng.standard_normal((40, 3)) / 3
        for name in reg.names("loss"):
            loss = reg.get("loss", name)
            if getattr(loss, "make_problem", None) is not None:  # not a linear model (mlp)
                continue
            y = np.where(rng.random(40) < .5, 1.0, -1.0) if loss.labels == "binary" else rng.random(40)
            pb = Problem(loss, X, y)
            w = np.full(3, 0.1)
            pb.clipped_grad_sum(w, None, 1.0); pb.clipped_grad_sum(w, np.arange(5), 1.0)
            pb.clipped_diff_sum(w, 2 * w, None, 1.0); pb.value(w); pb.hvp(w, w); pb.hessian(w, clip=1.0)
    import dpreg_kernels.linear_model as K
    # the variants this process used (small problems: the serial ones)
    hits = {f"{n}/{'parallel' if par else 'serial'}": sum(disp.stats.cache_hits.values())
            for n in ("grad_sum", "diff_sum", "row_sqnorms", "phi_sum", "hvp_sum", "clipped_hessian_sum")
            for par, disp in getattr(K, n).compiled().items()}
    compiled = [str(getattr(e.data.get("dispatcher"), "py_func", e.data.get("dispatcher"))) for _, e in rec.buffer
                if e.is_start]
    print(json.dumps({"compiled": compiled, "hits": hits, "compile_s": out["diagnostics"]["timing"]["compile_s"]}))
""")


def _run_cached(env):
    res = subprocess.run([sys.executable, "-c", _CACHED_RUN], capture_output=True, text=True, timeout=900,
                         env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_second_run_loads_every_kernel_from_cache(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    first = _run_cached(env)    # cold cache: compiles
    assert first["compiled"], "a cold cache must compile (the count works)"
    # small data, small batches: serial kernels only, no parallel variant compiled (first-run time)
    assert first["hits"] and all(k.endswith("/serial") for k in first["hits"]), first["hits"]
    names = {c.split(" ")[1] for c in first["compiled"] if c.startswith("<function ")}
    assert not names & {"_clipped_sum", "_row_sqnorms", "_phi_sum", "_hvp_sum"}, names
    second = _run_cached(env)
    assert second["compiled"] == [], f"recompiled in a fresh process: {second['compiled'][:5]}"
    assert len(second["hits"]) >= 6 and all(v >= 1 for v in second["hits"].values()), second["hits"]


_READ_ONLY = textwrap.dedent("""
    import json, os, sys
    # simulate a read-only install: the package directories report "not writable"
    real_access = os.access
    ro = ("dpreg_kernels", "dpreg_plugins")
    os.access = lambda p, mode, **kw: (False if mode & os.W_OK and any(r in str(p) for r in ro)
                                       else real_access(p, mode, **kw))
    from numba.core import event as ev
    import dpreg_kernels
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    with ev.install_recorder("numba:compile") as rec:
        import numpy as np
        from dpreg.problem import Problem
        from dpreg.registry import get_registry
        rng = np.random.default_rng(0)
        X = rng.standard_normal((30, 3)) / 3
        y = np.where(rng.random(30) < .5, 1.0, -1.0)
        pb = Problem(get_registry().get("loss", "logistic"), X, y)
        g = pb.clipped_grad_sum(np.full(3, 0.1), np.arange(7), 0.5)[0]
    print(json.dumps({"cache_dir": chosen, "compiled": len([e for _, e in rec.buffer if e.is_start]),
                      "g": g.tolist()}))
""")


def test_read_only_install_caches_in_user_dir(tmp_path):
    """Package directories not writable and NUMBA_CACHE_DIR unset: dpreg points
    numba's cache at the user cache directory before numba is imported, so a
    second process compiles nothing."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DPREG_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    runs = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", _READ_ONLY], capture_output=True, text=True, timeout=900,
                             env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    want = str(tmp_path / "xdg" / "dpreg" / "numba")
    assert runs[0]["cache_dir"] == runs[1]["cache_dir"] == want
    assert runs[0]["compiled"] > 0 and runs[1]["compiled"] == 0, runs
    assert any(p.suffix == ".nbi" for p in (tmp_path / "xdg").rglob("*"))
    assert runs[0]["g"] == runs[1]["g"]


def test_read_only_install_without_writable_home_falls_back_to_tmp(tmp_path):
    """Hostile case: read-only install, no writable HOME, no XDG
    cache: the run does not crash on numba's "no locator available"; kernels
    are cached in a per-user temporary directory (0700, this user's: see
    tests/test_cache_privacy.py), announced in one line."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where HOME should be a directory")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DPREG_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(blocker / "home")  # makedirs fails under a regular file, even for root
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    res = subprocess.run([sys.executable, "-c", _READ_ONLY], capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["cache_dir"].startswith(str(tmp_path / "tmp" / "dpreg-cache-")), out
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("dpreg: no private cache directory")]
    assert len(notes) == 1 and out["cache_dir"] in notes[0], res.stderr
    assert "Traceback" not in res.stderr
    assert out["compiled"] > 0 and any(p.suffix == ".nbi" for p in (tmp_path / "tmp").rglob("*"))


def test_writable_install_leaves_numba_cache_dir_alone(tmp_path):
    code = "import os, dpreg_kernels; print(os.environ.get('NUMBA_CACHE_DIR'))"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and res.stdout.strip() == "None", res.stderr


_BLOCK_CACHE = """
from dpreg_kernels import compile_block
from dpreg_kernels.loss_blocks import logistic_dphi
f = compile_block(logistic_dphi)
print(sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values()))
"""


def test_a_change_in_another_kernel_module_makes_the_cache_stale(tmp_path):
    """numba checks a cached function against its own file only; the kernels link code
    from other modules (here the logistic block derivative, in loss_blocks.py, calls
    vmath.exp_nonpos).  After vmath.py changes, the block derivative must recompile
    instead of loading its cached machine code with the old exp in it."""
    import shutil

    import dpreg_kernels

    pkg = tmp_path / "k" / "dpreg_kernels"
    shutil.copytree(os.path.dirname(dpreg_kernels.__file__), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "k"), "NUMBA_CACHE_DIR": str(tmp_path / "nc")}

    def run():
        res = subprocess.run([sys.executable, "-c", _BLOCK_CACHE], capture_output=True, text=True, timeout=600,
                             env=env, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
        return tuple(int(v) for v in res.stdout.split()[-2:])

    assert run() == (0, 1)          # compiled
    assert run() == (1, 0)          # loaded from the cache
    with open(pkg / "vmath.py", "a") as f:
        f.write("\n# a change elsewhere in the package\n")
    assert run() == (0, 1)          # compiled again, not loaded with the old exp
