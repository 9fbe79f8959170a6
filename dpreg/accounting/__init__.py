"""Privacy accounting: the single source of every reported (epsilon, delta), on Google's
dp-accounting.

* :mod:`.events` - the ``DpEvent`` s dpreg charges and how it reads them
  (:func:`gaussian_event`, :func:`poisson_sampled`, :func:`pure_dp_event`, ...);
* :mod:`.accountant` - :class:`Accountant`: the budget, global and grouped charges
  (groups of a pass compose in parallel, passes in sequence), reservation;
* :mod:`.rdp` - :class:`RdpAccountant` (Renyi DP, ``dp_accounting.rdp``);
* :mod:`.pld` - :class:`PldAccountant` (privacy-loss distributions, ``dp_accounting.pld``);
* :mod:`.calibration` - the noise-multiplier search and the calibration memos;
* :mod:`.views` - :class:`BudgetView` (one stage of a composite run) and
  :class:`Prepaid` (a release charged in advance).
"""
from __future__ import annotations

from .accountant import RELATIONS, Accountant, check_budget_args
from .calibration import calibration_memo, clear_calibration_memos
from .events import (atoms, composed, dp_accounting, gaussian_event, poisson_sampled, pure_dp_event,
                     sampled_without_replacement, self_composed)
from .pld import PldAccountant
from .rdp import RdpAccountant, _epsilon_and_order, rdp_cache_info
from .views import BudgetView, Prepaid

#: :func:`dp_accounting` under a second name, ``_dpa``, that plugin code may import
_dpa = dp_accounting
#: :func:`clear_calibration_memos`, under the name benchmarks call
clear_rdp_cache = clear_calibration_memos

__all__ = [
    "RELATIONS", "Accountant", "BudgetView", "PldAccountant", "Prepaid", "RdpAccountant", "atoms",
    "calibration_memo", "check_budget_args", "clear_calibration_memos", "clear_rdp_cache", "composed",
    "dp_accounting", "gaussian_event", "poisson_sampled", "pure_dp_event", "rdp_cache_info",
    "sampled_without_replacement", "self_composed",
]
