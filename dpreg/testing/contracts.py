"""Contract tests that every plugin of a kind must pass.

Built-in plugins and third-party packages subclass these in their own test
suites (pytest collects the ``test_*`` methods)::

    from dpreg.testing import LossContract

    class TestHuberHinge(LossContract):
        loss_name = "huber-hinge"

Each contract looks the plugin up in the registry by name, so it tests exactly
what ``dpreg run`` would use.
"""
from __future__ import annotations

import math

import numpy as np


def _registry():
    from ..registry import get_registry

    return get_registry()


def _unit_rows(rng, n, d):
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    X *= rng.random((n, 1)) ** 0.3  # rows inside the ball, some near its edge
    return X


def _between(norms):
    """A clip level halfway between two middle norms (no row sits on it).
    Zero norms (a loss that is flat at some records, e.g. ``ramp``) are left
    out, so the level is positive."""
    s = np.sort(norms)
    if np.count_nonzero(s) >= 4:
        s = s[s > 0]
    k = len(s) // 2
    if s[k + 1] - s[k] <= 1e-6 * s[k + 1]:  # equal norms (data-independent terms)
        return float(0.5 * s[k])
    return float(0.5 * (s[k] + s[k + 1]))


def _labels(loss, rng, n):
    if loss.labels == "binary":
        return np.where(rng.random(n) < 0.5, -1.0, 1.0)
    if loss.labels == "real":
        return rng.random(n)
    return np.zeros(n)


class LossContract:
    """Checks a registered loss: the kernels against plain numpy, gradients and
    Hessian-vector products against finite differences, and the declared
    Lipschitz constant G against sampled per-record gradients."""

    loss_name: str = ""
    n: int = 97
    d: int = 5
    rtol: float = 1e-6

    def _setup(self, seed=0):
        from ..problem import Problem

        loss = _registry().get("loss", self.loss_name)
        rng = np.random.default_rng(seed)
        X = _unit_rows(rng, self.n, self.d)
        y = _labels(loss, rng, self.n)
        R = loss.radius if loss.radius is not None else 2.0
        w = rng.standard_normal(self.d)
        w *= 0.8 * R / np.linalg.norm(w)
        return loss, Problem(loss, X, y), X, y, w, rng

    @staticmethod
    def _per_sample(loss, X, y, w):
        a = np.array([type(loss).dphi(float(m), float(t)) for m, t in zip(X @ w, y)])
        return a[:, None] * X + loss.psi_grad(w)[None, :]

    def test_value_matches_numpy(self):
        loss, pb, X, y, w, _ = self._setup()
        ref = np.mean([type(loss).phi(float(m), float(t)) for m, t in zip(X @ w, y)]) + loss.psi(w)
        assert math.isclose(pb.value(w), ref, rel_tol=1e-9, abs_tol=1e-12)

    def test_gradient_matches_finite_differences(self):
        loss, pb, X, y, w, _ = self._setup(1)
        g = pb.gradient(w)
        h = 1e-6
        fd = np.array([(pb.value(w + h * e) - pb.value(w - h * e)) / (2 * h) for e in np.eye(self.d)])
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)

    def test_hvp_matches_finite_differences(self):
        loss, pb, X, y, w, rng = self._setup(2)
        v = rng.standard_normal(self.d)
        h = 1e-6
        fd = (pb.gradient(w + h * v) - pb.gradient(w - h * v)) / (2 * h)
        np.testing.assert_allclose(pb.hvp(w, v), fd, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(pb.hessian(w) @ v, pb.hvp(w, v), rtol=1e-9, atol=1e-12)

    def test_clipped_gradient_sum_matches_numpy(self):
        loss, pb, X, y, w, rng = self._setup(3)
        Gm = self._per_sample(loss, X, y, w)
        norms = np.linalg.norm(Gm, axis=1)
        clip = _between(norms)  # about half the rows get clipped
        idx = np.sort(rng.choice(self.n, size=self.n // 2, replace=False)).astype(np.int64)
        s, k = pb.clipped_grad_sum(w, idx, clip)
        scale = np.minimum(1.0, clip / norms[idx])
        np.testing.assert_allclose(s, (Gm[idx] * scale[:, None]).sum(0), rtol=1e-9, atol=1e-12)
        assert k == int(np.sum(norms[idx] > clip))

    def test_clipped_difference_sum_matches_numpy(self):
        loss, pb, X, y, w, rng = self._setup(4)
        wp = w + 0.1 * rng.standard_normal(self.d)
        D = self._per_sample(loss, X, y, w) - self._per_sample(loss, X, y, wp)
        norms = np.linalg.norm(D, axis=1)
        clip = _between(norms)
        s, k = pb.clipped_diff_sum(w, wp, None, clip)
        scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
        np.testing.assert_allclose(s, (D * scale[:, None]).sum(0), rtol=1e-9, atol=1e-12)
        assert k == int(np.sum(norms > clip))

    def test_block_derivative_matches_scalar(self):
        """The compiled block form of dphi (the loss's own ``dphi_block``, or
        the row-by-row default) gives the scalar ``dphi``'s values - to 1e-13
        relative, or 1e-15 of the largest value absolute (a block form may
        avoid a cancellation the scalar form has: sigmoid's s (1 - s)) - on
        margins from 0 to beyond exp's range and on NaN, for stages of every
        length up to 64."""
        from dpreg_kernels.linear_model import SCALAR_SIG  # noqa: F401 (compiles the kernels' types)

        loss = _registry().get("loss", self.loss_name)
        blk = loss.block_kernels()[0]
        dphi = loss.scalar_kernels()[1]
        rng = np.random.default_rng(11)
        m = np.concatenate([[0.0, -0.0, 1e-300, -1e-300, 700.0, -700.0, 710.0, -710.0, 1e4, -1e4],
                            rng.standard_normal(40) * 3, rng.standard_normal(14) * 200])
        y = _labels(loss, rng, m.size)
        for n in (1, 3, 4, 17, m.size):
            out = np.full(n, np.nan)
            blk(m[:n].copy(), y[:n].copy(), out, np.empty(n), np.empty(n, dtype=np.int64), dphi)
            want = np.array([type(loss).dphi(float(a), float(b)) for a, b in zip(m[:n], y[:n])])
            np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-15 * max(1e-285, np.abs(want).max()))
        out = np.zeros(2)
        blk(np.array([np.nan, 0.5]), y[:2].copy(), out, np.empty(2), np.empty(2, dtype=np.int64), dphi)
        assert np.isnan(out[0]) == np.isnan(type(loss).dphi(float("nan"), float(y[0]))) and np.isfinite(out[1])

    def test_compiled_psi_gradient_matches_numpy(self):
        """The loss's compiled psi gradient (the many-step kernels use it)
        equals its numpy ``psi_grad``; a loss with psi but no compiled form
        reports None, and the algorithms then run step by step."""
        loss = _registry().get("loss", self.loss_name)
        f = loss.psi_kernel()
        if f is None:
            assert loss.has_psi and type(loss).psi_grad_kernel is None
            return
        rng = np.random.default_rng(12)
        params = np.ascontiguousarray(loss.psi_params(), dtype=np.float64)
        for scale in (0.0, 0.3, 3.0):
            w = rng.standard_normal(self.d) * scale
            out = np.full(self.d, np.nan)
            f(w, params, out)
            np.testing.assert_allclose(out, loss.psi_grad(w), rtol=1e-13, atol=1e-15)

    def test_declared_lipschitz_constant_holds_on_unit_ball(self):
        """The declared G - or, for a loss whose declared constants are
        practical defaults (a clip at the scale of typical gradients), its
        ``worst_case_constants(d)`` - bounds every per-record gradient on the
        unit ball."""
        loss, pb, X, y, w, rng = self._setup(5)
        worst = getattr(loss, "worst_case_constants", None)
        G, M, rho = loss.constants(self.d)
        assert G > 0 and M > 0 and rho >= 0
        if worst is not None:
            G, M, rho = worst(self.d)
        assert G > 0 and M > 0 and rho >= 0
        R = loss.radius if loss.radius is not None else 1.0
        for _ in range(5):
            w = rng.standard_normal(self.d)
            w *= R * rng.random() / np.linalg.norm(w)
            assert np.linalg.norm(self._per_sample(loss, X, y, w), axis=1).max() <= G * (1 + 1e-9)


def _declared_std(mech, z, s, t):
    """``noise_std_per_step`` of ``mech``'s class; a mechanism whose prefix
    noise depends on the horizon (sqrt-factorization) takes it as the keyword
    ``horizon``."""
    import inspect

    f = type(mech).noise_std_per_step
    kw = {"horizon": mech.horizon} if "horizon" in inspect.signature(f).parameters else {}
    return f(z, s, t, **kw)


class NoiseContract:
    """Checks a registered continual-release mechanism: it charges the
    accountant before releasing, refuses over budget, is reproducible from
    its seed, and its prefix-sum noise has the variance it declares
    (``noise_std_per_step``), by a chi-square test that fails for a noise
    scale off by a factor 2/3 or 3/2."""

    noise_name: str = ""
    dim: int = 400
    horizon: int = 16

    def _make(self, seed=0, z=1.0, eps=1e6, delta=1e-5):
        from ..accounting import RdpAccountant

        cls = _registry().get("noise", self.noise_name)
        acc = RdpAccountant(eps, delta, "replace-one")
        return cls(dim=self.dim, noise_multiplier=z, horizon=self.horizon, accountant=acc, seed=seed), acc

    def test_prefix_noise_variance(self):
        from scipy import stats

        from ..interfaces import Participation

        mech, _ = self._make(seed=7, z=1.3)
        s = 0.7
        lo, hi = stats.chi2.ppf([1e-4, 1 - 1e-4], self.dim)

        def consistent(release, sd):  # chi-square of dim standardized coordinates
            return lo < float(np.sum((release / sd) ** 2)) < hi

        for t in range(1, self.horizon + 1):
            rel = mech.add(np.zeros(self.dim), s, Participation.disjoint(t))
            sd = _declared_std(mech, 1.3, s, t)
            assert consistent(rel, sd), t
            # the same check rejects noise at 2/3 or 3/2 of the declared scale
            assert not consistent(rel * (2 / 3), sd) and not consistent(rel * 1.5, sd), t

    def test_charges_before_release_and_refuses_over_budget(self):
        from ..errors import BudgetExceededError
        from ..interfaces import Participation

        mech, acc = self._make(z=0.3, eps=0.5)
        before = acc.epsilon_spent
        try:
            # disjoint: the one participation every mechanism accepts
            mech.add(np.ones(self.dim), 1.0, Participation.disjoint("contract"))
            raised = False
        except BudgetExceededError:
            raised = True
        assert raised, "a release with z=0.3 must not fit eps=0.5"
        assert acc.epsilon_spent == before and acc.n_charges == 0

    def test_reproducible_from_seed(self):
        from ..interfaces import Participation

        a, _ = self._make(seed=3)
        b, _ = self._make(seed=3)
        c, _ = self._make(seed=4)
        inc = np.linspace(0, 1, self.dim)
        ra = [a.add(inc, 1.0, Participation.disjoint(t)) for t in range(5)]
        rb = [b.add(inc, 1.0, Participation.disjoint(t)) for t in range(5)]
        rc = [c.add(inc, 1.0, Participation.disjoint(t)) for t in range(5)]
        assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
        assert not np.array_equal(ra[-1], rc[-1])
