"""dpreg_kernels: every numba-compiled function of dpreg.

Imports numpy and numba only.  Importing :mod:`dpreg_kernels.linear_model`
compiles (or loads from numba's cache) the generic kernels; the host imports it
lazily, when a pipeline is built.
"""
from __future__ import annotations

__all__ = ["compile_scalar"]


def compile_scalar(func):
    """Compile a plain Python scalar function ``f(m: float, y: float) -> float``
    with the kernels' scalar signature, cached on disk, so it can be passed to
    the generic kernels.  The function must be numba-compatible and defined at
    module level in a file (for the cache)."""
    from .config import jit_scalar
    from .linear_model import SCALAR_SIG

    return jit_scalar(SCALAR_SIG)(func)
