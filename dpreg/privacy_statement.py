"""A run's privacy statement in plain words (``dpreg privacy RECORD``).

Modelled on TF Privacy's ``compute_dp_sgd_privacy_statement``: what is
protected (the unit, the neighbouring relation, that n is public), the
guarantee (epsilon, delta, the accountant), the mechanisms and their noise,
the randomness mode, and what the guarantee does not cover.  Reads only the
record's ``release`` part.
"""
from __future__ import annotations

import textwrap

from .errors import DpregError


def load_statement(path: str) -> dict:
    """The ``release`` part of a record file (DpregError if it is not one)."""
    from .results import read_json

    rec = read_json(path, "record")
    rel = rec.get("release", rec) if isinstance(rec, dict) else None
    if not isinstance(rel, dict) or "privacy" not in rel or "config" not in rel:
        raise DpregError(f"{path} is not a dpreg run record (no release.privacy)")
    check_statement(rel, path)
    return rel


def _number(v) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_statement(release: dict, where: str) -> None:
    """DpregError (one line, naming the field) unless the release's privacy
    statement is one dpreg could have written: epsilon finite and >= 0, at
    most the budget (finite, > 0), delta in [0, 1), n a positive integer,
    the randomness mode, the texts strings, every mechanism's multiplier
    finite and > 0 and its epsilon share finite and >= 0.  A record edited
    into an impossible claim (epsilon = -5, NaN, delta = 7) is refused, never
    rendered as a guarantee."""
    pr, c = release.get("privacy"), release.get("config")

    def bad(field, value, want):
        raise DpregError(f"{where}: release.{field} = {value!r} is not {want}: not a statement dpreg "
                         f"writes (the record was edited or damaged)")

    if not isinstance(pr, dict) or not isinstance(c, dict):
        raise DpregError(f"{where} is not a dpreg run record (release.privacy and release.config must be tables)")
    eps, budget, delta, n = pr.get("epsilon"), pr.get("epsilon_budget"), pr.get("delta"), pr.get("n")
    if not _number(budget) or budget <= 0:
        bad("privacy.epsilon_budget", budget, "a finite number > 0")
    if not _number(eps) or eps < 0:
        bad("privacy.epsilon", eps, "a finite number >= 0")
    if eps > budget * (1 + 1e-9) + 1e-12:
        bad("privacy.epsilon", eps, f"at most the budget {budget:g}")
    if not _number(delta) or not 0 <= delta < 1:
        bad("privacy.delta", delta, "a number in [0, 1)")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        bad("privacy.n", n, "a positive integer")
    if pr.get("randomness") not in ("secret", "seeded"):
        bad("privacy.randomness", pr.get("randomness"), "'secret' or 'seeded'")
    for k in ("unit", "relation_text", "accountant", "randomness_note"):
        if not isinstance(pr.get(k), str):
            bad(f"privacy.{k}", pr.get(k), "a text")
    if not isinstance(pr.get("not_covered", []), list):
        bad("privacy.not_covered", pr.get("not_covered"), "a list")
    mechs = pr.get("mechanisms", [])
    if not isinstance(mechs, list):
        bad("privacy.mechanisms", mechs, "a list")
    for i, m in enumerate(mechs):
        if not isinstance(m, dict) or not isinstance(m.get("what"), str) or not isinstance(m.get("noise"), str):
            bad(f"privacy.mechanisms[{i}]", m, "a table with texts 'what' and 'noise'")
        z, share = m.get("noise_multiplier"), m.get("epsilon_share")
        if z is not None and (not _number(z) or z <= 0):
            bad(f"privacy.mechanisms[{i}].noise_multiplier", z, "a finite number > 0")
        if share is not None and (not _number(share) or share < 0):
            bad(f"privacy.mechanisms[{i}].epsilon_share", share, "a finite number >= 0")
    for k in ("algo", "data", "loss"):
        if not isinstance(c.get(k), str):
            bad(f"config.{k}", c.get(k), "a text")


def render(release: dict, width: int = 88) -> str:
    """The statement as wrapped paragraphs."""
    pr, c = release["privacy"], release["config"]
    para = []
    para.append(
        f"This model was trained with {c['algo']} ({c.get('paper') or 'see dpreg info'}) on {pr['n']} "
        f"records of {c['data']} with loss {c['loss']}. It is (ε,\u00a0δ)-differentially private with "
        f"ε = {pr['epsilon']:.4g} and δ = {pr['delta']:.3g} (the budget was ε = {pr['epsilon_budget']:g}), as "
        f"composed by the {pr['accountant']} accountant over every noisy release of the run: on two data sets "
        f"that differ in one record (the relation below), the probability of any outcome differs by at most a "
        f"factor e^ε = {_exp(pr['epsilon'])}, except with probability at most δ.")
    para.append(
        f"Unit of privacy: {pr['unit']}. Neighbouring relation: {pr['relation_text']}. The number of "
        f"records n = {pr['n']} is treated as public, as in Opacus and TensorFlow Privacy. Each record's "
        f"influence on every release is bounded by clipping inside the kernels, not by an assumption "
        f"about the data.")
    if pr.get("mechanisms"):
        parts = []
        for m in pr["mechanisms"]:
            s = f"{m['what']}: {m['noise']}"
            if m.get("noise_multiplier") is not None:
                s += f" noise, multiplier {m['noise_multiplier']:.4g} (std / sensitivity)"
            if m.get("epsilon_share") is not None:
                s += f", epsilon share {m['epsilon_share']:.3g}"
            parts.append(s)
        para.append("Mechanisms: " + "; ".join(parts) + ".")
    if pr["randomness"] == "seeded":
        para.append("Randomness: SEEDED. " + pr["randomness_note"][0].upper() + pr["randomness_note"][1:] + ".")
    else:
        para.append("Randomness: secret (" + pr["randomness_note"] + ").")
    para.append(
        "Not covered: " + "; ".join(pr.get("not_covered", [])) + ". Choosing among several runs on the "
        "same data by their results is a further use of the data that this statement does not account "
        "for (use dpreg's private hyper-parameter selection instead). The floating-point Gaussian, "
        "Laplace and Gumbel samplers of numpy are exposed to the known floating-point attacks "
        "(Mironov 2012); see the README's privacy model.")
    return "\n\n".join(textwrap.fill(p, width) for p in para)


def _exp(eps) -> str:
    import math

    try:
        return f"{math.exp(float(eps)):.3g}"
    except (OverflowError, TypeError, ValueError):
        return "inf"
