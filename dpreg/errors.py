"""Exceptions.  Every error a user can cause is a :class:`DpregError`.

The CLI prints a ``DpregError`` as one line (``error: <message>``) and exits
with status 2, without a traceback; anything else is a bug and keeps its
traceback.
"""
from __future__ import annotations


class DpregError(Exception):
    """A user-facing error: bad input, unknown name, impossible request."""


class UnknownNameError(DpregError, KeyError):
    """A plugin name that is not registered; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DuplicateNameError(DpregError):
    """Two providers registered the same name for one kind."""


class DataError(DpregError, ValueError):
    """A data file or array that cannot be used (format, NaN/inf, labels, shape);
    also a ValueError, as scikit-learn and numpy callers expect."""


class ParameterError(DpregError, ValueError):
    """An algorithm or CLI parameter that is malformed or out of range (also a
    ValueError)."""


class BudgetExceededError(DpregError):
    """A release would make the accountant's (epsilon, delta) exceed the budget.

    Raised *before* the release happens: nothing noisy has been computed or
    returned for the refused release.
    """


class DpregWarning(UserWarning):
    """A warning dpreg raises with :func:`warnings.warn` (a ``UserWarning``:
    ``-W error::UserWarning`` turns it into an exception)."""


class PrivacyWarning(DpregWarning):
    """A condition that weakens or qualifies a run's privacy guarantee: seeded
    randomness, delta >= 1/n, a schema or class set read off the data, a cache
    directory refused.  From Python (:func:`dpreg.run`,
    :class:`dpreg.sklearn.DPClassifier`) it is raised with :func:`warnings.warn`;
    the CLI prints each once as ``warning: ...``."""
