"""A scikit-learn estimator over the dpreg pipeline.

:class:`DPClassifier` fits a private binary classifier with any registered
algorithm, noise mechanism and loss, from numpy arrays or scipy sparse
matrices, and follows scikit-learn's estimator contract (``fit``/``predict``/
``decision_function``/``predict_proba``/``score``, ``get_params``/
``set_params``, usable in a ``Pipeline``)::

    from dpreg.sklearn import DPClassifier
    clf = DPClassifier(algorithm="dp-sgd", epsilon=1.0).fit(X_train, y_train)
    clf.score(X_test, y_test), clf.privacy_

Privacy: each ``fit`` is (epsilon, delta)-DP with respect to one record of
``(X, y)`` (``privacy_`` is the release's privacy statement).  A fitted
estimator is a release - it is what people pickle and share - so by default it
holds the release alone: the model (``coef_``, ``intercept_``, ``model_``), the
privacy statement (``privacy_``) and the public configuration
(``record_["release"]``), nothing computed on the data outside the
accounting (no clip counts, iteration or record counts, metrics or timings).
``diagnostics=True`` (or ``"light"``) adds the run's non-private diagnostics
to ``record_`` (under ``"diagnostics"``, labelled ``non_private``) and
``n_iter_``, as ``dpreg run`` writes them: do not share such an estimator.
Two things are *not* covered:

* the set of classes (``classes_``), when read off ``y`` as scikit-learn does
  (one record can change it): ``privacy_["classes"]`` then says so, it is
  listed under ``privacy_["not_covered"]`` and a
  :class:`dpreg.PrivacyWarning` is raised; pass ``classes=(negative,
  positive)`` to declare it as public input instead;
* tuning over several fits - ``GridSearchCV``, ``cross_val_score`` with model
  selection - looks at the data once per candidate and picks by an unnoised
  score: it is *non-private* tuning, and the guarantee of the chosen model no
  longer holds.  Use :func:`dpreg_plugins.selectors.private_selection.select_hyperparameters`
  (exponential-mechanism selection over the grid, charged to one accountant)
  for private tuning.

``random_state=None`` (the default) draws the noise from OS entropy, as
``dpreg run`` does; an integer is the reproducible research mode (keep it
secret; a :class:`dpreg.PrivacyWarning` says so at each fit, as do the other
privacy warnings of the run: delta >= 1/n).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data


#: the privacy statement's note (and the warning) when the classes are read off ``y``
CLASSES_INFERRED = ("classes read off y: one record can change the set of classes, which the privacy "
                    "guarantee does not cover; pass classes=(negative, positive) to declare them")


class DPClassifier(ClassifierMixin, BaseEstimator):
    """Differentially private binary classifier (see the module docstring).

    algorithm, noise, loss, accountant: registered names (``dpreg list``)
    epsilon, delta:  the privacy budget of one ``fit`` (delta None: min(1e-5, 1/(10 n)))
    params:          algorithm parameters, e.g. ``{"steps": 200}`` (``dpreg info ALGO``)
    epochs, lr, batch_size, max_grad_norm, noise_multiplier:
                     practitioner names of the algorithm's own parameters (None: not given;
                     ``noise_multiplier`` fixes the multiplier, refused if over the budget)
    fit_intercept:   a bias coordinate inside every clipped per-record gradient
    scaling, bounds: per-feature map ("none", or "bounds" with ``bounds=(lower, upper)``
                     lists of public per-feature bounds)
    classes:         the (negative, positive) labels, declared (public input); None: read off ``y``
                     (stated in ``privacy_``, with a PrivacyWarning)
    random_state:    None (secret OS entropy) or a research seed
    backend, scheduler, workers:
                     where the records are held while fitting: None/"local" (this process) or
                     "dask" (cut into ``workers`` shards held by Dask worker processes - a
                     LocalCluster, or the running ``scheduler``; per-shard clipped sums, the
                     noise added once here: :mod:`dpreg.backends`)
    diagnostics:     False (the default: the fitted estimator holds the release alone), "light"
                     (adds counts and accounting) or True (adds metrics on the training data too):
                     non-private, as ``dpreg run``'s record labels them

    Fitted attributes: ``classes_``, ``n_features_in_``, ``coef_`` and
    ``intercept_`` (over the row-scaled features, see :mod:`dpreg.preprocess`),
    ``privacy_`` (the privacy statement), ``model_`` (:class:`dpreg.model.Model`),
    ``record_`` (the run's record as ``dpreg run`` would write it with these
    diagnostics: the release alone by default); with diagnostics, ``n_iter_``.
    """

    def __init__(self, algorithm: str = "dp-sgd", noise: str | None = None, loss: str = "logistic",
                 epsilon: float = 1.0, delta: float | None = None, accountant: str = "rdp",
                 params: dict[str, Any] | None = None, fit_intercept: bool = True, scaling: str = "none",
                 bounds: tuple | None = None, classes: tuple | None = None, random_state: int | None = None,
                 epochs: float | None = None, lr: float | None = None, batch_size: int | None = None,
                 max_grad_norm: float | None = None, noise_multiplier: float | None = None,
                 diagnostics: bool | str = False, backend: str | None = None, scheduler: str | None = None,
                 workers: int | None = None):
        self.algorithm = algorithm
        self.noise = noise
        self.loss = loss
        self.epsilon = epsilon
        self.delta = delta
        self.accountant = accountant
        self.params = params
        self.fit_intercept = fit_intercept
        self.scaling = scaling
        self.bounds = bounds
        self.classes = classes
        self.random_state = random_state
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        self.diagnostics = diagnostics
        self.backend = backend
        self.scheduler = scheduler
        self.workers = workers

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = False
        tags.non_deterministic = self.random_state is None
        return tags

    def fit(self, X, y):
        """Fit a private model on ``(X, y)``; returns self."""
        from .errors import ParameterError
        from .params import practitioner_params
        from .pipeline import RunConfig, run_pipeline

        if self.diagnostics not in (False, True, "light"):
            raise ParameterError(f"diagnostics must be False, True or 'light', got {self.diagnostics!r}")

        params = practitioner_params(self.algorithm, dict(self.params or {}),
                                     dict(epochs=self.epochs, lr=self.lr, batch_size=self.batch_size,
                                          max_grad_norm=self.max_grad_norm, noise_multiplier=self.noise_multiplier))
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, y_numeric=False)
        check_classification_targets(y)
        if self.classes is None:
            from sklearn.utils.multiclass import type_of_target

            y_type = type_of_target(y, input_name="y", raise_unknown=True)
            if y_type != "binary":
                raise ValueError(f"Only binary classification is supported. The type of the target is {y_type}.")
        classes = np.unique(y) if self.classes is None else np.asarray(self.classes)
        if len(classes) != 2:
            raise ValueError(f"DPClassifier is a binary classifier: y has {len(classes)} class"
                             f"{'es' if len(classes) != 1 else ''} ({classes.tolist()[:5]}); need 2")
        self.classes_ = classes
        yy = np.where(y == classes[1], 1.0, np.where(y == classes[0], -1.0, np.nan))
        if np.isnan(yy).any():
            raise ValueError(f"y holds labels outside classes={classes.tolist()}")
        inferred = self.classes is None
        if inferred:
            import warnings

            from .errors import PrivacyWarning

            warnings.warn(CLASSES_INFERRED, PrivacyWarning, stacklevel=2)
        rec = run_pipeline(RunConfig(
            algo=self.algorithm, noise=self.noise, loss=self.loss, data=(X, yy), epsilon=self.epsilon,
            delta=self.delta, accountant=self.accountant, params=params,
            seed=self.random_state, intercept=self.fit_intercept,
            scaling="bounds" if self.bounds is not None else self.scaling, bounds=self.bounds,
            labels=(-1.0, 1.0), diagnostics=self.diagnostics, backend=self.backend, scheduler=self.scheduler,
            workers=self.workers))
        from .model import load_model

        privacy = rec["release"]["privacy"]
        privacy["classes"] = {"source": "inferred" if inferred else "declared",
                              "note": CLASSES_INFERRED if inferred else "declared by the caller (public input)"}
        if inferred:
            privacy["not_covered"] = list(privacy.get("not_covered", [])) + ["the set of classes, read off y"]
        self.record_ = rec
        self.model_ = load_model(rec)
        m = rec["release"]["model"]
        self.coef_ = None if m["coef"] is None else np.asarray(m["coef"], dtype=float).reshape(1, -1)
        self.intercept_ = np.array([m["intercept"]])
        self.privacy_ = privacy
        if "diagnostics" in rec:
            self.n_iter_ = rec["diagnostics"]["usage"]["iterations"]
        elif hasattr(self, "n_iter_"):
            del self.n_iter_  # a refit without diagnostics keeps none of the last one's
        return self

    def decision_function(self, X) -> np.ndarray:
        """Margins (positive: ``classes_[1]``)."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return self.model_.decision_function(X)

    def predict(self, X) -> np.ndarray:
        """``classes_[1]`` where the margin is positive, else ``classes_[0]``."""
        return np.where(self.decision_function(X) > 0, self.classes_[1], self.classes_[0])

    def predict_proba(self, X) -> np.ndarray:
        """(n, 2) probabilities of ``classes_`` for logistic losses."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return self.model_.predict_proba(X)
