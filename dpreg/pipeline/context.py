"""What the stages of a run hand each other (:mod:`dpreg.pipeline.stages`):
the run's :class:`Context`, then what each stage produces - :class:`Data`
(load), :class:`Built` (build), :class:`Outcome` (run)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .config import RunConfig


@dataclass
class Plan:
    """The validated names and parameters of a run (the plugins it uses),
    known before any data is read."""

    algo_cls: Any
    #: the loss of ``--loss`` (None for "auto": resolved with the data's public task)
    loss: Any
    acc_cls: Any
    noise_name: str | None
    noise_cls: Any
    #: the algorithm's parameters as given, and bound to its ParamSpecs
    given: dict
    params: dict
    #: the output selector of ``--select`` and its options (None without)
    sel_cls: Any = None
    sel_opts: dict | None = None


def pipeline_rng(cfg: RunConfig, root: int, stream: int) -> np.random.Generator:
    """A mechanism Generator of the pipeline itself (scaling, selection,
    target bounds), from the run's secret root."""
    return np.random.default_rng(np.random.SeedSequence([root, 0x5E1EC7, stream]))


@dataclass
class Context:
    """What every stage reads: the configuration, its validated plan, the
    run's secret root and the callbacks; the stages add their wall times to
    ``timing`` (``data_s``, ``compile_s``, ``run_s``, in that order)."""

    cfg: RunConfig
    plan: Plan
    reg: Any
    warn: Callable[[str], None]
    stage: Callable[[str], None]
    #: the secret root of the pipeline's own mechanisms (never recorded)
    root: int
    t_start: float
    timing: dict = field(default_factory=dict)

    def rng(self, stream: int) -> np.random.Generator:
        """The Generator of one of the pipeline's mechanisms (1: selection, 3: scaling, 4: target bounds)."""
        return pipeline_rng(self.cfg, self.root, stream)


@dataclass
class Data:
    """The records as loaded and validated (raw features; labels mapped for
    the loss's task), with the loss resolved from public facts and what of the
    schema was inferred.  ``X``/``y`` are None when the records are held by
    workers (sharded data)."""

    X: Any
    y: Any
    Xte: Any
    yte: Any
    description: str
    test_desc: str | None
    #: the registered data set's DatasetSource (None for files and arrays)
    source: Any
    schema: Any
    inferred: dict
    loss: Any
    loss_spec: str
    label_map: Any
    #: the loader's :class:`~dpreg.pipeline.loading.Loaded` of the training data (None for shards)
    loaded: Any = None

    @property
    def zero_based(self) -> bool | None:
        """The index base the release records (declared or inferred)."""
        return self.inferred.get("zero_based", getattr(self.schema, "zero_based", None))

    @property
    def public(self) -> bool:
        """Whether the data set declares itself public."""
        return bool(getattr(self.source, "public", False))


@dataclass
class Built:
    """The problem the algorithm runs on, the accountant with every charge
    made before the run (target bounds, scales, selection), and what the
    release repeats (preprocessing, target transform)."""

    problem: Any
    test_problem: Any
    accountant: Any
    delta: float
    n: int
    prep: Any
    target: Any = None
    target_info: dict | None = None
    scaling_info: dict | None = None
    #: the regression targets in the user's units (train, test), for the diagnostics
    y_raw: Any = None
    yte_raw: Any = None
    selector: Any = None
    eps_sel: float | None = None


@dataclass
class Outcome:
    """What the run released: the algorithm's output and the chosen point."""

    out: Any
    w: np.ndarray
    selection: dict | None = None
