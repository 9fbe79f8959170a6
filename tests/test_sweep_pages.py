"""experiments/render_pages.py: the SOSP and warm-start pages as pure functions
of a sweep's results table (tiny hand-made tables, no runs), and its one-line
refusal of a table that lacks a column."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "experiments"
SCRIPT = BENCH / "render_pages.py"


def _module():
    spec = importlib.util.spec_from_file_location("render_pages", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rp = _module()


def sosp_row(algo, noise, seed, access, grad, **kw):
    """One ok row of a SOSP sweep table with every column the page needs."""
    row = dict.fromkeys(rp.SOSP_COLUMNS)
    row.update(algo=algo, noise=noise, loss="sigmoid-l2", data="toy", epsilon=1.0, delta=1e-5, seed=seed,
               status="ok", n=1000, d=5, data_access=access, noise_multiplier=2.0, iterations=50,
               records_used=900 if access == "single-pass" else 5000, gradient_evaluations=5000,
               test_accuracy=0.8, train_loss=0.5, nonprivate_train_loss=0.4, train_grad_norm=grad,
               train_lambda_min=1e-3, train_grad_norm_at_zero=0.2, test_majority_rate=0.75, run_s=0.1)
    row.update(kw)
    return row


def sosp_table():
    rows = []
    for s in (0, 1):
        rows.append(sosp_row("dp-sgd", None, s, "resample", 0.010, gradient_evaluations=3000))
        rows.append(sosp_row("dp-spider", "gaussian", s, "resample", 0.020, batch1=1000, batch2=100))
        rows.append(sosp_row("dp-spider", "tree", s, "resample", 0.030, batch1=1000, batch2=100))
        # the controlled variant: same alpha, kappa, b under both noises
        rows.append(sosp_row("adaptive-spider[noise_aware=false]", "gaussian", s, "single-pass", 0.040,
                             alpha=0.1, kappa=0.5, batch1=200, batch2=30, o1_refreshes=4 + s))
        rows.append(sosp_row("adaptive-spider[noise_aware=false]", "tree", s, "single-pass", 0.060,
                             alpha=0.1, kappa=0.5, batch1=200, batch2=60, o1_refreshes=1))
        # the noise-aware default: z moves alpha
        rows.append(sosp_row("perturbed-sgd", "gaussian", s, "single-pass", 0.050, alpha=0.2, kappa=0.5,
                             batch1=300, escape_tests=2 * s))
        rows.append(sosp_row("perturbed-sgd", "tree", s, "single-pass", 0.300, alpha=0.4, kappa=0.5,
                             batch1=300, escape_tests=1))
    rows.append(dict(sosp_row("dp-sgd", None, 2, "resample", None), status="error", error="ParameterError: boom"))
    return rows


def test_sosp_page_from_a_tiny_table():
    page = rp.render_sosp(sosp_table(), "T.json")
    for heading in ("## Tree vs Gaussian noise at equal ε", "## Findings (generated from the tables)",
                    "## toy, sigmoid-l2 (n = 1,000, d = 5)", "### ERM, many passes", "### single pass, population",
                    "## Failed cells", "## Reproduce"):
        assert heading in page, heading
    erm = page.split("### ERM, many passes")[1].split("###")[0]
    single = page.split("### single pass, population")[1].split("##")[0]
    # each method in its section only, units stated in the headers, the w = 0 row in both
    assert "| dp-sgd | 1 | 0.0100 ± 0.0000 | 0.1000 |" in erm and "perturbed-sgd" not in erm
    assert "per-record gradients | passes" in erm and "| 3,000 | 3.0 |" in erm
    assert "distinct records (% of n)" in single and "900 (90.0 %)" in single and "dp-spider" not in single
    assert "| *w = 0 (data-independent)* | | 0.2000 | | | 75.00 |" in erm and "*w = 0" in single
    # tree vs gaussian: the controlled variant is called controlled, the other is not
    assert ("adaptive-spider[noise_aware=false] on toy, sigmoid-l2, ε = 1: α, κ, b are the same under both "
            "noises (α = 0.1000, κ = 0.5000, b = 200)") in page
    assert "tree noise ends at ‖∇F̂‖ = 0.0600, 1.50× gaussian's 0.0400 (larger)" in page
    assert "perturbed-sgd on toy, sigmoid-l2, ε = 1: α differs between the noises (table), so the tree/gaussian " \
           "ratio 6.00 is not the noise mechanism's alone." in page
    # findings computed from the numbers
    assert "dp-spider (tree) ends at ‖∇F̂‖ = 0.0300, 3.00× dp-sgd's 0.0100 (larger)" in page
    assert "not below it: perturbed-sgd (tree) (0.3000)." in page
    assert "perturbed-sgd (gaussian) ran 0–2 escape tests per run (mean 1.0); 1 of 2 runs ran at least one." in page
    assert "adaptive-spider[noise_aware=false] (gaussian) made 4–5 O1 refreshes per run (mean 4.5); 2 of 2" in page
    assert "none has negative curvature" in page
    assert "majority-class rate" not in page.split("## Findings")[1]  # every method at 80 %, the rate is 75 %
    flat = [dict(r, test_accuracy=0.75) if r["algo"] == "dp-sgd" else r for r in sosp_table()]
    assert ("mean test accuracy within 0.05 points of the majority-class rate (75.00 %), i.e. no better than "
            "predicting one class, for dp-sgd.") in rp.render_sosp(flat)
    assert "seed 2: ParameterError: boom" in page
    assert rp.render_sosp(sosp_table(), "T.json") == page  # a pure function of the table


def warm_row(algo, eps, seed, grad, params, iterations=100, **kw):
    row = dict.fromkeys(rp.WARM_COLUMNS)
    row.update(algo=algo, noise="gaussian", loss="lowy-synthetic", data="lowy-synthetic:n=100,d=100",
               epsilon=eps, delta=0.001, seed=seed, status="ok", params=params, n=100, d=100,
               iterations=iterations, epsilon_spent=eps, train_grad_norm=grad, test_grad_norm=grad + 0.01,
               train_grad_norm_at_zero=0.09, test_grad_norm_at_zero=0.1, run_s=0.5)
    row.update(kw)
    return row


def test_warm_start_page_from_a_tiny_table():
    ws = "steps=100; then=dp-spider; then_params=steps=50,step=0.005,phase=5; warm=dp-sgd; " \
         "warm_fraction=0.25; warm_params=steps=50,step=0.0005"
    rows = []
    for s, noise in enumerate((0.0, 0.02, -0.02)):
        rows.append(warm_row("DP-SGD", 1.0, s, 0.30 + noise, "step=0.0025; steps=100"))
        rows.append(warm_row("DP-SPIDER", 1.0, s, 0.60 + noise / 10, "phase=10; step=0.0025; steps=100"))
        rows.append(warm_row("warm start", 1.0, s, 0.31 + noise, ws))
    page = rp.render_warm_start(rows, "W.json")
    assert "## Notes (generated from the table)" in page and "T1 + T2 = 100" in page
    assert "| 1 | warm start | 100 | 50 + 50 | 0.3100 ± 0.0115 |" in page
    assert "| 1 | *w = 0 (data-independent)* | 0 | | 0.0900 ± 0.0000 | 0.1000 ± 0.0000 | 0 | | |" in page
    assert "the best private method (DP-SGD) ends at train ‖∇F̂‖ = 0.3000, above w = 0's 0.0900." in page
    assert "warm start vs DP-SGD: train ‖∇F̂‖ 0.3100 vs 0.3000: a tie (the difference 0.0100 is 0.6 standard " \
           "errors of the difference (0.0163), within two)." in page
    assert "warm start vs DP-SPIDER: train ‖∇F̂‖ 0.3100 vs 0.6000: smaller by 0.2900, 25.0 standard errors" in page
    assert "At every ε the data-independent w = 0 (train ‖∇F̂‖ = 0.0900) is below every private output" in page
    assert "every warm-start run made 100 steps in total (3 runs)." in page


def test_missing_column_is_refused_in_one_line(tmp_path):
    rows = sosp_table()
    for r in rows:
        del r["escape_tests"]
    table = tmp_path / "results.json"
    table.write_text(json.dumps(rows))
    p = subprocess.run([sys.executable, str(SCRIPT), "sosp", str(table)], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "escape_tests" in lines[0], p.stderr
    # the same table renders once the column is there (the directory form works too)
    table.write_text(json.dumps(sosp_table()))
    p = subprocess.run([sys.executable, str(SCRIPT), "sosp", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 0 and "### single pass, population" in p.stdout, p.stderr


def test_warm_start_needs_its_params_column(tmp_path):
    table = tmp_path / "results.json"
    table.write_text(json.dumps([{k: v for k, v in warm_row("DP-SGD", 1.0, 0, 0.3, "steps=100").items()
                                  if k != "params"}]))
    with pytest.raises(rp.TableError, match="params"):
        rp.render("warm-start", str(table))
