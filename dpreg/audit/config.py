"""What an audit takes (:class:`AuditConfig`, checked by :func:`validate`)
and what it returns (:class:`AuditResult`), with the small-size defaults it
runs algorithms and selectors at."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..accounting import check_budget_args
from ..errors import ParameterError

#: small-size defaults per algorithm (only keys the algorithm declares are
#: used; ``params`` given to the audit override them).  Small clip and step
#: keep the canary's gradient clipped to exactly C throughout the run.
AUDIT_PARAMS: dict[str, dict[str, Any]] = {
    "dp-gd": {"steps": 5, "step": 0.05, "clip": 0.1},
    "dp-sgd": {"steps": 5, "batch": 5, "step": 0.05, "clip": 0.1},
    # full-batch O2 (batch2 >= n): the audit re-calibrates in every trial, and Poisson-subsampled
    # O2 (the default) makes that calibration the slowest part of the suite
    "dp-spider": {"steps": 6, "phase": 3, "step": 0.05, "clip": 0.1, "batch2": 1 << 30},
    # three passes (its practical default on 20,000 records or more): the canary is in every
    # pass; alpha_scale 1.5: at the practical 0.7 (and at 1, with three passes' larger noise) the
    # O1 batch of a 20-record audit set exceeds n; the other practical factors stay as a user
    # gets them, the O2 clip among them
    "adaptive-spider": {"step": 0.05, "clip": 0.1, "alpha_scale": 1.5, "passes": 3},
    "perturbed-sgd": {"step": 0.05, "clip": 0.1},
    # 5 blocks of 4 records (GRAD on 1, then 3 DIFFs of 1): every record, the canary included, is used
    "zo-o2nc": {"block_length": 4, "blocks": 5, "batch1": 1, "batch2": 1},
    "dp-trust-region": {"steps": 3, "clip": 0.1, "hess_clip": 0.1, "stop": "none"},
    # batch 20 = the audit's default n: full batches (calibrating Poisson-subsampled RDP
    # per trial is slow); the Poisson accounting is tested against dp-accounting directly
    "dp-stochastic-trust-region": {"steps": 3, "batch": 20, "clip": 0.1, "hess_clip": 0.1, "stop": "none"},
}

#: selector audits: default relation and parameters (``params`` override)
SELECTOR_AUDIT: dict[str, dict[str, Any]] = {
    "exponential": {"relation": "replace-one", "params": {}},
    "above-threshold": {"relation": "add-remove", "params": {"check": "fosp", "grad_clip": 0.1}},
}

METHODS = ("clopper-pearson", "gaussian")
#: sensitivity schedules of a white-box audit of a noise mechanism alone
SCHEDULES = ("constant", "decreasing")
#: most releases of a run used as audit features (the first ones)
MAX_RELEASES = 32
#: most runs per data set: the audit keeps every run's features in memory
#: and its time grows with the runs (about a millisecond each for a mechanism)
MAX_TRIALS = 200_000
#: largest canary data set (n x d values)
MAX_CELLS = 10_000_000


@dataclass
class AuditConfig:
    """What ``dpreg audit`` accepts (see ``dpreg audit --help``).

    algo:   algorithm name, or None to audit the noise mechanism alone
    noise:  noise mechanism (required without ``algo``; else the
            algorithm's default when it keeps a running sum)
    selector: selector name (instead of ``algo`` / ``noise``)
    candidates: number of candidates (exponential selector audit)
    relation: neighbouring relation of a selector audit (None: the
            selector's default in ``SELECTOR_AUDIT``)
    trials: runs per data set (half choose the test, half measure it)
    n, d:   size of the canary data sets
    steps:  adds per run when auditing a mechanism alone
    participation: "all" (canary in every add) or "disjoint" (one add),
            mechanism audits only
    canary_norm: |x| of the canary record
    fault:  TEST-ONLY fault injection (:mod:`dpreg.testing.faults`)
    white_box: audit the mechanism's releases directly (see the package
            docstring): a mechanism alone, the mechanism calls an algorithm
            makes (replayed), or the releases a trust region reports
    schedule: white-box audit of a mechanism alone: the adds' sensitivities,
            "constant" (1) or "decreasing" (1/t)
    """

    algo: str | None = None
    noise: str | None = None
    loss: str = "logistic"
    epsilon: float = 1.0
    delta: float = 1e-5
    accountant: str = "rdp"
    trials: int = 1000
    seed: int = 0
    params: Any = field(default_factory=dict)
    n: int = 20
    d: int = 2
    steps: int = 8
    participation: str = "all"
    canary_norm: float = 1.0
    confidence: float = 0.95
    fault: str | None = None
    #: add-remove neighbour: "null" (canary replaced by a zero-gradient record,
    #: n kept) or "remove" (canary removed among mirror records; n - 1)
    neighbour: str = "null"
    selector: str | None = None
    candidates: int = 6
    relation: str | None = None
    #: "clopper-pearson" (assumption-free) or "gaussian" (Gaussian noise; see the package
    #: docstring); None: "gaussian" for a white-box audit, else "clopper-pearson"
    method: str | None = None
    white_box: bool = False
    schedule: str = "constant"


@dataclass
class AuditResult:
    """Outcome of one audit (JSON-ready through :meth:`as_dict`)."""

    target: str
    noise: str | None
    relation: str
    trials: int
    epsilon_claimed: float
    delta: float
    epsilon_lower: float
    confidence: float
    fpr: float
    fnr: float
    fpr_upper: float
    fnr_upper: float
    threshold: float
    fault: str | None
    seconds: float
    params: dict = field(default_factory=dict)
    #: selector audits: the distinguishing event ("index == k", "index != k")
    event: str | None = None
    method: str = "clopper-pearson"
    #: features the statistic combined (releases + final w[0] for an algorithm)
    features: int = 1
    white_box: bool = False
    #: white-box audits: where the canary was put (chosen on the calibration half)
    canary: str | None = None
    #: white-box audits: lower confidence bound on the canary's Gaussian
    #: shift-to-noise ratio, and the ratio its claimed epsilon stands for
    mu_lower: float | None = None
    mu_claimed: float | None = None

    @property
    def violated(self) -> bool:
        """True when the audited lower bound exceeds the claimed epsilon."""
        return self.epsilon_lower > self.epsilon_claimed

    def as_dict(self) -> dict:
        out = asdict(self)
        out["violated"] = self.violated
        return out


def validate(cfg: AuditConfig) -> None:
    """Raise ParameterError (one line naming the problem) for a bad configuration."""
    check_budget_args(cfg.epsilon, cfg.delta)
    if isinstance(cfg.trials, bool) or not isinstance(cfg.trials, int) or cfg.trials < 20:
        raise ParameterError(f"trials must be an integer >= 20, got {cfg.trials!r}")
    if cfg.trials > MAX_TRIALS:
        raise ParameterError(f"trials must be at most {MAX_TRIALS:,} (runs per data set), got {cfg.trials:,}")
    if not (isinstance(cfg.n, int) and cfg.n >= 2):
        raise ParameterError(f"n must be an integer >= 2, got {cfg.n!r}")
    if not (isinstance(cfg.d, int) and cfg.d >= 1):
        raise ParameterError(f"d must be an integer >= 1, got {cfg.d!r}")
    if cfg.n * cfg.d > MAX_CELLS:
        raise ParameterError(f"n x d must be at most {MAX_CELLS:,} (the canary data sets are held in memory), "
                             f"got {cfg.n:,} x {cfg.d:,}")
    if not (isinstance(cfg.steps, int) and 1 <= cfg.steps <= 4096):
        raise ParameterError(f"steps must be an integer in [1, 4096], got {cfg.steps!r}")
    if cfg.participation not in ("all", "disjoint"):
        raise ParameterError(f"participation must be all or disjoint, got {cfg.participation!r}")
    if not (math.isfinite(cfg.canary_norm) and cfg.canary_norm > 0):
        raise ParameterError(f"canary norm must be a finite number > 0, got {cfg.canary_norm!r}")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ParameterError(f"seed must be an integer >= 0, got {cfg.seed!r}")
    if not (isinstance(cfg.candidates, int) and cfg.candidates >= 2):
        raise ParameterError(f"candidates must be an integer >= 2, got {cfg.candidates!r}")
    if cfg.relation is not None:
        if cfg.relation not in ("replace-one", "add-remove"):
            raise ParameterError(f"relation must be replace-one or add-remove, got {cfg.relation!r}")
        if cfg.selector is None:
            raise ParameterError("--relation applies to selector audits (an algorithm declares its own)")
    if not (0 < cfg.confidence < 1):
        raise ParameterError(f"confidence must be in (0, 1), got {cfg.confidence!r}")
    if cfg.method is not None and cfg.method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {cfg.method!r}")
    if cfg.schedule not in SCHEDULES:
        raise ParameterError(f"schedule must be one of {', '.join(SCHEDULES)}, got {cfg.schedule!r}")
    if cfg.white_box:
        if cfg.selector is not None:
            raise ParameterError("--white-box audits noise mechanisms and the releases of algorithms, "
                                 "not selectors")
        if cfg.neighbour != "null":
            raise ParameterError("--neighbour applies to the end-to-end audit (the white-box canary is an "
                                 "increment, not a record)")
    elif cfg.method == "gaussian" and (cfg.algo is not None or cfg.selector is not None):
        raise ParameterError("method gaussian audits a noise mechanism alone, or anything with --white-box "
                             "(its Gaussian model does not hold for an algorithm's adaptive runs or a selector)")
    if cfg.schedule != "constant" and not (cfg.white_box and cfg.algo is None):
        raise ParameterError("--schedule applies to a white-box audit of a noise mechanism alone")
