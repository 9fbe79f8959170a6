"""Data: loaders, validation and record-wise preprocessing.

Every loader returns float64 ``(X, y)``.  :func:`prepare` validates (finite
values, 2-D, matching lengths, labels) and scales **each record on its own**
into the unit ball, ``x <- x / max(1, |x|)``: nothing about the data set as a
whole is read to set a bound (privacy rule 5), so the declared loss constants
hold for every record.

File formats, chosen by extension:
  .svm .svmlight .libsvm .txt .t .trn .tst .scale (optionally .bz2/.gz/.xz):
       svmlight/libsvm text, read by scikit-learn
  .csv (optionally compressed): numbers separated by commas; the label is the
       FIRST column; a first line that is not numeric is taken as a header
  .npz: arrays ``X`` (n x d) and ``y`` (n)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import DataError

SVM_EXT = (".svm", ".svmlight", ".libsvm", ".txt", ".t", ".trn", ".tst", ".scale", ".binary")
COMPRESSED = (".bz2", ".gz", ".xz")


@dataclass
class DatasetSource:
    """A named data source (registered with ``dpreg_register_datasets``).

    ``load(seed)`` returns ``(X, y)`` for training; ``load_test(seed)`` returns
    a held-out set or None.  Synthetic sources use ``seed``; files ignore it.
    """

    load: Callable[[int], tuple[np.ndarray, np.ndarray]]
    summary: str
    load_test: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None
    #: label kind the source produces ("binary" or "real")
    labels: str = "binary"


def _strip_compression(path: str) -> str:
    low = path.lower()
    for ext in COMPRESSED:
        if low.endswith(ext):
            return low[: -len(ext)]
    return low


def load_file(path: str, n_features: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Load ``path`` by its extension (see module docstring); DataError on any problem."""
    if not os.path.exists(path):
        raise DataError(f"data file not found: {path}")
    if os.path.isdir(path):
        raise DataError(f"data path is a directory, not a file: {path}")
    base = _strip_compression(path)
    try:
        if base.endswith(".npz") or base.endswith(".csv"):
            X, y = _load_npz(path) if base.endswith(".npz") else _load_csv(path)
            if n_features and X.ndim == 2 and X.shape[1] != n_features:  # columns are explicit here
                raise DataError(f"{path}: {X.shape[1]} features, but the training data has {n_features}")
            return X, y
        if base.endswith(SVM_EXT) or "." not in os.path.basename(base):
            return _load_svmlight(path, n_features)
    except DataError:
        raise
    except (ValueError, OSError, EOFError, KeyError, IndexError, UnicodeDecodeError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"cannot read {path}: {msg}") from None
    raise DataError(
        f"unknown data format for {path}: use .svm/.libsvm/.txt (svmlight), .csv or .npz "
        "(optionally .bz2/.gz/.xz)"
    )


def _load_svmlight(path, n_features):
    from .svmlight import DENSE_MEMORY_FRACTION, _available_memory, load_svmlight

    try:
        X, y, _info = load_svmlight(path, n_features=n_features or None, zero_based="auto")
    except ValueError as exc:
        msg = str(exc).splitlines()[0]
        if n_features and "n_features" in msg:
            raise DataError(f"{path} has more features than the training data ({n_features})") from None
        raise DataError(f"cannot parse svmlight file {path}: {msg}") from None
    if X.shape[0] == 0:
        raise DataError(f"{path} contains no records")
    if not isinstance(X, np.ndarray):
        # bridge until prepare() takes CSR input (dpreg.svmlight.scale_rows_csr; Problem
        # and the kernels already do): densify, but never beyond the available memory
        need = X.shape[0] * X.shape[1] * 8
        if need > DENSE_MEMORY_FRACTION * _available_memory():
            raise DataError(f"{path}: {X.shape[0]} x {X.shape[1]} features would take {need / 2**30:.1f} GiB "
                            "dense, more than the available memory")
        X = X.toarray()
    return X, y


def _open_text(path):
    low = path.lower()
    if low.endswith(".bz2"):
        import bz2

        return bz2.open(path, "rt")
    if low.endswith(".gz"):
        import gzip

        return gzip.open(path, "rt")
    if low.endswith(".xz"):
        import lzma

        return lzma.open(path, "rt")
    return open(path, encoding="utf-8")


def _load_csv(path):
    with _open_text(path) as fh:
        lines = [ln for ln in fh.read().splitlines() if ln.strip()]
    if not lines:
        raise DataError(f"{path} contains no records")

    def numeric(line):
        try:
            [float(t) for t in line.split(",")]
            return True
        except ValueError:
            return False

    if not numeric(lines[0]):
        lines = lines[1:]
        if not lines:
            raise DataError(f"{path} contains a header but no records")
    rows = []
    width = None
    for k, ln in enumerate(lines, start=1):
        parts = ln.split(",")
        if width is None:
            width = len(parts)
        if len(parts) != width:
            raise DataError(f"{path}: record {k} has {len(parts)} columns, expected {width}")
        try:
            rows.append([float(t) for t in parts])
        except ValueError:
            raise DataError(f"{path}: record {k} has a non-numeric value") from None
    A = np.asarray(rows, dtype=np.float64)
    if A.shape[1] < 2:
        raise DataError(f"{path}: need a label column and at least one feature column")
    return np.ascontiguousarray(A[:, 1:]), A[:, 0].copy()


def _load_npz(path):
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in ("X", "y") if k not in z.files]
        if missing:
            raise DataError(f"{path}: .npz needs arrays 'X' and 'y' (missing {', '.join(missing)})")
        X, y = z["X"], z["y"]
        for k, a in (("X", X), ("y", y)):
            if a.dtype.kind not in "biuf":
                raise DataError(f"{path}: array {k!r} must hold real numbers, got dtype {a.dtype}")
        return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def binary_labels(y: np.ndarray, where: str) -> np.ndarray:
    """Map two distinct label values to -1 (smaller) and +1 (larger); DataError otherwise.

    Pass ``classes`` fixed by the training set for test data via
    :func:`binary_labels_like`.
    """
    vals = np.unique(y)
    if len(vals) == 1:
        raise DataError(f"{where}: labels have one class only ({vals[0]:g}); need two")
    if len(vals) != 2:
        shown = ", ".join(f"{v:g}" for v in vals[:5]) + (", ..." if len(vals) > 5 else "")
        raise DataError(f"{where}: labels are not binary ({len(vals)} distinct values: {shown})")
    return np.where(y == vals[1], 1.0, -1.0)


#: rows per block in :func:`prepare` (bounds its temporaries to a few MB)
_PREP_ROWS = 8192


def prepare(X, y, *, labels: str, where: str, d: int | None = None,
            copy: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Validate and preprocess one data set (see module docstring).

    ``labels``: "binary" -> y mapped to +-1 (DataError unless exactly two
    values... a test set may hold one class if ``d`` is given), "real" -> kept,
    "ignored" -> zeros.  ``d``: required number of features (test data).
    ``copy=False`` lets it scale a float64 C-contiguous ``X`` in place (the
    pipeline passes arrays it owns): no (n x d) temporary is ever made, rows
    are checked and scaled in blocks of ``_PREP_ROWS``.
    """
    X0 = X
    X = np.asarray(X, dtype=np.float64)
    owned = X is not X0
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2:
        raise DataError(f"{where}: features must be a 2-D array, got shape {X.shape}")
    if y.ndim != 1:
        raise DataError(f"{where}: labels must be 1-D, got shape {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise DataError(f"{where}: {X.shape[0]} feature rows but {y.shape[0]} labels")
    if X.shape[0] < 2:
        raise DataError(f"{where}: need at least 2 records, got {X.shape[0]}")
    if X.shape[1] < 1:
        raise DataError(f"{where}: no feature columns")
    if d is not None and X.shape[1] != d:
        if X.shape[1] < d:  # svmlight test files may omit trailing all-zero features
            X = np.hstack([X, np.zeros((X.shape[0], d - X.shape[1]))])
            owned = True
        else:
            raise DataError(f"{where}: {X.shape[1]} features, but the training data has {d}")
    n = X.shape[0]
    for lo in range(0, n, _PREP_ROWS):
        bad = ~np.isfinite(X[lo:lo + _PREP_ROWS])
        if bad.any():
            r, c = np.argwhere(bad)[0]
            r += lo
            raise DataError(f"{where}: non-finite feature value {X[r, c]} at record {r + 1}, column {c + 1}")
    if not np.isfinite(y).all():
        r = int(np.flatnonzero(~np.isfinite(y))[0])
        raise DataError(f"{where}: non-finite label {y[r]} at record {r + 1}")
    if labels == "binary":
        if d is not None and len(np.unique(y)) == 1:
            v = np.unique(y)[0]
            if v not in (-1.0, 1.0):
                raise DataError(f"{where}: a one-class test set must use labels -1/+1, got {v:g}")
            y = y.copy()
        else:
            y = binary_labels(y, where)
    elif labels == "ignored":
        y = np.zeros_like(y)
    # record-wise scaling into the unit ball; overflow-safe norm; block by block
    in_place = (owned or not copy) and X.flags.c_contiguous and X.flags.writeable
    out = X if in_place else np.empty(X.shape, dtype=np.float64)
    for lo in range(0, n, _PREP_ROWS):
        B = X[lo:lo + _PREP_ROWS]
        scale = np.max(np.abs(B), axis=1)
        scale[scale == 0] = 1.0
        norms = np.linalg.norm(B / scale[:, None], axis=1) * scale
        shrink = np.maximum(norms, 1.0)
        np.divide(B, shrink[:, None], out=out[lo:lo + _PREP_ROWS])
    return out, np.ascontiguousarray(y)


def split(X, y, fraction: float, seed: int):
    """Seeded random split: (X_train, y_train, X_test, y_test)."""
    if not 0 < fraction < 1:
        raise DataError(f"test fraction must be in (0, 1), got {fraction}")
    n = X.shape[0]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5B1D]))
    perm = rng.permutation(n)
    k = int(round(n * fraction))
    if k < 1 or n - k < 2:
        raise DataError(f"test fraction {fraction} leaves no usable split of {n} records")
    te, tr = np.sort(perm[:k]), np.sort(perm[k:])
    return X[tr], y[tr], X[te], y[te]
