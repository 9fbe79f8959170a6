"""Reading raw records: :func:`load_data` (a data-set name, a file or an
``(X, y)`` pair, nothing preprocessed) and :func:`load_prepared` for scripts."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data import is_sparse
from ..errors import DataError, ParameterError
from ..registry import get_registry, parse_name_options


@dataclass
class Loaded:
    """Raw data as loaded, before any preprocessing."""

    X: np.ndarray
    y: np.ndarray
    description: str
    source: Any = None          # a DatasetSource for registered names
    schema: Any = None          # the schema the data was read with
    inferred: dict = field(default_factory=dict)


def load_data(spec, *, schema, split_seed: int, test: bool = False) -> Loaded:
    """Raw (X, y) of a data-set name, a file path or an (X, y) pair; nothing
    preprocessed.  ``schema`` (a :class:`dpreg.data.Schema`) overrides the
    source's declared one; what neither declares is inferred and listed."""
    from ..data import DatasetSource, Schema, load_file

    where = "test data" if test else "data"
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        X, y = spec
        try:
            if is_sparse(X):
                X = X.tocsr().astype(np.float64)
            else:
                X = np.array(X, dtype=np.float64)
            y = np.array(y, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{where}: arrays must hold real numbers: {exc}") from None
        if X.ndim != 2:
            raise DataError(f"{where}: features must be a 2-D array, got shape {X.shape}")
        return Loaded(X, y, f"arrays ({X.shape[0]} x {X.shape[1] if X.ndim == 2 else '?'})",
                      schema=schema)
    if not isinstance(spec, str):
        raise DataError(f"{where} must be a data-set name, a file path or an (X, y) pair; got {type(spec).__name__}")
    reg = get_registry()
    name, kw = parse_name_options(spec)
    if name in reg.names("dataset"):
        factory = reg.get("dataset", name)
        try:
            src: DatasetSource = factory(**kw)
            with np.errstate(all="ignore"):  # bad options: one error line, no warnings
                X, y = src.load(split_seed)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"data set {name!r}: bad options {kw}: {exc}") from None
        except MemoryError:
            raise ParameterError(f"data set {spec!r} does not fit in memory") from None
        return Loaded(X, y, spec, src, schema.merged(src.schema))
    if kw or not os.path.exists(spec):
        if os.path.sep in spec or "." in os.path.basename(spec):
            raise DataError(f"{where} file not found: {spec}")
        raise DataError(
            f"no data set or file named {spec!r}; built-in data sets: {', '.join(reg.names('dataset'))}"
        )
    X, y, inferred = load_file(spec, schema if isinstance(schema, Schema) else Schema())
    return Loaded(X, y, public_file_name(spec), schema=schema, inferred=inferred)


def public_file_name(path: str) -> str:
    """How a data file is named in a run's release and messages: its base
    name.  The release is published; the absolute path - or a relative one,
    which depends on where the command ran - would tell readers the user's
    directory layout (account, project and folder names) and mean nothing on
    their machine, while the base name still says which file it was."""
    return os.path.basename(os.path.normpath(path)) or path


def load_prepared(spec, *, seed: int = 0, labels: str = "binary", d: int | None = None, test: bool = False):
    """``(X, y, source, description)`` ready for a :class:`~dpreg.problem.Problem`
    without an intercept: loaded (``seed`` is the public split seed of
    synthetic sets), validated, labels mapped to -1/+1 (fixed or inferred
    map), rows scaled into the unit ball.  For scripts, benchmarks and tests;
    ``dpreg run`` goes through :func:`run_pipeline`."""
    from ..data import Schema, prepare

    tr = load_data(spec, schema=Schema(n_features=d), split_seed=seed, test=test)
    X, y = prepare(tr.X, tr.y, labels=labels, where=str(tr.description), d=d, copy=False)
    return X, y, tr.source, tr.description
