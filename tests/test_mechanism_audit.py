"""Mechanism audit: every noise mechanism and every selector delivers the noise
its accounting assumes (distribution tests that fail for sigma x 2/3 and
sigma x 3/2), and every sensitivity the accounting uses holds for worst-case
records (huge |x|, extreme finite values) through the kernels and oracles.

The expected noise scales are derived here from the privacy argument each
plugin states (which node covers which increments, what is charged), not read
back from the plugin.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.integrate import trapezoid  # (numpy.trapezoid needs numpy >= 2; the pins allow 1.26)

from dpreg.accounting import RdpAccountant, gaussian_event, pure_dp_event
from dpreg.interfaces import LinearModelLoss, Participation
from dpreg.problem import Problem
from dpreg.registry import get_registry

WRONG = (2.0 / 3.0, 1.5)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
HUGE = (1e3, 1e154, 1e155, 1e300, np.finfo(float).max)


@pytest.fixture
def one_thread():
    """Many tiny kernel calls: thread start-up would dominate (results are
    identical for any thread count)."""
    import numba

    k = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(k)


class Recorder:
    """Accountant stand-in for sampling tests: records charges, never refuses."""

    def __init__(self, relation="replace-one"):
        self.relation = relation
        self.events = []

    @property
    def sensitivity_factor(self):
        return 1.0 if self.relation == "add-remove" else 2.0

    def charge(self, event, group=None, *, label=""):
        self.events.append((event, group))
        return 0.0

    def fits(self, event):
        return True


def _ks_scales(samples):
    """KS p-values of ``samples`` (claimed N(0,1) after normalisation) for the
    right scale and for the scale multiplied by each factor in WRONG."""
    right = stats.kstest(samples, "norm").pvalue
    wrong = [stats.kstest(samples / c, "norm").pvalue for c in WRONG]
    return right, wrong


# ---------------------------------------------------------------- noise: distribution
def _dyadic_nodes(t):
    """Leaves (1-based, inclusive ranges) of the nodes in the binary
    decomposition of t: one node of 2^j leaves per set bit j, high bits first."""
    out, start = [], 0
    for j in reversed(range(t.bit_length())):
        if (t >> j) & 1:
            out.append((start + 1, start + (1 << j)))
            start += 1 << j
    return out


def _honaker_var(s, lo, hi, z):
    """Variance of tree-honaker's estimate of dyadic node lo..hi (1-based):
    its own noise (z * max of its leaves' sens)^2 combined by inverse
    variance with the sum of its children's estimates."""
    own = (z * s[lo - 1:hi].max()) ** 2
    if lo == hi:
        return own
    mid = (lo + hi) // 2
    kids = _honaker_var(s, lo, mid, z) + _honaker_var(s, mid + 1, hi, z)
    return 1.0 / (1.0 / own + 1.0 / kids)


def _expected_prefix_std(name, z, sens, t, kind, horizon):
    """Std of the noise in the release after add t, from the mechanism's privacy argument."""
    s = np.asarray(sens[:t], dtype=float)
    if name == "gaussian":  # every increment carries its own N(0, (z s_i)^2)
        return z * math.sqrt(float(np.sum(s**2)))
    if name == "tree":  # one node per set bit; node noise z * (max | sum) of its leaves' sens
        var = 0.0
        for lo, hi in _dyadic_nodes(t):
            leaf = s[lo - 1:hi]
            var += (z * (leaf.max() if kind == "disjoint" else leaf.sum())) ** 2
        return math.sqrt(var)
    if name == "tree-honaker":  # every dyadic node released; GLS over the decomposition nodes
        return math.sqrt(sum(_honaker_var(s, lo, hi, z) for lo, hi in _dyadic_nodes(t)))
    if name == "sqrt-factorization":  # row j: noise z |C|_col max_{i<=j} s_i, mixed by c_{t-j}
        c = [math.comb(2 * k, k) / 4.0 ** k for k in range(horizon)]
        col2 = sum(ck * ck for ck in c)
        smax = np.maximum.accumulate(s)
        return z * math.sqrt(col2 * sum(c[t - j] ** 2 * smax[j - 1] ** 2 for j in range(1, t + 1)))
    raise AssertionError(f"no reference for noise {name!r}: add one to this test")


def _refuses_global(cls):
    """Whether mechanism ``cls`` refuses non-disjoint participation ("all" and
    "poisson": a ValueError naming it on the first add, nothing charged), as the
    single-participation mechanisms do; False if it accepts both."""
    verdicts = []
    for part in (Participation.all(), Participation.poisson(0.5)):
        acc = Recorder()
        mech = cls(dim=1, noise_multiplier=1.0, horizon=2, accountant=acc, seed=0)
        try:
            mech.add(np.zeros(1), 1.0, part)
            verdicts.append(False)
        except ValueError as e:
            assert cls.name in str(e) and not acc.events and mech.steps == 0
            verdicts.append(True)
    assert verdicts[0] == verdicts[1], "refuse all and poisson alike"
    return verdicts[0]


def _participation(cls, t):
    """"all" where the mechanism takes it, else a fresh disjoint group."""
    return Participation.disjoint(("t", t)) if _refuses_global(cls) else Participation.all()


NOISES = get_registry().names("noise")


def test_every_registered_noise_has_a_reference():
    for name in NOISES:
        _expected_prefix_std(name, 1.0, [1.0], 1, "disjoint", 1)


@pytest.mark.parametrize("kind", ["all", "disjoint"])
@pytest.mark.parametrize("name", NOISES)
def test_noise_distribution(name, kind):
    """Prefix-sum noise is N(0, sigma_t^2) with the sigma_t the accounting
    assumes; the same samples reject sigma_t x 2/3 and x 3/2."""
    cls = get_registry().get("noise", name)
    if kind == "all" and _refuses_global(cls):
        return  # single participation only: the refusal is what _refuses_global asserted
    dim, T, z = 4000, 7, 1.7
    sens = [0.5, 1.0, 2.0, 0.25, 1.0, 3.0, 0.75]
    acc = Recorder()
    mech = cls(dim=dim, noise_multiplier=z, horizon=T, accountant=acc, seed=1234)
    rng = np.random.default_rng(5)
    total = np.zeros(dim)
    normalized = []
    for t in range(1, T + 1):
        inc = rng.standard_normal(dim)
        total += inc
        part = Participation.all() if kind == "all" else Participation.disjoint(("g", t))
        out = mech.add(inc, sens[t - 1], part)
        normalized.append((out - total) / _expected_prefix_std(name, z, sens, t, kind, T))
    right, wrong = _ks_scales(np.concatenate(normalized))
    assert right > 1e-3
    assert max(wrong) < 1e-6
    # the charges match what the noise was calibrated for: Gaussian(z) releases
    assert len(acc.events) == T
    for ev, group in acc.events:
        inner = getattr(ev, "event", ev)
        assert inner == gaussian_event(z)
        if name == "tree-honaker":  # a leaf lies in one node per level
            assert ev.count == T.bit_length()
        assert (group is None) == (kind == "all")


@pytest.mark.parametrize("name", NOISES)
def test_noise_increments_independent_of_data(name):
    """The noise does not depend on the increments (same seed, different data:
    identical noise) - nothing about the data sets the noise scale."""
    cls = get_registry().get("noise", name)
    outs = []
    for data_seed in (1, 2):
        mech = cls(dim=50, noise_multiplier=1.0, horizon=5, accountant=Recorder(), seed=9)
        rng = np.random.default_rng(data_seed)
        total = np.zeros(50)
        noise = []
        for t in range(5):
            inc = rng.standard_normal(50) * 10 ** data_seed
            total += inc
            noise.append(mech.add(inc, 1.0, _participation(cls, t)) - total)
        outs.append(np.array(noise))
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=1e-9)


# ------------------------------------------------------------ selectors: distribution
def _selector_problem(n=60, d=2, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X @ np.array([1.0, -0.5]) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return Problem(get_registry().get("loss", "logistic"), X, y)


def _naive_scores(pb, W, lo, hi):
    """Exponential-mechanism score: sum_i clip(phi(<x_i,w>, y_i), lo, hi) - n lo (+ n psi)."""
    phi = type(pb.loss).phi
    return np.array([sum(min(max(phi(float(x @ w), float(yy)), lo), hi) for x, yy in zip(pb.X, pb.y))
                     - pb.n * lo + pb.n * pb.loss.psi(w) for w in W])


def test_exponential_selector_distribution(one_thread):
    """Selections follow softmax(-eps u / (2 Delta_u)) with the plain-numpy
    score; the frequencies reject the temperature x 2/3 and x 3/2."""
    cls = get_registry().get("selector", "exponential")
    pb = _selector_problem()
    acc = Recorder()
    sel = cls(pb, accountant=acc, rng=np.random.default_rng(11), lo=0.0, hi=2.0)
    W = np.array([[1.0, -0.5], [0.5, 0.0], [0.0, 0.0], [-0.5, 0.5], [-1.0, 0.5]])
    u = _naive_scores(pb, W, 0.0, 2.0)
    eps = 4.0 * 2.0 / (u.max() - u.min())  # logits spread over ~2 nats
    N = 3000
    counts = np.bincount([sel.select(W, eps).index for _ in range(N)], minlength=len(W))

    def expected(e):
        a = -e * u / (2.0 * 2.0)
        p = np.exp(a - a.max())
        return p / p.sum() * N

    assert stats.chisquare(counts, expected(eps)).pvalue > 1e-3
    for c in WRONG:
        assert stats.chisquare(counts, expected(eps * c)).pvalue < 1e-6
    assert len(acc.events) == N and all(ev == pure_dp_event(eps) for ev, _ in acc.events)


def _above_threshold_probs(u, eps):
    """P(first pass = t) for t = 0..K-1 and P(none) of AboveThreshold with
    threshold noise Lap(2/eps) and query noise Lap(4/eps) on queries -u_t."""
    b_rho, b_nu = 2.0 / eps, 4.0 / eps
    r = np.linspace(-60 * b_rho, 60 * b_rho, 200001)
    f = np.exp(-np.abs(r) / b_rho) / (2 * b_rho)

    def sf(v):  # P(Lap(b_nu) >= v)
        return np.where(v >= 0, 0.5 * np.exp(-np.maximum(v, 0) / b_nu), 1 - 0.5 * np.exp(np.minimum(v, 0) / b_nu))

    alive = np.ones_like(r)
    out = []
    for ut in u:
        p = sf(ut + r)  # pass iff -u + nu >= rho  <=>  nu >= u + rho
        out.append(trapezoid(f * alive * p, r))
        alive = alive * (1 - p)
    out.append(trapezoid(f * alive, r))
    return np.array(out)


def test_above_threshold_distribution(one_thread):
    """The index AboveThreshold returns (or none) follows the law of the
    Laplace scales its accounting assumes; x 2/3 and x 3/2 are rejected."""
    cls = get_registry().get("selector", "above-threshold")
    pb = _selector_problem()
    acc = Recorder()
    sel = cls(pb, accountant=acc, rng=np.random.default_rng(12), check="fosp")
    W = [np.array([2.0, -1.0]) * s for s in (0.0, 0.3, 0.6, 1.2)]
    g = np.array([sel.clipped_gradient_norm(w) for w in W])
    alpha = float(np.median(g))
    u = sel.deficits(W, alpha)
    eps = 8.0 / (u.max() - u.min())
    N = 3000
    idx = [sel.select(W, eps, alpha).index for _ in range(N)]
    counts = np.bincount([len(W) if k is None else k for k in idx], minlength=len(W) + 1)

    def expected(e):
        p = _above_threshold_probs(u, e)
        keep = p * N > 5  # chi-square needs non-tiny expected counts
        return keep, p

    for e, ok in [(eps, True)] + [(eps * c, False) for c in WRONG]:
        keep, p = expected(e)
        obs, exp = counts[keep], p[keep] * N
        exp = exp * obs.sum() / exp.sum()
        pv = stats.chisquare(obs, exp).pvalue
        assert (pv > 1e-3) if ok else (pv < 1e-6), (e, pv)
    # the deficits are gradient-norm excesses in units of Delta_g = 2C/n
    dg = 2.0 * sel.C / pb.n
    np.testing.assert_allclose(u, (g - alpha) / dg, rtol=1e-12)
    assert all(ev == pure_dp_event(eps) for ev, _ in acc.events)


# --------------------------------------------------- sensitivity: worst-case records
LOSSES = [n for n in get_registry().names("loss")  # linear-model losses (mlp: tests/test_mlp.py)
          if isinstance(get_registry().get("loss", n), LinearModelLoss)]


def _base(n, d, loss, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) / math.sqrt(d)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0) if loss.labels == "binary" else rng.random(n)
    return X, y


def _neighbours(loss, x, yv, n=9, d=3, pos=0):
    """Two problems that differ in record ``pos``: an arbitrary (x, y) vs a zero record."""
    X, y = _base(n, d, loss)
    X1, y1 = X.copy(), y.copy()
    X1[pos], y1[pos] = x, yv
    X0, y0 = X.copy(), y.copy()
    X0[pos] = 0.0
    return Problem(loss, X1, y1), Problem(loss, X0, y0)


def _check_oracles(loss_name, x, yv, w, wp, clip, pos, full):
    reg = get_registry()
    loss = reg.get("loss", loss_name)
    P, Q = _neighbours(loss, np.asarray(x, dtype=float), yv, pos=pos)
    o1 = reg.get("oracle", "minibatch")
    o2 = reg.get("oracle", "spider-diff")
    idx = np.arange(P.n) if full else np.arange(P.n)[::-1].copy()
    part = Participation.all()
    w, wp = np.asarray(w, dtype=float), np.asarray(wp, dtype=float)
    for factor in (1.0, 2.0):
        a = o1(P).estimate(w, idx, part, clip=clip, factor=factor)
        b = o1(Q).estimate(w, idx, part, clip=clip, factor=factor)
        assert a.sensitivity == pytest.approx(factor * clip / P.n)
        # one record changed -> the clipped mean moves by at most 2C/b (<= the
        # replace-one sensitivity; add-remove's C/b bounds the zero-record half)
        assert np.linalg.norm(a.value - b.value) <= 2 * clip / P.n * (1 + 1e-9) + 1e-12, "O1"
        sa, _ = P.clipped_grad_sum(w, np.array([pos]), clip)
        assert np.all(np.isfinite(a.value))
        assert np.linalg.norm(sa) <= clip * (1 + 1e-9), "one O1 term"
        M = 0.7
        a = o2(P).estimate(w, wp, idx, part, smoothness=M, factor=factor)
        b = o2(Q).estimate(w, wp, idx, part, smoothness=M, factor=factor)
        c = M * np.linalg.norm(w - wp)
        assert a.sensitivity == pytest.approx(factor * c / P.n)
        assert np.all(np.isfinite(a.value))
        assert np.linalg.norm(a.value - b.value) <= 2 * c / P.n * (1 + 1e-9) + 1e-12, "O2"


@pytest.mark.parametrize("loss_name", LOSSES)
def test_oracle_sensitivity_huge_records(loss_name, one_thread):
    """Worst-case records (|x| up to the largest float, |y| up to 1e300) move
    the O1/O2 estimates by at most their declared sensitivity, and every
    released value stays finite."""
    w = np.array([0.3, -0.2, 0.1])
    for big in HUGE:
        for x in ([big, 0.0, 0.0], [big, -big, big], [0.0, 0.0, -big]):
            for yv in (1.0, -1.0, 1e300, -1e300, 0.0):
                for pos, full in ((0, True), (4, False)):
                    _check_oracles(loss_name, x, yv, w, w + 0.5, 0.1, pos, full)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(li=st.sampled_from(LOSSES), x=st.lists(FINITE, min_size=3, max_size=3), y=FINITE,
       w=st.lists(st.floats(-1e6, 1e6), min_size=3, max_size=3),
       wp=st.lists(st.floats(-1e6, 1e6), min_size=3, max_size=3),
       clip=st.floats(1e-6, 1e6), pos=st.integers(0, 8), full=st.booleans())
def test_oracle_sensitivity_property(one_thread, li, x, y, w, wp, clip, pos, full):
    """Property: any finite record, any iterate, any clip - the bound holds."""
    _check_oracles(li, x, y, w, wp, clip, pos, full)


def _exact_norm_over(v, clip) -> bool:
    """Whether the exact Euclidean norm of the float vector ``v`` exceeds ``clip``
    (computed in rationals: no rounding)."""
    from fractions import Fraction

    return sum(Fraction(float(t)) ** 2 for t in np.ravel(v)) > Fraction(float(clip)) ** 2


CANCEL_LOSSES = ("lowy-synthetic", "logistic", "sigmoid", "phase-retrieval")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(li=st.sampled_from(CANCEL_LOSSES), d=st.integers(1, 7), seed=st.integers(0, 2**32 - 1),
       xscale=st.floats(1e-3, 1e6), log_clip=st.floats(-14, 2), rho=st.floats(0.0, 3.0),
       wscale=st.floats(0.0, 10.0), kind=st.sampled_from(["grad", "diff"]))
def test_clip_holds_under_cancellation(one_thread, li, d, seed, xscale, log_clip, rho, wscale, kind):
    """The term a x + r with |a x| ~ |r| >> |a x + r| ~ clip
    (a crafted record cancelling the data-independent part r, e.g. x ~ -r for
    lowy-synthetic).  The expanded |a x|^2 + 2 a <x, r> + |r|^2 cancels here;
    the term each kernel adds for that record - one row (the tail loop) and four
    copies (the 4-row block; their exact sum <= 4 clip) - has exact norm <= clip."""
    import dpreg_kernels.linear_model as K

    loss = get_registry().get("loss", li)
    dphi_py = type(loss).dphi
    dphi, blk = loss.scalar_kernels()[1], loss.block_kernels()[0]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(d)
    x *= xscale / np.linalg.norm(x)
    w = rng.standard_normal(d) * (wscale / math.sqrt(d))
    wp = w + rng.standard_normal(d) * (wscale / math.sqrt(d))
    yv = 1.0 if rng.random() < 0.5 else -1.0
    clip = 10.0 ** log_clip
    e = rng.standard_normal(d)
    e *= rho * clip / np.linalg.norm(e)
    if kind == "grad":
        a = dphi_py(float(x @ w), yv)
        r = -a * x + e  # a x + r = e (up to rounding): |e| = rho * clip
        rp = None
    else:
        a = dphi_py(float(x @ w), yv) - dphi_py(float(x @ wp), yv)
        r = rng.standard_normal(d)
        rp = r + a * x - e  # a x + (r - rp) = e
    X = np.ascontiguousarray(np.vstack([x, np.zeros((3, d))]))
    y = np.full(4, yv)
    nx = K.row_sqnorms(X)
    for idx, copies in ((np.array([0]), 1), (np.zeros(4, dtype=np.int64), 4)):
        if kind == "grad":
            v, _ = K.grad_sum(X, y, nx, idx, False, w, r, dphi, blk, clip)
        else:
            v, _ = K.diff_sum(X, y, nx, idx, False, w, wp, r, rp, dphi, blk, clip)
        assert np.all(np.isfinite(v))
        assert not _exact_norm_over(v, copies * clip), (kind, li, np.linalg.norm(v) / (copies * clip))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(li=st.sampled_from(CANCEL_LOSSES), d=st.integers(1, 7), seed=st.integers(0, 2**32 - 1),
       xscale=st.floats(1e-3, 1e6), log_clip=st.floats(-14, 4))
def test_hessian_clip_holds_exactly(one_thread, li, d, seed, xscale, log_clip):
    """The clipped Hessian term d2phi x x^T the kernel adds for one record has
    exact Frobenius norm (>= its operator norm) <= clip."""
    import dpreg_kernels.linear_model as K

    loss = get_registry().get("loss", li)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(d)
    x *= xscale / np.linalg.norm(x)
    w = rng.standard_normal(d) / math.sqrt(d)
    X = np.ascontiguousarray(x[None, :])
    clip = 10.0 ** log_clip
    H, _ = K.clipped_hessian_sum(X, np.ones(1), np.zeros(1, dtype=np.int64), w, loss.scalar_kernels()[2], clip)
    assert np.all(np.isfinite(H))
    assert not _exact_norm_over(H, clip), (li, np.linalg.norm(H) / clip)


def test_data_loader_scaling_is_not_what_bounds_sensitivity():
    """Without clipping (clip = inf) a huge record moves the sum a lot: the
    bound above comes from the kernel's clipping, not from the data."""
    loss = get_registry().get("loss", "logistic")
    P, Q = _neighbours(loss, np.array([1e6, 0.0, 0.0]), -1.0)
    w = np.array([0.3, -0.2, 0.1])
    a, _ = P.clipped_grad_sum(w, None, np.inf)
    b, _ = Q.clipped_grad_sum(w, None, np.inf)
    assert np.linalg.norm(a - b) > 1e4
    a, _ = P.clipped_grad_sum(w, None, 0.1)
    b, _ = Q.clipped_grad_sum(w, None, 0.1)
    assert np.linalg.norm(a - b) <= 0.2 * (1 + 1e-12)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(x=st.lists(FINITE, min_size=2, max_size=2), y=FINITE, pos=st.integers(0, 59))
def test_exponential_score_sensitivity(x, y, pos):
    """Replacing any record by an arbitrary finite one changes every
    candidate's score by at most Delta_u = hi - lo."""
    cls = get_registry().get("selector", "exponential")
    pb = _selector_problem()
    X2, y2 = pb.X.copy(), pb.y.copy()
    X2[pos], y2[pos] = x, y
    pb2 = Problem(pb.loss, X2, y2)
    W = np.array([[1.0, -0.5], [0.0, 0.0], [-3.0, 2.0], [1e3, 1e3]])
    s1 = cls(pb, accountant=Recorder(), rng=np.random.default_rng(0))
    s2 = cls(pb2, accountant=Recorder(), rng=np.random.default_rng(0))
    u1, _ = s1.utilities(W)
    u2, _ = s2.utilities(W)
    assert np.all(np.isfinite(u2))
    assert np.max(np.abs(u1 - u2)) <= s1.sensitivity * (1 + 1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(x=st.lists(FINITE, min_size=2, max_size=2), y=FINITE, pos=st.integers(0, 59),
       check=st.sampled_from(["fosp", "sosp"]))
def test_above_threshold_query_sensitivity(x, y, pos, check):
    """Replacing any record by an arbitrary finite one changes each normalised
    deficit (the AboveThreshold query) by at most 1."""
    cls = get_registry().get("selector", "above-threshold")
    pb = _selector_problem()
    X2, y2 = pb.X.copy(), pb.y.copy()
    X2[pos], y2[pos] = x, y
    pb2 = Problem(pb.loss, X2, y2)
    W = [np.array([1.0, -0.5]), np.zeros(2), np.array([-3.0, 2.0])]
    u1 = cls(pb, accountant=Recorder(), rng=np.random.default_rng(0), check=check).deficits(W, 0.05)
    u2 = cls(pb2, accountant=Recorder(), rng=np.random.default_rng(0), check=check).deficits(W, 0.05)
    assert np.all(np.isfinite(u2))
    assert np.max(np.abs(u1 - u2)) <= 1.0 + 1e-9


def test_accountant_charges_before_noise_release():
    """A release the budget cannot afford raises before any noise is drawn or
    anything is returned (the mechanism's state is unchanged)."""
    for name in NOISES:
        cls = get_registry().get("noise", name)
        acc = RdpAccountant(0.5, 1e-5, "add-remove")
        mech = cls(dim=3, noise_multiplier=0.3, horizon=4, accountant=acc, seed=0)
        from dpreg.errors import BudgetExceededError

        with pytest.raises(BudgetExceededError):
            mech.add(np.ones(3), 1.0, _participation(cls, 0))
        assert mech.steps == 0 and acc.n_charges == 0
