"""The svmlight -> .npz cache of the real data sets (IJCNN1, a9a) that the
experiment scripts share (``experiments/experiment_noise.py``).

The SPIDER-family page, docs/experiments-sosp.md, is rendered from a
``dpreg sweep`` results table::

    dpreg sweep experiments/sweeps/sosp.toml --out-dir /tmp/dpreg-bench/sosp
    cp /tmp/dpreg-bench/sosp/results.json experiments/results/experiments-sosp.json   # the committed runs
    python experiments/render_pages.py sosp experiments/results/experiments-sosp.json > docs/experiments-sosp.md

The .npz copies go to ``$DPREG_BENCH_DIR`` (default ``/tmp/dpreg-bench``),
outside the repository.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DATASETS = {  # name: (train file, test file)
    "ijcnn1": ("ijcnn1.trn.bz2", "ijcnn1.tst.bz2"),
    "a9a": ("adult.trn.bz2", "adult.tst.bz2"),
}


def bench_dir() -> Path:
    p = Path(os.environ.get("DPREG_BENCH_DIR", "/tmp/dpreg-bench"))
    p.mkdir(parents=True, exist_ok=True)
    return p


def cached_npz(fname: str, n_features: int | None = None) -> tuple[str, int]:
    """Path of an .npz copy of ``../shared/data/fname`` in the bench dir
    (parsed once; the repository never holds data) and its feature count."""
    src = SHARED / fname
    if not src.exists():
        raise SystemExit(f"{src} not found (real data lives in ../shared/data beside the checkout)")
    dst = bench_dir() / (fname.replace(".bz2", "") + (f".d{n_features}" if n_features else "") + ".npz")
    if not dst.exists():
        from dpreg.data import load_file

        X, y = load_file(str(src), n_features=n_features)
        X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
        tmp = dst.with_suffix(".tmp.npz")
        np.savez(tmp, X=X, y=y)
        os.replace(tmp, dst)
    with np.load(dst) as z:
        d = z["X"].shape[1]
    return str(dst), d


def data_paths(name: str) -> tuple[str, str]:
    trn, tst = DATASETS[name]
    train, d = cached_npz(trn)
    test, _ = cached_npz(tst, n_features=d)
    return train, test
