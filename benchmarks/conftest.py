"""Shared fixtures of the pytest-benchmark suites (outside the test paths).

Run (timings on; the project's pytest options disable them by default):

    python -m pytest benchmarks --benchmark-enable --benchmark-json=bench.json
    python benchmarks/report.py bench.json > table.md

CI smoke-runs them with ``--benchmark-disable -k "not slow"``: every benchmark
body still executes once, so the suites cannot rot.

Data: ``ijcnn1`` is the real IJCNN1 training file (49,990 x 22) from
``../shared/data`` when present, else synthetic data of that shape; ``covtype``
(581,012 x 54) and ``d1000`` (100,000 x 1,000) are synthetic (Gaussian rows
scaled into the unit ball, +-1 labels).  ``DPREG_BENCH_SCALE`` (default 1)
divides the row counts, for a quick look.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
SCALE = max(1, int(os.environ.get("DPREG_BENCH_SCALE", "1")))

SIZES = {"ijcnn1": (49_990, 22), "covtype": (581_012, 54), "d1000": (100_000, 1_000)}


def pytest_collect_file(file_path, parent):
    """Collect ``bench_*.py`` (the benchmark files) besides pytest's defaults."""
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        if parent.session.isinitpath(file_path):
            return None  # named on the command line: pytest collects it itself
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def _synthetic(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.sqrt(d)
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    X /= np.maximum(norms, 1.0)[:, None]
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return X, y


_CACHE: dict = {}


def dataset(name: str):
    """(X, y, description) for a size name; generated or loaded once per session."""
    if name not in _CACHE:
        n, d = SIZES[name]
        n //= SCALE
        src = SHARED_DATA / "ijcnn1.trn.bz2"
        if name == "ijcnn1" and src.exists():
            from dpreg.data import Schema, load_file, prepare

            X, y, _ = load_file(str(src), Schema(22, False))
            X, y = prepare(X, y, labels="binary", where="ijcnn1", copy=False)
            X, y = X[:n].copy(), y[:n].copy()
            desc = f"IJCNN1 training file {X.shape[0]:,} x {X.shape[1]}"
        else:
            X, y = _synthetic(n, d, seed=sum(map(ord, name)))
            desc = f"synthetic {n:,} x {d:,}"
        _CACHE.clear()  # keep one large array alive at a time
        _CACHE[name] = (np.ascontiguousarray(X), np.ascontiguousarray(y), desc)
    return _CACHE[name]


@pytest.fixture(scope="session")
def registry():
    from dpreg.registry import get_registry

    return get_registry()


@pytest.fixture
def threads(request):
    """Set numba's thread count for one benchmark (restored afterwards)."""
    import numba

    before = numba.get_num_threads()
    want = request.param
    if want > numba.config.NUMBA_NUM_THREADS:
        pytest.skip(f"{want} threads requested, NUMBA_NUM_THREADS={numba.config.NUMBA_NUM_THREADS}")
    numba.set_num_threads(want)
    yield want
    numba.set_num_threads(before)


def machine() -> dict:
    """CPU model, cores and numba's threading layer (stored in each record)."""
    import platform

    info = {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info
