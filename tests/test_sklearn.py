"""The scikit-learn estimator: scikit-learn's own estimator checks, pipelines,
sparse input, and the privacy attributes."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpreg.sklearn import DPClassifier

#: scikit-learn checks expected to fail: none.  (scikit-learn itself skips its
#: pandas and array-API checks when those libraries are not installed; the
#: multi-class checks run as "not supporting multiclass", the binary contract.)
EXPECTED_FAILED: dict = {}


def _estimators():
    # a large epsilon: the checks test the estimator contract, not utility at eps = 1
    return [DPClassifier(algorithm="dp-gd", epsilon=1e4, random_state=0, params={"steps": 30})]


@parametrize_with_checks(_estimators(), expected_failed_checks=lambda est: EXPECTED_FAILED)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def _data(n=600, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] > 0, "yes", "no")
    return X, y


def test_fit_predict_privacy_in_five_lines():
    X, y = _data()
    clf = DPClassifier(epsilon=1.0).fit(X[:500], y[:500])
    assert clf.score(X[500:], y[500:]) > 0.8
    assert set(clf.predict(X[:20])) <= {"no", "yes"} and list(clf.classes_) == ["no", "yes"]
    assert clf.privacy_["epsilon"] <= 1.0 * (1 + 1e-9) and clf.privacy_["randomness"] == "secret"
    assert clf.n_iter_ > 0 and clf.coef_.shape == (1, 5) and clf.intercept_.shape == (1,)
    p = clf.predict_proba(X[:10])
    np.testing.assert_allclose(p.sum(axis=1), 1.0)


def test_pipeline_and_sparse_input():
    X, y = _data(seed=1)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.7, X, 0.0))
    pipe = make_pipeline(MaxAbsScaler(), DPClassifier(epsilon=2.0, random_state=3))
    pipe.fit(Xs[:500], y[:500])
    assert pipe.score(Xs[500:], y[500:]) > 0.7
    dense = DPClassifier(epsilon=2.0, random_state=3).fit(Xs[:500].toarray(), y[:500])
    sparse = DPClassifier(epsilon=2.0, random_state=3).fit(Xs[:500], y[:500])
    np.testing.assert_allclose(sparse.decision_function(Xs[500:]), dense.decision_function(Xs[500:].toarray()),
                               rtol=1e-9, atol=1e-12)


def test_declared_classes_and_refusals():
    X, y = _data()
    clf = DPClassifier(classes=("no", "yes"), epsilon=1.0, random_state=0).fit(X, y)
    assert list(clf.classes_) == ["no", "yes"]
    with pytest.raises(ValueError, match="binary classification"):
        DPClassifier().fit(X, np.arange(len(y)) % 3)
    with pytest.raises(ValueError, match="outside classes"):
        DPClassifier(classes=("no", "maybe")).fit(X, y)
