"""Privacy accounting: the single source of every reported (epsilon, delta).

Events are Google dp-accounting ``DpEvent`` objects describing what *one
worst-case record* is exposed to.  A charge is either

* **global** (``group=None``): the release may involve every record (full-batch
  gradients, Poisson-subsampled steps, selections over the whole data set);
  global charges compose with everything; or
* **grouped** (``group=g``, ``pass_id=p``): only the records of batch ``g`` of
  the *pass* ``p`` are involved.  A pass is one partition of the records into
  disjoint batches (one :class:`dpreg.access.SinglePass`: each record is in at
  most one of its batches); a run may make several passes (warm start and
  hyper-parameter selection run several single-pass stages over the same
  records).  A record is in at most one group of each pass, so its privacy
  loss is the global charges composed with, for every pass, the charges of
  its group in that pass; the reported epsilon bounds the worst record:
  **global + sum over passes of the worst group of the pass** (issue 10,
  finding 6).  Group names are local to their pass: two passes may both name
  their batches ``("batch", 1)``, ...  ``pass_id=None`` is one default pass.

:meth:`Accountant.charge` is called *before* the release it describes; if the
release would make epsilon exceed the budget it raises
:class:`~dpreg.errors.BudgetExceededError` and records nothing.

Neighbouring relation: ``"add-remove"`` (Poisson subsampling, dp-accounting's
default) or ``"replace-one"`` (fixed-size and disjoint batches).  Mechanisms
The record count n is public: batch denominators and sampling rates use it, and
an add-remove neighbour is run with the same n (as in Opacus and TF Privacy).
Mechanisms compute their sensitivities under the relation of the accountant they charge
(``Accountant.sensitivity_factor``: 1 for add-remove, 2 for replace-one, times
the per-record clipping bound).
"""
from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections import Counter
from typing import Callable, Hashable

import numpy as np

from .errors import BudgetExceededError, DpregError, ParameterError

RELATIONS = ("add-remove", "replace-one")
#: relative slack when comparing a spent epsilon with the budget (calibration
#: brackets land just under the target; floating noise must not refuse them)
_SLACK = 1e-9


def check_budget_args(epsilon: float, delta: float) -> None:
    """Raise ParameterError unless 0 < epsilon < inf and 0 < delta < 1."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")


@functools.cache  # a call per charge: the import statement runs once
def _dpa():
    """dp-accounting's names (:mod:`dpreg.dp_accounting_names`: each from its own module,
    imported on first use; lazy, so `dpreg --help` imports none)."""
    import logging  # dp-accounting warns through absl on extreme trial events

    from .dp_accounting_names import dpa

    logging.getLogger("absl").setLevel(logging.ERROR)
    return dpa


def _atoms(event) -> Counter:
    """The multiset of elementary releases an event composes: Composed and
    SelfComposed events are unrolled, anything else counts as one atom."""
    dpa = _dpa()
    if isinstance(event, dpa.ComposedDpEvent):
        out: Counter = Counter()
        for e in event.events:
            out += _atoms(e)
        return out
    if isinstance(event, dpa.SelfComposedDpEvent):
        return Counter({a: c * event.count for a, c in _atoms(event.event).items()})
    if isinstance(event, dpa.NoOpDpEvent):
        return Counter()
    return Counter({event: 1})


def _min_gaussian_noise(events) -> float:
    """Smallest Gaussian noise multiplier among the atoms of ``events`` (inf if none)."""
    dpa = _dpa()
    z = math.inf
    for e in events:
        for a in _atoms(e):
            inner = a.event if isinstance(a, dpa.PoissonSampledDpEvent) else a
            if isinstance(inner, dpa.GaussianDpEvent):
                z = min(z, inner.noise_multiplier)
    return z


def _pld_replace_one(event):
    """Translate an event from dpreg's convention to dp-accounting's PLD
    convention under REPLACE_ONE.

    dpreg: ``GaussianDpEvent(z)`` is a release with noise std = z times its l2
    sensitivity *under the accountant's relation* (mechanisms already double
    the per-record bound for replace-one).  dp-accounting's RDP accountant reads
    it the same way, but its PLD accountant under REPLACE_ONE takes z relative
    to the per-record bound and applies sensitivity 2 itself.  The same
    release is therefore ``GaussianDpEvent(2 z)`` for the PLD accountant
    (tests/test_accounting.py checks both against the analytic Gaussian).
    """
    dpa = _dpa()
    if isinstance(event, dpa.GaussianDpEvent):
        return dpa.GaussianDpEvent(2.0 * event.noise_multiplier)
    if isinstance(event, dpa.SelfComposedDpEvent):
        return dpa.SelfComposedDpEvent(_pld_replace_one(event.event), event.count)
    if isinstance(event, dpa.ComposedDpEvent):
        return dpa.ComposedDpEvent([_pld_replace_one(e) for e in event.events])
    return event


def _condensed(events) -> tuple:
    """Events as a canonical tuple of SelfComposed atoms (cache key and a
    cheap composition order: one self-composition per distinct atom)."""
    total: Counter = Counter()
    for e in events:
        total += _atoms(e)
    return tuple(sorted(((self_composed(a, c)) for a, c in total.items()), key=repr))


class Accountant(ABC):
    """Composes charged events; enforces an (epsilon, delta) budget.

    Subclasses implement :meth:`_epsilon_of` (epsilon of the global charges
    composed with one group's charges, at ``self.delta``).
    """

    name = "accountant"

    def __init__(self, epsilon: float, delta: float, relation: str = "replace-one"):
        check_budget_args(epsilon, delta)
        if relation not in RELATIONS:
            raise ParameterError(f"relation must be one of {', '.join(RELATIONS)}, got {relation!r}")
        self.epsilon_budget = float(epsilon)
        self.delta = float(delta)
        self.relation = relation
        self._global: list = []
        #: grouped charges by key (pass_id, group)
        self._groups: dict[tuple, list] = {}
        self._eps = 0.0
        self._stale = False
        self.n_charges = 0
        # reservation (see reserve()): atom counts of the charged events
        self._reserved: Counter | None = None
        self._gcount: Counter = Counter()
        self._groupcount: dict[tuple, Counter] = {}
        #: per pass, the atom-wise maximum over its groups (dominates every group
        #: of the pass); _maxg is their sum over passes (dominates every record)
        self._maxg_pass: dict[Hashable, Counter] = {}
        self._maxg: Counter = Counter()
        self.n_covered = 0
        #: whether what is charged is inside the reservation (every atom: global +
        #: worst record's group count <= reserved): then a charge is covered iff its
        #: own atoms fit, which :meth:`_covered` checks without composing counters
        self._within = False
        #: atoms of the events charged so far (a run charges the same few events
        #: thousands of times; the Counters here are never mutated)
        self._atoms_memo: dict = {}

    # -- the interface mechanisms use ------------------------------------------
    @property
    def sensitivity_factor(self) -> float:
        """Multiplier turning a per-record clip bound C into the l2 sensitivity
        of a sum under this accountant's relation (C or 2C)."""
        return 1.0 if self.relation == "add-remove" else 2.0

    def charge(self, event, group: Hashable | None = None, *, label: str = "",
               pass_id: Hashable | None = None) -> float:
        """Record ``event`` (globally, or for the disjoint batch ``group`` of the
        pass ``pass_id``) if the budget allows it; return the epsilon spent so
        far (after a charge covered by the reservation: the last computed
        value - read :attr:`epsilon_spent` for the exact one).  Raises
        BudgetExceededError *without recording* if it does not.

        A charge covered by the reservation (:meth:`reserve`) is accepted
        without recomputing epsilon: the reserved multiset of releases was
        checked to fit, and composing fewer releases never costs more."""
        if group is None and pass_id is not None:
            raise ParameterError("a pass_id needs a group (a global charge has no pass)")
        key = None if group is None else (pass_id, group)
        try:
            atoms = self._atoms_memo[event]
        except KeyError:
            atoms = _atoms(event)
            if len(self._atoms_memo) < 4096:
                self._atoms_memo[event] = atoms
        except TypeError:  # an unhashable event
            atoms = _atoms(event)
        if self._covered(atoms, key):
            self._commit(event, key)
            self._count(atoms, key)
            self._stale = True
            self.n_charges += 1
            self.n_covered += 1
            return self._eps  # last computed value; epsilon_spent computes the exact one lazily
        eps = self._what_if(event, key)
        if eps > self.epsilon_budget * (1 + _SLACK):
            raise BudgetExceededError(
                f"release {label or type(event).__name__} refused: it would spend "
                f"epsilon={eps:.4g} > budget {self.epsilon_budget:g} at delta={self.delta:g}"
            )
        self._commit(event, key)
        self._count(atoms, key)
        self._within = False  # charged outside the reservation: check covers in full from now on
        self._eps = eps
        self._stale = False
        self.n_charges += 1
        return eps

    # -- reservation ---------------------------------------------------------------
    def reserve(self, plan_event) -> None:
        """Reserve a planned global exposure ``plan_event`` on top of what is
        charged (raises BudgetExceededError if it does not fit).  Afterwards a
        charge whose releases, added to those already charged to the worst
        record, stay inside the reserved multiset is accepted without an
        epsilon computation - which makes per-release enforcement cheap for
        the PLD accountant.  :meth:`calibrate` reserves the plan it returns."""
        if not self.fits(plan_event):
            raise BudgetExceededError(
                f"plan spends epsilon={self.epsilon_of_plan(plan_event):.4g} > budget "
                f"{self.epsilon_budget:g} (over by {self.epsilon_of_plan(plan_event) - self.epsilon_budget:.4g})"
            )
        self._reserved = self._gcount + self._maxg + _atoms(plan_event)
        self._within = True

    def _covered(self, atoms: Counter, key) -> bool:
        """Whether, after this charge, every record's releases stay inside the
        reserved multiset.  A record of group ``(p, g)`` is exposed to at most
        the global atoms + its group's + the atom-wise worst group of every
        other pass; every other record's exposure is unchanged.

        While what is charged is inside the reservation (``_within``: set by
        :meth:`reserve`, kept by covered charges, cleared by any other), only
        the charge's own atoms can leave it, so only they are checked - the
        same answer as :meth:`_covered_full` (tests/test_accounting.py checks
        both on random charge sequences), without composing counters."""
        if self._reserved is None:
            return False
        if not self._within:
            return self._covered_full(atoms, key)
        r, gc, mg = self._reserved, self._gcount, self._maxg
        if key is None:
            return all(r.get(a, 0) >= gc.get(a, 0) + c + mg.get(a, 0) for a, c in atoms.items())
        mp = self._maxg_pass.get(key[0]) or {}
        gk = self._groupcount.get(key) or {}
        return all(r.get(a, 0) >= gc.get(a, 0) + mg.get(a, 0) - mp.get(a, 0) + gk.get(a, 0) + c
                   for a, c in atoms.items())

    def _covered_full(self, atoms: Counter, key) -> bool:
        """:meth:`_covered` by composing the whole state (any state)."""
        if self._reserved is None:
            return False
        r = self._reserved
        if key is None:
            need = self._gcount + atoms + self._maxg
        else:
            others = self._maxg - self._maxg_pass.get(key[0], Counter())  # exact: _maxg sums the passes
            need = self._gcount + others + self._groupcount.get(key, Counter()) + atoms
        return all(r.get(a, 0) >= c for a, c in need.items())

    def _count(self, atoms: Counter, key) -> None:
        if key is None:
            self._gcount += atoms
        else:
            g = self._groupcount.setdefault(key, Counter())
            g += atoms
            worst = self._maxg_pass.setdefault(key[0], Counter())
            for a, c in g.items():
                if c > worst.get(a, 0):
                    self._maxg[a] += c - worst.get(a, 0)
                    worst[a] = c

    def epsilon_if(self, event, group: Hashable | None = None, *, pass_id: Hashable | None = None) -> float:
        """Epsilon that would be spent after charging ``event`` (nothing recorded)."""
        return self._what_if(event, None if group is None else (pass_id, group))

    @property
    def epsilon_spent(self) -> float:
        """Epsilon of everything charged so far, at ``self.delta``."""
        if self._stale:
            self._eps = self._exact_epsilon()
            self._stale = False
        return self._eps

    def state(self) -> dict:
        """JSON-ready summary of what was charged and spent."""
        return {
            "accountant": self.name,
            "relation": self.relation,
            "epsilon_budget": self.epsilon_budget,
            "delta": self.delta,
            "epsilon_spent": self.epsilon_spent,
            "charges": self.n_charges,
            "charges_covered_by_reservation": self.n_covered,
            "global_events": len(self._global),
            "groups": len(self._groups),
            "passes": len({k[0] for k in self._groups}),
        }

    # -- calibration -------------------------------------------------------------
    def epsilon_of_plan(self, event) -> float:
        """Epsilon of a whole planned run described as one global event, on
        top of what is already charged."""
        return self.epsilon_if(event, None)

    def fits(self, event) -> bool:
        """Whether a planned global ``event`` fits the remaining budget (on top
        of what is charged); :meth:`calibrate` searches on the same
        comparison.  A :class:`BudgetView` also checks its parent's budget."""
        return self.epsilon_of_plan(event) <= self.epsilon_budget

    def view(self, epsilon: float, delta: float) -> "BudgetView":
        """A budget-limited view for one stage of a composite run (see
        :class:`BudgetView`): charges go to this accountant, and the stage's
        own charges may not exceed (epsilon, delta)."""
        return BudgetView(self, epsilon, delta)

    def fresh(self, epsilon: float, delta: float) -> "Accountant":
        """An empty accountant of the same kind and relation."""
        return type(self)(epsilon, delta, self.relation)

    def calibrate(self, make_event: Callable[[float], object], *, low: float = 1e-3,
                  high: float = 1e6, what: str = "noise multiplier", rtol: float = 1e-7,
                  start: float | None = None) -> float:
        """Smallest noise multiplier z in [low, high] whose planned event
        ``make_event(z)`` (the worst-case record's whole exposure) fits the
        remaining budget, to a relative precision ``rtol`` in z; raises
        ParameterError if even ``high`` does not fit.

        The returned z always fits (its epsilon is <= the budget) and reserves
        its plan (:meth:`reserve`).  Search: a bracket grown geometrically
        from ``start`` (default 1, clamped to [low, high]), then Brent's
        method on log(epsilon / budget) as a function of log z (epsilon is
        decreasing in z); about 8-12 epsilon evaluations instead of the ~30
        of a bisection over [low, high].  Epsilon comes from
        :meth:`epsilon_of_plan`, the same computation every charge uses."""
        from scipy.optimize import brentq

        budget = self.epsilon_budget
        memo: dict[float, float] = {}

        def eps(u: float) -> float:
            if u not in memo:
                memo[u] = self.epsilon_of_plan(make_event(math.exp(u)))
            return memo[u]

        lo_b, hi_b = math.log(low), math.log(high)
        u = min(max(math.log(start) if start else 0.0, lo_b), hi_b)
        step = math.log(4.0)
        if eps(u) <= budget:  # feasible: walk down to an infeasible point
            b = u
            while True:
                a = max(b - step, lo_b)
                if eps(a) > budget:
                    break
                if a == lo_b:
                    z = low
                    self.reserve(make_event(z))
                    return z
                b, step = a, 2 * step
        else:  # infeasible: walk up to a feasible point
            a = u
            while True:
                b = min(a + step, hi_b)
                if eps(b) <= budget:
                    break
                if b == hi_b:
                    raise ParameterError(
                        f"cannot meet epsilon={budget:g}, delta={self.delta:g}: "
                        f"even {what}={high:g} spends more")
                a, step = b, 2 * step

        def h(v: float) -> float:  # log(eps / budget), finite for brentq
            e = eps(v)
            return 700.0 if not e < math.inf else (-700.0 if e <= 0 else min(700.0, math.log(e / budget)))

        root = brentq(h, a, b, xtol=rtol, rtol=4 * np.finfo(float).eps)
        # the root is within rtol of the boundary: take the first feasible of
        # root, root + rtol, root + 2 rtol, b (b is feasible)
        for v in (root, min(root + rtol, b), min(root + 2 * rtol, b), b):
            if eps(v) <= budget:
                break
        z = math.exp(v)
        self.reserve(make_event(z))
        return z

    # -- subclass hooks -----------------------------------------------------------
    @abstractmethod
    def _exact_epsilon(self) -> float:
        """Epsilon of the current state computed from scratch."""

    @abstractmethod
    def _what_if(self, event, key) -> float:
        """Epsilon after charging ``event`` globally (``key=None``) or to the
        group ``key = (pass_id, group)``."""

    @abstractmethod
    def _commit(self, event, key) -> None: ...


@functools.lru_cache(maxsize=65536)
def _atom_rdp(relation: str, atom, orders: tuple) -> np.ndarray:
    """RDP curve (read-only) of one elementary release ``atom`` (a dp-accounting
    event that is not Composed/SelfComposed: typically ``GaussianDpEvent(z)``
    or ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``) at ``orders`` under
    ``relation``.  A pure function of its (hashable, float-valued) arguments,
    cached process-wide: a calibration's trial multipliers, repeated
    calibrations (trials, grids, stage views, the PLD accountant's RDP
    bracket) and the final charge compute each curve once.  The curve is
    dp-accounting's own (a fresh ``RdpAccountant`` composed with the atom);
    binary randomized response (pure-DP releases, see :func:`pure_dp_event`)
    is the closed form, under either relation."""
    dpa = _dpa()
    o = np.asarray(orders, dtype=float)
    if _is_pure(atom):
        curve = _binary_rr_rdp(atom.noise_parameter, o)
    else:
        rel = (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if relation == "add-remove"
               else dpa.NeighboringRelation.REPLACE_ONE)
        acc = dpa.rdp.RdpAccountant(list(orders), rel)
        try:
            acc.compose(atom)
        except dpa.UnsupportedEventError as exc:
            raise DpregError(f"the rdp accountant cannot account {atom!r}: {exc}") from None
        curve = np.array(acc._rdp, dtype=float)  # noqa: SLF001 (tests/test_accounting.py guards it)
    curve.setflags(write=False)
    return curve


@functools.lru_cache(maxsize=64)
def _binomial_terms(int_orders: tuple) -> tuple:
    """For integer orders alpha: ``(alpha per order, alpha per term, first
    term of each order, i per term, log C(alpha, i) per term)`` over i = 0..alpha
    (read-only; they depend on the orders alone, so a calibration search
    computes them once)."""
    from scipy import special

    al = np.asarray(int_orders, dtype=np.int64)
    alpha = np.repeat(al, al + 1).astype(float)
    starts = np.concatenate(([0], np.cumsum(al + 1)[:-1]))
    i = (np.arange(alpha.size) - np.repeat(starts, al + 1)).astype(float)
    log_binom = special.gammaln(alpha + 1) - special.gammaln(i + 1) - special.gammaln(alpha - i + 1)
    for arr in (al, alpha, starts, i, log_binom):
        arr.setflags(write=False)
    return al, alpha, starts, i, log_binom


@functools.lru_cache(maxsize=256)
def _series_coef(frac_orders: tuple, k: int) -> np.ndarray:
    """``log C(alpha, i)`` (gamma-function form) for fractional orders alpha
    and i = 0..k-1, shape (orders, k), read-only: the first factor of every
    term of the erfc series, independent of q and sigma."""
    from scipy import special

    al = np.asarray(frac_orders, dtype=float)[:, None]
    i = np.arange(float(k))[None, :]
    out = special.gammaln(al + 1) - special.gammaln(i + 1) - special.gammaln(al - i + 1)
    out.setflags(write=False)
    return out


def _sampled_gaussian_rdp_np(q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian mechanism (rate ``q``, noise
    multiplier ``sigma``; ``q = 1``: the plain Gaussian) at ``orders``: the
    formulas of dp-accounting's ``_compute_rdp_poisson_subsampled_gaussian``
    (Mironov et al. 2019; integer orders: the binomial sum, fractional orders:
    the two erfc series with dp-accounting's stopping rule and 1000-term
    cap), vectorised with numpy.  Used to *search* for a noise multiplier
    only (:meth:`RdpAccountant.calibrate`): every epsilon that is charged,
    reserved or reported comes from dp-accounting's own curve
    (:func:`_atom_rdp`).  Agrees with it to ~1e-13 relative (tested)."""
    from scipy import special

    a = np.asarray(orders, dtype=float)
    if q == 0:
        return np.zeros_like(a)
    if sigma == 0:
        return np.full_like(a, np.inf)
    if q == 1.0:
        return np.where(np.isinf(a), np.inf, a / (2 * sigma ** 2))
    out = np.full_like(a, np.inf)
    lq, l1mq, s2 = math.log(q), math.log1p(-q), 2 * sigma ** 2
    ints = np.flatnonzero(np.isfinite(a) & (a == np.floor(a)))
    if ints.size:  # log A_alpha = logsumexp_i [log C(alpha, i) + i log q + (alpha - i) log(1-q) + (i^2 - i)/(2 s^2)]
        al, alpha, starts, i, log_binom = _binomial_terms(tuple(a[ints].tolist()))
        t = log_binom + i * lq + (alpha - i) * l1mq + (i * i - i) / s2
        m = np.maximum.reduceat(t, starts)
        mr = np.repeat(m, al + 1)
        top = t == mr  # the largest terms contribute exactly 1 each: log1p of the rest keeps tiny curves exact
        rest = np.add.reduceat(np.where(top, 0.0, np.exp(t - mr)), starts)
        log_a = m + np.log1p(rest + (np.add.reduceat(top.astype(float), starts) - 1.0))
        out[ints] = log_a / (al - 1.0)
    frac = np.flatnonzero(np.isfinite(a) & (a != np.floor(a)))
    z0 = sigma ** 2 * math.log(1 / q - 1) + 0.5
    k = 64
    while frac.size:  # terms 0..k-1 of each remaining order; orders not stopped by then: again with 4k
        al = a[frac][:, None]
        i = np.arange(float(k))[None, :]
        j = al - i
        coef = _series_coef(tuple(a[frac].tolist()), k)
        e0 = math.log(0.5) + math.log(2) + special.log_ndtr(-((i - z0) / (math.sqrt(2) * sigma)) * 2 ** 0.5)
        e1 = math.log(0.5) + math.log(2) + special.log_ndtr(-((z0 - j) / (math.sqrt(2) * sigma)) * 2 ** 0.5)
        ls0 = coef + i * lq + j * l1mq + (i * i - i) / s2 + e0
        ls1 = coef + j * lq + i * l1mq + (j * j - j) / s2 + e1
        total = np.logaddexp.accumulate(np.logaddexp(ls0, ls1), axis=1)
        stop = np.zeros_like(ls0, dtype=bool)
        stop[:, 1:] = ((ls0[:, 1:] < ls0[:, :-1]) & (ls1[:, 1:] < ls1[:, :-1])
                       & (np.maximum(ls0[:, 1:], ls1[:, 1:]) < total[:, 1:] - 30))
        first = np.argmax(stop, axis=1)
        rows = np.arange(len(frac))
        ok = stop[rows, first]
        out[frac[ok]] = total[rows[ok], first[ok]] / (a[frac[ok]] - 1.0)
        frac = frac[~ok]
        if k == 1000:  # dp-accounting's cap: no convergence, the order is excluded (inf)
            break
        k = min(4 * k, 1000)
    return out


@functools.lru_cache(maxsize=4096)
def _lazy_atom(relation: str, atom) -> bool:
    """Whether :class:`RdpAccountant` evaluates ``atom``'s dp-accounting curve
    only at the orders that decide epsilon: a Poisson-subsampled Gaussian
    (0 < q < 1) under add-remove, whose curve :func:`_sampled_gaussian_rdp_np`
    reproduces (every other atom's curve is cheap or has no numpy formula)."""
    dpa = _dpa()
    return (relation == "add-remove" and isinstance(atom, dpa.PoissonSampledDpEvent)
            and isinstance(atom.event, dpa.GaussianDpEvent) and 0 < atom.sampling_probability < 1
            and atom.event.noise_multiplier > 0)


@functools.lru_cache(maxsize=4096)
def _search_curve(relation: str, atom, orders: tuple) -> np.ndarray:
    """Curve (read-only) of ``atom`` for the calibration search: the numpy
    formula for a Gaussian or Poisson-subsampled Gaussian release
    (add-remove), else the exact cached curve.  Cached process-wide like
    :func:`_atom_rdp`: a repeated calibration (the same plan again, a sweep's
    next seed) retraces the same search without recomputing its curves."""
    dpa = _dpa()
    if isinstance(atom, dpa.GaussianDpEvent):
        out = _sampled_gaussian_rdp_np(1.0, atom.noise_multiplier, np.asarray(orders))
    elif (isinstance(atom, dpa.PoissonSampledDpEvent) and relation == "add-remove"
            and isinstance(atom.event, dpa.GaussianDpEvent) and 0 <= atom.sampling_probability <= 1
            and atom.event.noise_multiplier >= 0):
        out = _sampled_gaussian_rdp_np(atom.sampling_probability, atom.event.noise_multiplier,
                                       np.asarray(orders))
    else:
        return _atom_rdp(relation, atom, orders)
    out.setflags(write=False)
    return out


def rdp_cache_info():
    """``functools`` cache statistics of the process-wide RDP curve cache
    (hits, misses: one miss is one curve computed by dp-accounting)."""
    return _atom_rdp.cache_info()


#: the process-wide memos of :func:`calibration_memo`, which :func:`clear_rdp_cache` empties
_CALIBRATION_MEMOS: list = []


def calibration_memo(fn):
    """``functools.lru_cache`` (4096 entries) of ``fn``, a pure function that a noise
    calibration asks again in every run of the same plan (a sweep's seeds, a repeated run),
    registered so that :func:`clear_rdp_cache` forgets it with the curves.  Callers that
    mutate an answer must copy it."""
    memo = functools.lru_cache(maxsize=4096)(fn)
    _CALIBRATION_MEMOS.append(memo)
    return memo


def clear_rdp_cache() -> None:
    """Forget every cached RDP curve and every :func:`calibration_memo` answer
    (benchmarks measure a cold calibration)."""
    _atom_rdp.cache_clear()
    _search_curve.cache_clear()
    for memo in _CALIBRATION_MEMOS:
        memo.cache_clear()


@calibration_memo
def _epsilon_and_order(orders: tuple, delta: float, rdp: bytes) -> tuple[float, float]:
    """dp-accounting's conversion of the RDP curve ``rdp`` (float64 bytes, one value per
    order) at ``delta``: (epsilon, the order attaining it)."""
    eps, order = _dpa().rdp.rdp_privacy_accountant.compute_epsilon(
        np.asarray(orders, dtype=float), np.frombuffer(rdp, dtype=np.float64), delta)
    return float(eps), float(order)


class RdpAccountant(Accountant):
    """Renyi-DP accountant built on ``dp_accounting.rdp``.

    Keeps one RDP curve for global charges and one per disjoint group; the
    reported epsilon converts ``global + sum over passes of the max over the
    pass's groups`` (elementwise - an upper bound on every record's curve)
    with dp-accounting's ``compute_epsilon``.  The curve of an event is
    dp-accounting's composition (the sum of count x curve over its elementary
    releases), each elementary curve cached process-wide (:func:`_atom_rdp`).

    **Orders evaluated lazily.**  dp-accounting's curve of a Poisson-subsampled
    Gaussian costs ~15-25 ms over its 156 default orders (pure Python; the
    integer orders up to 1024 and the fractional series), more than a whole
    DP-SGD run on IJCNN1, and only the order that attains the minimum
    decides epsilon.  Such atoms (add-remove, 0 < q < 1) therefore enter
    the curves as the numpy formula (:func:`_sampled_gaussian_rdp_np`,
    equal to dp-accounting's to ~1e-13 relative) at every order except the
    *exact* ones, where the value is dp-accounting's own.  Every epsilon
    (:meth:`_eps_exact`) is converted by dp-accounting's ``compute_epsilon``;
    if the minimising order is not exact yet, it is made exact (its
    dp-accounting value computed for every atom, the charged curves
    rebuilt from the charged events) and the conversion repeated.  So the
    reported epsilon is dp-accounting's conversion of dp-accounting's curve
    at one order (a valid bound by itself), no larger than every other
    order's value: it is never below dp-accounting's minimum over all
    orders and exceeds it by at most the formula's ~1e-13 relative
    disagreement (tests/test_accounting_lazy_orders.py).  A run typically
    makes 1-3 orders exact.
    """

    name = "rdp"

    def __init__(self, epsilon, delta, relation="replace-one"):
        super().__init__(epsilon, delta, relation)
        dpa = _dpa()
        self._orders = np.array(dpa.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=float)
        self._orders_key = tuple(self._orders.tolist())
        self._rdp_global = np.zeros_like(self._orders)
        self._rdp_groups: dict[tuple, np.ndarray] = {}
        #: per pass, the elementwise max of its groups' curves
        self._max_pass: dict[Hashable, np.ndarray] = {}
        #: curves of the events this accountant has seen (a run charges the
        #: same few events thousands of times: one hash lookup per charge)
        self._curves: dict = {}
        #: orders at which every atom's curve is dp-accounting's own (see the
        #: class docstring); elsewhere lazy atoms hold the numpy formula
        self._exact = np.zeros(len(self._orders), dtype=bool)
        #: whether a lazy atom has entered any curve of this accountant
        self._lazy_seen = False

    def rdp_of(self, event) -> np.ndarray:
        """RDP curve (read-only) of one event at this accountant's orders and
        relation: dp-accounting's composition order and arithmetic (``+= count
        * curve`` per elementary release, counts multiplied through nested
        self-compositions), with cached elementary curves."""
        try:
            return self._curves[event]
        except (KeyError, TypeError):
            pass
        dpa = _dpa()
        out = np.zeros_like(self._orders)
        todo = [(event, 1)]
        while todo:
            e, count = todo.pop()
            if isinstance(e, dpa.SelfComposedDpEvent):
                todo.append((e.event, count * e.count))
            elif isinstance(e, dpa.ComposedDpEvent):
                todo.extend((x, count) for x in reversed(e.events))
            elif isinstance(e, dpa.NoOpDpEvent):
                continue
            else:
                out += count * self._atom_curve(e)
        out.setflags(write=False)
        if len(self._curves) > 4096:
            self._curves.clear()
        try:
            self._curves[event] = out
        except TypeError:
            pass
        return out

    def _atom_curve(self, atom) -> np.ndarray:
        """Curve of one elementary release: dp-accounting's (cached) - for a
        lazy atom (:func:`_lazy_atom`) at the exact orders only, the numpy
        formula at the others."""
        try:
            lazy = _lazy_atom(self.relation, atom)
        except TypeError:  # unhashable event: computed uncached
            return _atom_rdp.__wrapped__(self.relation, atom, self._orders_key)
        if not lazy:
            return _atom_rdp(self.relation, atom, self._orders_key)
        self._lazy_seen = True
        out = np.array(_search_curve(self.relation, atom, self._orders_key))
        for i in np.flatnonzero(self._exact):
            out[i] = _atom_rdp(self.relation, atom, (self._orders_key[i],))[0]
        out.setflags(write=False)
        return out

    def _eps_exact(self, build: Callable[[], np.ndarray]) -> float:
        """Epsilon of the curve ``build()`` (re-evaluated after each order made
        exact) at an order where every atom's value is dp-accounting's."""
        while True:
            eps, order = self._eps_order(build())
            if not self._lazy_seen or not math.isfinite(eps):
                return eps
            i = int(np.flatnonzero(self._orders == order)[0])
            if self._exact[i]:
                return eps
            self._make_exact(i)

    def _make_exact(self, i: int) -> None:
        """Make order ``i`` exact: forget the event curves and rebuild the
        charged curves from the charged events (the order of `_commit`)."""
        self._exact = self._exact.copy()  # a search stand-in may share the old mask
        self._exact[i] = True
        self._curves = {}
        self._rdp_global = np.zeros_like(self._orders)
        self._rdp_groups, self._max_pass = {}, {}
        for e in self._global:
            self._add_curve(e, None)
        for key, evs in self._groups.items():
            for e in evs:
                self._add_curve(e, key)

    def calibrate(self, make_event, *, low=1e-3, high=1e6, what="noise multiplier", rtol=1e-7, start=None):
        """As :meth:`Accountant.calibrate`, in two stages: the search runs on a
        stand-in of this accountant whose Gaussian curves come from the numpy
        formula (:func:`_sampled_gaussian_rdp_np`, milliseconds per trial);
        its answer is then checked with dp-accounting's own curves, which
        alone decide what fits and what is reserved: accepted if it fits and
        spends at least (1 - 1e-3) of the budget (or is ``low``), nudged up
        if it does not fit, else searched again exactly from there."""
        search = _SearchRdp.of(self)
        try:
            z = Accountant.calibrate(search, make_event, low=low, high=high, what=what, rtol=rtol, start=start)
        except ParameterError:  # the exact search gives (or refutes) the verdict
            return Accountant.calibrate(self, make_event, low=low, high=high, what=what, rtol=rtol, start=start)
        budget = self.epsilon_budget
        for _ in range(3):
            e = self.epsilon_of_plan(make_event(z))
            if e <= budget:
                if z == low or e >= budget * (1 - 1e-3):
                    self.reserve(make_event(z))
                    return z
                break
            z = min(z * (1 + 10 * rtol), high)
        return Accountant.calibrate(self, make_event, low=low, high=high, what=what, rtol=rtol, start=z)

    def _eps_order(self, rdp: np.ndarray) -> tuple[float, float]:
        """dp-accounting's conversion of the curve ``rdp`` at ``self.delta``:
        (epsilon, the order attaining it); memoised process-wide by the
        orders, delta and the curve's bytes (:func:`_epsilon_and_order`: a run
        of the same plan converts the same curves again)."""
        if not np.any(rdp):
            return 0.0, float(self._orders[0])
        r = np.ascontiguousarray(rdp, dtype=np.float64)
        return _epsilon_and_order(self._orders_key, float(self.delta), r.tobytes())

    def _eps_from(self, rdp: np.ndarray) -> float:
        return self._eps_order(rdp)[0]

    def _worst_record(self, passes: dict) -> np.ndarray:
        """Global curve + the sum over passes of each pass's worst group."""
        out = self._rdp_global
        for curve in passes.values():
            out = out + curve
        return out

    def _what_if(self, event, key):
        def build():
            r = self.rdp_of(event)
            if key is None:
                return self._worst_record(self._max_pass) + r
            g = self._rdp_groups.get(key)
            new_g = r if g is None else g + r
            old = self._max_pass.get(key[0])
            passes = dict(self._max_pass)
            passes[key[0]] = new_g if old is None else np.maximum(old, new_g)
            return self._worst_record(passes)

        return self._eps_exact(build)

    def _exact_epsilon(self):
        return self._eps_exact(lambda: self._worst_record(self._max_pass))

    def epsilon_of_events(self, events) -> float:
        """Epsilon of ``events`` composed (this accountant's orders, relation
        and delta; nothing charged or recorded)."""
        return self._eps_exact(lambda: sum((self.rdp_of(e) for e in events), np.zeros_like(self._orders)))

    def _commit(self, event, key):
        self._add_curve(event, key)
        if key is None:
            self._global.append(event)
        else:
            self._groups.setdefault(key, []).append(event)

    def _add_curve(self, event, key):
        """Add ``event``'s curve to the global curve, or to its group's and
        that group's pass maximum (the charged curves; the event lists are
        :meth:`_commit`'s)."""
        r = self.rdp_of(event)
        if key is None:
            self._rdp_global = self._rdp_global + r
        else:
            g = self._rdp_groups.get(key)
            new_g = r if g is None else g + r
            self._rdp_groups[key] = new_g
            old = self._max_pass.get(key[0])
            self._max_pass[key[0]] = new_g if old is None else np.maximum(old, new_g)


class _SearchRdp(RdpAccountant):
    """Calibration-search stand-in of an :class:`RdpAccountant`: the same
    charged state, Gaussian curves from the numpy formula.  It only answers
    what-if questions during :meth:`RdpAccountant.calibrate`; it is never
    charged, and its curves never enter the real accountant's caches."""

    @classmethod
    def of(cls, acc: RdpAccountant) -> "_SearchRdp":
        s = cls.__new__(cls)
        s.__dict__.update(acc.__dict__)
        s._curves = {}
        # per order, the conversion term of dp-accounting's compute_epsilon:
        # log1p(-1/a) - log(delta a)/(a - 1) where a > 1.01, else inf
        a = np.asarray(s._orders, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            s._conv = np.where(a > 1.01, np.log1p(-1.0 / a) - np.log(s.delta * a) / (a - 1.0), np.inf)
        return s

    def _atom_curve(self, atom):
        try:
            return _search_curve(self.relation, atom, self._orders_key)
        except TypeError:
            return super()._atom_curve(atom)

    def _eps_exact(self, build):  # a search answer only: the real accountant checks it exactly
        return self._eps_from(build())

    def _eps_order(self, rdp: np.ndarray) -> tuple[float, float]:
        """dp-accounting's ``compute_epsilon`` (Proposition 12 of Canonne et
        al. 2020 and its special cases, the same branches) vectorised over the
        orders: a search answer, equal to it up to last-bit rounding of the
        logarithms; every reported epsilon comes from dp-accounting's own."""
        r = np.asarray(rdp, dtype=float)
        if not np.any(r):
            return 0.0, float(self._orders[0])
        with np.errstate(invalid="ignore", over="ignore"):
            eps = r + self._conv
            eps[(r < 0) | (self.delta ** 2 + np.expm1(-r) > 0)] = 0.0  # dp-accounting's two zero cases
        i = int(np.argmin(eps))
        return max(0.0, float(eps[i])), float(self._orders[i])

    def calibrate(self, make_event, **kw):
        return Accountant.calibrate(self, make_event, **kw)

    def charge(self, *a, **kw):  # pragma: no cover - guarded: a stand-in records nothing
        raise RuntimeError("the calibration stand-in is never charged")


class PldAccountant(Accountant):
    """Privacy-loss-distribution accountant built on ``dp_accounting.pld``
    (tighter than RDP, slower).  Grouped charges: epsilon is the maximum, over
    one group history per pass, of the global events composed with those
    histories (identical and dominated histories are evaluated once; past
    :attr:`MAX_COMBINATIONS` combinations, each pass with several maximal
    histories is replaced by their atom-wise maximum, which dominates them)."""

    name = "pld"

    #: below this Gaussian noise multiplier a PLD's support is too wide to
    #: discretize; epsilon then comes from RDP (a valid, looser upper bound)
    MIN_PLD_NOISE = 0.1
    #: largest number of (one history per pass) combinations evaluated exactly
    MAX_COMBINATIONS = 64

    def __init__(self, epsilon, delta, relation="replace-one"):
        super().__init__(epsilon, delta, relation)
        self._cache: dict[tuple, float] = {}

    def _shadow_rdp(self) -> "RdpAccountant":
        """An RDP accountant holding the same charges (for bracketing)."""
        shadow = RdpAccountant(self.epsilon_budget, self.delta, self.relation)
        for e in self._global:
            shadow._commit(e, None)
        for key, evs in self._groups.items():
            for e in evs:
                shadow._commit(e, key)
        return shadow

    def calibrate(self, make_event, *, low=1e-3, high=1e6, what="noise multiplier"):
        """As :meth:`Accountant.calibrate`; the RDP solution (never smaller
        than the PLD one) brackets the search, so no trial event is extreme."""
        z_rdp = self._shadow_rdp().calibrate(make_event, low=low, high=high, what=what)
        return Accountant.calibrate(self, make_event, low=max(low, z_rdp / 3), high=z_rdp, what=what,
                                    rtol=1e-4, start=z_rdp)

    def _eps_events(self, events: tuple) -> float:
        if not events:
            return 0.0
        key = events
        if key in self._cache:
            return self._cache[key]
        if _min_gaussian_noise(events) < self.MIN_PLD_NOISE:
            # dpreg's own event convention, which the RDP accountant shares
            eps = RdpAccountant(self.epsilon_budget, self.delta, self.relation).epsilon_of_events(events)
            self._cache[key] = eps
            return eps
        if self.relation == "replace-one":
            events = tuple(_pld_replace_one(e) for e in events)
        dpa = _dpa()
        rel = (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if self.relation == "add-remove"
               else dpa.NeighboringRelation.REPLACE_ONE)
        acc = dpa.pld.PLDAccountant(rel)
        pure: list = []
        if any(_has_pure(e) for e in events):
            # pure-DP releases are composed here, under both relations: dp-accounting
            # 0.6's PLD accountant drops the count of a self-composed randomized
            # response (and refuses it under add-remove)
            events, pure = _split_pure(dpa.ComposedDpEvent(list(events)))
        try:
            acc.compose(dpa.ComposedDpEvent(list(events)))
        except dpa.UnsupportedEventError as exc:
            raise DpregError(f"the pld accountant cannot account this event: {exc}") from None
        for p, c in sorted(Counter(e.noise_parameter for e in pure).items()):
            # relation-free dominating pair of c pure-DP releases (pure_dp_event)
            rr = dpa.pld.privacy_loss_distribution.from_randomized_response(
                p, 2, value_discretization_interval=acc._value_discretization_interval,  # noqa: SLF001
                neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
            acc._pld = acc._pld.compose(rr.self_compose(c) if c > 1 else rr)  # noqa: SLF001
        eps = float(acc.get_epsilon(self.delta))
        self._cache[key] = eps
        return eps

    def _pass_histories(self, override: tuple | None = None) -> list[list[Counter]]:
        """For every pass, the maximal distinct atom multisets of its groups
        (a history contained in another cannot be the worst); ``override =
        (key, events)`` replaces one group's history (a what-if)."""
        by_pass: dict = {}
        for key, evs in self._groups.items():
            by_pass.setdefault(key[0], {})[key] = evs
        if override is not None:
            key, evs = override
            by_pass.setdefault(key[0], {})[key] = evs
        out = []
        for groups in by_pass.values():
            hs = []
            for c in {_condensed(h) for h in groups.values()}:
                hs.append(sum((_atoms(e) for e in c), Counter()))
            hs = [h for h in hs if not any(o != h and all(o.get(a, 0) >= n for a, n in h.items()) for o in hs)]
            out.append(hs)
        total = math.prod(len(hs) for hs in out)
        if total > self.MAX_COMBINATIONS:  # dominate each pass by its atom-wise maximum
            out = [[_atomwise_max(hs)] for hs in out]
        return out

    def _worst(self, extra: tuple, override: tuple | None = None) -> float:
        """Max over one history per pass of eps(global + extra + histories)."""
        import itertools

        glob = tuple(self._global) + extra
        best = 0.0
        for combo in itertools.product(*self._pass_histories(override)):
            events = glob + tuple(self_composed(a, c) for h in combo for a, c in h.items())
            best = max(best, self._eps_events(_condensed(events)))
        return best

    def _what_if(self, event, key):
        if key is None:
            return self._worst((event,))
        hist = tuple(self._groups.get(key, ())) + (event,)
        return max(self.epsilon_spent, self._worst((), (key, hist)))

    def _exact_epsilon(self):
        return self._worst(())

    def _commit(self, event, key):
        if key is None:
            self._global.append(event)
        else:
            self._groups.setdefault(key, []).append(event)


def _atomwise_max(counters) -> Counter:
    """The smallest multiset containing each of ``counters``."""
    out: Counter = Counter()
    for c in counters:
        out |= c
    return out


def gaussian_event(noise_multiplier: float):
    """dp-accounting event of one Gaussian release with std = z * sensitivity."""
    return _dpa().GaussianDpEvent(noise_multiplier)


def self_composed(event, count: int):
    """``event`` composed ``count`` times (count >= 1)."""
    dpa = _dpa()
    return event if count == 1 else dpa.SelfComposedDpEvent(event, int(count))


def composed(events):
    """Several events composed."""
    return _dpa().ComposedDpEvent(list(events))


def poisson_sampled(q: float, event):
    """``event`` applied to a Poisson subsample with rate ``q``."""
    return _dpa().PoissonSampledDpEvent(q, event)


# ------------------------------------------------------------------ pure epsilon-DP
def pure_dp_event(epsilon: float):
    """Event of one release by an ``epsilon``-DP (pure, delta = 0) mechanism
    under the accountant's relation - the exponential mechanism, AboveThreshold.

    dp-accounting has no such event.  Every epsilon-DP mechanism is dominated
    (in the hockey-stick / Blackwell order, hence in every Renyi divergence
    and in its privacy-loss distribution) by binary randomized response with
    P(truth) = e^eps / (1 + e^eps) (Kairouz, Oh & Viswanath 2015), so it is
    charged as ``RandomizedResponseDpEvent(2 / (1 + e^eps), 2)``, whose
    epsilon is exactly ``epsilon``.  ``LaplaceDpEvent`` would *not* be sound:
    the Laplace mechanism's RDP and PLD are strictly smaller than randomized
    response's at the same epsilon (tests/test_selectors.py shows it).  The
    dominating pair does not depend on the neighbouring relation, so the
    accountants also take this event under add-remove (dp-accounting itself
    accepts randomized response only as REPLACE_ONE).
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ParameterError(f"pure-DP epsilon must be a finite number > 0, got {epsilon!r}")
    if epsilon > 700:  # 2 / (1 + e^eps) underflows towards 0: no randomized response to charge
        raise ParameterError(f"pure-DP epsilon {epsilon:g} is beyond what the accountant represents (<= 700)")
    e = math.exp(-epsilon)  # 2 / (1 + e^eps), without overflow
    return _dpa().RandomizedResponseDpEvent(noise_parameter=2.0 * e / (1.0 + e), num_buckets=2)


def _binary_rr_rdp(noise_parameter: float, orders: np.ndarray) -> np.ndarray:
    """Renyi divergence D_a(P || Q) of binary randomized response, P = (p, 1-p),
    Q = (1-p, p) with p = 1 - noise/2: ``log(p^a q^(1-a) + q^a p^(1-a)) / (a-1)``
    (order 1: the KL divergence (p - q) log(p/q)); equal to dp-accounting's
    ``_randomized_response_rdp_replace_one`` for two buckets (tested)."""
    q = noise_parameter / 2.0  # p = 1 - q; from q, so that p rounding to 1 (epsilon > ~37) loses nothing
    p = 1.0 - q
    lp, lq = math.log1p(-q), math.log(q)
    a = np.asarray(orders, dtype=float)
    out = np.empty_like(a)
    one = np.isclose(a, 1.0)
    out[one] = (p - (1 - p)) * (lp - lq)
    b = a[~one]
    out[~one] = np.logaddexp(b * lp + (1 - b) * lq, b * lq + (1 - b) * lp) / (b - 1.0)
    return out


def _is_pure(event) -> bool:
    dpa = _dpa()
    return isinstance(event, dpa.RandomizedResponseDpEvent) and event.num_buckets == 2


def _has_pure(event) -> bool:
    dpa = _dpa()
    if _is_pure(event):
        return True
    if isinstance(event, dpa.ComposedDpEvent):
        return any(_has_pure(e) for e in event.events)
    if isinstance(event, dpa.SelfComposedDpEvent):
        return _has_pure(event.event)
    return False


def _split_pure(event, count: int = 1) -> tuple[list, list]:
    """(other events, pure-DP events), with self-composition unrolled into
    counts (others keep SelfComposed wrappers; pure events are repeated)."""
    dpa = _dpa()
    if _is_pure(event):
        return [], [event] * count
    if isinstance(event, dpa.ComposedDpEvent):
        others, pure = [], []
        for e in event.events:
            o, p = _split_pure(e, count)
            others += o
            pure += p
        return others, pure
    if isinstance(event, dpa.SelfComposedDpEvent) and _has_pure(event.event):
        return _split_pure(event.event, count * event.count)
    return [self_composed(event, count)], []


# ------------------------------------------------------------- budget-limited views
class BudgetView(Accountant):
    """One stage's view of a parent accountant (composite runs: warm start,
    hyper-parameter selection).

    * Every charge goes to the parent (which refuses it if the *total* would
      exceed the parent's budget) and to the view's own record, which refuses
      it if the *stage's own* charges would exceed (epsilon, delta) - so the
      stage is (epsilon, delta)-DP on its own and the whole run stays within
      the parent's budget, with the parent composing all stages tightly.
    * :meth:`fits` (hence :meth:`calibrate`) requires both, so a stage
      calibrates to the smaller of its sub-budget and what the parent has left.
    * ``epsilon_budget``/``delta`` are the stage's, ``epsilon_spent`` is the
      stage's own spend at the stage's delta; ``relation`` is the parent's.
    """

    name = "view"

    def __init__(self, parent: Accountant, epsilon: float, delta: float):
        super().__init__(epsilon, delta, parent.relation)
        self.parent = parent
        self._own = parent.fresh(epsilon, delta)

    def fresh(self, epsilon, delta):
        return self.parent.fresh(epsilon, delta)

    def fits(self, event) -> bool:
        return self._own.fits(event) and self.parent.fits(event)

    def calibrate(self, make_event, *, low: float = 1e-3, high: float = 1e6,
                  what: str = "noise multiplier", **kw) -> float:
        """The smallest z meeting both budgets is the larger of the two
        calibrations (each constraint is monotone in z); each uses its own
        accountant's (possibly bracketed, faster) calibration."""
        z = self._own.calibrate(make_event, low=low, high=high, what=what)
        if not self.parent.fits(make_event(z)):  # else the parent's smallest z is <= z
            z = max(z, self.parent.calibrate(make_event, low=low, high=high, what=what))
        self.reserve(make_event(z))
        return z

    def charge(self, event, group=None, *, label: str = "", pass_id=None) -> float:
        eps = self._own.epsilon_if(event, group, pass_id=pass_id)
        if eps > self.epsilon_budget * (1 + _SLACK):
            raise BudgetExceededError(
                f"release {label or type(event).__name__} refused: this stage would spend "
                f"epsilon={eps:.4g} > its budget {self.epsilon_budget:g} at delta={self.delta:g}"
            )
        self.parent.charge(event, group, label=label, pass_id=pass_id)  # raises, recording nothing, if over
        self._own.charge(event, group, label=label, pass_id=pass_id)
        self._eps = self._own.epsilon_spent
        self.n_charges += 1
        return self._eps

    def state(self) -> dict:
        out = super().state()
        out["accountant"] = f"view of {self.parent.name}"
        return out

    def reserve(self, plan_event) -> None:
        """Reserve the plan in the stage's own record and in the parent."""
        self._own.reserve(plan_event)
        self.parent.reserve(plan_event)

    def _what_if(self, event, key):
        return self._own._what_if(event, key)  # noqa: SLF001 (same class family)

    def _exact_epsilon(self):
        return self._own.epsilon_spent

    def _commit(self, event, key):  # pragma: no cover - charge() is overridden
        raise NotImplementedError


# --------------------------------------------------------------- prepaid releases
class Prepaid:
    """An accountant proxy for a component whose release was charged in advance.

    A pipeline that selects an output after a run charges the selection's
    event *before* the run (so the run calibrates to what is left and the
    whole stays within budget), then hands the selector this proxy: the
    selector's own ``charge`` of exactly that event (globally) is matched
    against the prepayment once and records nothing new; any other charge, or
    a second one, goes to the real accountant as usual.  Everything else
    (relation, sensitivity factor, budget queries) is the real accountant's.
    """

    def __init__(self, accountant: Accountant, event):
        self._acc = accountant
        self._event = event
        self.used = False

    def charge(self, event, group: Hashable | None = None, *, label: str = "",
               pass_id: Hashable | None = None) -> float:
        if not self.used and group is None and event == self._event:
            self.used = True
            return self._acc.epsilon_spent
        return self._acc.charge(event, group, label=label, pass_id=pass_id)

    def __getattr__(self, name):
        return getattr(self._acc, name)
