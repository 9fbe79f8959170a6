"""dp-spider's compiled steps (``SpiderEstimator.steps``: whole phases per
compiled call, ``dpreg_kernels.spider``) against its step-at-a-time loop in the
same run: the run phase on IJCNN1 at the race's set-up (logistic loss, epsilon 1,
research seed 0), the two alternating, and the ratio.  Both give the same
numbers for the same seed (tests/test_dp_spider.py).

    python -m pytest benchmarks/bench_spider_steps.py --benchmark-enable
    python benchmarks/race_breakdown.py --loop-vs-compiled --runs 15   # the table
"""
from __future__ import annotations

import pytest

from bench_end_to_end import IJCNN1


@pytest.mark.slow
def test_dp_spider_compiled_steps_vs_loop(benchmark):
    if not IJCNN1.exists():
        pytest.skip(f"{IJCNN1} not present")
    from race_breakdown import loop_vs_compiled

    res = {}
    benchmark.pedantic(lambda: res.update(zip(("compiled", "loop"), loop_vs_compiled(5))), rounds=1, iterations=1)
    fused, loop = res["compiled"], res["loop"]
    benchmark.group = "race-numpy"
    benchmark.extra_info.update({"kind": "spider-steps", "compiled_min_s": fused[0], "loop_min_s": loop[0],
                                 "compiled_median_s": fused[2], "loop_median_s": loop[2],
                                 "loop_over_compiled": loop[2] / fused[2]})
