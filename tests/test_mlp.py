"""The ``mlp`` loss (one-hidden-layer networks): its fused kernels against the
plain-numpy references in tests/naive.py and finite differences, the clipping
that enforces every sensitivity, thread-count determinism, the declared
constants, the generalised host interface (make_problem, decision_function,
initial_point, loss options) and every algorithm running on it."""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import naive
from conftest import unit_rows

N, P, H = 203, 5, 4  # 203 rows: 7 chunks of <= 32 rows and a remainder


@pytest.fixture(scope="module")
def K():
    import dpreg_kernels.mlp as k

    return k


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = unit_rows(rng, N, P)
    y = np.where(rng.random(N) < 0.5, 1.0, -1.0)
    return X, y


def _problem(registry, X, y, **opts):
    from dpreg.problem import make_problem

    return make_problem(registry.get("loss", "mlp")(**opts), X, y)


def _w(rng, d, scale=0.8):
    return rng.standard_normal(d) * scale


ACTS = ("tanh", "softplus")


# ------------------------------------------------------------- kernels vs naive
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("clip", [np.inf, 0.3])
def test_grad_and_diff_sums_match_reference(registry, data, act, clip):
    X, y = data
    pb = _problem(registry, X, y, hidden=H, activation=act)
    rng = np.random.default_rng(1)
    w, wp = _w(rng, pb.d), _w(rng, pb.d)
    for idx in (None, rng.integers(0, N, 77)):  # full batch; sampled with repeats
        ix = np.arange(N) if idx is None else idx
        s, k = pb.clipped_grad_sum(w, idx, clip)
        rs, rk = naive.mlp_clipped_grad_sum(H, act, X, y, ix, w, clip)
        np.testing.assert_allclose(s, rs, rtol=1e-10, atol=1e-12)
        assert k == rk
        s, k = pb.clipped_diff_sum(w, wp, idx, clip)
        rs, rk = naive.mlp_clipped_diff_sum(H, act, X, y, ix, w, wp, clip)
        np.testing.assert_allclose(s, rs, rtol=1e-10, atol=1e-12)
        assert k == rk
    if np.isfinite(clip):
        assert k > 0  # the clip was active


@pytest.mark.parametrize("act", ACTS)
def test_value_outputs_gradient_hvp_hessian_match_reference_and_finite_differences(registry, data, act):
    X, y = data
    pb = _problem(registry, X, y, hidden=H, activation=act)
    rng = np.random.default_rng(2)
    w, V = _w(rng, pb.d), rng.standard_normal(pb.d)
    assert pb.value(w) == pytest.approx(naive.mlp_value(H, act, X, y, w), rel=1e-12)
    np.testing.assert_allclose(pb.decision_function(w), naive.mlp_outputs(H, act, X, w), rtol=1e-12, atol=1e-14)
    g = pb.gradient(w)
    np.testing.assert_allclose(g, naive.mlp_per_record_gradients(H, act, X, y, w).mean(axis=0), rtol=1e-10,
                               atol=1e-13)
    np.testing.assert_allclose(g, naive.finite_diff_grad(pb.value, w), rtol=1e-5, atol=1e-8)
    Href = naive.mlp_hessian(H, act, X, y, w)
    hv = pb.hvp(w, V)
    np.testing.assert_allclose(hv, Href @ V, rtol=1e-9, atol=1e-12)
    eps = 1e-6
    fd = (pb.gradient(w + eps * V) - pb.gradient(w - eps * V)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(pb.hessian(w), Href, rtol=1e-9, atol=1e-12)
    # a sampled batch
    idx = rng.integers(0, N, 50)
    np.testing.assert_allclose(pb.hvp(w, V, idx), naive.mlp_hessian(H, act, X[idx], y[idx], w) @ V,
                               rtol=1e-9, atol=1e-12)


def test_lambda_min_by_lanczos_matches_dense(registry, data):
    from dpreg import metrics

    X, y = data
    pb = _problem(registry, X, y, hidden=H, init="zero")
    w = np.zeros(pb.d)
    w[-1] = 0.3  # on the symmetric saddle w = 0 (c is irrelevant to the symmetry)
    dense = np.linalg.eigvalsh(naive.mlp_hessian(H, "tanh", X, y, w))[0]
    assert dense < -1e-3  # a strict saddle
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((pb.d, pb.d), matvec=lambda v: pb.hvp(w, np.ravel(v)), dtype=float)
    lan = eigsh(op, k=1, which="SA", tol=1e-10, return_eigenvectors=False)[0]
    assert lan == pytest.approx(dense, rel=1e-7)
    assert metrics.lambda_min(pb, w) == pytest.approx(dense, rel=1e-7)


# --------------------------------------------------------------------- clipping
@pytest.mark.parametrize("act", ACTS)
def test_every_term_is_clipped_and_non_finite_terms_dropped(registry, act):
    rng = np.random.default_rng(3)
    X = unit_rows(rng, 40, P)
    X[5] *= 1e300  # overflows: its norm is not finite
    X[6, 0] = np.nan
    y = np.where(rng.random(40) < 0.5, 1.0, -1.0)
    pb = _problem(registry, X, y, hidden=H, activation=act)
    w, wp = _w(rng, pb.d, 3.0), _w(rng, pb.d, 3.0)
    clip = 0.05
    for i in range(40):
        for s, k in (pb.clipped_grad_sum(w, [i], clip), pb.clipped_diff_sum(w, wp, [i], clip)):
            assert np.all(np.isfinite(s))
            assert np.linalg.norm(s) <= clip
            if i in (5, 6):
                assert k == 1 and np.all(s == 0.0)
    s, k = pb.clipped_grad_sum(w, None, clip)
    assert np.all(np.isfinite(s)) and np.linalg.norm(s) <= 40 * clip and k >= 2


def test_bit_identical_for_one_and_two_threads(registry, data):
    X, y = data
    pb = _problem(registry, X, y, hidden=H)
    rng = np.random.default_rng(4)
    w, wp, V = _w(rng, pb.d), _w(rng, pb.d), rng.standard_normal(pb.d)
    idx = rng.integers(0, N, 150)
    old = numba.get_num_threads()
    res = []
    try:
        for th in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(th)
            res.append([pb.clipped_grad_sum(w, None, 0.2)[0], pb.clipped_grad_sum(w, idx, 0.2)[0],
                        pb.clipped_diff_sum(w, wp, idx, 0.2)[0], pb.hvp(w, V), np.array([pb.value(w)])])
    finally:
        numba.set_num_threads(old)
    for a, b in zip(*res):
        assert np.array_equal(a, b)


def test_repeated_calls_are_bit_identical_wherever_the_scratch_arrays_lie(registry, data):
    """The same call, repeated while the allocator moves (numpy arrays of
    varied sizes allocated in between), gives the same bits: no sum's order
    depends on the addresses of the kernels' scratch arrays.  (Before the
    kernels' sums moved to loops that store nothing, 2 of 8 processes gave
    1-ulp differences here, and a CI run failed the thread test above.)"""
    X, y = data
    pb = _problem(registry, X, y, hidden=H)
    rng = np.random.default_rng(5)
    w, wp, V = _w(rng, pb.d), _w(rng, pb.d), rng.standard_normal(pb.d)
    idx = rng.integers(0, N, 150)

    def all_of_them():
        return [pb.clipped_grad_sum(w, None, 0.2)[0], pb.clipped_grad_sum(w, idx, 0.2)[0],
                pb.clipped_diff_sum(w, wp, idx, 0.2)[0], pb.hvp(w, V), np.array([pb.value(w)])]

    ref = all_of_them()
    keep = []
    for k in range(40):
        keep.append(np.empty(1 + (k * 37) % 61))  # the allocator's state moves between calls
        for a, b in zip(ref, all_of_them()):
            assert np.array_equal(a, b)


# -------------------------------------------------------------------- constants
@pytest.mark.parametrize("act", ACTS)
def test_declared_constants_bound_gradient_hessian_and_hessian_lipschitz(registry, act):
    """The worst-case G, M, rho hold on random and adversarial points of the ball |w| <= B for |x| <= 1."""
    loss = registry.get("loss", "mlp")(hidden=3, activation=act, ball=1.5)
    G, M, rho = loss.ball_constants()
    assert loss(hidden=3, activation=act, ball=1.5, init="zero").constants(0) == (G, M, rho)
    rng = np.random.default_rng(5)
    p = 3
    D = 3 * p + 7
    worst = [0.0, 0.0, 0.0]
    for _ in range(300):
        x = rng.standard_normal(p)
        x /= np.linalg.norm(x)
        y = rng.choice([-1.0, 1.0])
        w = rng.standard_normal(D)
        w *= 1.5 * rng.random() ** 0.2 / np.linalg.norm(w)
        u = rng.standard_normal(D)
        w2 = w + 1e-3 * u / np.linalg.norm(u)
        w2 *= min(1.0, 1.5 / np.linalg.norm(w2))
        g = naive.mlp_per_record_gradients(3, act, x[None], np.array([y]), w)[0]
        Hw = naive.mlp_record_hessian(3, act, x, y, w)
        H2 = naive.mlp_record_hessian(3, act, x, y, w2)
        worst[0] = max(worst[0], np.linalg.norm(g) / G)
        worst[1] = max(worst[1], np.linalg.norm(Hw, 2) / M)
        worst[2] = max(worst[2], np.linalg.norm(Hw - H2, 2) / (rho * np.linalg.norm(w - w2)))
    assert max(worst) <= 1.0
    assert worst[0] > 0.2  # not vacuous


def test_practical_constants_default_to_the_initial_scale_and_options_override(registry):
    """init=random with output scale t declares G = t, M = t^2/8 (rho the ball's);
    G=, M= override; at W = b = 0, |v| = t, the per-record W-gradient is <= t and
    the W-block Hessian <= t^2/4 (the practical bounds are not below the truth there)."""
    from dpreg.errors import ParameterError

    mlp = registry.get("loss", "mlp")
    _, _, rho = mlp.ball_constants()
    assert mlp.constants(0) == (8.0, 8.0, rho)
    assert mlp(init_v=4).constants(0) == (4.0, 2.0, rho)
    assert mlp(G=3, M="5").constants(0) == (3.0, 5.0, rho)
    assert mlp(init_v=0).constants(0) == mlp.ball_constants()
    for bad in ({"G": 0}, {"M": -1}, {"M": "nan"}, {"G": "big"}):
        with pytest.raises(ParameterError):
            mlp(**bad)
    rng = np.random.default_rng(4)
    h, p, t = 3, 4, 8.0
    D = h * p + 2 * h + 1
    for _ in range(50):
        w = np.zeros(D)
        v = rng.standard_normal(h)
        w[h * p + h:h * p + 2 * h] = t * v / np.linalg.norm(v)
        w[-1] = rng.standard_normal()
        x = rng.standard_normal(p)
        x /= np.linalg.norm(x)
        y = rng.choice([-1.0, 1.0])
        g = naive.mlp_per_record_gradients(h, "tanh", x[None], np.array([y]), w)[0]
        assert np.linalg.norm(g[:h * p]) <= t + 1e-12
        Hw = naive.mlp_record_hessian(h, "tanh", x, y, w)[:h * p, :h * p]
        assert np.linalg.norm(Hw, 2) <= t * t / 4 + 1e-12


def test_sparse_rows_are_densified(registry, data):
    """svmlight files load as scipy CSR: the network problem takes them (dense kernels)."""
    import scipy.sparse as sp

    X, y = data
    Xs = X.copy()
    Xs[np.abs(Xs) < 0.3] = 0.0
    dense, sparse = _problem(registry, Xs, y, hidden=H), _problem(registry, sp.csr_matrix(Xs), y, hidden=H)
    w = _w(np.random.default_rng(3), dense.d)
    np.testing.assert_array_equal(sparse.X, Xs)
    assert sparse.value(w) == dense.value(w)
    np.testing.assert_array_equal(sparse.decision_function(w, sp.csr_matrix(Xs[:9])), dense.decision_function(w)[:9])


# ---------------------------------------------------------------- host interface
def test_make_problem_decision_function_and_initial_point(registry, data):
    from dpreg.interfaces import Algorithm
    from dpreg.problem import Problem, make_problem
    from dpreg_plugins.losses.mlp import MLPProblem

    X, y = data
    lin = make_problem(registry.get("loss", "logistic"), X, y)
    assert type(lin) is Problem
    w = np.arange(P, dtype=float)
    np.testing.assert_array_equal(lin.decision_function(w), X @ w)
    assert np.array_equal(lin.initial_point(np.random.default_rng(0)), np.zeros(P))
    pb = _problem(registry, X, y, hidden=H)
    assert isinstance(pb, MLPProblem) and pb.d == H * P + 2 * H + 1 and pb.n == N
    a = pb.initial_point(np.random.default_rng(0))
    assert np.array_equal(a, pb.initial_point(np.random.default_rng(0)))
    assert not np.array_equal(a, pb.initial_point(np.random.default_rng(1)))
    W, b, v, c = pb.unpack(a)
    assert np.std(W) == pytest.approx(0.01, rel=0.5) and np.all(b == 0) and c == 0
    assert np.std(v) * math.sqrt(H) == pytest.approx(8.0, rel=0.6)
    # data-independent: the same on other data of the same shape
    pb2 = _problem(registry, X[::-1].copy(), -y, hidden=H)
    assert np.array_equal(a, pb2.initial_point(np.random.default_rng(0)))
    assert np.array_equal(_problem(registry, X, y, hidden=H, init="zero").initial_point(
        np.random.default_rng(0)), np.zeros(pb.d))

    class Probe(Algorithm):
        def run(self):  # pragma: no cover - not run
            raise AssertionError

    algo = Probe(pb, {}, noise=None, accountant=None, seed=3)
    np.testing.assert_array_equal(algo.initial_point(), pb.initial_point(algo.rng("initial point")))


def test_loss_options_are_parsed_and_checked(registry):
    from dpreg.errors import ParameterError
    from dpreg.pipeline import get_loss

    loss = get_loss(registry, "mlp:hidden=7,activation=softplus,init=zero")
    assert (loss.hidden, loss.activation, loss.init) == (7, "softplus", "zero")
    assert get_loss(registry, "mlp").hidden == 32
    assert get_loss(registry, "logistic") is registry.get("loss", "logistic")
    for bad in ("logistic:hidden=3", "mlp:hidden=0", "mlp:activation=relu", "mlp:depth=2", "mlp:hidden"):
        with pytest.raises(ParameterError):
            get_loss(registry, bad)


# ------------------------------------------------------------------ algorithms
@pytest.fixture(scope="module")
def easy():
    """A data set a network separates well and a linear model cannot (XOR of signs)."""
    rng = np.random.default_rng(11)
    X = rng.uniform(-1, 1, (2000, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    return X / math.sqrt(2), y


@pytest.mark.parametrize("algo,params", [
    ("dp-gd", ["steps=200", "step=2"]),
    ("dp-sgd", ["step=1"]),
    ("dp-spider", []),
    ("adaptive-spider", ["step=1"]),
    ("perturbed-sgd", []),
    ("warm-start", []),
])
def test_every_algorithm_runs_on_mlp_within_budget(easy, algo, params):
    import dpreg

    X, y = easy
    # random tanh features (init_scale=1, init_v=0; worst-case constants on the unit ball): the default
    # small-weight init starts in the linear range and does not fit XOR in 200 steps (train accuracy 0.50)
    rec = dpreg.run(algo=algo, loss="mlp:hidden=8,init_scale=1,init_v=0", data=_npz(X, y),
                    epsilon=8.0, delta=1e-5, params=params, seed=0)
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 8.0 + 1e-9
    assert rec["diagnostics"]["problem"]["d"] == 8 * 2 + 17
    w = np.asarray(rec["release"]["model"]["weights"], dtype=float)
    assert np.all(np.isfinite(w))
    m = rec["diagnostics"]["metrics"]
    assert m["train_loss"] < math.log(2) + 0.05  # no blow-up (log 2 = the output at 0)
    if algo == "dp-gd":  # the one with enough full-batch steps to fit XOR at this budget
        assert m["train_accuracy"] > 0.9  # a linear model cannot beat ~0.5 on XOR


_NPZ = {}


def _npz(X, y):
    import tempfile

    key = id(X)
    if key not in _NPZ:
        f = tempfile.NamedTemporaryFile(suffix=".npz", delete=False)
        np.savez(f, X=X, y=y)
        f.close()
        _NPZ[key] = f.name
    return _NPZ[key]
