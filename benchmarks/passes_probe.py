"""What several passes would give an algorithm that makes one: E warm-started
single-pass runs on IJCNN1 (logistic-nonconvex-reg, the pipeline's prepared
problem), each at the per-pass budget (eps_E, delta/E) for which E Gaussian
releases compose (RDP) to eps = 1, reporting the optimality gap F^(w) - F^*
and its ratio to dp-sgd's 0.02445 (docs/models-learn.md).  A proxy, not a
method: the split of the budget is the Gaussian one (each pass's own
calibration at eps_E), each pass restarts the algorithm's state from the
previous output, and the figures are on IJCNN1's training objective (the
data the targets of issue 12 are measured on, seeds 0-2 here as there).  It
told which algorithms a ``passes`` parameter would serve (eleventh session,
docs/models-learn.md).

    NUMBA_NUM_THREADS=1 python benchmarks/passes_probe.py zo-o2nc 1,2,4,8 [--seeds 3] [--param k=v ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import dpreg
import dpreg.pipeline as P
from dpreg.params import bind
from dpreg.registry import get_registry

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ijcnn1.trn.bz2"
DPSGD_GAP = 0.02445


def per_pass_epsilon(E: int, delta: float, eps: float = 1.0) -> float:
    """epsilon of one Gaussian release whose E-fold RDP composition is (eps, delta)."""
    from dp_accounting import GaussianDpEvent, SelfComposedDpEvent
    from dp_accounting.rdp import RdpAccountant

    def eps_of(z, k):
        a = RdpAccountant()
        a.compose(SelfComposedDpEvent(GaussianDpEvent(z), k))
        return a.get_epsilon(delta)

    lo, hi = 0.1, 1000.0
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if eps_of(mid, E) > eps else (lo, mid)
    return eps_of(hi, 1)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    algo, Es = args[0], [int(e) for e in args[1].split(",")]
    seeds = int(argv[argv.index("--seeds") + 1]) if "--seeds" in argv else 3
    given = [argv[i + 1] for i, a in enumerate(argv) if a == "--param"]
    captured = {}
    diag = P._diagnostics

    def keep(cfg, problem, *a, **k):
        captured["problem"] = problem
        return diag(cfg, problem, *a, **k)

    P._diagnostics = keep
    rec = dpreg.run(algo="dp-sgd", loss="logistic-nonconvex-reg", data=str(DATA), features=22, zero_based=False,
                    epsilon=1.0, seed=0, warn=False)
    P._diagnostics = diag
    pb, f_star = captured["problem"], rec["diagnostics"]["baselines"]["nonprivate_train_loss"]
    delta = rec["release"]["privacy"]["delta"]
    reg = get_registry()
    cls = reg.get("algorithm", algo)
    noise = reg.get("noise", cls.default_noise or "tree") if cls.uses_noise else None
    params = dict(p.split("=", 1) for p in given)
    for E in Es:
        eps_pass = 1.0 if E == 1 else per_pass_epsilon(E, delta)
        gaps = []
        for s in range(seeds):
            w = None
            for e in range(E):
                bound = bind(cls.params, params, algo)
                acc = reg.get("accountant", "rdp")(eps_pass, delta / E, cls.relation_for(bound))
                a = cls(pb, bound, noise=noise, accountant=acc, seed=1000 * s + e)
                if w is not None:
                    a.init = w
                w = a.run().w
            gaps.append(float(pb.value(w)) - f_star)
        g = float(np.mean(gaps))
        print(f"{algo} passes {E}: eps per pass {eps_pass:.3f}, gap {g:.5f} ({g / DPSGD_GAP:.2f}x dp-sgd) "
              f"{[round(x, 4) for x in gaps]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
