"""Issue 11's done-means counts on the built-in adult at eps = 1, defaults,
research seeds 0-4: escape tests per perturbed-sgd run, O1 refreshes per
adaptive-spider (tree) run, with test accuracy and training |grad F|
(distributed-spider's accuracy too).  Non-private diagnostics.

    NUMBA_NUM_THREADS=1 python benchmarks/sosp_counts.py
"""
import numpy as np

import dpreg


def main(seeds=range(5)):
    for algo, key in (("perturbed-sgd", "escape_tests"), ("adaptive-spider", "o1_refreshes"),
                      ("distributed-spider", None)):
        cnt, acc, g = [], [], []
        for s in seeds:
            d = dpreg.run(algo=algo, epsilon=1.0, seed=s, warn=False)["diagnostics"]
            if key:
                cnt.append(d["run_info"][key])
            acc.append(d["metrics"]["test_accuracy"])
            g.append(d["metrics"]["train_grad_norm"])
        print(f"{algo}: {key or ''} {cnt if key else ''} test accuracy {[round(a, 4) for a in acc]} "
              f"(mean {np.mean(acc):.4f}), mean train |grad F| {np.mean(g):.4f}", flush=True)


if __name__ == "__main__":
    main()
