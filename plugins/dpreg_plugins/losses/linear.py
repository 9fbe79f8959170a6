"""Built-in losses.  Each is ``phi(<x,w>, y) + psi(w)`` (see
:class:`dpreg.interfaces.LinearModelLoss`); the scalar functions below are plain
Python, compiled by numba on first use and cached.

Constants are stated for records with ``|x| <= 1``; ``s = 1/(1+exp(m))``-type
bounds are the textbook maxima (|sigma'| <= 1/4, |sigma''| <= 1/(6 sqrt 3),
|sigma'''| <= 1/8).
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.interfaces import LinearModelLoss

SIG1 = 0.25                       # max |sigma'|
SIG2 = 1.0 / (6.0 * math.sqrt(3))  # max |sigma''|
SIG3 = 1.0 / 8.0                  # max |sigma'''|


# ---------------------------------------------------------------- scalar functions
def logistic_phi(m, y):
    z = y * m
    if z > 0:
        return math.log1p(math.exp(-z))
    return -z + math.log1p(math.exp(z))


def logistic_dphi(m, y):
    z = y * m
    if z > 0:
        e = math.exp(-z)
        return -y * e / (1.0 + e)
    return -y / (1.0 + math.exp(z))


def logistic_d2phi(m, y):
    z = y * m
    if z > 0:
        e = math.exp(-z)
        return e / ((1.0 + e) * (1.0 + e))
    e = math.exp(z)
    return e / ((1.0 + e) * (1.0 + e))


# numba compiles each scalar function on its own (no calls to other Python
# functions), so sigma(-y m) is written out in each.
def sigmoid_phi(m, y):
    # 1 / (1 + exp(y m)) = sigma(-y m)
    z = -y * m
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def sigmoid_dphi(m, y):
    z = -y * m
    if z >= 0:
        s = 1.0 / (1.0 + math.exp(-z))
    else:
        e = math.exp(z)
        s = e / (1.0 + e)
    return -y * s * (1.0 - s)


def sigmoid_d2phi(m, y):
    z = -y * m
    if z >= 0:
        s = 1.0 / (1.0 + math.exp(-z))
    else:
        e = math.exp(z)
        s = e / (1.0 + e)
    return y * y * s * (1.0 - s) * (1.0 - 2.0 * s)


def linear_phi(m, y):
    return m


def linear_dphi(m, y):
    return 1.0


def linear_d2phi(m, y):
    return 0.0


def phase_phi(m, y):
    r = y - m * m
    return 0.25 * r * r


def phase_dphi(m, y):
    return -(y - m * m) * m


def phase_d2phi(m, y):
    return 3.0 * m * m - y


def mf_phi(m, y):
    return -0.5 * m * m


def mf_dphi(m, y):
    return -m


def mf_d2phi(m, y):
    return -1.0


def ramp_phi(m, y):
    r = 1.0 - y * m
    if r <= 0.0:
        return 0.0
    if r >= 1.0:
        return 1.0
    return r


def ramp_dphi(m, y):
    # a subgradient: -y on the slope 0 < y m < 1, 0 on the flats (and kinks)
    z = y * m
    if z > 0.0 and z < 1.0:
        return -y
    return 0.0


def ramp_d2phi(m, y):
    return 0.0


def squared_phi(m, y):
    r = m - y
    return 0.5 * r * r


def squared_dphi(m, y):
    return m - y


def squared_d2phi(m, y):
    return 1.0


def huber_phi(m, y):
    # Huber with delta = 1: r^2/2 inside |r| <= 1, |r| - 1/2 outside
    r = m - y
    if r > 1.0:
        return r - 0.5
    if r < -1.0:
        return -r - 0.5
    return 0.5 * r * r


def huber_dphi(m, y):
    # the residual clipped to [-1, 1] (NaN stays NaN: the kernels drop the term)
    r = m - y
    if r > 1.0:
        return 1.0
    if r < -1.0:
        return -1.0
    return r


def huber_d2phi(m, y):
    r = m - y
    if r > 1.0 or r < -1.0:
        return 0.0
    return 1.0


# ------------------------------------------------------------------------- losses
class Logistic(LinearModelLoss):
    """Logistic loss log(1 + exp(-y <x,w>)); convex. G=1, M=1/4, rho=1/(6 sqrt 3)."""

    name = "logistic"
    phi = staticmethod(logistic_phi)
    dphi = staticmethod(logistic_dphi)
    d2phi = staticmethod(logistic_d2phi)
    dphi_block = "dpreg_kernels.loss_blocks:logistic_dphi"

    def constants(self, d):
        return 1.0, SIG1, SIG2


class Sigmoid(LinearModelLoss):
    """Sigmoid loss 1/(1 + exp(y <x,w>)); non-convex, bounded. G=1/4, M=1/(6 sqrt 3), rho=1/8."""

    name = "sigmoid"
    phi = staticmethod(sigmoid_phi)
    dphi = staticmethod(sigmoid_dphi)
    d2phi = staticmethod(sigmoid_d2phi)
    dphi_block = "dpreg_kernels.loss_blocks:sigmoid_dphi"

    def constants(self, d):
        return SIG1, SIG2, SIG3


class LogisticNonconvexReg(Logistic):
    """Logistic + lam * sum_i w_i^2/(1+w_i^2), lam=1e-3 (DP trust-region paper, section 5).

    psi's gradient has coordinates lam*2w/(1+w^2)^2 (|.| <= lam*0.6495), its Hessian is
    diagonal with entries lam*(2-6w^2)/(1+w^2)^3 (|.| <= 2 lam) and third derivative
    |.| <= 4.5 lam.  G = 1 + 0.6495 lam sqrt(d), M = 1/4 + 2 lam, rho = 1/(6 sqrt 3) + 4.5 lam.
    """

    name = "logistic-nonconvex-reg"
    lam = 1e-3
    psi_grad_kernel = "dpreg_kernels.loss_blocks:nonconvex_reg_psi_grad"

    def psi_params(self):
        return np.array([self.lam])

    def constants(self, d):
        return 1.0 + 0.6495 * self.lam * math.sqrt(d), SIG1 + 2 * self.lam, SIG2 + 4.5 * self.lam

    def psi(self, w):
        w2 = w * w
        return float(self.lam * np.sum(w2 / (1.0 + w2)))

    def psi_grad(self, w):
        return self.lam * 2.0 * w / (1.0 + w * w) ** 2

    def psi_hvp(self, w, v):
        w2 = w * w
        return self.lam * (2.0 - 6.0 * w2) / (1.0 + w2) ** 3 * v


class SigmoidL2(Sigmoid):
    """Sigmoid + lam/2 |w|^2, lam=1e-3 (DP trust-region paper, section 5).

    The quadratic makes the gradient unbounded in w; G is stated for |w| <= 10:
    G = 1/4 + 10 lam, M = 1/(6 sqrt 3) + lam, rho = 1/8.
    """

    name = "sigmoid-l2"
    lam = 1e-3
    psi_grad_kernel = "dpreg_kernels.loss_blocks:l2_psi_grad"

    def psi_params(self):
        return np.array([self.lam])

    def constants(self, d):
        return SIG1 + 10 * self.lam, SIG2 + self.lam, SIG3

    def psi(self, w):
        return float(0.5 * self.lam * np.dot(w, w))

    def psi_grad(self, w):
        return self.lam * w

    def psi_hvp(self, w, v):
        return self.lam * v


class LowySynthetic(LinearModelLoss):
    """f(w, x) = 1/2(|w|^2 + sin|w|^2) + <x, w> on the ball of radius 2 (warm-start paper, section 9).

    On |w| <= 2, |x| <= 1 (s = |w|^2 <= 4), the true suprema, rounded up:
    grad = w(1 + cos s) + x, norm <= max_r r(1 + cos r^2) + 1 = 2.5417 (G = 2.55);
    Hessian = (1+cos s) I - 2 sin(s) w w^T, eigenvalues 1 + cos s and
    1 + cos s - 2 s sin s, max |.| = 6.4008 (M = 6.41; the crude bound
    2 + 2*4 = 10 made O2's noise 1.56x too large); the third derivative along
    a unit u, -4 cos(s) <w,u>^3 - 6 sin(s) <w,u>, has sup 30.614 over the ball
    (rho = 30.62; a symmetric 3-tensor's norm is its sup on the diagonal).
    Labels are ignored.
    """

    name = "lowy-synthetic"
    labels = "ignored"
    radius = 2.0
    classifier = False
    psi_grad_kernel = "dpreg_kernels.loss_blocks:lowy_psi_grad"
    phi = staticmethod(linear_phi)
    dphi = staticmethod(linear_dphi)
    d2phi = staticmethod(linear_d2phi)

    def constants(self, d):
        return 2.55, 6.41, 30.62

    def psi(self, w):
        s = float(np.dot(w, w))
        return 0.5 * (s + math.sin(s))

    def psi_grad(self, w):
        s = float(np.dot(w, w))
        return w * (1.0 + math.cos(s))

    def psi_hvp(self, w, v):
        s = float(np.dot(w, w))
        return (1.0 + math.cos(s)) * v - 2.0 * math.sin(s) * float(np.dot(w, v)) * w


class PhaseRetrieval(LinearModelLoss):
    """Phase retrieval f(w; x, y) = 1/4 (y - <x,w>^2)^2: a strict saddle at w = 0.

    With y = <x, w*>^2 the Hessian of the population loss at 0 is -E[y x x^T],
    negative definite along w*: w = 0 is a strict saddle, and the minima are +-w*.
    Constants for |w| <= 2, |x| <= 1, 0 <= y <= 1: G = 8 (|y - m^2||m| <= 4*2),
    M = 12 (|3m^2 - y|), rho = 12 (|6m|).
    """

    name = "phase-retrieval"
    labels = "real"
    radius = 2.0
    classifier = False
    phi = staticmethod(phase_phi)
    dphi = staticmethod(phase_dphi)
    d2phi = staticmethod(phase_d2phi)

    def constants(self, d):
        return 8.0, 12.0, 12.0


class MatrixFactorisation(LinearModelLoss):
    """Rank-one matrix factorisation of the records' second moment: strict saddles at w = 0 and at every eigenvector but the top one.

    f(w; x) = 1/4 |x x^T - w w^T|_F^2 - 1/4 |x|^4 = -1/2 <x, w>^2 + 1/4 |w|^4 (the constant
    1/4 |x|^4 dropped; the quartic is the data-independent psi).  The empirical loss
    -1/2 w^T S w + 1/4 |w|^4, S = (1/n) sum x x^T with eigenpairs (lam_i, v_i), has its
    minima at +-sqrt(lam_1) v_1 (F* = -lam_1^2/4), a strict saddle at w = 0 (lambda_min =
    -lam_1; every per-record gradient is exactly 0 there) and strict saddles at
    +-sqrt(lam_i) v_i (lambda_min = lam_i - lam_1 < 0 when lam_i < lam_1): Ge et al.'s
    strict-saddle landscape (rank-one PCA).  Constants for |x| <= 1 (so lam_1 <= 1) on the
    feasible ball |w| <= 1, which holds the minima: G = 2 (|<x,w> x| + |w|^3), M = 3 (the
    Hessian -x x^T + |w|^2 I + 2 w w^T has its eigenvalues in [-1, 3]), rho = 6 (the third
    derivative along a unit u is 6 <w, u>).  Labels are ignored.
    """

    name = "matrix-factorisation"
    labels = "ignored"
    radius = 1.0
    classifier = False
    psi_grad_kernel = "dpreg_kernels.loss_blocks:quartic_psi_grad"
    phi = staticmethod(mf_phi)
    dphi = staticmethod(mf_dphi)
    d2phi = staticmethod(mf_d2phi)

    def constants(self, d):
        return 2.0, 3.0, 6.0

    def origin_bound(self) -> float:
        """F(0) - inf F = lam_1^2 / 4 <= 1/4 (|x| <= 1)."""
        return 0.25

    def psi(self, w):
        s = float(np.dot(w, w))
        return 0.25 * s * s

    def psi_grad(self, w):
        return float(np.dot(w, w)) * w

    def psi_hvp(self, w, v):
        return float(np.dot(w, w)) * v + 2.0 * float(np.dot(w, v)) * w


class Ramp(LinearModelLoss):
    """Ramp loss min(1, max(0, 1 - y <x,w>)); non-smooth, non-convex, bounded. G=1 (M, rho undefined).

    The zeroth-order paper's setting (zhang-tran-cutkosky-2024): Lipschitz
    (G = 1 for |x| <= 1, |y| = 1) but not differentiable at y<x,w> in {0, 1},
    so no smoothness constant M or Hessian-Lipschitz constant rho exists.
    ``constants`` returns M = 1 and rho = 1 as placeholders so that the
    smooth-loss algorithms still run (step 1/M = 1; difference clip
    M |w - w'| enforced by clipping, so their privacy holds) - their
    smooth-case guarantees do not apply.  ``dphi`` is a subgradient (-y on the
    slope, 0 on the flats and at the kinks), ``d2phi`` = 0 (almost everywhere).
    """

    name = "ramp"
    phi = staticmethod(ramp_phi)
    dphi = staticmethod(ramp_dphi)
    d2phi = staticmethod(ramp_d2phi)

    def constants(self, d):
        return 1.0, 1.0, 1.0


#: the declared (practical) G of the regression losses: the default per-record clip, a
#: quarter of the target range's half-width.  Chosen on training data (dp-sgd, eps = 1,
#: seeds 0-2, training R^2; experiments/tune_regression.py): diabetes' training split
#: -4.71 at the worst-case G = 2 (squared), -0.50 at 1, 0.28 at 1/2, 0.46 at 1/4 (the
#: non-private optimum 0.54); synthetic-regression n = 2,000, d = 10: 0.63, 0.75, 0.77, 0.78
REGRESSION_CLIP = 0.25


class Squared(LinearModelLoss):
    """Squared error (<x,w> - y)^2 / 2 (least-squares regression). G=1/4 (practical clip; worst case 2), M=1, rho=1.

    A regression loss: targets go through the run's public target transform
    into [-1, 1] (``--target-bounds LO,HI``, the data set's declared bounds, or
    a private estimate; :mod:`dpreg.tasks`), and predictions come back in the
    user's units.  The per-record gradient (m - y) x is unbounded in w; where
    the model predicts inside the target range (|m| <= 1, |y| <= 1, |x| <= 1)
    it is at most 2 (:meth:`worst_case_constants`).  The declared G = 1/4 is
    practical: the default clip, at the residual scale of a fitted model
    (:data:`REGRESSION_CLIP`, chosen on training data; the worst case 2 made
    the noise drown the signal).  M = 1 (phi'' = 1); the Hessian is constant,
    so every rho >= 0 is a Hessian-Lipschitz constant: rho = 1 is declared (the
    SOSP algorithms' schedules divide by it).  Every per-record gradient is
    clipped in the kernel, so privacy never rests on G.
    """

    name = "squared"
    task = "regression"
    labels = "real"
    classifier = False
    phi = staticmethod(squared_phi)
    dphi = staticmethod(squared_dphi)
    d2phi = staticmethod(squared_d2phi)

    def constants(self, d):
        return REGRESSION_CLIP, 1.0, 1.0

    def worst_case_constants(self, d=None):
        """(G, M, rho) that hold for |x| <= 1, |y| <= 1, |<x,w>| <= 1 (hence on
        the unit ball of w): G = 2."""
        return 2.0, 1.0, 1.0

    def origin_bound(self) -> float:
        """F(0) - inf F <= max_y y^2 / 2 = 1/2 for targets in [-1, 1]."""
        return 0.5


class Huber(LinearModelLoss):
    """Huber loss (delta = 1) of the residual <x,w> - y (robust regression). G=1/4 (practical clip; worst case 1), M=1.

    phi = r^2/2 for |r| <= 1, |r| - 1/2 beyond (r = <x,w> - y, in the model's
    target units: targets in [-1, 1] after the run's target transform).  Its
    derivative is the residual clipped to [-1, 1], so the per-record gradient
    has norm <= |x| <= 1 whatever the target and w: G = 1 holds for every
    record, transform or not (:meth:`worst_case_constants`); the declared G =
    1/4 is the practical default clip of the regression losses
    (:data:`REGRESSION_CLIP`).  M = 1.  The second derivative jumps at |r| = 1,
    so no Hessian-Lipschitz constant exists; rho = 1 is a placeholder (as for
    ``ramp``) so that the SOSP algorithms run - their smooth-case guarantees do
    not apply.  Every sensitivity is enforced by clipping in the kernel.
    """

    name = "huber"
    task = "regression"
    labels = "real"
    classifier = False
    phi = staticmethod(huber_phi)
    dphi = staticmethod(huber_dphi)
    d2phi = staticmethod(huber_d2phi)

    def constants(self, d):
        return REGRESSION_CLIP, 1.0, 1.0

    def worst_case_constants(self, d=None):
        """(G, M, rho) for |x| <= 1, any target and w: G = 1 (rho a placeholder)."""
        return 1.0, 1.0, 1.0

    def origin_bound(self) -> float:
        """F(0) - inf F <= max_y huber(y) = 1/2 for targets in [-1, 1]."""
        return 0.5


BUILTIN_LOSSES = (Logistic, Sigmoid, LogisticNonconvexReg, SigmoidL2, LowySynthetic, PhaseRetrieval,
                  MatrixFactorisation, Ramp, Squared, Huber)


@hookimpl
def dpreg_register_losses(register):
    for cls in BUILTIN_LOSSES:
        register(cls.name, cls(), summary=cls.__doc__.strip().splitlines()[0])
