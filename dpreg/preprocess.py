"""Record preprocessing that is part of the released model.

Every record goes through the same three public steps, in order, before the
model sees it; :class:`Preprocessing` holds them and is released with the
model, so :meth:`Preprocessing.transform` repeats them exactly at prediction
time:

1. **feature map** (optional), per column j: ``x_j <- x_j / s_j`` clipped to
   ``[-1, 1]``, with ``s_j`` from

   * public, declared bounds (``--bounds FILE``: per column ``lower, upper``;
     the map is then ``(2 x_j - lower_j - upper_j) / (upper_j - lower_j)``
     clipped to ``[-1, 1]``, as diffprivlib's ``bounds=``), or
   * a private estimate (``--scaling private``): the geometric mean of each
     column's non-zero magnitudes, from Gaussian-noised sums of
     ``clip(log10|x_ij|, -6, 6)`` and of non-zero indicators
     (:func:`private_scales`), charged to the run's one accountant before the
     run, which calibrates to what is left;
2. **row scaling** into the unit ball, ``x <- x / max(1, |x|)`` (always: it is
   what makes the losses' declared constants hold for every record);
3. **intercept column** (``fit_intercept``, on by default for classifiers): a
   constant feature ``intercept_scaling`` (default 0.5) appended to every record, so the bias
   is one more coordinate of ``w`` inside every clipped per-record gradient,
   Hessian and Hessian-vector product - privacy is unchanged, and the row
   norm bound becomes ``sqrt(1 + intercept_scaling^2)`` (:attr:`row_bound`),
   which scales the loss constants (:meth:`dpreg.problem.Problem.constants`).

Nothing here reads the data except the private estimate, which is accounted.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .errors import DataError, ParameterError

#: feature-map modes of ``--scaling`` ("auto": the data set's declared bounds
#: if it declares any, else "private" when :func:`private_scaling_pays` says the
#: estimate is precise enough at this n, d and budget, else "none")
MODES = ("auto", "none", "bounds", "private")
#: log10 magnitudes are clipped to this range by the private estimate
LOG_RANGE = (-6.0, 6.0)


@dataclass
class Preprocessing:
    """The public preprocessing of a model (see module docstring)."""

    n_features: int
    feature_map: str = "none"
    lower: list[float] | None = None
    upper: list[float] | None = None
    intercept: bool = True
    #: value of the constant feature.  0.5 keeps the row bound at sqrt(1.25) = 1.12, so
    #: the declared constants (clip, smoothness, hence the step 1/M) grow by 12 % and 25 %
    #: instead of 41 % and 100 % at 1; chosen on adult's training accuracy with
    #: adaptive-spider at eps = 1, 3 seeds: 0.811 at 1, 0.825 at 0.5, 0.826 at 0.25
    intercept_scaling: float = 0.5

    def __post_init__(self):
        if self.feature_map not in MODES[1:]:
            raise ParameterError(f"feature map must be one of {', '.join(MODES)}, got {self.feature_map!r}")
        if self.feature_map != "none":
            lo = np.asarray(self.lower, dtype=float)
            hi = np.asarray(self.upper, dtype=float)
            if lo.shape != (self.n_features,) or hi.shape != (self.n_features,):
                raise ParameterError(f"bounds need {self.n_features} lower and upper values, "
                                     f"got {lo.size} and {hi.size}")
            if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
                raise ParameterError("bounds need finite lower < upper for every feature")
        if not (math.isfinite(self.intercept_scaling) and self.intercept_scaling > 0):
            raise ParameterError(f"intercept scaling must be a finite number > 0, got {self.intercept_scaling!r}")

    @property
    def row_bound(self) -> float:
        """Largest norm of a transformed record."""
        return math.sqrt(1.0 + self.intercept_scaling ** 2) if self.intercept else 1.0

    @property
    def n_weights(self) -> int:
        """Length of the model's weight vector."""
        return self.n_features + int(self.intercept)

    def transform(self, X, *, where: str = "data", in_place: bool = False) -> np.ndarray:
        """The model's view of raw records ``X`` (n x n_features): feature map,
        unit-ball row scaling, intercept column.  Validates shape and finiteness.
        ``in_place`` lets it overwrite a float64 C-contiguous ``X`` it owns."""
        from .data import is_sparse, prepare, scale_into_ball

        sparse = is_sparse(X)
        if not sparse:
            X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise DataError(f"{where}: expected {self.n_features} features, got shape {X.shape}")
        if sparse:  # CSR in, CSR out: row scaling and the intercept keep it sparse
            if self.feature_map != "none":
                raise DataError(f"{where}: --scaling {self.feature_map} maps features into [-1, 1], which "
                                "fills in a sparse data set; use --scaling none for sparse input")
            import scipy.sparse as sp

            X, _ = prepare(X, np.zeros(X.shape[0]), labels="ignored", where=where, copy=not in_place,
                           min_rows=1)
            if self.intercept:
                X = sp.hstack([X, sp.csr_matrix(np.full((X.shape[0], 1), self.intercept_scaling))],
                              format="csr")
            return X
        X, _ = prepare(X, np.zeros(X.shape[0]), labels="ignored", where=where, min_rows=1, scale_rows=False)
        if self.feature_map != "none":
            lo = np.asarray(self.lower)
            hi = np.asarray(self.upper)
            X = np.clip((2.0 * X - lo - hi) / (hi - lo), -1.0, 1.0)
            in_place = True
        # row scaling and the intercept column in one pass (a new array with the column)
        return scale_into_ball(X, in_place=in_place, column=self.intercept_scaling if self.intercept else None)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["row_scaling"] = "unit ball: x / max(1, |x|)"
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Preprocessing":
        keys = ("n_features", "feature_map", "lower", "upper", "intercept", "intercept_scaling")
        return cls(**{k: d[k] for k in keys if k in d})


def read_bounds(path: str, n_features: int) -> tuple[list[float], list[float]]:
    """Per-feature public bounds from a CSV file: either two rows (lower values,
    upper values) or ``n_features`` rows ``lower,upper``.  DataError otherwise."""
    try:
        A = np.loadtxt(path, delimiter=",", ndmin=2, encoding="utf-8-sig")
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read bounds file {path}: {str(exc).splitlines()[0]}") from None
    if A.shape == (2, n_features):
        lo, hi = A[0], A[1]
    elif A.shape == (n_features, 2):
        lo, hi = A[:, 0], A[:, 1]
    else:
        raise DataError(f"bounds file {path}: expected 2 rows of {n_features} values or {n_features} rows "
                        f"'lower,upper', got shape {A.shape}")
    return [float(v) for v in lo], [float(v) for v in hi]


def scale_event(noise_multiplier: float):
    """The exposure of one record to :func:`private_scales`: two Gaussian
    releases (log-magnitude sums and non-zero counts) at multiplier z."""
    from .accounting import gaussian_event, self_composed

    return self_composed(gaussian_event(noise_multiplier), 2)


#: ``--scaling auto`` estimates scales privately only when a fully non-zero
#: column's mean log10 magnitude gets noise of at most this std (0.5: scales
#: right within a factor ~3), computed from public n, d, epsilon and delta
AUTO_PRIVATE_MAX_LOG_STD = 0.5


def private_scale_log_std(n: int, d: int, accountant, epsilon: float) -> float:
    """The noise std of :func:`private_scales`' mean log10 magnitude for a
    column that is non-zero in every record: ``z * factor * 6 sqrt(d) / n``
    with z the multiplier that ``epsilon`` of ``accountant`` buys.  A function
    of public quantities only (n, d, the budget); charges and reserves
    nothing on ``accountant`` (it calibrates a fresh one of the same kind)."""
    z = accountant.fresh(epsilon, accountant.delta).calibrate(scale_event)
    bound = max(abs(LOG_RANGE[0]), abs(LOG_RANGE[1]))
    return float(z * accountant.sensitivity_factor * bound * math.sqrt(d) / n)


def private_scaling_pays(n: int, d: int, accountant, epsilon: float) -> bool:
    """Whether ``--scaling auto`` should spend ``epsilon`` on private feature
    scales for dense-format data (CSV, .npz, dense arrays) without declared
    bounds (svmlight files get none: their storage follows their density).  Measured
    (experiments/results/scaling.md, training accuracy, eps = 1, 5 seeds):
    private scales beat per-record scaling on IJCNN1 (n = 49,990, d = 22:
    dp-sgd 0.917 -> 0.922, adaptive-spider 0.905 -> 0.912); on breast-cancer
    without its bounds (n = 455, where this rule says no) they are noisy
    (dp-sgd 0.688 -> 0.779, adaptive-spider 0.612 -> 0.587).  So auto uses
    them only where the estimate is precise (:data:`AUTO_PRIVATE_MAX_LOG_STD`);
    the rule reads only public n, d and the budget."""
    return private_scale_log_std(n, d, accountant, epsilon) <= AUTO_PRIVATE_MAX_LOG_STD


def private_scales(X: np.ndarray, accountant, rng: np.random.Generator, epsilon: float,
                   ) -> tuple[list[float], list[float], dict]:
    """Per-feature symmetric bounds ``[-s_j, s_j]`` with ``s_j`` a private
    estimate of the geometric mean of column j's non-zero magnitudes.

    Two sums over records of d-vectors are released with Gaussian noise:
    ``a_i = clip(log10|x_ij|, -6, 6)`` on non-zeros (0 elsewhere) and the
    non-zero indicators ``c_i``; per record ``|a_i| <= 6 sqrt(d)`` and
    ``|c_i| <= sqrt(d)``, so each sum has l2 sensitivity ``factor`` times that
    (``factor`` 2 under replace-one, 1 under zero-out).  The noise multiplier is
    calibrated so the two releases spend ``epsilon`` of ``accountant`` (charged
    before the releases).  A column whose noisy count is below
    ``max(1, 6 z factor sqrt(d) / AUTO_PRIVATE_MAX_LOG_STD)`` (too few
    non-zeros for a useful estimate) gets scale 1.  Returns ``(lower, upper, info)``.
    """
    X = np.asarray(X, dtype=np.float64)
    sums, counts = scale_statistics(X, np.zeros(X.shape[1]), np.zeros(X.shape[1]))
    return release_scales(sums, counts, X.shape[1], accountant, rng, epsilon)


#: rows per block of :func:`scale_statistics` (its temporaries are a block's size)
SCALE_ROWS = 8192


def scale_statistics(X: np.ndarray, sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Add the records of ``X`` to the two sums :func:`private_scales`
    releases - per feature, ``clip(log10|x_ij|, -6, 6)`` over non-zeros, and
    the non-zero count - in blocks of :data:`SCALE_ROWS` rows, in place; returns
    ``(sums, counts)``.  Called on consecutive row ranges whose lengths are
    multiples of the block (the last aside), it adds in the same order as
    one call on their concatenation (a sharded source's shards are read so)."""
    n = X.shape[0]
    for lo in range(0, n, SCALE_ROWS):  # no (n x d) temporary beyond a block
        B = X[lo:lo + SCALE_ROWS]
        nz = B != 0
        with np.errstate(divide="ignore"):
            lg = np.clip(np.log10(np.abs(B)), *LOG_RANGE)
        sums += np.where(nz, lg, 0.0).sum(axis=0)
        counts += nz.sum(axis=0)
    return sums, counts


def release_scales(sums: np.ndarray, counts: np.ndarray, d: int, accountant, rng: np.random.Generator,
                   epsilon: float) -> tuple[list[float], list[float], dict]:
    """The noisy release of :func:`private_scales` from the records' sums
    (:func:`scale_statistics`): calibrated to ``epsilon`` of ``accountant``,
    charged before the two releases; returns ``(lower, upper, info)``."""
    from .accounting import gaussian_event
    from .interfaces import Participation, charge

    view = accountant.view(epsilon, accountant.delta)
    z = view.calibrate(scale_event)
    f = accountant.sensitivity_factor
    bound = max(abs(LOG_RANGE[0]), abs(LOG_RANGE[1]))
    out = []
    for vec, sens in ((sums, f * bound * math.sqrt(d)), (counts, f * math.sqrt(d))):
        charge(view, gaussian_event(z), Participation.all(), label="private feature scales")
        out.append(vec + rng.standard_normal(d) * (z * sens))
    nsum, ncount = out
    # a column whose noisy count is too small for its mean log magnitude to
    # have noise std <= AUTO_PRIVATE_MAX_LOG_STD keeps scale 1: a ratio of two
    # noisy numbers near zero is garbage (rare one-hot columns got scales 1e6)
    min_count = max(1.0, bound * z * f * math.sqrt(d) / AUTO_PRIVATE_MAX_LOG_STD)
    ok = ncount >= min_count
    logs = np.where(ok, np.clip(nsum / np.maximum(ncount, 1.0), *LOG_RANGE), 0.0)
    s = 10.0 ** logs
    return ([float(-v) for v in s], [float(v) for v in s],
            {"epsilon": epsilon, "noise_multiplier": z, "releases": 2})
