"""The ``mlp`` loss (networks of any depth, logistic/softmax/squared/Huber
heads): its fused kernels against the plain-numpy references in tests/naive.py
and finite differences for 1, 2 and 3 hidden layers and each head, the
clipping that enforces every sensitivity, thread-count determinism, the
declared constants, the host interface (make_problem, decision_function,
initial_point, options, task binding) and every algorithm running on it or
refusing it in one line."""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import naive
from conftest import unit_rows

N, P, H = 203, 5, 4  # 203 rows: 7 chunks of <= 32 rows and a remainder
K3 = 3  # classes of the softmax cases
DELTA = 0.7  # Huber's delta in the Huber cases (targets reach beyond it)

HEADS = ("logistic", "softmax", "squared", "huber")
ACTS = ("tanh", "softplus", "sigmoid", "silu")
DEPTHS = ((H,), (H, 3), (3, H, 2))
#: (hidden, head, activation): every head at every depth, every activation at least once per depth
CASES = [(hid, head, ACTS[(i + j) % len(ACTS)]) for i, hid in enumerate(DEPTHS) for j, head in enumerate(HEADS)]


def _ids(case):
    hid, head, act = case
    return f"{'-'.join(map(str, hid))}-{head}-{act}"


@pytest.fixture(scope="module")
def X():
    return unit_rows(np.random.default_rng(7), N, P)


def _labels(head, n, rng):
    if head == "logistic":
        return np.where(rng.random(n) < 0.5, 1.0, -1.0)
    if head == "softmax":
        return rng.integers(0, K3, n).astype(float)
    return rng.uniform(-1, 1, n) * 1.5


def _problem(registry, X, y, **opts):
    from dpreg.problem import make_problem

    return make_problem(registry.get("loss", "mlp")(**opts), X, y)


def _case(registry, X, case, seed=0):
    hid, head, act = case
    y = _labels(head, X.shape[0], np.random.default_rng(100 + seed))
    opts = dict(hidden=hid, activation=act, head=head, delta=DELTA)
    if head == "softmax":
        opts["n_classes"] = K3
    pb = _problem(registry, X, y, **opts)
    sizes = [P, *hid, K3 if head == "softmax" else 1]
    return pb, y, sizes


def _w(rng, d, scale=0.8):
    return rng.standard_normal(d) * scale


# ------------------------------------------------------------- kernels vs naive
@pytest.mark.parametrize("case", CASES, ids=_ids)
@pytest.mark.parametrize("clip", [np.inf, 0.03])
def test_grad_and_diff_sums_match_reference(registry, X, case, clip):
    pb, y, sizes = _case(registry, X, case)
    _, head, act = case
    rng = np.random.default_rng(1)
    w, wp = _w(rng, pb.d), _w(rng, pb.d)
    clipped = []
    for idx in (None, rng.integers(0, N, 77)):  # full batch; sampled with repeats
        ix = np.arange(N) if idx is None else idx
        s, k = pb.clipped_grad_sum(w, idx, clip)
        rs, rk = naive.net_clipped_grad_sum(sizes, act, head, X, y, ix, w, clip, DELTA)
        np.testing.assert_allclose(s, rs, rtol=1e-10, atol=1e-11)
        assert k == rk
        s, k2 = pb.clipped_diff_sum(w, wp, idx, clip)
        rs, rk = naive.net_clipped_diff_sum(sizes, act, head, X, y, ix, w, wp, clip, DELTA)
        np.testing.assert_allclose(s, rs, rtol=1e-10, atol=1e-11)
        assert k2 == rk
        clipped += [k, k2]
    if np.isfinite(clip):
        assert min(clipped) > 0  # the clip was active in both kernels


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_value_outputs_gradient_hvp_match_reference_and_finite_differences(registry, X, case):
    pb, y, sizes = _case(registry, X, case)
    _, head, act = case
    rng = np.random.default_rng(2)
    w, V = _w(rng, pb.d), rng.standard_normal(pb.d)
    assert pb.value(w) == pytest.approx(naive.net_value(sizes, act, head, X, y, w, DELTA), rel=1e-12)
    O = naive.net_outputs(sizes, act, X, w)
    np.testing.assert_allclose(pb.outputs(w), O, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(pb.decision_function(w), O if head == "softmax" else O[:, 0], rtol=1e-12, atol=1e-14)
    g = pb.gradient(w)
    np.testing.assert_allclose(g, naive.net_per_record_gradients(sizes, act, head, X, y, w, DELTA).mean(axis=0),
                               rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(g, naive.finite_diff_grad(pb.value, w), rtol=1e-5, atol=1e-8)
    hv = pb.hvp(w, V)
    np.testing.assert_allclose(hv, naive.net_hvp(sizes, act, head, X, y, w, V, DELTA), rtol=1e-9, atol=1e-12)
    eps = 1e-6
    fd = (pb.gradient(w + eps * V) - pb.gradient(w - eps * V)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)
    idx = rng.integers(0, N, 50)  # a sampled batch
    np.testing.assert_allclose(pb.hvp(w, V, idx), naive.net_hvp(sizes, act, head, X[idx], y[idx], w, V, DELTA),
                               rtol=1e-9, atol=1e-12)
    assert pb.value(w, idx) == pytest.approx(naive.net_value(sizes, act, head, X[idx], y[idx], w, DELTA), rel=1e-12)


@pytest.mark.parametrize("act", ACTS)
def test_activations_are_accurate_over_their_whole_range(registry, act):
    """The kernels' vectorised activations (exp-based, a rational form for
    small tanh arguments) against numpy, from 1e-300 to 1e3 on both sides of
    0, at tanh's switch |z| = 0.625, and at inf and NaN: a 1-1-1 network with
    weights 1 and biases 0 outputs act(x); and through the gradient, act'(x)."""
    z = np.concatenate([np.geomspace(1e-300, 1e3, 400), [0.625, np.nextafter(0.625, 0), 0.0]])
    z = np.concatenate([z, -z])
    pb = _problem(registry, z[:, None], np.ones(len(z)), hidden=1, activation=act, head="squared")
    w = np.array([1.0, 0.0, 1.0, 0.0])
    a, s1, _ = naive.net_act(z, act)
    np.testing.assert_allclose(pb.decision_function(w), a, rtol=2e-15, atol=1e-300)  # a few ulp
    # d/dv of (o - y)^2/2 = (o - y) act(z); d/db = (o - y) act'(z): per record, unclipped
    for i in range(0, len(z), 7):
        g = pb.gradient(w, [i])
        np.testing.assert_allclose(g[1], (a[i] - 1.0) * s1[i], rtol=4e-15, atol=1e-300)
    special = _problem(registry, np.array([[np.inf], [-np.inf], [np.nan]]), np.ones(3), hidden=1, activation=act,
                       head="squared")
    out = special.decision_function(w)
    ref = naive.net_act(np.array([np.inf, -np.inf]), act)[0] if act in ("tanh", "sigmoid") else None
    if ref is not None:  # (exp is clamped at exp(-708) = 3.3e-308: sigmoid(-inf) is that)
        np.testing.assert_allclose(out[:2], ref, rtol=0, atol=1e-300)
    assert np.isnan(out[2])


@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_one_layer_hessian_matches_closed_form(registry, X, act):
    """The one-hidden-layer logistic network's dense Hessian against the closed
    form phi'' grad o grad o^T + phi' grad^2 o (independent of the
    forward-over-reverse references; it covers tanh and softplus)."""
    y = _labels("logistic", N, np.random.default_rng(3))
    pb = _problem(registry, X, y, hidden=H, activation=act)
    w = _w(np.random.default_rng(3), pb.d)
    Href = naive.mlp_hessian(H, act, X, y, w)
    np.testing.assert_allclose(pb.hessian(w), Href, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(naive.net_hessian([P, H, 1], act, "logistic", X, y, w), Href, rtol=1e-9, atol=1e-12)


def test_lambda_min_by_lanczos_matches_dense(registry, X):
    from scipy.sparse.linalg import LinearOperator, eigsh

    from dpreg import metrics

    y = _labels("logistic", N, np.random.default_rng(4))
    for hid in ((H,), (H, 3)):
        pb = _problem(registry, X, y, hidden=hid, init="zero")
        w = np.zeros(pb.d)
        w[-1] = 0.3  # on the symmetric saddle w = 0 (the output bias is irrelevant to the symmetry)
        if len(hid) == 2:
            w[:pb.d - 1] += 0.05  # off the degenerate point of the deeper net, still a saddle region
        dense = np.linalg.eigvalsh(naive.net_hessian([P, *hid, 1], "tanh", "logistic", X, y, w))[0]
        assert dense < -1e-4  # negative curvature
        op = LinearOperator((pb.d, pb.d), matvec=lambda v: pb.hvp(w, np.ravel(v)), dtype=float)
        lan = eigsh(op, k=1, which="SA", tol=1e-10, return_eigenvectors=False)[0]
        assert lan == pytest.approx(dense, rel=1e-7)
        assert metrics.lambda_min(pb, w) == pytest.approx(dense, rel=1e-7)


# --------------------------------------------------------------------- clipping
@pytest.mark.parametrize("case", CASES[::3] + CASES[1::5], ids=_ids)
def test_every_term_is_clipped_and_non_finite_terms_dropped(registry, case):
    rng = np.random.default_rng(3)
    Xc = unit_rows(rng, 40, P)
    Xc[5] *= 1e300  # overflows: its norm is not finite
    Xc[6, 0] = np.nan
    pb, _, _ = _case(registry, Xc, case)
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


def test_difference_norm_is_that_of_the_added_term(registry, X):
    """Past the first layer the O2 term has no factorised norm: with w and wp a
    hair apart (the difference is tiny against each gradient) and the clip at
    the difference's own scale, every clipped term still has norm <= clip."""
    rng = np.random.default_rng(9)
    pb, _, _ = _case(registry, X, ((H, 3), "softmax", "tanh"))
    w = _w(rng, pb.d, 2.0)
    wp = w + 1e-9 * rng.standard_normal(pb.d)
    sums, _ = naive.clip_rows(naive.net_per_record_gradients([P, H, 3, K3], "tanh", "softmax", X, pb.y, w)
                              - naive.net_per_record_gradients([P, H, 3, K3], "tanh", "softmax", X, pb.y, wp), np.inf)
    clip = float(np.median(np.linalg.norm(sums, axis=1)))
    for i in range(N):
        s, _ = pb.clipped_diff_sum(w, wp, [i], clip)
        assert np.linalg.norm(s) <= clip


@pytest.mark.parametrize("hid", [(H,), (H, 3)])
def test_bit_identical_for_one_and_two_threads_and_both_variants(registry, X, hid):
    for head in ("logistic", "softmax"):
        pb, _, _ = _case(registry, X, (hid, head, "tanh"))
        rng = np.random.default_rng(4)
        w, wp, V = _w(rng, pb.d), _w(rng, pb.d), rng.standard_normal(pb.d)
        idx = rng.integers(0, N, 150)
        k = pb._k

        def all_of_them(par):
            args = (pb.sizes, pb._act, pb._head, pb._hp)
            return [k.grad_sum.variant(par)(pb.X, pb.y, idx[:0], True, w, *args, 0.2)[0],
                    k.grad_sum.variant(par)(pb.X, pb.y, idx, False, w, *args, 0.2)[0],
                    k.diff_sum.variant(par)(pb.X, pb.y, idx, False, w, wp, *args, 0.2)[0],
                    k.hvp_sum.variant(par)(pb.X, pb.y, pb.all_rows, w, V, *args),
                    np.array([k.loss_sum.variant(par)(pb.X, pb.y, pb.all_rows, w, *args)]),
                    k.outputs.variant(par)(pb.X, w, pb.sizes, pb._act)]

        old = numba.get_num_threads()
        res = []
        try:
            for th in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
                numba.set_num_threads(th)
                res.append(all_of_them(True))
        finally:
            numba.set_num_threads(old)
        res.append(all_of_them(False))
        for r in res[1:]:
            for a, b in zip(res[0], r):
                assert np.array_equal(a, b)


def test_repeated_calls_are_bit_identical_wherever_the_scratch_arrays_lie(registry, X):
    """The same call, repeated while the allocator moves (numpy arrays of
    varied sizes allocated in between), gives the same bits: no sum's order
    depends on the addresses of the kernels' scratch arrays."""
    pb, _, _ = _case(registry, X, ((H, 3), "softmax", "tanh"))
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
BOUND_CASES = [((3,), "logistic", "tanh"), ((3,), "logistic", "softplus"), ((3,), "softmax", "sigmoid"),
               ((3,), "squared", "silu"), ((3, 2), "logistic", "tanh"), ((3, 2), "softmax", "softplus"),
               ((2, 3), "huber", "sigmoid"), ((2, 2, 2), "squared", "tanh"), ((2, 2, 2), "logistic", "silu")]


@pytest.mark.parametrize("case", BOUND_CASES, ids=_ids)
def test_declared_constants_bound_gradient_hessian_and_hessian_lipschitz(registry, case):
    """The worst-case G, M, rho hold on random points of the ball |w| <= B for
    |x| <= 1 (targets in [-1, 1]): per-record gradient norm, Hessian operator
    norm, and the Hessian's change over a short step."""
    hid, head, act = case
    K = K3 if head == "softmax" else 1
    opts = dict(hidden=hid, activation=act, head=head, ball=1.5, delta=0.5)
    if head == "softmax":
        opts["n_classes"] = K
    loss = registry.get("loss", "mlp")(**opts)
    G, M, rho = loss.ball_constants()
    assert loss(**opts, init="zero").constants(0) == (G, M, rho)
    rng = np.random.default_rng(5)
    sizes = [3, *hid, K]
    D = naive.net_n_params(sizes)
    worst = [0.0, 0.0, 0.0]
    for _ in range(150):
        x = rng.standard_normal(3)
        x /= np.linalg.norm(x)
        y = np.array([_labels(head, 1, rng)[0] / (1.5 if head in ("squared", "huber") else 1.0)])
        w = rng.standard_normal(D)
        w *= 1.5 * rng.random() ** 0.2 / np.linalg.norm(w)
        u = rng.standard_normal(D)
        w2 = w + 1e-3 * u / np.linalg.norm(u)
        w2 *= min(1.0, 1.5 / np.linalg.norm(w2))
        if head == "huber":  # its Hessian jumps at |r| = delta: rho holds on each piece
            r1 = naive.net_outputs(sizes, act, x[None], w)[0, 0] - y[0]
            r2 = naive.net_outputs(sizes, act, x[None], w2)[0, 0] - y[0]
            if (abs(r1) <= 0.5) != (abs(r2) <= 0.5):
                continue
        g = naive.net_per_record_gradients(sizes, act, head, x[None], y, w, 0.5)[0]
        Hw = naive.net_hessian(sizes, act, head, x[None], y, w, 0.5)
        H2 = naive.net_hessian(sizes, act, head, x[None], y, w2, 0.5)
        worst[0] = max(worst[0], np.linalg.norm(g) / G)
        worst[1] = max(worst[1], np.linalg.norm(Hw, 2) / M)
        worst[2] = max(worst[2], np.linalg.norm(Hw - H2, 2) / (rho * np.linalg.norm(w - w2)))
    assert max(worst) <= 1.0
    # not vacuous (the by-layer bounds of deeper networks take every layer at norm B: looser)
    assert worst[0] > (0.1 if len(hid) == 1 else 0.05) and worst[1] > (0.1 if len(hid) == 1 else 0.005)


def test_practical_constants_default_to_the_initial_scale_and_options_override(registry):
    """init=random with output gain t declares G = t, M = t^2 l2/2 (l2: the
    head's curvature bound; rho the ball's); G=, M= override; at W_0 = b_0 = 0,
    with the back-propagated factor u of norm t, the per-record W_0-gradient is
    <= t and the W_0-block Hessian <= t^2/4 (logistic): the practical bounds
    are not below the truth there, at any depth."""
    mlp = registry.get("loss", "mlp")
    _, _, rho = mlp.ball_constants()
    assert mlp.constants(0) == (8.0, 8.0, rho)
    assert mlp(init_v=4).constants(0) == (4.0, 2.0, rho)
    assert mlp(G=3, M="5").constants(0) == (3.0, 5.0, rho)
    assert mlp(init_v=0).constants(0) == mlp.ball_constants()
    assert mlp(head="softmax", n_classes=10).constants(0)[:2] == (8.0, 8.0)
    assert mlp(head="squared").constants(0)[:2] == (8.0, 64.0)
    assert mlp(hidden="64,32").constants(0)[:2] == (8.0, 8.0)
    from dpreg.errors import ParameterError

    for bad in ({"G": 0}, {"M": -1}, {"M": "nan"}, {"G": "big"}):
        with pytest.raises(ParameterError):
            mlp(**bad)
    rng = np.random.default_rng(4)
    t = 8.0
    for hid in ((3,), (3, 4)):
        sizes = [4, *hid, 1]
        D = naive.net_n_params(sizes)
        for _ in range(30):
            w = rng.standard_normal(D) * 0.5
            layers = naive.net_unpack(sizes, w)
            layers[0][0][:] = 0.0  # W_0 = 0 and every bias 0: the start (units in their linear range)
            for _, b in layers:
                b[:] = 0.0
            # scale the output layer so that the back-propagated factor at layer 0 has norm t
            x = rng.standard_normal(4)
            x /= np.linalg.norm(x)
            yy = np.array([rng.choice([-1.0, 1.0])])
            u = naive.net_per_record_gradients(sizes, "tanh", "logistic", x[None], yy, w)[0][4 * hid[0]:5 * hid[0]]
            e = naive.net_head("logistic", naive.net_outputs(sizes, "tanh", x[None], w), yy)[1][0, 0]
            layers[-1][0][:] *= t / (np.linalg.norm(u) / abs(e))
            g = naive.net_per_record_gradients(sizes, "tanh", "logistic", x[None], yy, w)[0]
            assert np.linalg.norm(g[:4 * hid[0]]) <= t + 1e-9
            Hw = naive.net_hessian(sizes, "tanh", "logistic", x[None], yy, w)[:4 * hid[0], :4 * hid[0]]
            assert np.linalg.norm(Hw, 2) <= t * t / 4 + 1e-9


def test_sparse_rows_are_densified(registry, X):
    """svmlight files load as scipy CSR: the network problem takes them (dense kernels)."""
    import scipy.sparse as sp

    y = _labels("logistic", N, np.random.default_rng(6))
    Xs = X.copy()
    Xs[np.abs(Xs) < 0.3] = 0.0
    dense, sparse = _problem(registry, Xs, y, hidden=H), _problem(registry, sp.csr_matrix(Xs), y, hidden=H)
    w = _w(np.random.default_rng(3), dense.d)
    np.testing.assert_array_equal(sparse.X, Xs)
    assert sparse.value(w) == dense.value(w)
    np.testing.assert_array_equal(sparse.decision_function(w, sp.csr_matrix(Xs[:9])), dense.decision_function(w)[:9])


# ---------------------------------------------------------------- host interface
def test_make_problem_decision_function_and_initial_point(registry, X):
    from dpreg.interfaces import Algorithm
    from dpreg.problem import Problem, make_problem
    from dpreg_plugins.losses.mlp import MLPProblem

    y = _labels("logistic", N, np.random.default_rng(0))
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
    (W, b), (v, c) = pb.unpack(a)
    assert W.shape == (H, P) and v.shape == (1, H) and c.shape == (1,)
    # the one-layer draw: W_0 first (sd 0.01), then v (sd t/sqrt(h)); biases 0
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(W, rng.standard_normal((H, P)) * 0.01)
    np.testing.assert_array_equal(v, rng.standard_normal((1, H)) * (8.0 / math.sqrt(H)))
    assert np.all(b == 0) and np.all(c == 0)
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


def test_deep_layout_initial_point_and_output_shapes(registry):
    rng = np.random.default_rng(1)
    Xb = unit_rows(rng, 4000, 50)
    yb = rng.integers(0, 10, 4000).astype(float)
    pb = _problem(registry, Xb, yb, hidden="64,32", head="softmax", n_classes=10, init_mid=1.5)
    assert pb.d == 64 * 51 + 32 * 65 + 10 * 33
    layers = pb.unpack(pb.initial_point(np.random.default_rng(2)))
    assert [W.shape for W, _ in layers] == [(64, 50), (32, 64), (10, 32)]
    assert all(np.all(b == 0) for _, b in layers)
    for (W, _), sd in zip(layers, (0.01, 1.5 / 8, 8 / math.sqrt(32))):
        assert np.std(W) == pytest.approx(sd, rel=0.15)
    w = pb.initial_point(np.random.default_rng(2))
    assert pb.decision_function(w).shape == (4000, 10)
    assert pb.decision_function(w, Xb[:7]).shape == (7, 10)
    # near the start the network is close to linear: every class score is small and the loss ~ log 10
    assert pb.value(w) == pytest.approx(math.log(10), abs=0.05)
    reg_pb = _problem(registry, Xb, rng.uniform(-1, 1, 4000), hidden="8,8", head="huber")
    assert reg_pb.decision_function(reg_pb.initial_point(rng)).shape == (4000,)


def test_labels_the_head_cannot_read_are_refused(registry, X):
    from dpreg.errors import DataError, ParameterError

    with pytest.raises(DataError, match="class indices 0..2"):
        _problem(registry, X, np.full(N, 3.0), hidden=H, head="softmax", n_classes=3)
    with pytest.raises(DataError, match="class indices"):
        _problem(registry, X, np.full(N, 0.5), hidden=H, head="softmax", n_classes=3)
    y = np.zeros(N)
    y[4] = np.nan
    with pytest.raises(DataError, match="finite targets"):
        _problem(registry, X, y, hidden=H, head="squared")
    with pytest.raises(ParameterError, match="number of classes"):
        _problem(registry, X, np.zeros(N), hidden=H, head="softmax")


def test_loss_options_are_parsed_and_checked(registry):
    from dpreg.errors import ParameterError
    from dpreg.pipeline import get_loss

    loss = get_loss(registry, "mlp:hidden=7,activation=softplus,init=zero")
    assert (loss.hidden, loss.activation, loss.init) == ((7,), "softplus", "zero")
    deep = get_loss(registry, "mlp:hidden=64,32,activation=silu,head=huber,delta=0.5")
    assert (deep.hidden, deep.activation, deep.head, deep.delta, deep.task) == ((64, 32), "silu", "huber", 0.5,
                                                                                "regression")
    assert get_loss(registry, "mlp:hidden=16,8,4").hidden == (16, 8, 4)
    assert get_loss(registry, "mlp:hidden=16-8").hidden == (16, 8)
    assert get_loss(registry, "mlp").hidden == (32,)
    assert get_loss(registry, "logistic") is registry.get("loss", "logistic")
    for bad in ("logistic:hidden=3", "mlp:hidden=0", "mlp:hidden=64,0", "mlp:hidden=6.5", "mlp:activation=relu",
                "mlp:depth=2", "mlp:hidden", "mlp:head=hinge", "mlp:head=squared,n_classes=4", "mlp:head=softmax,n_classes=1",
                "mlp:head=huber,delta=0", "mlp:init_mid=-1"):
        with pytest.raises(ParameterError):
            get_loss(registry, bad)


def test_task_binding_and_spec_round_trip(registry):
    from dpreg.errors import ParameterError
    from dpreg.pipeline import get_loss

    mlp = registry.get("loss", "mlp")
    assert (mlp.task, mlp.labels, mlp.classifier, mlp.n_classes, mlp.head_given) == ("binary", "binary", True,
                                                                                     None, None)
    deep = mlp(hidden=(64, 32), activation="softplus")
    sm = deep.for_task("multiclass", 10)
    assert (sm.task, sm.head, sm.n_classes, sm.hidden, sm.activation) == ("multiclass", "softmax", 10, (64, 32),
                                                                          "softplus")
    assert deep.with_classes(4).n_classes == 4 and sm.with_classes(3).n_classes == 3
    assert sm.for_task("multiclass", 10).n_classes == 10
    unbound = deep.for_task("multiclass")  # K bound later from the label map
    assert (unbound.head, unbound.n_classes) == ("softmax", None)
    assert deep.for_task("binary") is deep
    rg = deep.for_task("regression")
    assert (rg.head, rg.task, rg.labels, rg.classifier) == ("squared", "regression", "real", False)
    hub = mlp(head="huber", delta=0.3)
    assert hub.for_task("regression") is hub
    assert mlp(n_classes=5).head == "softmax"
    # a head given as an option that does not serve the data's task: refused in one line
    for loss, task, K in ((sm, "binary", None), (hub, "multiclass", 10), (mlp(head="logistic"), "regression", None)):
        with pytest.raises(ParameterError, match="leave head out"):
            loss.for_task(task, K)
    with pytest.raises(ParameterError):
        deep.for_task("ranking")
    with pytest.raises(ParameterError):
        deep.with_classes(1)
    for loss in (mlp, deep, sm, rg, hub, unbound, mlp(init="zero", radius=2, G=3)):
        again = get_loss(registry, loss.spec)
        assert again.options() == loss.options(), loss.spec
    assert sm.spec == "mlp:hidden=64,32,activation=softplus,head=softmax,n_classes=10"
    assert mlp.spec == "mlp"
    assert "64-32 softplus units, softmax head over 10 classes" in sm.describe()


def test_the_pipeline_binds_the_head_to_the_public_task():
    """--labels with K > 2 classes (or a data set declared multi-class) gives
    the softmax head over K classes; two labels the logistic head; a data set
    declared regression the squared head (a Huber head given stays); a head
    given that does not fit is refused in one line before any run; the
    released spec rebuilds the bound network."""
    from types import SimpleNamespace

    from dpreg.data import Schema
    from dpreg.errors import ParameterError
    from dpreg.pipeline import RunConfig, get_loss, loss_spec_of, resolve_loss
    from dpreg.registry import get_registry

    reg = get_registry()

    def bound(spec, labels=None, task=None):
        loaded = SimpleNamespace(schema=Schema(labels=labels), source=SimpleNamespace(task=task) if task else None)
        loss, given = resolve_loss(reg, RunConfig(loss=spec), get_loss(reg, spec), loaded)
        return loss, loss_spec_of(loss, given)

    ten, spec = bound("mlp:hidden=8,4", tuple(float(k) for k in range(10)))
    assert (ten.head, ten.n_classes, ten.hidden) == ("softmax", 10, (8, 4))
    assert get_loss(reg, spec).options() == ten.options()
    assert bound("mlp:hidden=8,4", task="multiclass")[0].head == "softmax"
    assert bound("mlp:hidden=8,4", (0.0, 1.0))[0].head == "logistic"
    assert bound("mlp:hidden=8,4", task="regression")[0].head == "squared"
    assert bound("mlp:hidden=8,4,head=huber", task="regression")[0].head == "huber"
    assert bound("mlp:hidden=8,4")[0].head == "logistic"
    with pytest.raises(ParameterError, match="leave head out"):
        bound("mlp:head=logistic", (0.0, 1.0, 2.0))


# ------------------------------------------------------------------ algorithms
@pytest.fixture(scope="module")
def easy(tmp_path_factory):
    """An .npz file of a data set a network separates well and a linear model
    cannot (XOR of signs)."""
    rng = np.random.default_rng(11)
    X = rng.uniform(-1, 1, (2000, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("mlp") / "xor.npz"
    np.savez(path, X=X / math.sqrt(2), y=y)
    return str(path)


RUNS = ["dp-gd", "dp-sgd", "dp-spider", "adaptive-spider", "perturbed-sgd", "warm-start", "distributed-spider"]
REFUSED = {"dp-trust-region": "per-record clipped Hessians", "dp-stochastic-trust-region": "per-record clipped Hessians",
           "zo-o2nc": "zeroth-order kernel"}


def test_every_algorithm_is_covered(registry):
    assert set(registry.names("algorithm")) == set(RUNS) | set(REFUSED)


@pytest.mark.parametrize("algo", RUNS)
@pytest.mark.parametrize("hidden", ["8", "8,4"])
def test_every_gradient_algorithm_runs_on_networks_within_budget(easy, algo, hidden):
    import dpreg

    params = {"dp-gd": ["steps=200", "step=2"], "dp-sgd": ["step=1"], "adaptive-spider": ["step=1"]}.get(algo, [])
    # random tanh features (init_scale=1, init_v=0): every algorithm's defaults come from the worst-case
    # constants on the unit ball, a setting far from the practical one
    rec = dpreg.run(algo=algo, loss=f"mlp:hidden={hidden},init_scale=1,init_v=0", data=easy,
                    epsilon=8.0, delta=1e-5, params=params, seed=0, warn=False)
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 8.0 + 1e-9
    d = 8 * 3 + (9 if hidden == "8" else 4 * 9 + 5)
    assert rec["diagnostics"]["problem"]["d"] == d
    w = np.asarray(rec["release"]["model"]["weights"], dtype=float)
    assert np.all(np.isfinite(w)) and w.shape == (d,)
    m = rec["diagnostics"]["metrics"]
    assert m["train_loss"] < math.log(2) + 0.05  # no blow-up (log 2 = the output at 0)
    if algo == "dp-gd":  # the one with enough full-batch steps to fit XOR at this budget
        assert m["train_accuracy"] > 0.9  # a linear model cannot beat ~0.5 on XOR


@pytest.mark.parametrize("algo", sorted(REFUSED))
def test_algorithms_that_need_what_networks_lack_refuse_in_one_line(easy, algo, tmp_path):
    from click.testing import CliRunner

    from dpreg.cli import cli

    out = tmp_path / "rec.json"
    r = CliRunner().invoke(cli, ["run", "--algo", algo, "--loss", "mlp:hidden=4,3", "--data", easy,
                                 "--epsilon", "2", "--out", str(out)])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip() and not ln.startswith("Warning")]
    assert len(lines) == 1 and REFUSED[algo] in lines[0] and "Traceback" not in r.output, r.output
    assert not out.exists()


def test_a_two_hidden_layer_network_learns_under_adaptive_spider():
    """The deep network with its defaults on near-linear data (a noisy linear
    rule): adaptive-spider's output beats the majority rate by far."""
    import dpreg

    rng = np.random.default_rng(12)
    Xl = unit_rows(rng, 6000, 6)
    yl = np.where(Xl @ np.array([1.0, -1.0, 0.5, 0.0, 0.3, -0.2]) + 0.05 * rng.standard_normal(6000) > 0, 1.0, -1.0)
    rec = dpreg.run(algo="adaptive-spider", loss="mlp:hidden=16,8", data=(Xl, yl), epsilon=2.0, seed=0,
                    warn=False)
    m = rec["diagnostics"]["metrics"]
    majority = max(np.mean(yl > 0), np.mean(yl < 0))
    assert m["train_accuracy"] > majority + 0.2, m
