"""dpreg: differentially private non-convex optimization.

Find first- and second-order stationary points of empirical and population
losses under (epsilon, delta)-DP with the algorithms of recent papers, each
reachable by name through a pluggy registry.  Python entry point:
:func:`dpreg.run` (same options as ``dpreg run``).
"""
from __future__ import annotations

from .hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "run", "__version__"]


def run(**options):
    """Run one pipeline; same options as ``dpreg run`` (see
    :class:`dpreg.pipeline.RunConfig`).  Returns the JSON-ready record."""
    from .pipeline import RunConfig, run_pipeline

    return run_pipeline(RunConfig(**options))
