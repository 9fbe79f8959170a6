"""svmlight/libsvm files: parsing, a parsed-array cache, and dense-or-sparse storage.

:func:`load_svmlight` parses a file (optionally .bz2/.gz/.xz) with
scikit-learn's compiled parser and returns the features as a dense float64
array or a ``scipy.sparse.csr_matrix``:

* **sparse** (CSR, memory proportional to the non-zeros) when the density
  ``nnz / (n d)`` is below :data:`SPARSE_BELOW` (0.25: above it the dense
  kernels, which read a row without index look-ups, are faster per non-zero),
  or when the dense array would not fit in :data:`DENSE_MEMORY_FRACTION` of
  the available memory - a 2 kB file with one large feature index is never
  densified;
* **dense** (C-contiguous float64) otherwise.

Parsed-array cache (opt-in: ``DPREG_DATA_CACHE=1``): parsing a compressed
text file costs seconds (IJCNN1: 1.7 s, of which bz2 is about half), every
time.  With the opt-in, the raw parse (CSR with the file's own indices, and
the labels) is stored in the user cache directory - ``$DPREG_CACHE_DIR``,
else ``$XDG_CACHE_HOME/dpreg``, else ``~/.cache/dpreg`` - under
``svmlight/<blake2b of the file's bytes>.npz``: keyed by the *content*, so an
edited or replaced file is parsed again, and a renamed or copied one is not.
The entry is a copy of the data: it is written 0600 in 0700 directories and
stays readable by its owner until removed, whatever becomes of the original
file, which is why it is kept only on request (:mod:`dpreg.usercache`: the
privacy rules, the refused directories).  Without the opt-in
(``DPREG_DATA_CACHE`` unset or 0) nothing is read or written.  A cache
entry that cannot be read is ignored and rewritten; an unusable cache
directory only costs the speed-up.

Index base and feature count are applied after the (cached) parse, so they
never change the cache key: ``zero_based="auto"`` takes the file as one-based
unless it uses index 0 (scikit-learn's rule), and ``n_features`` fixes the
column count (a larger index is an error).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

#: below this density (non-zeros / (n d)) the features stay sparse (CSR)
SPARSE_BELOW = 0.25
#: a dense array may use at most this fraction of the available memory
DENSE_MEMORY_FRACTION = 0.5
#: bumped when the cache file layout changes (old entries are then ignored)
_CACHE_FORMAT = 1


def cache_dir() -> Path | None:
    """The parsed-array cache directory (0700), or None unless the user opted
    in (``DPREG_DATA_CACHE=1``) and the directory is theirs alone
    (:mod:`dpreg.usercache`)."""
    from .usercache import cache_root, safe_dir

    root = cache_root(public=False)
    return None if root is None else safe_dir(root / "svmlight")


def content_hash(path: str) -> str:
    """blake2b (128-bit) of the file's bytes."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _parse(path: str):
    """(data, indices, indptr, y): the file's raw parse, indices as written."""
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(path, zero_based=True, dtype=np.float64)
    X.sort_indices()
    return (np.asarray(X.data, dtype=np.float64), np.asarray(X.indices, dtype=np.int64),
            np.asarray(X.indptr, dtype=np.int64), np.asarray(y, dtype=np.float64))


def _read_cache(file: Path):
    try:
        with np.load(file, allow_pickle=False) as z:
            if int(z["format"]) != _CACHE_FORMAT:
                return None
            return z["data"], z["indices"], z["indptr"], z["y"]
    except (OSError, ValueError, KeyError, EOFError):
        return None


def _write_cache(file: Path, parts) -> bool:
    from .usercache import store

    data, indices, indptr, y = parts
    return store(file, lambda fh: np.savez(fh, format=np.int64(_CACHE_FORMAT), data=data, indices=indices,
                                                  indptr=indptr, y=y))


def _available_memory() -> int:
    """Bytes of memory available now (MemAvailable on Linux; else physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 33


def load_svmlight(path: str, *, n_features: int | None = None, zero_based: bool | str = "auto"):
    """Load an svmlight/libsvm file: ``(X, y, info)``.

    ``X`` is a C-contiguous float64 array or a ``scipy.sparse.csr_matrix``
    (sorted indices, int64 index arrays), chosen as the module docstring says;
    ``y`` float64.  ``zero_based``: True, False, or "auto" (one-based unless
    index 0 occurs).  ``n_features``: the column count (ValueError naming
    ``n_features`` if the file has a larger index); else max index + 1.
    ``info``: ``n_features_inferred`` (max index + 1 after the index base),
    ``zero_based_inferred``, ``sparse``, ``density``, ``cache`` ("hit",
    "miss" or "off").  ValueError for a file that cannot be parsed."""
    import scipy.sparse as sp

    if zero_based not in (True, False, "auto"):
        raise ValueError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
    cdir = cache_dir()
    parts = None
    status = "off"
    if cdir is not None:
        entry = cdir / f"{content_hash(path)}.npz"
        parts = _read_cache(entry) if entry.exists() else None
        status = "hit" if parts is not None else "miss"
    if parts is None:
        parts = _parse(path)
        if cdir is not None:
            _write_cache(entry, parts)
    data, indices, indptr, y = parts
    n = len(y)
    lo = int(indices.min()) if indices.size else 1
    hi = int(indices.max()) if indices.size else -1
    zb = (lo == 0) if zero_based == "auto" else bool(zero_based)
    if not zb:
        if lo < 1:
            raise ValueError(f"{path}: feature index 0 in a one-based file")
        indices = indices - 1
        hi -= 1
    inferred = hi + 1
    d = inferred if n_features is None else int(n_features)
    if n_features is not None and inferred > d:
        raise ValueError(f"{path}: feature index {inferred} exceeds n_features={d}")
    d = max(d, 1)
    nnz = int(data.size)
    density = nnz / (n * d) if n else 0.0
    dense_bytes = n * d * 8
    sparse = density < SPARSE_BELOW or dense_bytes > DENSE_MEMORY_FRACTION * _available_memory()
    X = sp.csr_matrix((data, indices, indptr), shape=(n, d))
    X.indices, X.indptr = indices, indptr  # scipy may have downcast them; the kernels take int64
    X.has_sorted_indices = True
    if not sparse:
        X = np.ascontiguousarray(X.toarray(), dtype=np.float64)
    info = {"n_features_inferred": int(inferred), "zero_based_inferred": bool(zb), "sparse": bool(sparse),
            "density": float(density), "cache": status}
    return X, y, info


def scale_rows_csr(X) -> None:
    """Scale each row of the CSR matrix ``X`` into the unit ball in place,
    ``x <- x / max(1, |x|)`` (overflow-safe norm: each row is divided by its
    largest magnitude first), record by record as :func:`dpreg.data.prepare`
    does for dense data.  ValueError on a non-finite value."""
    data = X.data
    if data.size and not np.isfinite(data).all():
        k = int(np.flatnonzero(~np.isfinite(data))[0])
        row = int(np.searchsorted(X.indptr, k, side="right")) - 1
        raise ValueError(f"non-finite feature value {data[k]} at record {row + 1}, column {X.indices[k] + 1}")
    if not data.size:
        return
    counts = np.diff(X.indptr)
    rows = np.repeat(np.arange(X.shape[0]), counts)
    scale = np.zeros(X.shape[0])
    np.maximum.at(scale, rows, np.abs(data))
    scale[scale == 0] = 1.0
    u = data / scale[rows]
    norms = np.sqrt(np.bincount(rows, weights=u * u, minlength=X.shape[0])) * scale
    shrink = np.maximum(norms, 1.0)
    data /= shrink[rows]
