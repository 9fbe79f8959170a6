"""Hook specifications: one per plugin kind.

A plugin module implements any subset of these with ``@dpreg.hookimpl``.  Each
hook receives a ``register`` callable bound to its kind::

    @hookimpl
    def dpreg_register_losses(register):
        register("huber-hinge", HuberHinge(), summary="Huber-smoothed hinge loss")

``register(name, obj, *, summary)`` validates on the spot (see
:class:`dpreg.registry.Registry`).  Hooks return nothing.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

import pluggy

PROJECT = "dpreg"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Register(Protocol):
    """The callable a registration hook receives."""

    def __call__(self, name: str, obj: Any, *, summary: str) -> None: ...


@hookspec
def dpreg_register_losses(register: Register) -> None:
    """Register per-sample losses (:class:`dpreg.interfaces.Loss` instances)."""


@hookspec
def dpreg_register_oracles(register: Register) -> None:
    """Register gradient oracles (:class:`dpreg.interfaces.Oracle` factories)."""


@hookspec
def dpreg_register_noises(register: Register) -> None:
    """Register continual-release noise mechanisms
    (:class:`dpreg.interfaces.NoiseMechanism` subclasses)."""


@hookspec
def dpreg_register_selectors(register: Register) -> None:
    """Register private selectors (:class:`dpreg.interfaces.Selector` subclasses)."""


@hookspec
def dpreg_register_algorithms(register: Register) -> None:
    """Register outer algorithms (:class:`dpreg.interfaces.Algorithm` subclasses)."""


@hookspec
def dpreg_register_accountants(register: Register) -> None:
    """Register privacy accountants (:class:`dpreg.accounting.Accountant` subclasses)."""


@hookspec
def dpreg_register_datasets(register: Register) -> None:
    """Register named data sources (:class:`dpreg.data.DatasetSource` instances)."""


@hookspec
def dpreg_register_commands(cli: Callable[..., Any]) -> None:
    """Add click commands to the ``dpreg`` group: ``cli.add_command(cmd)``."""


#: hook name -> registry kind, in the order kinds are listed
KIND_HOOKS: dict[str, str] = {
    "loss": "dpreg_register_losses",
    "oracle": "dpreg_register_oracles",
    "noise": "dpreg_register_noises",
    "selector": "dpreg_register_selectors",
    "algorithm": "dpreg_register_algorithms",
    "accountant": "dpreg_register_accountants",
    "dataset": "dpreg_register_datasets",
}
