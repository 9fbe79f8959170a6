"""Adaptive SPIDER (Liu-Talwar Alg 2) started exactly at the strict saddle of
phase retrieval (d = 2, lambda_min(0) = -3/8; see tests/test_saddle_escape.py)
leaves it thanks to its saddle perturbation g_t ~ N(0, zeta^2/d I), and stays
stuck without it.

To isolate the perturbation, the privacy noise is replaced by the exact running
sum (test double ``NoNoise``): at w = 0 every per-record gradient is exactly 0,
so without the perturbation nothing ever moves - the proof that the escape
assertion can fail.  With the real ``gaussian`` and ``tree`` mechanisms the run
escapes as well.

Parameters: the declared constants (M = rho = 12) are loose for this data, so
the Thm 3.11 adaptive batch b_t = kappa s / alpha^2 would swallow the data set in
two steps; ``adaptive_scale`` (the documented practical constant c_bt) scales it
down.  Privacy holds for any of these settings (clipping + calibrated noise).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from dpreg.accounting import RdpAccountant
from dpreg.metrics import lambda_min
from dpreg.params import bind

from test_saddle_escape import NoNoise

N, D, EPS, ALPHA = 20000, 2, 1.0, 0.005
BASE = {"alpha": ALPHA, "clip": 1.0, "step": 1.0, "batch": 200, "kappa": 0.5, "zeta": 0.2,
        "noise_aware": False, "steps": 300, "adaptive_scale": 0.002}


@pytest.fixture(scope="module")
def setup(registry):
    from dpreg.pipeline import load_prepared
    from dpreg.problem import Problem

    X, y, _, _ = load_prepared(f"phase-retrieval:n={N},d={D}", seed=0, labels="real")
    pb = Problem(registry.get("loss", "phase-retrieval"), X, y)
    return pb, registry.get("algorithm", "adaptive-spider"), -math.sqrt(pb.constants()[2] * ALPHA)


def _run(setup, noise_cls, seed, **over):
    pb, cls, _ = setup
    params = bind(cls.params, {**BASE, **over}, "adaptive-spider")
    acc = RdpAccountant(EPS, 1.0 / N, cls.relation)
    out = cls(pb, params, noise=noise_cls, accountant=acc, seed=seed).run()
    assert acc.epsilon_spent <= EPS * (1 + 1e-9)
    return out


def test_saddle_is_strict_and_not_an_alpha_sosp(setup):
    pb, _, bar = setup
    assert lambda_min(pb, np.zeros(D)) == pytest.approx(-3 / 8, abs=0.02)
    assert lambda_min(pb, np.zeros(D)) < bar


def test_perturbation_escapes_and_its_absence_stays(setup):
    pb, _, bar = setup
    escaped = 0
    for seed in range(5):
        out = _run(setup, NoNoise, seed)
        escaped += lambda_min(pb, out.w) >= bar
    assert escaped >= 4
    stuck = _run(setup, NoNoise, 0, zeta=0.0)   # perturbation of size zero
    assert np.array_equal(stuck.w, np.zeros(D))
    assert lambda_min(pb, stuck.w) < bar


@pytest.mark.parametrize("noise", ["gaussian", "tree"])
def test_escapes_with_real_noise(setup, registry, noise):
    pb, _, bar = setup
    ok = sum(lambda_min(pb, _run(setup, registry.get("noise", noise), seed).w) >= bar for seed in range(5))
    assert ok >= 4
