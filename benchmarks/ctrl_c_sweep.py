"""Ctrl-C at many moments of a first run: ``dpreg run --algo dp-gd`` on
synthetic data (200,000 steps: it cannot finish first) against an empty numba
cache, interrupted ``DELAY`` seconds after it starts, for each delay.  A
first run spends its first seconds compiling kernels, where a SIGINT can land
inside llvmlite's ctypes callbacks (dpreg/interrupts.py).

    python benchmarks/ctrl_c_sweep.py [--delays 2,3,...] [--timeout 60]

Prints one row per delay - exit status, seconds from the signal to the exit,
whether stderr held a traceback, stderr's last line - and a tally of clean
exits (status 130, the one line, no traceback, no file).  A run still alive
``--timeout`` seconds after the signal is killed and counted as a hang.
Run with ``PYTHONPATH=<checkout>/kernels:<checkout>:<checkout>/plugins`` to
sweep another checkout.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

CMD = ["run", "--algo", "dp-gd", "--data", "synthetic-logistic:n=20000,d=50", "--param", "steps=200000",
       "--seed", "0"]


def one(delay: float, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, "numba"))
        p = subprocess.Popen([sys.executable, "-m", "dpreg", *CMD, "--out", out], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
        time.sleep(delay)
        t0 = time.perf_counter()
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=timeout)
            hang = False
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            hang = True
        lines = err.strip().splitlines()
        last = lines[-1] if lines else ""
        clean = (not hang and p.returncode == 130 and last == "interrupted; no output written"
                 and "Traceback" not in err and not os.path.exists(out))
        return {"delay": delay, "status": "hang" if hang else p.returncode, "after_s": time.perf_counter() - t0,
                "traceback": "Traceback" in err, "last": last[:70], "clean": clean}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--delays", default="2,3,4,5,6,7,8,9,9.5,10,10.5,11,11.5,12,13,14,15,17")
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    print("| delay (s) | exit status | s to exit | traceback | stderr's last line |")
    print("|---|---|---|---|---|")
    rows = []
    for d in (float(x) for x in a.delays.split(",")):
        r = one(d, a.timeout)
        rows.append(r)
        print(f"| {d:g} | {r['status']} | {r['after_s']:.1f} | {r['traceback']} | {r['last']} |", flush=True)
    print(f"clean exits: {sum(r['clean'] for r in rows)} of {len(rows)}")


if __name__ == "__main__":
    main()
