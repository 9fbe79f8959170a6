"""The whole DP-SGD training job, end to end: dpreg against Opacus, torch.func and JAX.

One job is what a user runs to get a trained private model from a data file:
load the file (an MNIST-shaped ``.npz``: uint8 "pixels", 10 classes), scale
every row into the unit ball, calibrate the noise to (epsilon, delta), train
(Poisson sampling at rate batch/n, per-record gradients clipped to C, Gaussian
noise z C, SGD step lr on the sum over the expected batch size) for the same
epochs, and hold the model.  Diagnostics are off.  Every contender runs in its
own process with the same thread limit (numba, BLAS, OpenMP, torch, XLA) and
is timed from just before it reads the file to the trained model; the imports
are timed apart (``import_s``).  The contenders:

* ``dpreg``: ``dpreg.run(algo="dp-sgd", loss=..., data=FILE, labels=0..9,
  epochs=, batch_size=, max_grad_norm=, lr=, scaling="none",
  diagnostics=False)`` (float64; kernels loaded from numba's cache);
* ``opacus``: ``PrivacyEngine().make_private_with_epsilon`` (its default
  accountant, PRV) on an ``nn.Sequential`` over a ``DataLoader`` of a
  ``TensorDataset`` (Opacus' Poisson sampling), ``torch.optim.SGD``;
* ``torchfunc``: ``vmap(grad(...))`` over ``torch.func.functional_call``,
  Poisson batches by ``torch.rand(n) < q``, clipping and noise by hand, z
  from Opacus' RDP ``get_noise_multiplier``;
* ``jax``: ``jit(vmap(grad(...)))`` with the noise drawn inside the jitted
  step, Poisson batches padded to a multiple of 64 rows (masked) so a few
  shapes compile, z from dp-accounting's RDP calibration (what JAX Privacy
  uses); the compiles are part of the job.

The peers run in float32, as their users run them, and in float64 beside it.
Models: softmax regression (784 x 10 and 10 biases), and tanh networks with one
(64) and two (64, 32) hidden layers and a softmax head.  Rounds are
interleaved (every contender once per round, the order rotated), and the table
gives the medians and their ratios (peer time / dpreg time: above 1, dpreg is
faster).

    python benchmarks/bench_peers_e2e.py --rounds 3 --threads 1,2     # the table
    python benchmarks/bench_peers_e2e.py --job opacus-f32 --model softmax --data F.npz   # one job

The peers are optional (``pip install -e ".[peers]"``): one that is not
installed is skipped.  ``test_peer_jobs_tiny`` runs every installed contender
on a tiny set (CI's smoke run).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

N, P, K = 60_000, 784, 10
MODELS = {"softmax": (), "mlp64": (64,), "mlp64-32": (64, 32)}
#: step size per model (the same for every contender); chosen so each learns in one epoch
LR = {"softmax": 2.0, "mlp64": 1.0, "mlp64-32": 1.0}
CONTENDERS = ("dpreg", "opacus-f32", "opacus-f64", "torchfunc-f32", "torchfunc-f64", "jax-f32", "jax-f64")
PEER_MODULE = {"opacus": "opacus", "torchfunc": "torch", "jax": "jax"}
BATCH, CLIP, EPSILON, DELTA = 256, 1.0, 2.0, 1e-5


def write_data(path, n=N, p=P, k=K, seed=0):
    """An MNIST-shaped data set as ``.npz``: ``X`` n x p uint8 "pixels" (80 % zeros,
    like MNIST's), ``y`` the class 0..k-1; 10 balanced classes whose mean images
    differ (:func:`bench_softmax.mnist_shaped`), so the models learn."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_softmax import mnist_shaped

    X, y = mnist_shaped(n, p, k, seed)
    X = np.round(X * (255.0 / X.max())).astype(np.uint8)
    np.savez(path, X=X, y=y.astype(np.int64))


# ----------------------------------------------------------------------- the jobs
def steps_of(n, epochs, batch):
    """T = ceil(epochs n / batch): dp-sgd's number of steps for ``epochs``."""
    return max(1, int(math.ceil(epochs * n / batch)))


def job_dpreg(a):
    t_imp = time.perf_counter()
    import dp_accounting.rdp  # noqa: F401 - dpreg's accountant, imported lazily: an import, like the peers'
    import dpreg
    t0, c0 = time.perf_counter(), time.process_time()
    loss = "softmax" if not MODELS[a.model] else "mlp:hidden=" + ",".join(map(str, MODELS[a.model]))
    rec = dpreg.run(algo="dp-sgd", loss=loss, data=a.data, labels=tuple(range(K)), epsilon=a.epsilon,
                    delta=a.delta, epochs=a.epochs, batch_size=a.batch, max_grad_norm=a.clip, lr=a.lr,
                    scaling="none", diagnostics=False, warn=False)
    t1, c1 = time.perf_counter(), time.process_time()
    model = dpreg.load_model(rec)
    z = np.load(a.data)
    acc = float(np.mean(model.predict(z["X"]) == z["y"]))
    return {"job_s": t1 - t0, "job_cpu_s": c1 - c0, "import_s": t0 - t_imp, "train_accuracy": acc,
            "steps": steps_of(len(z["y"]), a.epochs, a.batch),  # dp-sgd's T for --epochs
            "noise_multiplier": rec["release"]["privacy"]["mechanisms"][0]["noise_multiplier"]}


def _torch_model(torch, hidden, dtype, p):
    layers, d_in = [], p
    for h in hidden:
        layers += [torch.nn.Linear(d_in, h), torch.nn.Tanh()]
        d_in = h
    layers.append(torch.nn.Linear(d_in, K))
    return torch.nn.Sequential(*layers).to(dtype)


def _torch_load(torch, path, dtype):
    z = np.load(path)
    X = torch.from_numpy(z["X"]).to(dtype)
    X = X / torch.clamp(torch.linalg.vector_norm(X, dim=1, keepdim=True), min=1.0)
    return X, torch.from_numpy(z["y"]).long()


def _torch_accuracy(torch, model, X, y):
    with torch.no_grad():
        return float((model(X).argmax(1) == y).double().mean())


def job_opacus(a, dtype_name):
    import warnings

    t_imp = time.perf_counter()
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    warnings.filterwarnings("ignore")
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, dtype_name)
    t0, c0 = time.perf_counter(), time.process_time()
    X, y = _torch_load(torch, a.data, dtype)
    model = _torch_model(torch, MODELS[a.model], dtype, X.shape[1])
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loader = DataLoader(TensorDataset(X, y), batch_size=a.batch)
    tc = time.perf_counter()
    engine = PrivacyEngine()
    model, opt, loader = engine.make_private_with_epsilon(
        module=model, optimizer=opt, data_loader=loader, target_epsilon=a.epsilon, target_delta=a.delta,
        epochs=int(a.epochs), max_grad_norm=a.clip)
    t_cal = time.perf_counter() - tc
    lossf = torch.nn.CrossEntropyLoss()
    steps = 0
    for _ in range(int(a.epochs)):
        for xb, yb in loader:
            opt.zero_grad()
            if len(xb):
                lossf(model(xb), yb).backward()
            opt.step()
            steps += 1
    t1, c1 = time.perf_counter(), time.process_time()
    return {"job_s": t1 - t0, "job_cpu_s": c1 - c0, "import_s": t0 - t_imp, "calibration_s": t_cal, "steps": steps,
            "noise_multiplier": float(opt.noise_multiplier), "train_accuracy": _torch_accuracy(torch, model, X, y)}


def job_torchfunc(a, dtype_name):
    import warnings

    t_imp = time.perf_counter()
    import torch
    from opacus.accountants.utils import get_noise_multiplier
    from torch.func import functional_call, grad, vmap

    warnings.filterwarnings("ignore")
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, dtype_name)
    t0, c0 = time.perf_counter(), time.process_time()
    X, y = _torch_load(torch, a.data, dtype)
    n = X.shape[0]
    model = _torch_model(torch, MODELS[a.model], dtype, X.shape[1])
    q = a.batch / n
    T = steps_of(n, a.epochs, a.batch)
    tc = time.perf_counter()
    z = get_noise_multiplier(target_epsilon=a.epsilon, target_delta=a.delta, sample_rate=q, steps=T,
                             accountant="rdp")
    t_cal = time.perf_counter() - tc
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_one(prm, x, t):
        return torch.nn.functional.cross_entropy(functional_call(model, prm, (x[None],)), t[None])

    per_record = vmap(grad(loss_one), in_dims=(None, 0, 0))
    for _ in range(T):
        idx = torch.nonzero(torch.rand(n) < q).squeeze(1)
        if len(idx):
            G = per_record(params, X[idx], y[idx])
            norms = torch.sqrt(sum(g.reshape(len(idx), -1).pow(2).sum(1) for g in G.values()))
            f = torch.clamp(a.clip / (norms + 1e-12), max=1.0)
        for k, v in params.items():
            s = torch.einsum("b,b...->...", f, G[k]) if len(idx) else torch.zeros_like(v)
            v.sub_(a.lr * (s + torch.randn_like(v) * (z * a.clip)) / a.batch)
    t1, c1 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        acc = float((functional_call(model, params, (X,)).argmax(1) == y).double().mean())
    return {"job_s": t1 - t0, "job_cpu_s": c1 - c0, "import_s": t0 - t_imp, "calibration_s": t_cal, "steps": T,
            "noise_multiplier": float(z), "train_accuracy": acc}


def job_jax(a, dtype_name):
    t_imp = time.perf_counter()
    import jax

    if dtype_name == "float64":
        jax.config.update("jax_enable_x64", True)
    import dp_accounting
    import jax.numpy as jnp

    dtype = getattr(jnp, dtype_name)
    t0, c0 = time.perf_counter(), time.process_time()
    z_np = np.load(a.data)
    X = jnp.asarray(z_np["X"], dtype=dtype)
    X = X / jnp.maximum(jnp.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = jnp.asarray(z_np["y"], dtype=jnp.int32)
    n, p = X.shape
    q = a.batch / n
    T = steps_of(n, a.epochs, a.batch)
    tc = time.perf_counter()

    def event(sigma):
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), T)

    z = dp_accounting.calibrate_dp_mechanism(lambda: dp_accounting.rdp.RdpAccountant(), event, a.epsilon, a.delta)
    t_cal = time.perf_counter() - tc
    key = jax.random.PRNGKey(int.from_bytes(os.urandom(4), "little"))
    sizes = (p, *MODELS[a.model], K)
    params = []
    for i in range(len(sizes) - 1):  # torch.nn.Linear's default initialisation
        key, k1, k2 = jax.random.split(key, 3)
        bound = 1.0 / math.sqrt(sizes[i])
        params.append((jax.random.uniform(k1, (sizes[i], sizes[i + 1]), dtype, -bound, bound),
                       jax.random.uniform(k2, (sizes[i + 1],), dtype, -bound, bound)))

    def forward(prm, x):
        for W, b in prm[:-1]:
            x = jnp.tanh(x @ W + b)
        W, b = prm[-1]
        return x @ W + b

    def loss_one(prm, x, t):
        o = forward(prm, x)
        return jax.nn.logsumexp(o) - o[t]

    @jax.jit
    def step(prm, idx, mask, k):
        G = jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0))(prm, X[idx], y[idx])
        leaves, tree = jax.tree_util.tree_flatten(G)
        norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))
        f = jnp.minimum(1.0, a.clip / jnp.maximum(norms, 1e-12)) * mask
        keys = jax.random.split(k, len(leaves))
        new = [jnp.tensordot(f, g, axes=1) + jax.random.normal(kk, g.shape[1:], dtype) * (z * a.clip)
               for g, kk in zip(leaves, keys)]
        upd = jax.tree_util.tree_unflatten(tree, new)
        return jax.tree_util.tree_map(lambda w, g: w - (a.lr / a.batch) * g, prm, upd)

    rng = np.random.default_rng()
    for _ in range(T):
        idx = np.flatnonzero(rng.random(n) < q)
        m = max(64, (len(idx) + 63) // 64 * 64)
        pad = np.zeros(m, dtype=np.int32)
        pad[:len(idx)] = idx
        mask = np.zeros(m, dtype=dtype_name)
        mask[:len(idx)] = 1.0
        key, sk = jax.random.split(key)
        params = step(params, pad, mask, sk)
    jax.block_until_ready(params)
    t1, c1 = time.perf_counter(), time.process_time()
    acc = float(jnp.mean(jnp.argmax(forward(params, X), axis=1) == y))
    return {"job_s": t1 - t0, "job_cpu_s": c1 - c0, "import_s": t0 - t_imp, "calibration_s": t_cal, "steps": T,
            "noise_multiplier": float(z), "train_accuracy": acc}


def run_job(a) -> dict:
    """One contender's job in this process (``a.job``: a name of CONTENDERS)."""
    c0 = time.process_time()
    if a.job == "dpreg":
        out = job_dpreg(a)
    else:
        peer, bits = a.job.rsplit("-f", 1)
        fn = {"opacus": job_opacus, "torchfunc": job_torchfunc, "jax": job_jax}[peer]
        out = fn(a, "float32" if bits == "32" else "float64")
    out["cpu_s"] = time.process_time() - c0  # this process's CPU (every thread), imports included
    return out


# ------------------------------------------------------------ the kernel alone
def kernel_race(model, batch=BATCH, reps=40, rows=4096, seed=0) -> dict:
    """CPU milliseconds of one clipped per-record gradient sum over ``batch`` rows
    (no sampling, noise or step), in this process at its thread limit: dpreg's
    kernel (float64) against Opacus' GradSampleModule (forward, backward, per-sample
    norms, clip, sum) and torch.func's vmap(grad) in float32 and float64.  The rows
    are MNIST-shaped (write_data's law), the parameters at the origin of dpreg's
    problem (torch's default initialisation for the peers)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_softmax import mnist_shaped

    from dpreg.pipeline import get_loss
    from dpreg.problem import make_problem
    from dpreg.registry import get_registry
    from dpreg.tasks import bind_classes

    X, y = mnist_shaped(rows, P, K, seed)
    X = X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    hidden = MODELS[model]
    reg = get_registry()
    loss = get_loss(reg, "softmax" if not hidden else "mlp:hidden=" + ",".join(map(str, hidden)))
    if hasattr(loss, "for_task"):
        loss = loss.for_task("multiclass", K)
    loss = bind_classes(loss, K)
    pb = make_problem(loss, np.ascontiguousarray(X), y.astype(np.float64))
    w = pb.initial_point(np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    batches = [np.sort(rng.choice(rows, batch, replace=False)) for _ in range(reps)]
    out = {}

    def clock(fn):
        fn(batches[0])
        c0 = time.process_time()
        for idx in batches:
            fn(idx)
        return (time.process_time() - c0) / reps * 1e3

    out["dpreg"] = clock(lambda idx: pb.clipped_grad_sum(w, idx, CLIP))
    if installed("opacus-f32"):
        import warnings

        import torch
        from opacus import GradSampleModule
        from torch.func import functional_call, grad, vmap

        warnings.filterwarnings("ignore")
        for dt in ("float32", "float64"):
            dtype = getattr(torch, dt)
            Xt, yt = torch.tensor(X, dtype=dtype), torch.tensor(y, dtype=torch.long)
            net = _torch_model(torch, hidden, dtype, P)
            gsm = GradSampleModule(net)
            lossf = torch.nn.CrossEntropyLoss(reduction="sum")

            def opacus_sum(idx, gsm=gsm, Xt=Xt, yt=yt, lossf=lossf):
                gsm.zero_grad(set_to_none=True)
                ii = torch.from_numpy(idx)
                lossf(gsm(Xt[ii]), yt[ii]).backward()
                gs = [p.grad_sample.reshape(len(idx), -1) for p in gsm.parameters()]
                f = torch.clamp(CLIP / (torch.sqrt(sum((g * g).sum(1) for g in gs)) + 1e-6), max=1.0)
                return [f @ g for g in gs]

            out[f"opacus-{dt[-2:]}"] = clock(opacus_sum)
            net = _torch_model(torch, hidden, dtype, P)  # a module GradSampleModule has not hooked
            params = {k: v.detach() for k, v in net.named_parameters()}

            def loss_one(prm, x, t, net=net):
                return torch.nn.functional.cross_entropy(functional_call(net, prm, (x[None],)), t[None])

            per_record = vmap(grad(loss_one), in_dims=(None, 0, 0))

            def func_sum(idx, Xt=Xt, yt=yt, params=params, per_record=per_record):
                ii = torch.from_numpy(idx)
                G = per_record(params, Xt[ii], yt[ii])
                gs = [g.reshape(len(idx), -1) for g in G.values()]
                f = torch.clamp(CLIP / (torch.sqrt(sum((g * g).sum(1) for g in gs)) + 1e-6), max=1.0)
                return [f @ g for g in gs]

            out[f"torchfunc-{dt[-2:]}"] = clock(func_sum)
    return out


# ------------------------------------------------------------------- the driver
def thread_env(threads: int) -> dict:
    """The environment that holds every library of a job to ``threads`` threads."""
    env = dict(os.environ)
    for k in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    env["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'false' if threads == 1 else 'true'} "
                        f"intra_op_parallelism_threads={threads}")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def installed(contender: str) -> bool:
    if contender == "dpreg":
        return True
    import importlib.util

    return all(importlib.util.find_spec(m) is not None
               for m in (["torch", "opacus"] if contender.startswith(("opacus", "torchfunc")) else ["jax"]))


def spawn(contender, model, data, threads, args, timeout=3600) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--job", contender, "--model", model, "--data", str(data),
           "--threads", str(threads), "--epochs", str(args.epochs), "--batch", str(args.batch), "--clip",
           str(args.clip), "--epsilon", str(args.epsilon), "--delta", str(args.delta),
           "--lr", str(args.lr if args.lr is not None else LR[model])]
    w0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=thread_env(threads), timeout=timeout)
    wall = time.perf_counter() - w0
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["?"])[-1]}
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    return out


def race(args) -> list[dict]:
    import tempfile

    work = Path(args.workdir or tempfile.mkdtemp(prefix="dpreg-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"mnist-shaped-{args.rows}.npz"
    if not data.exists():
        write_data(data, n=args.rows)
    contenders = [c for c in args.contenders if installed(c)]
    rows = []
    for threads in args.threads:
        for model in args.models:
            spawn("dpreg", model, data, threads, args)  # numba's cache warm for this model
            res = {c: [] for c in contenders}
            for r in range(args.rounds):
                order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
                for c in order:
                    res[c].append(spawn(c, model, data, threads, args))
                    print(f"# {threads} thr {model} round {r} {c}: {json.dumps(res[c][-1])}", file=sys.stderr,
                          flush=True)
            rows.append({"threads": threads, "model": model, "results": res,
                         "loadavg": os.getloadavg()[0]})
    return rows


def median_of(runs, key):
    vals = [r[key] for r in runs if key in r and r[key] is not None]
    return float(np.median(vals)) if vals else None


def table(rows, args, key="job_cpu_s") -> str:
    """The markdown table of the medians of ``key`` (``job_cpu_s``: CPU seconds of
    the job, every thread; ``job_s``: wall seconds) and the ratios peer / dpreg."""
    peers = [c for c in args.contenders if c != "dpreg"]
    unit = "CPU s" if key == "job_cpu_s" else "wall s"
    head = (f"| model | threads | dpreg {unit} | " + " | ".join(f"{c}" for c in peers) + " | "
            + " | ".join(f"{c} / dpreg" for c in peers) + " |")
    lines = [head, "|" + "---|" * (3 + 2 * len(peers))]
    acc = ["", "train accuracy (median), steps, noise multiplier:", ""]
    for row in rows:
        res = row["results"]
        base = median_of(res["dpreg"], key)
        cells, ratios = [], []
        for c in peers:
            m = median_of(res.get(c, []), key)
            cells.append("not installed" if c not in res else ("failed" if m is None else f"{m:.2f}"))
            ratios.append("-" if m is None or not base else f"{m / base:.1f}x")
        lines.append(f"| {row['model']} | {row['threads']} | {base if base is None else f'{base:.2f}'} | "
                     + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
        acc.append(f"- {row['model']}, {row['threads']} thread(s), load average {row['loadavg']:.1f}: " + ", ".join(
            f"{c} {median_of(v, 'train_accuracy') or float('nan'):.3f} ({int(median_of(v, 'steps') or 0)} steps, "
            f"z {median_of(v, 'noise_multiplier') or float('nan'):.3f})" for c, v in res.items()))
    return "\n".join(lines + acc)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", choices=CONTENDERS, help="run one job in this process and print its JSON")
    ap.add_argument("--model", default="softmax", choices=list(MODELS))
    ap.add_argument("--models", default=",".join(MODELS), type=lambda s: s.split(","))
    ap.add_argument("--contenders", default=",".join(CONTENDERS), type=lambda s: s.split(","))
    ap.add_argument("--data")
    ap.add_argument("--rows", type=int, default=N, help="rows of the MNIST-shaped set the driver writes")
    ap.add_argument("--workdir", help="where the driver writes the data set (default: a temporary directory)")
    ap.add_argument("--threads", default="1", help="one number for --job; a list (1,2) for the driver")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--clip", type=float, default=CLIP)
    ap.add_argument("--epsilon", type=float, default=EPSILON)
    ap.add_argument("--delta", type=float, default=DELTA)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--kernels", action="store_true",
                    help="the kernel-only table: CPU ms of one clipped sum over a batch, every model")
    a = ap.parse_args(argv)
    if a.job:
        a.threads = int(a.threads)
        a.lr = a.lr if a.lr is not None else LR[a.model]
        print(json.dumps(run_job(a)))
        return
    a.threads = [int(t) for t in str(a.threads).split(",")]
    if a.kernels:
        print(f"CPU ms of one clipped per-record gradient sum over {a.batch} MNIST-shaped rows "
              f"({os.environ.get('NUMBA_NUM_THREADS', '?')} numba thread(s)); ratio: peer / dpreg\n")
        res = {m: kernel_race(m, a.batch) for m in a.models}
        peers = [c for c in next(iter(res.values())) if c != "dpreg"]
        print("| model | dpreg ms | " + " | ".join(f"{c} ms" for c in peers) + " | "
              + " | ".join(f"{c} / dpreg" for c in peers) + " |")
        print("|" + "---|" * (2 + 2 * len(peers)))
        for m, r in res.items():
            print(f"| {m} | {r['dpreg']:.2f} | " + " | ".join(f"{r[c]:.2f}" for c in peers) + " | "
                  + " | ".join(f"{r[c] / r['dpreg']:.1f}x" for c in peers) + " |")
        return
    rows = race(a)
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1, default=str))
    print(f"{a.rows:,} x {P} rows, {K} classes, {a.epochs:g} epoch(s), batch {a.batch}, clip {a.clip}, "
          f"epsilon {a.epsilon}, delta {a.delta}; medians of {a.rounds} interleaved rounds")
    print("\nCPU seconds of the job (every thread; the load of other processes does not inflate it):\n")
    print(table(rows, a, "job_cpu_s"))
    print("\nWall seconds of the job:\n")
    print(table(rows, a, "job_s"))


# ------------------------------------------------------------------- CI smoke run
def test_peer_jobs_tiny(tmp_path):
    """Every installed contender's job on 600 x 784 rows, one epoch of batch 64:
    each returns a trained model that beats the majority rate (a peer that is
    not installed is skipped)."""
    import pytest

    data = tmp_path / "tiny.npz"
    write_data(data, n=600)
    args = argparse.Namespace(epochs=1.0, batch=64, clip=1.0, epsilon=8.0, delta=1e-5, lr=None)
    ran = []
    for c in CONTENDERS:
        if not installed(c) or c.endswith("f64") and c != "dpreg":
            continue
        out = spawn(c, "mlp64", data, 1, args, timeout=600)
        assert "error" not in out, (c, out)
        assert out["train_accuracy"] > 0.2, (c, out)
        ran.append(c)
    if ran == ["dpreg"]:
        pytest.skip("no peer installed (pip install -e '.[peers]')")


if __name__ == "__main__":
    main()
