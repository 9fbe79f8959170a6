"""dpreg sweep and dpreg plot: a 2x2x2 grid in worker processes, resume,
error rows, config errors, the same table on a Dask cluster, and PNGs that
are real images."""
from __future__ import annotations

import json
import math
import os

import pytest
from click.testing import CliRunner

from dpreg.cli import _load_plugin_commands, cli

_load_plugin_commands()  # dpreg sweep and dpreg plot are command plugins

GRID = """
algorithms = ["dp-gd", "dp-sgd"]
epsilons = [1.0, 2.0]
seeds = [0, 1]
data = ["synthetic-logistic:n=2000,d=4"]
[params.dp-gd]
steps = 30
[params.dp-sgd]
steps = 30
"""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VOLATILE = ("run_s", "record")  # wall time and file location differ between two sweeps


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """The 2x2x2 sweep, run once with two worker processes."""
    d = tmp_path_factory.mktemp("sweep")
    cfg = d / "grid.toml"
    cfg.write_text(GRID)
    r = invoke("sweep", cfg, "--workers", 2, "--out-dir", d / "out")
    assert r.exit_code == 0, r.output
    return cfg, d / "out", r.output


def _table(out_dir):
    with open(out_dir / "results.json") as fh:
        return json.load(fh)


def test_grid_writes_eight_records_and_a_table_of_eight_ok_rows(grid):
    cfg, out, output = grid
    assert "8 to run" in output
    records = sorted((out / "records").glob("*.json"))
    assert len(records) == 8
    rows = _table(out)
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    cells = {(r["algo"], r["epsilon"], r["seed"]) for r in rows}
    assert cells == {(a, e, s) for a in ("dp-gd", "dp-sgd") for e in (1.0, 2.0) for s in (0, 1)}
    for r in rows:
        assert r["epsilon_spent"] <= r["epsilon"] * (1 + 1e-9) and r["epsilon_spent"] > 0.9 * r["epsilon"]
        assert r["noise_multiplier"] > 0 and 0.5 <= r["test_accuracy"] <= 1 and r["train_grad_norm"] >= 0
        with open(r["record"]) as fh:
            rec = json.load(fh)
        assert rec["release"]["config"]["algo"] == r["algo"]
        assert rec["release"]["privacy"]["epsilon"] == r["epsilon_spent"]
        assert rec["release"]["config"]["params_given"]["steps"] == 30
        # usage, data access and the w = 0 reference read off the record (the experiment pages need them)
        assert (r["n"], r["d"]) == (rec["diagnostics"]["problem"]["n"], rec["diagnostics"]["problem"]["d"])
        assert r["data_access"] == "resample" and r["iterations"] == 30 and r["params"] == "steps=30"
        assert r["gradient_evaluations"] == rec["diagnostics"]["usage"]["gradient_evaluations"] > 0
        assert r["train_grad_norm_at_zero"] > 0 and 0.5 <= r["test_majority_rate"] <= 1
        assert r["escape_tests"] is None and r["alpha"] is None  # run_info constants these algorithms lack
    assert all(r["gradient_evaluations"] == 30 * r["n"] for r in rows if r["algo"] == "dp-gd")
    # a larger epsilon means less noise
    nm = {(r["algo"], r["epsilon"]): r["noise_multiplier"] for r in rows}
    assert nm[("dp-gd", 2.0)] < nm[("dp-gd", 1.0)]
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header[:9] == ["algo", "noise", "loss", "data", "epsilon", "delta", "replicate", "seed", "status"]
    assert len((out / "results.csv").read_text().splitlines()) == 9


def test_rerun_runs_nothing(grid):
    cfg, out, _ = grid
    records = sorted((out / "records").glob("*.json"))
    before = {p: p.stat().st_mtime_ns for p in records}
    rows_before = _table(out)
    r = invoke("sweep", cfg, "--workers", 2, "--out-dir", out)
    assert r.exit_code == 0, r.output
    assert "8 done before, 0 to run" in r.output and "(0 run now)" in r.output
    assert {p: p.stat().st_mtime_ns for p in sorted((out / "records").glob("*.json"))} == before
    assert _table(out) == rows_before


def test_one_command_from_toml_to_plot(grid):
    """`dpreg sweep CONFIG --plot METRIC`: the (resumed) sweep and its
    utility-vs-epsilon plot in one command; a bad metric is a one-line error
    after the table is written (no cell lost)."""
    cfg, out, _ = grid
    r = invoke("sweep", cfg, "--workers", 1, "--out-dir", out, "--plot", "test_accuracy")
    assert r.exit_code == 0, r.output
    _is_real_png(out / "test_accuracy.png")
    r = invoke("sweep", cfg, "--workers", 1, "--out-dir", out, "--plot", "no_such_column")
    assert r.exit_code == 2 and "no_such_column" in r.output and (out / "results.json").exists()


def test_failing_cell_is_an_error_row_and_the_sweep_exits_1(tmp_path):
    """A cell that fails while it runs (here: a fixed noise multiplier that would
    spend more than the budget) is an error row; the other cells finish; the sweep
    says so and exits 1."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text('algorithms = ["dp-gd", {label = "loud", algo = "dp-gd", params = {noise_multiplier = 0.01}}]\n'
                   'epsilons = [1.0]\nseeds = [0]\ndata = ["synthetic-logistic:n=300,d=3"]\n'
                   '[params.dp-gd]\nsteps = 5\n')
    r = invoke("sweep", cfg, "--workers", 1, "--out-dir", tmp_path / "out")
    assert r.exit_code == 1, r.output
    rows = {row["algo"]: row for row in _table(tmp_path / "out")}
    assert rows["dp-gd"]["status"] == "ok"
    assert rows["loud"]["status"] == "error" and "Budget" in rows["loud"]["error"]
    assert rows["loud"]["record"] is None and "1 error" in r.output
    assert "error: 1 of 2 cells failed: 1 x " in r.stderr
    assert len(list((tmp_path / "out" / "records").glob("*.json"))) == 1


@pytest.mark.parametrize("text, key", [
    ("algorithms = [\"dp-gd\"\nepsilons = [1.0]\n", "not valid TOML"),
    ("algorithms = [\"dp-gd\"]\nepsilons = [1.0]\ndata = [\"x\"]\nepsilonz = [2.0]\n", "epsilonz"),
    ("algorithms = [\"dp-gd\"]\nepsilons = [-1.0]\ndata = [\"x\"]\n", "epsilons[0]"),
    ("algorithms = [\"dp-gdd\"]\nepsilons = [1.0]\ndata = [\"x\"]\n", "algorithms[0]"),
    ("algorithms = [\"dp-gd\"]\nepsilons = [1.0]\nseeds = [0.5]\ndata = [\"x\"]\n", "seeds[0]"),
    ("algorithms = [\"dp-gd\"]\nepsilons = [1.0]\ndata = [\"x\"]\n[params.dp-sgd]\nsteps = 3\n", "params.dp-sgd"),
    ("algorithms = [\"dp-gd\"]\nepsilons = [1.0]\ndata = [{name = \"a\", trian = \"x\"}]\n", "data[0].trian"),
    ("epsilons = [1.0]\ndata = [\"x\"]\n", "algorithms"),
])
def test_config_errors_are_one_line_exit_2(tmp_path, text, key):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    r = invoke("sweep", cfg, "--out-dir", tmp_path / "out")
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and key in lines[0], r.output
    assert not (tmp_path / "out").exists()


def _is_real_png(path):
    import matplotlib.image as mpimg
    import numpy as np

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 5000
    img = mpimg.imread(str(path))
    assert float(np.std(img)) > 0.01


def test_plot_sweep_and_run_write_real_pngs(grid, tmp_path):
    _, out, _ = grid
    png = tmp_path / "acc.png"
    r = invoke("plot", "sweep", out, "--metric", "test_accuracy", "--out", png)
    assert r.exit_code == 0, r.output
    _is_real_png(png)
    record = sorted((out / "records").glob("*.json"))[0]
    png2 = tmp_path / "run.png"
    r = invoke("plot", "run", record, "--out", png2)
    assert r.exit_code == 0, r.output
    _is_real_png(png2)
    r = invoke("plot", "sweep", out, "--metric", "no_such_column", "--out", tmp_path / "x.png")
    assert r.exit_code == 2 and "no_such_column" in r.output and not (tmp_path / "x.png").exists()


def test_sweep_series_mean_and_standard_error():
    from dpreg_plugins.commands.plot import sweep_series

    rows = [dict(status="ok", data="d", loss="l", algo="a", noise=None, epsilon=1.0, m=v) for v in (1.0, 2.0, 4.0)]
    rows.append(dict(status="error", data="d", loss="l", algo="a", noise=None, epsilon=1.0, m=None))
    (eps, mean, sem, k), = sweep_series(rows, "m")["d"]["a"]
    assert (eps, k) == (1.0, 3) and mean == pytest.approx(7 / 3)
    assert sem == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2 / 3))


def test_dask_cluster_gives_the_same_table(grid, tmp_path):
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    cfg, out, _ = grid
    with LocalCluster(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        r = invoke("sweep", cfg, "--scheduler", client.scheduler.address, "--out-dir", tmp_path / "dask")
    assert r.exit_code == 0, r.output
    assert "8 to run" in r.output
    local, remote = _table(out), _table(tmp_path / "dask")
    assert len(remote) == 8 and all(row["status"] == "ok" for row in remote)
    for a, b in zip(local, remote):
        for k in a:
            if k in VOLATILE:
                continue
            if isinstance(a[k], float):
                assert b[k] == pytest.approx(a[k], rel=1e-9, abs=1e-12), k
            else:
                assert a[k] == b[k], k
    assert all(os.path.isfile(row["record"]) for row in remote)


def test_variants_with_own_epsilons_share_a_label(tmp_path):
    from dpreg.errors import DpregError
    from dpreg_plugins.commands.sweep import parse_config

    cfg = {"algorithms": [{"label": "sgd", "algo": "dp-sgd", "epsilons": [1.0], "params": {"step": 0.1}},
                          {"label": "sgd", "algo": "dp-sgd", "epsilons": [2.0], "params": {"step": 0.2}}],
           "data": ["synthetic-logistic:n=100,d=2"], "seeds": [0, 1]}
    cells = parse_config(cfg)
    assert [(c.algo, c.epsilon, c.params["step"], c.seed, c.replicate) for c in cells] == [
        ("sgd", 1.0, 0.1, 0, 0), ("sgd", 1.0, 0.1, 1, 1), ("sgd", 2.0, 0.2, 0, 0), ("sgd", 2.0, 0.2, 1, 1)]
    assert len({c.key() for c in cells}) == 4
    cfg["algorithms"][1]["epsilons"] = [1.0]
    with pytest.raises(DpregError, match="share the label"):
        parse_config(cfg)


def test_repository_configs_are_the_pages_grids():
    """experiments/sweeps/*.toml: the SOSP page's grid, and App. G of the warm-start script."""
    import importlib.util
    from pathlib import Path

    from dpreg_plugins.commands.sweep import load_toml, parse_config

    bench = Path(__file__).resolve().parents[1] / "experiments"
    cells = parse_config(load_toml(bench / "sweeps" / "sosp.toml"), bench / "sweeps")
    methods = {(a, nz) for a in ("dp-spider", "adaptive-spider", "perturbed-sgd", "adaptive-spider[noise_aware=false]")
               for nz in ("gaussian", "tree")} | {("dp-sgd", None), ("dp-gd", None)}
    assert {(c.data, c.loss, c.algo, c.noise, c.epsilon, c.seed) for c in cells} == {
        ("a9a", loss, a, nz, 1.0, s) for loss in ("sigmoid-l2", "logistic-nonconvex-reg") for a, nz in methods
        for s in range(5)}
    assert len(cells) == 100 and all(c.delta is None for c in cells)
    one_pass = {"adaptive-spider": {"passes": 1}, "perturbed-sgd": {"passes": 1}}  # the papers' single pass
    assert all(c.params == {**one_pass.get(c.algorithm, {}),
                            **({"noise_aware": False} if "[noise_aware=false]" in c.algo else {})} for c in cells)
    assert all(Path(c.train).is_file() for c in cells) or not (bench.parent.parent / "shared").exists()

    spec = importlib.util.spec_from_file_location("experiment_warm_start", bench / "experiment_warm_start.py")
    ws = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ws)
    cells = parse_config(load_toml(bench / "sweeps" / "warm-start.toml"), bench / "sweeps")
    got = {(c.algo, c.epsilon, c.seed): (c.algorithm, c.params) for c in cells}
    want = {(label, e, s): cfg for e in ws.EPSILONS for label, cfg in ws.app_g_configs(e).items()
            for s in range(1, 11)}
    assert got == want and all(c.delta == ws.DELTA and c.loss == "lowy-synthetic" for c in cells)


def test_the_table_of_a_real_sweep_renders_the_sosp_page(grid):
    """The page renderer reads a table dpreg sweep really wrote (its columns, its units)."""
    import importlib.util
    from pathlib import Path

    _, out, _ = grid
    spec = importlib.util.spec_from_file_location(
        "render_pages", Path(__file__).resolve().parents[1] / "experiments" / "render_pages.py")
    rp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rp)
    page = rp.render("sosp", str(out / "results.json"))
    assert "### ERM, many passes" in page and "### single pass, population" not in page
    n = _table(out)[0]["n"]
    assert "| dp-gd | 1 |" in page and f"| {30 * n:,} | 30.0 |" in page  # 30 full-batch steps = 30 passes


# ------------------------------------------------------------- secret randomness
def _csv(path, X, y):
    path.write_text("\n".join(",".join(f"{v:.17g}" for v in (t, *x)) for x, t in zip(X, y)) + "\n")
    return path


def _one_cell(data, out, **grid):
    """A one-cell sweep (dp-gd, eps = 1) in this process: (released weights, row, record file name)."""
    import numpy as np

    from dpreg_plugins.commands.sweep import parse_config, run_sweep

    cfg = {"algorithms": ["dp-gd"], "epsilons": [1.0], "data": [str(data)], "diagnostics": "light",
           "params": {"dp-gd": {"steps": 10}}, **grid}
    (row,), _ = run_sweep(parse_config(cfg, data.parent), str(out), workers=1)
    with open(row["record"]) as fh:
        rec = json.load(fh)
    return np.asarray(rec["release"]["model"]["weights"]), row, os.path.basename(row["record"])


def _membership_attack(tmp_path, trials, victim_grid):
    """The attack on a published sweep: the victim publishes one cell run on
    D (with a target record) or D' (without); the attacker, who knows D, D'
    and everything the cell shows, re-runs it on both - with the seed the cell
    shows, else with seed 0 - and guesses the nearer.  Returns (right guesses,
    exact matches, cells that showed a seed)."""
    import re

    import numpy as np

    tmp_path.mkdir()
    rng = np.random.default_rng(11)  # the experiment's own coins
    X = rng.normal(size=(200, 4)) / 4
    y = (X[:, 0] > 0).astype(float)
    D = _csv(tmp_path / "with.csv", np.vstack([X, [1.0, 0, 0, 0]]), np.append(y, 0.0))
    D2 = _csv(tmp_path / "without.csv", X, y)
    right = exact = shown = 0
    for t in range(trials):
        truth = "D" if rng.random() < 0.5 else "D'"
        w, row, name = _one_cell(D if truth == "D" else D2, tmp_path / f"v{t}", **victim_grid)
        m = re.search(r"seed(\d+)", name)
        seed = row.get("seed") if row.get("seed") is not None else (int(m.group(1)) if m else None)
        shown += seed is not None
        ref = {k: _one_cell(v, tmp_path / f"a{t}{k}", seeds=[0 if seed is None else seed])[0]
               for k, v in (("D", D), ("D'", D2))}
        dist = {k: float(np.linalg.norm(w - v)) for k, v in ref.items()}
        exact += min(dist.values()) == 0.0
        right += min(dist, key=dist.get) == truth
    return right, exact, shown


def test_membership_attack_on_a_published_sweep_fails_with_secret_cells(tmp_path):
    """With the default secret randomness no published cell shows a seed, no
    re-run reproduces a published model, and the attacker guesses at chance:
    at most 30 right of 40 (a guesser at chance exceeds that with probability
    3.4e-4; the attack on seeded cells is right 40 times of 40).  The same
    attack on a grid that names its seeds wins every time - what the default
    prevents."""
    right, exact, shown = _membership_attack(tmp_path / "secret", 40, {})
    assert shown == 0 and exact == 0
    assert right <= 30, right
    right, exact, shown = _membership_attack(tmp_path / "seeded", 4, {"seeds": [7]})
    assert shown == 4 and exact == 4 and right == 4


def test_cells_have_secret_randomness_by_default(tmp_path):
    """No seed anywhere unless the grid names seeds: file names carry rep<k>,
    the table has a replicate column and no seed column, every record's
    randomness is secret, replicates differ, and no seeded-randomness warning."""
    cfg = tmp_path / "g.toml"
    cfg.write_text('algorithms = ["dp-gd"]\nepsilons = [1.0]\nreplicates = 2\n'
                   'data = ["synthetic-logistic:n=500,d=3"]\ndiagnostics = "light"\n[params.dp-gd]\nsteps = 5\n')
    r = invoke("sweep", cfg, "--workers", 1, "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert "seed" not in r.output.lower()
    names = sorted(p.name for p in (tmp_path / "out" / "records").glob("*.json"))
    assert len(names) == 2 and all("seed" not in n for n in names)
    assert sorted("rep0" in n for n in names) == [False, True] and sorted("rep1" in n for n in names) == [False, True]
    csv_text = (tmp_path / "out" / "results.csv").read_text()
    assert "seed" not in csv_text.splitlines()[0].split(",") and "replicate" in csv_text.splitlines()[0]
    rows = _table(tmp_path / "out")
    assert [row["replicate"] for row in rows] == [0, 1] and all("seed" not in row for row in rows)
    recs = [json.loads((tmp_path / "out" / "records" / n).read_text()) for n in names]
    assert all(rec["release"]["privacy"]["randomness"] == "secret" for rec in recs)
    assert all("seed" not in json.dumps(rec["release"]["privacy"]) for rec in recs)
    assert recs[0]["release"]["model"]["weights"] != recs[1]["release"]["model"]["weights"]
    again = invoke("sweep", cfg, "--workers", 1, "--out-dir", tmp_path / "out")
    assert "2 done before, 0 to run" in again.output  # the replicate index makes a stable, resumable key


def test_seeded_cells_warn_once_as_dpreg_run_does(tmp_path):
    """The seeded-randomness warning once, up front; every other privacy
    warning of the runs (here delta >= 1/n, in all four cells) once too."""
    from dpreg.pipeline import SEEDED_NOTE

    cfg = tmp_path / "g.toml"
    cfg.write_text('algorithms = ["dp-gd"]\nepsilons = [1.0, 2.0]\nseeds = [3, 4]\ndelta = 0.01\n'
                   'data = ["synthetic-logistic:n=500,d=3"]\ndiagnostics = "light"\n[params.dp-gd]\nsteps = 5\n')
    r = invoke("sweep", cfg, "--workers", 1, "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert r.output.count(f"warning: {SEEDED_NOTE}") == 1 and r.output.count("warning:") == 2
    assert r.output.count("warning: delta=0.01 >= 1/n") == 1
    rows = _table(tmp_path / "out")
    assert sorted((row["seed"], row["replicate"]) for row in rows) == [(3, 0), (3, 0), (4, 1), (4, 1)]
    assert all("seed3" in row["record"] or "seed4" in row["record"] for row in rows)


@pytest.mark.parametrize("text, key", [
    ("replicates = 0\n", "replicates"), ("replicates = 1.5\n", "replicates"),
    ("replicates = 2\nseeds = [0]\n", "either replicates"), ("seeds = [1, 1]\n", "listed twice"),
])
def test_replicates_and_seeds_are_checked(tmp_path, text, key):
    from dpreg.errors import DpregError
    from dpreg_plugins.commands.sweep import load_toml, parse_config

    cfg = tmp_path / "c.toml"
    cfg.write_text('algorithms = ["dp-gd"]\nepsilons = [1.0]\ndata = ["synthetic-logistic:n=100,d=2"]\n' + text)
    with pytest.raises(DpregError, match=key):
        parse_config(load_toml(cfg))
