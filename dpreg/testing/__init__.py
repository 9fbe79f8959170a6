"""Test support that ships with dpreg, for the built-in plugins' tests and
third-party packages' own:

* :mod:`dpreg.testing.contracts` - contract test classes every plugin of a
  kind must pass (:class:`LossContract`, :class:`NoiseContract`), re-exported
  here: ``from dpreg.testing import LossContract``.
* :mod:`dpreg.testing.faults` - deliberate privacy bugs for showing that the
  empirical audit (:mod:`dpreg.audit`) can fail.  Test-only: nothing outside
  an audit's ``fault`` option uses them.
"""
from .contracts import LossContract, NoiseContract

__all__ = ["LossContract", "NoiseContract"]
