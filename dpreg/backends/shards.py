"""Shard files: finding them, reading them in blocks, preparing their records.

A *sharded source* is a directory of shard files (its files of one known
format, sorted by name; hidden files and names starting with ``_`` are
skipped) or a glob pattern (the matching files, sorted).  Formats, by
extension:

* Parquet (``.parquet``, ``.pq``; needs ``pyarrow``): the label is the column
  ``y`` (``DIR:label=NAME`` names another), every other column is a feature,
  in the file's order; read in row batches;
* ``.npz``: arrays ``X`` (n x d) and ``y`` (n), ``X`` streamed from the
  archive in row blocks (stored or deflated);
* svmlight/libsvm text (the extensions of :mod:`dpreg.data`): parsed whole,
  kept CSR when sparse; the schema (``--features``, ``--zero-based`` /
  ``--one-based``) must be declared, since one shard could otherwise read
  differently from another;
* CSV (label first): parsed whole.

The schema is public input, as for single files (privacy rule 5): the
feature count comes from the declaration or from each file's own layout
(columns, array shapes), never from the values; every shard must agree with
it.  Each shard's size is public (n, the sum of the sizes, is public under
both relations dpreg uses).  The label map is declared (``--labels``) or one
of the fixed maps ({-1,+1}, {0,1}) that every shard's labels fit; a sharded
source's labels are never inferred.

:func:`prepare_shard` turns one shard's raw records into the
:class:`~dpreg.problem.Problem` its holder keeps: records validated, labels
mapped, and the model's public preprocessing applied to each record on its
own (:meth:`dpreg.preprocess.Preprocessing.transform`, block by block into
one preallocated array: peak memory is the prepared shard plus one block).
"""
from __future__ import annotations

import glob
import os
import zipfile
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..data import COMPRESSED, Schema, is_svmlight_path
from ..errors import DataError

#: rows per block when a shard is streamed (a multiple of the 8,192-row blocks of
#: :func:`dpreg.preprocess.private_scales` and :func:`dpreg.data.prepare`, so a
#: shard's block-wise statistics add up in the same order as a whole array's)
BLOCK_ROWS = 1 << 16
PARQUET_EXT = (".parquet", ".pq")
SHARD_FORMATS = ("parquet", "npz", "svmlight", "csv")
_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class ShardFile:
    """One shard of a source: its position in the source's order, its path,
    format and size in bytes on disk (file-system metadata, public)."""

    index: int
    path: str
    format: str
    bytes: int


@dataclass(frozen=True)
class ShardOptions:
    """How shards are read: the declared schema and the Parquet label column."""

    schema: Schema = field(default_factory=Schema)
    label_column: str = "y"


def format_of(path: str) -> str | None:
    """The shard format of ``path`` by its name, or None."""
    low = path.lower()
    base = low
    for ext in COMPRESSED:
        if base.endswith(ext):
            base = base[: -len(ext)]
    if low.endswith(PARQUET_EXT):
        return "parquet"
    if base.endswith(".npz"):
        return "npz"
    if base.endswith(".csv"):
        return "csv"
    if is_svmlight_path(path):
        return "svmlight"
    return None


def is_glob(spec: str) -> bool:
    return any(c in spec for c in _GLOB_CHARS)


def split_source(spec: str) -> tuple[str, dict]:
    """``"PATH"`` or ``"PATH:key=value,..."`` -> (PATH, options).  A string
    that names an existing path (or matches files as a glob) has no options."""
    if os.path.exists(spec) or (is_glob(spec) and glob.glob(spec)) or ":" not in spec:
        return spec, {}
    path, _, opts = spec.rpartition(":")
    out = {}
    for part in opts.split(","):
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            return spec, {}  # not options: a path with a colon
        out[k.strip()] = v.strip()
    return path, out


def looks_sharded(spec) -> bool:
    """Whether ``spec`` (a ``--data`` value) names a sharded source: a
    directory, or a glob pattern that is not itself a file."""
    if not isinstance(spec, str):
        return False
    path, _ = split_source(spec)
    return os.path.isdir(path) or (is_glob(path) and not os.path.exists(path))


def discover(spec: str) -> list[ShardFile]:
    """The shard files of a source (see the module docstring), in order;
    DataError when there are none, or when they mix formats."""
    if os.path.isdir(spec):
        names = sorted(n for n in os.listdir(spec) if not n.startswith((".", "_")))
        paths = [os.path.join(spec, n) for n in names if os.path.isfile(os.path.join(spec, n))]
        paths = [p for p in paths if format_of(p) is not None]
        where = f"directory {spec}"
    elif is_glob(spec):
        paths = sorted(p for p in glob.glob(spec) if os.path.isfile(p))
        where = f"pattern {spec}"
    elif os.path.isfile(spec):
        paths, where = [spec], spec
    else:
        raise DataError(f"data not found: {spec}")
    if not paths:
        raise DataError(f"no shard files in {where} (formats: .parquet, .npz, svmlight, .csv)")
    formats = {format_of(p) for p in paths}
    if None in formats:
        bad = next(p for p in paths if format_of(p) is None)
        raise DataError(f"{bad}: unknown shard format (use .parquet, .npz, svmlight or .csv)")
    if len(formats) > 1:
        raise DataError(f"the shards in {where} mix formats ({', '.join(sorted(formats))}); use one")
    return [ShardFile(i, os.path.abspath(p), format_of(p), os.path.getsize(p)) for i, p in enumerate(paths)]


# --------------------------------------------------------------------- readers
class ShardReader:
    """One shard file as its holder reads it: ``rows``, ``features``, the raw
    ``labels()``, and the raw features either as row ``blocks()`` (Parquet,
    .npz, dense text) or as one ``matrix()`` (svmlight, CSV)."""

    def __init__(self, f: ShardFile, opts: ShardOptions):
        self.file = f
        self.where = f"data shard {f.path}"
        self.opts = opts
        self._whole = None
        try:
            if f.format == "parquet":
                self._open_parquet()
            elif f.format == "npz":
                self._open_npz()
            else:
                self._load_whole()
        except DataError:
            raise
        except (ValueError, OSError, EOFError, KeyError, IndexError, zipfile.BadZipFile) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DataError(f"cannot read {f.path}: {msg}") from None
        d = opts.schema.n_features
        if d is not None and self.features != d:
            raise DataError(f"{self.where}: {self.features} features, but {d} are declared")
        if self.rows < 1:
            raise DataError(f"{self.where} contains no records")

    @property
    def streamed(self) -> bool:
        """Whether the features are read in blocks (else one whole matrix)."""
        return self._whole is None

    # ---------------------------------------------------------------- Parquet
    def _open_parquet(self):
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:  # pragma: no cover - depends on the environment
            raise DataError("Parquet shards need pyarrow: pip install 'dpreg[distributed]'") from None
        pf = pq.ParquetFile(self.file.path)
        names = pf.schema_arrow.names
        label = self.opts.label_column
        if label not in names:
            raise DataError(f"{self.where}: no label column {label!r} (columns: {', '.join(names[:8])}"
                            f"{', ...' if len(names) > 8 else ''}); name it with DIR:label=NAME")
        for name in names:
            t = pf.schema_arrow.field(name).type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
                raise DataError(f"{self.where}: column {name!r} is not numeric ({t})")
        self._pf = pf
        self._columns = [c for c in names if c != label]
        self.rows = int(pf.metadata.num_rows)
        self.features = len(self._columns)
        if self.features < 1:
            raise DataError(f"{self.where}: no feature columns")

    @staticmethod
    def _column(col, name, where, lo):
        if col.null_count:
            import pyarrow.compute as pc

            r = int(pc.index(pc.is_null(col), True).as_py())
            raise DataError(f"{where}: missing value in column {name!r} at record {lo + r + 1}")
        return col.to_numpy(zero_copy_only=False)

    def _parquet_labels(self):
        t = self._pf.read(columns=[self.opts.label_column])
        return np.asarray(self._column(t.column(0), self.opts.label_column, self.where, 0), dtype=np.float64)

    def _parquet_blocks(self):
        lo = 0
        for batch in self._pf.iter_batches(batch_size=BLOCK_ROWS, columns=self._columns):
            B = np.empty((batch.num_rows, self.features), dtype=np.float64)
            for j, name in enumerate(self._columns):
                B[:, j] = self._column(batch.column(j), name, self.where, lo)
            yield lo, B
            lo += batch.num_rows

    # -------------------------------------------------------------------- npz
    def _open_npz(self):
        with zipfile.ZipFile(self.file.path) as zf:
            members = set(zf.namelist())
            missing = [k for k in ("X", "y") if f"{k}.npy" not in members]
            if missing:
                raise DataError(f"{self.where}: .npz needs arrays 'X' and 'y' (missing {', '.join(missing)})")
            with zf.open("X.npy") as fh:
                shape, fortran, dtype = _npy_header(fh)
        if len(shape) != 2:
            raise DataError(f"{self.where}: X must be a 2-D array, got shape {shape}")
        if dtype.kind not in "biuf":
            raise DataError(f"{self.where}: array 'X' must hold real numbers, got dtype {dtype}")
        self.rows, self.features = int(shape[0]), int(shape[1])
        self._npz = (dtype, fortran)

    def _npz_labels(self):
        with np.load(self.file.path, allow_pickle=False) as z:
            y = z["y"]
        if y.dtype.kind not in "biuf":
            raise DataError(f"{self.where}: array 'y' must hold real numbers, got dtype {y.dtype}")
        return np.asarray(y, dtype=np.float64).reshape(-1)

    def _npz_blocks(self):
        dtype, fortran = self._npz
        if fortran:  # column-major X cannot be streamed by rows: read it whole
            with np.load(self.file.path, allow_pickle=False) as z:
                X = np.ascontiguousarray(z["X"], dtype=np.float64)
            for lo in range(0, self.rows, BLOCK_ROWS):
                yield lo, np.array(X[lo:lo + BLOCK_ROWS])
            return
        row_bytes = self.features * dtype.itemsize
        with zipfile.ZipFile(self.file.path) as zf, zf.open("X.npy") as fh:
            _npy_header(fh)
            for lo in range(0, self.rows, BLOCK_ROWS):
                k = min(BLOCK_ROWS, self.rows - lo)
                buf = fh.read(k * row_bytes)
                if len(buf) != k * row_bytes:
                    raise DataError(f"{self.where}: array 'X' is truncated")
                yield lo, np.frombuffer(buf, dtype=dtype).reshape(k, self.features).astype(np.float64)

    # ------------------------------------------------------- whole-file formats
    def _load_whole(self):
        from ..data import load_file

        schema = self.opts.schema
        if self.file.format == "svmlight" and (schema.n_features is None or schema.zero_based is None):
            raise DataError(f"{self.where}: svmlight shards need their schema declared (--features D and "
                            f"--zero-based/--one-based): each shard would otherwise be read by its own")
        X, y, _ = load_file(self.file.path, Schema(schema.n_features, schema.zero_based))
        if X.ndim != 2:
            raise DataError(f"{self.where}: features must be a 2-D array, got shape {X.shape}")
        if schema.n_features is not None and X.shape[1] < schema.n_features:  # trailing all-zero features
            import scipy.sparse as sp

            pad = schema.n_features - X.shape[1]
            X = (sp.hstack([X, sp.csr_matrix((X.shape[0], pad))], format="csr") if sp.issparse(X)
                 else np.hstack([X, np.zeros((X.shape[0], pad))]))
        self._whole = (X, np.asarray(y, dtype=np.float64))
        self.rows, self.features = int(X.shape[0]), int(X.shape[1])

    # ----------------------------------------------------------------- public
    def labels(self) -> np.ndarray:
        """The shard's raw labels (float64, length ``rows``)."""
        if self._whole is not None:
            y = self._whole[1]
        elif self.file.format == "parquet":
            y = self._parquet_labels()
        else:
            y = self._npz_labels()
        if y.shape != (self.rows,):
            raise DataError(f"{self.where}: {self.rows} feature rows but {y.shape[0]} labels")
        if not np.all(np.isfinite(y)):
            r = int(np.flatnonzero(~np.isfinite(y))[0])
            raise DataError(f"{self.where}: non-finite label {y[r]} at record {r + 1}")
        return y

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, float64 C-contiguous block)`` over the shard, in
        order, :data:`BLOCK_ROWS` rows at a time (a dense whole matrix is cut
        the same way)."""
        if self._whole is not None:
            X = self._whole[0]
            for lo in range(0, self.rows, BLOCK_ROWS):
                yield lo, np.array(X[lo:lo + BLOCK_ROWS], dtype=np.float64)
        elif self.file.format == "parquet":
            yield from self._parquet_blocks()
        else:
            yield from self._npz_blocks()

    def matrix(self):
        """The whole-file formats' feature matrix (dense or CSR), else None."""
        return None if self._whole is None else self._whole[0]

    def release(self) -> None:
        """Forget a whole-file shard's raw matrix (it has been prepared)."""
        self._whole = None if self._whole is None else (None, self._whole[1])


def _npy_header(fh):
    """``(shape, fortran_order, dtype)`` of the .npy stream ``fh``, leaving it at the data."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fh)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fh)
    raise ValueError(f".npy format version {version} is not supported")


# ----------------------------------------------------------------- labels
def label_values(y: np.ndarray) -> list[float]:
    """Up to three distinct values of ``y`` (its two extremes first): what the
    driver needs to check a fixed label map and two classes."""
    lo, hi = float(y.min()), float(y.max())
    other = y[(y != lo) & (y != hi)]
    vals = sorted({lo, hi})
    return vals + ([float(other[0])] if other.size else [])


def map_labels(y: np.ndarray, labels: str, label_map, target, where: str) -> np.ndarray:
    """Labels as the problem sees them: through ``label_map`` when there is
    one (two classes to -1/+1, K classes to 0..K-1; DataError naming the first
    label outside it), zeros for a loss that ignores them, regression targets
    checked and through the public ``target`` transform when there is one,
    anything else kept."""
    if label_map is not None:
        return np.ascontiguousarray(label_map.apply(y, where))
    if labels == "ignored":
        return np.zeros_like(y)
    if target is not None:
        from ..tasks import check_regression_targets

        check_regression_targets(y, where)
        return np.ascontiguousarray(target.apply(y), dtype=np.float64)
    return np.ascontiguousarray(y, dtype=np.float64)


# ---------------------------------------------------------------- prepare
def _check_finite(B: np.ndarray, lo: int, where: str) -> None:
    bad = ~np.isfinite(B)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(f"{where}: non-finite feature value {B[r, c]} at record {lo + r + 1}, column {c + 1}")


def scale_statistics(reader: ShardReader):
    """The sums :func:`dpreg.preprocess.private_scales` releases, over this
    shard: ``(sum of clipped log10 magnitudes, non-zero counts)`` per feature,
    accumulated in the same 8,192-row blocks as over a whole array."""
    from ..preprocess import scale_statistics as stats

    sums = np.zeros(reader.features)
    counts = np.zeros(reader.features)
    for lo, B in reader.blocks():
        _check_finite(B, lo, reader.where)
        stats(B, sums, counts)
    return sums, counts


def prepare_shard(reader: ShardReader, y: np.ndarray, prep, loss):
    """The :class:`~dpreg.problem.Problem` of one shard: its records validated
    and passed through ``prep`` (feature map, unit-ball row scaling,
    intercept column) each on its own, written block by block into one
    preallocated float64 array (CSR for sparse whole-file shards), with the
    labels ``y`` as the problem sees them (:func:`map_labels`)."""
    from ..problem import make_problem

    if reader.features != prep.n_features:
        raise DataError(f"{reader.where}: {reader.features} features, but the source has {prep.n_features}")
    whole = reader.matrix()
    if whole is not None and not isinstance(whole, np.ndarray):  # CSR: transformed whole (memory follows nnz)
        X = prep.transform(whole, where=reader.where, in_place=True)
    else:
        X = np.empty((reader.rows, prep.n_weights), dtype=np.float64)
        for lo, B in reader.blocks():
            _check_finite(B, lo, reader.where)
            X[lo:lo + B.shape[0]] = prep.transform(B, where=reader.where, in_place=True)
    reader.release()
    return make_problem(loss, X, y, name=reader.file.path, row_bound=prep.row_bound)
