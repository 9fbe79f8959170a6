"""Where the run phase of the race goes: ``Algorithm.run`` of an algorithm on
IJCNN1 (logistic loss, epsilon 1, research seed 0, the race's set-up,
``bench_end_to_end.race_setup``), split into the clipped-sum calls (the kernels,
with their Python wrappers), the Poisson sampling (``poisson_rows_many``) and
the noise calibration (``RdpAccountant.calibrate``: memoised dry runs and
epsilon conversions after the first run), the rest (noise draws, charges,
trajectory, per-step Python), and the same run
with the kernels and the sampling replaced by instant stand-ins (the
per-step Python alone; the numbers it computes are meaningless).  Compiled
steps (dp-sgd's ``Problem.sgd_steps``, dp-spider's ``Problem.spider_steps``:
many steps per compiled call, Python only between calls) count as kernels;
such a run has no stand-in run.

    python benchmarks/race_breakdown.py [algo] [--runs K]   # default dp-spider, 10 runs
    python benchmarks/race_breakdown.py --loop-vs-compiled [--runs K] [--data adult]   # dp-spider: compiled vs loop

Prints, per timed run (calibration memoised after the first, untimed run),
the run time and its parts in ms, fastest five first; then the minimum and
median of the stand-in run.  Wrappers add ~1 us per call; the parts are
measured in the same run, so their sum is the run time.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_end_to_end import race_setup  # noqa: E402


def _setup(algo):
    pb, run_once = race_setup(algo)

    def once():
        return run_once()[0]

    return pb, once


def breakdown(algo: str = "dp-spider", runs: int = 10):
    """(list of (run, kernels, sampling, calibration) seconds per timed run, stand-in run times)."""
    import dpreg.access as access
    from dpreg.accounting import RdpAccountant

    pb, once = _setup(algo)
    parts = {"kernels": 0.0, "sampling": 0.0, "calibration": 0.0}

    def timed(f, key):
        def g(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                parts[key] += time.perf_counter() - t
        return g

    grad, diff, sample = pb.clipped_grad_sum, pb.clipped_diff_sum, access.poisson_rows_many
    fused, spider = pb.sgd_steps, pb.spider_steps
    pb.clipped_grad_sum, pb.clipped_diff_sum = timed(grad, "kernels"), timed(diff, "kernels")
    pb.sgd_steps, pb.spider_steps = timed(fused, "fused"), timed(spider, "fused")
    access.poisson_rows_many = timed(sample, "sampling")
    calibrate = RdpAccountant.calibrate
    RdpAccountant.calibrate = timed(calibrate, "calibration")
    parts["fused"] = 0.0
    try:
        once()  # loads the kernels, memoises the calibration
        rows = []
        for _ in range(runs):
            parts["kernels"] = parts["sampling"] = parts["fused"] = parts["calibration"] = 0.0
            t = once()
            rows.append((t, parts["kernels"] + parts["fused"], parts["sampling"], parts["calibration"]))
        if parts["fused"]:
            return sorted(rows), None
        # the per-step Python alone: kernels return zeros, samples are drawn once and replayed
        zeros = np.zeros(pb.d)
        pb.clipped_grad_sum = lambda *a, **k: (zeros, 0)
        pb.clipped_diff_sum = lambda *a, **k: (zeros, 0)
        memo = {}

        def replay(rng, n, q, k):
            key = (n, q, k)
            if key not in memo:
                memo[key] = sample(rng, n, q, k)
            return memo[key]

        access.poisson_rows_many = replay
        once()
        bare = sorted(once() for _ in range(runs))
    finally:
        pb.clipped_grad_sum, pb.clipped_diff_sum, access.poisson_rows_many = grad, diff, sample
        pb.sgd_steps, pb.spider_steps = fused, spider
        RdpAccountant.calibrate = calibrate
    return sorted(rows), bare


def loop_vs_compiled(runs: int = 10, data: str | None = None):
    """dp-spider's run phase on IJCNN1 (the race's set-up; ``data``: another data
    set by name or path, e.g. the built-in ``adult``, prepared as a run prepares
    it) with its compiled steps
    (the gaussian plugin) and with its step-at-a-time loop (the same plugin with
    ``independent_adds`` off, so ``SpiderEstimator.compiled_steps`` is False), the
    two alternating, ``runs`` timed runs each after an untimed one:
    ``(compiled seconds sorted, loop seconds sorted)``.  The two give the same
    numbers for the same seed (tests/test_dp_spider.py)."""
    from dpreg_plugins.noise.gaussian import GaussianMechanism

    class StepwiseGaussian(GaussianMechanism):
        independent_adds = False

    if data is None:
        _, run_once = race_setup("dp-spider")
    else:
        from dpreg.pipeline import load_prepared

        X, y, _, _ = load_prepared(data, seed=0, labels="binary")
        _, run_once = race_setup("dp-spider", X, y)

    def once(noise):
        return run_once(noise)[0]

    once(GaussianMechanism), once(StepwiseGaussian)
    fused, loop = [], []
    for _ in range(runs):
        fused.append(once(GaussianMechanism))
        loop.append(once(StepwiseGaussian))
    return sorted(fused), sorted(loop)


if __name__ == "__main__":
    if "--loop-vs-compiled" in sys.argv:
        runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 10
        data = sys.argv[sys.argv.index("--data") + 1] if "--data" in sys.argv else None
        fused, loop = loop_vs_compiled(runs, data)
        print(f"dp-spider on {data or 'IJCNN1'}, {runs} alternating runs each (ms):")
        print("| | min | median |")
        print("|---|---|---|")
        for name, ts in (("compiled steps", fused), ("step-at-a-time loop", loop)):
            print(f"| {name} | {ts[0] * 1e3:.1f} | {ts[len(ts) // 2] * 1e3:.1f} |")
        print(f"| loop / compiled | {loop[0] / fused[0]:.2f}x | {loop[len(loop) // 2] / fused[len(fused) // 2]:.2f}x |")
        sys.exit(0)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 10
    algo = next((a for a in args if not a.isdigit()), "dp-spider")
    rows, bare = breakdown(algo, runs)
    print(f"{algo} on IJCNN1, {runs} timed runs (fastest five):")
    print("| run (ms) | clipped sums or fused steps (ms) | sampling (ms) | noise calibration (ms) | rest (ms) |")
    print("|---|---|---|---|---|")
    for t, k, s, c in rows[:5]:
        print(f"| {t * 1e3:.1f} | {k * 1e3:.1f} | {s * 1e3:.1f} | {c * 1e3:.1f} | {(t - k - s - c) * 1e3:.1f} |")
    if bare is None:
        print("per-step Python alone: n/a (fused steps: the Python runs between calls of many steps)")
    else:
        print(f"per-step Python alone (instant kernels and sampling): min {bare[0] * 1e3:.1f} ms, "
              f"median {bare[len(bare) // 2] * 1e3:.1f} ms")
