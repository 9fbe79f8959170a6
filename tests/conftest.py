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
# 44 MB; the directories used to stay behind in /tmp, one per session and subprocess)
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

if "DPREG_CACHE_DIR" not in os.environ:
    _SESSION_CACHE = tempfile.mkdtemp(prefix="dpreg-test-cache-")
    os.environ["DPREG_CACHE_DIR"] = _SESSION_CACHE
    atexit.register(shutil.rmtree, _SESSION_CACHE, True)



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
