"""The ``dpreg plot`` commands (matplotlib, Agg backend: no display needed).

``dpreg plot sweep DIR [--metric test_accuracy] [--out FILE.png]``: utility
against epsilon from a sweep's ``DIR/results.json``, one line per algorithm
(and noise) with error bars of mean +- standard error over the runs of a
cell (its replicates, or its seeds in a seeded grid), one
panel per data set (and loss, when the sweep has several).

``dpreg plot run RECORD.json [--out FILE.png]``: a run's trajectory from its
record's diagnostics: every per-checkpoint series of
``diagnostics.trajectory.checkpoints`` against the step (the true gradient
norm of the training objective at the checkpoints - a non-private
diagnostic - and the loss or epsilon spent when the record holds them), and
the range (min, mean, max) of each summarised released series such as the
noisy gradient norm.  Everything plotted is read from files: nothing is
recomputed on the data.
"""
from __future__ import annotations

import math
import os
from collections import defaultdict

import click

from dpreg import hookimpl
from dpreg.errors import DpregError
from dpreg.results import read_json

NICE = {"grad_norm": "‖∇F̂(w_t)‖ (train, diagnostic)", "loss": "F̂(w_t) (train, diagnostic)",
        "train_loss": "F̂(w_t) (train, diagnostic)", "epsilon": "ε spent", "epsilon_spent": "ε spent"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def mean_sem(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for a single value)."""
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, 0.0
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, math.sqrt(var / n)


def sweep_series(rows: list[dict], metric: str) -> dict:
    """{panel: {line: [(epsilon, mean, sem, runs)]}} over the ok rows with a
    finite ``metric``; panel = data set (and loss if several), line = algo
    (and noise)."""
    ok = [r for r in rows if r.get("status") == "ok" and isinstance(r.get(metric), (int, float))
          and math.isfinite(r[metric])]
    if not ok:
        raise DpregError(f"no finished cell has a value for {metric!r} "
                         f"(columns: {', '.join(k for k in rows[0] if k not in ('record', 'error'))})"
                         if rows else "the sweep's table is empty")
    several_losses = len({r["loss"] for r in ok}) > 1
    groups: dict = defaultdict(lambda: defaultdict(list))
    for r in ok:
        panel = f"{r['data']} ({r['loss']})" if several_losses else str(r["data"])
        line = f"{r['algo']} ({r['noise']})" if r.get("noise") else str(r["algo"])
        groups[panel][(line, float(r["epsilon"]))].append(float(r[metric]))
    out: dict = {}
    for panel, g in groups.items():
        lines: dict = defaultdict(list)
        for (line, eps), vals in sorted(g.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            lines[line].append((eps, *mean_sem(vals), len(vals)))
        out[panel] = dict(lines)
    return out


def plot_sweep(sweep_dir: str, metric: str, out: str) -> str:
    """Draw utility vs epsilon (mean +- s.e. over the runs) per algorithm, one
    panel per data set; write a PNG to ``out`` and return its path."""
    rows = read_json(os.path.join(sweep_dir, "results.json"), "sweep table")
    if not isinstance(rows, list):
        raise DpregError(f"{sweep_dir}/results.json is not a sweep table")
    series = sweep_series(rows, metric)
    plt = _pyplot()
    k = len(series)
    fig, axes = plt.subplots(1, k, figsize=(5.2 * k, 4.2), squeeze=False)
    for ax, (panel, lines) in zip(axes[0], series.items()):
        for line, pts in lines.items():
            eps, m, se = [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]
            ax.errorbar(eps, m, yerr=se, marker="o", capsize=3, label=line)
        ax.set_xscale("log")
        ticks = sorted({p[0] for pts in lines.values() for p in pts})
        ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
        ax.minorticks_off()
        ax.set_xlabel("ε")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(panel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    runs = max(p[3] for lines in series.values() for pts in lines.values() for p in pts)
    fig.suptitle(f"{metric.replace('_', ' ')} vs ε (mean ± s.e. over up to {runs} runs)")
    fig.tight_layout()
    return _save(fig, plt, out)


def plot_run(record_path: str, out: str) -> str:
    """Draw a run's trajectory from its record; write a PNG to ``out``."""
    rec = read_json(record_path, "record")
    diag = rec.get("diagnostics") if isinstance(rec, dict) else None
    traj = (diag or {}).get("trajectory") or {}
    cps = traj.get("checkpoints") or {}
    steps = cps.get("steps") or []
    curves = {k: v for k, v in cps.items() if k != "steps" and isinstance(v, list) and len(v) == len(steps)
              and len(v) > 0}
    summaries = {k: v for k, v in traj.items() if k != "checkpoints" and isinstance(v, dict) and "mean" in v}
    if not curves and not summaries:
        raise DpregError(f"{record_path} holds no trajectory (its diagnostics were off or light)")
    plt = _pyplot()
    panels = len(curves) + (1 if summaries else 0)
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2), squeeze=False)
    axes = list(axes[0])
    for ax, (name, vals) in zip(axes, curves.items()):
        xs = [s for s, v in zip(steps, vals) if v is not None]
        ys = [v for v in vals if v is not None]
        ax.plot(xs, ys, marker="o", ms=3)
        if name in ("grad_norm",) and ys and min(ys) > 0:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel(NICE.get(name, name))
        ax.grid(True, alpha=0.3)
    if summaries:
        ax = axes[-1]
        names = list(summaries)
        for i, name in enumerate(names):
            s = summaries[name]
            ax.errorbar([i], [s["mean"]], yerr=[[s["mean"] - s["min"]], [s["max"] - s["mean"]]], fmt="o",
                        capsize=5, label=f"{name}: mean, min-max over {s.get('count')} steps")
            ax.plot([i, i], [s["first"], s["last"]], "x", color="k")
        ax.set_xticks(range(len(names)), names)
        ax.set_xlim(-0.7, len(names) - 0.3)
        ax.set_title("released series (x: first and last)")
        ax.legend(fontsize="small")
        ax.grid(True, alpha=0.3)
    cfg = rec.get("release", {}).get("config", {})
    priv = rec.get("release", {}).get("privacy", {})
    eps = priv.get("epsilon")
    fig.suptitle(f"{cfg.get('algo', '?')}{' / ' + cfg['noise'] if cfg.get('noise') else ''} on {cfg.get('data', '?')}"
                 + (f", ε spent {eps:.3g}" if isinstance(eps, (int, float)) else ""))
    fig.tight_layout()
    return _save(fig, plt, out)


def _save(fig, plt, out: str) -> str:
    from dpreg.results import check_writable

    check_writable(out)
    try:
        fig.savefig(out, dpi=110)
    except OSError as exc:
        raise DpregError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return out


@click.group("plot")
def plot():
    """Plot a sweep (utility vs epsilon) or a run's trajectory (PNG files)."""


@plot.command("sweep")
@click.argument("sweep_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--metric", default="test_accuracy", show_default=True,
              help="table column to plot (test_accuracy, train_loss, train_grad_norm, ...)")
@click.option("--out", default=None, metavar="FILE.png", help="[default: DIR/<metric>.png]")
def plot_sweep_cmd(sweep_dir, metric, out):
    """Utility vs epsilon, mean +- standard error over each cell's runs, per algorithm and noise."""
    from dpreg.cli import user_errors

    path = user_errors(plot_sweep)(sweep_dir, metric, out or os.path.join(sweep_dir, f"{metric}.png"))
    click.echo(f"wrote {path}")


@plot.command("run")
@click.argument("record", type=click.Path(dir_okay=False))
@click.option("--out", default=None, metavar="FILE.png", help="[default: RECORD stem + .png]")
def plot_run_cmd(record, out):
    """A run's trajectory: gradient norm (and loss, epsilon when recorded) vs step."""
    from dpreg.cli import user_errors

    path = user_errors(plot_run)(record, out or os.path.splitext(record)[0] + ".png")
    click.echo(f"wrote {path}")


@hookimpl
def dpreg_register_commands(cli):
    cli.add_command(plot)
