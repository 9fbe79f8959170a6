"""Built-in gradient oracles (Alg 3 of liu-talwar-2024-adaptive-batch-sosp.txt).

* ``minibatch`` (O1): mean of per-record gradients, each clipped to ``clip``.
* ``spider-diff`` (O2): mean of per-record gradient differences
  grad f(w) - grad f(w_prev), each clipped to ``M * |w - w_prev|`` - the
  sensitivity the accountant uses; for an M-smooth loss no term is clipped.

Sensitivities are of the returned *mean*: ``factor * clip / denom`` where
``factor`` is the accountant's relation factor (1 add-remove, 2 replace-one)
and ``denom`` the batch size (or, for Poisson batches, the public expected size).
"""
from __future__ import annotations

import numpy as np

from dpreg import hookimpl
from dpreg.interfaces import Estimate, Oracle, Participation


class MinibatchOracle(Oracle):
    """O1: clipped per-record gradient mean over a batch."""

    name = "minibatch"
    summary = "O1: mean of per-record gradients clipped to a norm bound (sensitivity factor*C/b)"

    def estimate(self, w: np.ndarray, idx: np.ndarray, participation: Participation, *,
                 clip: float, factor: float, denom: float | None = None) -> Estimate:
        if not clip > 0 or not np.isfinite(clip):
            raise ValueError(f"clip must be a finite positive number, got {clip}")
        b = len(idx)
        den = float(denom if denom is not None else max(b, 1))
        s, ncl = self.problem.clipped_grad_sum(w, idx, clip)
        return Estimate(s / den, factor * clip / den, participation, b, int(ncl))


class SpiderDiffOracle(Oracle):
    """O2: clipped per-record gradient-difference mean over a batch."""

    name = "spider-diff"
    summary = "O2: mean of per-record gradient differences clipped to M*|w-w'| (sensitivity factor*M|w-w'|/b)"

    def estimate(self, w: np.ndarray, w_prev: np.ndarray, idx: np.ndarray,
                 participation: Participation, *, smoothness: float, factor: float,
                 denom: float | None = None) -> Estimate:
        b = len(idx)
        den = float(denom if denom is not None else max(b, 1))
        clip = float(smoothness) * float(np.linalg.norm(np.asarray(w) - np.asarray(w_prev)))
        if clip == 0.0:
            return Estimate(np.zeros_like(w, dtype=float), 0.0, participation, b, 0)
        s, ncl = self.problem.clipped_diff_sum(w, w_prev, idx, clip)
        return Estimate(s / den, factor * clip / den, participation, b, int(ncl))


@hookimpl
def dpreg_register_oracles(register):
    for cls in (MinibatchOracle, SpiderDiffOracle):
        register(cls.name, cls, summary=cls.summary)
