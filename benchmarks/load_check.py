"""Does a long run keep its parallel kernels on an otherwise idle machine?

The kernels run their parallel variants only while other work leaves CPUs
free (``dpreg_kernels.config.want_parallel``, which asks ``_busy``).  This
script runs dp-spider's race set-up (IJCNN1, logistic loss, epsilon 1,
gaussian noise, ``bench_end_to_end.race_setup``) back to back for
``--seconds`` and prints, per window of ``--window`` seconds: the kernel
calls that asked, how many of them were told parallel, the median run time,
the 1-minute load average and ``_busy``'s reading.

``--rule loadavg`` restores the rule of the fourteenth session and before
(parallel while the larger of the 1-minute load average and the runnable
tasks minus one is below the CPU count minus one half), which counts the
run's own threads as other work: reproduce with it the serial calls that
rule gave a long run.  ``--spin K`` starts K
busy processes halfway through, so the table also shows the check seeing
real other work.

``--compare K`` instead times the same run with its kernels forced serial and
forced parallel (the work threshold alone), alternating, ``--runs`` each,
idle and then beside K busy processes: what the check's choice is worth.

    python benchmarks/load_check.py [--seconds 150] [--rule {others,loadavg}] [--spin 0]
    python benchmarks/load_check.py --compare 1 [--runs 10]

Run nothing else meanwhile (the point is an idle machine), and start it
with the 1-minute load average low (under 0.3).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def loadavg_rule() -> float:
    """The former ``_busy``: max(1-minute load average, runnable tasks - 1)."""
    with open("/proc/loadavg") as f:
        fields = f.read().split()
    return max(float(fields[0]), float(int(fields[3].split("/")[0]) - 1))


def reading(b) -> str:
    """The check's reading as the table prints it (n/a without /proc)."""
    return "n/a" if b is None else f"{b:.2f}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--rule", choices=("others", "loadavg"), default="others")
    ap.add_argument("--spin", type=int, default=0, help="busy processes started halfway through")
    ap.add_argument("--compare", type=int, default=None, metavar="K",
                    help="time forced-serial against forced-parallel runs, idle and beside K busy processes")
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args(argv)
    if a.compare is not None:
        return compare(a.compare, a.runs)

    import dpreg.problem as problem
    from bench_end_to_end import busy, race_setup
    from dpreg_kernels import config

    if a.rule == "loadavg":  # the former load and the former threshold (the CPU count minus one half)
        config._busy = loadavg_rule
        config.machine_has_idle_cores = lambda: loadavg_rule() < (os.cpu_count() or 1) - 0.5
    pb, run = race_setup("dp-spider")
    pb._k.clipped_sum.parallel  # noqa: B018 (the parallel variant compiled or loaded: a warm cache)
    asked = []
    want = problem._want_parallel

    def recording(work):
        r = want(work)
        asked.append(r)
        return r

    problem._want_parallel = recording
    run()
    print(f"rule {a.rule!r}, {os.cpu_count()} CPUs, start load average {os.getloadavg()[0]:.2f}, "
          f"busy processes from {a.seconds / 2:.0f} s: {a.spin}")
    print("| window end (s) | runs | calls told parallel | median run (ms) | load avg (1 min) | _busy |")
    print("|---|---|---|---|---|---|")
    spin = busy(a.spin)
    t0 = time.monotonic()
    end = t0 + a.window
    times = []
    asked.clear()
    spinning = False
    try:
        while True:
            now = time.monotonic()
            if a.spin and not spinning and now - t0 >= a.seconds / 2:
                spin.__enter__()
                spinning = True
            if now >= end:
                print(f"| {now - t0:.0f} | {len(times)} | {sum(asked)}/{len(asked)} | "
                      f"{1e3 * float(np.median(times)):.1f} | {os.getloadavg()[0]:.2f} | {reading(config._busy())} |",
                      flush=True)
                times.clear()
                asked.clear()
                end += a.window
                if now - t0 >= a.seconds:
                    break
            times.append(run()[0])
    finally:
        if spinning:
            spin.__exit__(None, None, None)


def compare(k: int, runs: int) -> None:
    """Median run times of dp-spider's race run with the kernels forced serial
    and forced parallel (alternating), idle and beside ``k`` busy processes."""
    import dpreg.problem as problem
    from bench_end_to_end import busy, race_setup
    from dpreg_kernels.config import PARALLEL_WORK

    pb, run = race_setup("dp-spider")
    pb._k.clipped_sum.parallel  # noqa: B018 (a warm cache)
    want = problem._want_parallel
    forced = {"serial": lambda work: False, "parallel": lambda work: work >= PARALLEL_WORK}
    print("| busy processes | serial kernels, median run (ms) | parallel kernels, median run (ms) | parallel / serial |")
    print("|---|---|---|---|")
    try:
        for load in (0, k):
            with busy(load):
                for f in forced.values():
                    problem._want_parallel = f
                    run()
                t = {m: [] for m in forced}
                for _ in range(runs):
                    for m, f in forced.items():
                        problem._want_parallel = f
                        t[m].append(run()[0])
            s, p = (float(np.median(t[m])) for m in forced)
            print(f"| {load} | {1e3 * s:.1f} | {1e3 * p:.1f} | {p / s:.2f}x |", flush=True)
    finally:
        problem._want_parallel = want


if __name__ == "__main__":
    main()
