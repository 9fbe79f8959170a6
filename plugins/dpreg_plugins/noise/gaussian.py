"""The ``gaussian`` continual-release mechanism: every increment is released
with its own Gaussian noise, std = z * (its sensitivity), and the prefix sum is
the sum of the noisy increments.  The noise in the prefix sum at step t has
per-coordinate variance z^2 * sum_{i<=t} s_i^2 (t z^2 s^2 for equal s).

Accounting: each add is one Gaussian release with noise multiplier z, charged
with the increment's participation (a disjoint batch's group, a Poisson
subsample with amplification, or every record).
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import gaussian_event, self_composed
from dpreg.interfaces import NoiseMechanism, Participation, charge


class GaussianMechanism(NoiseMechanism):
    """Independent Gaussian noise on every increment of the running sum."""

    name = "gaussian"
    summary = "independent Gaussian noise on each increment (prefix noise variance grows as t)"
    independent_adds = True

    def __init__(self, **kw):
        self._rng = np.random.default_rng(kw["seed"])
        super().__init__(**kw)

    def reset(self) -> None:
        super().reset()
        self._sum = np.zeros(self.dim)

    def add(self, increment: np.ndarray, sensitivity: float, participation: Participation) -> np.ndarray:
        noise = self.draw(1, participation)[0] * (self.z * float(sensitivity))
        self._sum += np.asarray(increment, dtype=float) + noise
        return self._sum.copy()

    def draw(self, k: int, participation: Participation) -> np.ndarray:
        return self.draw_phases([[(k, participation)]], reset_first=False)

    def draw_phases(self, phases, *, reset_first: bool = True) -> np.ndarray:
        """:meth:`NoiseMechanism.draw_phases` in one pass: every phase's adds
        checked against the horizon first (a phase past it charges and draws
        nothing), then one charge call per participation for all its adds,
        the resets, and one draw of all the standard normals from the
        generator - the numbers the phase-by-phase draws give (numpy's normals
        come one after another, however many a call asks for)."""
        counts: dict = {}
        steps = self.steps
        total = 0
        for i, adds in enumerate(phases):
            if i or reset_first:
                steps = 0
            k = sum(int(c) for c, _ in adds)
            if steps + k > self.horizon:
                raise RuntimeError(f"{self.name}: more than horizon={self.horizon} adds in one phase")
            steps += k
            total += k
            for c, p in adds:
                if c:
                    counts[p] = counts.get(p, 0) + int(c)
        for p, c in counts.items():
            charge(self.accountant, gaussian_event(self.z), p, label=f"{self.name} increment", count=c)
        for i in range(len(phases)):
            if i or reset_first:
                self.reset()
        self.steps = steps
        return self._rng.standard_normal((total, self.dim))

    @classmethod
    def record_event(cls, noise_multiplier, horizon, participation_kind, steps):
        if participation_kind == "disjoint":
            return gaussian_event(noise_multiplier)
        return self_composed(gaussian_event(noise_multiplier), int(steps))

    @classmethod
    def noise_std_per_step(cls, noise_multiplier, sensitivity, t):
        return noise_multiplier * sensitivity * math.sqrt(t)


@hookimpl
def dpreg_register_noises(register):
    register(GaussianMechanism.name, GaussianMechanism, summary=GaussianMechanism.summary)
