"""The JSON run record and its atomic writing."""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from importlib import metadata

import numpy as np

from .errors import DpregError

_VERSIONED = ("dpreg", "numpy", "scipy", "numba", "llvmlite", "pluggy", "click", "scikit-learn", "dp-accounting")


def versions() -> dict:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in _VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.ndarray):
        return _jsonable(o.tolist())
    if isinstance(o, (np.floating, float)):
        f = float(o)
        return f if np.isfinite(f) else str(f)
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    return o


def to_json(record: dict) -> str:
    return json.dumps(_jsonable(record), indent=2, sort_keys=False)


def check_writable(path: str) -> None:
    """Fail early (before a run) if ``path`` cannot be written."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(d):
        raise DpregError(f"output directory does not exist: {d}")
    if os.path.isdir(path):
        raise DpregError(f"output path is a directory: {path}")
    if not os.access(d, os.W_OK):
        raise DpregError(f"output directory is not writable: {d}")


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename: a reader sees
    the whole record or nothing, and a failure leaves no partial file."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".dpreg-", suffix=".json.tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
