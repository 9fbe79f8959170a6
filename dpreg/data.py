"""Data: loaders, validation and record-wise preprocessing.

Every loader returns float64 ``(X, y)``.  :func:`prepare` validates (finite
values, 2-D, matching lengths, labels) and scales **each record on its own**
into the unit ball, ``x <- x / max(1, |x|)``: nothing about the data set as a
whole is read to set a bound (privacy rule 5), so the declared loss constants
hold for every record.

The *schema* - the number of features d, the svmlight index base and the
label map - is public input (privacy rule 5): read off the data, one replaced
record could change len(w), shift every column or flip every label.  A
:class:`Schema` declares it (``dpreg run --features D --zero-based/--one-based
--labels NEG,POS``; built-in data sets declare their own).  Labels already in
{-1,+1} or {0,1} use those fixed maps.  Whatever is left to inference is named
in the loader's ``inferred`` list, which the pipeline reports (a one-line
warning and a diagnostics entry).

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


@dataclass(frozen=True)
class Schema:
    """Public layout of a data set (never read off the data unless left None).

    n_features: number of feature columns d (svmlight: indices must be < d)
    zero_based: svmlight feature indices start at 0 (True) or 1 (False)
    labels:     the raw label values of a classification task, in order:
                (negative, positive) for two classes, (c_0, ..., c_{K-1}) for K
    """

    n_features: int | None = None
    zero_based: bool | None = None
    labels: tuple[float, ...] | None = None

    def merged(self, other: "Schema") -> "Schema":
        """This schema with the fields it leaves None taken from ``other``."""
        return Schema(self.n_features if self.n_features is not None else other.n_features,
                      self.zero_based if self.zero_based is not None else other.zero_based,
                      self.labels if self.labels is not None else other.labels)


@dataclass(frozen=True)
class LabelMap:
    """Raw label values -> {-1, +1}.  ``source`` says where the map came from:
    "declared" (public input), "fixed" ({-1,+1} or {0,1}: a documented map that
    depends on no record) or "inferred" (the two values seen in the training
    data; reported as such)."""

    negative: float
    positive: float
    source: str

    @staticmethod
    def for_training(y: np.ndarray, declared: tuple[float, float] | None, where: str) -> "LabelMap":
        """The map for a training set; DataError when it cannot be binary."""
        if declared is not None:
            if len(declared) != 2:
                shown = ",".join(f"{float(v):g}" for v in declared)
                raise DataError(f"{where}: {len(declared)} labels are declared ({shown}) but the loss is binary; "
                                f"use --loss softmax for K classes")
            neg, pos = (float(v) for v in declared)
            if neg == pos:
                raise DataError(f"{where}: the two declared labels must differ, got {neg:g},{pos:g}")
            return LabelMap(neg, pos, "declared")
        vals = np.unique(y)
        hint = (" (a CSV file's label is its FIRST column; put the label column first)"
                if ".csv" in where.lower() else "")
        if len(vals) == 1:
            raise DataError(f"{where}: labels have one class only ({vals[0]:g}); need two{hint}")
        if len(vals) == 2 and set(vals.tolist()) <= {-1.0, 1.0}:
            return LabelMap(-1.0, 1.0, "fixed")
        if len(vals) == 2 and set(vals.tolist()) <= {0.0, 1.0}:
            return LabelMap(0.0, 1.0, "fixed")
        if len(vals) != 2:
            shown = ", ".join(f"{v:g}" for v in vals[:5]) + (", ..." if len(vals) > 5 else "")
            if np.all(vals == np.floor(vals)) and len(vals) <= 1000:
                hint += "; for K classes use --loss softmax (and declare them: --labels a,b,c)"
            raise DataError(f"{where}: labels are not binary ({len(vals)} distinct values: {shown}){hint}")
        return LabelMap(float(vals[0]), float(vals[1]), "inferred")

    def apply(self, y: np.ndarray, where: str) -> np.ndarray:
        """Map raw labels to -1/+1; a label outside the map is a DataError."""
        neg = y == self.negative
        pos = y == self.positive
        bad = ~(neg | pos)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise DataError(f"{where}: label {y[r]:g} at record {r + 1} is neither of the two classes "
                            f"{self.negative:g} (negative) and {self.positive:g} (positive)")
        return np.where(pos, 1.0, -1.0)

    def as_dict(self) -> dict:
        return {"negative": self.negative, "positive": self.positive, "source": self.source}


@dataclass(frozen=True)
class ClassMap:
    """Raw label values of K >= 2 classes -> class indices 0..K-1 (float64), in
    the order of ``classes``: the label map of a multi-class task.  ``source``:
    "declared" (public input: ``--labels a,b,c``, ``classes=``, a data set's
    schema) or "inferred" (the distinct values of the training labels, sorted;
    one record can change it: reported as such)."""

    classes: tuple[float, ...]
    source: str

    @staticmethod
    def for_training(y: np.ndarray | None, declared, where: str) -> "ClassMap":
        """The map for a training set; DataError when it has fewer than two classes."""
        if declared is not None:
            vals = tuple(float(v) for v in declared)
            if len(set(vals)) != len(vals):
                raise DataError(f"{where}: the declared labels must differ, got {','.join(f'{v:g}' for v in vals)}")
            if len(vals) < 2:
                raise DataError(f"{where}: need at least two classes, got {len(vals)}")
            return ClassMap(vals, "declared")
        assert y is not None  # classes are read off y only when none are declared
        found = np.unique(y)
        if len(found) < 2:
            hint = (" (a CSV file's label is its FIRST column; put the label column first)"
                    if ".csv" in where.lower() else "")
            raise DataError(f"{where}: labels have one class only ({found[0]:g}); need two or more{hint}")
        return ClassMap(tuple(float(v) for v in found), "inferred")

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def apply(self, y: np.ndarray, where: str) -> np.ndarray:
        """Raw labels -> class indices; a label outside the map is a DataError."""
        cls = np.asarray(self.classes, dtype=np.float64)
        order = np.argsort(cls, kind="stable")
        srt = cls[order]
        pos = np.searchsorted(srt, y)
        pos = np.minimum(pos, len(srt) - 1)
        bad = srt[pos] != y
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            shown = ",".join(f"{v:g}" for v in self.classes[:10]) + (",..." if len(self.classes) > 10 else "")
            raise DataError(f"{where}: label {y[r]:g} at record {r + 1} is not one of the {len(self.classes)} "
                            f"classes ({shown})")
        return order[pos].astype(np.float64)

    def as_dict(self) -> dict:
        return {"classes": list(self.classes), "source": self.source}


@dataclass
class DatasetSource:
    """A named data source (registered with ``dpreg_register_datasets``).

    ``load(seed)`` returns ``(X, y)`` for training; ``load_test(seed)`` returns
    a held-out set or None.  Synthetic sources use ``seed`` (public randomness:
    the pipeline passes ``--split-seed``, never the mechanisms' secret seed);
    files ignore it.  ``schema`` declares the public layout.
    """

    load: Callable[[int], tuple[np.ndarray, np.ndarray]]
    summary: str
    load_test: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None
    #: label kind the source produces ("binary", "multiclass" or "real")
    labels: str = "binary"
    #: the task the source is for ("binary", "multiclass", "regression"; None:
    #: not declared), which picks the loss of ``--loss auto``
    task: str | None = None
    #: public (lower, upper) bounds of a regression target the source declares
    #: (used by ``--target-bounds auto``, the default), or None
    target_bounds: tuple[float, float] | None = None
    #: public layout: the source's own data never needs inference
    schema: Schema = Schema()
    #: public per-feature (lower, upper) bounds the source declares (used by
    #: ``--scaling auto``, the default), or None
    bounds: tuple[list[float], list[float]] | None = None
    #: the source declares that its features already share one public scale
    #: (one-hot indicators, features generated at unit scale): ``--scaling
    #: auto`` then applies no per-feature map and spends nothing on one
    common_scale: bool = False
    #: the source's records are public (shipped with dpreg, or generated): what
    #: dpreg derives from them (the diagnostics' optimum) may be cached on disk
    #: by default (:mod:`dpreg.usercache`); never set it for private data
    public: bool = False


def is_sparse(X) -> bool:
    """Whether X is a scipy sparse matrix (checked without importing scipy)."""
    return type(X).__module__.startswith("scipy.sparse")


def _strip_compression(path: str) -> str:
    low = path.lower()
    for ext in COMPRESSED:
        if low.endswith(ext):
            return low[: -len(ext)]
    return low


def is_svmlight_path(path: str) -> bool:
    """Whether :func:`load_file` reads ``path`` as svmlight (decided by the
    file's name only - a public fact, unlike the density that decides whether
    the loaded features are stored as CSR)."""
    base = _strip_compression(path)
    return not (base.endswith(".npz") or base.endswith(".csv")) and (
        base.endswith(SVM_EXT) or "." not in os.path.basename(base))


def load_file(path: str, schema: Schema = Schema()) -> tuple[np.ndarray, np.ndarray, dict]:
    """Load ``path`` by its extension (see module docstring); DataError on any
    problem.  Returns ``(X, y, inferred)``: ``inferred`` maps each schema item
    that was read off the data because ``schema`` left it None ("n_features",
    "zero_based") to the value found (empty for CSV and .npz, whose columns are
    explicit)."""
    if not os.path.exists(path):
        raise DataError(f"data file not found: {path}")
    if os.path.isdir(path):
        raise DataError(f"data path is a directory, not a file: {path}")
    base = _strip_compression(path)
    n_features = schema.n_features
    try:
        if base.endswith(".npz") or base.endswith(".csv"):
            X, y = _load_npz(path) if base.endswith(".npz") else _load_csv(path)
            if n_features and X.ndim == 2 and X.shape[1] != n_features:  # columns are explicit here
                raise DataError(f"{path}: {X.shape[1]} features, but {n_features} are expected")
            return X, y, {}
        if base.endswith(SVM_EXT) or "." not in os.path.basename(base):
            return _load_svmlight(path, n_features, schema.zero_based)
    except DataError:
        raise
    except (ValueError, OSError, EOFError, KeyError, IndexError, UnicodeDecodeError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"cannot read {path}: {msg}") from None
    raise DataError(
        f"unknown data format for {path}: use .svm/.libsvm/.txt (svmlight), .csv or .npz "
        "(optionally .bz2/.gz/.xz)"
    )


def _load_svmlight(path, n_features: int | None, zero_based: bool | None):
    """svmlight/libsvm text with a public schema (fast parser, parsed-array
    cache: :mod:`dpreg.svmlight`): the index base declared, or, left None,
    found (one-based unless index 0 occurs); d declared (a larger index is
    refused) or, left None, the largest index.  X stays CSR below the
    parser's density threshold (memory follows the non-zeros)."""
    from .svmlight import load_svmlight

    try:
        X, y, info = load_svmlight(path, n_features=n_features,
                                   zero_based="auto" if zero_based is None else bool(zero_based))
    except ValueError as exc:
        msg = str(exc).splitlines()[0]
        if "one-based" in msg:
            raise DataError(f"{path} has feature index 0, but the file was declared one-based") from None
        if "exceeds n_features" in msg:
            raise DataError(f"{path} has a feature index beyond the declared {n_features} features") from None
        raise DataError(f"cannot parse svmlight file {path}: {msg}") from None
    if X.shape[0] == 0:
        raise DataError(f"{path} contains no records")
    inferred: dict = {}
    if zero_based is None:
        inferred["zero_based"] = info["zero_based_inferred"]
    if n_features is None:
        from .limits import check_inferred_width

        check_inferred_width(int(X.shape[1]), path, int(X.shape[0]))
        inferred["n_features"] = int(X.shape[1])
    return X, np.asarray(y, dtype=np.float64), inferred


def _open_text(path):
    low = path.lower()
    if low.endswith(".bz2"):
        import bz2

        return bz2.open(path, "rt", encoding="utf-8-sig")
    if low.endswith(".gz"):
        import gzip

        return gzip.open(path, "rt", encoding="utf-8-sig")
    if low.endswith(".xz"):
        import lzma

        return lzma.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")  # a byte-order mark is not part of the first record


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
    import zipfile

    try:
        z = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, EOFError, OSError) as exc:
        raise DataError(f"cannot read {path}: not a readable .npz archive ({type(exc).__name__})") from None
    if not hasattr(z, "files"):
        raise DataError(f"{path} holds a single array (.npy), not an .npz archive with arrays 'X' and 'y'")
    with z:
        missing = [k for k in ("X", "y") if k not in z.files]
        if missing:
            raise DataError(f"{path}: .npz needs arrays 'X' and 'y' (missing {', '.join(missing)})")
        X, y = z["X"], z["y"]
        for k, a in (("X", X), ("y", y)):
            if a.dtype.kind not in "biuf":
                raise DataError(f"{path}: array {k!r} must hold real numbers, got dtype {a.dtype}")
        return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def prepare(X, y, *, labels: str, where: str, d: int | None = None,
            copy: bool = True, label_map: LabelMap | None = None,
            min_rows: int = 2, scale_rows: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Validate and preprocess one data set (see module docstring).

    ``labels``: "binary" -> y mapped to +-1 through ``label_map`` (default:
    :meth:`LabelMap.for_training` with nothing declared; test data pass the
    training map, and a label outside it is a DataError), "real" -> kept,
    "ignored" -> zeros.  ``d``: required number of features (test data).
    ``min_rows``: fewest records accepted (2 for training; 1 for prediction).
    ``scale_rows=False`` validates and maps labels only (the pipeline scales
    rows later, after the model's feature map: :mod:`dpreg.preprocess`).
    ``copy=False`` lets it scale a float64 C-contiguous ``X`` in place (the
    pipeline passes arrays it owns): no (n x d) temporary is ever made; the
    check and the scaling are one compiled pass over the rows each
    (:func:`check_finite`, :func:`scale_into_ball`).
    """
    if is_sparse(X):
        return _prepare_csr(X, y, labels=labels, where=where, d=d, copy=copy, label_map=label_map,
                            min_rows=min_rows, scale_rows=scale_rows)
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
    if X.shape[0] < min_rows:
        raise DataError(f"{where}: need at least {min_rows} records, got {X.shape[0]}")
    if X.shape[1] < 1:
        raise DataError(f"{where}: no feature columns")
    if d is not None and X.shape[1] != d:
        if X.shape[1] < d:  # svmlight test files may omit trailing all-zero features
            X = np.hstack([X, np.zeros((X.shape[0], d - X.shape[1]))])
            owned = True
        else:
            raise DataError(f"{where}: {X.shape[1]} features, but the training data has {d}")
    check_finite(X, where)
    y = _checked_labels(y, labels=labels, where=where, label_map=label_map)
    if not scale_rows:
        return X, np.ascontiguousarray(y)
    in_place = (owned or not copy) and X.flags.c_contiguous and X.flags.writeable
    return scale_into_ball(X, in_place=in_place), np.ascontiguousarray(y)


def _work(X) -> int:
    return int(X.shape[0]) * int(X.shape[1])


def check_finite(X, where: str) -> None:
    """DataError naming the first NaN or infinite entry of the dense ``X``
    (record and column, 1-based); one compiled pass over the rows
    (:data:`dpreg_kernels.rows.first_nonfinite`)."""
    from dpreg_kernels import rows

    from .problem import _want_parallel

    C = X if (X.dtype == np.float64 and X.flags.c_contiguous) else np.ascontiguousarray(X, dtype=np.float64)
    k = int(rows.first_nonfinite.pick(_want_parallel(_work(C)))(C))
    if k >= 0:
        r, c = divmod(k, C.shape[1])
        raise DataError(f"{where}: non-finite feature value {C[r, c]} at record {r + 1}, column {c + 1}")


def scale_into_ball(X, *, in_place: bool = False, column: float | None = None) -> np.ndarray:
    """Every row of the dense, finite ``X`` scaled into the unit ball, ``x /
    max(1, |x|)`` (overflow-safe norm), in one compiled pass
    (:data:`dpreg_kernels.rows.scale_rows`); with ``column`` the result gets
    one more column of that value (the intercept feature).  ``in_place``
    (without ``column``): scale a C-contiguous float64 ``X`` itself.  Each
    record's scaling depends on that record alone."""
    from dpreg_kernels import rows

    from .problem import _want_parallel

    C = X if (X.dtype == np.float64 and X.flags.c_contiguous) else np.ascontiguousarray(X, dtype=np.float64)
    n, p = C.shape
    if column is None and in_place and C is X and X.flags.writeable:
        out, copy = X, False
    else:
        out, copy = np.empty((n, p + (column is not None)), dtype=np.float64), True
    rows.scale_rows.pick(_want_parallel(_work(C)))(C, out, float(column) if column is not None else 0.0, copy)
    return out


def _checked_labels(y, *, labels, where, label_map):
    """Labels checked finite and mapped as ``labels`` says ("binary": to -1/+1
    by ``label_map`` or the fixed/inferred training map; "ignored": zeros;
    else unchanged) - shared by the dense and CSR paths of :func:`prepare`."""
    if not np.isfinite(y).all():
        r = int(np.flatnonzero(~np.isfinite(y))[0])
        raise DataError(f"{where}: non-finite label {y[r]} at record {r + 1}")
    if labels == "binary":
        return (label_map or LabelMap.for_training(y, None, where)).apply(y, where)
    if labels == "ignored":
        return np.zeros_like(y)
    return y


def _prepare_csr(X, y, *, labels, where, d, copy, label_map, min_rows, scale_rows):
    """:func:`prepare` for a scipy sparse X: the same checks on the stored
    values, labels mapped the same way, rows scaled in place on a CSR copy
    (:func:`dpreg.svmlight.scale_rows_csr`); the result stays CSR."""
    from .svmlight import scale_rows_csr

    X = X.tocsr(copy=copy)
    if X.dtype != np.float64:
        X = X.astype(np.float64)
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise DataError(f"{where}: labels must be 1-D, got shape {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise DataError(f"{where}: {X.shape[0]} feature rows but {y.shape[0]} labels")
    if X.shape[0] < min_rows:
        raise DataError(f"{where}: need at least {min_rows} records, got {X.shape[0]}")
    if d is not None and X.shape[1] != d:
        raise DataError(f"{where}: {X.shape[1]} features, but the training data has {d}")
    bad = ~np.isfinite(X.data)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        r = int(np.searchsorted(X.indptr, k, side="right") - 1)
        raise DataError(f"{where}: non-finite feature value {X.data[k]} at record {r + 1}, "
                        f"column {int(X.indices[k]) + 1}")
    y = _checked_labels(y, labels=labels, where=where, label_map=label_map)
    if scale_rows:
        scale_rows_csr(X)
    return X, np.ascontiguousarray(y)


def split(X, y, fraction: float, seed: int):
    """Seeded random split: (X_train, y_train, X_test, y_test).  ``seed`` is
    public (``--split-seed``): which records are held out is not a mechanism
    secret."""
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
