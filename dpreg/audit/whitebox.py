"""White-box audits: a mechanism's Gaussian releases measured directly, with
the canary as a worst-case increment (the package docstring states the
method and its assumptions).

Two experiments produce the releases, both as :class:`Experiment`:

* :class:`ReplayExperiment` - noise mechanisms.  A schedule of mechanism
  calls (each instance's dimension, multiplier, horizon, and per phase the
  adds' sensitivities and participations) is replayed into fresh instances of
  the mechanism class with zero increments, except the canary's: ``s e_1`` in
  one disjoint add (or ``s_t e_1`` in every add of a phase of full-batch
  adds), ``s`` the sensitivity the add declares.  The schedule is synthetic
  for a mechanism alone (:func:`mechanism_experiment`) or recorded from one
  run of an algorithm on the canary data set (:func:`replay_experiment`).
* :class:`ReleaseExperiment` - the releases an algorithm makes outside a
  noise mechanism and reports through
  :meth:`~dpreg.interfaces.Algorithm.released` (the trust region's gradient
  and Hessian), on a problem whose canary's every clipped term is exactly at
  the clipping bound the algorithm asks the kernel for.

:func:`measure` then runs the protocol shared by both: choose where the
canary goes and the test statistic on a calibration half, measure the
noise and check the canary's shift on the other half, bound.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import ParameterError
from .blackbox import algorithm_noise, algorithm_params, canary_data, charges_a_run, with_faulty_rng
from .config import MAX_RELEASES, AuditConfig
from .stats import (choose_test, epsilon_lower_bound, errors, gaussian_epsilon, known_shift_lower_bound,
                    whitened)

#: most adds of a recorded schedule replayed (whole phases, in the order the run made them; the
#: first phase whatever its length): every run of the audit replays up to this many
MAX_REPLAY_ADDS = 32
#: releases of its phase a placement's statistic reads: up to this many before the canary's add
#: (they share noise with later ones in the tree mechanisms) and this many from it on
WINDOW_BEFORE, WINDOW_AFTER = 8, 32
#: a canary's shift must be the same in every measured run to this relative tolerance
SHIFT_RTOL = 1e-8


@dataclass
class Placement:
    """Where the canary sits in an experiment: the features the statistic
    reads, the shift of those features the canary is expected to cause, and
    the epsilon the accountant was charged for it."""

    label: str
    features: np.ndarray
    signal: np.ndarray
    epsilon_claimed: float
    key: Any = None


@dataclass
class MechanismCalls:
    """One noise mechanism instance of a run: how it was built and, per phase
    (between resets), the ``(sensitivity, participation)`` of every add."""

    dim: int
    noise_multiplier: float
    horizon: int
    phases: list = field(default_factory=lambda: [[]])


class ChargeLog:
    """Accountant stand-in for a replay: records every charge (event and
    group key) until :meth:`take`, refuses nothing."""

    def __init__(self, relation: str):
        self.relation = relation
        self.current: list = []

    @property
    def sensitivity_factor(self) -> float:
        return 1.0 if self.relation == "add-remove" else 2.0

    def charge(self, event, group=None, *, label: str = "", pass_id=None) -> float:
        self.current.append((event, None if group is None else (pass_id, group)))
        return 0.0

    def take(self) -> list:
        out, self.current = self.current, []
        return out


class Experiment:
    """A white-box experiment: ``run(seed, placement, canary)`` returns the
    feature vector of one run (NaN where a feature was not computed); with
    ``placement=None`` a whole run without the canary, else a run with
    (``canary``) or without it that needs only compute ``placement``'s
    features.  :meth:`placements` lists where the canary may go, given the
    calibration runs (``cal1`` only when :attr:`pairs`: runs with the canary
    at every place at once, same seeds as ``cal0``)."""

    #: whether choosing placements needs calibration runs with the canary
    pairs: bool = False
    n_features: int = 0
    target: str = ""
    relation: str = ""
    noise: str | None = None
    params: dict

    def run(self, seed: int, placement: Placement | None, canary: bool) -> np.ndarray:
        raise NotImplementedError

    def placements(self, cal0: np.ndarray, cal1: np.ndarray | None) -> list[Placement]:
        raise NotImplementedError


def claim_epsilon(acc_cls, events, delta: float, relation: str, memo: dict) -> float:
    """Epsilon at ``delta`` of the composition of ``events`` in a fresh
    accountant of class ``acc_cls``: what the accountant claims for a record
    exposed to exactly these releases."""
    key = tuple(events)
    if key not in memo:
        acc = acc_cls(1e9, delta, relation)
        for e in events:
            acc.charge(e)
        memo[key] = float(acc.epsilon_spent)
    return memo[key]


# ----------------------------------------------------------------------- replay
def recording_calls(noise_cls, sink: list):
    """``noise_cls`` that appends a :class:`MechanismCalls` to ``sink`` for
    each instance a run builds (calibration dry runs left out) and logs its
    resets and adds there."""

    class Recorded(noise_cls):
        def __init__(self, **kw):
            calls = (MechanismCalls(int(kw["dim"]), float(kw["noise_multiplier"]), int(kw["horizon"]))
                     if charges_a_run(kw["accountant"]) else None)
            self._audit_calls = None
            super().__init__(**kw)
            self._audit_calls = calls
            if calls is not None:
                sink.append(calls)

        def reset(self):
            super().reset()
            calls = getattr(self, "_audit_calls", None)
            if calls is not None:
                calls.phases.append([])

        def add(self, increment, sensitivity, participation):
            out = super().add(increment, sensitivity, participation)
            if self._audit_calls is not None:
                self._audit_calls.phases[-1].append((float(sensitivity), participation))
            return out

    Recorded.__name__ = noise_cls.__name__
    return Recorded


class ReplayExperiment(Experiment):
    """A schedule of mechanism calls replayed with the canary as a worst-case
    increment (module docstring)."""

    def __init__(self, noise_cls, calls: list, *, acc_cls, delta: float, relation: str, target: str,
                 noise: str | None, params: dict):
        self.noise_cls = noise_cls
        self.acc_cls, self.delta, self.relation = acc_cls, delta, relation
        self.target, self.noise, self.params = target, noise, params
        self.calls: list[MechanismCalls] = []
        self.blocks: dict[tuple[int, int], tuple[int, int]] = {}  # (instance, phase) -> (offset, adds)
        off = 0
        for k, c in enumerate(calls):
            phases: list = []
            for adds in c.phases:
                if off and off + len(adds) > MAX_REPLAY_ADDS:
                    break
                self.blocks[(k, len(phases))] = (off, len(adds))
                phases.append(list(adds))
                off += len(adds)
            if phases:
                self.calls.append(MechanismCalls(c.dim, c.noise_multiplier, c.horizon, phases))
            if off >= MAX_REPLAY_ADDS or len(phases) < len(c.phases):
                break
        self.n_features = off
        made = sum(len(a) for c in calls for a in c.phases)
        if off == 0:
            raise ParameterError(f"{target}: the run made no noise mechanism release to replay")
        if made > off:
            self.target += f" (the first {off} of its {made} adds)"
        self._charges = self._dry_charges()

    def _mechanism(self, k: int, seed: int, accountant):
        c = self.calls[k]
        return self.noise_cls(dim=c.dim, noise_multiplier=c.noise_multiplier, horizon=c.horizon,
                              accountant=accountant, seed=np.random.SeedSequence([int(seed), k]))

    def _dry_charges(self) -> dict:
        """The events each add charges, ``(instance, phase, add) -> [(event, group key)]``."""
        out = {}
        for k, c in enumerate(self.calls):
            log = ChargeLog(self.relation)
            mech = self._mechanism(k, 0, log)
            for p, adds in enumerate(c.phases):
                if p:
                    mech.reset()
                for j, (s, part) in enumerate(adds):
                    mech.add(np.zeros(c.dim), s, part)
                    out[(k, p, j)] = log.take()
        return out

    def run(self, seed, placement, canary):
        feats = np.full(self.n_features, np.nan)
        for k, c in enumerate(self.calls):
            if placement is not None and k != placement.key[0]:
                continue
            mech = self._mechanism(k, seed, ChargeLog(self.relation))
            for p, adds in enumerate(c.phases):
                if placement is not None and p > placement.key[1]:
                    break
                if p:
                    mech.reset()
                off = self.blocks[(k, p)][0]
                hit = canary and placement is not None and placement.key[1] == p
                for j, (s, part) in enumerate(adds):
                    inc = np.zeros(c.dim)
                    if hit and placement.key[2] in (None, j):
                        inc[0] = s
                    feats[off + j] = mech.add(inc, s, part)[0]
        return feats

    def placements(self, cal0, cal1):
        memo: dict = {}
        out = []
        for (k, p), (off, L) in self.blocks.items():
            adds = self.calls[k].phases[p]
            phase_events = [ev for j in range(L) for ev in self._charges[(k, p, j)]]
            global_events = [e for e, key in phase_events if key is None]
            where = f"mechanism {k + 1}, phase {p + 1}" if len(self.calls) > 1 else f"phase {p + 1}"
            for j, (s, part) in enumerate(adds):
                if part.kind != "disjoint" or not s > 0:
                    continue
                lo, hi = max(0, j - WINDOW_BEFORE), min(L, j + WINDOW_AFTER)
                feats = np.arange(off + lo, off + hi)
                signal = np.zeros(hi - lo)
                signal[j - lo:] = s
                mine = {key for _, key in self._charges[(k, p, j)] if key is not None}
                events = [e for e, key in self._all_charges(k) if key in mine] + global_events
                eps = claim_epsilon(self.acc_cls, events, self.delta, self.relation, memo)
                out.append(Placement(f"{where}, add {j + 1} of {L} (sensitivity {s:.4g})", feats, signal, eps,
                                     (k, p, j)))
            if L and all(part.kind == "all" for _, part in adds):
                hi = min(L, WINDOW_BEFORE + WINDOW_AFTER)
                signal = np.cumsum([s for s, _ in adds[:hi]])
                eps = claim_epsilon(self.acc_cls, global_events, self.delta, self.relation, memo)
                out.append(Placement(f"{where}, every add of {L}", np.arange(off, off + hi), signal, eps,
                                     (k, p, None)))
        if not out:
            raise ParameterError(f"{self.target}: no add the canary can be put in (a replay needs disjoint or "
                                 f"full-batch adds; Poisson-sampled adds are amplified by a sampling a replay "
                                 f"does not repeat: audit them end to end)")
        return out

    def _all_charges(self, k: int):
        return [ev for (kk, _, _), evs in self._charges.items() if kk == k for ev in evs]


def _schedule(cfg: AuditConfig) -> list[float]:
    T = cfg.steps
    return [1.0] * T if cfg.schedule == "constant" else [1.0 / (t + 1) for t in range(T)]


def mechanism_experiment(cfg: AuditConfig, reg, acc_cls, fault) -> ReplayExperiment:
    """A noise mechanism alone: one phase of ``steps`` adds with the
    ``schedule``'s sensitivities, disjoint or full-batch, its multiplier
    calibrated to (epsilon, delta) for that phase."""
    from ..interfaces import Participation

    noise_cls = reg.get("noise", cfg.noise)
    if fault is not None and fault.needs_algorithm:
        raise ParameterError(f"fault {fault.name} needs an algorithm (it changes nothing in a mechanism alone)")
    run_cls = fault.noise(noise_cls) if fault is not None else noise_cls
    T, kind = cfg.steps, cfg.participation
    z = acc_cls(cfg.epsilon, cfg.delta, "add-remove").calibrate(lambda z: run_cls.record_event(z, T, kind, T))
    parts = [Participation.all() if kind == "all" else Participation.disjoint(("audit", t)) for t in range(T)]
    calls = MechanismCalls(cfg.d, z, T, [list(zip(_schedule(cfg), parts))])
    return ReplayExperiment(run_cls, [calls], acc_cls=acc_cls, delta=cfg.delta, relation="add-remove",
                            target=f"noise {cfg.noise} ({kind}, {T} adds, {cfg.schedule} sensitivities)",
                            noise=cfg.noise, params={})


def replay_experiment(cfg: AuditConfig, reg, acc_cls, fault) -> ReplayExperiment:
    """The noise mechanism calls of one run of an algorithm on the canary data
    set (seeded from the audit's seed), replayed."""
    from ..problem import Problem

    algo_cls = reg.get("algorithm", cfg.algo)
    noise_name = algorithm_noise(cfg, reg, algo_cls)
    noise_cls = reg.get("noise", noise_name)
    if fault is not None:
        noise_cls = fault.noise(noise_cls)
        if fault.name == "no-clip":
            raise ParameterError("fault no-clip needs the end-to-end audit (a replay's canary is a worst-case "
                                 "increment, clipped or not)")
    params = algorithm_params(cfg, algo_cls)
    relation = algo_cls.relation_for(params)
    (X1, y1), _ = canary_data(cfg.n, cfg.d, relation, cfg.canary_norm)
    calls: list = []
    algo = algo_cls(Problem(reg.get("loss", cfg.loss), X1, y1, name="audit canary"), params,
                    noise=recording_calls(noise_cls, calls), accountant=acc_cls(cfg.epsilon, cfg.delta, relation),
                    seed=int(np.random.SeedSequence([cfg.seed, 0x5245504C]).generate_state(1)[0]))
    with_faulty_rng(algo, fault)
    algo.run()
    return ReplayExperiment(noise_cls, calls, acc_cls=acc_cls, delta=cfg.delta, relation=relation,
                            target=f"algorithm {cfg.algo}, its {noise_name} mechanism calls replayed",
                            noise=noise_name, params=params)


# ---------------------------------------------------------------------- releases
def worst_case_problem(loss, n: int, d: int, sign: float, name: str):
    """A problem of ``n - 1`` null records and a canary (row 0) whose clipped
    gradient, gradient difference and data Hessian are ``sign * clip e_1``
    and ``sign * clip e_1 e_1^T`` at whatever clipping bound the algorithm
    asks for: every clipped term at its bound (``sign`` +1: the canary, -1: its
    mirror, 0: a null record)."""
    from ..problem import Problem

    class WorstCaseCanary(Problem):
        def _term(self, idx, clip) -> float:
            hits = 1 if idx is None else int(np.count_nonzero(np.asarray(idx) == 0))
            if not (sign and hits):
                return 0.0
            if not math.isfinite(clip):
                raise ParameterError("the white-box audit's canary needs a finite clipping bound")
            return sign * float(clip) * hits

        def clipped_grad_sum(self, w, idx, clip):
            s, k = super().clipped_grad_sum(w, idx, clip)
            t = self._term(idx, clip)
            if t:
                s = np.array(s, dtype=float)
                s[0] += t
            return s, k

        def clipped_diff_sum(self, w, w_prev, idx, clip):
            s, k = super().clipped_diff_sum(w, w_prev, idx, clip)
            t = self._term(idx, clip)
            if t:
                s = np.array(s, dtype=float)
                s[0] += t
            return s, k

        def clipped_hessian_sum(self, w, idx, clip):
            S, k = super().clipped_hessian_sum(w, idx, clip)
            t = self._term(idx, clip)
            if t:
                S = np.array(S, dtype=float)
                S[0, 0] += t
            return S, k

        def clipped_zo_sum(self, *a, **kw):
            raise ParameterError("the white-box audit has no worst-case canary for zeroth-order sums")

    return WorstCaseCanary(loss, np.zeros((n, d)), np.ones(n), name=name)


class ReleaseLog:
    """What a run released outside its noise mechanisms: each release's first
    element (the canary's coordinate) and the events charged since the
    previous release."""

    def __init__(self):
        self.values: list[float] = []
        self.labels: list[str] = []
        self.events: list[list] = []
        self.pending: list = []

    def observe(self, label: str, value) -> None:
        self.values.append(float(np.ravel(value)[0]))
        self.labels.append(label)
        self.events.append(self.pending)
        self.pending = []


class ChargeTap:
    """The run's accountant, with every charge also logged to a :class:`ReleaseLog`."""

    def __init__(self, accountant, log: ReleaseLog):
        self.accountant, self._log = accountant, log

    def charge(self, event, group=None, **kw):
        self._log.pending.append(event)
        return self.accountant.charge(event, group, **kw)

    def __getattr__(self, name):
        return getattr(self.accountant, name)


class ReleaseExperiment(Experiment):
    """An algorithm's reported releases on the worst-case canary problem
    (module docstring).  With the same seed the run with the canary and the
    run without it agree until the canary changes a release; the releases
    whose shift is the same in every calibration pair (those before the
    trajectories part) are the features."""

    pairs = True

    def __init__(self, cfg: AuditConfig, reg, acc_cls, fault):
        self.cfg, self.acc_cls, self.fault = cfg, acc_cls, fault
        self.algo_cls = reg.get("algorithm", cfg.algo)
        if cfg.noise is not None:
            raise ParameterError(f"algorithm {cfg.algo!r} keeps no running sum and takes no --noise")
        if fault is not None and fault.name in ("no-clip",):
            raise ParameterError("fault no-clip needs the end-to-end audit (the white-box canary is a "
                                 "worst-case clipped term)")
        self.params = algorithm_params(cfg, self.algo_cls)
        self.relation = self.algo_cls.relation_for(self.params)
        self.delta = cfg.delta
        loss = reg.get("loss", cfg.loss)
        self.problems = {True: worst_case_problem(loss, cfg.n, cfg.d, 1.0, "audit canary"),
                         False: worst_case_problem(loss, cfg.n, cfg.d,
                                                   -1.0 if self.relation == "replace-one" else 0.0,
                                                   "audit neighbour")}
        self.target = f"algorithm {cfg.algo}, its reported releases"
        self.noise = None
        self.n_features = MAX_RELEASES
        self.log: ReleaseLog | None = None

    def run(self, seed, placement, canary):
        log = ReleaseLog()
        acc = ChargeTap(self.acc_cls(self.cfg.epsilon, self.cfg.delta, self.relation), log)
        algo = self.algo_cls(self.problems[canary], self.params, noise=None, accountant=acc, seed=seed)
        algo.release_observer = log.observe
        with_faulty_rng(algo, self.fault)
        algo.run()
        if not log.values:
            raise ParameterError(f"algorithm {self.cfg.algo!r} reports no releases to a white-box audit "
                                 f"(only running-sum algorithms and the trust regions do): audit it end to end")
        self.log = log
        feats = np.full(MAX_RELEASES, np.nan)
        v = log.values[:MAX_RELEASES]
        feats[:len(v)] = v
        return feats

    def placements(self, cal0, cal1):
        D = cal1 - cal0
        K = 0
        while K < D.shape[1]:
            col, ref = D[:, K], np.abs(cal0[:, K])
            if not (np.all(np.isfinite(col)) and np.ptp(col) <= SHIFT_RTOL * (1.0 + ref.max())):
                break
            K += 1
        log = self.log
        signal = D[:, :K].mean(axis=0) if K else np.zeros(0)
        memo: dict = {}
        out = []
        for k in range(K):
            if signal[k] != 0:
                eps = claim_epsilon(self.acc_cls, log.events[k], self.delta, self.relation, memo)
                out.append(Placement(f"release {k + 1} ({log.labels[k]})", np.array([k]), signal[k:k + 1], eps, k))
        if len(out) > 1:
            eps = claim_epsilon(self.acc_cls, [e for k in range(K) for e in log.events[k]], self.delta,
                                self.relation, memo)
            out.append(Placement(f"releases 1-{K} ({', '.join(log.labels[:K])})", np.arange(K), signal, eps, None))
        if not out:
            raise ParameterError(f"algorithm {self.cfg.algo!r}: no release moves by the same amount in every "
                                 f"run (a canary whose participation is random, e.g. Poisson sampling, has no "
                                 f"fixed shift): audit it end to end")
        return out


# --------------------------------------------------------------------- protocol
def choose_placement(placements: list[Placement], cal0: np.ndarray, delta: float):
    """The placement, and its statistic's direction (the likelihood-ratio
    direction of its shift in the calibration runs' noise covariance), whose
    estimated epsilon exceeds its claim the most on the calibration runs."""
    best = None
    for pl in placements:
        Y = cal0[:, pl.features]
        S = np.atleast_2d(np.cov(Y, rowvar=False))
        w = whitened(S, pl.signal)
        var = float(w @ S @ w)
        shift = float(pl.signal @ w)
        mu = shift / math.sqrt(var) if var > 0 else (math.inf if shift else 0.0)
        score = gaussian_epsilon(mu, delta) - pl.epsilon_claimed
        if best is None or score > best[0]:
            best = (score, pl, w)
    assert best is not None, "no placement"
    return best[1], best[2]


def measure(exp: Experiment, cfg: AuditConfig, seeds: list[int], method: str,
            progress: Callable[[int, int], None]) -> dict:
    """The white-box protocol on ``exp`` with ``len(seeds)`` runs per data
    set: calibration on the first half (runs without the canary; with it too
    when :attr:`Experiment.pairs`), then for each measurement seed a run
    without and one with the canary at the chosen placement.  Returns the
    :class:`~dpreg.audit.config.AuditResult` fields it determines.  Raises
    ParameterError when the canary's shift differs between measured runs (the
    releases are then not the noise-plus-shift the method assumes)."""
    h = len(seeds) // 2
    total = (2 if exp.pairs else 1) * h + 2 * (len(seeds) - h)
    done = 0

    def tick():
        nonlocal done
        done += 1
        progress(done, total)

    runs0, runs1 = [], []
    for s in seeds[:h]:
        runs0.append(exp.run(s, None, False))
        tick()
        if exp.pairs:
            runs1.append(exp.run(s, None, True))
            tick()
    cal0 = np.array(runs0)
    pl, w = choose_placement(exp.placements(cal0, np.array(runs1) if exp.pairs else None), cal0, cfg.delta)
    f = pl.features
    runs0, runs1 = [], []
    for s in seeds[h:]:
        runs0.append(exp.run(s, pl, False)[f])
        tick()
        runs1.append(exp.run(s, pl, True)[f])
        tick()
    y0, y1 = np.array(runs0), np.array(runs1)
    D = y1 - y0
    tol = SHIFT_RTOL * (1.0 + np.abs(y0).max(axis=0))
    if not (np.all(np.isfinite(D)) and np.all(np.ptp(D, axis=0) <= tol)):
        raise ParameterError(f"{exp.target}: the canary's shift of the releases differs between runs (by up to "
                             f"{np.nanmax(np.ptp(D, axis=0)):.3g}): the releases are not data-independent noise "
                             f"plus the canary's contribution, which the white-box audit assumes; audit it end "
                             f"to end")
    shift = float(D.mean(axis=0) @ w)
    s0, s1 = y0 @ w, y1 @ w
    out = {"target": exp.target, "noise": exp.noise, "relation": exp.relation, "params": exp.params,
           "epsilon_claimed": pl.epsilon_claimed, "canary": pl.label, "features": int(len(f)),
           "mu_claimed": mu_for_epsilon(pl.epsilon_claimed, cfg.delta)}
    # the threshold test of the clopper-pearson bound, chosen on the calibration runs
    c0 = cal0[:, f] @ w
    tau, sign = choose_test(c0 + float(pl.signal @ w), c0, cfg.delta, cfg.confidence)
    fp, fn = errors(s1, s0, tau, sign)
    eps_cp, fpr_u, fnr_u = epsilon_lower_bound(fp, len(s0), fn, len(s1), cfg.delta, cfg.confidence)
    out.update(fpr=float(fp[0]) / len(s0), fnr=float(fn[0]) / len(s1), fpr_upper=float(fpr_u[0]),
               fnr_upper=float(fnr_u[0]), threshold=float(tau))
    eps_g, mu_lo, _ = known_shift_lower_bound(s0, shift, cfg.delta, cfg.confidence)
    out["mu_lower"] = mu_lo
    out["epsilon_lower"] = eps_g if method == "gaussian" else float(eps_cp[0])
    return out


def mu_for_epsilon(eps: float, delta: float) -> float:
    """The Gaussian shift-to-noise ratio mu whose exact epsilon at ``delta`` is ``eps``."""
    if not eps > 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_epsilon(hi, delta) < eps:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gaussian_epsilon(mid, delta) < eps else (lo, mid)
    return hi
