"""dpreg_kernels: every numba-compiled function of dpreg.

Imports numpy and numba only.  Importing :mod:`dpreg_kernels.linear_model`
compiles (or loads from numba's cache) the generic kernels; the host imports it
lazily, when a pipeline is built.
"""
from __future__ import annotations

import os

__all__ = ["compile_scalar", "compile_block", "compile_psi", "cache_fallback", "user_cache_roots"]


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


def cache_fallback() -> str | None:
    """Point numba's on-disk cache at a user cache directory when the installed
    packages are not writable (a read-only site-packages, a shared install):
    without it every process would compile every kernel again (80 s measured).

    Runs before numba is first imported (this package's import), and only when
    ``NUMBA_CACHE_DIR`` is unset: it sets ``NUMBA_CACHE_DIR`` to
    ``$DPREG_CACHE_DIR/numba``, else ``$XDG_CACHE_HOME/dpreg/numba``, else
    ``~/.cache/dpreg/numba``, else (no writable home: a container, a service
    account) ``<tmp>/dpreg-cache-<uid>/numba`` with a one-line notice on
    stderr -- the first that can be created -- and to numba's config too if
    numba is already imported.  Returns the directory chosen, or None when
    nothing was changed (then numba caches beside the sources, or, if even the
    temporary directory is unwritable, its own error names the problem)."""
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
    import tempfile

    roots = user_cache_roots()
    # last resort (no writable HOME either): a per-user directory under the
    # system's temporary directory, announced in one line
    last = os.path.join(tempfile.gettempdir(), f"dpreg-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
    roots.append(last)
    for root in roots:
        target = os.path.join(root, "numba")
        try:
            os.makedirs(target, exist_ok=True)
        except OSError:
            continue
        if os.access(target, os.W_OK):
            os.environ["NUMBA_CACHE_DIR"] = target
            if root == last:
                import sys

                sys.stderr.write(f"dpreg: no writable cache directory (install, $DPREG_CACHE_DIR, $XDG_CACHE_HOME, "
                                 f"~/.cache); compiled kernels are cached in {target}\n")
            import sys

            if "numba" in sys.modules:  # too late for the environment: tell numba's config
                import numba

                numba.config.CACHE_DIR = target
            return target
    return None


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
