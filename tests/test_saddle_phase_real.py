"""Phase retrieval on real rows: the property docs/experiment-saddles-phase.md
relies on, on a subset (the first 20,000 rows of IJCNN1, features 10 and 11,
each row rescaled to norm 1; labels y = <x, w*>^2 with the public planted w* of
experiments/experiment_saddles_phase.py).

At w = 0 every per-record gradient is exactly 0 and lambda_min(0) = -0.45,
below -sqrt(rho alpha) = -0.24 for alpha = 0.005 and the declared rho = 12: a
strict saddle that is not an alpha-SOSP.  Every run starts there.

* dp-gd + ``above-threshold`` with ``check=fosp`` (the first-order output
  rule) returns w = 0 itself: its gradient test cannot tell the saddle from a
  minimum;
* the same run + ``check=sosp`` returns a later iterate near +-w* with
  lambda_min >= -sqrt(rho alpha);
* control (the assertion can fail): ``check=sosp`` at alpha = 0.2, where
  sqrt(rho alpha) = 1.55 > 0.45 makes the saddle an alpha-SOSP, returns w = 0;
* measured, not assumed: dp-gd's own noise carries its last iterate away from
  the saddle at step 1 (it is the output rule, not the run, that sits there).
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_file

N, COLS, EPS, ALPHA = 20000, [10, 11], 1.0, 0.005
PARAMS = {"step": 1.0, "clip": 1.0}
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def exp():
    shared_file("ijcnn1.trn.bz2")
    path = Path(__file__).resolve().parents[1] / "experiments" / "experiment_saddles_phase.py"
    spec = importlib.util.spec_from_file_location("experiment_saddles_phase", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    X = mod.real_rows("ijcnn1", n=N, columns=COLS)
    w_star = mod.planted_w(len(COLS), 0)
    pb = mod.phase_problem(X, w_star)
    facts = mod.saddle_facts(pb, w_star)
    return mod, pb, facts, -math.sqrt(facts["rho"] * ALPHA)


def test_w0_is_a_strict_saddle_that_fails_the_criterion(exp):
    _, pb, f, thr = exp
    assert pb.n == N and pb.d == 2
    assert f["grad_0"] == 0.0
    assert f["lambda_min_0"] < thr - 0.1            # -0.45 < -0.24: not an alpha-SOSP
    assert f["lambda_min_wstar"] > 0.1              # +-w* are strict minima (F = 0)
    assert f["alpha_crit"] > ALPHA


def test_fosp_rule_returns_the_saddle_sosp_rule_does_not(exp):
    from dpreg.metrics import lambda_min

    mod, pb, f, thr = exp
    for seed in SEEDS:
        w, _, sel, spent = mod.run_method(pb, "dp-gd", "fosp", PARAMS, EPS, seed, ALPHA)
        assert spent <= EPS * (1 + 1e-9)
        assert sel["index"] == 0 and np.all(w == 0.0), sel   # the start: |grad| = 0 passes
        assert lambda_min(pb, w) < thr
        w, _, sel, spent = mod.run_method(pb, "dp-gd", "sosp", PARAMS, EPS, seed, ALPHA)
        assert spent <= EPS * (1 + 1e-9)
        assert sel["index"] is not None and sel["index"] > 0, sel
        assert lambda_min(pb, w) >= thr and lambda_min(pb, w) > 0.1
        assert pb.value(w) < 0.01 * f["F0"]


def test_control_sosp_rule_accepts_the_saddle_when_alpha_is_too_large(exp):
    from dpreg.metrics import lambda_min

    mod, pb, f, thr = exp
    big = 0.2
    assert -math.sqrt(f["rho"] * big) < f["lambda_min_0"]   # the saddle is an alpha-SOSP at this alpha
    for seed in SEEDS:
        w, _, sel, _ = mod.run_method(pb, "dp-gd", "sosp", PARAMS, EPS, seed, big)
        assert sel["index"] == 0 and np.all(w == 0.0), sel
        assert lambda_min(pb, w) < thr                       # what the main test asserts fails here


def test_noisy_dp_gd_last_iterate_leaves_on_its_own(exp):
    from dpreg.metrics import lambda_min

    mod, pb, f, _ = exp
    for seed in SEEDS:
        w, _, sel, _ = mod.run_method(pb, "dp-gd", "last", PARAMS, EPS, seed)
        assert sel is None
        assert lambda_min(pb, w) > 0.1 and pb.value(w) < 0.01 * f["F0"]
