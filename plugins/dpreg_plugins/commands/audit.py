"""The ``dpreg audit`` command, added through the ``dpreg_register_commands``
hook exactly as a third-party plugin would add one.

``dpreg audit --algo NAME --noise NAME [--trials N] [--epsilon E --delta D
--seed S]`` (or ``dpreg audit --selector exponential|above-threshold ...``)
runs :func:`dpreg.audit.run_audit` (canary data sets, many seeded runs, a
distinguishing test on the released sequence, Clopper-Pearson or - with
``--method gaussian``, for a mechanism - a Gaussian-shift bound) and prints the audited lower
bound ``epsilon_lower`` next to the accountant's epsilon.  Exit status: 0 when
``epsilon_lower <= epsilon`` claimed, 1 when the audit found a violation, 2 on
a user error (one line ``error: ...``).
"""
from __future__ import annotations

import json
import sys

import click

from dpreg import hookimpl


@click.command("audit")
@click.option("--algo", default=None,
              help="algorithm to audit (dpreg list algorithm); omit to audit --noise alone")
@click.option("--noise", default=None, help="noise mechanism (dpreg list noise)")
@click.option("--selector", default=None,
              help="selector to audit instead (exponential, above-threshold): index returned on canary data sets")
@click.option("--candidates", type=int, default=6, show_default=True,
              help="exponential selector audit: number of candidate points")
@click.option("--relation", type=click.Choice(["replace-one", "add-remove"]), default=None,
              help="selector audit: neighbouring relation [default: replace-one for exponential, "
                   "add-remove for above-threshold]")
@click.option("--loss", default="logistic", show_default=True,
              help="loss (needs zero gradient at x = 0: no data-independent term)")
@click.option("--trials", type=click.IntRange(min=20, max=200_000), default=1000, show_default=True,
              help="runs per data set (half choose the test, half measure it)")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="budget epsilon of every run")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="budget delta of every run")
@click.option("--accountant", default="rdp", show_default=True, help="accountant name")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="algorithm or selector parameter (repeatable); small-size defaults otherwise")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the whole audit")
@click.option("--n", "n", type=int, default=20, show_default=True, help="records in each canary data set")
@click.option("--d", "d", type=int, default=2, show_default=True, help="dimension")
@click.option("--steps", type=int, default=8, show_default=True, help="adds per run (mechanism audit)")
@click.option("--participation", type=click.Choice(["all", "disjoint"]), default="all", show_default=True,
              help="mechanism audit: canary in every add, or in the first add only")
@click.option("--canary-norm", type=float, default=1.0, show_default=True,
              help="|x| of the canary (> 1: a record that bypassed the loaders' scaling)")
@click.option("--neighbour", type=click.Choice(["null", "remove"]), default="null", show_default=True,
              help="add-remove neighbour: canary replaced by a zero-gradient record (n kept), or removed "
                   "from among mirror records (n - 1)")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="confidence of the lower bound")
@click.option("--method", type=click.Choice(["clopper-pearson", "gaussian"]), default="clopper-pearson",
              show_default=True,
              help="bound from the error rates of a threshold test (assumption-free), or from a confidence "
                   "bound on the Gaussian shift of the statistic (mechanism audits: their noise is Gaussian)")
@click.option("--fault", default=None, hidden=True,
              help="TEST-ONLY fault injection: noise-scale=S, no-clip or tree-one-level (breaks privacy on purpose)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def audit(algo, noise, selector, candidates, relation, loss, trials, epsilon, delta, accountant, params, seed,
          n, d, steps, participation, canary_norm, neighbour, confidence, method, fault, as_json):
    """Empirically audit the privacy of an algorithm, a noise mechanism or a selector.

    Runs it many times on two neighbouring canary data sets, distinguishes
    them from the output, and turns the error rates into a Clopper-Pearson
    lower bound epsilon_lower.  Exit 1 if epsilon_lower exceeds the
    accountant's epsilon.
    """
    from dpreg.audit import AuditConfig, run_audit
    from dpreg.cli import user_errors

    @user_errors
    def go():
        cfg = AuditConfig(algo=algo, noise=noise, loss=loss, epsilon=epsilon, delta=delta,
                          accountant=accountant, trials=trials, seed=seed, params=list(params), n=n, d=d,
                          steps=steps, participation=participation, canary_norm=canary_norm, neighbour=neighbour,
                          confidence=confidence, fault=fault, selector=selector, candidates=candidates,
                          relation=relation, method=method)
        return run_audit(cfg)

    r = go()
    if as_json:
        click.echo(json.dumps(r.as_dict(), indent=2, default=str))
    else:
        click.echo(f"audit     {r.target}" + (f" with noise {r.noise}" if r.noise and algo else "")
                   + f": {r.trials} runs x 2 data sets, relation {r.relation}"
                   + (f"  [TEST-ONLY FAULT {r.fault}]" if r.fault else ""))
        click.echo(f"claimed   epsilon={r.epsilon_claimed:.4g} at delta={r.delta:.3g} ({accountant})")
        if r.event:
            click.echo(f"event     {r.event} (chosen on the calibration half)")
        if r.method == "gaussian":
            click.echo(f"audited   epsilon_lower={r.epsilon_lower:.4g} ({r.confidence:.0%} Gaussian-shift bound "
                       f"on a linear statistic of {r.features} released values)")
        else:
            click.echo(f"audited   epsilon_lower={r.epsilon_lower:.4g} ({r.confidence:.0%} Clopper-Pearson; "
                       f"FPR={r.fpr:.3f} <= {r.fpr_upper:.3f}, FNR={r.fnr:.3f} <= {r.fnr_upper:.3f}; "
                       f"statistic of {r.features} released values)")
        click.echo(f"result    {'VIOLATION: epsilon_lower > claimed epsilon' if r.violated else 'ok: epsilon_lower <= claimed epsilon'}"
                   f"  ({r.seconds:.1f}s)")
    if r.violated:
        sys.exit(1)


@hookimpl
def dpreg_register_commands(cli):
    cli.add_command(audit)
