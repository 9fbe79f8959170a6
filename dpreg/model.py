"""Released models: load them back, predict with them.

A run's ``release.model`` (see :func:`dpreg.pipeline.model_dict`) holds
everything prediction needs - the weights over the transformed features, the
preprocessing that produced those features and the label map - so
:class:`Model` repeats the preprocessing on raw records exactly as the run
did.  Prediction is post-processing of a private release: it costs no
privacy.  ``dpreg predict MODEL --data FILE`` and :func:`load_model` use it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .errors import DpregError
from .preprocess import Preprocessing


@dataclass
class Model:
    """A released linear model (weights w over preprocessed records)."""

    weights: np.ndarray
    preprocessing: Preprocessing
    loss: str
    classifier: bool
    label_map: dict | None = None
    #: svmlight index base of the training files (None: not svmlight)
    zero_based: bool | None = None
    #: "linear" (margins <x, w>) or "problem" (the loss builds its own model, e.g. mlp)
    kind: str = "linear"
    #: the loss with its options (``mlp:hidden=32``), to rebuild a "problem" model
    loss_spec: str | None = None

    @classmethod
    def from_release(cls, model: dict) -> "Model":
        """From a record's ``release.model`` dict; DpregError if malformed."""
        try:
            kind = model.get("kind")
            if kind not in ("linear", "problem"):
                raise DpregError(f"unknown model kind {kind!r} (this dpreg reads 'linear' and 'problem')")
            prep = Preprocessing.from_dict(model["preprocessing"])
            w = np.asarray(model["weights"], dtype=float)
            if (kind == "linear" and w.shape != (prep.n_weights,)) or w.ndim != 1 or not np.all(np.isfinite(w)):
                raise DpregError("model weights must be a vector of finite numbers "
                                 f"({prep.n_weights} for a linear model)")
            _check_width(model, prep, kind)
            return cls(w, prep, str(model["loss"]), bool(model["classifier"]), model.get("label_map"),
                       model.get("zero_based"), kind, model.get("loss_spec"))
        except (KeyError, TypeError, ValueError) as exc:
            raise DpregError(f"not a dpreg model: {type(exc).__name__}: {exc}") from None

    @property
    def n_features(self) -> int:
        return self.preprocessing.n_features

    def transform(self, X) -> np.ndarray:
        """Raw records -> the features the weights apply to."""
        return self.preprocessing.transform(X, where="prediction data")

    def decision_function(self, X) -> np.ndarray:
        """Margins <transform(x), w> for a linear model, the model's outputs for
        a loss with its own model (positive: the positive class)."""
        Xt = self.transform(X)
        if self.kind == "linear":
            return Xt @ self.weights
        from .pipeline import get_loss
        from .problem import make_problem
        from .registry import get_registry

        loss = get_loss(get_registry(), self.loss_spec or self.loss)
        problem = make_problem(loss, Xt, np.zeros(Xt.shape[0]))
        if getattr(problem, "d", len(self.weights)) != len(self.weights):
            raise DpregError(f"model weights: {len(self.weights)} values, but {self.loss_spec or self.loss} on "
                             f"{self.n_features} features has {problem.d} parameters (the record was edited "
                             f"or damaged)")
        return problem.decision_function(self.weights, Xt)

    def predict(self, X) -> np.ndarray:
        """Predicted labels in the training data's raw label values (margin
        > 0: positive; ties go to the negative class), or the margins for a
        model that is not a classifier."""
        m = self.decision_function(X)
        if not self.classifier:
            return m
        neg, pos = ((self.label_map["negative"], self.label_map["positive"]) if self.label_map
                    else (-1.0, 1.0))
        return np.where(m > 0, pos, neg)

    def predict_proba(self, X) -> np.ndarray:
        """(n, 2) class probabilities [P(negative), P(positive)] for the
        logistic losses (the sigmoid of the margin); DpregError otherwise."""
        if not self.loss.startswith("logistic"):
            raise DpregError(f"loss {self.loss!r} defines no class probabilities (logistic losses do)")
        m = self.decision_function(X)
        p = np.empty_like(m)
        pos = m >= 0
        p[pos] = 1.0 / (1.0 + np.exp(-m[pos]))
        e = np.exp(m[~pos])
        p[~pos] = e / (1.0 + e)
        return np.column_stack([1.0 - p, p])


def _check_width(model: dict, prep: Preprocessing, kind: str) -> None:
    """DpregError unless the model's stated width agrees with its
    preprocessing (``n_features``) and, for a linear model, its ``coef``."""
    stated = model.get("n_features")
    if stated is not None and stated != prep.n_features:
        raise DpregError(f"model n_features = {stated!r} disagrees with its preprocessing "
                         f"({prep.n_features} features): the record was edited or damaged")
    coef = model.get("coef")
    if kind == "linear" and coef is not None and len(coef) != prep.n_features:
        raise DpregError(f"model coef has {len(coef)} values for {prep.n_features} features: the record "
                         f"was edited or damaged")


def load_for_model(model: Model, data, *, features: int | None = None):
    """Raw records to predict on with ``model`` (a :class:`dpreg.pipeline.Loaded`),
    refused (DataError, one line) unless their width is the model's.

    Files with explicit columns (CSV, .npz) and data-set names must have
    exactly the model's features.  An svmlight file states no width, so its
    width is read off it (the largest index, in the model's index base) and
    must be the model's too: a narrower file is another feature space far
    more often than one that omits trailing all-zero features, and padding
    it with zeros would predict nonsense.  ``features`` (``dpreg predict
    --features D``) declares an svmlight file's width - the model's - for a
    file that does omit trailing features."""
    from .data import Schema, is_svmlight_path
    from .errors import DataError
    from .pipeline import load_data

    d = model.n_features
    if features is not None and features != d:
        raise DataError(f"--features {features}: the model has {d} features; prediction data must have the same")
    svmlight = isinstance(data, str) and os.path.isfile(data) and is_svmlight_path(data)
    if svmlight and features is None:
        loaded = load_data(data, schema=Schema(None, model.zero_based), split_seed=0)
        width = loaded.X.shape[1]
        if width > d:
            raise DataError(f"{data}: has feature index {width - (0 if model.zero_based else 1)}, beyond the "
                            f"model's {d} features")
        if width < d:
            raise DataError(f"{data}: its largest feature index makes {width} features, but the model has {d}: "
                            f"another feature space? (if the file omits trailing all-zero features, declare its "
                            f"width: --features {d})")
        return loaded
    loaded = load_data(data, schema=Schema(d, model.zero_based), split_seed=0)
    width = loaded.X.shape[1] if getattr(loaded.X, "ndim", 2) == 2 else None
    if width != d:
        raise DataError(f"{data}: {width} features, but the model has {d}")
    return loaded


def load_model(path_or_record) -> Model:
    """The model of a ``dpreg run`` record (a path to its JSON, a record dict,
    or a release dict).  DpregError for anything that is not one."""
    rec = path_or_record
    if isinstance(rec, str):
        from .results import read_json

        rec = read_json(rec, "model")
    if not isinstance(rec, dict):
        raise DpregError("not a dpreg record")
    if "release" in rec:
        rec = rec["release"]
    if "model" not in rec:
        raise DpregError("not a dpreg record (no release.model)")
    return Model.from_release(rec["model"])


def write_predictions(path: str, labels: np.ndarray, margins: np.ndarray, *, replace: bool = False) -> str:
    """CSV ``prediction,margin`` per record, written atomically to ``path``
    (``replace``) or, as ``dpreg run`` writes records, to the first free name
    ``path``, ``<stem>-1<suffix>``, ... (never replacing a file); returns the
    name written."""
    from .results import write_atomic, write_new

    text = "\n".join(["prediction,margin"] + [f"{a:g},{m:.17g}" for a, m in zip(labels, margins)])
    if replace:
        write_atomic(path, text)
        return path
    return write_new(path, text)

