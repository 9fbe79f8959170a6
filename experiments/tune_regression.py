"""The regression losses' practical clip (``REGRESSION_CLIP`` in
``dpreg_plugins.losses.linear``), chosen on training data: dp-sgd's training
R^2 for the clip at the worst-case G and below, on diabetes' training split
(the pipeline's ``--test-fraction 0.2`` split; the test rows are not looked
at) and on the synthetic planted linear model, seeds 0-2.

    python experiments/tune_regression.py [--eps 1] [--loss squared]
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--loss", default="squared")
    ap.add_argument("--algo", default="dp-sgd")
    ap.add_argument("--tiny", action="store_true", help="smoke run: diabetes, two clips, one seed")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import dpreg
    from dpreg.registry import get_registry

    # the worst-case G at the row bound sqrt(1 + 0.5^2) of the intercept column
    worst = get_registry().get("loss", a.loss).worst_case_constants()[0] * (1.25 ** 0.5)
    sets = ("diabetes",) if a.tiny else ("diabetes", "synthetic-regression:n=2000,d=10",
                                         "synthetic-regression:n=20000,d=20")
    for data in sets:
        for clip in ((worst, 0.5) if a.tiny else (worst, 1.0, 0.5, 0.25)):
            r2 = [dpreg.run(algo=a.algo, loss=a.loss, data=data, epsilon=a.eps, seed=s,
                            test_fraction=0.2 if data == "diabetes" else None, params={"clip": clip},
                            )["diagnostics"]["metrics"]["train_r2"] for s in range(1 if a.tiny else 3)]
            print(f"{data:36s} clip {clip:.3g}: train R^2 {np.round(r2, 3)} mean {np.mean(r2):.3f}", flush=True)


if __name__ == "__main__":
    main()
