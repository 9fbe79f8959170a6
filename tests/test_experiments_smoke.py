"""The scripts of experiments/ run, so none rots: each script that can runs at
its ``--tiny`` size (the standing table of docs/models-learn.md on 200-record
subsets, the large-d timing, the smaller experiments and every tuning script);
the large experiments' page and table writers render the committed results.
CI runs this file with the rest of the suite."""
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


# Every other script of experiments/ at its --tiny size, as CI runs it: run as
# a user would (``python experiments/<script> ARGS``, in a fresh directory), it
# must exit 0 and print its table.  (script, arguments, text its output holds)
SCRIPTS = [
    ("defaults_tasks.py", ["--tiny"], "| wine |"),
    ("experiment_scaling.py", ["--tiny"], "| breast-cancer | dp-sgd |"),
    ("networks_accuracy.py", ["--tiny"], "| digits | dp-sgd |"),
    ("passes_crossover.py", ["--tiny"], "adaptive-spider n=1000"),
    ("single_pass_reference.py", ["--tiny"], "best private cell"),
    ("tune_defaults_h_t.py", ["--tiny"], "training-loss gap"),
    ("tune_mlp_defaults.py", ["--tiny"], "dp-sgd mlp:hidden=8 digits"),
    ("tune_regression.py", ["--tiny"], "diabetes"),
    ("tune_zo_o2nc.py", ["--tiny"], "train accuracy"),
    ("tune_on_training_data.py", ["perturbed-sgd", "{}", "--tiny"], "perturbed-sgd tiny"),
]


def _run_script(script, args, tmp_path, timeout=900):
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_NUM_THREADS="1", DPREG_BENCH_DIR=str(tmp_path / "bench"))
    return subprocess.run([sys.executable, str(ROOT / "experiments" / script), *args], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("script,args,expect", SCRIPTS, ids=[s for s, _, _ in SCRIPTS])
def test_script_runs_tiny(tmp_path, script, args, expect):
    needs_shared = script in ("single_pass_reference.py",)
    if needs_shared and not (ROOT.parent / "shared" / "data" / "ijcnn1.trn.bz2").exists():
        pytest.skip("IJCNN1 not present beside the checkout")
    p = _run_script(script, args, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert expect in p.stdout, p.stdout[-3000:]


# The large experiments' page and table writers, run on the committed results
# (no algorithm runs): their rendering cannot rot apart from the records.
RES = "experiments/results/"
RENDERS = [
    ("experiment_fidelity.py", ["report", RES + "experiment-fidelity.jsonl"], "| adaptive-spider + tree |", None),
    ("experiment_saddle_window.py", ["--tables", RES + "saddle_window_ijcnn1_clip0.1.json"], "|", None),
    ("experiment_saddles_mlp.py", ["--tables", RES + "saddles_mlp_digits.json"], "|", None),
    ("experiment_saddles_phase.py", ["--tables", RES + "saddles_phase_ijcnn1_clip0.1.json"], "|", None),
    ("experiment_trust_region.py", ["--merge", RES + "trust_region_ijcnn.json", "--out", "{tmp}/tr.md"],
     "wrote", "tr.md"),
    ("experiment_warm_start.py", ["--from-json", RES + "experiment-warm-start.json", "--out", "{tmp}/ws.md"],
     "", "ws.md"),
    ("experiment_zeroth_order.py", ["--table", "docs/experiment-zeroth-order.json"], "|", None),
    ("experiment_saddles.py", ["--tables", RES + "saddles_ijcnn1_eps1.json"], "| 1 | perturbed-sgd |", None),
    ("render_pages.py", ["sosp", RES + "experiments-sosp.json"], "# SPIDER-family experiment", None),
    ("experiments_sosp.py", [], "", None),
]


@pytest.mark.parametrize("script,args,expect,page", RENDERS, ids=[s for s, _, _, _ in RENDERS])
def test_page_writers_render_the_committed_results(tmp_path, script, args, expect, page):
    args = [str(ROOT / a) if a.startswith((RES, "docs/")) else a.replace("{tmp}", str(tmp_path)) for a in args]
    p = _run_script(script, args, tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert expect in p.stdout, p.stdout[-3000:]
    if page:
        assert (tmp_path / page).read_text().startswith("#")


@pytest.mark.slow
def test_saddles_experiment_runs_tiny():
    """experiment_saddles on 400 unit rows: every run starts at the saddle w = 0
    of matrix-factorisation; the table reports each method's runs at a saddle
    and the SOSP decisions by cause from the run record."""
    import numpy as np

    from conftest import unit_rows

    mod = _module("experiment_saddles")
    X = unit_rows(np.random.default_rng(0), 400, 5)
    pb, land = mod.problem(X), mod.landscape(X)
    assert land["lambda_min_0"] == -land["lam1"] < 0 and land["F_star"] == -land["lam1"] ** 2 / 4
    rec = {"data": "tiny", "landscape": land, "runs": []}
    for label in ("dp-gd", "perturbed-sgd:batch1=150"):
        w, out, spent = mod.run(pb, label, 1.0, 0)
        assert spent <= 1.0 * (1 + 1e-9)
        r = {"algo": label, "eps": 1.0, "seed": 0, **mod.measure(pb, w, land)}
        if "sosp_decisions" in out.info:
            r["sosp_decisions"] = out.info["sosp_decisions"]
        rec["runs"].append(r)
    esc = rec["runs"][1]["sosp_decisions"]["escape_tests"]
    assert esc["total"] == sum(esc[k] for k in ("escaped", "certified", "decided_by_noise", "interrupted"))
    table = mod.tables(rec)
    assert "| 1 | dp-gd | 1 |" in table and "| 1 | perturbed-sgd:batch1=150 | 1 |" in table
    assert f"| 1 | perturbed-sgd:batch1=150 | {esc['escaped']} / {esc['certified']} /" in table
