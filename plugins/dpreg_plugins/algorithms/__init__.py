"""Outer algorithms (hook ``dpreg_register_algorithms``): one module per
algorithm (file named after it), plus shared building blocks (``spider_core``:
the private SPIDER running sum and plan calibration)."""
