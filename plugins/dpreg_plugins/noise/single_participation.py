"""Shared pieces of the continual-release mechanisms that are private only for
*single participation* (``"disjoint"``: every record lies in exactly one add of
a phase), ``tree-honaker`` and ``sqrt-factorization``.  Not a plugin (registers
nothing).

* :class:`DisjointOnlyError` - the refusal of "all"/"poisson" participation
  or of a disjoint group added twice in one phase (a ``ValueError`` and a
  :class:`~dpreg.errors.ParameterError`, so the CLI prints it as one line).
* :class:`SingleParticipationMechanism` - a :class:`NoiseMechanism` base that
  checks every add (horizon, finite sensitivity, increment shape, disjoint
  participation, fresh group) *before* anything is charged, and derives each
  unit-variance noise vector as a pure function of (secret seed, mechanism
  tag, phase, coordinates).
"""
from __future__ import annotations

import math

import numpy as np

from dpreg.errors import ParameterError
from dpreg.interfaces import NoiseMechanism, Participation

from .tree import _seed_words as seed_words  # one derivation of the seed words for every mechanism


class DisjointOnlyError(ParameterError, ValueError):
    """Participation a single-participation mechanism cannot account for."""


def refuse_non_disjoint(name: str, participation_kind: str) -> None:
    """Raise :class:`DisjointOnlyError` naming mechanism ``name`` unless the
    participation kind is "disjoint"."""
    if participation_kind != "disjoint":
        raise DisjointOnlyError(
            f"noise {name!r} supports only disjoint (single-pass) participation, got "
            f"{participation_kind!r}: a record in several adds would need other sensitivities; "
            f"use --noise gaussian or tree with this algorithm")


class SingleParticipationMechanism(NoiseMechanism):
    """Base of the disjoint-only mechanisms.  Subclasses set ``tag`` (a 32-bit
    domain-separation word, so two mechanisms given the same seed draw
    different noise) and implement :meth:`_release` (called after the charge)."""

    tag: int = 0

    def __init__(self, **kw):
        self._words = seed_words(kw["seed"])
        super().__init__(**kw)

    def reset(self) -> None:
        super().reset()
        self._groups: set = set()

    def unit_noise(self, *coords: int) -> np.ndarray:
        """Unit-variance noise d-vector at ``coords`` of the current phase: a pure
        function of (seed, tag, phase, coords), independent of call history."""
        ss = np.random.SeedSequence(self._words + [self.tag, self.phase] + [int(c) for c in coords])
        return np.random.default_rng(ss).standard_normal(self.dim)

    def _check(self, increment, sensitivity, participation: Participation) -> tuple[np.ndarray, float]:
        """Validate one add (nothing charged or changed); return the increment
        as a float copy and the sensitivity as a float."""
        if self.steps >= self.horizon:
            raise RuntimeError(f"{self.name}: more than horizon={self.horizon} adds in one phase")
        refuse_non_disjoint(self.name, participation.kind)
        if (participation.pass_id, participation.group) in self._groups:
            raise DisjointOnlyError(
                f"noise {self.name!r}: disjoint group {participation.group!r} added twice in one phase")
        s = float(sensitivity)
        if not (s >= 0 and math.isfinite(s)):
            raise ValueError(f"sensitivity must be finite and >= 0, got {s}")
        v = np.array(increment, dtype=float, copy=True)
        if v.shape != (self.dim,):
            raise ValueError(f"increment has shape {v.shape}, expected ({self.dim},)")
        return v, s
