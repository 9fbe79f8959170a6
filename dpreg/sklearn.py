"""scikit-learn estimators over the dpreg pipeline.

:class:`DPClassifier` fits a private classifier - two classes or K - and
:class:`DPRegressor` a private regression model, with any registered algorithm,
noise mechanism and loss, from numpy arrays or scipy sparse matrices; both
follow scikit-learn's estimator contract (``fit``/``predict``/``score``,
``decision_function``/``predict_proba`` for the classifier,
``get_params``/``set_params``, usable in a ``Pipeline``; scikit-learn's
estimator checks pass)::

    from dpreg.sklearn import DPClassifier, DPRegressor
    clf = DPClassifier(epsilon=1.0).fit(X_train, y_train)      # 2 or K classes
    clf.score(X_test, y_test), clf.privacy_
    reg = DPRegressor(epsilon=1.0, target_bounds=(0, 400)).fit(X_train, y_train)

Their defaults are ``dpreg run``'s (``loss="auto"``, ``scaling="auto"``,
``target_bounds="auto"``), with ``dp-sgd`` as the algorithm.

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
  :class:`dpreg.PrivacyWarning` is raised; pass ``classes=`` (the two labels,
  negative then positive, or the K labels in order) to declare it as public
  input instead;
* tuning over several fits - ``GridSearchCV``, ``cross_val_score`` with model
  selection - looks at the data once per candidate and picks by an unnoised
  score: it is *non-private* tuning, and the guarantee of the chosen model no
  longer holds.  Use :func:`dpreg_plugins.selectors.private_selection.select_hyperparameters`
  (exponential-mechanism selection over the grid, charged to one accountant)
  for private tuning.

A regression target's range is public input (``target_bounds=(lo, hi)``); by
default (``"auto"``) it is estimated privately with ``target_share`` of the
budget (:mod:`dpreg.tasks`), which for small data costs accuracy: declare it
when it is known.

Weights: ``fit`` takes no ``sample_weight`` and ``DPClassifier`` no ``class_weight`` other
than None; each is refused in one line saying why (:data:`NO_SAMPLE_WEIGHT`,
:data:`NO_CLASS_WEIGHT`).  ``warm_start=True`` starts the next ``fit`` from the
last fit's released model (same features, classes, loss and intercept; an
algorithm that honours an initial point): that start is a release, so the fit
stays (epsilon, delta)-DP, but fits on the same records compose - their
epsilons and deltas add - which ``privacy_["warm_start"]`` states.

``random_state=None`` (the default) draws the noise from OS entropy, as
``dpreg run`` does; an integer is the reproducible research mode (keep it
secret; a :class:`dpreg.PrivacyWarning` says so at each fit, as do the other
privacy warnings of the run: delta >= 1/n).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data


#: the privacy statement's note (and the warning) when the classes are read off ``y``
CLASSES_INFERRED = ("classes read off y: one record can change the set of classes, which the privacy "
                    "guarantee does not cover; pass classes=(...) to declare them")


#: why ``fit`` refuses ``sample_weight`` (one line)
NO_SAMPLE_WEIGHT = ("sample_weight is not supported: the privacy guarantee bounds each record's clipped "
                    "gradient, and per-record weights are not part of the clipped kernels; fit on the records "
                    "as they are (repeating a record to weight it breaks its guarantee)")
#: why ``DPClassifier`` refuses a ``class_weight`` (one line)
NO_CLASS_WEIGHT = ("class_weight is not supported: per-record weights are not part of the clipped kernels the "
                   "privacy guarantee is proven for, and 'balanced' would read the class counts off y outside "
                   "the accounting; use class_weight=None")
#: what a warm-started fit's privacy statement says
WARM_NOTE = ("started from the previous fit's released model (public input): fits on the same records "
             "compose - their epsilons and deltas add")


def _refuse_fit_params(fit_params: dict) -> None:
    from .errors import ParameterError

    if "sample_weight" in fit_params:
        if fit_params["sample_weight"] is None:
            fit_params = {k: v for k, v in fit_params.items() if k != "sample_weight"}
        else:
            raise ParameterError(NO_SAMPLE_WEIGHT)
    if fit_params:
        raise ParameterError(f"fit takes X and y only; got {', '.join(sorted(fit_params))}")


def _warm_init(est, X):
    """The starting point of a warm-started ``fit``: the previous fit's
    released weights (None when ``warm_start`` is off or nothing was fitted);
    a previous fit of another shape is refused in one line."""
    from .errors import ParameterError

    if not est.warm_start or not hasattr(est, "record_"):
        return None
    prev = est.record_["release"]["model"]
    if getattr(est, "backend", None) not in (None, "local"):
        raise ParameterError("warm_start runs in this process only: use backend=None with warm_start=True")
    if prev.get("n_features") != X.shape[1]:
        raise ParameterError(f"warm_start: the previous fit had {prev.get('n_features')} features, X has "
                             f"{X.shape[1]}; set warm_start=False to fit afresh")
    return np.asarray(prev["weights"], dtype=float)


def _mark_warm(rec, init) -> None:
    if init is not None:
        rec["release"]["privacy"]["warm_start"] = WARM_NOTE


def _check_diagnostics(est) -> None:
    from .errors import ParameterError

    if est.diagnostics not in (False, True, "light"):
        raise ParameterError(f"diagnostics must be False, True or 'light', got {est.diagnostics!r}")


def _run(est, X, y, *, loss: str, labels, task: str, extra: dict, init=None):
    """The pipeline run of one ``fit`` (the estimator's own parameters, arrays
    in): its record."""
    from .params import practitioner_params
    from .pipeline import RunConfig, get_loss, own_biases, run_pipeline
    from .registry import get_registry

    # a loss with its own bias terms (a network) takes no intercept column: fit_intercept does not apply
    intercept = None if own_biases(get_loss(get_registry(), loss)) else est.fit_intercept
    def warn(msg: str) -> None:  # the run's privacy warnings, attributed to the caller of fit
        from .errors import PrivacyWarning
        from .pipeline import warn_at_caller

        warn_at_caller(msg, PrivacyWarning)

    params = practitioner_params(est.algorithm, dict(est.params or {}),
                                 dict(epochs=est.epochs, lr=est.lr, batch_size=est.batch_size,
                                      max_grad_norm=est.max_grad_norm, noise_multiplier=est.noise_multiplier))
    return run_pipeline(RunConfig(
        algo=est.algorithm, noise=est.noise, loss=loss, data=(X, y), epsilon=est.epsilon,
        delta=est.delta, accountant=est.accountant, params=params,
        seed=est.random_state, intercept=intercept,
        scaling="bounds" if est.bounds is not None else est.scaling, bounds=est.bounds,
        labels=labels, task=task, diagnostics=est.diagnostics, warn=warn, backend=getattr(est, "backend", None),
        scheduler=getattr(est, "scheduler", None), workers=getattr(est, "workers", None), init=init,
        **extra))


def _fitted_release(est, rec) -> None:
    """The fitted attributes every estimator here shares: ``record_``,
    ``model_``, ``privacy_`` and, with diagnostics only, ``n_iter_`` (a refit
    without them keeps none of the last fit's)."""
    from .model import load_model

    est.record_ = rec
    est.model_ = load_model(rec)
    est.privacy_ = rec["release"]["privacy"]
    if "diagnostics" in rec:
        est.n_iter_ = rec["diagnostics"]["usage"]["iterations"]
    elif hasattr(est, "n_iter_"):
        del est.n_iter_


class DPClassifier(ClassifierMixin, BaseEstimator):
    """Differentially private classifier, two classes or K (see the module docstring).

    algorithm, noise, loss, accountant: registered names (``dpreg list``); loss "auto":
                     logistic for two classes, softmax for more (a binary loss refuses K > 2)
    epsilon, delta:  the privacy budget of one ``fit`` (delta None: min(1e-5, 1/(10 n)))
    params:          algorithm parameters, e.g. ``{"steps": 200}`` (``dpreg info ALGO``)
    epochs, lr, batch_size, max_grad_norm, noise_multiplier:
                     practitioner names of the algorithm's own parameters (None: not given;
                     ``noise_multiplier`` fixes the multiplier, refused if over the budget)
    fit_intercept:   a bias coordinate (K for K classes) inside every clipped per-record gradient
                     (a network has its own biases: it ignores this)
    scaling, bounds: per-feature map, as ``dpreg run --scaling`` ("auto", the default: the rule
                     ``dpreg.run`` follows for arrays - private scales where they pay, else none;
                     "none"; "bounds" with ``bounds=(lower, upper)`` lists of public per-feature
                     bounds; "private")
    classes:         the class labels in order, declared (public input; two: negative, positive);
                     None: read off ``y`` (stated in ``privacy_``, with a PrivacyWarning)
    random_state:    None (secret OS entropy) or a research seed
    backend, scheduler, workers:
                     where the records are held while fitting: None/"local" (this process) or
                     "dask" (cut into ``workers`` shards held by Dask worker processes - a
                     LocalCluster, or the running ``scheduler``; per-shard clipped sums, the
                     noise added once here: :mod:`dpreg.backends`)
    diagnostics:     False (the default: the fitted estimator holds the release alone), "light"
                     (adds counts and accounting) or True (adds metrics on the training data too):
                     non-private, as ``dpreg run``'s record labels them
    warm_start:      True: the next ``fit`` starts from this fit's released model (the budgets of
                     fits on the same records add; ``privacy_["warm_start"]`` says so)
    class_weight:    None only: weights are refused in one line saying why (:data:`NO_CLASS_WEIGHT`);
                     ``fit`` likewise refuses ``sample_weight``

    Fitted attributes: ``classes_``, ``n_features_in_``, ``coef_`` ((1, p) for two classes,
    (K, p) for K) and ``intercept_`` ((1,) or (K,)), over the row-scaled features (see
    :mod:`dpreg.preprocess`), ``privacy_`` (the privacy statement), ``model_``
    (:class:`dpreg.model.Model`), ``record_`` (the run's record as ``dpreg run`` would write
    it with these diagnostics: the release alone by default); with diagnostics, ``n_iter_``.
    """

    def __init__(self, algorithm: str = "dp-sgd", noise: str | None = None, loss: str = "auto",
                 epsilon: float = 1.0, delta: float | None = None, accountant: str = "rdp",
                 params: dict[str, Any] | None = None, fit_intercept: bool = True, scaling: str = "auto",
                 bounds: tuple | None = None, classes: tuple | None = None, random_state: int | None = None,
                 epochs: float | None = None, lr: float | None = None, batch_size: int | None = None,
                 max_grad_norm: float | None = None, noise_multiplier: float | None = None,
                 diagnostics: bool | str = False, backend: str | None = None, scheduler: str | None = None,
                 workers: int | None = None, warm_start: bool = False, class_weight: Any = None):
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
        self.warm_start = warm_start
        self.class_weight = class_weight

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = True
        tags.non_deterministic = self.random_state is None
        return tags

    def _loss_for(self, K: int):
        """(loss spec, task) for K classes: "auto" is logistic for two, softmax
        for more; a binary loss with K > 2 classes is refused."""
        from .pipeline import get_loss
        from .registry import get_registry
        from .tasks import loss_task

        spec = ("logistic" if K == 2 else "softmax") if self.loss in (None, "auto") else self.loss
        loss = get_loss(get_registry(), spec)
        if getattr(loss, "for_task", None) is not None:  # a loss with a head per task (a network)
            return spec, ("binary" if K == 2 else "multiclass")
        task = loss_task(loss)
        if task == "regression":
            raise ValueError(f"loss {spec!r} is a regression loss: use DPRegressor")
        if task == "binary" and K != 2:
            raise ValueError(f"loss {spec!r} is binary but y has {K} classes: use loss='softmax' (or 'auto')")
        return spec, task

    def fit(self, X, y, **fit_params):
        """Fit a private model on ``(X, y)``; returns self.  ``sample_weight``
        (the only other argument scikit-learn passes) is refused in one line."""
        from .errors import ParameterError

        _refuse_fit_params(fit_params)
        if self.class_weight is not None:
            raise ParameterError(NO_CLASS_WEIGHT)
        _check_diagnostics(self)
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, y_numeric=False)
        init = _warm_init(self, X)
        check_classification_targets(y)
        classes = np.unique(y) if self.classes is None else np.asarray(self.classes)
        if len(classes) < 2:
            raise ValueError(f"DPClassifier needs at least two classes: y has {len(classes)} class "
                             f"({classes.tolist()[:5]}); one class is not a classification task")
        if len(np.unique(classes)) != len(classes):
            raise ValueError(f"classes must be distinct, got {classes.tolist()}")
        spec, task = self._loss_for(len(classes))
        if init is not None and (self.record_["release"]["model"].get("loss_spec") != spec
                                 or list(self.classes_) != classes.tolist()):
            raise ParameterError("warm_start: the previous fit had another loss or other classes; set "
                                 "warm_start=False to fit afresh")
        self.classes_ = classes
        index = {c: k for k, c in enumerate(classes.tolist())}
        try:
            yi = np.fromiter((index[v] for v in y.tolist()), dtype=np.float64, count=len(y))
        except KeyError as exc:
            raise ValueError(f"y holds labels outside classes={classes.tolist()}: {exc.args[0]!r}") from None
        if task == "binary":
            yy, labels = 2.0 * yi - 1.0, (-1.0, 1.0)
        else:
            yy, labels = yi, tuple(float(k) for k in range(len(classes)))
        inferred = self.classes is None
        if inferred:
            import warnings

            from .errors import PrivacyWarning

            warnings.warn(CLASSES_INFERRED, PrivacyWarning, stacklevel=2)
        rec = _run(self, X, yy, loss=spec, labels=labels, task=task, extra={}, init=init)
        _mark_warm(rec, init)
        privacy = rec["release"]["privacy"]
        privacy["classes"] = {"source": "inferred" if inferred else "declared",
                              "note": CLASSES_INFERRED if inferred else "declared by the caller (public input)"}
        if inferred:
            privacy["not_covered"] = list(privacy.get("not_covered", [])) + ["the set of classes, read off y"]
        _fitted_release(self, rec)
        m = rec["release"]["model"]
        if m["coef"] is None:
            self.coef_ = None
        else:
            self.coef_ = np.asarray(m["coef"], dtype=float).reshape(1 if task == "binary" else len(classes), -1)
        self.intercept_ = np.atleast_1d(np.asarray(m["intercept"], dtype=float))
        return self

    def decision_function(self, X) -> np.ndarray:
        """Margins (n,) for two classes (positive: ``classes_[1]``), logits
        (n, K) for K."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return self.model_.decision_function(X)

    def predict(self, X) -> np.ndarray:
        """The class of the largest logit (K classes; ties to the first), or
        ``classes_[1]`` where the margin is positive, else ``classes_[0]``."""
        m = self.decision_function(X)
        if m.ndim == 2:
            return self.classes_[np.argmax(m, axis=1)]
        return np.where(m > 0, self.classes_[1], self.classes_[0])

    def predict_proba(self, X) -> np.ndarray:
        """(n, K) probabilities of ``classes_``: softmax models, and the logistic
        losses' binary models."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return self.model_.predict_proba(X)


class DPRegressor(RegressorMixin, BaseEstimator):
    """Differentially private regression (see the module docstring).

    algorithm, noise, loss, accountant: registered names; loss "squared" (least squares) or
                     "huber" (robust: bounded per-record gradient)
    epsilon, delta:  the privacy budget of one ``fit`` (delta None: min(1e-5, 1/(10 n)))
    target_bounds:   the public range (lo, hi) of y, mapped into [-1, 1] (values beyond are
                     clipped; predictions come back in y's units); "auto": estimated privately with
                     ``target_share`` of epsilon; "none": y as it is
    target_share:    the share of epsilon the "auto" range spends
    params, epochs, lr, batch_size, max_grad_norm, noise_multiplier, fit_intercept, scaling,
    bounds, random_state, diagnostics, warm_start: as :class:`DPClassifier`

    Fitted attributes: ``n_features_in_``, ``coef_`` (p,) and ``intercept_`` (float) over the
    row-scaled features and in the model's target units (``target_`` maps them back),
    ``target_`` (the target transform as a dict), ``privacy_``, ``model_``, ``record_`` (the
    release alone by default); with diagnostics, ``n_iter_``.
    """

    def __init__(self, algorithm: str = "dp-sgd", noise: str | None = None, loss: str = "squared",
                 epsilon: float = 1.0, delta: float | None = None, accountant: str = "rdp",
                 params: dict[str, Any] | None = None, fit_intercept: bool = True, scaling: str = "auto",
                 bounds: tuple | None = None, target_bounds: Any = "auto", target_share: float = 0.1,
                 random_state: int | None = None, epochs: float | None = None, lr: float | None = None,
                 batch_size: int | None = None, max_grad_norm: float | None = None,
                 noise_multiplier: float | None = None, diagnostics: bool | str = False,
                 warm_start: bool = False):
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
        self.target_bounds = target_bounds
        self.target_share = target_share
        self.random_state = random_state
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        self.diagnostics = diagnostics
        self.warm_start = warm_start

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.non_deterministic = self.random_state is None
        return tags

    def fit(self, X, y, **fit_params):
        """Fit a private regression model on ``(X, y)``; returns self.
        ``sample_weight`` is refused in one line."""
        from .errors import ParameterError

        _refuse_fit_params(fit_params)
        _check_diagnostics(self)
        from .pipeline import get_loss
        from .registry import get_registry
        from .tasks import predicts_target

        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, y_numeric=True)
        init = _warm_init(self, X)
        if X.shape[0] < 2:
            raise ValueError(f"DPRegressor needs at least 2 records, got n_samples={X.shape[0]}")
        loss = get_loss(get_registry(), self.loss)
        if not (predicts_target(loss) or getattr(loss, "for_task", None) is not None):
            raise ValueError(f"loss {self.loss!r} is not a regression loss (squared, huber): use DPClassifier")
        if init is not None and self.record_["release"]["model"].get("loss_spec") != self.loss:
            raise ParameterError("warm_start: the previous fit had another loss; set warm_start=False to fit afresh")
        tb = self.target_bounds
        rec = _run(self, X, np.asarray(y, dtype=np.float64), loss=self.loss, labels=None, task="regression",
                   extra={"target_bounds": "auto" if tb is None else tb, "target_share": self.target_share},
                   init=init)
        _mark_warm(rec, init)
        _fitted_release(self, rec)
        m = rec["release"]["model"]
        self.coef_ = None if m["coef"] is None else np.asarray(m["coef"], dtype=float)
        self.intercept_ = float(m["intercept"])
        self.target_ = m.get("target")
        return self

    def predict(self, X) -> np.ndarray:
        """Predicted values in y's units."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return self.model_.predict(X)
