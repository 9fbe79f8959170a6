"""The ``zeroth-order`` oracle: gradient estimators from function values only
(Algs 1, 2 and 6 of zhang-tran-cutkosky-2024-private-zeroth-order.txt).

With ``u_ij`` uniform on the unit sphere (``g/|g|``, ``g ~ N(0, I)``; d
independent directions per record, drawn in numpy from the caller's secret
Generator) and ``h`` the smoothing radius (the paper's delta):

* GRAD(w, z_1:b)    = (1/b) sum_i sum_j c_ij u_ij,
  c_ij = clip_[-L, L]((f(w + h u_ij; z_i) - f(w - h u_ij; z_i)) / (2h))      (Alg 1)
* DIFF(x, y, z_1:b) = (1/b) sum_i sum_j (1/h) c_ij u_ij,
  c_ij = clip_[-L|x-y|, L|x-y|](f(x + h u_ij; z_i) - f(y + h u_ij; z_i))     (Alg 2)
  (the **same** u_ij at both points)
* NAIVE(w, z_1:b)   = (1/b) sum_i d c_i u_i, one direction per record,
  c_i as in GRAD                                                           (Alg 6)

Practical options (off by default here; ``zo-o2nc`` turns them on outside
``preset=theory``): ``record_clip`` C clips each record's term to norm C
(GRAD, NAIVE) or C |x - y| / h (DIFF) - a d L bound is loose by about
sqrt(d)/|grad f| for d random directions, so C sets the sensitivity instead
(``min(d L, C)`` in place of ``d L``); ``symmetric_diff`` estimates DIFF as
GRAD(x) - GRAD(y) with the same directions (coefficients
``[(f(x+hu) - f(y+hu)) - (f(x-hu) - f(y-hu))]/2``, still at most L|x - y|,
still unbiased for grad F_h(x) - grad F_h(y)), which drops Alg 2's
common-mode term ``<grad f, x - y> u`` of norm about sqrt(d)|grad f||x-y|/h.

(Alg 1's ``(1/d) sum_j d (...)`` is ``sum_j``.)  ``directions`` J < d uses J
directions per record instead of d, each term scaled by d/J (coefficients
clipped to (d/J) L): ``(d/J) sum_{j<=J} c_ij u_ij`` has the same expectation
and the same norm bound d L (so the same sensitivities), a variance about d/J
times larger per record, and costs J/d of the work - the d x d directions per
record are most of a zeroth-order run at large d.  Both are unbiased for the
uniform smoothing ``F_h(w) = E_{v ~ U(ball)} F(w + h v)`` when f is
L-Lipschitz (Lemmas 3.1-3.2).  Only the data part ``phi`` of the loss is
clipped; a record's term then has norm at most ``d L`` (GRAD, NAIVE) or
``d L |x - y| / h`` (DIFF) whatever its data, so replacing one record moves the
mean by at most ``factor`` times that over ``b`` (``factor`` = 2 replace-one,
1 add-remove): the sensitivities of Lemmas 3.1-3.2 with ``factor = 2``,
enforced.  The data-independent part psi (a regulariser) is added unclipped,
estimated with the first record's directions (unbiased for its smoothing;
nothing private in it).

Memory: the b x d x d directions of a GRAD call are never held at once:
records are processed in blocks of ``max(1, DIRECTION_FLOATS // (J d))``
(J directions each), one ``(block, J, d)`` direction array per block.
"""
from __future__ import annotations

import numpy as np

from dpreg import hookimpl
from dpreg.interfaces import Estimate, LinearModelLoss, Oracle, Participation

#: at most this many floats of directions are held at once (8 MiB)
DIRECTION_FLOATS = 1 << 20


def unit_directions(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Independent directions uniform on the unit sphere, ``shape = (..., d)``
    (normalised Gaussians; a zero draw, probability 0, is redrawn)."""
    U = rng.standard_normal(shape)
    nrm = np.linalg.norm(U, axis=-1, keepdims=True)
    while np.any(nrm == 0.0):  # pragma: no cover - probability zero
        bad = (nrm == 0.0)[..., 0]
        U[bad] = rng.standard_normal((int(bad.sum()), shape[-1]))
        nrm = np.linalg.norm(U, axis=-1, keepdims=True)
    U /= nrm
    return U


class ZerothOrderOracle(Oracle):
    """GRAD / DIFF (and Alg 6's one-direction GRAD) from clipped finite differences."""

    name = "zeroth-order"
    summary = ("zeroth-order GRAD/DIFF (Zhang-Tran-Cutkosky Algs 1-2): d two-point finite differences per "
               "record, each clipped (sensitivity factor*d*L/b and factor*d*L|x-y|/(b h))")

    def __init__(self, problem, *, smoothing: float, lipschitz: float | None = None,
                 rng: np.random.Generator | None = None, record_clip: float | None = None,
                 symmetric_diff: bool = False, directions: int | None = None):
        super().__init__(problem)
        if not (smoothing > 0 and np.isfinite(smoothing)):
            raise ValueError(f"smoothing radius must be a finite positive number, got {smoothing}")
        L = problem.constants()[0] if lipschitz is None else float(lipschitz)
        if not (L > 0 and np.isfinite(L)):
            raise ValueError(f"lipschitz bound must be a finite positive number, got {L}")
        if record_clip is not None and not (record_clip > 0):
            raise ValueError(f"record clip must be a positive number or None, got {record_clip}")
        self.h = float(smoothing)
        self.L = L
        #: per-record norm bound C (GRAD/naive |term| <= C, DIFF <= C |x-y|/h);
        #: None: only the coefficients are clipped (the paper's d L)
        self.record_clip = None if record_clip is None else float(record_clip)
        self.symmetric_diff = bool(symmetric_diff)
        d = problem.d
        if directions is not None and not (1 <= int(directions)):
            raise ValueError(f"directions must be >= 1, got {directions}")
        #: J: directions per record of GRAD and DIFF (d: the paper's)
        self.directions = d if directions is None else min(int(directions), d)
        self.rng = rng
        self.function_evaluations = 0  # loss evaluations (2 per direction per record)
        loss = problem.loss
        self._has_psi = type(loss).psi is not LinearModelLoss.psi

    # ------------------------------------------------------------------ core
    def _bound(self) -> float:
        """A record's term norm bound in gradient units: min(d L, C)."""
        b = self.problem.d * self.L
        return b if self.record_clip is None else min(b, self.record_clip)

    def _sum(self, wa, wb, idx, J, *, sgn, scale, clip, rec_clip=np.inf, sym=False):
        """(sum over records of sum_j c_ij u_ij, n_clipped, first record's
        directions) with directions drawn block by block."""
        if self.rng is None:
            raise ValueError("zeroth-order oracle: no Generator to draw directions from (pass rng=)")
        pb = self.problem
        d = pb.d
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        b = len(idx)
        blk = max(1, DIRECTION_FLOATS // (J * d))
        total = np.zeros(d)
        nclip = 0
        first = None
        for lo in range(0, b, blk):
            part = idx[lo:lo + blk]
            U = unit_directions(self.rng, (len(part), J, d))
            if first is None:
                first = U[0].copy()
            s, k = pb.clipped_zo_sum(wa, wb, U, part, h=self.h, sgn=sgn, scale=scale, clip=clip,
                                     rec_clip=rec_clip, sym=sym)
            total += s
            nclip += int(k)
        if first is None:  # empty batch: psi's part still needs directions
            first = unit_directions(self.rng, (J, d))
        self.function_evaluations += (4 if sym else 2) * J * b
        return total, nclip, first

    def _psi_part(self, wa, wb, U, *, sgn, scale):
        """sum_j scale (psi(wa + h u_j) - psi(wb + sgn h u_j)) u_j (unclipped:
        data independent)."""
        if not self._has_psi:
            return 0.0
        psi = self.problem.loss.psi
        out = np.zeros(self.problem.d)
        for u in U:
            out += scale * (psi(wa + self.h * u) - psi(wb + sgn * self.h * u)) * u
        return out

    # -------------------------------------------------------------- estimators
    def grad(self, w: np.ndarray, idx: np.ndarray, participation: Participation, *,
             factor: float) -> Estimate:
        """Alg 1: GRAD(w, z_idx); sensitivity ``factor * min(d L, C) / b``."""
        w = np.asarray(w, dtype=float)
        d, b, J = self.problem.d, len(idx), self.directions
        scale = 1.0 / (2.0 * self.h)
        f = d / J  # J directions: each term scaled by d / J (its coefficient clip too): the same bound d L
        s, k, U0 = self._sum(w, w, idx, J, sgn=-1.0, scale=scale * f, clip=self.L * f, rec_clip=self._rec(1.0))
        value = s / max(b, 1) + f * self._psi_part(w, w, U0, sgn=-1.0, scale=scale)
        return Estimate(value, factor * self._bound() / max(b, 1), participation, b, k)

    def _rec(self, unit: float) -> float:
        """The kernel's per-record clip: C x ``unit`` (inf without C)."""
        return np.inf if self.record_clip is None else self.record_clip * unit

    def diff(self, x: np.ndarray, y: np.ndarray, idx: np.ndarray, participation: Participation, *,
             factor: float) -> Estimate:
        """Alg 2: DIFF(x, y, z_idx) with the same directions at x and y;
        sensitivity ``factor * min(d L, C) |x - y| / (b h)`` (0 and a zero
        estimate when x = y).  ``symmetric_diff``: GRAD(x) - GRAD(y) with the
        same directions (4 evaluations per direction; same coefficient bound
        L |x - y|, same sensitivity, no common-mode term)."""
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        d, b = self.problem.d, len(idx)
        dist = float(np.linalg.norm(x - y))
        if dist == 0.0:
            return Estimate(np.zeros(d), 0.0, participation, b, 0)
        sym = self.symmetric_diff
        sc = 0.5 if sym else 1.0
        J = self.directions
        f = d / J
        s, k, U0 = self._sum(x, y, idx, J, sgn=1.0, scale=sc * f, clip=self.L * dist * f,
                             rec_clip=self._rec(dist), sym=sym)
        psi = self._psi_part(x, y, U0, sgn=1.0, scale=sc)
        if sym and self._has_psi:
            psi = psi + self._psi_part(x, y, -U0, sgn=1.0, scale=sc)  # the -u half: (.)(-u)
        value = (s / max(b, 1) + f * psi) / self.h
        return Estimate(value, factor * self._bound() * dist / (max(b, 1) * self.h), participation, b, k)

    def naive(self, w: np.ndarray, idx: np.ndarray, participation: Participation, *,
              factor: float) -> Estimate:
        """Alg 6's estimator: one two-point direction per record, scaled by d;
        sensitivity ``factor * min(d L, C) / b``."""
        w = np.asarray(w, dtype=float)
        d, b = self.problem.d, len(idx)
        scale = 1.0 / (2.0 * self.h)
        s, k, U0 = self._sum(w, w, idx, 1, sgn=-1.0, scale=scale, clip=self.L, rec_clip=self._rec(1.0 / d))
        value = d * (s / max(b, 1) + self._psi_part(w, w, U0, sgn=-1.0, scale=scale))
        return Estimate(value, factor * self._bound() / max(b, 1), participation, b, k)

    def estimate(self, kind: str, *args, **kwargs) -> Estimate:
        """``estimate("grad" | "diff" | "naive", ...)``: the methods above."""
        if kind not in ("grad", "diff", "naive"):
            raise ValueError(f"zeroth-order estimate kind must be grad, diff or naive, got {kind!r}")
        return getattr(self, kind)(*args, **kwargs)


@hookimpl
def dpreg_register_oracles(register):
    register(ZerothOrderOracle.name, ZerothOrderOracle, summary=ZerothOrderOracle.summary)
