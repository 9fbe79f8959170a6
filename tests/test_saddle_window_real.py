"""A mixed-curvature strict saddle on real rows, the property
docs/experiment-saddle-window.md rests on, on a subset (the first 20,000 rows
of IJCNN1; labels y = <x, w*>^2 - c with the public planted w* and c = 0.05,
the page's rule on IJCNN1).

* At w = 0 every per-record gradient is 0 and the Hessian has few negative
  eigenvalues and many positive ones (4 and 18 here).
* dp-gd and dp-spider at a common clip 0.1 and epsilon 1 return the saddle
  (|w| <= 0.05, lambda_min = lambda_min(0) < 0): first-order methods at their
  default steps sit there.
* dp-trust-region (clip 0.1, Hessian clip 0.1) leaves it: F <= 0.9 F(0) and
  lambda_min >= 0 up to 1e-4, with lambda_min reported by the exact Hessian.
* Its no-curvature control (Hessians clipped to 1e-9: steps of length r along
  the noisy gradient) leaves too - the page's finding that the curvature is
  not what gets the trust-region method out; if this assertion ever fails,
  the page's conclusion needs rerunning.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file

N, C, EPS, SEEDS = 20000, 0.05, 1.0, (0, 1, 2)


@pytest.fixture(scope="module")
def setup():
    """(the experiment module, whose namespace holds experiment_saddles_phase's
    real_rows, planted_w and run_method; the problem; the spectrum of H(0))."""
    shared_file("ijcnn1.trn.bz2")
    path = Path(__file__).resolve().parents[1] / "experiments" / "experiment_saddle_window.py"
    spec = importlib.util.spec_from_file_location("experiment_saddle_window", path)
    W = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(W)
    X = W.real_rows("ijcnn1", n=N)
    w_star = W.planted_w(X.shape[1], 0)
    return W, W.offset_problem(X, w_star, C), W.spectrum(X, w_star, C, 0.1)


def test_w0_is_a_mixed_curvature_strict_saddle(setup):
    _, pb, sp = setup
    assert pb.n == N and pb.d == 22
    assert np.all(pb.gradient(np.zeros(pb.d)) == 0.0)
    assert 1 <= sp["n_neg"] <= pb.d // 4 and sp["n_pos"] >= pb.d // 2
    assert sp["lambda_min_0"] < -0.003 and sp["lambda_min_0_clipped"] < -0.003


@pytest.mark.parametrize("algo", ["dp-gd", "dp-spider"])
def test_first_order_methods_sit_at_the_saddle(setup, algo):
    from dpreg.metrics import lambda_min

    W, pb, sp = setup
    for seed in SEEDS:
        w, out, _, spent = W.run_method(pb, algo, "last", {"clip": 0.1}, EPS, seed)
        assert spent <= EPS * (1 + 1e-9)
        assert np.linalg.norm(w) <= 0.05
        assert lambda_min(pb, w) == pytest.approx(sp["lambda_min_0"], abs=2e-4)


@pytest.mark.parametrize("hess_clip", [0.1, 1e-9], ids=["trust-region", "no-curvature-control"])
def test_trust_region_and_its_control_leave(setup, hess_clip):
    from dpreg.metrics import lambda_min

    W, pb, sp = setup
    F0 = pb.value(np.zeros(pb.d))
    for seed in SEEDS:
        w, out, _, spent = W.run_method(pb, "dp-trust-region", "last", {"clip": 0.1, "hess_clip": hess_clip}, EPS,
                                        seed)
        assert spent <= EPS * (1 + 1e-9)
        assert pb.value(w) <= 0.9 * F0
        assert lambda_min(pb, w) >= -1e-4 > sp["lambda_min_0"] / 10
