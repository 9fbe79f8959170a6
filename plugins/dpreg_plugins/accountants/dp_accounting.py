"""Built-in accountants: ``rdp`` and ``pld``, both on Google's dp-accounting."""
from __future__ import annotations

from dpreg import hookimpl
from dpreg.accounting import PldAccountant, RdpAccountant


@hookimpl
def dpreg_register_accountants(register):
    register("rdp", RdpAccountant, summary="Renyi DP (dp-accounting), parallel composition over disjoint batches")
    register("pld", PldAccountant, summary="privacy loss distributions (dp-accounting): tighter, slower")
