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

import numpy as np

from .vmath import exp_nonpos


def logistic_dphi(m, y, out, work, bits, dphi):
    """``out[i] = -y sigma(-y m)`` (d/dm of log(1 + exp(-y m)))."""
    n = m.shape[0]
    for i in range(n):
        work[i] = -abs(y[i] * m[i])
    exp_nonpos(work[:n], out)      # distinct arrays: an aliased call does not vectorise
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
    exp_nonpos(work[:n], out)
    for i in range(n):
        e = out[i]
        u = 1.0 + e
        out[i] = -y[i] * (e / (u * u))


# Compiled psi gradients ``f(w, params, out)`` (LinearModelLoss.psi_grad_kernel;
# dpreg_kernels.sgd.PSI_SIG) of the built-in losses with a data-independent
# term, for the many-step kernels; ``params`` is the loss's psi_params().
# ``tests/test_contracts.py`` checks each against the loss's numpy psi_grad.
def nonconvex_reg_psi_grad(w, params, out):
    """``lam 2 w / (1 + w^2)^2`` coordinate-wise (lam = params[0])."""
    lam = params[0]
    for j in range(w.shape[0]):
        u = 1.0 + w[j] * w[j]
        out[j] = lam * 2.0 * w[j] / (u * u)


def l2_psi_grad(w, params, out):
    """``lam w`` (lam = params[0])."""
    lam = params[0]
    for j in range(w.shape[0]):
        out[j] = lam * w[j]


def lowy_psi_grad(w, params, out):
    """``w (1 + cos |w|^2)``: the gradient of 1/2 (|w|^2 + sin |w|^2)."""
    s = 0.0
    for j in range(w.shape[0]):
        s += w[j] * w[j]
    c = 1.0 + np.cos(s)
    for j in range(w.shape[0]):
        out[j] = w[j] * c


def quartic_psi_grad(w, params, out):
    """``|w|^2 w``: the gradient of 1/4 |w|^4 (matrix factorisation)."""
    s = 0.0
    for j in range(w.shape[0]):
        s += w[j] * w[j]
    for j in range(w.shape[0]):
        out[j] = s * w[j]
