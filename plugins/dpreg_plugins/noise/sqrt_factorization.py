"""The ``sqrt-factorization`` continual-release mechanism: the square-root
factorisation of the prefix-sum matrix (Henzinger, Upadhyay, Upadhyay SODA'23;
Fichtenberger, Henzinger, Upadhyay ICML'23; spec
../shared/specs/remaining-seeds.md section (d)).  Single participation only.

The prefix-sum matrix A (H x H lower-triangular ones) is A = C C with C its
lower-triangular Toeplitz square root, ``C[t, j] = c_{t-j}``,
``c_k = binom(2k, k) / 4^k`` (``c_0 = 1``, ``c_k = c_{k-1} (2k - 1) / (2k)``:
the Taylor coefficients of (1 - x)^(-1/2)).  The mechanism releases
``C (C v + n)`` = the exact prefix sums plus correlated noise::

    out_t = sum_{i <= t} v_i + sum_{j <= t} c_{t-j} sigma_j zeta_j,
    sigma_j = z * |C|_col * max_{i <= j} s_i,   |C|_col^2 = sum_{k < H} c_k^2

with ``zeta_j`` i.i.d. N(0, I).  Equivalently, at step j the row
``(C v)_j + sigma_j zeta_j`` is released (C is invertible, so the two are
post-processing of each other).

Privacy (disjoint participation, a record in one add i with sensitivity s_i):
the record moves row j >= i by ``c_{j-i} Delta_i`` with ``|Delta_i| <= s_i``,
released with noise ``sigma_j >= z |C|_col s_i`` (the running max covers every
earlier leaf), so the squared sensitivity-to-noise ratios over all rows sum to
at most ``sum_{k < H} c_k^2 / (z^2 |C|_col^2) = 1 / z^2``: one
``Gaussian(z)``, charged to the record's group at add time, before anything is
released.  C is lower triangular, so row j depends only on adds 1..j and the
guarantee holds for adaptively chosen increments and sensitivities (Denisov et
al. NeurIPS'22; the ratio bound holds for every realisation, which is what
fully adaptive RDP composition needs).  "all"/"poisson" participation and a
group added twice in one phase are refused: with multiple participation the
column-norm argument fails and the factorisation loses its advantage.

Per-coordinate variance at step t with equal sensitivities s:
``(z s)^2 |C|_col^2 sum_{k < t} c_k^2`` (~ (z s)^2 (ln t ln H) / pi^2 - for
H = 16 at most 3.78 (z s)^2 where ``tree`` reaches 20 and ``gaussian`` 16 at
equal epsilon).

Noise ``zeta_j`` is a pure function of (secret seed, tag, phase, j).  Memory:
the scaled rows ``sigma_j zeta_j`` are cached (O(H d), time O(t d) per add, one
matrix-vector product) while ``horizon * dim * 8`` bytes stay within
:attr:`SqrtFactorizationMechanism.cache_bytes`; beyond it only the scalars
``sigma_j`` are kept and the ``zeta_j`` are regenerated at every add (O(d)
memory, O(t) generator calls per add, about 30x slower at H = 1024, d = 123:
see docs/experiment-noise.md).  Both paths release the same values (up to
floating-point summation order).
"""
from __future__ import annotations

import functools
import math
from typing import ClassVar

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import gaussian_event
from dpreg.interfaces import charge, Participation

from .single_participation import SingleParticipationMechanism, refuse_non_disjoint


@functools.lru_cache(maxsize=8)
def _coefficients(n: int) -> np.ndarray:
    k = np.arange(1, n, dtype=float)
    c = np.concatenate(([1.0], np.cumprod((2 * k - 1) / (2 * k))))[:n]
    c.setflags(write=False)
    return c


def sqrt_coefficients(n: int) -> np.ndarray:
    """The first ``n`` coefficients c_k = binom(2k, k) / 4^k of the square root
    of the prefix-sum matrix (c_0 = 1, c_k = c_{k-1} (2k - 1) / (2k)); a
    read-only array, cached (calibration builds many mechanisms of one horizon)."""
    return _coefficients(int(n))


def column_norm(horizon: int) -> float:
    """|C|_col = sqrt(sum_{k < horizon} c_k^2): the largest column norm of C
    (the first column's), the sensitivity multiplier of the factorisation."""
    return math.sqrt(float(np.sum(sqrt_coefficients(horizon) ** 2)))


class SqrtFactorizationMechanism(SingleParticipationMechanism):
    """Square-root (Toeplitz) factorisation of the prefix-sum matrix; one Gaussian(z) per record."""

    name = "sqrt-factorization"
    summary = ("square-root matrix factorisation (prefix noise variance grows as log t log H); "
               "single pass only")
    tag = 0x53515254  # "SQRT"
    #: largest noise cache (horizon x dim float64) kept in memory; beyond it
    #: the noise rows are regenerated from the seed at every add
    cache_bytes: ClassVar[int] = 256 * 2**20

    def __init__(self, **kw):
        H = int(kw["horizon"])
        self.coef = sqrt_coefficients(max(H, 1))
        self.col_norm = math.sqrt(float(np.sum(self.coef ** 2)))
        self.cached = H * int(kw["dim"]) * 8 <= self.cache_bytes
        self._rows = np.empty((H, int(kw["dim"]))) if self.cached else None
        super().__init__(**kw)

    def reset(self) -> None:
        super().reset()
        self._sum = np.zeros(self.dim)
        self._sigma: list[float] = []  # sigma_j of the adds so far in this phase
        self._smax = 0.0

    def stored_vectors(self) -> int:
        """d-vectors in use: the exact sum, plus the cached noise rows written so
        far (the cache is allocated H x d up front; pages are touched as rows are
        written)."""
        return 1 + (len(self._sigma) if self.cached else 0)

    def row_noise(self, j: int) -> np.ndarray:
        """Unit-variance noise zeta of row j (0-based) of the current phase."""
        return self.unit_noise(j)

    def add(self, increment: np.ndarray, sensitivity: float, participation: Participation) -> np.ndarray:
        v, s = self._check(increment, sensitivity, participation)
        # ---- charge BEFORE anything is released (nothing changes if refused)
        charge(self.accountant, gaussian_event(self.z), participation, label=f"{self.name} row")
        self._groups.add((participation.pass_id, participation.group))
        t = self.steps + 1
        self._smax = max(self._smax, s)
        sigma = self.z * self.col_norm * self._smax
        self._sigma.append(sigma)
        self._sum += v
        weights = self.coef[t - 1::-1]  # c_{t-j} for j = 1..t
        if self.cached:
            self._rows[t - 1] = self.row_noise(t - 1) * sigma
            noise = weights @ self._rows[:t]
        else:
            noise = np.zeros(self.dim)
            for j in range(t):
                noise += (weights[j] * self._sigma[j]) * self.row_noise(j)
        self.steps = t
        return self._sum + noise

    @classmethod
    def record_event(cls, noise_multiplier, horizon, participation_kind, steps):
        """One Gaussian(z) for a disjoint record, whatever ``horizon`` and
        ``steps``; other participation is refused."""
        refuse_non_disjoint(cls.name, participation_kind)
        return gaussian_event(noise_multiplier)

    @classmethod
    def noise_std_per_step(cls, noise_multiplier, sensitivity, t, *, horizon):
        """z s |C|_col(horizon) sqrt(sum_{k < t} c_k^2) for equal sensitivities s
        (the prefix noise depends on the horizon through the column norm)."""
        c = sqrt_coefficients(int(t))
        return noise_multiplier * sensitivity * column_norm(horizon) * math.sqrt(float(np.sum(c * c)))


@hookimpl
def dpreg_register_noises(register):
    register(SqrtFactorizationMechanism.name, SqrtFactorizationMechanism,
             summary=SqrtFactorizationMechanism.summary)
