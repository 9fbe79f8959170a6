"""Google dp-accounting, as the accountants use it: its names imported from the
modules that define them, without the package's ``__init__``.

``import dp_accounting`` runs the package's ``__init__``, which imports every
sub-package: its PLD accountant alone pulls in ``scipy.signal`` and
``scipy.stats``: 0.96 s against 0.26 s for the event, accountant and RDP
modules, beyond numpy and dpreg.accounting (``python -m pytest
benchmarks/bench_end_to_end.py -k dp_accounting_import -s --benchmark-disable``,
docs/benchmarks.md), while a run with the RDP accountant needs none of it.

:data:`dpa` serves the names :mod:`dpreg.accounting` uses (``dpa.GaussianDpEvent``,
``dpa.rdp.RdpAccountant``, ``dpa.pld``, ...), each from its own module on first use.
For that the ``dp_accounting`` package is entered in ``sys.modules`` *unexecuted*
(when nothing has imported it yet), so that its sub-modules import alone.  The
package stays whole for every other user: an attribute that is not yet there - a
sub-module not imported yet, or one of the names the ``__init__`` defines - imports
the sub-module of that name, else runs the ``__init__`` once, in the same module
object, and answers from it.  If the package was imported before, it is used as
it is.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

#: where each top-level name of dp-accounting that dpreg uses is defined
_HOMES = {
    "ComposedDpEvent": "dp_event", "GaussianDpEvent": "dp_event", "NoOpDpEvent": "dp_event",
    "PoissonSampledDpEvent": "dp_event", "RandomizedResponseDpEvent": "dp_event",
    "SampledWithoutReplacementDpEvent": "dp_event", "SelfComposedDpEvent": "dp_event",
    "NeighboringRelation": "privacy_accountant",
    "UnsupportedEventError": "privacy_accountant",
}
_PACKAGE = "dp_accounting"
_lock = threading.RLock()  # re-entered if the package's own __init__ asks it for a name it has not defined yet


def _package():
    """The ``dp_accounting`` module: the imported package, or (nothing imported
    it yet) the package entered unexecuted, completed on demand (module docstring)."""
    mod = sys.modules.get(_PACKAGE)
    if mod is not None:
        return mod
    with _lock:
        mod = sys.modules.get(_PACKAGE)
        if mod is not None:
            return mod
        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None or spec.submodule_search_locations is None:  # not installed as a package
            return importlib.import_module(_PACKAGE)
        mod = importlib.util.module_from_spec(spec)  # __path__ and __spec__ set, __init__ not run
        done = []

        def __getattr__(name):
            if not name.startswith("__"):
                try:
                    return importlib.import_module(f"{_PACKAGE}.{name}")
                except ModuleNotFoundError as e:
                    if e.name != f"{_PACKAGE}.{name}":
                        raise  # a dependency of that sub-module is missing: not ours to hide
            with _lock:
                if not done:
                    done.append(True)
                    spec.loader.exec_module(mod)  # the package's own __init__, in this module
            try:
                return mod.__dict__[name]
            except KeyError:
                raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}") from None

        mod.__getattr__ = __getattr__
        sys.modules[_PACKAGE] = mod
        return mod


class _Names:
    """The names :mod:`dpreg.accounting` takes from dp-accounting (``dpa.X``):
    each one from the module that defines it, imported on first use."""

    def __getattr__(self, name):
        pkg = _package()
        home = _HOMES.get(name)
        # a name of _HOMES from its module; anything else (the sub-packages rdp, pld) from the package
        value = getattr(importlib.import_module(f"{_PACKAGE}.{home}"), name) if home is not None else getattr(pkg, name)
        setattr(self, name, value)
        return value


#: dp-accounting's names, as :mod:`dpreg.accounting` uses them
dpa = _Names()
