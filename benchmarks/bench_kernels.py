"""The two hot kernels (O1 clipped gradient sum, O2 clipped gradient-difference
sum) against the streaming limit and the numpy reference, measured in one run.

Groups are ``<size>-<batch>-<threads>t``; within a group every implementation
reads the same rows, so ``report.py`` can divide: kernel / limit, kernel /
numpy, and 1-thread / 2-thread.  Sampled batches draw a fresh random index set
of 4,096 rows *inside* the timed call (the gather is part of the cost), and the
limit gathers the same way.  The loss is ``sigmoid-l2`` (an experiment loss of
the DP trust-region paper); ``test_loss_*`` compare the generic kernel (loss as
a first-class function argument) with a kernel specialised for one loss.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import SIZES, dataset, machine

SIZE_NAMES = list(SIZES)
BATCH = 4096
LOSS = "sigmoid-l2"


# ------------------------------------------------------------------ set-up
class Case:
    """Data, loss, iterate and clip bounds for one size (built once per size)."""

    _cache: dict = {}

    @classmethod
    def get(cls, size, registry, loss_name=LOSS):
        key = (size, loss_name)
        if key not in cls._cache:
            cls._cache.clear()
            cls._cache[key] = cls(size, registry, loss_name)
        return cls._cache[key]

    def __init__(self, size, registry, loss_name):
        import dpreg_kernels.linear_model as K
        import dpreg_kernels.stream as S

        self.K, self.S = K, S
        self.X, self.y, self.desc = dataset(size)
        self.n, self.d = self.X.shape
        self.loss = registry.get("loss", loss_name)
        self.phi, self.dphi, _ = self.loss.scalar_kernels()
        self.blk = self.loss.block_kernels()[0]
        rng = np.random.default_rng(7)
        R = self.loss.radius or 3.0
        self.w = rng.standard_normal(self.d)
        self.w *= 0.5 * R / np.linalg.norm(self.w)
        self.wp = self.w + 0.01 * rng.standard_normal(self.d) / np.sqrt(self.d)
        self.r = np.ascontiguousarray(self.loss.psi_grad(self.w))
        self.rp = np.ascontiguousarray(self.loss.psi_grad(self.wp))
        self.nx = K.row_sqnorms(self.X)
        self.none = np.zeros(0, dtype=np.int64)
        # clip bounds that bind for part of the rows (realistic: clipping active)
        probe = rng.integers(0, self.n, 2000)
        s_full, _ = K.grad_sum(self.X, self.y, self.nx, probe, False, self.w, self.r, self.dphi, self.blk, np.inf)
        g = self._numpy_o1_terms(probe)
        self.clip1 = float(np.median(np.linalg.norm(g, axis=1)))
        M = self.loss.constants(self.d)[1]
        self.clip2 = 0.5 * M * float(np.linalg.norm(self.w - self.wp))
        self.rng = np.random.default_rng(11)
        self.out = np.empty(max(self.n, BATCH))

    def _numpy_o1_terms(self, idx):
        Xb = self.X[idx]
        return _np_dphi(self.loss.name, Xb @ self.w, self.y[idx])[:, None] * Xb + self.r

    # ---- timed bodies (batch "full" or a fresh sample of BATCH rows)
    def idx(self, batch):
        return None if batch == "full" else self.rng.integers(0, self.n, BATCH)

    def limit(self, batch):
        ix = self.idx(batch)
        return self.S.limit(self.X, ix, self.out[: self.n if ix is None else len(ix)])

    def o1(self, batch, dphi=None):
        ix = self.idx(batch)
        full = ix is None
        return self.K.grad_sum(self.X, self.y, self.nx, self.none if full else ix, full, self.w, self.r,
                               dphi or self.dphi, self.blk, self.clip1)

    def o2(self, batch):
        ix = self.idx(batch)
        full = ix is None
        return self.K.diff_sum(self.X, self.y, self.nx, self.none if full else ix, full, self.w, self.wp,
                               self.r, self.rp, self.dphi, self.blk, self.clip2)

    def numpy_o1(self, batch):
        ix = self.idx(batch)
        X, y = (self.X, self.y) if ix is None else (self.X[ix], self.y[ix])
        return numpy_clipped_grad_sum(self.loss.name, X, y, self.w, self.r, self.clip1)

    def numpy_o2(self, batch):
        ix = self.idx(batch)
        X, y = (self.X, self.y) if ix is None else (self.X[ix], self.y[ix])
        return numpy_clipped_diff_sum(self.loss.name, X, y, self.w, self.wp, self.r, self.rp, self.clip2)


# ------------------------------------------------- numpy reference (vectorised)
def _np_dphi(name, m, y):
    """d phi / d m of the built-in losses, vectorised with numpy ufuncs."""
    if name in ("sigmoid", "sigmoid-l2"):
        s = 1.0 / (1.0 + np.exp(y * m))          # sigma(-y m)
        return -y * s * (1.0 - s)
    if name in ("logistic", "logistic-nonconvex-reg"):
        return -y / (1.0 + np.exp(y * m))
    if name == "lowy-synthetic":
        return np.ones_like(m)
    raise KeyError(name)


def numpy_clipped_grad_sum(name, X, y, w, r, clip):
    """The best plain-numpy O1: X @ w, einsum row norms, one s @ X (n-vectors only)."""
    a = _np_dphi(name, X @ w, y)
    g2 = a * a * np.einsum("ij,ij->i", X, X) + 2.0 * a * (X @ r) + r @ r
    s = np.minimum(1.0, clip / np.sqrt(np.maximum(g2, 1e-300)))
    return (s * a) @ X + s.sum() * r


def numpy_clipped_diff_sum(name, X, y, w, wp, r, rp, clip):
    dr = r - rp
    a = _np_dphi(name, X @ w, y) - _np_dphi(name, X @ wp, y)
    g2 = a * a * np.einsum("ij,ij->i", X, X) + 2.0 * a * (X @ dr) + dr @ dr
    s = np.minimum(1.0, clip / np.sqrt(np.maximum(g2, 1e-300)))
    return (s * a) @ X + s.sum() * dr


def _info(benchmark, case, size, batch, threads, impl, kernel):
    benchmark.group = f"{size}-{batch}-{threads}t"
    rows = case.n if batch == "full" else BATCH
    benchmark.extra_info.update({
        "size": size, "n": case.n, "d": case.d, "data": case.desc, "batch": batch, "threads": threads,
        "impl": impl, "kernel": kernel, "loss": case.loss.name, "bytes": rows * case.d * 8,
        "machine": machine(),
    })


# --------------------------------------------------------------- benchmarks
@pytest.mark.parametrize("threads", [1, 2], indirect=True)
@pytest.mark.parametrize("batch", ["full", "4096"])
@pytest.mark.parametrize("size", SIZE_NAMES)
@pytest.mark.parametrize("impl", ["limit", "o1", "o2"])
def test_numba(benchmark, registry, impl, size, batch, threads):
    case = Case.get(size, registry)
    _info(benchmark, case, size, batch, threads, "limit" if impl == "limit" else "numba",
          "stream" if impl == "limit" else impl)
    benchmark(getattr(case, impl), batch)


@pytest.mark.parametrize("threads", [2], indirect=True)
@pytest.mark.parametrize("batch", ["full", "4096"])
@pytest.mark.parametrize("size", SIZE_NAMES)
@pytest.mark.parametrize("kernel", ["o1", "o2"])
def test_numpy(benchmark, registry, kernel, size, batch, threads):
    case = Case.get(size, registry)
    if batch == "full":  # the kernel and the reference agree (checked once per size)
        k = getattr(case, kernel)("full")[0]
        ref = getattr(case, "numpy_" + kernel)("full")
        np.testing.assert_allclose(k, ref, rtol=1e-8, atol=1e-10 * case.n)
    _info(benchmark, case, size, batch, threads, "numpy", kernel)
    benchmark(getattr(case, "numpy_" + kernel), batch)


# ---------------------------------- generic kernel vs one specialised per loss
_HAND: dict = {}


def hand_kernel(loss):
    """The O1 form of ``_clipped_sum`` compiled with the loss's dphi and block
    function bound as globals (direct, inlinable calls) instead of first-class
    function arguments: what a hand-written kernel for that loss would be.
    Called as the generic O1 kernel without ``dphi, blk``.  Not cached (exec'd
    source)."""
    if loss.name in _HAND:
        return _HAND[loss.name]
    import inspect

    import numba

    import dpreg_kernels.linear_model as K
    from dpreg_kernels.config import _FM

    head = "def _clipped_sum(X, y, nx, idx, full, w, wp, two, r, rp, dphi_ref, blk_ref, clip):"
    refs = ("    dphi = dphi_ref.fn\n", "    blk = blk_ref.fn\n")
    src = inspect.getsource(K._clipped_sum)
    assert head in src and all(line in src for line in refs), \
        "the generic kernel's signature changed: update hand_kernel"
    src = src.replace(head, "def _hand_both(X, y, nx, idx, full, w, wp, two, r, rp, clip):")
    for line in refs:  # dphi and blk are the module globals bound below
        src = src.replace(line, "")
    ns = dict(vars(K))
    ns["dphi"] = numba.njit(fastmath=_FM)(type(loss).dphi)
    from dpreg.interfaces import _resolve  # the loss's block function, imported from its path if given as one

    own = _resolve(type(loss).dphi_block)
    ns["blk"] = numba.njit(fastmath=_FM)(own if own is not None else K._scalar_block)
    exec(compile(src, f"<hand kernel {loss.name}>", "exec"), ns)
    both = numba.njit(parallel=True, fastmath=_FM)(ns["_hand_both"])

    def o1(X, y, nx, idx, full, w, r, clip):
        return both(X, y, nx, idx, full, w, w, False, r, r, clip)

    _HAND[loss.name] = o1
    return o1


@pytest.mark.parametrize("threads", [2], indirect=True)
@pytest.mark.parametrize("size", ["covtype", "d1000"])
@pytest.mark.parametrize("loss_name", ["sigmoid-l2", "logistic-nonconvex-reg", "lowy-synthetic"])
@pytest.mark.parametrize("variant", ["generic", "hand"])
def test_loss(benchmark, registry, variant, loss_name, size, threads):
    case = Case.get(size, registry, loss_name)
    X, y, nx, none, w, r, clip = case.X, case.y, case.nx, case.none, case.w, case.r, case.clip1
    if variant == "generic":
        def body():
            return case.K.grad_sum(X, y, nx, none, True, w, r, case.dphi, case.blk, clip)
    else:
        hk = hand_kernel(case.loss)
        np.testing.assert_allclose(hk(X, y, nx, none, True, w, r, clip)[0],
                                   case.K.grad_sum(X, y, nx, none, True, w, r, case.dphi, case.blk, clip)[0],
                                   rtol=1e-9, atol=1e-12)

        def body():
            return hk(X, y, nx, none, True, w, r, clip)
    _info(benchmark, case, size, "full", threads, variant, "o1")
    benchmark.group = f"loss-{loss_name}-{size}"
    benchmark(body)


# --------------------------------------- the vectorised exp against libm and numpy
@pytest.mark.parametrize("impl", ["vmath", "numpy", "libm-loop"])
def test_exp_block(benchmark, impl):
    """exp over 50,000 non-positive arguments: dpreg_kernels.vmath.exp_nonpos
    (the losses' block functions), numpy's vectorised exp, and a numba loop of
    math.exp (what a scalar loss function costs); the extra info holds the
    ns per element of all three, measured in this run."""
    import math

    import numba

    from dpreg_kernels.vmath import exp_nonpos

    x = -np.abs(np.random.default_rng(0).standard_normal(50_000)) * 20
    out = np.empty_like(x)

    @numba.njit(cache=False)
    def libm(x, out):
        for i in range(x.shape[0]):
            out[i] = math.exp(x[i])

    fns = {"vmath": lambda: exp_nonpos(x, out), "numpy": lambda: np.exp(x, out=out),
           "libm-loop": lambda: libm(x, out)}
    for f in fns.values():
        f()
    import time

    per = {}
    for k, f in fns.items():
        t = time.perf_counter()
        for _ in range(50):
            f()
        per[k + "_ns_per_elt"] = (time.perf_counter() - t) / 50 / x.size * 1e9
    benchmark.group = "exp"
    benchmark.extra_info.update({"kind": "exp", "impl": impl, **per})
    benchmark(fns[impl])


# ------------------------- per-call cost of the kernels' first-class function arguments
@pytest.mark.parametrize("args", ["function-ref", "numba-dispatch"])
def test_function_ref_dispatch(benchmark, registry, args):
    """One O2 kernel call from Python on a 4-row batch (the call, not the rows):
    the compiled entry point given the loss's functions as
    :class:`dpreg_kernels.function_ref.FunctionRef` (unboxed in one pointer
    read; how :class:`dpreg.problem.Problem` calls the kernels) against numba's
    ordinary dispatch given the loss's compiled functions themselves (argument
    typing on every call; the functions are turned into references once,
    ``dpreg_kernels.function_ref.as_ref``).
    The extra info holds both per-call times in microseconds, measured in this
    run, and their ratio."""
    import time

    import dpreg_kernels.linear_model as K

    case = Case.get("ijcnn1", registry, "logistic")
    idx = np.arange(4, dtype=np.int64)
    head = (case.X, case.y, case.nx, idx, False, case.w, case.wp, True, case.r, case.rp)
    fast = K.clipped_sum.pick(False)
    typed = K.clipped_sum.typed(False)
    refs = (K.scalar_ref(case.dphi), K.block_ref(case.blk))
    fns = {"function-ref": lambda: fast(*head, *refs, 0.1),
           "numba-dispatch": lambda: typed(*head, case.dphi, case.blk, 0.1)}
    np.testing.assert_array_equal(fns["function-ref"]()[0], fns["numba-dispatch"]()[0])
    per = {}
    for k, f in fns.items():
        best = np.inf
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(2000):
                f()
            best = min(best, (time.perf_counter() - t) / 2000 * 1e6)
        per[k.replace("-", "_") + "_us"] = best
    per["ratio"] = per["numba_dispatch_us"] / per["function_ref_us"]
    benchmark.group = "function-ref-dispatch"
    benchmark.extra_info.update({"kind": "dispatch", "args": args, **per})
    benchmark(fns[args])


# ------------------------------------------- optional: torch.func / JAX vmap(grad)
@pytest.mark.parametrize("size", ["covtype", "d1000"])
def test_torch_vmap_grad(benchmark, registry, size):
    torch = pytest.importorskip("torch")
    from torch.func import grad, vmap

    case = Case.get(size, registry)
    X = torch.from_numpy(case.X)
    y = torch.from_numpy(case.y)
    w = torch.from_numpy(case.w)
    lam = case.loss.lam

    def f(w, x, t):
        return torch.sigmoid(-t * (x @ w)) + 0.5 * lam * (w @ w)

    def body():
        G = vmap(grad(f), in_dims=(None, 0, 0))(w, X, y)
        s = torch.clamp(case.clip1 / G.norm(dim=1), max=1.0)
        return (G * s[:, None]).sum(0)

    _info(benchmark, case, size, "full", torch.get_num_threads(), "torch", "o1")
    benchmark(body)


@pytest.mark.parametrize("size", ["covtype", "d1000"])
def test_jax_vmap_grad(benchmark, registry, size):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    jax.config.update("jax_enable_x64", True)
    case = Case.get(size, registry)
    X, y, w, lam = jnp.asarray(case.X), jnp.asarray(case.y), jnp.asarray(case.w), case.loss.lam

    def f(w, x, t):
        return jax.nn.sigmoid(-t * (x @ w)) + 0.5 * lam * (w @ w)

    @jax.jit
    def body(w):
        G = jax.vmap(jax.grad(f), in_axes=(None, 0, 0))(w, X, y)
        s = jnp.minimum(1.0, case.clip1 / jnp.linalg.norm(G, axis=1))
        return (G * s[:, None]).sum(0)

    body(w).block_until_ready()
    _info(benchmark, case, size, "full", 0, "jax", "o1")
    benchmark(lambda: body(w).block_until_ready())
