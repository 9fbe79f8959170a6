"""Released models: load them back, predict with them.

A run's ``release.model`` (see :func:`dpreg.pipeline.model_dict`) holds
everything prediction needs - the weights over the transformed features, the
preprocessing that produced those features, the task with its label map
(binary, K classes) or target transform (regression) - so :class:`Model`
repeats the preprocessing on raw records exactly as the run did and answers
in the user's labels or units.  Prediction is post-processing of a private
release: it costs no privacy.  ``dpreg predict MODEL --data FILE`` and
:func:`load_model` use it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .errors import DpregError
from .preprocess import Preprocessing
from .tasks import TASKS, TargetTransform


@dataclass
class Model:
    """A released model (weights w over preprocessed records)."""

    weights: np.ndarray
    preprocessing: Preprocessing
    loss: str
    classifier: bool
    label_map: dict | None = None
    #: svmlight index base of the training files (None: not svmlight)
    zero_based: bool | None = None
    #: "linear" (margins <x, w>, or logits x W for K classes) or "problem"
    #: (the loss builds its own model, e.g. mlp)
    kind: str = "linear"
    #: the loss with its options (``mlp:hidden=32``), to rebuild a "problem" model
    loss_spec: str | None = None
    #: "binary", "multiclass" or "regression"
    task: str = "binary"
    #: K for a multi-class model
    n_classes: int | None = None
    #: a regression model's target transform (identity for the others)
    target: TargetTransform = field(default_factory=TargetTransform)

    @classmethod
    def from_release(cls, model: dict) -> "Model":
        """From a record's ``release.model`` dict; DpregError if malformed.
        A record without ``task`` (written before tasks were recorded) is a
        binary classifier, or a regression-like model for a loss that is not
        a classifier."""
        try:
            kind = model.get("kind")
            if kind not in ("linear", "problem"):
                raise DpregError(f"unknown model kind {kind!r} (this dpreg reads 'linear' and 'problem')")
            classifier = bool(model["classifier"])
            task = model.get("task") or ("binary" if classifier else "regression")
            if task not in TASKS:
                raise DpregError(f"unknown task {task!r} (one of {', '.join(TASKS)})")
            K = model.get("n_classes")
            if task == "multiclass":
                K = int(K)
                if K < 2:
                    raise DpregError("a multi-class model needs n_classes >= 2")
                classes = (model.get("label_map") or {}).get("classes")
                if classes is not None and len(classes) != K:
                    raise DpregError(f"label map lists {len(classes)} classes, the model has {K}")
            else:
                K = None
            prep = Preprocessing.from_dict(model["preprocessing"])
            w = np.asarray(model["weights"], dtype=float)
            need = prep.n_weights * (K or 1)
            if (kind == "linear" and w.shape != (need,)) or w.ndim != 1 or not np.all(np.isfinite(w)):
                raise DpregError("model weights must be a vector of finite numbers "
                                 f"({need} for this linear model)")
            _check_width(model, prep, kind)
            return cls(w, prep, str(model["loss"]), classifier, model.get("label_map"),
                       model.get("zero_based"), kind, model.get("loss_spec"), task, K,
                       TargetTransform.from_dict(model.get("target")))
        except (KeyError, TypeError, ValueError) as exc:
            raise DpregError(f"not a dpreg model: {type(exc).__name__}: {exc}") from None

    @property
    def n_features(self) -> int:
        return self.preprocessing.n_features

    @property
    def classes(self) -> np.ndarray | None:
        """The raw class labels in order (negative, positive for a binary
        model; c_0..c_{K-1} for K classes); None for regression."""
        lm = self.label_map or {}
        if self.task == "multiclass":
            return np.asarray(lm.get("classes", list(range(self.n_classes))), dtype=float)
        if self.task == "binary":
            return np.asarray([lm.get("negative", -1.0), lm.get("positive", 1.0)], dtype=float)
        return None

    def transform(self, X) -> np.ndarray:
        """Raw records -> the features the weights apply to."""
        return self.preprocessing.transform(X, where="prediction data")

    def decision_function(self, X) -> np.ndarray:
        """The model's outputs on raw records: margins <transform(x), w> of a
        binary or regression linear model (n,), logits (n, K) of a K-class
        one, the network's outputs for a loss with its own model.  Regression
        outputs are in the model's target units (:meth:`predict` maps them
        back)."""
        Xt = self.transform(X)
        if self.kind == "linear":
            if self.task == "multiclass":
                return np.asarray(Xt @ self.weights.reshape(-1, self.n_classes))
            return np.asarray(Xt @ self.weights)
        from .problem import make_problem
        from .registry import get_loss, get_registry
        from .tasks import bind_classes

        loss = get_loss(get_registry(), self.loss_spec or self.loss)
        for_task = getattr(loss, "for_task", None)  # a network's head
        if for_task is not None:
            loss = for_task(self.task, self.n_classes)
        if self.task == "multiclass":
            loss = bind_classes(loss, self.n_classes)
        y0 = np.zeros(Xt.shape[0])
        problem = make_problem(loss, Xt, y0)
        if getattr(problem, "d", len(self.weights)) != len(self.weights):
            raise DpregError(f"model weights: {len(self.weights)} values, but {self.loss_spec or self.loss} on "
                             f"{self.n_features} features has {problem.d} parameters (the record was edited "
                             f"or damaged)")
        return problem.decision_function(self.weights, Xt)

    def predict(self, X) -> np.ndarray:
        """Predicted labels in the training data's raw label values (binary:
        margin > 0 is the positive class, ties go to the negative; K classes:
        the class of the largest logit, ties to the first), or predicted values
        in the user's units (regression)."""
        m = self.decision_function(X)
        if self.task == "regression":
            return self.target.inverse(m)
        cls = self.classes
        if self.task == "multiclass":
            return cls[np.argmax(m, axis=1)]
        return np.where(m > 0, cls[1], cls[0])

    @property
    def has_proba(self) -> bool:
        """Whether the model defines class probabilities: softmax models, the
        logistic losses' binary models and binary networks (their logistic head)."""
        return self.task == "multiclass" or (self.task == "binary" and (self.loss.startswith("logistic")
                                                                        or self.loss == "mlp"))

    def predict_proba(self, X) -> np.ndarray:
        """(n, K) class probabilities in the order of :attr:`classes`: the
        softmax of the logits (K classes), [P(negative), P(positive)] with the
        sigmoid of the margin (logistic losses, a binary network's output);
        DpregError otherwise."""
        if not self.has_proba:
            raise DpregError(f"loss {self.loss!r} defines no class probabilities (logistic and softmax losses do)")
        m = self.decision_function(X)
        if self.task == "multiclass":
            Z = m - m.max(axis=1, keepdims=True)
            E = np.exp(Z)
            return E / E.sum(axis=1, keepdims=True)
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
    width = np.shape(coef)[-1] if kind == "linear" and coef is not None and np.ndim(coef) >= 1 else None
    if width is not None and width != prep.n_features:  # a vector, or K rows for K classes
        raise DpregError(f"model coef has {width} values per class for {prep.n_features} features: the record "
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


def prediction_table(model: Model, X, *, proba: bool = False) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of ``dpreg predict``'s CSV: ``prediction,margin`` for a
    binary model, ``prediction`` for K classes and for regression (values in
    the user's units); with ``proba``, one ``p_<label>`` column per class
    (DpregError for a model without probabilities)."""
    if proba and not model.has_proba:
        raise DpregError(f"loss {model.loss!r} defines no class probabilities (--proba needs a logistic or "
                         f"softmax model)")
    m = model.decision_function(X)
    if model.task == "regression":
        header = ["prediction"]
        cols = [[f"{v:.17g}" for v in model.target.inverse(m)]]
    elif model.task == "multiclass":
        header = ["prediction"]
        cols = [[f"{v:g}" for v in model.classes[np.argmax(m, axis=1)]]]
    else:
        cls = model.classes
        header = ["prediction", "margin"]
        cols = [[f"{v:g}" for v in np.where(m > 0, cls[1], cls[0])], [f"{v:.17g}" for v in m]]
    if proba:
        P = model.predict_proba(X)
        header += [f"p_{c:g}" for c in model.classes]
        cols += [[f"{v:.17g}" for v in P[:, k]] for k in range(P.shape[1])]
    return header, [list(r) for r in zip(*cols)]


def write_predictions(path: str, header: list[str], rows: list[list[str]], *, replace: bool = False) -> str:
    """The CSV of :func:`prediction_table`, written atomically to ``path``
    (``replace``) or, as ``dpreg run`` writes records, to the first free name
    ``path``, ``<stem>-1<suffix>``, ... (never replacing a file); returns the
    name written."""
    from .results import write_atomic, write_new

    text = "\n".join([",".join(header)] + [",".join(r) for r in rows])
    if replace:
        write_atomic(path, text)
        return path
    return write_new(path, text)
