"""Many DP-SGD steps in one compiled call (dense and CSR rows).

A step of ``dp-sgd`` is a clipped gradient sum over a Poisson batch, a noise
vector, an update and a projection; done from Python, the call and the loop
around it cost more than the sum itself for small batches (256 a9a rows: ~8
us of kernel inside ~40 us of step).  :func:`_sgd_steps` runs ``K`` steps
with everything drawn beforehand by the caller from its secret generators
(the batches as ``rows``/``offsets``, the standard normal noise as a (K, d)
array): no random number is drawn here (privacy rule 4), and the arithmetic
of a step is that of ``Problem.clipped_grad_sum`` followed by the update.

Step ``k`` (batch ``rows[offsets[k]:offsets[k+1]]``, psi gradient ``r`` of
the current point from the loss's compiled ``psi`` function):

    g = (clipped_grad_sum(w, batch, clip) + noise[k] * sd) / b
    w = project(w - step * g, radius)        (radius <= 0: no projection)

``W[k]`` receives the new iterate and ``gn[k] = |g|``.  The clipped sum is
the serial variant of :data:`dpreg_kernels.linear_model.clipped_sum` (or of the
CSR one) itself - the compiled function the single-step path calls, linked in, not
compiled a second time (a dp-sgd run needs it anyway for its diagnostics; linking it
in halves the steps kernel's first compile) - with its
chunks, stages and clip bound: callers use these kernels for batches below the parallel
work threshold.
"""
from __future__ import annotations

import numpy as np
from numba import types

from . import linear_model, sparse
from .config import jit_inline, jit_scalar
from .function_ref import RefFunctionType
from .linear_model import BlockFn, Idx, Kernel, Mat, ScalarFn, Vec, f8

#: a loss's compiled psi gradient ``f(w, params, out)``: ``out = grad psi(w)``
PSI_SIG = types.none(Vec, Vec, Vec)
#: numba type of a kernel's argument for a loss's psi gradient: a
#: :class:`~dpreg_kernels.function_ref.FunctionRef` (``FunctionRef(psi, PSI_SIG)``)
PsiFn = RefFunctionType(PSI_SIG)
Mat2 = types.Array(f8, 2, "C")


def _update(w, s, noise_k, sd, step, b, radius, W_k):
    """``g = (s + noise_k sd) / b``, ``w -= step g``, project onto the ball of
    ``radius`` (if > 0); writes the new w into ``w`` and ``W_k``; returns |g|."""
    d = w.shape[0]
    gg = 0.0
    for j in range(d):
        g = (s[j] + noise_k[j] * sd) / b
        gg += g * g
        w[j] = w[j] - step * g
    if radius > 0.0:
        ww = 0.0
        for j in range(d):
            ww += w[j] * w[j]
        nrm = np.sqrt(ww)
        if nrm > radius:
            f = radius / nrm
            for j in range(d):
                w[j] = w[j] * f
    for j in range(d):
        W_k[j] = w[j]
    return np.sqrt(gg)


def _start(w0):
    """(a copy of ``w0``, two zero vectors of its length): one allocation form
    (every allocation form compiles one more numba overload on the first run)."""
    d = w0.shape[0]
    w = np.empty(d)
    r = np.empty(d)
    zero = np.empty(d)
    for j in range(d):
        w[j] = w0[j]
        r[j] = 0.0
        zero[j] = 0.0
    return w, r, zero


def _sgd_steps(X, y, nx, rows, offsets, w0, noise, sd, step, b, radius, psi, pp, dphi, blk, clip, W, gn):
    """K = len(offsets) - 1 DP-SGD steps from ``w0`` on dense rows (see the
    module docstring); returns the last iterate."""
    K = offsets.shape[0] - 1
    w, r, zero = _start(w0)
    o1 = K < 0  # False (O1), as a variable: the kernel is compiled for a bool, not a literal
    for k in range(K):
        psi.fn(w, pp, r)
        lo = offsets[k]
        hi = offsets[k + 1]
        if hi > lo:
            s, _ = _clipped_sum_i(X, y, nx, rows[lo:hi], False, w, w, o1, r, r, dphi, blk, clip)
        else:
            s = zero
        gn[k] = _update_i(w, s, noise[k], sd, step, b, radius, W[k])
    return w


def _csr_sgd_steps(data, indices, indptr, y, nx, rows, offsets, w0, noise, sd, step, b, radius, psi, pp, dphi, blk,
                   clip, W, gn):
    """:func:`_sgd_steps` on CSR rows."""
    K = offsets.shape[0] - 1
    w, r, zero = _start(w0)
    o1 = K < 0  # False (O1), as a variable: the kernel is compiled for a bool, not a literal
    for k in range(K):
        psi.fn(w, pp, r)
        lo = offsets[k]
        hi = offsets[k + 1]
        if hi > lo:
            s, _ = _csr_clipped_sum_i(data, indices, indptr, y, nx, rows[lo:hi], False, w, w, o1, r, r, dphi, blk,
                                      clip)
        else:
            s = zero
        gn[k] = _update_i(w, s, noise[k], sd, step, b, radius, W[k])
    return w


def _no_psi(w, pp, out):
    """The psi gradient of a loss without a data-independent term: 0."""
    for j in range(out.shape[0]):
        out[j] = 0.0


#: the psi gradient of a loss without psi
no_psi = jit_scalar(PSI_SIG)(_no_psi)
_update_i = jit_inline(_update)
_start = jit_inline(_start)


#: the serial clipped sums the steps kernels call, bound by their ``prepare`` hooks (below)
_clipped_sum_i = _csr_clipped_sum_i = None


def _bind(name, kernel):
    """A ``prepare`` hook: binds the module global ``name`` (which a steps kernel
    calls) to ``kernel``'s serial variant, compiled or loaded from numba's cache
    only now - when a steps kernel is first wanted - so that importing this module
    compiles nothing, and dense runs never compile the CSR sum."""
    def prepare():
        globals()[name] = kernel.serial

    return prepare


_STEP_TAIL = (Vec, Mat2, f8, f8, f8, f8, PsiFn, Vec, ScalarFn, BlockFn, f8, Mat2, Vec)
sgd_steps = Kernel(Vec(Mat, Vec, Vec, Idx, Idx, *_STEP_TAIL), _sgd_steps,
                   prepare=_bind("_clipped_sum_i", linear_model.clipped_sum))
csr_sgd_steps = Kernel(Vec(Vec, Idx, Idx, Vec, Vec, Idx, Idx, *_STEP_TAIL), _csr_sgd_steps,
                       prepare=_bind("_csr_clipped_sum_i", sparse.clipped_sum))
