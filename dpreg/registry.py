"""The plugin manager and the name registry.

:func:`get_registry` builds (once per process) a ``pluggy.PluginManager`` for
the project ``dpreg``, registers the built-in plugin modules of
:data:`DEFAULT_PLUGINS` first, then third-party packages from the entry-point
group ``dpreg`` (unless ``DPREG_DISABLE_PLUGIN_AUTOLOAD=1``), checks that every
hook implementation matches a spec (``check_pending``), and calls each
registration hook with a ``register`` callable bound to its kind and provider.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Iterator

import pluggy

from . import hookspecs
from .errors import DpregError, DuplicateNameError, ParameterError, UnknownNameError

#: built-in plugin modules, registered before any entry point, exactly like
#: third-party plugins (the host reaches them only through the registry)
DEFAULT_PLUGINS: tuple[str, ...] = (
    "dpreg_plugins.losses.linear",
    "dpreg_plugins.losses.mlp",
    "dpreg_plugins.losses.softmax",
    "dpreg_plugins.oracles.spider",
    "dpreg_plugins.oracles.zeroth_order",
    "dpreg_plugins.noise.gaussian",
    "dpreg_plugins.noise.tree",
    "dpreg_plugins.noise.tree_honaker",
    "dpreg_plugins.noise.sqrt_factorization",
    "dpreg_plugins.accountants.dp_accounting",
    "dpreg_plugins.datasets.sources",
    "dpreg_plugins.algorithms.dp_gd",
    "dpreg_plugins.algorithms.dp_sgd",
    "dpreg_plugins.algorithms.dp_spider",
    "dpreg_plugins.algorithms.adaptive_spider",
    "dpreg_plugins.algorithms.perturbed_sgd",
    "dpreg_plugins.algorithms.trust_region",
    "dpreg_plugins.selectors.private_selection",
    "dpreg_plugins.algorithms.warm_start",
    "dpreg_plugins.algorithms.distributed_spider",
    "dpreg_plugins.selectors.distributed_selection",
    "dpreg_plugins.algorithms.zo_o2nc",
    "dpreg_plugins.commands.audit",
    "dpreg_plugins.commands.sweep",
    "dpreg_plugins.commands.plot",
)

ENTRY_POINT_GROUP = "dpreg"
KINDS = tuple(hookspecs.KIND_HOOKS)


@dataclass(frozen=True)
class Entry:
    """One registered object."""

    kind: str
    name: str
    obj: Any
    summary: str
    provider: str  # plugin name (module or entry point name)
    package: str   # distribution name
    version: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "summary": self.summary,
                "provider": self.provider, "package": self.package, "version": self.version}


class Registry:
    """Name -> object maps, one per kind, filled by the registration hooks."""

    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm
        self._entries: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}

    # -- filling --------------------------------------------------------------------
    def registrar(self, kind: str, provider: str, package: str, version: str):
        """A ``register(name, obj, *, summary)`` callable for one kind and provider."""

        def register(name: str, obj: Any, *, summary: str) -> None:
            if not isinstance(name, str) or not name or name != name.strip() or " " in name:
                raise DpregError(f"{provider}: invalid {kind} name {name!r}")
            if not isinstance(summary, str) or not summary.strip():
                raise DpregError(f"{provider}: {kind} {name!r} needs a one-line summary")
            table = self._entries[kind]
            if name in table:
                other = table[name]
                raise DuplicateNameError(
                    f"{kind} {name!r} is registered twice: by {other.provider} "
                    f"({other.package} {other.version}) and by {provider} ({package} {version})"
                )
            table[name] = Entry(kind, name, obj, summary.strip(), provider, package, version)

        return register

    # -- lookup ---------------------------------------------------------------------
    def get(self, kind: str, name: str) -> Any:
        """The object registered as ``name`` for ``kind``; an unknown name is an
        error listing the valid ones."""
        return self.entry(kind, name).obj

    def entry(self, kind: str, name: str) -> Entry:
        if kind not in self._entries:
            raise UnknownNameError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
        table = self._entries[kind]
        if name not in table:
            valid = ", ".join(sorted(table)) or "(none registered)"
            raise UnknownNameError(f"unknown {kind} {name!r}; valid {kind} names: {valid}")
        return table[name]

    def names(self, kind: str) -> list[str]:
        return sorted(self._entries[kind])

    def entries(self, kind: str | None = None) -> Iterator[Entry]:
        kinds = KINDS if kind is None else (kind,)
        for k in kinds:
            if k not in self._entries:
                raise UnknownNameError(f"unknown kind {k!r}; kinds: {', '.join(KINDS)}")
            yield from (self._entries[k][n] for n in sorted(self._entries[k]))

    def find(self, name: str) -> list[Entry]:
        """Every entry called ``name``, whatever its kind."""
        return [t[name] for t in self._entries.values() if name in t]


def _dist_of_module(modname: str) -> tuple[str, str]:
    top = modname.split(".")[0]
    try:
        dists = metadata.packages_distributions().get(top, [])
        dist = dists[0] if dists else top
        return dist, metadata.version(dist)
    except Exception:  # noqa: BLE001 - a module outside any distribution
        return top, "unknown"


def build_registry(extra_plugins: tuple[Any, ...] = (), autoload: bool | None = None) -> Registry:
    """A fresh registry: built-ins, then entry points (if ``autoload``), then
    ``extra_plugins`` (modules or objects with hook implementations; for tests)."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    from . import __version__

    providers: dict[str, tuple[str, str]] = {}
    for modname in DEFAULT_PLUGINS:
        mod = importlib.import_module(modname)
        pm.register(mod, name=modname)
        providers[modname] = ("dpreg", __version__)
    if autoload is None:
        autoload = os.environ.get("DPREG_DISABLE_PLUGIN_AUTOLOAD", "") not in ("1", "true", "yes")
    if autoload:
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # noqa: BLE001
                raise DpregError(
                    f"plugin entry point {ep.name!r} ({ep.value}) failed to load: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            pm.register(plugin, name=ep.name)
            dist = getattr(ep, "dist", None)
            providers[ep.name] = ((dist.name, dist.version) if dist is not None
                                  else _dist_of_module(ep.value.split(":")[0]))
    for i, plugin in enumerate(extra_plugins):
        name = getattr(plugin, "__name__", f"extra-{i}")
        pm.register(plugin, name=name)
        providers[name] = _dist_of_module(getattr(plugin, "__module__", None) or name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise DpregError(f"plugin {exc.plugin!r} has a hook that matches no dpreg hook spec: {exc}") from None

    reg = Registry(pm)
    order = list(providers)  # built-ins first, then entry points, then extras
    for kind, hookname in hookspecs.KIND_HOOKS.items():
        impls = {impl.plugin_name: impl for impl in getattr(pm.hook, hookname).get_hookimpls()}
        for pname in order:
            impl = impls.get(pname)
            if impl is None:
                continue
            pkg, ver = providers[pname]
            impl.function(register=reg.registrar(kind, pname, pkg, ver))
    return reg


_REGISTRY: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry (built on first use)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = build_registry()
    return _REGISTRY


def reset_registry() -> None:
    """Forget the process-wide registry (tests)."""
    global _REGISTRY
    _REGISTRY = None


# ------------------------------------------------------------ names with options
def parse_name_options(spec: str) -> tuple[str, dict]:
    """``"name:key=value,..."`` -> (name, {key: value string}) (data sets, losses, selectors).
    A part without ``=`` continues the value before it: ``mlp:hidden=64,32,activation=tanh``
    gives ``{"hidden": "64,32", "activation": "tanh"}``."""
    name, _, opts = spec.partition(":")
    kw: dict = {}
    if opts:
        last = None
        for part in opts.split(","):
            k, eq, v = part.partition("=")
            if not eq and last is not None and part.strip():
                kw[last] += "," + part.strip()
                continue
            if not eq or not k.strip():
                raise ParameterError(f"options must look like name:key=value,...; got {spec!r}")
            last = k.strip()
            kw[last] = v.strip()
    return name, kw


def get_loss(reg: Registry, spec: str):
    """The loss named by ``spec`` (``name`` or ``name:key=value,...``): options
    go to the registered loss, which must then be callable (a loss factory:
    ``loss(**options)`` returns the configured loss)."""
    name, kw = parse_name_options(spec)
    loss = reg.get("loss", name)
    if not kw:
        return loss
    if not callable(loss):
        raise ParameterError(f"loss {name!r} takes no options; got {spec!r}")
    try:
        return loss(**kw)
    except TypeError as exc:
        raise ParameterError(f"loss {name!r}: bad options {kw}: {exc}") from None
