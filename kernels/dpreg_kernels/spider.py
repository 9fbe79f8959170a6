"""Many DP-SPIDER steps in one compiled call (dense or CSR rows, the gaussian plugin).

A dp-spider step is one clipped-sum kernel call (O1 on the phase's first step,
O2 on the others), a noise vector added to the running estimate, an update and
a projection.  Done from Python, what surrounds the kernels is a third of a run
on IJCNN1 (``python benchmarks/race_breakdown.py dp-spider`` splits a run into
clipped sums, sampling and the rest).  :func:`_spider_steps`
runs ``K`` steps - whole phases - with everything random drawn beforehand by
the caller from its secret generators (the batches as ``rows``/``offsets``,
the noise of every add as standard normals): no random number is drawn here
(privacy rule 4), and the arithmetic of a step is that of
``SpiderEstimator.refresh``/``update`` with the ``gaussian`` mechanism's
``add`` (numpy's, operation for operation; compiled without fast-math, so no
operation is contracted or reassociated), followed by the update - the same
numbers as the step-at-a-time loop for the same draws (tests/test_dp_spider.py).

Step ``t`` of the call, in phase ``p = t // q`` (the call starts at a phase):

* ``t % q == 0`` (O1): ``s`` = the clipped gradient sum over the phase's O1
  batch at ``w`` (all rows when ``full1``, else ``rows[offsets[t]:offsets[t+1]]``)
  at the kernel clip ``clip``, the running sum restarts: ``sum = 0 + (s / den1
  + noise1[p] * scale1)`` (``sens1 = factor C / den1`` and ``scale1 = z1 sens1``
  computed by the caller, C the clip before the kernel's margin);
* else (O2): ``c = M |w - w_prev|`` (capped at ``cap``), ``s`` = the clipped
  difference sum over ``rows[offsets[t]:offsets[t+1]]`` between ``w_prev`` and
  ``w`` at the kernel clip ``c keep`` (zero when ``c`` is 0 or the batch is empty),
  ``sens = factor c / den2``, ``o2 += s / den2 + noise2[i] * (z2 sens)`` (``i``
  counts the call's O2 steps);
* the estimate ``g`` is the running sum (one mechanism) or the O1 release plus
  the O2 sum (``separate``: O1 by its own mechanism); ``w_prev, w = w,
  project(w - step g, radius)`` (``radius <= 0``: no projection).

``W[t]`` receives the new iterate, ``gn[t] = |g|``, ``sens[t]`` the add's
sensitivity, ``ncl[t]`` the clipped terms.  Norms are :func:`norm2`'s (a
sequential sum of squares), which the step-at-a-time loop uses too.

The rows are ``A``: ``(X,)`` (dense) or ``(data, indices, indptr)`` (CSR).  The
clipped sums are the compiled variants of
:data:`dpreg_kernels.linear_model.clipped_sum` (or of the CSR
:data:`dpreg_kernels.sparse.clipped_sum`) themselves, linked in: the
``serial`` form calls the serial variant only; the ``parallel`` form calls the
parallel variant for a batch whose work (rows x ``row_work``: d, or the mean
non-zeros per row) reaches ``par_work`` and the serial one below (the caller
passes the threshold of :func:`dpreg_kernels.config.want_parallel`, looked up
once per call).
"""
from __future__ import annotations

import numpy as np
from numba import types

from . import linear_model
from .config import CACHE, njit, renamed
from .linear_model import BlockFn, Idx, Mat, ScalarFn, Vec, entry_point, f8, i8

Mat2 = types.Array(f8, 2, "C")
B = types.boolean


@njit(f8(Vec), cache=CACHE, nogil=True)
def norm2(v):
    """``sqrt(sum_j v_j^2)``, summed in index order (no fast-math): the norm
    the compiled steps and dp-spider's step-at-a-time loop both use, so both
    give the same numbers."""
    s = 0.0
    for j in range(v.shape[0]):
        s += v[j] * v[j]
    return np.sqrt(s)


def _spider_steps(A, y, nx, rows, offsets, full1, row_work, par_work, w0, wp0, noise1, noise2, sens1, scale1, z2, factor,
                  separate, clip, keep, M, cap, den1, den2, step, radius, q, psi, pp, dphi, blk, W, gn, sens, ncl):
    """``K = len(offsets) - 1`` dp-spider steps from ``w0`` (previous iterate
    ``wp0``), whole phases of ``q`` steps from a phase start (the last may be
    shorter); see the module docstring.  Returns the last iterate and writes
    the one before it into ``wp0``."""
    K = offsets.shape[0] - 1
    n = y.shape[0]
    d = w0.shape[0]
    w = np.empty(d)
    wp = np.empty(d)
    r = np.empty(d)
    rp = np.empty(d)
    tot = np.empty(d)
    base = np.empty(d)
    g = np.empty(d)
    dv = np.empty(d)
    zero = np.empty(d)
    for j in range(d):
        w[j] = w0[j]
        wp[j] = wp0[j]
        tot[j] = 0.0
        base[j] = 0.0
        zero[j] = 0.0
    none = rows[:0]
    o1 = K < 0  # False, as a variable (the kernels are compiled for a bool, not a literal)
    o2 = K >= 0  # True
    i2 = 0
    for t in range(K):
        lo = offsets[t]
        hi = offsets[t + 1]
        if t % q == 0:  # O1: the phase's fresh gradient; the mechanism's running sum restarts
            b = n if full1 else hi - lo
            psi.fn(w, pp, r)
            if b > 0:
                ix = none if full1 else rows[lo:hi]
                if b * row_work >= par_work:
                    s, k = _cs_par(*A, y, nx, ix, full1, w, w, o1, r, r, dphi, blk, clip)
                else:
                    s, k = _cs_ser(*A, y, nx, ix, full1, w, w, o1, r, r, dphi, blk, clip)
            else:
                s = zero
                k = 0
            p = t // q
            for j in range(d):
                v = 0.0 + (s[j] / den1 + noise1[p, j] * scale1)
                if separate:
                    base[j] = v
                    tot[j] = 0.0
                    g[j] = v
                else:
                    tot[j] = v
                    g[j] = v
            sens[t] = sens1
        else:  # O2: the clipped difference between the last two iterates
            for j in range(d):
                dv[j] = w[j] - wp[j]
            c = M * norm2(dv)
            if cap < c:
                c = cap
            b = hi - lo
            if c > 0 and b > 0:
                psi.fn(w, pp, r)
                psi.fn(wp, pp, rp)
                ci = c * keep if c < np.inf else c  # the kernel's clip, as Problem.clipped_diff_sum passes it
                if b * row_work >= par_work:
                    s, k = _cs_par(*A, y, nx, rows[lo:hi], o1, w, wp, o2, r, rp, dphi, blk, ci)
                else:
                    s, k = _cs_ser(*A, y, nx, rows[lo:hi], o1, w, wp, o2, r, rp, dphi, blk, ci)
            else:
                s = zero
                k = 0
            sn = factor * c / den2
            zs = z2 * sn
            for j in range(d):
                tot[j] += s[j] / den2 + noise2[i2, j] * zs
                g[j] = base[j] + tot[j] if separate else tot[j]
            i2 += 1
            sens[t] = sn
        ncl[t] = k
        gn[t] = norm2(g)
        for j in range(d):
            wp[j] = w[j]
            w[j] = w[j] - step * g[j]
        if radius > 0.0:
            nrm = norm2(w)
            if not nrm <= radius:
                f = radius / nrm
                for j in range(d):
                    w[j] = w[j] * f
        for j in range(d):
            W[t, j] = w[j]
    for j in range(d):
        wp0[j] = wp[j]
    return w


#: the clipped sums a form calls: bound in each form's own copy of the globals (SpiderSteps.form)
_cs_ser = _cs_par = None


def _signature(sparse: bool):
    from .sgd import PsiFn  # imported when a form is first made (the sgd module compiles no_psi on import)

    rows = types.Tuple((Vec, Idx, Idx)) if sparse else types.Tuple((Mat,))
    return Vec(rows, Vec, Vec, Idx, Idx, B, f8, f8, Vec, Vec, Mat2, Mat2, f8, f8, f8, f8, B, f8, f8, f8, f8, f8, f8,
               f8, f8, i8, PsiFn, Vec, ScalarFn, BlockFn, Mat2, Vec, Vec, Idx)


class SpiderSteps:
    """The compiled forms of :func:`_spider_steps`: for dense rows (``A =
    (X,)``, the clipped sums of :mod:`dpreg_kernels.linear_model`) or CSR rows
    (``A = (data, indices, indptr)``, :mod:`dpreg_kernels.sparse`), each
    ``serial`` or ``parallel`` (module docstring); each compiled - or loaded
    from numba's cache - on first use, from a copy of the function whose
    globals bind the clipped sums it calls (the parallel form links the
    parallel variant, which must therefore exist: callers use it only where
    ``clipped_sum.pick(True)`` gives the parallel variant)."""

    def __init__(self):
        self._fast = {}

    def form(self, parallel: bool, sparse: bool = False):
        """The compiled entry point of one form (compiled or loaded now if needed)."""
        key = (bool(sparse), bool(parallel))
        f = self._fast.get(key)
        if f is None:
            cs = self.kernel(sparse)
            g = dict(_spider_steps.__globals__)
            g["_cs_ser"] = cs.serial
            g["_cs_par"] = cs.parallel if parallel else cs.serial
            clone = renamed(_spider_steps, "__" + ("csr_" if sparse else "") + ("parallel" if parallel else "serial"), g)
            f = self._fast[key] = entry_point(njit(_signature(sparse), cache=CACHE, nogil=True)(clone))
        return f

    @staticmethod
    def kernel(sparse: bool):
        """The clipped-sum :class:`~dpreg_kernels.linear_model.Kernel` the forms for these rows call."""
        from . import sparse as sparse_kernels

        return sparse_kernels.clipped_sum if sparse else linear_model.clipped_sum


spider_steps = SpiderSteps()
