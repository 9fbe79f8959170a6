"""Block forms of the built-in losses' derivatives (``dphi_block`` of
:class:`dpreg.interfaces.LinearModelLoss`): the values of the scalar
functions in ``dpreg_plugins.losses.linear`` for a stage of margins at once,
with ``exp(-|z|)`` from the vectorised :func:`dpreg_kernels.vmath.exp_nonpos`
(relative error <= 2^-51, where the scalar forms call libm's ``exp``).

Plain Python functions with the block signature ``f(m, y, out, work, bits,
dphi)`` (:data:`dpreg_kernels.linear_model.BLOCK_SIG`; ``dphi``, the scalar
form, is not called); a loss names one as ``"dpreg_kernels.loss_blocks:NAME"``
and :func:`dpreg_kernels.compile_block` compiles it when a pipeline is built,
so registering the losses imports no numba.  ``tests/test_vmath.py`` checks
each against its scalar form.
"""
from __future__ import annotations

from .vmath import exp_nonpos


def logistic_dphi(m, y, out, work, bits, dphi):
    """``out[i] = -y sigma(-y m)`` (d/dm of log(1 + exp(-y m)))."""
    n = m.shape[0]
    for i in range(n):
        work[i] = -abs(y[i] * m[i])
    exp_nonpos(work[:n], out, bits)      # distinct arrays: an aliased call does not vectorise
    for i in range(n):
        e = out[i]                       # exp(-|z|), z = y m
        s = e / (1.0 + e)                # sigma(-|z|)
        out[i] = -y[i] * (s if y[i] * m[i] > 0.0 else 1.0 - s)


def sigmoid_dphi(m, y, out, work, bits, dphi):
    """``out[i] = -y s (1 - s)``, ``s = sigma(-y m)`` (d/dm of 1/(1 + exp(y m))):
    ``s (1 - s) = e / (1 + e)^2`` with ``e = exp(-|y m|)`` for either sign."""
    n = m.shape[0]
    for i in range(n):
        work[i] = -abs(y[i] * m[i])
    exp_nonpos(work[:n], out, bits)
    for i in range(n):
        e = out[i]
        u = 1.0 + e
        out[i] = -y[i] * (e / (u * u))
