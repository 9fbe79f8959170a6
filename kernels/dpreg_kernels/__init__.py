"""dpreg_kernels: every numba-compiled function of dpreg.

Imports numpy and numba only.  Importing :mod:`dpreg_kernels.linear_model`
compiles (or loads from numba's cache) the generic kernels; the host imports it
lazily, when a pipeline is built.
"""
from __future__ import annotations

import os

__all__ = ["compile_scalar", "compile_block", "compile_psi", "cache_fallback", "user_cache_roots", "private_dir"]


def user_cache_roots() -> list[str]:
    """The user cache directories dpreg may use, in order of preference:
    ``$DPREG_CACHE_DIR``, ``$XDG_CACHE_HOME/dpreg``, ``~/.cache/dpreg`` (those
    that are set).  The data caches (:mod:`dpreg.usercache`) use the first;
    :func:`cache_fallback` takes the first it can write."""
    roots = [os.environ.get("DPREG_CACHE_DIR"),
             os.path.join(os.environ["XDG_CACHE_HOME"], "dpreg") if os.environ.get("XDG_CACHE_HOME") else None,
             os.path.join(os.path.expanduser("~"), ".cache", "dpreg")]
    return [r for r in roots if r]


def _writable(directory: str) -> bool:
    """Whether numba could write its cache beside the sources of ``directory``."""
    pyc = os.path.join(directory, "__pycache__")
    return os.access(pyc if os.path.isdir(pyc) else directory, os.W_OK)


def _refusal(path: str) -> str | None:
    """Why the existing ``path`` may not hold a cache, or None: it must be a
    directory owned by this (effective) user with no group or other
    permission bits (0700 or narrower)."""
    import stat

    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if hasattr(os, "geteuid"):
        if st.st_uid != os.geteuid():
            return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
        if st.st_mode & 0o077:
            return (f"{path} is open to group/others (mode {stat.S_IMODE(st.st_mode):04o}; a cache needs 0700: "
                    f"check what it holds, then chmod 700 it or remove it)")
    return None


def private_dir(path: str) -> str | None:
    """Make ``path`` a directory only this user can use, or say why it cannot be.

    Missing components are created one at a time with ``os.mkdir(p, 0o700)``
    (the umask can only narrow that: no moment at which another user may
    enter or write them).  The directory, created or found, must then be owned
    by this (effective) user and grant nothing to group or others; one that
    does not - another user's, or one left at 0755 - is refused, never
    adopted or changed.  Parents that already exist (a home directory, /tmp)
    are not judged.  Returns None when ``path`` may be used, else the reason
    in one line."""
    path = os.path.abspath(path)
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            pass  # created meanwhile by someone: judged below
        except OSError as exc:
            return f"cannot create {p}: {exc.strerror or exc}"
    try:
        why = _refusal(path)
    except OSError as exc:
        return f"cannot use {path}: {exc.strerror or exc}"
    if why is None and not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable"
    return why


def cache_fallback() -> str | None:
    """Point numba's on-disk cache at a private user cache directory when the
    installed packages are not writable (a read-only site-packages, a shared
    install): without it every process would compile every kernel again (80 s
    measured).

    Runs before numba is first imported (this package's import), and only when
    ``NUMBA_CACHE_DIR`` is unset: it sets ``NUMBA_CACHE_DIR`` to
    ``<root>/numba`` for the first root of ``$DPREG_CACHE_DIR``,
    ``$XDG_CACHE_HOME/dpreg``, ``~/.cache/dpreg`` and ``<tmp>/dpreg-cache-<uid>``
    where both ``<root>`` and ``<root>/numba`` pass :func:`private_dir` (owned by
    this user, mode 0700; created so): numba unpickles what it finds in its
    cache, so a directory someone else owns or can write is never used.  When
    no root passes (no writable home, and the per-user folder under the
    temporary directory taken by someone else), the kernels are cached in a
    fresh directory of this process only (``tempfile.mkdtemp``: 0700, an
    unpredictable name), removed at exit: safe, but every process compiles
    again.  A one-line notice on stderr names the choice whenever it is not
    one of the user's own cache directories.  The choice is also given to
    numba's config if numba is already imported.  Returns the directory
    chosen, or None when nothing was changed (numba caches beside the
    sources)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here]
    try:
        import importlib.util

        spec = importlib.util.find_spec("dpreg_plugins")
        if spec is not None and spec.submodule_search_locations:
            dirs += [os.path.join(p, "losses") for p in spec.submodule_search_locations]
    except (ImportError, ValueError):
        pass
    if all(_writable(d) for d in dirs if os.path.isdir(d)):
        return None
    import sys
    import tempfile

    roots = user_cache_roots()
    # no usable home: a per-user folder under the system's temporary directory, used only
    # when it is this user's own and closed to everyone else (announced in one line)
    last = os.path.join(tempfile.gettempdir(), f"dpreg-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
    roots.append(last)
    reasons = []
    target = None
    for root in roots:
        why = private_dir(root) or private_dir(os.path.join(root, "numba"))
        if why is None:
            target = os.path.join(root, "numba")
            if root == last:
                sys.stderr.write(f"dpreg: no private cache directory in the install, $DPREG_CACHE_DIR, "
                                 f"$XDG_CACHE_HOME or ~/.cache; compiled kernels are cached in {target}\n")
            break
        reasons.append(why)
    if target is None:
        import atexit
        import shutil

        target = tempfile.mkdtemp(prefix="dpreg-kernels-")
        atexit.register(shutil.rmtree, target, True)
        sys.stderr.write(f"dpreg: no private cache directory ({'; '.join(reasons)}); compiled kernels go to "
                         f"{target}, removed at exit (every process compiles them again)\n")
    os.environ["NUMBA_CACHE_DIR"] = target
    if "numba" in sys.modules:  # too late for the environment: tell numba's config
        import numba

        numba.config.CACHE_DIR = target
    return target


cache_fallback()


def compile_scalar(func):
    """Compile a plain Python scalar function ``f(m: float, y: float) -> float``
    with the kernels' scalar signature, cached on disk, so it can be passed to
    the generic kernels.  The function must be numba-compatible and defined at
    module level in a file (for the cache)."""
    from .config import jit_scalar
    from .linear_model import SCALAR_SIG

    return jit_scalar(SCALAR_SIG)(func)


def compile_block(func):
    """Compile a loss's block function ``f(m, y, out, work, bits, scalar)``
    (:data:`dpreg_kernels.linear_model.BLOCK_SIG`), cached on disk, for the
    hot kernels; ``None`` gives the kernels' row-by-row
    :func:`dpreg_kernels.linear_model.scalar_block_fn`.  The function must be
    numba-compatible and defined at module level in a file (for the cache)."""
    from . import linear_model

    if func is None:
        return linear_model.scalar_block_fn()
    from .config import jit_scalar

    return jit_scalar(linear_model.BLOCK_SIG)(func)


def compile_psi(func):
    """Compile a loss's psi gradient ``f(w, params, out)`` (``out = grad
    psi(w)``; :data:`dpreg_kernels.sgd.PSI_SIG`), cached on disk, for the
    many-step kernels of :mod:`dpreg_kernels.sgd`; ``None`` gives the zero
    gradient of a loss without psi."""
    from . import sgd

    if func is None:
        return sgd.no_psi
    from .config import jit_scalar

    return jit_scalar(sgd.PSI_SIG)(func)
