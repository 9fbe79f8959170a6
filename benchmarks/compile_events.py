"""Which functions a `dpreg` command compiles, with CPU seconds each (numba's
``numba:compile`` events, which fire on cache misses only; nested compiles are
included in their caller's time and printed indented below it).

    rm -rf /tmp/nc && NUMBA_CACHE_DIR=/tmp/nc /usr/bin/time python benchmarks/compile_events.py run --seed 0
"""
import os
import sys
import time

from numba.core import event as ev


class Recorder(ev.Listener):
    """(depth, function, CPU seconds) of every compile, innermost first."""

    def __init__(self):
        self.stack, self.out = [], []

    def on_start(self, e):
        self.stack.append(time.process_time())

    def on_end(self, e):
        t0 = self.stack.pop()
        d = e.data.get("dispatcher")
        name = getattr(getattr(d, "py_func", None), "__qualname__", str(d))
        self.out.append((len(self.stack), name, time.process_time() - t0))


if __name__ == "__main__":
    rec = Recorder()
    ev.register("numba:compile", rec)
    t0 = time.process_time()
    from dpreg.cli import main

    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
    top = sum(t for depth, _, t in rec.out if depth == 0)
    print(f"process CPU {time.process_time() - t0:.2f} s; top-level compile CPU {top:.2f} s")
    for depth, name, t in rec.out:
        print("  " * depth + f"{name} {t:.2f}")
    import dpreg_kernels.linear_model as K

    print("serial CPU s where parallel was wanted:",
          {n: round(getattr(K, n).serial_large_s, 3)
           for n in ("grad_sum", "diff_sum", "row_sqnorms", "phi_sum", "clipped_hessian_sum")})
