"""Serial variants of the two hot kernels, compiled from the same undecorated
functions as the parallel ones in :mod:`dpreg_kernels.linear_model` (same fixed
chunking, so bit-identical results).  Imported on demand (thread-scaling
benchmarks, tests) so a run does not pay their compile time.
"""
from __future__ import annotations

from .config import jit_serial
from .linear_model import _DIFF_SIG, _GRAD_SIG, _diff_sum, _grad_sum

grad_sum_serial = jit_serial(_GRAD_SIG)(_grad_sum)
diff_sum_serial = jit_serial(_DIFF_SIG)(_diff_sum)
