"""Serial variants of the two hot kernels (the ``serial`` variants of
:class:`dpreg_kernels.linear_model.Kernel`: same fixed chunking as the parallel
ones, so bit-identical results).  Kept for the thread-scaling benchmarks and
tests that import them by name.
"""
from __future__ import annotations

from .linear_model import diff_sum, grad_sum

grad_sum_serial = grad_sum.serial
diff_sum_serial = diff_sum.serial
