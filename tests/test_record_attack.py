"""The record attack: a victim trains on D or on its neighbour D' (record 0
replaced by a null record whose gradient is never clipped, while every other
record's gradient exceeds the clip) and publishes the release; the attacker
knows D and D' and guesses which one was used.

* With a public seed the attacker re-runs dpreg on D and D' and matches the
  published weights bit for bit: the guess is certain.  This is why a research
  seed must stay secret, and why the default randomness is secret.
* With the default (secret) randomness no re-run reproduces the release.

That the release holds no clip count or other data-dependent statistic is
tests/test_release.py's ``test_release_holds_no_data_dependent_count``.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dpreg


def _neighbours(n=600, d=4):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] > 0).astype(float)
    X2 = X.copy()
    X2[0] = 0.0
    return (X, y), (X2, y)


def _weights(data, seed):
    params = {"steps": 20, "clip": 0.05}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec = dpreg.run(algo="dp-sgd", data=data, epsilon=1.0, seed=seed, params=params, intercept=False)
    return rec, np.asarray(rec["release"]["model"]["weights"])


@pytest.mark.slow
def test_a_public_seed_is_matched_bit_for_bit_and_the_secret_default_is_not():
    D, D2 = _neighbours()
    _, ref_d = _weights(D, 0)
    _, ref_d2 = _weights(D2, 0)
    assert not np.array_equal(ref_d, ref_d2)
    # seeded victim: the attacker's re-run with the public seed is the release itself
    _, published = _weights(D2, 0)
    assert np.array_equal(published, ref_d2) and not np.array_equal(published, ref_d)
    # default victim: secret randomness, no re-run with any guessed seed reproduces it
    rec, published = _weights(D2, None)
    assert not np.array_equal(published, ref_d) and not np.array_equal(published, ref_d2)
    assert "seed" not in rec["release"]["config"]

