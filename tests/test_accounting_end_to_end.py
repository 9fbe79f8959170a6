"""Every reported epsilon, end to end: representative runs (small sizes) log each
release their accountant accepts; the record's epsilon must equal dp-accounting's
own epsilon of the worst record's exposure, computed here from that log with
dp-accounting alone (no dpreg accounting code), and every noise multiplier the
record's privacy statement names must be one of the released Gaussians'."""
from __future__ import annotations

from collections import Counter

import dp_accounting as dpa
import numpy as np
import pytest

import dpreg
from dpreg.registry import Registry

DATA = "synthetic-logistic:n=3000,d=5"
ADD, REPLACE = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, dpa.NeighboringRelation.REPLACE_ONE

#: name -> options of dpreg.run (the data set, epsilon = 1 and a seed are added)
CONFIGS = {
    "dp-trust-region": dict(algo="dp-trust-region", params={"steps": 5}),
    "dp-str-poisson": dict(algo="dp-stochastic-trust-region", params={"steps": 5, "batch": 500}),
    "dp-str-fixed": dict(algo="dp-stochastic-trust-region", params={"steps": 5, "batch": 500, "sampling": "fixed"}),
    "zo-o2nc-tree": dict(algo="zo-o2nc", noise="tree"),
    "zo-o2nc-sqrt": dict(algo="zo-o2nc", noise="sqrt-factorization"),
    "zo-o2nc-naive": dict(algo="zo-o2nc", params={"oracle": "naive"}),
    "adaptive-spider-honaker": dict(algo="adaptive-spider", noise="tree-honaker"),
    "adaptive-spider-sqrt": dict(algo="adaptive-spider", noise="sqrt-factorization", params={"passes": 2}),
    "distributed-spider": dict(algo="distributed-spider"),
    "distributed-spider-selection": dict(algo="distributed-spider", params={"select": "distributed-selection"},
                                         alpha=0.1),
    "private-scaling": dict(algo="dp-gd", data="breast-cancer", scaling="private", params={"steps": 20}),
    "mlp": dict(algo="dp-sgd", loss="mlp:hidden=4", params={"steps": 30}),
    "select-exponential": dict(algo="dp-sgd", select="exponential", params={"steps": 50}),
    "select-above-threshold": dict(algo="perturbed-sgd", select="above-threshold", alpha=0.1),
    "dp-spider": dict(algo="dp-spider"),
    "warm-start": dict(algo="warm-start"),
    "dp-sgd-pld": dict(algo="dp-sgd", accountant="pld", params={"steps": 100}),
}


@pytest.fixture
def logged_accountants(monkeypatch):
    """Every accountant the registry hands out logs the releases it accepts
    (``released``: (event, None or (pass_id, group))); returns the list of
    accountants in the order they were made (the run's own is the first)."""
    made: list = []
    classes: dict = {}
    get = Registry.get

    def logged(base):
        class Logged(base):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.released = []
                made.append(self)

            def charge(self, event, group=None, *, label="", pass_id=None):
                out = super().charge(event, group, label=label, pass_id=pass_id)
                self.released.append((event, None if group is None else (pass_id, group)))
                return out

        return Logged

    def spy_get(self, kind, name):
        obj = get(self, kind, name)
        if kind != "accountant":
            return obj
        return classes.setdefault(obj, logged(obj))

    monkeypatch.setattr(Registry, "get", spy_get)
    return made


def _atoms(event, count=1) -> Counter:
    """The elementary releases of ``event`` with their multiplicities."""
    if isinstance(event, dpa.SelfComposedDpEvent):
        return _atoms(event.event, count * event.count)
    if isinstance(event, dpa.ComposedDpEvent):
        return sum((_atoms(e, count) for e in event.events), Counter())
    if isinstance(event, dpa.NoOpDpEvent):
        return Counter()
    return Counter({event: count})


def _is_pure(atom) -> bool:
    return isinstance(atom, dpa.RandomizedResponseDpEvent)


def _rdp_curve(events, relation) -> tuple[np.ndarray, np.ndarray]:
    """(orders, curve): dp-accounting's RDP of ``events`` composed.  A pure-DP
    release is binary randomized response (dpreg's documented dominating pair,
    the same under either relation): its curve is dp-accounting's under
    REPLACE_ONE, added to the rest's."""
    rest = dpa.rdp.RdpAccountant(neighboring_relation=ADD if relation == "add-remove" else REPLACE)
    pure = dpa.rdp.RdpAccountant(neighboring_relation=REPLACE)
    for atom, c in sum((_atoms(e) for e in events), Counter()).items():
        (pure if _is_pure(atom) else rest).compose(dpa.SelfComposedDpEvent(atom, c))
    assert np.array_equal(rest.orders, pure.orders)
    return rest.orders, rest.rdp + pure.rdp


def rdp_worst_record_epsilon(released, relation, delta) -> float:
    """dp-accounting's epsilon of the worst record: the global releases plus, for
    every pass, the elementwise maximum of its groups' RDP curves (a record is in
    at most one group of each pass)."""
    glob = [e for e, key in released if key is None]
    groups: dict = {}
    for e, key in released:
        if key is not None:
            groups.setdefault(key, []).append(e)
    orders, total = _rdp_curve(glob, relation)
    worst: dict = {}
    for (pass_id, _), evs in groups.items():
        c = _rdp_curve(evs, relation)[1]
        worst[pass_id] = c if pass_id not in worst else np.maximum(worst[pass_id], c)
    total = total + sum(worst.values(), np.zeros_like(total))
    return float(dpa.rdp.compute_epsilon(orders, total, delta)[0])


def pld_epsilon(released, relation, delta) -> float:
    """dp-accounting's PLD epsilon of global releases under add-remove."""
    assert relation == "add-remove" and all(key is None for _, key in released)
    acc = dpa.pld.PLDAccountant(ADD)
    acc.compose(dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(a, c) for a, c in
                                     sum((_atoms(e) for e, _ in released), Counter()).items()]))
    return float(acc.get_epsilon(delta))


def _gaussian_multipliers(released) -> set:
    out = set()
    for e, _ in released:
        for atom in _atoms(e):
            inner = getattr(atom, "event", atom)
            if isinstance(inner, dpa.GaussianDpEvent):
                out.add(inner.noise_multiplier)
    return out


def _check(record, acc):
    pr = record["release"]["privacy"]
    assert acc.released, "the run released nothing"
    if "diagnostics" in record:
        assert pr["epsilon"] == record["diagnostics"]["privacy"]["epsilon_spent"]
    if acc.name == "pld":
        want = pld_epsilon(acc.released, acc.relation, pr["delta"])
    else:
        want = rdp_worst_record_epsilon(acc.released, acc.relation, pr["delta"])
    assert pr["epsilon"] == pytest.approx(want, rel=1e-8, abs=1e-12)
    assert 0 < pr["epsilon"] <= pr["epsilon_budget"] * (1 + 1e-9)
    named = {m["noise_multiplier"] for m in pr["mechanisms"] if m.get("noise_multiplier") is not None}
    assert named <= _gaussian_multipliers(acc.released), (named, _gaussian_multipliers(acc.released))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_reported_epsilon_is_dp_accountings_for_the_runs_releases(logged_accountants, name):
    kw = dict(data=DATA, epsilon=1.0, seed=1, diagnostics="light")
    kw.update(CONFIGS[name])
    record = dpreg.run(**kw)
    _check(record, logged_accountants[0])


def test_dp_classifier_reports_dp_accountings_epsilon(logged_accountants):
    from dpreg.sklearn import DPClassifier

    rng = np.random.default_rng(0)
    X = rng.standard_normal((1500, 4))
    y = (X[:, 0] + 0.3 * rng.standard_normal(1500) > 0).astype(int)
    clf = DPClassifier(epsilon=0.7, random_state=2, params={"steps": 60}).fit(X, y)
    _check(clf.record_, logged_accountants[0])


def test_the_independent_computation_can_fail():
    """The reference is not vacuous: one release more, or a multiplier 1 % smaller,
    changes the epsilon it gives by far more than the tolerance."""
    ev = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.05, dpa.GaussianDpEvent(1.3)), 200)
    base = rdp_worst_record_epsilon([(ev, None)], "add-remove", 1e-5)
    more = rdp_worst_record_epsilon([(ev, None), (dpa.GaussianDpEvent(5.0), None)], "add-remove", 1e-5)
    smaller = rdp_worst_record_epsilon(
        [(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.05, dpa.GaussianDpEvent(1.3 * 0.99)), 200), None)],
        "add-remove", 1e-5)
    assert more > base * (1 + 1e-4) and smaller > base * (1 + 1e-4)
    # a record in two passes pays both; in two groups of one pass, only the worst
    g = dpa.GaussianDpEvent
    two_passes = rdp_worst_record_epsilon([(g(2.0), ("A", 1)), (g(2.0), ("B", 1))], "replace-one", 1e-5)
    one_pass = rdp_worst_record_epsilon([(g(2.0), ("A", 1)), (g(2.0), ("A", 2))], "replace-one", 1e-5)
    both = rdp_worst_record_epsilon([(dpa.SelfComposedDpEvent(g(2.0), 2), None)], "replace-one", 1e-5)
    assert two_passes == pytest.approx(both, rel=1e-12) and one_pass < 0.8 * both
