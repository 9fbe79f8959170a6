"""Wall time of the noise calibration in a fresh process: the Python form of
``dpreg run --algo dp-sgd --loss logistic --data ijcnn1.trn.bz2 --features 22
--one-based --epsilon 1 --seed 0``, with ``Accountant.calibrate`` timed.

    NUMBA_NUM_THREADS=1 python benchmarks/calibration_time.py
    OLD_ACCOUNTING=/path/to/old/accounting.py python benchmarks/calibration_time.py

``OLD_ACCOUNTING`` loads another version of ``dpreg/accounting.py`` in its
place (e.g. ``git show <commit>:dpreg/accounting.py > old.py``): before/after
in the same conditions.  Prints one line: calibration, run phase, data,
compile/load seconds, the spent epsilon and the multiplier.
"""
import os
import sys
import time

import dpreg

if os.environ.get("OLD_ACCOUNTING"):
    import importlib.util

    import dpreg.errors  # noqa: F401 (the module's relative imports)

    spec = importlib.util.spec_from_file_location("dpreg.accounting", os.environ["OLD_ACCOUNTING"])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["dpreg.accounting"] = mod
    spec.loader.exec_module(mod)
    dpreg.accounting = mod
from dpreg import accounting  # noqa: E402

from bench_end_to_end import IJCNN1  # noqa: E402

_tot = {"s": 0.0, "depth": 0}


def _timed(f):
    def calibrate(self, *a, **k):
        _tot["depth"] += 1
        t = time.perf_counter()
        try:
            return f(self, *a, **k)
        finally:
            _tot["depth"] -= 1
            if _tot["depth"] == 0:  # nested calibrations (search stand-in, PLD's RDP bracket, views) once
                _tot["s"] += time.perf_counter() - t
    return calibrate


for _cls in list(vars(accounting).values()):  # every class that defines its own calibrate
    if isinstance(_cls, type) and issubclass(_cls, accounting.Accountant) and "calibrate" in vars(_cls):
        _cls.calibrate = _timed(vars(_cls)["calibrate"])

if __name__ == "__main__":
    rec = dpreg.run(algo="dp-sgd", loss="logistic", data=str(IJCNN1), features=22, zero_based=False,
                    epsilon=1.0, seed=0)
    tm = rec["diagnostics"]["timing"]
    print(("old" if os.environ.get("OLD_ACCOUNTING") else "new") + f" accounting: calibrate_s={_tot['s']:.3f} "
          f"run_s={tm['run_s']:.3f} data_s={tm['data_s']:.3f} compile_s={tm['compile_s']:.3f} "
          f"eps_spent={rec['diagnostics']['privacy']['epsilon_spent']:.9f} "
          f"z={rec['diagnostics']['run_info']['noise_multiplier']!r}")
