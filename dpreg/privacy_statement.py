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
    return rel


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
