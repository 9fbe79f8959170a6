"""Trajectory recording shared by the algorithms.

A :class:`Trajectory` keeps a bounded number of evenly spaced checkpoints of
the iterate (for evaluation after the run, never during it) and per-step
private quantities the algorithm released anyway (noisy gradient norms, batch
sizes).  Memory is O(checkpoints x d); with ``keep_every_iterate`` it keeps
every iterate, O(T x d) (the candidate set of the SOSP finders, which
``--select`` then chooses from).
"""
from __future__ import annotations

import numpy as np


#: keep every iterate (the candidates of ``--select``) when steps x d is at most this many floats
KEEP_ALL_FLOATS = 10_000_000


class Trajectory:
    def __init__(self, total_steps: int, checkpoints: int = 20, *, keep_every_iterate: bool = False):
        self.every = 1 if keep_every_iterate else max(1, int(np.ceil(max(total_steps, 1) / max(checkpoints, 1))))
        self.keeps_every_iterate = bool(keep_every_iterate or self.every == 1)
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

    def log_many(self, first_step: int, W: np.ndarray, **private_series) -> None:
        """:meth:`log` for steps ``first_step, first_step + 1, ...`` with
        iterates ``W[i]`` and per-step values ``private_series[k][i]``."""
        for k, vals in private_series.items():
            self.series.setdefault(k, []).extend(float(v) for v in vals)
        steps = first_step + np.arange(len(W))
        for i in np.flatnonzero(steps % self.every == 0):
            self.steps.append(int(steps[i]))
            self.iterates.append(np.array(W[i], dtype=float))

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
    """The iterate an algorithm returns among w_1..w_T.

    ``"last"``; ``"average"`` (running mean); ``"random"`` (w_t with t uniform
    in 1..T - the output rule of DP-SGD Alg 3 and DP-SPIDER Alg 1: drawn up
    front from ``rng`` when T is known, by reservoir sampling (replace the kept
    iterate by w_t with probability 1/t) when ``T`` is None, i.e. the run
    length is only known at its end); ``"set"`` (the SOSP finders' output, the
    set {w_t}: the algorithm keeps every iterate in its Trajectory as the
    candidates of ``--select``; the single model released without a selector
    is the last).  ``rng`` must be a secret mechanism stream
    (Algorithm.rng).  Post-processing of released iterates: no privacy cost.
    O(d) memory."""

    MODES = ("last", "average", "random", "set")

    def __init__(self, mode: str, T: int | None, rng: np.random.Generator, w0: np.ndarray):
        if mode not in self.MODES:
            raise ValueError(f"output must be one of {', '.join(self.MODES)}, got {mode!r}")
        self.mode = mode
        self._rng = rng
        self._pick = int(rng.integers(1, T + 1)) if T is not None else None
        self._avg = np.zeros_like(w0, dtype=float)
        self._chosen = np.array(w0, dtype=float)
        self._chosen_t = 0

    def see(self, t: int, w: np.ndarray) -> None:
        """Record iterate w_t (t = 1, 2, ...)."""
        if self.mode == "average":
            self._avg += (w - self._avg) / t
        elif self.mode == "random":
            take = (t == self._pick) if self._pick is not None else (self._rng.random() * t < 1.0)
            if take:
                self._chosen = np.array(w, dtype=float)
                self._chosen_t = int(t)

    def see_many(self, first_step: int, W: np.ndarray) -> None:
        """:meth:`see` for iterates ``W[i]`` of steps ``first_step + i``."""
        k = len(W)
        if k == 0:
            return
        if self.mode == "average":
            t_end = first_step + k - 1
            self._avg = (self._avg * (first_step - 1) + W.sum(axis=0)) / t_end
        elif self.mode == "random":
            if self._pick is not None:
                if first_step <= self._pick < first_step + k:
                    self._chosen = np.array(W[self._pick - first_step], dtype=float)
                    self._chosen_t = int(self._pick)
            else:
                for i in range(k):
                    self.see(first_step + i, W[i])

    def chosen_step(self, t_last: int) -> int | None:
        """Index t of the returned iterate (None for the average)."""
        if self.mode == "average":
            return None
        return self._chosen_t if self.mode == "random" else int(t_last)

    def result(self, w_last: np.ndarray, t_last: int | None = None) -> np.ndarray:
        if self.mode == "average":
            return self._avg if t_last != 0 else np.array(w_last, dtype=float)
        if self.mode == "random":
            return self._chosen
        return w_last
