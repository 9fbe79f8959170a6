"""The user data cache: where dpreg keeps what it derives from a data set to
save time on the next run - the parsed arrays of svmlight files
(``svmlight/``, :mod:`dpreg.svmlight`) and the diagnostics' non-private
optima (``optima/``, :func:`dpreg.pipeline.nonprivate_optimum`).

The directory is ``$DPREG_CACHE_DIR``, else ``$XDG_CACHE_HOME/dpreg``, else
``~/.cache/dpreg``; ``DPREG_DATA_CACHE=0`` disables these caches (nothing
read or written).  Everything in it is a function of the data: keep it with
the data's own confidentiality.  Entries are keyed by content, written
atomically, and an unreadable entry is recomputed; an unwritable directory
only costs the speed-up.  (Compiled kernels go to ``<root>/numba`` only when
the install is read-only: :mod:`dpreg_kernels`.)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def cache_root() -> Path | None:
    """The user data cache directory, or None when disabled (``DPREG_DATA_CACHE=0``)."""
    if os.environ.get("DPREG_DATA_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    from dpreg_kernels import user_cache_roots  # the one order of cache directories, shared with the kernels'

    return Path(user_cache_roots()[0])


def store(file: Path, write: Callable) -> bool:
    """Write a cache entry through ``write(binary file object)`` with
    :func:`dpreg.results.write_atomic` (a reader never sees a partial entry),
    creating its directory; False (and nothing left behind) when the
    directory cannot be created or written."""
    from .errors import DpregError
    from .results import write_atomic as replace_atomically

    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(str(file), write)
        return True
    except (OSError, DpregError):
        return False
