"""Algorithm parameters: declared specs, parsing of ``key=value``, resolution.

Each algorithm declares a tuple of :class:`ParamSpec`.  A spec's ``default`` is
either a value or ``None`` with a ``formula`` saying how the default is derived
from the problem (n, d, epsilon, delta, G, M, ...) - the algorithm computes those
in its ``resolve`` step.  ``dpreg info NAME`` prints the specs.
"""
from __future__ import annotations

import math
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
                f = float(raw)  # accepts "1e4"
                if not math.isfinite(f) or f != int(f):
                    raise ValueError(raw)
                value = int(f)
            else:
                value = _TYPES[self.type](raw)
        except (TypeError, ValueError):
            raise ParameterError(
                f"parameter {self.name!r} expects {self.type}, got {raw!r}"
            ) from None
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
