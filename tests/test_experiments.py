"""The scripts of experiments/ run (CI smoke-runs each at a tiny size): the
standing table of docs/models-learn.md, every algorithm on 200-record subsets."""
from __future__ import annotations

import importlib.util

import pytest
from conftest import ROOT


def _module(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_standing_table_runs_tiny(capsys):
    """--tiny: every algorithm, two data sets, one seed, eps = 1; the table has a
    row per algorithm and data set, with the gaps to dp-sgd and to the majority
    rate and the commit it was made at."""
    mod = _module("targets_models_learn")
    res = mod.main(["--tiny"])
    out = capsys.readouterr().out
    names = {name for (_, name, _) in res}
    assert len(names) == 2
    for algo in mod.ALGOS:
        for name in names:
            cell = res[(algo, name, 1.0)]
            assert len(cell["acc"]) == 1 and 0.0 <= cell["acc"][0] <= 1.0
        assert f"| {algo} |" in out
    assert "made at commit" in out and "vs dp-sgd" in out and "vs majority" in out


@pytest.mark.slow
def test_large_d_timing_runs_tiny(capsys):
    """--tiny: the trust-region pair, zo-o2nc and dp-sgd at n = 300, d = 60."""
    mod = _module("large_d_timing")
    res = mod.main(["--tiny"])
    assert set(res) == set(mod.ALGOS)
    for call_s, cpu_s, run_s, eval_s, acc in res.values():
        assert 0 < run_s <= call_s and cpu_s > 0 and eval_s >= 0 and 0.0 <= acc <= 1.0
    assert "| dp-trust-region |" in capsys.readouterr().out
