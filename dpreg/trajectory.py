"""Trajectory recording shared by the algorithms.

A :class:`Trajectory` keeps a bounded number of evenly spaced checkpoints of
the iterate (for evaluation after the run, never during it) and per-step
private quantities the algorithm released anyway (noisy gradient norms, batch
sizes).  Memory is O(checkpoints x d).
"""
from __future__ import annotations

import numpy as np


class Trajectory:
    def __init__(self, total_steps: int, checkpoints: int = 20):
        self.every = max(1, int(np.ceil(max(total_steps, 1) / max(checkpoints, 1))))
        self.steps: list[int] = []
        self.iterates: list[np.ndarray] = []
        self.series: dict[str, list] = {}

    def log(self, step: int, w: np.ndarray, **private_values) -> None:
        """Record released values for this step; keep ``w`` every ``every`` steps."""
        for k, v in private_values.items():
            self.series.setdefault(k, []).append(float(v))
        if step % self.every == 0:
            self.steps.append(int(step))
            self.iterates.append(np.array(w, dtype=float))

    def finish(self, step: int, w: np.ndarray) -> None:
        if not self.steps or self.steps[-1] != step:
            self.steps.append(int(step))
            self.iterates.append(np.array(w, dtype=float))

    def summary(self) -> dict:
        """JSON-ready summary of the released series (first/last/min/max, length)."""
        out = {}
        for k, vals in self.series.items():
            a = np.asarray(vals, dtype=float)
            out[k] = {"count": int(a.size), "first": float(a[0]), "last": float(a[-1]),
                      "min": float(a.min()), "max": float(a.max()), "mean": float(a.mean())}
        return out


class OutputChoice:
    """The iterate an algorithm returns among w_1..w_T: ``"last"``, ``"average"``
    (running mean) or ``"random"`` (w_t with t uniform in 1..T, drawn up front
    from ``rng`` - the output rule of DP-SGD Alg 3 and DP-SPIDER Alg 1).
    Post-processing of released iterates: no privacy cost.  O(d) memory."""

    MODES = ("last", "average", "random")

    def __init__(self, mode: str, T: int, rng: np.random.Generator, w0: np.ndarray):
        if mode not in self.MODES:
            raise ValueError(f"output must be one of {', '.join(self.MODES)}, got {mode!r}")
        self.mode = mode
        self._pick = int(rng.integers(1, T + 1))
        self._avg = np.zeros_like(w0, dtype=float)
        self._chosen = np.array(w0, dtype=float)

    def see(self, t: int, w: np.ndarray) -> None:
        """Record iterate w_t (t = 1, 2, ...)."""
        if self.mode == "average":  # the only mode that reads the running mean (a per-step cost)
            self._avg += (w - self._avg) / t
        elif t == self._pick:
            self._chosen = np.array(w, dtype=float)

    def result(self, w_last: np.ndarray) -> np.ndarray:
        return {"last": w_last, "average": self._avg, "random": self._chosen}[self.mode]
