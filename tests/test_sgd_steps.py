"""Many DP-SGD steps in one compiled call (dpreg_kernels.sgd via
Problem.sgd_steps) against the same steps taken one by one from Python with
Problem.clipped_grad_sum; the bulk trajectory/output helpers against their
per-step forms; dp-sgd's use of the compiled steps."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpreg.access import poisson_rows_many
from dpreg.problem import Problem, project
from dpreg.trajectory import OutputChoice, Trajectory


def _data(rng, n=300, d=7, density=0.5):
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return X, y


def _python_steps(pb, w, rows, offsets, noise, sd, step, b, radius, clip):
    W, gn = [], []
    for k in range(len(offsets) - 1):
        idx = rows[offsets[k]:offsets[k + 1]]
        s = pb.clipped_grad_sum(w, idx, clip)[0] if len(idx) else np.zeros(pb.d)
        g = (s + noise[k] * sd) / b
        w = project(w - step * g, radius)
        W.append(w)
        gn.append(np.linalg.norm(g))
    return w, np.array(W), np.array(gn)


@pytest.mark.parametrize("loss_name", ["logistic", "logistic-nonconvex-reg", "sigmoid-l2", "lowy-synthetic"])
@pytest.mark.parametrize("sparse", [False, True])
def test_compiled_steps_match_python_steps(registry, loss_name, sparse):
    rng = np.random.default_rng(5)
    X, y = _data(rng)
    loss = registry.get("loss", loss_name)
    pb = Problem(loss, sp.csr_matrix(X) if sparse else X, y)
    assert pb.sgd_steps_available(30)
    rows, offsets = poisson_rows_many(rng, pb.n, 0.1, 40)
    offsets[5] = offsets[4]  # step 4 empty, step 5 two samples' rows: any partition of rows is a plan
    noise = rng.standard_normal((40, pb.d))
    w0 = rng.standard_normal(pb.d) * 0.5
    radius = loss.radius
    eta = 1.0 / pb.constants()[1]  # a stable step: rounding differences do not grow through the steps
    for clip in (0.05, 10.0):
        w, W, gn = pb.sgd_steps(w0, rows, offsets, noise, noise_std=0.3, step=eta, denom=30.0, radius=radius,
                                clip=clip)
        w2, W2, gn2 = _python_steps(pb, w0, rows, offsets, noise, 0.3, eta, 30.0, radius, clip)
        assert np.array_equal(w, W[-1])
        # step by step from the same point: the same step up to rounding
        starts = np.vstack([w0, W2[:-1]])
        for k in range(40):
            _, Wk, gk = pb.sgd_steps(starts[k], rows, offsets[k:k + 2], noise[k:k + 1], noise_std=0.3, step=eta,
                                     denom=30.0, radius=radius, clip=clip)
            np.testing.assert_allclose(Wk[0], W2[k], rtol=1e-13, atol=1e-14)
            np.testing.assert_allclose(gk[0], gn2[k], rtol=1e-13, atol=1e-14)
        # and the 40-step trajectories
        np.testing.assert_allclose(W, W2, rtol=1e-10, atol=1e-11)
        if radius is not None:
            assert np.all(np.linalg.norm(W, axis=1) <= radius * (1 + 1e-12))


def test_empty_batches_add_noise_only(registry):
    rng = np.random.default_rng(1)
    X, y = _data(rng, n=50)
    pb = Problem(registry.get("loss", "logistic"), X, y)
    offsets = np.zeros(4, dtype=np.int64)             # three empty batches
    noise = rng.standard_normal((3, pb.d))
    w, W, gn = pb.sgd_steps(np.zeros(pb.d), np.zeros(0, dtype=np.int64), offsets, noise, noise_std=2.0, step=0.5,
                            denom=10.0, radius=None, clip=1.0)
    np.testing.assert_allclose(W[-1], -0.5 * np.cumsum(noise * 2.0 / 10.0, axis=0)[-1], rtol=1e-13)
    np.testing.assert_allclose(gn, np.linalg.norm(noise * 0.2, axis=1), rtol=1e-13)


def test_not_offered_where_it_would_bypass_something(registry):
    rng = np.random.default_rng(2)
    X, y = _data(rng)

    class Instrumented(Problem):
        def clipped_grad_sum(self, w, idx, clip):
            return super().clipped_grad_sum(w, idx, clip)

    assert not Instrumented(registry.get("loss", "logistic"), X, y).sgd_steps_available(10)
    pb = Problem(registry.get("loss", "logistic"), X, y)
    assert pb.sgd_steps_available(10)
    assert not pb.sgd_steps_available(10 ** 7)  # above the parallel work threshold: one parallel call per step


def test_trajectory_and_output_bulk_forms_match_per_step(rng):
    W = rng.standard_normal((23, 4))
    gn = rng.random(23)
    a, b = Trajectory(100), Trajectory(100)
    for t in range(23):
        a.log(t + 1, W[t], noisy_grad_norm=gn[t], batch=t)
    b.log_many(1, W, noisy_grad_norm=gn, batch=np.arange(23))
    assert a.steps == b.steps and all(np.array_equal(x, y) for x, y in zip(a.iterates, b.iterates))
    assert a.series == b.series
    for mode in ("average", "random", "last"):
        o1 = OutputChoice(mode, 40, np.random.default_rng(9), np.zeros(4))
        o2 = OutputChoice(mode, 40, np.random.default_rng(9), np.zeros(4))
        for t in range(23):
            o1.see(t + 1, W[t])
        o2.see_many(1, W[:10])
        o2.see_many(11, W[10:])
        np.testing.assert_allclose(o1.result(W[-1], 23), o2.result(W[-1], 23), rtol=1e-12)
        assert o1.chosen_step(23) == o2.chosen_step(23)


def test_dp_sgd_runs_its_steps_compiled_and_reproducibly(registry, monkeypatch):
    from dpreg.params import bind

    rng = np.random.default_rng(0)
    X, y = _data(rng, n=400, d=5)
    cls = registry.get("algorithm", "dp-sgd")
    calls = []
    real = Problem.sgd_steps

    def spy(self, *a, **kw):
        calls.append(len(a[2]) - 1)
        return real(self, *a, **kw)

    monkeypatch.setattr(Problem, "sgd_steps", spy)

    def run(seed):
        acc = registry.get("accountant", "rdp")(1.0, 1e-5, cls.relation)
        return cls(Problem(registry.get("loss", "logistic"), X, y),
                   bind(cls.params, {"steps": 300, "batch": 20}, "dp-sgd"), noise=None, accountant=acc,
                   seed=seed).run()

    a, b, c = run(4), run(4), run(5)
    assert sum(calls) == 900 and max(calls) == 256        # 256 + 44 steps per run, compiled
    assert np.array_equal(a.w, b.w) and not np.array_equal(a.w, c.w)
    assert len(a.trajectory["noisy_grad_norm"]) == 300 and len(a.trajectory["batch"]) == 300
