"""The privacy-loss-distribution accountant, on dp-accounting's ``pld`` package."""
from __future__ import annotations

import itertools
import math
from collections import Counter

from ..errors import DpregError
from .accountant import Accountant
from .events import atoms, atomwise_max, condensed, dp_accounting, is_pure, min_gaussian_noise, self_composed, walk
from .rdp import RdpAccountant

#: dp-accounting's PLD discretization (its ``PLDAccountant`` default)
VALUE_DISCRETIZATION = 1e-4


def replace_one_convention(event):
    """``event`` in dp-accounting's PLD convention under REPLACE_ONE.

    dpreg: ``GaussianDpEvent(z)`` is a release with noise std = z times its l2
    sensitivity *under the accountant's relation* (mechanisms already double the
    per-record bound for replace-one).  dp-accounting's RDP accountant reads it the same
    way, but its PLD accountant under REPLACE_ONE takes z relative to the per-record
    bound and applies sensitivity 2 itself.  The same release is therefore
    ``GaussianDpEvent(2 z)`` for the PLD accountant (tests/test_accounting.py checks
    both against the analytic Gaussian)."""
    dpa = dp_accounting()
    if isinstance(event, dpa.GaussianDpEvent):
        return dpa.GaussianDpEvent(2.0 * event.noise_multiplier)
    if isinstance(event, dpa.SelfComposedDpEvent):
        return dpa.SelfComposedDpEvent(replace_one_convention(event.event), event.count)
    if isinstance(event, dpa.ComposedDpEvent):
        return dpa.ComposedDpEvent([replace_one_convention(e) for e in event.events])
    return event


def _epsilon_with_pure(events: tuple, relation, delta: float) -> float:
    """Epsilon of ``events`` (Gaussian and Poisson-subsampled Gaussian releases and
    :func:`~.events.pure_dp_event` releases), composed with the constructors of
    ``dp_accounting.pld.privacy_loss_distribution`` exactly as dp-accounting's
    ``PLDAccountant`` composes the first two kinds (a Gaussian released c times: one
    Gaussian with std z / sqrt(c); a subsampled one: self-composed c times), then each
    pure release's randomized response c times (its REPLACE_ONE distribution, the
    relation-free dominating pair).  ``PLDAccountant`` itself composes a self-composed
    randomized response once, whatever its count, and refuses it under add-remove."""
    dpa = dp_accounting()
    pl = dpa.pld.privacy_loss_distribution
    pld = pl.identity(value_discretization_interval=VALUE_DISCRETIZATION)
    pure: Counter = Counter()
    for atom, count in walk(dpa.ComposedDpEvent(list(events))):
        if is_pure(atom):
            pure[atom.noise_parameter] += count
            continue
        sampled = isinstance(atom, dpa.PoissonSampledDpEvent)
        inner = atom.event if sampled else atom
        if not isinstance(inner, dpa.GaussianDpEvent):
            raise DpregError(f"the pld accountant cannot account {atom!r} together with a pure-DP release")
        if sampled and atom.sampling_probability == 0:
            continue
        if inner.noise_multiplier == 0:
            return math.inf
        if sampled:
            pld = pld.compose(pl.from_gaussian_mechanism(
                standard_deviation=inner.noise_multiplier, value_discretization_interval=VALUE_DISCRETIZATION,
                sampling_prob=atom.sampling_probability, neighboring_relation=relation).self_compose(count))
        else:
            pld = pld.compose(pl.from_gaussian_mechanism(
                standard_deviation=inner.noise_multiplier / math.sqrt(count),
                value_discretization_interval=VALUE_DISCRETIZATION, neighboring_relation=relation))
    for p, c in sorted(pure.items()):
        rr = pl.from_randomized_response(p, 2, value_discretization_interval=VALUE_DISCRETIZATION,
                                         neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        pld = pld.compose(rr.self_compose(c) if c > 1 else rr)
    return float(pld.get_epsilon_for_delta(delta))


class PldAccountant(Accountant):
    """Privacy-loss-distribution accountant built on ``dp_accounting.pld`` (tighter than
    RDP, slower).  Grouped charges: epsilon is the maximum, over one group history per
    pass, of the global events composed with those histories (identical and dominated
    histories are evaluated once; past :attr:`MAX_COMBINATIONS` combinations, each pass
    with several maximal histories is replaced by their atom-wise maximum, which
    dominates them)."""

    name = "pld"

    #: below this Gaussian noise multiplier a PLD's support is too wide to
    #: discretize; epsilon then comes from RDP (a valid, looser upper bound)
    MIN_PLD_NOISE = 0.1
    #: largest number of (one history per pass) combinations evaluated exactly
    MAX_COMBINATIONS = 64

    def __init__(self, epsilon, delta, relation="replace-one"):
        super().__init__(epsilon, delta, relation)
        self._cache: dict[tuple, float] = {}

    def _shadow_rdp(self) -> RdpAccountant:
        """An RDP accountant holding the same charges (for bracketing)."""
        shadow = RdpAccountant(self.epsilon_budget, self.delta, self.relation)
        for e in self._global:
            shadow._commit(e, None)
        for key, evs in self._groups.items():
            for e in evs:
                shadow._commit(e, key)
        return shadow

    def calibrate(self, make_event, *, low=1e-3, high=1e6, what="noise multiplier", rtol=1e-7, start=None):
        """As :meth:`Accountant.calibrate` to a relative precision of ``max(rtol, 1e-4)``;
        the RDP solution (never smaller than the PLD one) brackets the search and starts
        it, so no trial event is extreme."""
        z_rdp = self._shadow_rdp().calibrate(make_event, low=low, high=high, what=what)
        return Accountant.calibrate(self, make_event, low=max(low, z_rdp / 3), high=z_rdp, what=what,
                                    rtol=max(rtol, 1e-4), start=z_rdp)

    def _eps_events(self, events: tuple) -> float:
        """Epsilon of ``events`` (a :func:`~.events.condensed` tuple) composed, memoised."""
        if not events:
            return 0.0
        key = events
        if key in self._cache:
            return self._cache[key]
        if min_gaussian_noise(events) < self.MIN_PLD_NOISE:
            # dpreg's own event convention, which the RDP accountant shares
            eps = RdpAccountant(self.epsilon_budget, self.delta, self.relation).epsilon_of_events(events)
            self._cache[key] = eps
            return eps
        if self.relation == "replace-one":
            events = tuple(replace_one_convention(e) for e in events)
        dpa = dp_accounting()
        rel = (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if self.relation == "add-remove"
               else dpa.NeighboringRelation.REPLACE_ONE)
        if any(is_pure(a) for e in events for a, _ in walk(e)):
            eps = _epsilon_with_pure(events, rel, self.delta)
        else:
            acc = dpa.pld.PLDAccountant(rel, value_discretization_interval=VALUE_DISCRETIZATION)
            try:
                acc.compose(dpa.ComposedDpEvent(list(events)))
            except dpa.UnsupportedEventError as exc:
                raise DpregError(f"the pld accountant cannot account this event: {exc}") from None
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
            hs = [sum((atoms(e) for e in c), Counter()) for c in {condensed(h) for h in groups.values()}]
            hs = [h for h in hs if not any(o != h and all(o.get(a, 0) >= n for a, n in h.items()) for o in hs)]
            out.append(hs)
        if math.prod(len(hs) for hs in out) > self.MAX_COMBINATIONS:  # each pass by its atom-wise maximum
            out = [[atomwise_max(hs)] for hs in out]
        return out

    def _worst(self, extra: tuple, override: tuple | None = None) -> float:
        """Max over one history per pass of eps(global + extra + histories)."""
        glob = tuple(self._global) + extra
        best = 0.0
        for combo in itertools.product(*self._pass_histories(override)):
            events = glob + tuple(self_composed(a, c) for h in combo for a, c in h.items())
            best = max(best, self._eps_events(condensed(events)))
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
