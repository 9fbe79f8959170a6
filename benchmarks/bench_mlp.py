"""Speed of per-record clipped gradient sums for a one-hidden-layer network:
dpreg's fused kernel against Opacus (CPU), torch.func
vmap(grad) and JAX vmap(grad)+jit, all in float64, same threads, same work.

Work measured: for a batch of records, the sum of per-record gradients of the
logistic loss of ``o = v . tanh(W x + b) + c`` (W 32 x 784), each clipped to
norm C = 1 (every term here is above C: the clip is active).  Data: synthetic
MNIST-shaped rows (784 features in [0, 1], scaled to norm 1), +-1 labels.
Batches: 256 random rows and the full data set (n rows).

    nice python benchmarks/bench_mlp.py [--n 10000] [--repeats 7] [--threads 1]

Peers missing from the environment are skipped (they are optional benchmark
dependencies: ``pip install torch==2.13.0 opacus jax``).  Prints a Markdown
table of the best-of-repeats time per implementation and the ratios to dpreg;
numerical agreement of every peer's result with dpreg's is checked first.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import time
import warnings

import numpy as np

P, H, CLIP = 784, 32, 1.0


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, P)) * (rng.random((n, P)) < 0.2)  # sparse-ish pixels in [0, 1]
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    w = rng.standard_normal(H * P + 2 * H + 1) * 0.5
    return X, y, w


def unpack(w):
    return (w[:H * P].reshape(H, P), w[H * P:H * P + H], w[H * P + H:H * P + 2 * H], w[-1:])


def timeit(f, repeats):
    """(best CPU time, best wall time) over ``repeats`` calls after a warm-up.
    CPU time (time.process_time: all threads of the process) is the work done,
    robust to other processes' load on a shared machine; wall time is what a
    user waits on an idle one."""
    f()  # warm-up (compile, caches)
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        f()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return min(cpu), min(wall)


# ------------------------------------------------------------------------- dpreg
def dpreg_impl(X, y, w):
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry

    pb = make_problem(get_registry().get("loss", "mlp")(hidden=H), X, y)

    def run(idx):
        return pb.clipped_grad_sum(w, idx, CLIP)[0]

    return run


# ------------------------------------------------------------------------- torch
def _torch_model(w):
    import torch

    W, b, v, c = unpack(w)
    m = torch.nn.Sequential(torch.nn.Linear(P, H), torch.nn.Tanh(), torch.nn.Linear(H, 1)).double()
    with torch.no_grad():
        m[0].weight.copy_(torch.from_numpy(W))
        m[0].bias.copy_(torch.from_numpy(b))
        m[2].weight.copy_(torch.from_numpy(v[None, :]))
        m[2].bias.copy_(torch.from_numpy(c))
    return m


def _flat_clip_sum(per_sample):
    """per_sample: list of (B, ...) tensors in dpreg's parameter order."""
    import torch

    B = per_sample[0].shape[0]
    flat = [g.reshape(B, -1) for g in per_sample]
    norms = torch.sqrt(sum((f * f).sum(dim=1) for f in flat))
    scale = torch.clamp(CLIP / (norms + 1e-300), max=1.0)
    return torch.cat([(f * scale[:, None]).sum(dim=0) for f in flat]).numpy()


def opacus_impl(X, y, w):
    import torch
    from opacus import GradSampleModule

    gsm = GradSampleModule(_torch_model(w), loss_reduction="sum")
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    lin1, lin2 = gsm._module[0], gsm._module[2]

    def run(idx):
        xb, yb = (Xt, yt) if idx is None else (Xt[idx], yt[idx])
        gsm.zero_grad(set_to_none=True)
        for prm in gsm.parameters():
            prm.grad_sample = None
        o = gsm(xb)[:, 0]
        loss = torch.nn.functional.softplus(-yb * o).sum()
        loss.backward()
        with torch.no_grad():
            return _flat_clip_sum([lin1.weight.grad_sample, lin1.bias.grad_sample,
                                   lin2.weight.grad_sample, lin2.bias.grad_sample])

    return run


def torch_func_impl(X, y, w):
    import torch
    from torch.func import functional_call, grad, vmap

    model = _torch_model(w)
    params = {k: v.detach() for k, v in model.named_parameters()}
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)

    def loss1(prm, x, t):
        o = functional_call(model, prm, (x[None, :],))[0, 0]
        return torch.nn.functional.softplus(-t * o)

    g = vmap(grad(loss1), in_dims=(None, 0, 0))

    def run(idx):
        xb, yb = (Xt, yt) if idx is None else (Xt[idx], yt[idx])
        with torch.no_grad():
            gs = g(params, xb, yb)
            return _flat_clip_sum([gs["0.weight"], gs["0.bias"], gs["2.weight"], gs["2.bias"]])

    return run


def jax_impl(X, y, w):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    W, b, v, c = (jnp.asarray(a) for a in unpack(w))
    Xj, yj = jnp.asarray(X), jnp.asarray(y)

    def loss1(prm, x, t):
        W, b, v, c = prm
        o = v @ jnp.tanh(W @ x + b) + c[0]
        return jax.nn.softplus(-t * o)

    @jax.jit
    def clipped_sum(prm, xb, yb):
        gs = jax.vmap(jax.grad(loss1), in_axes=(None, 0, 0))(prm, xb, yb)
        B = xb.shape[0]
        flat = jnp.concatenate([g.reshape(B, -1) for g in gs], axis=1)
        nrm = jnp.sqrt(jnp.sum(flat * flat, axis=1))
        return jnp.sum(flat * jnp.minimum(1.0, CLIP / nrm)[:, None], axis=0)

    prm = (W, b, v, c)

    def run(idx):
        xb, yb = (Xj, yj) if idx is None else (Xj[idx], yj[idx])
        return np.asarray(clipped_sum(prm, xb, yb).block_until_ready())

    return run


PEERS = (("opacus", ("torch", "opacus"), opacus_impl),
         ("torch.func", ("torch",), torch_func_impl),
         ("jax", ("jax",), jax_impl))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
                          if a.threads == 1 else "")
    warnings.filterwarnings("ignore", message="Full backward hook")
    import numba

    numba.set_num_threads(min(a.threads, numba.config.NUMBA_NUM_THREADS))
    X, y, w = make_data(a.n)
    idx = np.random.default_rng(1).integers(0, a.n, 256)
    impls = [("dpreg", dpreg_impl(X, y, w))]
    for name, mods, make in PEERS:
        if all(importlib.util.find_spec(m) is not None for m in mods):
            if "torch" in mods:
                import torch

                torch.set_num_threads(a.threads)
            impls.append((name, make(X, y, w)))
        else:
            print(f"skipped {name}: {', '.join(mods)} not installed")
    ref = impls[0][1](idx)
    for name, f in impls[1:]:
        err = np.max(np.abs(f(idx) - ref)) / np.max(np.abs(ref))
        assert err < 1e-9, f"{name} disagrees with dpreg: relative error {err:.2e}"
    rows = []
    for label, batch in (("batch 256", idx), (f"full batch ({a.n})", None)):
        times = {name: timeit(lambda f=f: f(batch), a.repeats) for name, f in impls}
        base = times["dpreg"][0]
        for name, (tcpu, twall) in times.items():
            rows.append(f"| {label} | {name} | {tcpu * 1e3:.1f} | {twall * 1e3:.1f} | "
                        f"{'1' if name == 'dpreg' else f'{tcpu / base:.1f}'} |")
    print(f"\nper-record clipped gradient sum, MLP 784-{H}-1 tanh, float64, {a.threads} thread(s), "
          f"best of {a.repeats}\n")
    print("| batch | implementation | CPU ms | wall ms | CPU time / dpreg's |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
