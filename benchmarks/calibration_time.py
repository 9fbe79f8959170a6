"""Wall time of the noise calibration in a fresh process: the Python form of
``dpreg run --algo dp-sgd --loss logistic --data ijcnn1.trn.bz2 --features 22
--one-based --epsilon 1 --seed 0``, with ``Accountant.calibrate`` timed.

    NUMBA_NUM_THREADS=1 python benchmarks/calibration_time.py

Another version of dpreg runs in the same conditions from a worktree of its commit
(``git worktree add --detach /tmp/old <commit>``) put first on the path:
``PYTHONPATH=/tmp/old/kernels:/tmp/old:/tmp/old/plugins python benchmarks/calibration_time.py``.
Prints one line: calibration, run phase, data, compile/load seconds, the spent epsilon
and the multiplier.
"""
import time

import dpreg
from dpreg import accounting

from bench_end_to_end import IJCNN1

_tot = {"s": 0.0, "depth": 0}


def _timed(f):
    def calibrate(self, *a, **k):
        _tot["depth"] += 1
        t = time.perf_counter()
        try:
            return f(self, *a, **k)
        finally:
            _tot["depth"] -= 1
            if _tot["depth"] == 0:  # nested calibrations (PLD's RDP bracket, views) once
                _tot["s"] += time.perf_counter() - t
    return calibrate


_todo = [accounting.Accountant]
while _todo:  # every class that defines its own calibrate
    _cls = _todo.pop()
    _todo.extend(_cls.__subclasses__())
    if "calibrate" in vars(_cls):
        _cls.calibrate = _timed(vars(_cls)["calibrate"])

if __name__ == "__main__":
    rec = dpreg.run(algo="dp-sgd", loss="logistic", data=str(IJCNN1), features=22, zero_based=False,
                    epsilon=1.0, seed=0)
    tm = rec["diagnostics"]["timing"]
    print(f"{dpreg.__file__}: calibrate_s={_tot['s']:.3f} "
          f"run_s={tm['run_s']:.3f} data_s={tm['data_s']:.3f} compile_s={tm['compile_s']:.3f} "
          f"eps_spent={rec['diagnostics']['privacy']['epsilon_spent']:.9f} "
          f"z={rec['diagnostics']['run_info']['noise_multiplier']!r}")
