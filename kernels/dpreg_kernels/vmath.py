"""Vectorisable elementary functions for the losses' block functions.

numba calls libm's scalar ``exp`` (it has no vector math library here: SVML
needs Intel's runtime and an SVML-patched LLVM), so a loop of ``math.exp``
cannot use SIMD lanes, and on short rows the loss derivative's ``exp`` is a
large part of a kernel's time.  :func:`exp_nonpos` computes ``exp`` over an array with
arithmetic LLVM vectorises: Cody-Waite range reduction ``x = k ln 2 + r``,
``|r| <= ln(2)/2``, a degree-12 Taylor polynomial for ``exp(r)`` (truncation
error below ``0.347^13/13! = 1.8e-16``), and the factor ``2^k`` written
directly as the bits of a float64 (:func:`dpreg_kernels.intrinsics.float_from_bits`).
Its speed per element against numpy's ``exp`` and a scalar libm loop is
``test_exp_block`` of `benchmarks/bench_kernels.py`; the bit cast happens in the
same loop as the polynomial (no scratch array), which keeps the block
derivative's compile short.  Relative error
<= 2^-51 against ``math.exp`` on [-708, 0] (``tests/test_vmath.py``).

Compiled without reassociation or approximate-function flags: the two-part
``ln 2`` of the range reduction must not be folded into one constant.
"""
from __future__ import annotations

import numpy as np

from .config import CACHE, njit
from .intrinsics import float_from_bits

#: flags of the functions here: contraction into FMAs only (more accurate, never less)
_EXACT = {"nsz", "contract"}

LOG2E = 1.4426950408889634
#: ln 2 split so that k * LN2_HI is exact for |k| < 2^20 (fdlibm's constants)
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
#: below this exp(x) is subnormal or 0; inputs are clamped here (exp = 3.3e-308)
X_MIN = -708.0


@njit(fastmath=_EXACT, cache=CACHE)
def exp_nonpos(x, out):
    """``out[i] = exp(x[i])`` for ``x[i] <= 0``, i over
    ``x.shape[0]``.  Arguments below -708 (and -inf) are clamped there (result 3.3e-308
    instead of a subnormal or 0), positive ones to 0 (result 1: outside the
    contract); NaN gives NaN.  Relative error <= 2^-51.  ``out`` may be
    ``x``, but then LLVM's run-time overlap check sends the loop to its scalar
    version (measured 2.6 against 0.5 ns per element): pass distinct arrays."""
    n = x.shape[0]
    for i in range(n):
        xi = x[i]
        xc = xi if xi >= X_MIN else X_MIN  # NaN too: the conversion to int64 below never sees it
        if xc > 0.0:
            xc = 0.0
        k = np.floor(xc * LOG2E + 0.5)
        r = (xc - k * LN2_HI) - k * LN2_LO
        p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (
            1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0 + r * (1.0 / 40320.0 + r * (
                1.0 / 362880.0 + r * (1.0 / 3628800.0 + r * (1.0 / 39916800.0 + r * (1.0 / 479001600.0))))))))))))
        scale = float_from_bits((np.int64(k) + 1023) << 52)  # 2^k (k >= -1022 after the clamp)
        out[i] = (p if xi == xi else xi) * scale  # NaN stays NaN
