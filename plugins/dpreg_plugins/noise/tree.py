"""The ``tree`` continual-release mechanism: binary-tree aggregation of the
running sum (Alg 1 of liu-talwar-2024-adaptive-batch-sosp.txt; Alg 5 of
zhang-tran-cutkosky-2024-private-zeroth-order.txt; Dwork et al. 2010, Chan et
al. 2011).

Within one phase (between two resets) the adds ``v_1, v_2, ...`` are the
leaves of a binary tree.  At step t, with i the number of trailing zero bits
of t, the dyadic node of level i ending at t (leaves t-2^i+1..t) is
*completed*: its exact sum is formed from the level-<i partial sums and v_t,
and one Gaussian noise vector is attached to it.  The release at step t is
the sum of the noisy nodes of the binary decomposition of t (one per set bit
of t), so the prefix noise at step t is a sum of popcount(t) node noises.

Node noise is derived on demand from ``(seed, phase, level, index)`` with a
fresh ``numpy.random.Generator`` (``SeedSequence([seed words, phase, level,
index])``): reproducible, independent of thread count and of call history,
and nothing but O(log T) partial sums is stored (no tree).  A reset starts a
new phase: a new tree with fresh noise.

Noise scale: every node's noise has std ``z * (node sensitivity)`` where

* ``"disjoint"`` participation (single pass, a record is in exactly one add):
  node sensitivity = max of its leaves' sensitivities (the record is in one
  leaf).  Its group is charged at add time ``SelfComposed(Gaussian(z), L)``
  with ``L = floor(log2(horizon)) + 1``: the number of levels, hence the
  largest number of noisy nodes that can contain its leaf (one per level).
  This equals dp-accounting's ``SingleEpochTreeAggregationDpEvent`` RDP
  (depth ceil(log2(T+1)) = L).
* ``"all"`` / ``"poisson"`` participation (a record may be in every add):
  node sensitivity = sum of its leaves' sensitivities, and each completed
  node is charged globally as one ``Gaussian(z)`` (no subsampling
  amplification is claimed for the tree; a Poisson add is charged like "all").

Mixing disjoint and global participation in one phase, or adding the same
disjoint group twice in one phase, is refused (the max rule would not hold).
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import gaussian_event, self_composed
from dpreg.interfaces import NoiseMechanism, Participation, charge


def tree_levels(horizon: int) -> int:
    """Number of levels L = floor(log2(horizon)) + 1 of a tree over ``horizon``
    leaves (= bit length of horizon = ceil(log2(horizon + 1)))."""
    return int(horizon).bit_length()


def _seed_words(seed) -> list[int]:
    """Four 32-bit words identifying the run seed (an int or a SeedSequence)."""
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(int(seed))
    return [int(x) for x in ss.generate_state(4)]


class TreeMechanism(NoiseMechanism):
    """Binary-tree aggregation; node noise derived on demand from (seed, phase, level, index)."""

    name = "tree"
    summary = "binary-tree aggregation (prefix noise variance grows as log t); restarts each phase"

    def __init__(self, **kw):
        self._words = _seed_words(kw["seed"])
        self.levels = tree_levels(kw["horizon"])
        super().__init__(**kw)

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        super().reset()
        L = self.levels
        # slot j holds the node of level j in the binary decomposition of the
        # current step (set bit j), or nothing: exact sum, noisy sum, sensitivity
        self._exact: list[np.ndarray | None] = [None] * L
        self._noisy: list[np.ndarray | None] = [None] * L
        self._sens = [0.0] * L
        self._kind: str | None = None  # "disjoint" or "global" for this phase
        self._groups: set = set()

    def stored_vectors(self) -> int:
        """Number of d-vectors currently held (at most 2 L: O(log T) memory)."""
        return sum(v is not None for v in self._exact) + sum(v is not None for v in self._noisy)

    def node_noise(self, level: int, index: int) -> np.ndarray:
        """Unit-variance noise vector of node (level, index) of the current phase:
        a pure function of (seed, phase, level, index)."""
        ss = np.random.SeedSequence(self._words + [self.phase, int(level), int(index)])
        return np.random.default_rng(ss).standard_normal(self.dim)

    # -------------------------------------------------------------------- add
    def add(self, increment: np.ndarray, sensitivity: float, participation: Participation) -> np.ndarray:
        if self.steps >= self.horizon:
            raise RuntimeError(f"{self.name}: more than horizon={self.horizon} adds in one phase")
        sensitivity = float(sensitivity)
        if not (sensitivity >= 0 and math.isfinite(sensitivity)):
            raise ValueError(f"sensitivity must be finite and >= 0, got {sensitivity}")
        kind = "disjoint" if participation.kind == "disjoint" else "global"
        if participation.kind not in ("disjoint", "all", "poisson"):
            raise ValueError(f"unknown participation kind {participation.kind!r}")
        if self._kind is not None and kind != self._kind:
            raise ValueError("tree: disjoint and non-disjoint increments cannot share a phase")
        if kind == "disjoint" and (participation.pass_id, participation.group) in self._groups:
            raise ValueError(f"tree: disjoint group {participation.group!r} added twice in one phase")
        t = self.steps + 1
        i = (t & -t).bit_length() - 1  # trailing zeros of t: level of the node completed now
        # ---- charge BEFORE anything is released (nothing changes if refused)
        if kind == "disjoint":
            charge(self.accountant, self_composed(gaussian_event(self.z), self.levels), participation,
                   label=f"{self.name} leaf (x{self.levels} levels)")  # routes the group's pass
        else:
            self.accountant.charge(gaussian_event(self.z), None, label=f"{self.name} node level {i}")
        # ---- merge the level-<i nodes (all set bits of t-1 below i) with v_t
        exact = np.array(increment, dtype=float, copy=True)
        if exact.shape != (self.dim,):
            raise ValueError(f"increment has shape {exact.shape}, expected ({self.dim},)")
        sens = sensitivity
        for j in range(i):
            exact += self._exact[j]
            sens = max(sens, self._sens[j]) if kind == "disjoint" else sens + self._sens[j]
            self._exact[j] = None
            self._noisy[j] = None
            self._sens[j] = 0.0
        self._exact[i] = exact
        self._sens[i] = sens
        self._noisy[i] = exact + self.node_noise(i, (t >> i) - 1) * (self.z * sens)
        self._kind = kind
        if kind == "disjoint":
            self._groups.add((participation.pass_id, participation.group))
        self.steps = t
        out = np.zeros(self.dim)
        for v in self._noisy:
            if v is not None:
                out += v
        return out

    # ------------------------------------------------------------- accounting
    @classmethod
    def record_event(cls, noise_multiplier, horizon, participation_kind, steps):
        """Disjoint: L-fold Gaussian (L = floor(log2 horizon) + 1), whatever
        ``steps``; "all"/"poisson": one Gaussian per completed node, i.e.
        ``steps`` Gaussians (one node completes per add; no amplification)."""
        if participation_kind == "disjoint":
            return self_composed(gaussian_event(noise_multiplier), tree_levels(horizon))
        return self_composed(gaussian_event(noise_multiplier), int(steps))

    @classmethod
    def noise_std_per_step(cls, noise_multiplier, sensitivity, t, participation_kind="disjoint"):
        """Per-coordinate std of the prefix noise at step t when every add has
        sensitivity s: z s sqrt(popcount t) (disjoint: node sens = s), or
        z s sqrt(sum over set bits j of t of 4^j) ("all": node sens = 2^j s)."""
        t = int(t)
        if participation_kind == "disjoint":
            return noise_multiplier * sensitivity * math.sqrt(bin(t).count("1"))
        var = sum(4.0 ** j for j in range(t.bit_length()) if (t >> j) & 1)
        return noise_multiplier * sensitivity * math.sqrt(var)


@hookimpl
def dpreg_register_noises(register):
    register(TreeMechanism.name, TreeMechanism, summary=TreeMechanism.summary)
