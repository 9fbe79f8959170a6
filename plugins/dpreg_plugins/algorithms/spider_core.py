"""Reusable pieces of the SPIDER family (dp-spider, adaptive-spider,
perturbed-sgd): a private SPIDER running-sum estimator and plan-based noise
calibration.  Not a plugin (registers nothing); a library module with a
stable API:

* :class:`SpiderEstimator` - the running estimate
  ``grad_t = O1(x_tau) + sum_{tau < i <= t} O2(x_i, x_{i-1})`` released through
  any :class:`~dpreg.interfaces.NoiseMechanism` (a phase = one O1 call and the
  O2 calls after it; the mechanism is reset at every O1 call).  Sensitivities
  come from clipping in the kernels: O1 per-record gradients clipped to
  ``clip`` (sensitivity ``factor*clip/denom``), O2 per-record differences
  clipped to ``min(M |x_t - x_{t-1}|, diff_cap)`` (sensitivity
  ``factor*that/denom``), ``factor`` = the accountant's relation factor.
  :meth:`SpiderEstimator.steps` runs whole phases in one compiled call
  (the gaussian plugin; the same numbers as ``refresh``/``update``).
* :class:`Release` - what one step released (noisy estimate and diagnostics).
* :func:`norm2` - the sequential norm both loops use (for the O2 clip, the
  projection and the trajectory).
* :func:`planned_event` - the worst-case record's whole exposure for a planned
  sequence of adds, found by dry-running the mechanism class itself against a
  recording accountant (so calibration charges exactly what the run will
  charge, for any noise plugin, including third-party ones).
* :func:`calibrate_noise` - ``accountant.calibrate`` over :func:`planned_event`.
* :class:`RecordingAccountant` - the accountant stand-in used by the dry run.
* :func:`prepay` - charge a fixed plan once, before the first release, and
  get the :class:`PrepaidAccountant` the mechanisms then charge (each release
  checked off against the plan).

Backward-compatibility promise: the names above and their documented
arguments stay; new arguments are keyword-only with defaults.
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from dpreg.accounting import calibration_memo, composed, self_composed
from dpreg.interfaces import NoiseMechanism, Participation

__all__ = ["Release", "SpiderEstimator", "RecordingAccountant", "PrepaidAccountant", "planned_event", "prepay",
           "calibrate_noise", "norm2"]


def norm2(v: np.ndarray) -> float:
    """The Euclidean norm of ``v``, summed in index order: the norm of the
    compiled steps (:func:`dpreg_kernels.spider.norm2`), so the step-at-a-time
    and compiled loops give the same numbers."""
    return float(_compiled_norm2()(np.ascontiguousarray(v, dtype=np.float64)))


@functools.cache
def _compiled_norm2():
    """:func:`dpreg_kernels.spider.norm2`, imported (and loaded or compiled) on
    first use, not when this module is imported; then looked up once."""
    from dpreg_kernels.spider import norm2 as compiled

    return compiled



# ------------------------------------------------------------------ estimator
@dataclass
class Release:
    """One noisy release of the running SPIDER estimate.

    value:       the noisy running estimate (what the algorithm may use)
    kind:        "O1" (fresh gradient, new phase) or "O2" (difference added)
    sensitivity: enforced l2 sensitivity of the increment just added
    batch:       records in the increment's batch
    clipped:     per-record terms the kernel clipped
    phase:       index of the current phase (O1 calls so far - 1)
    step:        adds in the current phase (1 for the O1 add)
    """

    value: np.ndarray
    kind: str
    sensitivity: float
    batch: int
    clipped: int
    phase: int
    step: int


class SpiderEstimator:
    """Private SPIDER running-sum estimator over a problem and a noise mechanism.

    Construct with the mechanism *class*; the estimator instantiates it once
    (``dim=problem.d``, the given multiplier, ``horizon`` = the largest number
    of adds in one phase, the accountant, ``seed``) and resets it at each
    :meth:`refresh`.  Every add charges the accountant before releasing
    (BudgetExceededError propagates, nothing released).

    clip:       per-record gradient bound C of O1 (e.g. the loss's G)
    smoothness: M of O2's per-record clip M |x_t - x_{t-1}|
    diff_cap:   optional extra cap on O2's per-record clip (e.g. 2C, the
                Lipschitz bound of a gradient difference); None: no cap
    o1_noise_multiplier: a separate multiplier z1 for O1 (DP-SPIDER Alg 1's
                sigma_1 apart from sigma_2): O1 is then released by its own
                mechanism instance (one add per phase, horizon 1, seed
                ``o1_seed``) and the O2 sum by the main one (z, horizon
                ``horizon - 1``); the estimate is their sum.  None: one
                mechanism and one multiplier for both.
    """

    def __init__(self, problem, noise_cls: type[NoiseMechanism], *, noise_multiplier: float,
                 horizon: int, accountant, seed, clip: float, smoothness: float,
                 diff_cap: float | None = None, o1_noise_multiplier: float | None = None, o1_seed=None):
        if not (clip > 0 and np.isfinite(clip)):
            raise ValueError(f"clip must be a finite positive number, got {clip}")
        if not (smoothness > 0 and np.isfinite(smoothness)):
            raise ValueError(f"smoothness must be a finite positive number, got {smoothness}")
        self.problem = problem
        self.accountant = accountant
        self.factor = float(accountant.sensitivity_factor)
        self.clip = float(clip)
        self.smoothness = float(smoothness)
        self.diff_cap = None if diff_cap is None else float(diff_cap)
        self.separate = o1_noise_multiplier is not None
        if o1_noise_multiplier is not None:  # self.separate
            if o1_seed is None:
                raise ValueError("a separate O1 multiplier needs its own secret seed (o1_seed)")
            self.o1_mechanism = noise_cls(dim=problem.d, noise_multiplier=float(o1_noise_multiplier), horizon=1,
                                          accountant=accountant, seed=o1_seed)
        self.mechanism = noise_cls(dim=problem.d, noise_multiplier=noise_multiplier,
                                   horizon=max(1, int(horizon) - 1) if self.separate else int(horizon),
                                   accountant=accountant, seed=seed)
        self._base: np.ndarray | None = None  # O1 release (separate multipliers only)
        self._adds = 0             # adds in the current phase (O1 included)
        self.phases = 0            # O1 calls
        self.o2_calls = 0
        self.gradient_evaluations = 0  # per-record gradients computed (a difference counts 2)
        self.records = 0           # per-record terms touched (record-uses)
        self.max_phase_steps = 0
        self._started = False

    @property
    def noise_multiplier(self) -> float:
        return self.mechanism.z

    @property
    def phase_steps(self) -> int:
        """Adds in the current phase (the O1 add included)."""
        return self._adds

    def refresh(self, w: np.ndarray, idx: np.ndarray, participation: Participation, *,
                denom: float | None = None) -> Release:
        """O1: start a new phase at ``w`` with the clipped gradient mean over
        ``idx`` (divided by ``denom``, default ``len(idx)``; pass the public
        expected size for Poisson batches) and release it."""
        if self._started:
            self.mechanism.reset()
            if self.separate:
                self.o1_mechanism.reset()
        self._started = True
        b = len(idx)
        den = float(denom if denom is not None else max(b, 1))
        s, ncl = self.problem.clipped_grad_sum(w, idx, self.clip) if b else (np.zeros(self.problem.d), 0)
        sens = self.factor * self.clip / den
        if self.separate:
            value = self._base = np.array(self.o1_mechanism.add(s / den, sens, participation), dtype=float)
        else:
            value = self.mechanism.add(s / den, sens, participation)
        self._adds = 1
        self.phases += 1
        self.gradient_evaluations += b
        self.records += b
        self.max_phase_steps = max(self.max_phase_steps, self._adds)
        return Release(value, "O1", sens, b, int(ncl), self.phases - 1, self._adds)

    def o2_clip(self, w: np.ndarray, w_prev: np.ndarray) -> float:
        """Per-record clip of O2 between ``w_prev`` and ``w``:
        min(M |w - w_prev|, diff_cap) (the norm: :func:`norm2`)."""
        c = self.smoothness * norm2(np.asarray(w, dtype=float) - np.asarray(w_prev, dtype=float))
        return c if self.diff_cap is None else min(c, self.diff_cap)

    @property
    def compiled_steps(self) -> bool:
        """Whether :meth:`steps` serves this estimator: every mechanism it
        releases through draws each add's noise on its own and may be drawn
        from in place of its ``add``
        (:meth:`~dpreg.interfaces.NoiseMechanism.draws_as_it_adds`: the gaussian
        plugin, not a subclass that changes ``add``), and the problem runs
        compiled steps (``Problem.spider_steps_available``: dense or CSR rows,
        its own clipped sums)."""
        pb = self.problem
        return (type(self.mechanism).draws_as_it_adds()
                and (not self.separate or type(self.o1_mechanism).draws_as_it_adds())
                and getattr(pb, "spider_steps_available", None) is not None and pb.spider_steps_available())

    def steps(self, w: np.ndarray, w_prev: np.ndarray, batches: Sequence[tuple[np.ndarray, Participation]], *,
              phase: int, step: float, radius: float | None, full1: bool, denom1: float, denom2: float):
        """``k = len(batches)`` steps of projected descent on the estimate,
        whole phases of ``phase`` steps from a phase start (the last may be
        shorter), in one compiled call (``Problem.spider_steps``).  Step i
        releases the estimate exactly as :meth:`refresh` (i % phase == 0, on
        batch i) or :meth:`update` would - the same clipped sums,
        sensitivities, noise draws, charges and arithmetic, hence the same
        numbers - and moves ``w_prev, w = w, project(w - step * g_i, radius,
        norm2)``.  ``full1``: every O1 batch is all the
        records (its rows are then not passed).  ``denom1``/``denom2``: the
        divisors of the O1 and O2 sums (the public expected batch sizes, as
        :meth:`refresh` and :meth:`update` take them).  Every phase's noise is
        drawn and its adds charged
        (:meth:`~dpreg.interfaces.NoiseMechanism.draw_phases`) before the call,
        so before any of its releases.  Requires
        :attr:`compiled_steps`.  Returns ``(w, w_prev, W, gn, sens, clipped,
        batch)``: the k iterates (k, d), and per step the estimate's norm, the
        add's sensitivity, the clipped terms and the batch size."""
        if not self.compiled_steps:
            raise RuntimeError("SpiderEstimator.steps: the mechanism or the problem has no compiled steps")
        k = len(batches)
        q = int(phase)
        if k < 1:
            raise ValueError("steps needs at least one batch")
        pb = self.problem
        n_o1 = -(-k // q)
        p1 = batches[0][1]
        o2 = [batches[i] for i in range(k) if i % q]
        p2: Any = o2[0][1] if o2 else None  # None: no O2 adds (their counts are all 0)
        if any(batches[i][1] != p1 for i in range(0, k, q)) or any(p != p2 for _, p in o2):
            raise ValueError("steps: the O1 batches must share one participation, and the O2 batches another")
        passed = [not (full1 and i % q == 0) for i in range(k)]  # a full O1 batch's rows are not passed
        sizes = np.array([len(b[0]) if keep else pb.n for b, keep in zip(batches, passed)], dtype=np.int64)
        offsets = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(sizes * np.array(passed), out=offsets[1:])
        parts = [b[0] for b, keep in zip(batches, passed) if keep]
        rows = np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, dtype=np.int64)
        o1_mech = self.o1_mechanism if self.separate else self.mechanism
        m = [min(q, k - p * q) - 1 for p in range(n_o1)]  # each phase's O2 adds
        first = self._started  # a phase before this call: every phase here starts with a reset
        if self.separate:  # per phase: reset both, O1's add by its own mechanism, the O2 adds by the running sum
            noise1 = o1_mech.draw_phases([[(1, p1)]] * n_o1, reset_first=first)
            noise2 = self.mechanism.draw_phases([[(mp, p2)] for mp in m], reset_first=first)
        else:  # per phase: reset, then the O1 add and the O2 adds, in add order
            z = self.mechanism.draw_phases([[(1, p1), (mp, p2)] for mp in m], reset_first=first)
            at1 = np.cumsum([0] + [1 + mp for mp in m[:-1]])  # each phase's first row
            noise1 = z[at1]
            noise2 = np.delete(z, at1, axis=0)
        self._started = True
        den1, den2 = float(denom1), float(denom2)
        sens1 = self.factor * self.clip / den1
        w, wp, W, gn, sens, ncl = pb.spider_steps(
            w, w_prev, rows, offsets, full1, noise1, noise2, phase=q, sens1=sens1, scale1=o1_mech.z * float(sens1),
            z2=self.mechanism.z, factor=self.factor, separate=self.separate, clip=self.clip,
            smoothness=self.smoothness, diff_cap=self.diff_cap, denom1=den1, denom2=den2, step=step, radius=radius)
        o1 = sizes[0::q]
        self.phases += n_o1
        self.o2_calls += k - n_o1
        self.gradient_evaluations += int(o1.sum()) + 2 * int(sizes.sum() - o1.sum())
        self.records += int(sizes.sum())
        self._adds = k - (n_o1 - 1) * q
        self.max_phase_steps = max(self.max_phase_steps, min(q, k))
        return w, wp, W, gn, sens, ncl, sizes

    def update(self, w: np.ndarray, w_prev: np.ndarray, idx: np.ndarray, participation: Participation, *,
               denom: float | None = None) -> Release:
        """O2: add the clipped gradient-difference mean over ``idx`` between
        ``w_prev`` and ``w`` to the running sum and release it (requires a
        prior :meth:`refresh`)."""
        if not self._started:
            raise RuntimeError("SpiderEstimator.update before the first refresh")
        b = len(idx)
        den = float(denom if denom is not None else max(b, 1))
        c = self.o2_clip(w, w_prev)
        if c > 0 and b:
            s, ncl = self.problem.clipped_diff_sum(w, w_prev, idx, c)
        else:
            s, ncl = np.zeros(self.problem.d), 0
        sens = self.factor * c / den
        value = self.mechanism.add(s / den, sens, participation)
        if self.separate:
            value = self._base + value
        self._adds += 1
        self.o2_calls += 1
        self.gradient_evaluations += 2 * b
        self.records += b
        self.max_phase_steps = max(self.max_phase_steps, self._adds)
        return Release(value, "O2", sens, b, int(ncl), self.phases - 1, self._adds)


# ------------------------------------------------------------- calibration
@dataclass
class RecordingAccountant:
    """Stand-in accountant that records every charge (for dry runs)."""

    relation: str = "replace-one"
    global_events: list = field(default_factory=list)
    group_events: dict = field(default_factory=dict)

    @property
    def sensitivity_factor(self) -> float:
        return 1.0 if self.relation == "add-remove" else 2.0

    def charge(self, event, group: Hashable | None = None, *, label: str = "",
               pass_id: Hashable | None = None) -> float:
        if group is None:
            self.global_events.append(event)
        else:
            self.group_events.setdefault((pass_id, group), []).append(event)
        return 0.0


def _compress(events: Iterable) -> list:
    try:
        counts = Counter(events)
    except TypeError:  # unhashable events: keep them as they are
        return list(events)
    return [self_composed(e, c) for e, c in counts.items()]


def _dry_run(noise_cls: type[NoiseMechanism], noise_multiplier: float, horizon: int,
             phases: Sequence[tuple[int, Sequence[Participation]]], relation: str) -> tuple[Counter, list]:
    """``(global charges with their counts, charges of the most charged
    disjoint group)`` of a planned run: one phase of each kind dry-run by the
    mechanism class itself, its charges counted ``repeat`` times.  A pure
    function of its arguments (a mechanism's charges depend on its
    multiplier, horizon and the participations alone: the premise of
    :func:`planned_event`), memoised process-wide (a calibration asks for the
    same trial multipliers in every run of the same plan, and a dry run builds
    a mechanism per phase kind: :func:`dpreg.accounting.calibration_memo`);
    each call gets its own copies."""
    key = tuple((int(r), tuple(parts)) for r, parts in phases)
    try:
        hash(key)
    except TypeError:  # an unhashable participation group: not memoised
        return _dry_run_now(noise_cls, noise_multiplier, horizon, phases, relation)
    counts, group = _dry_run_memo(noise_cls, float(noise_multiplier), int(horizon), key, relation)
    return Counter(counts), list(group)


def _dry_run_now(noise_cls, noise_multiplier, horizon, phases, relation) -> tuple[Counter, list]:
    """:func:`_dry_run`, computed."""
    global_counts: Counter = Counter()
    worst_group: list = []
    for repeat, parts in phases:
        if repeat <= 0 or not parts:
            continue
        rec = RecordingAccountant(relation)
        mech = noise_cls(dim=1, noise_multiplier=noise_multiplier, horizon=int(horizon),
                         accountant=rec, seed=0)
        zero = np.zeros(1)
        for p in parts:
            mech.add(zero, 1.0, p)
        for e, c in Counter(rec.global_events).items():
            global_counts[e] += c * int(repeat)
        if rec.group_events:
            g = max(rec.group_events.values(), key=len)
            if len(g) > len(worst_group):
                worst_group = list(g)
    return global_counts, worst_group


_dry_run_memo = calibration_memo(_dry_run_now)


def planned_event(noise_cls: type[NoiseMechanism], noise_multiplier: float, horizon: int,
                  phases: Sequence[tuple[int, Sequence[Participation]]], *, relation: str = "replace-one",
                  passes: int = 1):
    """The exposure of the worst-case record over a planned run, as one event.

    ``phases`` is a list of ``(repeat, participations)``: a phase (one reset,
    then one add per participation) repeated ``repeat`` times.  The mechanism
    class is dry-run (dim 1, zero increments, unit sensitivities - events
    depend only on the noise multiplier) against a :class:`RecordingAccountant`;
    the result composes every global charge with the charges of the most
    charged disjoint group (disjoint groups compose in parallel).  Give
    disjoint participations distinct groups, as the run will.

    ``passes`` (keyword, default 1): ``phases`` plans *one pass* of a run that
    makes ``passes`` passes over the records, each a fresh partition into
    disjoint batches under its own ``pass_id``; the one-pass event is then
    composed ``passes`` times - a record is in one group of every pass, and its
    exposure is the worst group of each pass summed over the passes, the rule
    :mod:`dpreg.accounting` charges by.
    """
    if int(passes) < 1:
        raise ValueError(f"planned_event: passes must be >= 1, got {passes!r}")
    global_counts, worst_group = _dry_run(noise_cls, noise_multiplier, horizon, phases, relation)
    events = [self_composed(e, c) for e, c in global_counts.items()] + _compress(worst_group)
    if not events:
        raise ValueError("planned_event: the plan releases nothing")
    one_pass = events[0] if len(events) == 1 else composed(events)
    return self_composed(one_pass, int(passes))


class PrepaidAccountant:
    """What a run's noise mechanisms charge once the run's whole fixed plan
    has been charged to the real accountant, as one event before the first
    release (:func:`prepay`).  Each charge is checked off against the plan's
    releases - the events the mechanisms' own dry run recorded - and a charge
    outside the plan raises RuntimeError *before* its release: a run never
    releases more than it paid for.  A charge here is a dictionary look-up,
    not an accountant update.

    ``released``: charges checked off so far; ``left()``: planned releases
    not (yet) made."""

    def __init__(self, accountant, planned: Counter):
        self.accountant = accountant
        self.relation = accountant.relation
        self._planned = sum(planned.values())
        #: per planned event, a one-element list: the releases of it not yet made
        self._left = {e: [int(c)] for e, c in planned.items()}
        #: the event last charged and its cell: a release of k adds charges one event
        #: object k times (interfaces.charge), looked up once instead of k times
        #: (an event's hash is computed anew each time)
        self._last: Any = None
        self._last_cell: list[int] | None = None

    @property
    def sensitivity_factor(self) -> float:
        return float(self.accountant.sensitivity_factor)

    def charge(self, event, group: Hashable | None = None, *, label: str = "",
               pass_id: Hashable | None = None) -> float:
        if event is self._last:
            cell = self._last_cell
        else:
            cell = self._left.get(event)
            self._last, self._last_cell = event, cell
        if group is not None or cell is None or cell[0] <= 0:
            raise RuntimeError(f"release {label or event!r} is not in the prepaid plan "
                               f"(a bug: the plan charged before the run does not cover it)")
        cell[0] -= 1
        return self.accountant.epsilon_spent

    def left(self) -> int:
        return sum(c[0] for c in self._left.values())

    @property
    def released(self) -> int:
        return self._planned - self.left()


def prepay(accountant, noise_cls: type[NoiseMechanism],
           parts: Sequence[tuple[float, int, Sequence[tuple[int, Sequence[Participation]]]]], *,
           label: str = "") -> PrepaidAccountant:
    """Charge a run's fixed plan to ``accountant`` before its first release
    and return the :class:`PrepaidAccountant` its mechanisms charge instead.

    ``parts``: ``(noise_multiplier, horizon, phases)`` per mechanism instance
    of the run (as :func:`planned_event` takes them; one mechanism class).
    The charged event is the composition of every planned release - the
    event :func:`planned_event` gives for one part, and their composition
    for several - so it is what calibration measured.  Raises
    BudgetExceededError (nothing charged) if the plan does not fit, and
    ValueError for a plan with disjoint-group releases (charge those per
    release)."""
    total: Counter = Counter()
    for z, horizon, phases in parts:
        counts, group = _dry_run(noise_cls, z, horizon, phases, accountant.relation)
        if group:
            raise ValueError("prepay: the plan has disjoint-group releases; charge them per release")
        total.update(counts)
    if not total:
        raise ValueError("prepay: the plan releases nothing")
    events = [self_composed(e, c) for e, c in total.items()]
    accountant.charge(events[0] if len(events) == 1 else composed(events), None,
                      label=label or f"{sum(total.values())} planned releases, charged before the first")
    return PrepaidAccountant(accountant, total)


def calibrate_noise(accountant, noise_cls: type[NoiseMechanism], horizon: int,
                    phases: Sequence[tuple[int, Sequence[Participation]]], *, passes: int = 1) -> float:
    """Smallest noise multiplier z for which the planned run fits the
    accountant's remaining budget (``accountant.calibrate`` over
    :func:`planned_event`, ``phases`` planning one of ``passes`` passes);
    raises ParameterError if none does."""
    return accountant.calibrate(lambda z: planned_event(noise_cls, z, horizon, phases,
                                                        relation=accountant.relation, passes=passes))
