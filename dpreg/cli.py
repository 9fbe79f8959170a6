"""The ``dpreg`` command line (click).

User errors (:class:`~dpreg.errors.DpregError`) print one line
``error: <message>`` on stderr and exit with status 2, with no traceback and
no output file.  Importing this module imports no numba: ``dpreg --help`` and
``dpreg list`` stay fast.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time

import click

from .errors import DpregError

#: when this module was imported (the clock of :func:`process_seconds` where /proc is missing)
_IMPORTED_AT = time.perf_counter()


def process_seconds() -> float:
    """Wall seconds since this process started (Linux ``/proc``), else since
    this module was imported: what a user's clock shows, the interpreter's
    start-up and the imports included."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            up = float(fh.read().split()[0])
        return max(0.0, up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED_AT


def user_errors(f):
    """Turn DpregError into a one-line message and exit status 2."""

    @functools.wraps(f)
    def wrapper(*a, **kw):
        from .interrupts import watching

        watch = watching()
        try:
            with watch:
                return f(*a, **kw)
        except DpregError as exc:
            if watch.hit:
                _exit_interrupted()
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            _exit_interrupted()
        except Exception as exc:
            # Ctrl-C inside compiled code can arrive wrapped (SystemError) or be swallowed and
            # resurface as another failure (numba's RuntimeError on a half-built kernel)
            if watch.hit or _interrupted(exc):
                _exit_interrupted()
            raise

    return wrapper


def _exit_interrupted():
    click.echo("interrupted; no output written", err=True)
    sys.exit(130)


def _interrupted(exc: BaseException) -> bool:
    """Whether an exception's chain holds a KeyboardInterrupt."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _warning_printer(show):
    """A ``warnings.showwarning`` that prints a :class:`~dpreg.errors.DpregWarning`
    as ``warning: <message>`` on stderr and leaves every other warning to ``show``."""
    from .errors import DpregWarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DpregWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


class _Group(click.Group):
    """A click group whose own usage errors (a bad option value, an unknown
    option) also print one line ``error: ...`` on stderr and exit with status 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        import warnings

        with warnings.catch_warnings():  # dpreg's own warnings as one line each, as the run's
            warnings.showwarning = _warning_printer(warnings.showwarning)
            return self._main(args, prog_name, complete_var, standalone_mode, **extra)

    def _main(self, args, prog_name, complete_var, standalone_mode, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            return super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `dpreg`: show the help
                exc.show()
                sys.exit(exc.exit_code)
            click.echo("error: " + " ".join(exc.format_message().split()), err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            click.echo("aborted; no output written", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpreg")
@click.option("-q", "--quiet", is_flag=True, help="print nothing but errors (as each command's own -q)")
def cli(quiet):
    """Differentially private non-convex optimization.

    \b
    dpreg run                       adaptive-spider + tree noise on adult (shipped)
    dpreg predict RECORD --data F   predictions of a released model
    dpreg privacy RECORD            the run's privacy statement in plain words
    dpreg list [KIND] [--json]      registered plugins
    dpreg info NAME                 parameters and their paper formulas
    dpreg audit --algo NAME         empirical privacy audit (epsilon lower bound)
    """


def _complete(kind):
    """Shell completion of registered plugin names of one kind."""

    def complete(ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        from .registry import get_registry

        try:
            return [CompletionItem(e.name, help=e.summary) for e in get_registry().entries(kind)
                    if e.name.startswith(incomplete)]
        except DpregError:
            return []

    return complete


#: ``dpreg run`` options a ``--config`` TOML file may set (its keys; "params"
#: is a table of algorithm parameters)
CONFIG_KEYS = ("algo", "noise", "loss", "data", "test_data", "test_fraction", "epsilon", "delta", "accountant",
               "params", "seed", "split_seed", "features", "zero_based", "labels", "target_bounds", "target_share",
               "intercept", "scaling",
               "bounds", "scaling_share", "alpha", "select", "select_share", "out", "threads", "backend",
               "scheduler", "workers", "worker_memory", "epochs", "lr", "batch_size", "max_grad_norm", "noise_multiplier")


def _read_config(ctx, param, path):
    """Eager ``--config FILE``: the TOML file's keys become the command's
    defaults (options given on the command line still win)."""
    if path is None:
        return None
    from .config_file import read_toml

    try:
        conf = read_toml(path)
    except DpregError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    conf = {k.replace("-", "_"): v for k, v in conf.items()}
    unknown = sorted(set(conf) - set(CONFIG_KEYS))
    if unknown:
        raise click.BadParameter(f"{path}: unknown key {unknown[0]!r}; valid keys: {', '.join(CONFIG_KEYS)}",
                                 ctx=ctx, param=param)
    params = conf.pop("params", {})
    if not isinstance(params, dict):
        raise click.BadParameter(f"{path}: 'params' must be a table of algorithm parameters", ctx=ctx, param=param)
    if params:
        conf["params"] = [f"{k}={v}" for k, v in params.items()]
    ctx.default_map = {**(ctx.default_map or {}), **conf}
    return path


@cli.command()
@click.option("--config", type=click.Path(dir_okay=False), callback=_read_config, is_eager=True,
              expose_value=False, help="TOML file of run options (keys as the long options; [params] table); "
                                      "command-line options win")
@click.option("--algo", default=None, shell_complete=_complete("algorithm"),
              help="algorithm name (dpreg list algorithm) [default: adaptive-spider]")
@click.option("--noise", default=None, shell_complete=_complete("noise"),
              help="noise mechanism for the running sum (dpreg list noise) [default: tree]")
@click.option("--loss", default=None, shell_complete=_complete("loss"),
              help="loss name, or auto: softmax for K > 2 declared classes, squared for a data set that "
                   "declares a regression task, else logistic [default: auto]")
@click.option("--data", default=None, shell_complete=_complete("dataset"),
              help="data-set name or file (.svm/.libsvm[.bz2], .csv, .npz), or a directory or glob of shard files "
                   "(also .parquet; trained on without loading them into one process) [default: adult]")
@click.option("--test-data", default=None, help="held-out data-set name or file")
@click.option("--test-fraction", type=float, default=None, help="hold out this fraction (split by --split-seed)")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="privacy budget epsilon > 0")
@click.option("--delta", type=float, default=None, help="privacy budget delta in (0,1) [default: min(1e-5, 1/(10 n))]")
@click.option("--accountant", default="rdp", show_default=True, help="accountant name")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="algorithm parameter (repeatable; see dpreg info ALGO)")
@click.option("--epochs", type=float, default=None,
              help="passes over the data (multi-pass algorithms; mapped to the algorithm's own parameter)")
@click.option("--lr", type=float, default=None, help="step size (the algorithm's step, eta)")
@click.option("--batch-size", type=int, default=None, help="(expected) batch size (the algorithm's batch, b)")
@click.option("--max-grad-norm", type=float, default=None, help="per-record gradient clipping bound (clip, C)")
@click.option("--noise-multiplier", type=float, default=None,
              help="fix the noise multiplier instead of calibrating it; the run is refused before any "
                   "release if it would spend more than --epsilon, else the record reports the epsilon spent")
@click.option("--seed", type=int, default=None,
              help="research mode: reproducible noise from this seed (the guarantee then holds only while "
                   "it stays secret) [default: secret OS entropy]")
@click.option("--split-seed", type=int, default=0, show_default=True,
              help="seed of public randomness: --test-fraction split, synthetic data")
@click.option("--features", type=int, default=None, help="public number of features d (svmlight) [default: declared by the data set, else inferred]")
@click.option("--zero-based/--one-based", "zero_based", default=None,
              help="public svmlight index base [default: declared by the data set, else inferred]")
@click.option("--labels", default=None, metavar="NEG,POS|A,B,C",
              help="public raw label values: NEG,POS of a binary task, or the K classes in order (then "
                   "--loss defaults to softmax) [default: declared by the data set; binary: fixed maps for "
                   "-1/+1 and 0/1; else inferred, with a warning]")
@click.option("--target-bounds", default=None, metavar="LO,HI|auto|none",
              help="public range of a regression target, mapped into [-1, 1] (predictions come back in its "
                   "units); auto: the data set's declared range, else estimated privately with "
                   "--target-share of epsilon; none: targets as they are [default: auto]")
@click.option("--target-share", type=float, default=0.1, show_default=True,
              help="share of epsilon for the private target range (--target-bounds auto)")
@click.option("--intercept/--no-intercept", default=None, help="fit an intercept [default: on for classifiers]")
@click.option("--scaling", type=click.Choice(["auto", "none", "bounds", "private"]), default="auto", show_default=True,
              help="per-feature scaling: auto (the data set's declared public bounds, if any), public --bounds, "
                   "or private (spends --scaling-share of epsilon)")
@click.option("--bounds", type=click.Path(dir_okay=False), default=None,
              help="CSV of public per-feature bounds (2 rows lower/upper, or d rows lower,upper)")
@click.option("--scaling-share", type=float, default=0.1, show_default=True,
              help="share of epsilon for --scaling private")
@click.option("--alpha", type=float, default=None, help="report whether the output is an alpha-SOSP")
@click.option("--select", default=None, help="privately pick the output among the run's iterates with this "
              "selector (above-threshold: first alpha-SOSP; exponential: low loss); options as NAME:key=value,... "
              "(e.g. above-threshold:check=fosp; see dpreg info NAME)")
@click.option("--select-share", type=float, default=0.1, show_default=True,
              help="share of epsilon spent on --select (charged before the run)")
@click.option("--out", type=click.Path(dir_okay=False), default="run.json", show_default=True,
              help="write the JSON record here ('none': do not write one); an existing file is never "
                   "replaced: the record goes to the next free name FILE-N.json (see --force)")
@click.option("--force", is_flag=True, help="replace an existing --out file (keeping its permissions)")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="numba threads for the kernels [default: all cores]")
@click.option("-q", "--quiet", is_flag=True, help="print nothing but errors")
@click.option("-v", "--verbose", is_flag=True, help="also print the privacy statement")
@click.option("--backend", type=click.Choice(["local", "dask"]), default=None,
              help="where the records are held: in this process, or by Dask worker processes (data-parallel: "
                   "per-shard clipped sums, noise added once here); for distributed-spider, where its clients run")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Dask scheduler address for --backend dask [default: a LocalCluster on 127.0.0.1]")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="worker processes of the LocalCluster for --backend dask [default: one per shard, at most "
                   "one per core]")
@click.option("--worker-memory", default=None, metavar="SIZE",
              help="memory limit per LocalCluster worker, e.g. 2GiB [default: Dask's share of the machine]")
@click.option("--no-diagnostics", "no_diagnostics", is_flag=True,
              help="compute no diagnostics: the record is the release alone (safe to publish)")
@click.option("--diagnostics-budget", type=float, default=None, metavar="SECONDS",
              help="wall seconds the costly diagnostics (lambda_min certificates, non-private optimum, "
                   "trajectory) may take together; 'inf' for no limit [default: the run's own time]")
@click.option("--json", "as_json", is_flag=True, help="print the whole JSON record on stdout")
@user_errors
def run(algo, noise, loss, data, test_data, test_fraction, epsilon, delta, accountant, params, epochs, lr,
        batch_size, max_grad_norm, noise_multiplier, seed, split_seed,
        features, zero_based, labels, target_bounds, target_share, intercept, scaling, bounds, scaling_share, alpha,
        select, select_share, out, force, threads, quiet, verbose, backend, scheduler, workers, worker_memory,
        no_diagnostics, diagnostics_budget, as_json):
    """Run one private optimization and report privacy spent and metrics.

    --epochs, --lr, --batch-size, --max-grad-norm and --noise-multiplier are
    the practitioner names of the algorithm's own parameters (dpreg info ALGO
    shows the mapping); an algorithm without a counterpart refuses the option.
    """
    from .params import practitioner_params
    from .pipeline import DEFAULTS, RunConfig, run_pipeline
    from .results import free_name, to_json, write_atomic, write_new

    quiet = quiet or _quiet_everywhere()
    if out is not None and out.strip().lower() in ("none", ""):
        out = None
    requested = out
    if out is not None and not force:
        out = free_name(out)  # checked writable before the run; the record takes the first free name at the end
    params = list(params)
    if scheduler is not None and backend is None:
        backend = "dask"
    if _has_backend_param(algo):  # --backend/--scheduler are then the algorithm's own parameters
        if backend is not None:
            params.append(f"backend={backend}")
        if scheduler is not None:
            params.append(f"scheduler={scheduler}")
        backend = scheduler = None
    params = practitioner_params(algo or DEFAULTS["algo"], params,
                                 dict(epochs=epochs, lr=lr, batch_size=batch_size, max_grad_norm=max_grad_norm,
                                      noise_multiplier=noise_multiplier), style="cli")

    def warn(msg):
        if not quiet:
            click.echo(f"warning: {msg}", err=True)

    cfg = RunConfig(algo=algo or DEFAULTS["algo"], noise=noise, loss=loss or DEFAULTS["loss"],
                    data=data or DEFAULTS["data"], test_data=test_data, test_fraction=test_fraction,
                    epsilon=epsilon, delta=delta, accountant=accountant, params=params,
                    seed=seed, split_seed=split_seed, features=features, zero_based=zero_based, labels=labels,
                    target_bounds=target_bounds if target_bounds is not None else "auto", target_share=target_share,
                    intercept=intercept, scaling=scaling, bounds=bounds, scaling_share=scaling_share,
                    alpha=alpha, select=select, select_share=select_share, out=out,
                    diagnostics=not no_diagnostics, diagnostics_budget=diagnostics_budget, warn=warn,
                    threads=threads, write_record=False,
                    backend=backend, scheduler=scheduler, workers=workers, worker_memory=worker_memory)
    progress_cm = _progress(cfg.algo) if not quiet else _NoProgress()
    with progress_cm as cb:
        cfg.progress = cb
        cfg.stage = getattr(cb, "stage", None)
        record = run_pipeline(cfg)
    text = to_json(record)
    # the run's result reaches the terminal before anything can fail at write time
    if as_json:
        click.echo(text)
    elif not quiet:
        _summary(record, None)
        if verbose:
            from .privacy_statement import render

            click.echo("\n" + render(record["release"]))
    if out is not None:
        from .interrupts import check

        check()  # no record after a Ctrl-C, even one a compiled call dropped
        try:
            if force:
                write_atomic(out, text)
            else:  # never replaces a file, not even one a concurrent run wrote meanwhile
                out = write_new(requested, text)
        except OSError as exc:
            click.echo(f"error: could not write the record to {out}: {exc.strerror or exc} "
                       f"(the summary above is this run's only output)", err=True)
            sys.exit(1)
        if not quiet and not as_json:
            click.echo(f"record    {out}")


def _quiet_everywhere() -> bool:
    """Whether ``dpreg -q`` (the group's own option, before the command) was given."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().params.get("quiet"))


def _has_backend_param(algo) -> bool:
    """Whether the algorithm named ``algo`` (None: the default) has a
    ``backend`` parameter of its own (distributed-spider's clients); an unknown
    name says False and fails later, with the registry's message."""
    from .pipeline import DEFAULTS
    from .registry import get_registry

    try:
        cls = get_registry().get("algorithm", algo or DEFAULTS["algo"])
    except DpregError:
        return False
    return any(p.name == "backend" for p in getattr(cls, "params", ()))


class _NoProgress:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _RichProgress:
    def __init__(self, label):
        self.label = label

    def __enter__(self):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.p = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                          TimeElapsedColumn(), transient=True)
        self.p.__enter__()
        self.task = self.p.add_task(self.label, total=None)

        def cb(step, total):
            self.p.update(self.task, completed=step, total=total)

        def stage(name):
            self.p.update(self.task, description=name, completed=0, total=None)

        cb.stage = stage
        return cb

    def __exit__(self, *exc):
        return self.p.__exit__(*exc)


def _progress(label):
    return _RichProgress(label) if sys.stderr.isatty() else _NoProgress()


def _fmt(v, spec=".4g"):
    return "-" if v is None else format(v, spec)


def _summary(rec, out):
    rel = rec["release"]
    c, pr, mo = rel["config"], rel["privacy"], rel["model"]
    click.echo(f"{c['algo']} (noise {c['noise'] or '-'}) on {c['data']}: n={pr['n']} "
               f"features={mo['n_features']} loss={c['loss']}")
    click.echo("release (safe to publish)")
    click.echo(f"  privacy   epsilon={pr['epsilon']:.4g} of {pr['epsilon_budget']:g}  delta={pr['delta']:.3g}  "
               f"({pr['accountant']}; {pr['relation']}; randomness {pr['randomness']})")
    click.echo(f"  model     {_model_line(mo)}")
    diag = rec.get("diagnostics")
    if diag is None:
        click.echo("diagnostics: not computed (--no-diagnostics)")
    else:
        m, b, u, t = diag["metrics"], diag["baselines"], diag["usage"], diag["timing"]
        click.echo("diagnostics (NOT private: computed on the raw data; do not publish)")
        if "train_grad_norm" in m:
            st = (m.get("train_lambda_min_status") or {}).get("status")
            line = f"  train     |grad|={m['train_grad_norm']:.4g}  loss={m['train_loss']:.4g}  " \
                   f"lambda_min={'<= ' if st == 'truncated' else ''}{_fmt(m.get('train_lambda_min'))}" \
                   f"{' (' + st + ')' if st in ('truncated', 'skipped') else ''}"
            if "train_accuracy" in m:
                line += f"  accuracy={m['train_accuracy']:.4f}"
            if "train_r2" in m:
                line += f"  R2={_fmt(m['train_r2'], '.4f')}  RMSE={m['train_rmse']:.4g}"
            click.echo(line)
        for e in diag.get("errors", []):
            click.echo(f"  failed    {e}")
        if "test_grad_norm" in m:
            line = f"  test      |grad|={m['test_grad_norm']:.4g}  loss={m['test_loss']:.4g}"
            if "test_accuracy" in m:
                line += f"  accuracy={m['test_accuracy']:.4f}"
            if "test_r2" in m:
                line += f"  R2={_fmt(m['test_r2'], '.4f')}  RMSE={m['test_rmse']:.4g}"
            click.echo(line)
        ref = f"  compare   loss at w=0 {_fmt(b.get('train_loss_at_zero'))}"
        if "nonprivate_train_loss" in b:
            cut = (b.get("nonprivate_optimum") or {}).get("status") == "truncated"
            ref += f"; non-private optimum loss {'<= ' if cut else ''}{b['nonprivate_train_loss']:.4g}"
        if "test_majority_rate" in b:
            ref += f"; test majority class {b['test_majority_rate']:.4f}"
        elif "train_majority_rate" in b:
            ref += f"; train majority class {b['train_majority_rate']:.4f}"
        if "nonprivate_test_accuracy" in b:
            ref += f", non-private test accuracy {b['nonprivate_test_accuracy']:.4f}"
        if b.get("test_r2_of_train_mean") is not None:
            ref += f"; test R2 of the training mean {b['test_r2_of_train_mean']:.4f}"
        if b.get("nonprivate_test_r2") is not None:
            ref += f", non-private test R2 {b['nonprivate_test_r2']:.4f}"
        elif b.get("nonprivate_train_r2") is not None:
            ref += f"; non-private train R2 {b['nonprivate_train_r2']:.4f}"
        click.echo(ref)
        if m.get("train_goldstein_proxy_min") is not None:
            gp = m.get("train_goldstein_proxy")
            click.echo(f"  goldstein radius h={m['goldstein_radius']:.4g}: train proxy |mean grad over the output "
                       f"block|={_fmt(gp)} (min over blocks {m['train_goldstein_proxy_min']:.4g})")
        if "train_is_alpha_sosp" in m:
            click.echo(f"  alpha-SOSP (alpha={c['alpha']:g}): {m['train_is_alpha_sosp']}")
        sel = diag.get("selection")
        if sel:
            if sel["fallback_to_last"]:
                what = "no candidate passed; output = the final iterate"
            else:
                step = sel["steps"][sel["index"]] if sel.get("steps") else None
                what = f"candidate {sel['index']} of {sel['candidates']}" + (f" (step {step})" if step is not None else "")
            click.echo(f"  selection {sel['selector']} (epsilon {sel['epsilon']:.3g} of the budget): {what}")
        ri = diag.get("run_info") or {}
        from .decisions import summary_line

        sosp = summary_line(ri.get("sosp_decisions"))
        if sosp:
            click.echo(f"  sosp      {sosp}")
        passes = f" passes={ri['passes_made']}" if ri.get("passes_made") is not None else ""
        click.echo(f"  usage     iterations={u['iterations']}{passes} records_used={u['records_used']} "
                   f"gradient_evaluations={u['gradient_evaluations']}")
        click.echo(f"  time      total={t['total_s']:.2f}s (compile/load {t['compile_s']:.2f}s, run {t['run_s']:.2f}s; "
                   f"{process_seconds():.2f}s since the process started)")
        be = diag.get("backend")
        if be:
            tr = be["traffic"]
            click.echo(f"  backend   {be['backend']}: {be['shards']} shards on {be['workers']} worker(s); per step "
                       f"{tr['bytes_down_per_step']:.0f} B down, {tr['bytes_up_per_step']:.0f} B up")
            if be.get("driver_memory") and be.get("worker_memory"):
                gib = 2.0 ** 30
                held = ", ".join(f"{m['peak_rss'] / gib:.2f} ({m['held_bytes'] / gib:.2f} held)"
                                 for m in be["worker_memory"])
                click.echo(f"  memory    peak GiB: driver {be['driver_memory']['peak_rss'] / gib:.2f}; "
                           f"shard holders {held}")
    if out:
        click.echo(f"record    {out}")
    diag = rec.get("diagnostics") or {}
    for w in diag.get("warnings", []):
        click.echo(f"warning: {w}", err=True)


def _model_line(mo: dict) -> str:
    """The summary's model line: weights, classes or target range, intercept."""
    line = f"{len(mo['weights'])} weights"
    if mo.get("n_classes"):
        line += f", {mo['n_classes']} classes"
    target = mo.get("target") or {}
    if target.get("kind") == "bounds":
        line += f", target range [{target['lower']:.4g}, {target['upper']:.4g}] ({target.get('source')})"
    icpt = mo.get("intercept")
    if isinstance(icpt, (int, float)):
        line += f", intercept {icpt:.4g}"
    return line


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--data", required=True, help="records to predict: a file (.svm/.csv/.npz) or a data-set name")
@click.option("--features", type=click.IntRange(min=1), default=None,
              help="an svmlight file's width when it omits trailing all-zero features (must be the model's) "
                   "[default: read off the file, which must then reach the model's width]")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="write the CSV here [default: print to stdout]: 'prediction,margin' for a binary model, "
                   "'prediction' (class labels; values in the target's units for regression) otherwise; an "
                   "existing file is never replaced: the output goes to the next free name FILE-N.csv (see --force)")
@click.option("--force", is_flag=True, help="replace an existing --out file")
@click.option("--proba", is_flag=True, help="add one column of probabilities per class (p_LABEL; logistic and "
                                            "softmax models)")
@user_errors
def predict(model, data, features, out, force, proba):
    """Predict with a released model (a dpreg run record) on new records."""
    from .model import load_for_model, load_model, prediction_table, write_predictions
    from .results import check_writable

    mdl = load_model(model)
    if out is not None:
        check_writable(out)
    loaded = load_for_model(mdl, data, features=features)
    header, rows = prediction_table(mdl, loaded.X, proba=proba)
    if out is None:
        click.echo(",".join(header))
        for r in rows:
            click.echo(",".join(r))
    else:
        written = write_predictions(out, header, rows, replace=force)
        if not _quiet_everywhere():
            click.echo(f"{len(rows)} predictions written to {written}", err=True)


@cli.command()
@click.argument("record", type=click.Path(dir_okay=False))
@user_errors
def privacy(record):
    """Print a run's privacy statement in plain words."""
    from .privacy_statement import load_statement, render

    click.echo(render(load_statement(record)))


@cli.command("list")
@click.argument("kind", required=False)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@user_errors
def list_(kind, as_json):
    """List registered plugins: name, kind, providing package and version, summary."""
    from .registry import KINDS, get_registry

    reg = get_registry()
    if kind is not None and kind not in KINDS:
        # accept plurals: "losses", "algorithms"
        singular = {k + "s": k for k in KINDS} | {"losses": "loss", "noises": "noise"}
        kind = singular.get(kind, kind)
    entries = list(reg.entries(kind))
    if as_json:
        click.echo(json.dumps([e.as_dict() for e in entries], indent=2))
        return
    current = None
    for e in entries:
        if e.kind != current:
            current = e.kind
            click.echo(f"{e.kind}:")
        click.echo(f"  {e.name:<28} {e.package} {e.version:<8} {e.summary}")


@cli.command()
@click.argument("name")
@user_errors
def info(name):
    """Describe a plugin: for algorithms, each parameter, its default and formula."""
    from .errors import UnknownNameError
    from .registry import get_registry

    reg = get_registry()
    found = reg.find(name)
    if not found:
        every = sorted({e.name for e in reg.entries()})
        raise UnknownNameError(f"no plugin named {name!r}; registered names: {', '.join(every)}")
    for e in found:
        click.echo(f"{e.name} ({e.kind}) from {e.package} {e.version}: {e.summary}")
        obj = e.obj
        paper = getattr(obj, "paper", "")
        if paper:
            click.echo(f"  paper: {paper}")
        if e.kind == "algorithm":
            from .interfaces import Algorithm
            from .params import bind

            relation = obj.relation
            if getattr(obj.relation_for, "__func__", None) is not Algorithm.relation_for.__func__:
                try:
                    relation = f"{obj.relation_for(bind(obj.params, {}, name))} with the default parameters " \
                               "(depends on them)"
                except DpregError:
                    relation = "depends on the parameters"
            from .pipeline import RELATION_TEXT

            text = RELATION_TEXT.get(relation.split(" ")[0], relation)
            noise = (f"yes (default {obj.default_noise or 'tree'})" if obj.uses_noise else "no")
            click.echo(f"  data access: {obj.data_access}; takes --noise: {noise}")
            click.echo(f"  neighbouring relation: {text}" + (relation[len(relation.split(' ')[0]):]
                                                             if relation.split(" ")[0] in RELATION_TEXT else ""))
            _practitioner_lines(obj)
        if e.kind == "loss":
            click.echo(f"  labels: {obj.labels}; feasible radius: {obj.radius}")
            doc = (type(obj).__doc__ or "").strip()
            for ln in doc.splitlines()[1:]:
                click.echo(f"  {ln.strip()}")
        specs = getattr(obj, "params", ())
        if specs:
            click.echo("  parameters (--param key=value):")
            aliases = {}
            if e.kind == "algorithm":
                from .params import option_name, practitioner_targets

                aliases = {v: option_name(k) for k, v in practitioner_targets(obj).items()}
            for s in specs:
                default = "derived" if s.default is None else repr(s.default)
                alias = f"; {aliases[s.name]}" if s.name in aliases else ""
                click.echo(f"    {s.name} ({s.type}, default {default}{alias}): {s.help}")
                if s.formula:
                    click.echo(f"        formula: {s.formula}")
        doc = (getattr(obj, "__doc__", "") or "") if e.kind != "loss" else ""
        mod = sys.modules.get(getattr(obj, "__module__", ""), None)
        if e.kind in ("algorithm", "noise") and mod is not None and mod.__doc__:
            click.echo("  " + "\n  ".join(ln for ln in mod.__doc__.strip().splitlines()))


def _practitioner_lines(cls):
    """``dpreg info``: the practitioner names next to the algorithm's own
    parameters, why the others do not apply, and whether preset=theory exists."""
    from .params import MISSING, PRACTITIONER, option_name, practitioner_table

    table = practitioner_table(cls)
    names = {s.name for s in cls.params}
    click.echo("  practitioner names (Opacus-style; each sets the parameter shown):")
    for key in PRACTITIONER:
        value = table.get(key) or MISSING[key]
        click.echo(f"    {option_name(key):<19}" + (f"-> {value}" if value in names else f"not taken: {value}"))
    if "preset" not in names:
        click.echo(f"  preset=theory: not offered: {cls.theory_note or 'it declares no preset parameter'}")


def _load_plugin_commands():
    try:
        from .registry import get_registry

        get_registry().pm.hook.dpreg_register_commands(cli=cli)
    except DpregError as exc:  # a broken plugin must not hide `dpreg --help`
        click.echo(f"warning: {exc}", err=True)


def main(argv=None):
    try:
        _load_plugin_commands()
        return cli.main(args=argv, prog_name="dpreg", standalone_mode=True)
    except KeyboardInterrupt:  # Ctrl-C while the plugin commands load, before any command runs
        click.echo("interrupted; no output written", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    except DpregError as exc:  # errors raised while building commands
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except SystemExit as exc:
        if exc.code == 130:  # interrupted: a Ctrl-C in the middle of LLVM code generation can leave
            # llvmlite in a state that crashes the interpreter's shutdown (measured: SIGSEGV after
            # the message), so leave without it; no output file is open (writes are atomic)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
