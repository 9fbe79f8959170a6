"""adaptive-spider trains a two-hidden-layer network with its defaults."""
import numpy as np
import pytest


@pytest.mark.slow
def test_two_hidden_layer_network_on_digits_beats_the_majority_rate_under_adaptive_spider():
    """``mlp:hidden=64,32`` (6,570 parameters) on scikit-learn's digits (1,797
    records, 10 classes), every adaptive-spider default, eps = 4: the released
    model's accuracy on its training records is several times the majority rate
    (0.10); measured 0.46-0.47 over research seeds 100-101."""
    from sklearn.datasets import load_digits

    import dpreg

    X, y = load_digits(return_X_y=True)
    y = y.astype(float)
    rec = dpreg.run(algo="adaptive-spider", loss="mlp:hidden=64,32", data=(X, y), labels=tuple(range(10)),
                    epsilon=4.0, seed=100, warn=False, diagnostics="light")
    info = rec["diagnostics"]["run_info"]
    assert info["steps"] > 50, info  # a real run over the passes, not a handful of steps
    acc = float(np.mean(dpreg.load_model(rec).predict(X) == y))
    majority = np.max(np.bincount(y.astype(int))) / len(y)
    assert acc > majority + 0.2, (acc, majority)
