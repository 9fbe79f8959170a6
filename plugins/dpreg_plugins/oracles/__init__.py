"""Gradient oracles (hook ``dpreg_register_oracles``): estimators of grad F(x)
and grad F(x) - grad F(y) with their enforced per-record sensitivities."""
