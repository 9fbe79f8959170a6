"""The ``dpreg audit`` command, added through the ``dpreg_register_commands``
hook exactly as a third-party plugin would add one.

``dpreg audit --algo NAME --noise NAME [--trials N] [--epsilon E --delta D
--seed S]`` (or ``dpreg audit --selector exponential|above-threshold ...``)
runs :func:`dpreg.audit.run_audit` end to end (canary data sets, many seeded
runs, a distinguishing test on the released sequence, Clopper-Pearson or -
with ``--method gaussian``, for a mechanism - a Gaussian-shift bound);
``--white-box`` measures the Gaussian releases of a noise mechanism (alone, or
replaying the calls an algorithm makes) or of a trust region directly, with
the canary as a worst-case increment, and bounds them against the epsilon
charged for them.  It prints the audited lower bound ``epsilon_lower`` next
to the accountant's epsilon.  Exit status: 0 when ``epsilon_lower <=
epsilon`` claimed, 1 when the audit found a violation, 2 on a user error (one
line ``error: ...``).
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
@click.option("--trials", type=int, default=1000, show_default=True,
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
              help="mechanism audit: canary in every add, or in one (the first; with --white-box the one "
                   "chosen on the calibration half)")
@click.option("--canary-norm", type=float, default=1.0, show_default=True,
              help="|x| of the canary (> 1: a record that bypassed the loaders' scaling)")
@click.option("--neighbour", type=click.Choice(["null", "remove"]), default="null", show_default=True,
              help="add-remove neighbour: canary replaced by a zero-gradient record (n kept), or removed "
                   "from among mirror records (n - 1)")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="confidence of the lower bound")
@click.option("--method", type=click.Choice(["clopper-pearson", "gaussian"]), default=None,
              help="bound from the error rates of a threshold test (assumption-free), or from a confidence "
                   "bound on the Gaussian shift of the statistic (Gaussian noise: a mechanism alone, or "
                   "--white-box) [default: gaussian with --white-box, else clopper-pearson]")
@click.option("--white-box", "white_box", is_flag=True,
              help="measure the Gaussian releases directly with the canary as a worst-case increment: a "
                   "mechanism alone, the mechanism calls of --algo replayed, or a trust region's releases; "
                   "catches a sensitivity under-stated by 1.3 with about 1000 trials")
@click.option("--schedule", type=click.Choice(["constant", "decreasing"]), default="constant", show_default=True,
              help="white-box audit of a mechanism alone: sensitivities of its adds (decreasing: 1/t)")
@click.option("--fault", default=None, hidden=True,
              help="TEST-ONLY fault injection (dpreg.testing.faults; breaks privacy on purpose)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def audit(algo, noise, selector, candidates, relation, loss, trials, epsilon, delta, accountant, params, seed,
          n, d, steps, participation, canary_norm, neighbour, confidence, method, white_box, schedule, fault,
          as_json):
    """Empirically audit the privacy of an algorithm, a noise mechanism or a selector.

    Runs it many times on two neighbouring canary data sets, distinguishes
    them from the output, and turns the error rates into a lower bound
    epsilon_lower.  Exit 1 if epsilon_lower exceeds the accountant's epsilon.
    """
    from dpreg.audit import AuditConfig, run_audit
    from dpreg.cli import user_errors

    @user_errors
    def go():
        cfg = AuditConfig(algo=algo, noise=noise, loss=loss, epsilon=epsilon, delta=delta,
                          accountant=accountant, trials=trials, seed=seed, params=list(params), n=n, d=d,
                          steps=steps, participation=participation, canary_norm=canary_norm, neighbour=neighbour,
                          confidence=confidence, fault=fault, selector=selector, candidates=candidates,
                          relation=relation, method=method, white_box=white_box, schedule=schedule)
        return run_audit(cfg)

    r = go()
    if as_json:
        click.echo(json.dumps(r.as_dict(), indent=2, default=str))
    else:
        click.echo(_report(r, algo, accountant))
    if r.violated:
        sys.exit(1)


def _values(k: int) -> str:
    return "1 released value" if k == 1 else f"{k} released values"


def _report(r, algo, accountant) -> str:
    """The audit's outcome in a few lines."""
    lines = [f"audit     {r.target}" + (f" with noise {r.noise}" if r.noise and algo and not r.white_box else "")
             + f": {r.trials} runs per data set, relation {r.relation}"
             + (f"  [TEST-ONLY FAULT {r.fault}]" if r.fault else "")]
    if r.white_box:
        lines.append(f"canary    {r.canary} (chosen on the calibration half)")
        lines.append(f"claimed   epsilon={r.epsilon_claimed:.4g} at delta={r.delta:.3g} ({accountant}: the charges "
                     f"for the canary's releases; Gaussian mu {r.mu_claimed:.4g})")
    else:
        lines.append(f"claimed   epsilon={r.epsilon_claimed:.4g} at delta={r.delta:.3g} ({accountant})")
    if r.event:
        lines.append(f"event     {r.event} (chosen on the calibration half)")
    if r.white_box and r.method == "gaussian":
        lines.append(f"audited   epsilon_lower={r.epsilon_lower:.4g} ({r.confidence:.0%} bound: mu >= {r.mu_lower:.4g} "
                     f"from the measured noise of a linear statistic of {_values(r.features)})")
    elif r.method == "gaussian":
        lines.append(f"audited   epsilon_lower={r.epsilon_lower:.4g} ({r.confidence:.0%} Gaussian-shift bound "
                     f"on a linear statistic of {_values(r.features)})")
    else:
        lines.append(f"audited   epsilon_lower={r.epsilon_lower:.4g} ({r.confidence:.0%} Clopper-Pearson; "
                     f"FPR={r.fpr:.3f} <= {r.fpr_upper:.3f}, FNR={r.fnr:.3f} <= {r.fnr_upper:.3f}; "
                     f"statistic of {_values(r.features)})")
    verdict = ("VIOLATION: epsilon_lower > claimed epsilon" if r.violated
               else "ok: epsilon_lower <= claimed epsilon")
    lines.append(f"result    {verdict}  ({r.seconds:.1f}s)")
    return "\n".join(lines)


@hookimpl
def dpreg_register_commands(cli):
    cli.add_command(audit)
