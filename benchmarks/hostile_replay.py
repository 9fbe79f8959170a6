"""Replay the hostile tester's cases (tests/hostile_cases.py) against a
checkout and print one row per case: exit status, seconds, peak memory of
the command, and its last stderr line.

    python benchmarks/hostile_replay.py [--checkout DIR] [--timeout 60] [--cases a,b,...] [--signals]

``--checkout DIR`` runs the cases with DIR's modules first on PYTHONPATH
(``DIR``, ``DIR/kernels``, ``DIR/plugins``): the same cases against another
tree, e.g. ``git archive main | tar -x -C /tmp/before`` for a before/after
table.  A case still running after ``--timeout`` seconds is killed and shown
as such (its memory is what it had reached).  ``--signals`` adds the sweep's
SIGTERM and SIGKILL cases (workers left alive 5 s after the signal) and four
concurrent runs on one ``--out`` (records kept).  The assertions on the same
cases are tests/test_hostile_cases.py.
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import hostile_cases as H  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--cases", default="")
    ap.add_argument("--signals", action="store_true")
    a = ap.parse_args()
    env = H.env_for(a.checkout.resolve() if a.checkout else None)
    wanted = set(filter(None, a.cases.split(",")))
    print("| case | input | exit | s | peak MB | last stderr line |")
    print("|---|---|---|---|---|---|")
    for case in H.CASES:
        if wanted and case.name not in wanted:
            continue
        with tempfile.TemporaryDirectory(prefix="dpreg-hostile-") as tmp:
            cwd = Path(tmp)
            why = H.prepare(case, cwd, env)
            if why:
                print(f"| {case.name} | {case.what} | skipped | | | {why} |")
                continue
            r = H.run_case(case.argv, cwd, timeout=a.timeout, env=env)
            code = "killed" if r["code"] is None else r["code"]
            last = H.last_line(r["stderr"]).replace("|", "/")[:160]
            tb = " (traceback)" if "Traceback" in r["stderr"] else ""
            print(f"| {case.name} | {case.what} | {code} | {r['s']:.1f} | {r['mb']:.0f} | {last}{tb} |", flush=True)
    if a.signals:
        for name, sig in (("sweep-sigterm", signal.SIGTERM), ("sweep-sigkill", signal.SIGKILL)):
            with tempfile.TemporaryDirectory(prefix="dpreg-hostile-") as tmp:
                g = H.sweep_signal(Path(tmp), sig, env=env)
                print(f"| {name} | signal to a 2-worker sweep | {g['code']} | {g['s']:.1f} | | "
                      f"{g['left']} of {g['workers']} children alive 5 s later; table written: {g['table']}; "
                      f"{g['last'][:100]} |", flush=True)
        with tempfile.TemporaryDirectory(prefix="dpreg-hostile-") as tmp:
            g = H.concurrent_out(Path(tmp), 4, env=env)
            print(f"| run-concurrent-out | 4 runs with one --out | {g['codes']} | | | names printed "
                  f"{sorted(set(g['named']))}; files {g['files']} |", flush=True)


if __name__ == "__main__":
    main()
