"""The end-to-end audit's targets: the canary data sets, and one run of a
noise mechanism, an algorithm or a selector on either of them
(:class:`Target`), returning the released values the distinguishing test
reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import ParameterError
from .config import AUDIT_PARAMS, MAX_RELEASES, SELECTOR_AUDIT, AuditConfig

#: above-threshold audit: |w_1| of the candidate where the canary's gradient vanishes
FAR = 20.0


@dataclass
class Target:
    """What an end-to-end audit runs: ``trial(present, seed)`` runs the target
    once on the canary data set (``present``) or its neighbour, with a fresh
    accountant, and returns ``(released values, epsilon the accountant
    spent)``."""

    trial: Callable[[bool, int], tuple[np.ndarray, float]]
    name: str
    relation: str
    noise: str | None
    params: dict
    #: a selector's output is an index, tested by events (not thresholds)
    selector: bool = False


def canary_data(n: int, d: int, relation: str, canary_norm: float = 1.0, neighbour: str = "null"):
    """((X, y) with the canary, (X', y') its neighbour): ``n - 1`` null records
    (``x = 0``, ``y = +1``) and the canary ``x = c e_1``, ``y = +1``; the
    neighbour replaces the canary by its mirror (``y = -1``, replace-one) or
    by a null record (add-remove).

    ``neighbour="remove"`` (add-remove only): the other ``n - 1`` records are
    mirrors of the canary (opposite gradient) and the neighbour *removes* the
    canary, so ``n`` differs - a mean over the whole data set then moves by up
    to 2C/n, which an algorithm that treats ``n`` as public under add-remove
    does not account for."""
    X = np.zeros((n, d))
    y = np.ones(n)
    X[0, 0] = canary_norm
    if neighbour == "remove":
        if relation != "add-remove":
            raise ParameterError("neighbour 'remove' needs an add-remove algorithm")
        X[1:, 0] = canary_norm
        y[1:] = -1.0
        return (X, y), (X[1:].copy(), y[1:].copy())
    if neighbour != "null":
        raise ParameterError(f"neighbour must be null or remove, got {neighbour!r}")
    X2, y2 = X.copy(), y.copy()
    if relation == "replace-one":
        y2[0] = -1.0
    else:
        X2[0, 0] = 0.0
    return (X, y), (X2, y2)


def charges_a_run(accountant) -> bool:
    """Whether a mechanism built with ``accountant`` releases for a run: the
    accountant is a real :class:`~dpreg.accounting.Accountant` or wraps one
    (a prepaid plan, a fault's proxy) - not a calibration dry run's stand-in."""
    from ..accounting import Accountant

    for _ in range(8):
        if isinstance(accountant, Accountant):
            return True
        accountant = getattr(accountant, "accountant", None)
    return False


def given_params(cfg: AuditConfig) -> dict[str, Any]:
    """The audit's ``params`` as a dict (the CLI gives KEY=VALUE strings)."""
    from ..params import parse_pairs

    return parse_pairs(cfg.params) if isinstance(cfg.params, (list, tuple)) else dict(cfg.params)


def algorithm_params(cfg: AuditConfig, algo_cls) -> dict[str, Any]:
    """The algorithm's bound parameters: :data:`AUDIT_PARAMS` it declares,
    overridden by those the audit was given."""
    from ..params import bind

    declared = {s.name for s in algo_cls.params}
    merged = {k: v for k, v in AUDIT_PARAMS.get(cfg.algo or "", {}).items() if k in declared}
    merged.update(given_params(cfg))
    return bind(algo_cls.params, merged, f"algorithm {cfg.algo!r}")


def algorithm_noise(cfg: AuditConfig, reg, algo_cls) -> str | None:
    """The noise mechanism an algorithm audit runs: ``--noise``, or "tree"
    for an algorithm that keeps a running sum, or None."""
    if cfg.noise is not None and not algo_cls.uses_noise:
        raise ParameterError(f"algorithm {cfg.algo!r} keeps no running sum and takes no --noise")
    if cfg.noise is None and algo_cls.uses_noise:
        return "tree" if "tree" in reg.names("noise") else "gaussian"
    return cfg.noise


def with_faulty_rng(algo, fault) -> None:
    """Route ``algo``'s randomness streams through ``fault`` (test-only)."""
    if fault is not None:
        orig = algo.rng
        algo.rng = lambda stream: fault.rng(stream, orig(stream))


# --------------------------------------------------------------------- targets
def mechanism_target(cfg: AuditConfig, reg, acc_cls, fault) -> Target:
    """A noise mechanism alone: ``steps`` adds of an increment that holds the
    canary's contribution (sensitivity 1) in every add (``participation
    "all"``) or in the first add only (``"disjoint"``); the releases'
    first coordinates are the features."""
    from ..interfaces import Participation

    noise_cls = reg.get("noise", cfg.noise)
    if fault is not None and fault.needs_algorithm:
        raise ParameterError(f"fault {fault.name} needs an algorithm (it changes nothing in a mechanism alone)")
    run_cls = fault.noise(noise_cls) if fault is not None else noise_cls
    T, kind = cfg.steps, cfg.participation
    unit = np.zeros(cfg.d)
    unit[0] = 1.0

    def trial(present: bool, seed: int):
        acc = acc_cls(cfg.epsilon, cfg.delta, "add-remove")
        z = acc.calibrate(lambda z: run_cls.record_event(z, T, kind, T))
        mech = run_cls(dim=cfg.d, noise_multiplier=z, horizon=T, accountant=acc, seed=seed)
        out = np.empty(T)
        for t in range(T):
            inc = unit if present and (kind == "all" or t == 0) else np.zeros(cfg.d)
            part = Participation.all() if kind == "all" else Participation.disjoint(("audit", t))
            out[t] = mech.add(inc, 1.0, part)[0]
        return out, acc.epsilon_spent

    return Target(trial, f"noise {cfg.noise} ({kind}, {T} adds)", "add-remove", cfg.noise, {})


def _recording(noise_cls, sink: list):
    """``noise_cls`` whose every release of a run (projected on e_1) is
    appended to ``sink`` (calibration dry runs are not recorded)."""

    class Recording(noise_cls):
        def __init__(self, **kw):
            self._audited = charges_a_run(kw["accountant"])
            super().__init__(**kw)

        def add(self, increment, sensitivity, participation):
            out = super().add(increment, sensitivity, participation)
            if self._audited:
                sink.append(float(out[0]))
            return out

    Recording.__name__ = noise_cls.__name__
    return Recording


def algorithm_target(cfg: AuditConfig, reg, acc_cls, fault) -> Target:
    """An algorithm run end to end on the canary data sets; the features are
    every release of its noise mechanism (projected on e_1, padded to
    :data:`MAX_RELEASES`) and the final ``w[0]``."""
    from ..problem import Problem

    algo_cls = reg.get("algorithm", cfg.algo)
    loss = reg.get("loss", cfg.loss)
    noise_name = algorithm_noise(cfg, reg, algo_cls)
    noise_cls = reg.get("noise", noise_name) if noise_name else None
    if fault is not None and noise_cls is not None:
        noise_cls = fault.noise(noise_cls)
    if fault is not None and fault.name == "tree-one-level" and noise_cls is None:
        raise ParameterError("fault tree-one-level needs an algorithm that keeps a running sum")
    params = algorithm_params(cfg, algo_cls)
    relation = algo_cls.relation_for(params)
    (X1, y1), (X0, y0) = canary_data(cfg.n, cfg.d, relation, cfg.canary_norm, cfg.neighbour)
    pcls = fault.problem(Problem) if fault is not None else Problem
    problems = {True: pcls(loss, X1, y1, name="audit canary"), False: pcls(loss, X0, y0, name="audit neighbour")}

    def trial(present: bool, seed: int):
        acc = acc_cls(cfg.epsilon, cfg.delta, relation)
        releases: list = []
        ncls = None if noise_cls is None else _recording(noise_cls, releases)
        algo = algo_cls(problems[present], params, noise=ncls, accountant=acc, seed=seed)
        with_faulty_rng(algo, fault)
        w = np.asarray(algo.run().w, dtype=float)
        if ncls is None:
            f = np.array([w[0]])
        else:  # the released sequence (every noisy prefix sum, on e_1), then the final w[0]
            rel = releases[:MAX_RELEASES]
            f = np.array(rel + [0.0] * (MAX_RELEASES - len(rel)) + [w[0]])
        return np.nan_to_num(f, nan=1e300, posinf=1e300, neginf=-1e300), acc.epsilon_spent

    return Target(trial, f"algorithm {cfg.algo}", relation, noise_name, params)


def selector_target(cfg: AuditConfig, reg, acc_cls, fault) -> Target:
    """A selector run through its own ``select`` on the canary data sets (see
    the package docstring); the feature is the index returned (-1 for none)."""
    from ..params import bind
    from ..problem import Problem

    if cfg.algo is not None or cfg.noise is not None:
        raise ParameterError("--selector audits a selector alone: give no --algo or --noise")
    sel_cls = reg.get("selector", cfg.selector)
    if cfg.selector not in SELECTOR_AUDIT:
        raise ParameterError(f"no audit construction for selector {cfg.selector!r}; "
                             f"auditable: {', '.join(SELECTOR_AUDIT)}")
    spec = SELECTOR_AUDIT[cfg.selector]
    relation = cfg.relation or spec["relation"]
    params = bind(sel_cls.params, {**spec["params"], **given_params(cfg)}, f"selector {cfg.selector!r}")
    loss = reg.get("loss", cfg.loss)
    (X1, y1), (X0, y0) = canary_data(cfg.n, cfg.d, relation, cfg.canary_norm)
    pcls = fault.problem(Problem) if fault is not None else Problem
    problems = {True: pcls(loss, X1, y1, name="audit canary"), False: pcls(loss, X0, y0, name="audit neighbour")}
    run_cls = fault.selector(sel_cls) if fault is not None else sel_cls
    e1 = np.zeros(cfg.d)
    e1[0] = 1.0

    if cfg.selector == "exponential":
        kw = {"lo": params["lo"], "hi": params["hi"], "radius": params["net_radius"]}
        R = run_cls(problems[True], accountant=None, rng=None, **kw).radius
        W = np.array([R * e1] + [-R * e1] * (cfg.candidates - 1))
        params = {**params, "net_radius": R}

        def select(sel):
            return sel.select(W, cfg.epsilon, fit=True)

        name = f"selector exponential ({cfg.candidates} candidates: +-{R:g} e_1)"
    else:
        kw = {"grad_clip": params["grad_clip"], "hess_clip": params["hess_clip"], "check": params["check"]}
        C = run_cls(problems[True], accountant=None, rng=None, **kw).C
        alpha = params["alpha"] if params["alpha"] is not None else C / (2.0 * cfg.n)
        params = {**params, "grad_clip": C, "alpha": alpha}
        pair = [np.zeros(cfg.d), FAR * e1]
        if relation == "replace-one":  # the mirror's gradient is C at +FAR e_1, ~0 at the origin
            pair.reverse()

        def select(sel):
            return sel.select(pair, cfg.epsilon, alpha, fit=True)

        name = f"selector above-threshold (2 candidates, alpha={alpha:.4g}, check={params['check']})"

    def trial(present: bool, seed: int):
        acc = acc_cls(cfg.epsilon, cfg.delta, relation)
        rng = np.random.default_rng(seed)
        if fault is not None:
            rng = fault.rng("selector", rng)
        out = select(run_cls(problems[present], accountant=acc, rng=rng, **kw))
        return np.array([-1.0 if out.index is None else float(out.index)]), acc.epsilon_spent

    return Target(trial, name, relation, None, params, selector=True)
