"""Huber-smoothed hinge loss on the margin: phi(m, y) = h(1 - y m) with
h(u) = 0 (u <= 0), u^2/2 (0 < u <= 1), u - 1/2 (u > 1)."""
from dpreg.interfaces import LinearModelLoss


def huber_phi(m, y):
    u = 1.0 - y * m
    if u <= 0.0:
        return 0.0
    if u <= 1.0:
        return 0.5 * u * u
    return u - 0.5


def huber_dphi(m, y):
    u = 1.0 - y * m
    if u <= 0.0:
        return 0.0
    if u <= 1.0:
        return -y * u
    return -y


def huber_d2phi(m, y):
    u = 1.0 - y * m
    if 0.0 < u <= 1.0:
        return y * y
    return 0.0


class HuberHinge(LinearModelLoss):
    """Huber-smoothed hinge loss; convex. G=1, M=1 (rho undefined: stated as 1e6)."""

    name = "huber-hinge"
    phi = staticmethod(huber_phi)
    dphi = staticmethod(huber_dphi)
    d2phi = staticmethod(huber_d2phi)

    def constants(self, d):
        return 1.0, 1.0, 1e6
