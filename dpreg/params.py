"""Algorithm parameters: declared specs, parsing of ``key=value``, resolution.

Each algorithm declares a tuple of :class:`ParamSpec`.  A spec's ``default`` is
either a value or ``None`` with a ``formula`` saying how the default is derived
from the problem (n, d, epsilon, delta, G, M, ...) - the algorithm computes those
in its ``resolve`` step.  ``dpreg info NAME`` prints the specs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .errors import ParameterError

_TYPES = {"float": float, "int": int, "str": str, "bool": bool}


@dataclass(frozen=True)
class ParamSpec:
    """One documented parameter.

    name:     key for ``--param name=value``
    type:     "float" | "int" | "str" | "bool"
    default:  practical default, or None when derived from the problem
    help:     one line: what it controls
    formula:  the paper formula it comes from (paper file, equation/algorithm)
    low/high: inclusive bounds checked on parsing (None = unbounded)
    choices:  allowed values for str parameters
    """

    name: str
    type: str
    default: Any
    help: str
    formula: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    low_open: bool = False

    def parse(self, raw: Any) -> Any:
        """Convert and check one value; raises ParameterError naming the parameter."""
        if raw is None:
            return None
        try:
            if self.type == "bool" and isinstance(raw, str):
                low = raw.strip().lower()
                if low not in {"1", "0", "true", "false", "yes", "no"}:
                    raise ValueError(raw)
                value: Any = low in {"1", "true", "yes"}
            elif self.type == "int":
                value = parse_int(raw)
            else:
                value = _TYPES[self.type](raw)
        except (TypeError, ValueError):
            what = "an integer (digits, not a float such as 1e6)" if self.type == "int" else self.type
            raise ParameterError(f"parameter {self.name!r} expects {what}, got {raw!r}") from None
        if self.type in ("float", "int"):
            if isinstance(value, float) and not math.isfinite(value):
                raise ParameterError(f"parameter {self.name!r} must be finite, got {raw!r}")
            if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
                op = ">" if self.low_open else ">="
                raise ParameterError(f"parameter {self.name!r} must be {op} {self.low}, got {raw!r}")
            if self.high is not None and value > self.high:
                raise ParameterError(f"parameter {self.name!r} must be <= {self.high}, got {raw!r}")
        if self.choices is not None and value not in self.choices:
            raise ParameterError(
                f"parameter {self.name!r} must be one of {', '.join(self.choices)}; got {raw!r}"
            )
        return value


def parse_int(raw: Any) -> int:
    """An integer parameter's value: a Python or numpy integer, or a string
    of digits (``"1000"``, ``"1_000"``, ``"-3"``).  A float or a float's
    spelling (``1e12``, ``"1e12"``, ``100.0``) is a ValueError: an integer
    count written as a float is usually a mistake of magnitude, and ``1e12``
    read as 10^12 steps would run for days."""
    import numpy as np

    if isinstance(raw, bool):
        raise ValueError(raw)
    if isinstance(raw, (int, np.integer)):
        return int(raw)
    if isinstance(raw, str) and re.fullmatch(r"[+-]?[0-9](_?[0-9])*", raw.strip()):
        return int(raw.strip())
    raise ValueError(raw)


def params_dict(params: Any, what: str = "params") -> dict[str, Any]:
    """``params`` as a dict: a dict (copied), a list or tuple of ``"key=value"``
    strings (:func:`parse_pairs`), or None (empty); anything else - a single
    string included - is a ParameterError naming the accepted forms."""
    if params is None:
        return {}
    if isinstance(params, dict):
        return dict(params)
    if isinstance(params, (list, tuple)) and all(isinstance(p, str) for p in params):
        return parse_pairs(params)
    hint = f" (a list: [{params!r}])" if isinstance(params, str) else ""
    raise ParameterError(f"{what} must be a dict {{name: value}} or a list of 'key=value' strings, "
                         f"got {type(params).__name__}{hint}")


def parse_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """Parse ``["k=v", ...]`` into a dict; a malformed pair is a ParameterError."""
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise ParameterError(f"--param expects key=value, got {p!r}")
        k, v = p.split("=", 1)
        k = k.strip()
        if not k:
            raise ParameterError(f"--param expects key=value, got {p!r}")
        if k in out:
            raise ParameterError(f"parameter {k!r} given twice")
        out[k] = v.strip()
    return out


def bind(specs: Iterable[ParamSpec], given: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """Return ``{name: value}`` for every spec: the parsed given value or the
    spec default (None for derived defaults).  Unknown keys are an error that
    lists the valid ones."""
    specs = tuple(specs)
    names = {s.name for s in specs}
    unknown = sorted(set(given) - names)
    if unknown:
        valid = ", ".join(sorted(names)) or "(none)"
        raise ParameterError(
            f"unknown parameter {unknown[0]!r} for {owner}; valid parameters: {valid}"
        )
    return {s.name: (s.parse(given[s.name]) if s.name in given else s.default) for s in specs}


# ------------------------------------------------------------- practitioner names
#: the practitioner (Opacus-style) names ``dpreg run``, :func:`dpreg.run` and
#: :class:`dpreg.sklearn.DPClassifier` accept beside ``--param``; each
#: algorithm maps them to its own parameters through its ``practitioner`` table
PRACTITIONER = ("epochs", "lr", "batch_size", "max_grad_norm", "noise_multiplier")

#: the table of an algorithm that declares none: practitioner name -> the
#: parameter name that plays that role wherever an algorithm has it
DERIVED = {"epochs": "epochs", "lr": "step", "batch_size": "batch", "max_grad_norm": "clip",
           "noise_multiplier": "noise_multiplier"}


#: why an algorithm whose table has no entry for a name does not take it
MISSING = {"epochs": "it has no epoch count (its run length is its own parameter, see dpreg info)",
           "lr": "it has no step-size parameter",
           "batch_size": "it has no single batch-size parameter",
           "max_grad_norm": "it has no per-record gradient clipping bound parameter",
           "noise_multiplier": "its noise multiplier is always calibrated to the budget"}


def option_name(key: str, style: str = "cli") -> str:
    """How the user spells practitioner name ``key``: ``--batch-size`` on the
    command line (style "cli"), ``batch_size=`` in Python."""
    return "--" + key.replace("_", "-") if style == "cli" else f"{key}="


def _param_name(target: str, style: str) -> str:
    return f"--param {target}=..." if style == "cli" else f"params[{target!r}]"


def practitioner_table(cls) -> dict[str, str]:
    """``{practitioner name: value}`` for algorithm class ``cls``: its
    declared ``practitioner`` table, or (None) :data:`DERIVED` restricted to
    the parameters it has.  A value is either one of its ParamSpec names (the
    option sets that parameter) or a sentence saying why the algorithm has no
    counterpart.  A single-pass algorithm takes ``epochs`` only as its
    ``passes`` parameter (passes of disjoint batches), where it has one."""
    names = {s.name for s in cls.params}
    declared = getattr(cls, "practitioner", None)
    if declared is None:
        table = {k: v for k, v in DERIVED.items() if v in names}
    else:
        table = dict(declared)
    if getattr(cls, "data_access", "") == "single-pass":
        table["epochs"] = ("passes" if "passes" in names else
                           "it is single-pass: every record is used at most once, so a run is one epoch "
                           "by construction and ends when the data run out")
    return table


def practitioner_targets(cls) -> dict[str, str]:
    """The practitioner names ``cls`` takes, mapped to its parameter names."""
    names = {s.name for s in cls.params}
    return {k: v for k, v in practitioner_table(cls).items() if v in names}


def apply_practitioner(cls, params: Any, names: Mapping[str, Any] | None, *, style: str = "python") -> dict:
    """``params`` (a dict, or a list of ``"key=value"``) with the practitioner
    options ``names`` (None values: not given) written into the algorithm's
    own parameters through :func:`practitioner_table`.

    One-line ParameterError (naming the algorithm and the options it does
    take) for an option the algorithm has no counterpart for, for an option
    given together with the parameter it maps to, for a practitioner name
    given as a ``--param`` key, and for ``preset`` on an algorithm that
    declares no preset (its ``theory_note`` says why)."""
    given = params_dict(params)
    names = {k: v for k, v in (names or {}).items() if v is not None}
    algo = getattr(cls, "name", "") or cls.__name__
    specs = {s.name: s for s in cls.params}
    targets = practitioner_targets(cls)
    takes = ", ".join(f"{option_name(k, style)} ({v})" for k, v in targets.items()) or "none of them"
    unknown = sorted(set(names) - set(PRACTITIONER))
    if unknown:
        raise ParameterError(f"unknown practitioner option {unknown[0]!r}; the options are "
                             f"{', '.join(option_name(k, style) for k in PRACTITIONER)}")
    if "preset" in given and "preset" not in specs:
        note = getattr(cls, "theory_note", "") or (f"it declares no 'preset' parameter (dpreg info {algo} "
                                                   f"shows which of its defaults are paper formulas)")
        raise ParameterError(f"algorithm {algo!r} offers no preset=theory: {note}")
    for key in PRACTITIONER:
        if key in given and key not in specs:
            hint = (f"use {option_name(key, style)}, which {algo} maps to {targets[key]!r}" if key in targets
                    else f"{algo} has no counterpart for {option_name(key, style)}")
            raise ParameterError(f"{key!r} is a practitioner name, not a parameter of {algo}: {hint}")
    table = practitioner_table(cls)
    for key in PRACTITIONER:
        if key not in names:
            continue
        opt = option_name(key, style)
        target = table.get(key)
        if target not in specs:
            why = target or MISSING.get(key, "it has no parameter in that role")
            raise ParameterError(f"algorithm {algo!r} has no counterpart for {opt}: {why}; "
                                 f"it takes {takes} (dpreg info {algo})")
        if target in given:
            raise ParameterError(f"give either {opt} or {_param_name(target, style)}, not both "
                                 f"({opt} is {algo}'s {target!r})")
        value = names[key]
        if specs[target].type == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)  # a whole number of an option typed float (--epochs 3) for a count (passes)
        try:
            specs[target].parse(value)
        except ParameterError as exc:
            raise ParameterError(f"{opt} ({algo}'s {target!r}): {exc}") from None
        given[target] = value
    if "epochs" in given and "steps" in given and "epochs" in specs:
        raise ParameterError(f"give either {option_name('epochs', style)} or {_param_name('steps', style)}, "
                             f"not both (two ways to set the length of a {algo} run)")
    return given


def practitioner_params(algo: str, params: Any, names: Mapping[str, Any] | None, *,
                        style: str = "python") -> Any:
    """:func:`apply_practitioner` for the registered algorithm named ``algo``;
    ``params`` comes back unchanged when no practitioner option is given and
    no ``preset`` key needs checking (so an unknown algorithm name is reported
    where it always was, by the pipeline)."""
    names = {k: v for k, v in (names or {}).items() if v is not None}
    if not names:
        keys = params_dict(params)
        if "preset" not in keys and not set(keys) & set(PRACTITIONER):
            return params
    from .registry import get_registry

    return apply_practitioner(get_registry().get("algorithm", algo), params, names, style=style)
