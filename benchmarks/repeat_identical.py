"""Bit-reproducibility of the kernels under a moving allocator: in each of
``--procs`` fresh processes (``NUMBA_NUM_THREADS=1`` and the default, half
each), every kernel family is called ``--repeats`` times with the same
arguments while numpy arrays of varied sizes are allocated in between; a
family "varied" in a process when any call's bits differ from its first.

Families: the network (mlp loss: O1 full and sampled, O2, HVP, loss), the
linear model dense and CSR (logistic: O1 full and sampled, O2, loss, HVP),
and the zeroth-order sum (dense).

    python benchmarks/repeat_identical.py [--procs 8] [--repeats 30]

Run with ``PYTHONPATH=<checkout>/kernels:<checkout>:<checkout>/plugins`` to
check another checkout.  Prints, per family, in how many processes it varied.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys
import numpy as np
import scipy.sparse as sp
from dpreg.problem import Problem, make_problem
from dpreg.registry import get_registry
reg = get_registry()
repeats = int(sys.argv[1])
rng = np.random.default_rng(7)

def unit(n, p):
    X = rng.standard_normal((n, p))
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]

fams = {}
X = unit(203, 5); y = np.where(rng.random(203) < 0.5, 1.0, -1.0)
pb = make_problem(reg.get("loss", "mlp")(hidden=4), X, y)
w, wp, V = 0.8 * rng.standard_normal(pb.d), 0.8 * rng.standard_normal(pb.d), rng.standard_normal(pb.d)
idx = rng.integers(0, 203, 150)
fams["mlp"] = lambda: [pb.clipped_grad_sum(w, None, 0.2)[0], pb.clipped_grad_sum(w, idx, 0.2)[0],
                       pb.clipped_diff_sum(w, wp, idx, 0.2)[0], pb.hvp(w, V), np.array([pb.value(w)])]
Xl = unit(3000, 23); yl = np.where(rng.random(3000) < 0.5, 1.0, -1.0)
Xs = Xl.copy(); Xs[np.abs(Xs) < 0.15] = 0.0
wl, wlp, Vl = 0.3 * rng.standard_normal(23), 0.3 * rng.standard_normal(23), rng.standard_normal(23)
il = np.sort(rng.integers(0, 3000, 700))
U = rng.standard_normal((200, 3, 23)); U /= np.linalg.norm(U, axis=2, keepdims=True)
for name, data in (("linear dense", Xl), ("linear csr", sp.csr_matrix(Xs))):
    q = Problem(reg.get("loss", "logistic"), data, yl)
    fams[name] = (lambda q=q: [q.clipped_grad_sum(wl, None, 0.5)[0], q.clipped_grad_sum(wl, il, 0.5)[0],
                               q.clipped_diff_sum(wl, wlp, il, 0.3)[0], np.array([q.value(wl)]), q.hvp(wl, Vl)])
qd = Problem(reg.get("loss", "logistic"), Xl, yl)
fams["zeroth-order"] = lambda: [qd.clipped_zo_sum(wl, wlp, U, il[:200], h=0.01, sgn=1.0, scale=1.0, clip=0.5,
                                                  rec_clip=1.0, sym=True)[0]]
varied = {}
keep = []
for name, f in fams.items():
    ref = f()
    bad = False
    for k in range(repeats):
        keep.append(np.empty(1 + (k * 37) % 61))  # the allocator's state moves between calls
        bad |= any(not np.array_equal(a, b) for a, b in zip(ref, f()))
    varied[name] = bad
print(json.dumps(varied))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    counts: dict = {}
    for k in range(a.procs):
        env = dict(os.environ)
        if k % 2 == 0:
            env["NUMBA_NUM_THREADS"] = "1"
        res = subprocess.run([sys.executable, "-c", CHILD, str(a.repeats)], capture_output=True, text=True,
                             env=env, timeout=900)
        if res.returncode != 0:
            sys.exit(res.stderr[-2000:])
        for name, bad in json.loads(res.stdout.strip().splitlines()[-1]).items():
            counts[name] = counts.get(name, 0) + int(bad)
    print("| kernel family | processes where repeated calls varied |")
    print("|---|---|")
    for name, c in counts.items():
        print(f"| {name} | {c} of {a.procs} |")


if __name__ == "__main__":
    main()
