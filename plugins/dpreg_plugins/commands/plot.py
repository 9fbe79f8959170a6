"""The ``dpreg plot`` commands (matplotlib, Agg backend: no display needed).

``dpreg plot sweep DIR [--metric test_accuracy] [--out FILE.png]``: utility
against epsilon from a sweep's ``DIR/results.json``, one line per algorithm
(and noise) with error bars of mean +- standard error over the runs of a
cell (its replicates, or its seeds in a seeded grid), one
panel per data set (and loss, when the sweep has several).

``dpreg plot run RECORD.json [--out FILE.png]``: a run's trajectory from its
record's diagnostics (:func:`run_panels`): the training loss and accuracy at
the checkpoints of ``diagnostics.trajectory.checkpoints`` against the step,
with the references a reader compares them with (the loss at w = 0, the
majority-class rate, the non-private optimum's loss and accuracy, the final
test accuracy); the true gradient norm of the training objective; and the
range (min, mean, max; first and last) of each summarised released series
such as the noisy gradient norm or the batch size.  Every panel whose values
span more than a factor of 20 has a log axis.  All of it is a non-private
diagnostic except the released series.  Everything plotted is read from
files: nothing is recomputed on the data, and the title names the data file
by its base name only.
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


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def run_panels(rec: dict) -> list[dict]:
    """What ``dpreg plot run`` draws from a record, one dict per panel:
    ``title``, ``ylabel``, ``series`` (label -> (steps, values)), ``refs``
    (label -> a horizontal reference value), ``log`` (whether the y axis is
    logarithmic: positive values spanning more than a factor of 20).  Panels:
    training loss and accuracy over the checkpoints (with the loss at w = 0,
    the majority-class rate and the non-private optimum's loss and accuracy
    as references, and the final test accuracy), the true gradient norm
    (log scale), and the range of each released per-step series."""
    diag = rec.get("diagnostics") if isinstance(rec, dict) else None
    diag = diag if isinstance(diag, dict) else {}
    traj = diag.get("trajectory") or {}
    cps = traj.get("checkpoints") or {}
    steps = cps.get("steps") or []
    base, metrics = diag.get("baselines") or {}, diag.get("metrics") or {}

    def curve(key):
        vals = cps.get(key)
        if not isinstance(vals, list) or len(vals) != len(steps) or not vals:
            return None
        pts = [(s, v) for s, v in zip(steps, vals) if _finite(v)]
        return ([p[0] for p in pts], [p[1] for p in pts]) if pts else None

    def refs(*pairs):
        return {label: float(base.get(k, metrics.get(k))) for label, k in pairs if _finite(base.get(k, metrics.get(k)))}

    panels = []
    loss = curve("loss")
    if loss:
        panels.append({"title": "training loss", "ylabel": "F̂(w_t) (train, diagnostic)",
                       "series": {"train loss": loss},
                       "refs": refs(("loss at w = 0", "train_loss_at_zero"),
                                    ("non-private optimum", "nonprivate_train_loss"))})
    acc = curve("accuracy")
    if acc:
        panels.append({"title": "accuracy", "ylabel": "accuracy (diagnostic)", "series": {"train accuracy": acc},
                       "refs": refs(("majority class (train)", "train_majority_rate"),
                                    ("majority class (test)", "test_majority_rate"),
                                    ("non-private optimum (train)", "nonprivate_train_accuracy"),
                                    ("non-private optimum (test)", "nonprivate_test_accuracy"),
                                    ("final test accuracy", "test_accuracy"))})
    other = [k for k in cps if k not in ("steps", "loss", "accuracy", "skipped", "skipped_reason")]
    for key in other:
        c = curve(key)
        if c:
            panels.append({"title": NICE.get(key, key), "ylabel": NICE.get(key, key), "series": {key: c},
                           "refs": refs(("at w = 0", "train_grad_norm_at_zero")) if key == "grad_norm" else {}})
    summaries = {k: v for k, v in traj.items() if k != "checkpoints" and isinstance(v, dict)
                 and all(_finite(v.get(f)) for f in ("mean", "min", "max"))}
    if summaries:
        panels.append({"title": "released series (x: first and last)", "ylabel": "value", "summaries": summaries,
                       "refs": {}})
    for p in panels:
        vals = [v for _, ys in p.get("series", {}).values() for v in ys] + list(p["refs"].values())
        vals += [s[f] for s in p.get("summaries", {}).values() for f in ("min", "max")]
        pos = [v for v in vals if _finite(v)]
        p["log"] = bool(pos) and min(pos) > 0 and max(pos) / min(pos) > 20
        p["zoom"] = _zoom(p) if not p["log"] else None
    return panels


def _zoom(panel: dict):
    """y limits that leave out a first checkpoint far outside everything else
    (the accuracy of w_0 = 0, where every margin is a tie): the rest of the
    curve and the references fill the panel; None to keep matplotlib's."""
    series = list(panel.get("series", {}).values())
    if len(series) != 1 or len(series[0][1]) < 3:
        return None
    first, rest = series[0][1][0], series[0][1][1:] + list(panel["refs"].values())
    lo, hi = min(rest), max(rest)
    span = max(hi - lo, 1e-12)
    if lo - 3 * span <= first <= hi + 3 * span:
        return None
    return lo - 0.15 * span, hi + 0.15 * span


def plot_run(record_path: str, out: str) -> str:
    """Draw a run's trajectory from its record (:func:`run_panels`); write a PNG to ``out``."""
    rec = read_json(record_path, "record")
    panels = run_panels(rec)
    if not panels:
        raise DpregError(f"{record_path} holds no trajectory (its diagnostics were off or light)")
    plt = _pyplot()
    cols = min(2, len(panels))
    rows_n = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.6 * cols, 4.0 * rows_n), squeeze=False)
    flat = [ax for row in axes for ax in row]
    styles = ("--", ":", "-.", (0, (5, 1)), (0, (1, 3)))
    for ax, p in zip(flat, panels):
        for label, (xs, ys) in p.get("series", {}).items():
            ax.plot(xs, ys, marker="o", ms=3, label=label)
        for j, (label, v) in enumerate(p["refs"].items()):
            ax.axhline(v, color=f"C{j + 1}", ls=styles[j % len(styles)], lw=1.2, label=f"{label}: {v:.4g}")
        if "summaries" in p:
            names = list(p["summaries"])
            for i, name in enumerate(names):
                sm = p["summaries"][name]
                ax.errorbar([i], [sm["mean"]], yerr=[[sm["mean"] - sm["min"]], [sm["max"] - sm["mean"]]], fmt="o",
                            capsize=5, label=f"{name}: mean, min-max over {sm.get('count')} steps")
                if _finite(sm.get("first")) and _finite(sm.get("last")):
                    ax.plot([i, i], [sm["first"], sm["last"]], "x", color="k")
            ax.set_xticks(range(len(names)), names)
            ax.set_xlim(-0.7, len(names) - 0.3)
        else:
            ax.set_xlabel("step")
        if p["log"]:
            ax.set_yscale("log")
        elif p.get("zoom"):
            ax.set_ylim(*p["zoom"])
        ax.set_title(p["title"])
        ax.set_ylabel(p["ylabel"])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small")
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    cfg = rec.get("release", {}).get("config", {})
    priv = rec.get("release", {}).get("privacy", {})
    eps = priv.get("epsilon")
    data = os.path.basename(str(cfg.get("data", "?")))  # older records named files by absolute path
    fig.suptitle(f"{cfg.get('algo', '?')}{' / ' + cfg['noise'] if cfg.get('noise') else ''} on {data}"
                 + (f", ε spent {eps:.3g}" if _finite(eps) else ""))
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
