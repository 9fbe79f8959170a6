"""Where the first run's biggest compile goes: the serial clipped-sum kernel
(``Problem``'s O1/O2 kernel, most of the default run's compile,
``compile_events.py``) and the helpers it calls, per numba pass (type
inference, which includes compiling the callees; lowering, which includes
LLVM) and per LLVM stage of each function's library (function passes, the
module passes on the library's final module with its callees linked in, and
"Finalize object": machine code).

    rm -rf /tmp/nc && NUMBA_LLVM_PASS_TIMINGS=1 NUMBA_CACHE_DIR=/tmp/nc python benchmarks/compile_parts.py
    rm -rf /tmp/nc && NUMBA_CACHE_DIR=/tmp/nc python benchmarks/compile_parts.py --parallel

(``--parallel``: then the parallel variant's compile, which a long run makes once it wants it,
``dpreg_kernels.config.PARALLEL_AMORTIZE_S``; the helpers are then already compiled.)

Run it on an empty cache (numba records nothing for code it loads) and with
``NUMBA_LLVM_PASS_TIMINGS=1`` (else the LLVM columns are empty).  Seconds are
numba's own records (wall time of each pass, in one thread).  A helper called
only from kernels (``jit_inline``: no Python or C entry point) is optimised and
compiled to machine code in its own library by numba, and its IR is linked into
each caller and optimised there again; the last line sums what the helpers' own
libraries spend on module passes and machine code.
"""
from __future__ import annotations

import sys
import time

import numpy as np


def main() -> None:
    from dpreg.problem import Problem
    from dpreg.registry import get_registry
    from dpreg_kernels import linear_model as L

    rng = np.random.default_rng(0)
    X = rng.standard_normal((1000, 22))
    y = np.where(rng.random(1000) < 0.5, -1.0, 1.0)
    pb = Problem(get_registry().get("loss", "logistic"), X, y)  # the loss's functions and row norms first
    t = time.process_time()
    pb._k.clipped_sum.fast(False)
    print(f"serial clipped sum: {time.process_time() - t:.2f} s of CPU to compile (callees included)\n")
    print("| function | type inference (s) | lowering (s) | LLVM function passes (s) | LLVM module passes (s) "
          "| machine code (s) |")
    print("|---|---|---|---|---|---|")
    rows = [("_clipped_sum (serial)", pb._k.clipped_sum._disp[False])]
    rows += [(name, getattr(L, name)) for name in ("_chunk", "_margins", "_stage_finish", "_accumulate_kept",
                                                    "_psi_term", "_reduce_parts")]
    code = 0.0
    for name, disp in rows:
        for ov in disp.overloads.values():
            passes = ov.metadata.get("pipeline_times", {}).get("nopython", {})

            def stage(word):
                return sum(v.init + v.run + v.finalize for k, v in passes.items() if word in k)

            fn = mod = obj = 0.0
            for rec in ov.metadata.get("llvm_pass_timings") or ():
                s = rec.timings.get_total_time()
                if rec.name.startswith("Function passes"):
                    fn += s
                elif rec.name.startswith("Module passes"):
                    mod += s
                elif rec.name.startswith("Finalize object"):
                    obj += s
            if name != rows[0][0]:
                code += mod + obj
            print(f"| {name} | {stage('type_inference'):.2f} | {stage('lowering'):.2f} | {fn:.3f} | {mod:.3f} "
                  f"| {obj:.3f} |")
    print(f"\nmodule passes and machine code of the helpers' own libraries (callers link their IR): {code:.2f} s")
    if "--parallel" in sys.argv[1:]:
        t = time.process_time()
        pb._k.clipped_sum.fast(True)
        print(f"\nparallel clipped sum, after the serial one: {time.process_time() - t:.2f} s of CPU to compile")


if __name__ == "__main__":
    main()
