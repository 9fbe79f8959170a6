"""The JSON run record and its atomic writing (:func:`write_atomic`; cache
entries are written with ``private=True``: mode 0600 from creation)."""
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


def jsonable(o):
    """``o`` with numpy scalars and arrays as plain Python values (dicts, lists,
    floats, ints, bools), non-finite floats as strings: what ``json`` writes."""
    if isinstance(o, dict):
        return {str(k): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    if isinstance(o, np.ndarray):
        return jsonable(o.tolist())
    if isinstance(o, (np.floating, float)):
        f = float(o)
        return f if np.isfinite(f) else str(f)
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    return o


def to_json(record: dict) -> str:
    return json.dumps(jsonable(record), indent=2, sort_keys=False)


def check_writable(path: str) -> None:
    """Fail early (before a run) if ``path`` cannot be written: its directory
    must exist and accept a new file (tried for real, so read-only mounts and
    pseudo file systems such as /proc are caught), and an existing ``path``
    must be a regular file (a device, fifo or directory is never replaced)."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(d):
        raise DpregError(f"output directory does not exist: {d}")
    if os.path.lexists(path) and not os.path.isfile(path):
        kind = "a directory" if os.path.isdir(path) else "not a regular file"
        raise DpregError(f"output path {path} is {kind}; dpreg only writes regular files "
                         f"(use --out none to write no record)")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".dpreg-check-", dir=d)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise DpregError(f"cannot write to {d}: {exc.strerror or exc}") from None


def free_name(path: str) -> str:
    """``path`` if nothing is there, else the first free ``<stem>-N<suffix>``
    (N = 1, 2, ...): a new run never replaces an earlier record silently."""
    if not os.path.lexists(path):
        return path
    stem, suffix = os.path.splitext(path)
    k = 1
    while os.path.lexists(f"{stem}-{k}{suffix}"):
        k += 1
    return f"{stem}-{k}{suffix}"


def write_new(path: str, text) -> str:
    """Write ``text`` (as :func:`write_atomic`) to ``path``, or to the first
    free ``<stem>-N<suffix>`` when a file is there, and return the name
    written; an existing file is never replaced, even by a concurrent writer.
    The whole text goes to a temporary file in the same directory that is
    then hard-linked to the name (``link`` fails when the name exists, so two
    processes never get the same name and a reader never sees a partial
    file).  Where the file system has no hard links, the name is reserved
    with ``O_CREAT | O_EXCL`` and the temporary file renamed onto it."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".dpreg-", suffix=".tmp", dir=d)  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.write("\n")
        os.chmod(tmp, 0o666 & ~_umask())
        stem, suffix = os.path.splitext(path)
        k = 0
        while True:
            name = path if k == 0 else f"{stem}-{k}{suffix}"
            try:
                os.link(tmp, name)
                return name
            except FileExistsError:
                k += 1
            except OSError:  # no hard links here (some network or FAT file systems): reserve, then rename
                try:
                    os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                except FileExistsError:
                    k += 1
                    continue
                os.replace(tmp, name)
                return name
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def write_atomic(path: str, text, *, private: bool = False) -> None:
    """Write ``text`` (a str, written with a final newline, or a function
    that writes bytes to the binary file object it is given) to ``path`` via a
    temporary file and rename: a reader sees the whole file or nothing, and a
    failure leaves no partial file.  A replaced file keeps its permission bits
    (a new one gets 0666 less the umask), except with ``private=True``: the
    file is then 0600 from its creation (``mkstemp``'s mode, never widened) to
    its rename.  A non-regular file is never replaced (DpregError)."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    mode = None
    if os.path.lexists(path):
        if not os.path.isfile(path):
            raise DpregError(f"output path {path} is not a regular file; not replacing it")
        mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=".dpreg-", suffix=".tmp", dir=d)  # created 0600
    try:
        if callable(text):
            with os.fdopen(fd, "wb") as fh:
                text(fh)
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.write("\n")
        if not private:
            os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def read_json(path: str, what: str):
    """The JSON document at ``path``; a one-line DpregError naming ``what``
    (e.g. "model", "record") when it is missing, unreadable or not JSON."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise DpregError(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        msg = (exc.strerror if isinstance(exc, OSError) else None) or str(exc).splitlines()[0]
        raise DpregError(f"cannot read {what} {path}: {msg}") from None
