"""The user data cache: where dpreg keeps what it derives from a data set to
save time on the next run - the parsed arrays of svmlight files
(``svmlight/``, :mod:`dpreg.svmlight`) and the diagnostics' non-private
optima (``optima/``, :func:`dpreg.pipeline.nonprivate_optimum`).

The directory is ``$DPREG_CACHE_DIR``, else ``$XDG_CACHE_HOME/dpreg``, else
``~/.cache/dpreg``.

Privacy.  A parsed copy of a data file, or the non-private optimum of a data
set, is as private as the data.  So:

* **what is kept** (``DPREG_DATA_CACHE``): by default only what dpreg derives
  from *public* data - the data sets that declare themselves public (those
  shipped with dpreg or generated: ``adult``, ``breast-cancer``, the
  ``synthetic-*`` sets; :attr:`dpreg.data.DatasetSource.public`).  Nothing is
  kept for the user's own files and arrays unless ``DPREG_DATA_CACHE=1`` opts
  in: a copy then stays readable by its owner until removed from the cache,
  whatever later happens to the original file (deleted, its permissions
  narrowed).  ``DPREG_DATA_CACHE=0`` keeps nothing at all.
* **who can read it**: every directory is created with mode 0700 and every
  entry with 0600, from the start (``os.mkdir(p, 0o700)``; ``mkstemp`` then
  an atomic rename, never a chmod after the fact).  A cache directory owned by
  another user, or open to group or others (0755, as an older dpreg left it),
  is refused: one :class:`~dpreg.errors.PrivacyWarning` naming it, and the
  cache is off for the process; dpreg never adopts or changes such a
  directory.

Entries are keyed by content, written atomically, and an unreadable entry is
recomputed; an unusable directory only costs the speed-up.  (Compiled
kernels go to ``<root>/numba`` only when the install is read-only, under the
same ownership rule: :func:`dpreg_kernels.cache_fallback`.)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

#: values of DPREG_DATA_CACHE
_OFF = ("0", "false", "no", "off")
_ALL = ("1", "true", "yes", "on", "all")
_warned: set = set()


def data_cache_mode() -> str:
    """``"off"`` (``DPREG_DATA_CACHE=0``), ``"all"`` (``=1``: the user's own
    data too, opted in) or ``"public"`` (unset: public data sets only)."""
    v = os.environ.get("DPREG_DATA_CACHE", "").strip().lower()
    return "off" if v in _OFF else "all" if v in _ALL else "public"


def cache_root(*, public: bool) -> Path | None:
    """The user data cache directory for an entry derived from public data
    (``public=True``) or from the user's own data, or None when such entries
    are not kept (:func:`data_cache_mode`) or the directory is refused
    (:func:`safe_dir`)."""
    mode = data_cache_mode()
    if mode == "off" or (mode == "public" and not public):
        return None
    from dpreg_kernels import user_cache_roots  # the one order of cache directories, shared with the kernels'

    return safe_dir(Path(user_cache_roots()[0]))


def safe_dir(path: Path) -> Path | None:
    """``path``, created 0700 if missing (:func:`dpreg_kernels.private_dir`), or
    None - with one PrivacyWarning per directory and process - when it is
    another user's, open to group/others, or cannot be created."""
    from dpreg_kernels import private_dir

    why = private_dir(str(path))
    if why is None:
        return path
    if str(path) not in _warned:
        import warnings

        from .errors import PrivacyWarning

        _warned.add(str(path))
        warnings.warn(f"data cache off: {why}", PrivacyWarning, stacklevel=3)
    return None


def store(file: Path, write: Callable) -> bool:
    """Write a cache entry through ``write(binary file object)``: created 0600
    (:func:`dpreg.results.write_atomic` with ``private=True``; a reader never
    sees a partial entry) in a directory made or checked by :func:`safe_dir`;
    False (and nothing left behind) when it cannot be written."""
    from .errors import DpregError
    from .results import write_atomic

    if safe_dir(file.parent) is None:
        return False
    try:
        write_atomic(str(file), write, private=True)
        return True
    except (OSError, DpregError):
        return False
