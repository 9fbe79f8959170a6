""":func:`run_audit` and its stages: validate the configuration, build the
target, run it on both data sets, choose the test on the calibration half,
bound on the measurement half, report."""
from __future__ import annotations

import contextlib
import time
from typing import Callable

import numpy as np

from ..errors import ParameterError
from .blackbox import Target, algorithm_target, mechanism_target, selector_target
from .config import AuditConfig, AuditResult, validate
from .stats import (choose_event, choose_test, epsilon_lower_bound, errors, fisher_direction,
                    gaussian_lower_bound)
from .whitebox import Experiment, ReleaseExperiment, measure, mechanism_experiment, replay_experiment


def run_audit(cfg: AuditConfig, progress: Callable[[int, int], None] | None = None) -> AuditResult:
    """Run the audit described by ``cfg`` (see the package docstring);
    ``progress(done, total)`` is called after every run."""
    from ..registry import get_registry

    validate(cfg)
    fault = load_fault(cfg.fault)
    reg = get_registry()
    acc_cls = reg.get("accountant", cfg.accountant)
    method = cfg.method or ("gaussian" if cfg.white_box else "clopper-pearson")
    progress = progress or (lambda done, total: None)
    seeds = trial_seeds(cfg.seed, 2 * cfg.trials)
    t0 = time.perf_counter()
    with one_numba_thread():
        if cfg.white_box:
            fields = measure(white_box_experiment(cfg, reg, acc_cls, fault), cfg, seeds[:cfg.trials], method,
                             progress)
        else:
            target = end_to_end_target(cfg, reg, acc_cls, fault)
            F1, F0, claimed = run_both(target, seeds, progress)
            fields = end_to_end_bound(target, F1, F0, claimed, cfg, method)
    return AuditResult(trials=cfg.trials, delta=cfg.delta, confidence=cfg.confidence, fault=cfg.fault,
                       seconds=time.perf_counter() - t0, method=method, white_box=cfg.white_box, **fields)


def load_fault(name: str | None):
    """The test-only fault ``name`` (:mod:`dpreg.testing.faults`), or None."""
    if name is None:
        return None
    from ..testing.faults import parse_fault

    return parse_fault(name)


def trial_seeds(seed: int, count: int) -> list[int]:
    """``count`` independent 32-bit run seeds derived from the audit's seed."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(count, dtype=np.uint32)]


@contextlib.contextmanager
def one_numba_thread():
    """Run the audit's many tiny runs on one numba thread (thread start-up
    would dominate; results are the same for any thread count)."""
    import numba

    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(threads)


# ------------------------------------------------------------------ white box
def white_box_experiment(cfg: AuditConfig, reg, acc_cls, fault) -> Experiment:
    """The white-box experiment for ``cfg``: a mechanism alone, an algorithm's
    mechanism calls replayed, or an algorithm's reported releases."""
    if cfg.algo is None:
        if cfg.noise is None:
            raise ParameterError("give --algo NAME or --noise NAME (a noise mechanism alone) to --white-box")
        return mechanism_experiment(cfg, reg, acc_cls, fault)
    if reg.get("algorithm", cfg.algo).uses_noise:
        return replay_experiment(cfg, reg, acc_cls, fault)
    return ReleaseExperiment(cfg, reg, acc_cls, fault)


# ------------------------------------------------------------------ end to end
def end_to_end_target(cfg: AuditConfig, reg, acc_cls, fault) -> Target:
    """The end-to-end target for ``cfg``: a selector, a mechanism alone or an algorithm."""
    if cfg.selector is not None:
        return selector_target(cfg, reg, acc_cls, fault)
    if cfg.algo is None:
        if cfg.noise is None:
            raise ParameterError("give --algo NAME, --noise NAME (a noise mechanism alone) or --selector NAME")
        return mechanism_target(cfg, reg, acc_cls, fault)
    return algorithm_target(cfg, reg, acc_cls, fault)


def run_both(target: Target, seeds: list[int], progress) -> tuple[np.ndarray, np.ndarray, float]:
    """``len(seeds) / 2`` runs on each data set, interleaved, each with its own
    seed: ``(features with the canary, features without, the largest epsilon
    an accountant reported)``."""
    feats: dict[bool, list] = {True: [], False: []}
    claimed = 0.0
    trials = len(seeds) // 2
    for i in range(trials):
        for present, seed in ((True, seeds[2 * i]), (False, seeds[2 * i + 1])):
            f, eps = target.trial(present, seed)
            feats[present].append(f)
            claimed = max(claimed, float(eps))
        progress(2 * i + 2, 2 * trials)
    return np.array(feats[True]), np.array(feats[False]), claimed


def end_to_end_bound(target: Target, F1: np.ndarray, F0: np.ndarray, claimed: float, cfg: AuditConfig,
                     method: str) -> dict:
    """The statistic and the test chosen on the first half of each data set's
    runs, the bound computed on the second half: a selector's event (the
    index returned), or Fisher's linear statistic of the released values with
    a threshold test (Clopper-Pearson) or a Gaussian-shift bound.  Returns
    the :class:`AuditResult` fields it determines."""
    h = len(F1) // 2
    event = None
    if target.selector:
        k = choose_event(F1[:h, 0], F0[:h, 0], cfg.delta, cfg.confidence)
        s1, s0 = (F1[:, 0] == k).astype(float), (F0[:, 0] == k).astype(float)
    elif F1.shape[1] > 1:
        v = fisher_direction(F1[:h], F0[:h])
        s1, s0 = F1 @ v, F0 @ v
    else:
        s1, s0 = F1[:, 0], F0[:, 0]
    tau, sign = choose_test(s1[:h], s0[:h], cfg.delta, cfg.confidence)
    fp, fn = errors(s1[h:], s0[h:], tau, sign)
    n1, n0 = len(s1) - h, len(s0) - h
    eps, fpr_u, fnr_u = epsilon_lower_bound(fp, n0, fn, n1, cfg.delta, cfg.confidence)
    eps_lower = float(eps[0])
    if method == "gaussian":  # direction from the calibration half, bound on the measurement half
        d = 1 if np.mean(s1[:h]) >= np.mean(s0[:h]) else -1
        eps_lower = gaussian_lower_bound(s1[h:], s0[h:], d, cfg.delta, cfg.confidence)[0]
    if target.selector:  # sign * indicator > tau: tau 0 / -1 for the two directions
        name = "none" if k == -1 else str(k)
        if (sign > 0 and tau < 1) or (sign < 0 and tau < 0):
            event = f"index == {name}" if sign > 0 else f"index != {name}"
        else:
            event = "never (no informative event)"
    return {"target": target.name, "noise": target.noise, "relation": target.relation, "params": target.params,
            "epsilon_claimed": claimed, "epsilon_lower": eps_lower, "fpr": float(fp[0]) / n0,
            "fnr": float(fn[0]) / n1, "fpr_upper": float(fpr_u[0]), "fnr_upper": float(fnr_u[0]),
            "threshold": float(tau), "event": event, "features": int(F1.shape[1])}
