"""dpreg: differentially private non-convex optimization.

Find first- and second-order stationary points of empirical and population
losses under (epsilon, delta)-DP with the algorithms of recent papers, each
reachable by name through a pluggy registry.  Python entry points:
:func:`dpreg.run` (the options of ``dpreg run``) and :func:`dpreg.load_model`.
"""
from __future__ import annotations

from typing import Any, Callable

from .errors import DpregWarning, PrivacyWarning
from .hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "run", "load_model", "PrivacyWarning", "DpregWarning", "__version__"]


def run(*, algo: str = "adaptive-spider", noise: str | None = None, loss: str = "auto",
        data: Any = "adult", test_data: Any = None, test_fraction: float | None = None,
        epsilon: float = 1.0, delta: float | None = None, accountant: str = "rdp",
        params: dict[str, Any] | list[str] | None = None, epochs: float | None = None, lr: float | None = None,
        batch_size: int | None = None, max_grad_norm: float | None = None,
        noise_multiplier: float | None = None, seed: int | None = None, split_seed: int = 0,
        features: int | None = None, zero_based: bool | None = None, labels: Any = None,
        target_bounds: Any = "auto", target_share: float = 0.1, intercept: bool | None = None,
        scaling: str = "auto", bounds: str | None = None, scaling_share: float = 0.1, alpha: float | None = None,
        select: str | None = None, select_share: float = 0.1, out: str | None = None, diagnostics: bool = True,
        diagnostics_budget: float | None = None,
        progress: Callable[[int, int], None] | None = None,
        warn: Callable[[str], None] | bool | None = None, backend: str | None = None,
        scheduler: str | None = None, workers: int | None = None, worker_threads: int | None = None,
        worker_memory: Any = None, scheduler_timeout: float = 10.0) -> dict:
    """Run one pipeline, exactly as ``dpreg run`` does, and return its record
    (``{"release": ..., "diagnostics": ...}``).

    ``data`` / ``test_data``: a data-set name, a file path, or an ``(X, y)``
    pair of arrays (numpy or scipy.sparse).  ``seed=None`` (the default) draws
    the mechanisms' randomness from OS entropy; an integer is the reproducible
    research mode (keep it secret).  Every user error raises
    :class:`dpreg.errors.DpregError`.  ``epochs``, ``lr``, ``batch_size``,
    ``max_grad_norm``, ``noise_multiplier``: the practitioner names of the
    algorithm's own parameters (``dpreg info ALGO``), as ``dpreg run``'s
    ``--epochs`` etc.; ``noise_multiplier`` fixes the multiplier (refused
    before any release if it would exceed ``epsilon``).  ``loss="auto"``:
    softmax for K > 2 declared classes (``labels=(a, b, c)``), squared for a
    data set that declares a regression task, else logistic.
    ``target_bounds``: the public range of a regression target ((lo, hi),
    "auto" or "none"; :mod:`dpreg.tasks`).  ``diagnostics_budget``: seconds
    the costly diagnostics may take together (None: the run's own time).
    ``data`` may be a directory or glob of shard files, or ``backend="dask"``
    hold the records on Dask workers (``scheduler``, ``workers``, ...:
    :mod:`dpreg.backends`, docs/scale-out.md).  See
    :class:`dpreg.pipeline.RunConfig` for the other options.

    Privacy warnings (seeded randomness, delta >= 1/n, a schema inferred from
    the data) are raised with :func:`warnings.warn` as
    :class:`dpreg.PrivacyWarning` (a ``UserWarning``); ``warn=callable``
    sends them to that function instead, ``warn=False`` drops them.
    """
    from .params import practitioner_params
    from .pipeline import RunConfig, run_pipeline

    params = practitioner_params(algo, params if params is not None else {},
                                 dict(epochs=epochs, lr=lr, batch_size=batch_size, max_grad_norm=max_grad_norm,
                                      noise_multiplier=noise_multiplier))
    return run_pipeline(RunConfig(
        algo=algo, noise=noise, loss=loss, data=data, test_data=test_data, test_fraction=test_fraction,
        epsilon=epsilon, delta=delta, accountant=accountant, params=params,
        seed=seed, split_seed=split_seed, features=features, zero_based=zero_based, labels=labels,
        target_bounds=target_bounds, target_share=target_share, intercept=intercept, scaling=scaling, bounds=bounds,
        scaling_share=scaling_share, alpha=alpha, select=select, select_share=select_share, out=out,
        diagnostics=diagnostics, diagnostics_budget=diagnostics_budget, progress=progress, warn=warn,
        backend=backend, scheduler=scheduler, workers=workers, worker_threads=worker_threads,
        worker_memory=worker_memory, scheduler_timeout=scheduler_timeout))


def load_model(path_or_record):
    """The released model of a run record (path, record or release dict):
    ``.predict(X)``, ``.decision_function(X)``, ``.predict_proba(X)``."""
    from .model import load_model as _load

    return _load(path_or_record)
