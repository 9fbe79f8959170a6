"""Built-in data sources.

* ``adult`` (the default of ``dpreg run``): UCI Adult in the a9a encoding,
  shipped with the package (``data/adult_a9a.npz.xz``, CC BY 4.0, citation in
  ``data/README.md``): 32,561 x 123 binary features, official 16,281-record
  test split, label +1 = income > 50K.  Schema declared (d = 123, labels
  -1/+1): nothing is inferred.
* ``breast-cancer``: scikit-learn's bundled Wisconsin breast-cancer file (569 x 30),
  labels malignant=-1, benign=+1.  It declares public per-feature bounds
  (:data:`BREAST_CANCER_UPPER`): lower 0 (every feature is a non-negative
  measurement) and an upper bound rounded *up* from the maximum published in
  the data set's own documentation (scikit-learn's DESCR table), so they say
  nothing beyond that public table; ``--scaling auto`` maps each feature into
  [-1, 1] with them.  Nothing is estimated from the data.
* ``digits`` (10 classes): scikit-learn's bundled handwritten digits, 1,797 x 64
  pixel counts, each an integer in 0..16 (the data set's documentation): a
  common public scale, so ``--scaling auto`` applies no per-feature map.
  Labels 0..9, declared; ``--loss auto`` is softmax.
* ``wine`` (3 classes): scikit-learn's bundled wine recognition data, 178 x 13,
  labels 0..2 declared; public per-feature bounds from the minima and maxima
  of the data set's published summary table (:data:`WINE_LOWER`,
  :data:`WINE_UPPER`: each widened outwards to two significant digits).
* ``diabetes`` (regression): scikit-learn's bundled diabetes data, 442 x 10;
  the documentation states each feature is mean-centred and scaled to a sum of
  squares of 1 (standard deviation 1/sqrt(442) = 0.048), so public bounds
  [-0.2, 0.2] (4.2 documented standard deviations; values beyond are clipped)
  map the features into [-1, 1].  The target (disease progression) has no
  published range: ``--target-bounds auto`` estimates one privately, or
  declare ``--target-bounds LO,HI``.  ``--loss auto`` is squared.
* ``synthetic-logistic``: Gaussian features, labels from a planted logistic model
  (options n, d, noise).
* ``synthetic-regression``: Gaussian features, targets ``y = <x, w*> + noise``
  from a planted linear model (options n, d, noise), a fresh test set of n/4;
  the target range is not declared (``--target-bounds auto`` estimates it).
* ``synthetic-covtype``: the shape of Covertype (581,012 x 54) with the same
  planted model - the papers' large data set, which is not available offline.
* ``lowy-synthetic``: x uniform in the unit ball of R^d, n = d = 100 (warm-start
  paper, section 9); a fresh test set of the same size.
* ``phase-retrieval``: y = <x, w*>^2 with x uniform on the unit sphere
  (options n, d), for the strict-saddle loss ``phase-retrieval``.

Synthetic names take options: ``synthetic-logistic:n=5000,d=10``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from dpreg import hookimpl
from dpreg.data import DatasetSource, Schema

ADULT_FILE = "adult_a9a.npz.xz"
ADULT_FEATURES = 123
ADULT_SCHEMA = Schema(n_features=ADULT_FEATURES, zero_based=True, labels=(-1.0, 1.0))


def _adult(part: str):
    """The shipped a9a split ``part`` ("train"/"test") as dense (X, y)."""
    import io
    import lzma
    from importlib import resources

    raw = resources.files("dpreg_plugins.datasets").joinpath("data").joinpath(ADULT_FILE).read_bytes()
    with np.load(io.BytesIO(lzma.decompress(raw))) as z:
        indptr, indices, y = z[f"{part}_indptr"], z[f"{part}_indices"], z[f"{part}_y"]
    n = len(indptr) - 1
    X = np.zeros((n, ADULT_FEATURES))
    rows = np.repeat(np.arange(n), np.diff(indptr))
    X[rows, indices.astype(np.int64)] = 1.0
    return X, np.where(y > 0, 1.0, -1.0)


#: public upper bounds of the 30 breast-cancer features: the maxima of the
#: data set's published description (x 1.0001), each rounded up to two significant digits
BREAST_CANCER_UPPER = [
    29, 40, 190, 2600, 0.17, 0.35, 0.43, 0.21, 0.31, 0.098,
    2.9, 4.9, 22, 550, 0.032, 0.14, 0.4, 0.054, 0.08, 0.031,
    37, 50, 260, 4300, 0.23, 1.1, 1.3, 0.3, 0.67, 0.21]


def _breast_cancer(seed):
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    return X, np.where(y == 1, 1.0, -1.0)


#: public bounds of the 13 wine features: the published minima and maxima (the
#: data set's summary table in scikit-learn's DESCR), widened outwards to two
#: significant digits
WINE_LOWER = [11, 0.73, 1.3, 10, 69, 0.97, 0.33, 0.12, 0.4, 1.2, 0.47, 1.2, 270]
WINE_UPPER = [15, 5.9, 3.3, 31, 170, 3.9, 5.2, 0.67, 3.7, 14, 1.8, 4.1, 1700]


def _digits(seed):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def _wine(seed):
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def _diabetes(seed):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def _fits(n, d):
    """Refuse (ValueError) a synthetic size that is not positive or would not fit
    in half the available memory, before allocating anything."""
    from dpreg.svmlight import _available_memory

    if n < 2 or d < 1:
        raise ValueError(f"need n >= 2 and d >= 1, got n={n}, d={d}")
    need = 8 * n * d * 2
    if need > 0.5 * _available_memory():
        raise ValueError(f"n={n} x d={d} needs {need / 2**30:.1f} GiB, more than half the available memory")


def _planted_logistic(n, d, seed, noise=1.0, stream=0):
    _fits(n, d)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xDA7A, stream]))
    w_star = np.random.default_rng(np.random.SeedSequence([seed, 0xBEEF])).standard_normal(d)
    w_star *= 3.0 / np.linalg.norm(w_star)
    X = rng.standard_normal((n, d))
    X /= np.sqrt(d)  # in place: no second (n x d) array
    p = 1.0 / (1.0 + np.exp(-(X @ w_star) / max(noise, 1e-12)))
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    return X, y


def _planted_linear(n, d, seed, noise=0.5, stream=0):
    _fits(n, d)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x11EA, stream]))
    w_star = np.random.default_rng(np.random.SeedSequence([seed, 0xBEE5])).standard_normal(d)
    w_star *= 3.0 / np.linalg.norm(w_star)
    X = rng.standard_normal((n, d))
    X /= np.sqrt(d)
    y = X @ w_star + float(noise) * rng.standard_normal(n)
    return X, y


def _ball(n, d, rng):
    g = rng.standard_normal((n, d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g * rng.random(n)[:, None] ** (1.0 / d)


def _lowy(n, d, seed, stream):
    _fits(n, d)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x10E1, stream]))
    return _ball(n, d, rng), np.zeros(n)


def _phase(n, d, seed, stream):
    _fits(n, d)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9A5E, stream]))
    w_star = np.zeros(d)
    w_star[0] = 1.0
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, (X @ w_star) ** 2


SOURCES: dict[str, Callable[..., DatasetSource]] = {
    "adult": lambda: DatasetSource(
        lambda s: _adult("train"),
        "UCI Adult (a9a encoding), 32,561 x 123, official test split; shipped, CC BY 4.0",
        load_test=lambda s: _adult("test"), schema=ADULT_SCHEMA, common_scale=True, public=True),
    "breast-cancer": lambda: DatasetSource(
        _breast_cancer, "Wisconsin breast cancer, 569 x 30 (bundled with scikit-learn); public feature bounds",
        schema=Schema(n_features=30, labels=(-1.0, 1.0)),
        bounds=([0.0] * 30, [float(v) for v in BREAST_CANCER_UPPER]), public=True),
    "digits": lambda: DatasetSource(
        _digits, "handwritten digits, 1,797 x 64 pixel counts 0..16, 10 classes (bundled with scikit-learn)",
        schema=Schema(n_features=64, labels=tuple(float(k) for k in range(10))), labels="multiclass",
        task="multiclass", common_scale=True, public=True),
    "wine": lambda: DatasetSource(
        _wine, "wine recognition, 178 x 13, 3 classes (bundled with scikit-learn); public feature bounds",
        schema=Schema(n_features=13, labels=(0.0, 1.0, 2.0)), labels="multiclass", task="multiclass",
        bounds=([float(v) for v in WINE_LOWER], [float(v) for v in WINE_UPPER]), public=True),
    "diabetes": lambda: DatasetSource(
        _diabetes, "diabetes progression, 442 x 10, regression (bundled with scikit-learn); public feature bounds",
        schema=Schema(n_features=10), labels="real", task="regression",
        bounds=([-0.2] * 10, [0.2] * 10), public=True),
    "synthetic-logistic": lambda n=10000, d=20, noise=1.0: DatasetSource(
        lambda s: _planted_logistic(int(n), int(d), s, float(noise)),
        "planted logistic model, Gaussian features (options n, d, noise)",
        load_test=lambda s: _planted_logistic(max(int(n) // 4, 2), int(d), s, float(noise), stream=1),
        common_scale=True, public=True),
    "synthetic-regression": lambda n=10000, d=20, noise=0.5: DatasetSource(
        lambda s: _planted_linear(int(n), int(d), s, float(noise)),
        "planted linear model y = <x, w*> + noise, Gaussian features (options n, d, noise)",
        load_test=lambda s: _planted_linear(max(int(n) // 4, 2), int(d), s, float(noise), stream=1),
        labels="real", task="regression", common_scale=True, public=True),
    "synthetic-covtype": lambda n=581012, d=54: DatasetSource(
        lambda s: _planted_logistic(int(n), int(d), s),
        "Covertype-shaped planted logistic data, 581,012 x 54 (options n, d)", common_scale=True, public=True),
    "lowy-synthetic": lambda n=100, d=100: DatasetSource(
        lambda s: _lowy(int(n), int(d), s, 0),
        "x uniform in the unit ball, n = d = 100 (warm-start paper section 9)",
        load_test=lambda s: _lowy(int(n), int(d), s, 1), labels="ignored", common_scale=True, public=True),
    "phase-retrieval": lambda n=2000, d=10: DatasetSource(
        lambda s: _phase(int(n), int(d), s, 0),
        "y = <x, e1>^2, x uniform on the unit sphere (options n, d)",
        load_test=lambda s: _phase(int(n), int(d), s, 1), labels="real", common_scale=True, public=True),
}


@hookimpl
def dpreg_register_datasets(register):
    for name, factory in SOURCES.items():
        register(name, factory, summary=factory().summary)
