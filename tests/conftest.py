"""Shared fixtures.  Tests use small sizes; real data is read in place from
../shared/data when present (and those tests skip, saying so, when it is not)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the example third-party package's own tests run inside test_plugin_package.py,
#: with the package installed; they are not part of this suite's collection
collect_ignore = ["plugin_pkg"]
SHARED_DATA = ROOT.parent / "shared" / "data"

# parsed-data and kernel caches of the test session stay out of the user's cache, in a
# directory of their own that the session removes when it ends (a parsed IJCNN1 alone is
# 44 MB; nothing is left behind in /tmp, whatever the subprocesses)
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

if "DPREG_CACHE_DIR" not in os.environ:
    _SESSION_CACHE = tempfile.mkdtemp(prefix="dpreg-test-cache-")
    os.environ["DPREG_CACHE_DIR"] = _SESSION_CACHE
    atexit.register(shutil.rmtree, _SESSION_CACHE, True)



# ---------------------------------------------------------------- the checkout stays clean
#: what a test session may add to the checkout: interpreter, pytest, hypothesis and numba caches
#: (numba's *.nbi/*.nbc live in __pycache__), the editable install's metadata and the venv
SESSION_CACHES = ("__pycache__", ".pytest_cache", ".hypothesis", ".benchmarks", ".venv")


@pytest.fixture(autouse=True)
def _run_in_a_temporary_directory(tmp_path, monkeypatch):
    """Every test runs with a fresh temporary directory as its working
    directory: a command that writes its default output (``run.json``, a
    sweep folder, a plot) writes it there, never into the checkout."""
    monkeypatch.chdir(tmp_path)


def _checkout_state() -> set | None:
    """``git status --porcelain --ignored`` of the checkout (every changed,
    untracked or ignored path), or None outside a git checkout."""
    import subprocess

    try:
        p = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(p.stdout.splitlines()) if p.returncode == 0 else None


def new_in_checkout(before: set, after: set) -> list[str]:
    """Paths the session added to the checkout, session caches left out."""
    out = []
    for line in sorted(after - before):
        path = line[3:].strip('"')
        parts = path.rstrip("/").split("/")
        if any(p in SESSION_CACHES or p.endswith(".egg-info") for p in parts):
            continue
        out.append(path)
    return out


def pytest_sessionstart(session):
    session.config._dpreg_checkout = _checkout_state()


def pytest_sessionfinish(session, exitstatus):
    """Fail the session if a test wrote into the checkout (tests write under
    their temporary directory only)."""
    before = getattr(session.config, "_dpreg_checkout", None)
    after = _checkout_state() if before is not None else None
    if after is None:
        return
    new = new_in_checkout(before, after)
    if new:
        rep = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = (f"the test session wrote {len(new)} path(s) into the checkout (tests must write under "
               f"their temporary directory): {', '.join(new[:10])}")
        if rep is not None:
            rep.write_line(msg, red=True)
        else:
            print(msg)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def shared_file(name: str) -> Path:
    p = SHARED_DATA / name
    if not p.exists():
        pytest.skip(f"{p} not present (real data lives in ../shared/data beside the checkout)")
    return p


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def registry():
    from dpreg.registry import get_registry

    return get_registry()


def unit_rows(rng, n, d, scale=1.0):
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X * scale
