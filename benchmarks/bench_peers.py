"""The same DP-SGD in dpreg, Opacus (CPU) and JAX: per-step time on IJCNN1 and a9a.

Same model (logistic regression without intercept: log(1 + exp(-y <x, w>))),
same steps T, Poisson sampling rate q = 256/n, clip C = 1, noise multiplier z
(dpreg's calibration for epsilon = 1), step size 4.  Each peer draws its own
samples and noise; the work per step is the same.

* dpreg: ``dp-sgd`` with those parameters (``Algorithm.run``, repeated so the
  calibration is memoised: the step loop), on X as the pipeline holds it (CSR for
  these svmlight files) and on the same rows dense;
* Opacus: ``PrivacyEngine.make_private`` on ``nn.Linear(d, 1, bias=False)``,
  Poisson sampling, SGD;
* JAX: ``jit(vmap(grad))`` per-example gradients, clipped and summed, with
  the Poisson batch padded to a multiple of 64 rows (masked) so one shape
  compiles for many steps.

The peers are optional benchmark dependencies (``pip install -e ".[peers]"``, or
one of them alone): a missing one is skipped, never required.
``python benchmarks/bench_peers.py`` prints the table (markdown).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import SHARED_DATA  # noqa: E402

DATA = {"ijcnn1": SHARED_DATA / "ijcnn1.trn.bz2", "a9a": SHARED_DATA / "adult.trn.bz2"}
BATCH, CLIP, STEP = 256, 1.0, 4.0


def load(name):
    """(X as dpreg's pipeline holds it - CSR for svmlight files -, the same rows
    dense for the peers, y in {-1, +1}); rows in the unit ball."""
    import scipy.sparse as sp

    from dpreg.pipeline import load_prepared

    X, y, _, _ = load_prepared(str(DATA[name]), seed=0, labels="binary")
    dense = X.toarray() if sp.issparse(X) else X
    return X, np.ascontiguousarray(dense, dtype=np.float64), y


def dpreg_steps(X, y, steps=None):
    """(seconds per step, T, z) of dpreg's dp-sgd step loop."""
    from dpreg.params import bind
    from dpreg.problem import Problem
    from dpreg.registry import get_registry

    reg = get_registry()
    cls = reg.get("algorithm", "dp-sgd")
    pb = Problem(reg.get("loss", "logistic"), X, y)
    given = {"batch": BATCH, "clip": CLIP, "step": STEP, **({"steps": steps} if steps else {})}
    params = bind(cls.params, given, "dp-sgd")
    pb.gradient(np.zeros(pb.d), pb.all_rows[:BATCH])

    def once():
        acc = reg.get("accountant", "rdp")(1.0, 1.0 / pb.n, cls.relation)
        t0 = time.perf_counter()
        out = cls(pb, params, noise=None, accountant=acc, seed=0).run()
        return time.perf_counter() - t0, out

    once()
    t, out = once()
    return t / out.iterations, out.iterations, out.info["noise_multiplier"]


def opacus_steps(X, y, T, z):
    """Seconds per step of Opacus DP-SGD (CPU), T Poisson steps."""
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    n, d = X.shape
    ds = TensorDataset(torch.from_numpy(X), torch.from_numpy((y > 0).astype(np.float64)))
    model = torch.nn.Linear(d, 1, bias=False).double()
    opt = torch.optim.SGD(model.parameters(), lr=STEP)
    loader = DataLoader(ds, batch_size=BATCH)
    model, opt, loader = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader,
                                                      noise_multiplier=z, max_grad_norm=CLIP,
                                                      poisson_sampling=True)
    lossf = torch.nn.BCEWithLogitsLoss()
    done = 0
    t0 = time.perf_counter()
    while done < T:
        for xb, yb in loader:
            opt.zero_grad()
            if len(xb):
                lossf(model(xb).squeeze(1), yb).backward()
            opt.step()
            done += 1
            if done >= T:
                break
    return (time.perf_counter() - t0) / T


def jax_steps(X, y, T, z):
    """Seconds per step of a jit(vmap(grad)) DP-SGD in JAX (float64)."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    n, d = X.shape
    Xj, yj = jnp.asarray(X), jnp.asarray(y)

    def f(w, x, t):
        return jnp.logaddexp(0.0, -t * (x @ w))

    @jax.jit
    def step(w, idx, mask, noise):
        G = jax.vmap(jax.grad(f), in_axes=(None, 0, 0))(w, Xj[idx], yj[idx])
        s = jnp.minimum(1.0, CLIP / jnp.maximum(jnp.linalg.norm(G, axis=1), 1e-300)) * mask
        g = ((G * s[:, None]).sum(0) + noise * (z * CLIP)) / BATCH
        return w - STEP * g

    rng = np.random.default_rng(0)
    q = BATCH / n
    w = jnp.zeros(d)

    def one():
        nonlocal w
        idx = np.flatnonzero(rng.random(n) < q)
        k = (len(idx) + 63) // 64 * 64
        pad = np.zeros(k, dtype=np.int64)
        pad[:len(idx)] = idx
        mask = np.zeros(k)
        mask[:len(idx)] = 1.0
        w = step(w, pad, mask, rng.standard_normal(d))

    for _ in range(20):  # compile the common padded shapes
        one()
    w.block_until_ready()
    t0 = time.perf_counter()
    for _ in range(T):
        one()
    w.block_until_ready()
    return (time.perf_counter() - t0) / T


def race(name):
    Xp, X, y = load(name)
    per, T, z = dpreg_steps(Xp, y)
    per_dense = dpreg_steps(X, y)[0] if Xp is not X else per
    row = {"data": name, "shape": X.shape, "steps": T, "dpreg_ms": per * 1e3, "dpreg_dense_ms": per_dense * 1e3}
    for peer, fn, mod in (("opacus", opacus_steps, "opacus"), ("jax", jax_steps, "jax")):
        try:
            __import__(mod)
        except ImportError:
            row[peer + "_ms"] = None
            continue
        row[peer + "_ms"] = fn(X, y, min(T, 300), z) * 1e3
    return row


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DATA))
@pytest.mark.parametrize("peer", ["opacus", "jax"])
def test_peer_dp_sgd(benchmark, name, peer):
    pytest.importorskip(peer)
    if not DATA[name].exists():
        pytest.skip(f"{DATA[name]} not present")
    Xp, X, y = load(name)
    per, T, z = dpreg_steps(Xp, y)
    res = {}
    fn = opacus_steps if peer == "opacus" else jax_steps
    benchmark.pedantic(lambda: res.update(peer_ms=fn(X, y, min(T, 300), z) * 1e3), rounds=1, iterations=1)
    benchmark.group = "peers"
    benchmark.extra_info.update({"kind": "peer", "data": name, "peer": peer, "dpreg_ms": per * 1e3, **res,
                                 "ratio": res["peer_ms"] / (per * 1e3)})


if __name__ == "__main__":
    print("| data | steps | dpreg (ms/step) | dpreg, dense X (ms/step) | Opacus (ms/step) | JAX (ms/step) "
          "| Opacus / dpreg | JAX / dpreg |")
    print("|---|---|---|---|---|---|---|---|")
    for name in DATA:
        if not DATA[name].exists():
            continue
        r = race(name)

        def fmt(v):
            return "not installed" if v is None else f"{v:.3f}"

        def ratio(v):
            return "-" if v is None else f"{v / r['dpreg_ms']:.1f}x"

        print(f"| {name} {r['shape'][0]:,} x {r['shape'][1]} | {r['steps']} | {r['dpreg_ms']:.3f} | "
              f"{r['dpreg_dense_ms']:.3f} | "
              f"{fmt(r['opacus_ms'])} | {fmt(r['jax_ms'])} | {ratio(r['opacus_ms'])} | {ratio(r['jax_ms'])} |",
              flush=True)
