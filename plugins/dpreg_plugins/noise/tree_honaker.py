"""The ``tree-honaker`` continual-release mechanism: a full binary tree of
noisy dyadic sums with Honaker's efficient estimate of each prefix (Honaker
2015, "Efficient use of differentially private binary trees"; spec
../shared/specs/remaining-seeds.md section (d)).  Single participation only.

Within a phase the adds ``v_1, v_2, ...`` are the leaves.  At step t, with i
the number of trailing zero bits of t, *every* dyadic node of levels 0..i
ending at t completes (level l covers leaves t-2^l+1..t) and is released as
``y = (exact node sum) + z * s_v * N(0, I)``, ``s_v`` = max of its leaves'
sensitivities.  The ``tree`` mechanism releases only the node of level i.

Estimate (upward pass): a leaf's estimate is its ``y`` with variance
``V = (z s)^2``; a node of level l >= 1 combines its own ``y`` (variance
``sigma^2``) with the sum ``S`` of its children's estimates (variance
``V_S = V_left + V_right``) by inverse-variance weighting::

    zhat = (y / sigma^2 + S / V_S) / (1 / sigma^2 + 1 / V_S),
    V    = 1 / (1 / sigma^2 + 1 / V_S).

The release at step t is the sum of ``zhat`` over the nodes of the binary
decomposition of t (one per set bit).  Every node released so far lies inside
exactly one of those subtrees, and the subtrees' leaves are disjoint, so this
is the best linear unbiased (GLS) estimate of the prefix sum from *all*
released nodes (checked against brute-force GLS in the tests).  With equal
sensitivities the per-coordinate variance at step t is
``(z s)^2 * sum_{j in bits(t)} 2^j / (2^{j+1} - 1)``: 1 at t = 1, below the
tree's popcount(t) for t >= 2.

Privacy: a record lies in one leaf, hence in at most L = bit_length(horizon)
released nodes (one per level), each a Gaussian release with noise at least z
times the record's sensitivity; its group is charged
``SelfComposed(Gaussian(z), L)`` at add time, before anything is released -
the same per-record charge as ``tree`` (which releases half as many nodes).
The estimates are post-processing.  Non-disjoint participation ("all",
"poisson") and a group added twice in one phase are refused.

Memory: per level an exact partial sum and an estimate (at most 2 L vectors;
O(L d)).  Node noise is derived on demand from (seed, tag, phase, level,
index) like ``tree``'s, so no noise is stored.
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import gaussian_event, self_composed
from dpreg.interfaces import charge, Participation

from .single_participation import SingleParticipationMechanism, refuse_non_disjoint
from .tree import tree_levels


def combine(y: np.ndarray, var_y: float, s: np.ndarray, var_s: float) -> tuple[np.ndarray, float]:
    """Inverse-variance weighted mean of two unbiased estimates ``y`` (variance
    ``var_y``) and ``s`` (variance ``var_s``) of the same quantity, and its
    variance; an exact input (variance 0) wins."""
    if var_y == 0.0:
        return y, 0.0
    if var_s == 0.0:
        return s, 0.0
    wy, ws = 1.0 / var_y, 1.0 / var_s
    return (wy * y + ws * s) / (wy + ws), 1.0 / (wy + ws)


def honaker_unit_variance(t: int) -> float:
    """Per-coordinate variance of the prefix estimate at step t for unit node
    variance: sum over set bits j of t of 2^j / (2^{j+1} - 1)."""
    t = int(t)
    return sum((2.0 ** j) / (2.0 ** (j + 1) - 1.0) for j in range(t.bit_length()) if (t >> j) & 1)


class TreeHonakerMechanism(SingleParticipationMechanism):
    """Full binary tree, every dyadic node released; streaming Honaker (GLS) prefix estimates."""

    name = "tree-honaker"
    summary = ("full binary tree with Honaker's GLS prefix estimate (variance below tree's "
               "at the same charge); single pass only")
    tag = 0x484F4E4B  # "HONK"

    def __init__(self, **kw):
        self.levels = tree_levels(kw["horizon"])
        super().__init__(**kw)

    def reset(self) -> None:
        super().reset()
        L = self.levels
        # slot j: the level-j node of the binary decomposition of the current
        # step (set bit j of t) - exact sum, estimate, its variance, sensitivity
        self._exact: list[np.ndarray | None] = [None] * L
        self._hat: list[np.ndarray | None] = [None] * L
        self._var = [0.0] * L
        self._sens = [0.0] * L

    def stored_vectors(self) -> int:
        """d-vectors currently held (at most 2 L: O(L d) memory)."""
        return sum(v is not None for v in self._exact) + sum(v is not None for v in self._hat)

    def node_noise(self, level: int, index: int) -> np.ndarray:
        """Unit-variance noise of node (level, index) of the current phase (index
        0-based among the level's nodes): a pure function of the secret seed."""
        return self.unit_noise(level, index)

    def add(self, increment: np.ndarray, sensitivity: float, participation: Participation) -> np.ndarray:
        v, s = self._check(increment, sensitivity, participation)
        t = self.steps + 1
        i = (t & -t).bit_length() - 1  # trailing zeros of t: highest level completed now
        # ---- charge BEFORE anything is released (nothing changes if refused)
        charge(self.accountant, self_composed(gaussian_event(self.z), self.levels), participation,
               label=f"{self.name} leaf (x{self.levels} levels)")
        self._groups.add((participation.pass_id, participation.group))
        exact, sens = v, s
        hat: np.ndarray | None = None
        var = 0.0
        for lev in range(i + 1):
            if lev > 0:  # the node of level lev ending at t: left child (slot) + the node just built
                left_exact, left_hat = self._exact[lev - 1], self._hat[lev - 1]
                assert left_exact is not None and left_hat is not None and hat is not None  # bit lev-1 of t set
                exact = left_exact + exact
                sens = max(self._sens[lev - 1], sens)
                s_sum, v_sum = left_hat + hat, self._var[lev - 1] + var
                self._exact[lev - 1] = self._hat[lev - 1] = None
                self._var[lev - 1] = self._sens[lev - 1] = 0.0
            sigma = self.z * sens
            y = exact + self.node_noise(lev, (t >> lev) - 1) * sigma
            if lev == 0:
                hat, var = y, sigma * sigma
            else:
                hat, var = combine(y, sigma * sigma, s_sum, v_sum)
        self._exact[i], self._hat[i], self._var[i], self._sens[i] = exact, hat, var, sens
        self.steps = t
        out = np.zeros(self.dim)
        for h in self._hat:
            if h is not None:
                out += h
        return out

    @classmethod
    def record_event(cls, noise_multiplier, horizon, participation_kind, steps):
        """SelfComposed(Gaussian(z), bit_length(horizon)) for a disjoint record,
        whatever ``steps``; other participation is refused."""
        refuse_non_disjoint(cls.name, participation_kind)
        return self_composed(gaussian_event(noise_multiplier), tree_levels(horizon))

    @classmethod
    def noise_std_per_step(cls, noise_multiplier, sensitivity, t):
        """z s sqrt(sum_{j in bits(t)} 2^j / (2^{j+1} - 1)) for equal sensitivities s."""
        return noise_multiplier * sensitivity * math.sqrt(honaker_unit_variance(t))


@hookimpl
def dpreg_register_noises(register):
    register(TreeHonakerMechanism.name, TreeHonakerMechanism, summary=TreeHonakerMechanism.summary)
