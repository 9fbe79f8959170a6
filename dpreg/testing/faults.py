"""Deliberate privacy bugs, for showing that the empirical audit
(:mod:`dpreg.audit`) can fail.  **Test-only**: a fault breaks the privacy of
whatever it is applied to while the accounting stays unchanged, and nothing
but an audit's ``fault`` option (``dpreg audit --fault``, hidden) applies one.

A fault is named by a string (:func:`parse_fault`) and applied through the
hooks of :class:`Fault`, each of which returns what it is given unless the
fault changes it:

``noise-scale=S``
    every Gaussian the run draws is ``S`` times its declared scale: a noise
    mechanism is told sensitivities ``S`` times too small, an algorithm's own
    randomness streams draw scaled normals (and Gumbel and Laplace variates: a
    selector then runs at epsilon / ``S``).  ``S = 1/1.3`` is a sensitivity
    under-stated by 1.3.
``noise-scale=S@NAME``
    the same, only for the algorithm's randomness streams whose name contains
    ``NAME`` (``noise-scale=0.77@hessian``: the trust region's Hessian noise);
    noise mechanisms are left alone.
``no-clip``
    the problem's clipped sums ignore the clipping bound (and the exponential
    selector's scores are not clipped to ``[lo, hi]``).
``tree-one-level``
    a disjoint add to a tree mechanism is charged (and calibrated) as one
    Gaussian instead of the L levels whose nodes contain its leaf.
``no-column-norm``
    ``sqrt-factorization`` noises its rows with ``z max s`` instead of
    ``z |C|_col max s``: the sensitivity of a record, which moves every later
    row, is under-stated by the column norm (1.31 at 8 adds).
``no-running-max``
    a release that covers several adds is noised for the *last* add's
    sensitivity instead of the largest (``sqrt-factorization``'s running
    maximum, the tree mechanisms' node maximum - or, for ``tree`` with
    non-disjoint participation, the node sum): harmless while every add has
    the same sensitivity, a large under-statement after a large add is
    followed by small ones.

The structural faults reach into a mechanism's state (``col_norm``,
``_smax``, ``_sens``) and raise :class:`~dpreg.errors.ParameterError` on a
mechanism that has no such state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError

#: the fault names (``noise-scale`` takes ``=S`` or ``=S@NAME``)
FAULTS = ("noise-scale=S", "noise-scale=S@NAME", "no-clip", "tree-one-level", "no-column-norm",
          "no-running-max")


@dataclass(frozen=True)
class Fault:
    """A deliberate privacy bug.  The audit calls every hook on what it
    builds; the base class changes nothing."""

    name: str

    def noise(self, cls):
        """The noise mechanism class a run builds (and a replay replays)."""
        return cls

    def problem(self, cls):
        """The :class:`~dpreg.problem.Problem` class holding the canary data sets."""
        return cls

    def selector(self, cls):
        """The selector class a selector audit runs."""
        return cls

    def rng(self, stream: str, gen):
        """The Generator of an algorithm's randomness stream ``stream`` (a
        selector's is the stream ``"selector"``)."""
        return gen

    @property
    def needs_algorithm(self) -> bool:
        """Whether the fault changes nothing in a noise mechanism run alone."""
        return False


# ----------------------------------------------------------------- noise-scale
class ScaledNoise:
    """A Generator whose normal, Gumbel and Laplace draws are scaled by ``s``
    about their location; every other method is the Generator's own."""

    def __init__(self, gen, s: float):
        self._g, self._s = gen, s

    def standard_normal(self, *a, **kw):
        return self._g.standard_normal(*a, **kw) * self._s

    def normal(self, loc=0.0, scale=1.0, size=None):
        return self._g.normal(loc, np.asarray(scale) * self._s, size)

    def gumbel(self, loc=0.0, scale=1.0, size=None):
        return self._g.gumbel(loc, np.asarray(scale) * self._s, size)

    def laplace(self, loc=0.0, scale=1.0, size=None):
        return self._g.laplace(loc, np.asarray(scale) * self._s, size)

    def __getattr__(self, name):
        return getattr(self._g, name)


@dataclass(frozen=True)
class NoiseScale(Fault):
    """``noise-scale=S`` / ``noise-scale=S@NAME`` (module docstring)."""

    scale: float = 1.0
    stream: str | None = None

    def noise(self, cls):
        if self.stream is not None:
            return cls
        s = self.scale

        class Faulty(cls):
            def add(self, increment, sensitivity, participation):
                return super().add(increment, float(sensitivity) * s, participation)

        Faulty.__name__ = f"Faulty{cls.__name__}"
        return Faulty

    def rng(self, stream, gen):
        if self.stream is None or self.stream in stream:
            return ScaledNoise(gen, self.scale)
        return gen

    @property
    def needs_algorithm(self) -> bool:
        return self.stream is not None


# ---------------------------------------------------------------------- no-clip
@dataclass(frozen=True)
class NoClip(Fault):
    """``no-clip`` (module docstring)."""

    def problem(self, cls):
        class Unclipped(cls):
            def clipped_grad_sum(self, w, idx, clip):
                return super().clipped_grad_sum(w, idx, np.inf)

            def clipped_diff_sum(self, w, w_prev, idx, clip):
                return super().clipped_diff_sum(w, w_prev, idx, np.inf)

            def clipped_hessian_sum(self, w, idx, clip):
                return super().clipped_hessian_sum(w, idx, np.inf)

            def clipped_zo_sum(self, wa, wb, directions, idx, *, clip, **kw):
                return super().clipped_zo_sum(wa, wb, directions, idx,
                                              **{**kw, "clip": np.inf, "rec_clip": np.inf})

        return Unclipped

    def selector(self, cls):
        if cls.name != "exponential":
            return cls

        class Unclipped(cls):
            def utilities(self, candidates):
                from dpreg_kernels.selection import clipped_phi_sums

                pb = self.problem
                W = np.ascontiguousarray(np.atleast_2d(np.asarray(candidates, dtype=float)))
                phi = pb.loss.scalar_kernels()[0]
                s, _ = clipped_phi_sums(pb.X, pb.y, pb.all_rows, W, phi, -np.inf, np.inf)
                psi = np.array([pb.loss.psi(w) for w in W])
                return s - pb.n * self.lo + pb.n * psi, 0

        Unclipped.__name__ = f"Unclipped{cls.__name__}"
        return Unclipped

    @property
    def needs_algorithm(self) -> bool:
        return True


# --------------------------------------------------------------- tree-one-level
class _LeafChargedOnce:
    """An accountant proxy that charges a disjoint add's L-level tree event
    ``SelfComposed(Gaussian(z), L)`` as one Gaussian."""

    def __init__(self, acc):
        self._acc = acc

    def charge(self, event, group=None, **kw):
        import dp_accounting as dpa

        if group is not None and isinstance(event, dpa.SelfComposedDpEvent):
            event = event.event
        return self._acc.charge(event, group, **kw)

    def __getattr__(self, name):
        return getattr(self._acc, name)


@dataclass(frozen=True)
class TreeOneLevel(Fault):
    """``tree-one-level`` (module docstring)."""

    def noise(self, cls):
        if not hasattr(cls, "node_noise"):
            raise ParameterError("fault tree-one-level needs a tree mechanism (--noise tree)")

        class UnderchargedTree(cls):
            def __init__(self, **kw):
                kw["accountant"] = _LeafChargedOnce(kw["accountant"])
                super().__init__(**kw)

            @classmethod
            def record_event(cls, noise_multiplier, horizon, participation_kind, steps):
                if participation_kind == "disjoint":
                    from ..accounting import gaussian_event

                    return gaussian_event(noise_multiplier)
                return super().record_event(noise_multiplier, horizon, participation_kind, steps)

        UnderchargedTree.__name__ = f"Undercharged{cls.__name__}"
        return UnderchargedTree


# ---------------------------------------------------------------- no-column-norm
@dataclass(frozen=True)
class NoColumnNorm(Fault):
    """``no-column-norm`` (module docstring)."""

    def noise(self, cls):
        class NoColNorm(cls):
            def __init__(self, **kw):
                super().__init__(**kw)
                if not hasattr(self, "col_norm"):
                    raise ParameterError(f"fault no-column-norm needs sqrt-factorization, not {cls.name!r}")
                self.col_norm = 1.0

        NoColNorm.__name__ = f"NoColumnNorm{cls.__name__}"
        return NoColNorm


# ---------------------------------------------------------------- no-running-max
@dataclass(frozen=True)
class NoRunningMax(Fault):
    """``no-running-max`` (module docstring)."""

    def noise(self, cls):
        class LastSensitivity(cls):
            def add(self, increment, sensitivity, participation):
                if hasattr(self, "_smax"):        # sqrt-factorization: the running maximum
                    self._smax = 0.0
                elif hasattr(self, "_sens"):      # tree, tree-honaker: the pending nodes' sensitivities
                    self._sens = [0.0] * len(self._sens)
                else:
                    raise ParameterError(f"fault no-running-max needs sqrt-factorization, tree or "
                                         f"tree-honaker, not {cls.name!r}")
                return super().add(increment, sensitivity, participation)

        LastSensitivity.__name__ = f"LastSensitivity{cls.__name__}"
        return LastSensitivity


def parse_fault(text: str | None) -> Fault | None:
    """The :class:`Fault` named by ``text`` (module docstring); None for None.
    Raises ParameterError for an unknown name or a bad scale."""
    if text is None:
        return None
    if text.startswith("noise-scale="):
        value, _, stream = text.split("=", 1)[1].partition("@")
        try:
            s = float(value)
        except ValueError:
            s = float("nan")
        if not (math.isfinite(s) and s > 0):
            raise ParameterError(f"fault noise-scale=S needs a finite S > 0, got {text!r}")
        if _ and not stream:
            raise ParameterError(f"fault noise-scale=S@NAME needs a stream name after '@', got {text!r}")
        return NoiseScale(text, s, stream or None)
    simple = {"no-clip": NoClip, "tree-one-level": TreeOneLevel, "no-column-norm": NoColumnNorm,
              "no-running-max": NoRunningMax}
    if text in simple:
        return simple[text](text)
    raise ParameterError(f"unknown fault {text!r}; test-only faults: {', '.join(FAULTS)}")
