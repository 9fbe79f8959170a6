"""Every example of README.md and docs/*.md runs as written, in a fresh clone.

The examples are read from the documents themselves (tests/doc_examples.py:
every ``dpreg`` command, shell loops around it, README's Python blocks, and
the files the documents show by name), so an edited document is tested as it
stands.  They run in order, document by document, in a copy of the tracked
files with ``../shared`` beside it, as a reader would type them there.  Each
must exit 0 without a traceback; a run must learn (its accuracy above the
majority-class rate, when the record has both) and print no reference of 0
accuracy.  Sizes only are cut where a document's loop repeats a run for
several seeds (:data:`SHORTER`).  Slow: minutes on a busy machine."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import doc_examples

pytestmark = pytest.mark.slow

ROOT = doc_examples.ROOT
SHARED = ROOT.parent / "shared"
EXAMPLES = doc_examples.examples()
#: size-only rewrites of long examples and of the files they read (pattern -> replacement): one seed
#: of a per-seed loop, one replicate per cell of a grid
SHORTER = {r"for s in 0 1 2 3 4;": "for s in 0;", r"(?m)^replicates = \d+": "replicates = 1"}
#: placeholders a run of the same document makes real
SUBSTITUTE = {"<cell>": lambda clone: next((clone / "grid" / "records").glob("*.json")).stem}


def _tracked_files() -> list[str]:
    p = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in p.stdout.split("\0") if f]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh-clone layout: ``base/clone`` holds the tracked files (and the
    files the documents show), ``base/shared`` is the shared data."""
    base = tmp_path_factory.mktemp("fresh")
    dest = base / "clone"
    for f in _tracked_files():
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    if SHARED.exists():
        (base / "shared").symlink_to(SHARED, target_is_directory=True)
    # the README's set-up ends with `dpreg run`, which leaves a run.json (adult's model) behind: the
    # examples must not depend on that name being free
    r = subprocess.run([sys.executable, "-m", "dpreg", "-q", "run", "--algo", "dp-gd", "--param", "steps=3",
                        "--no-diagnostics", "--out", "run.json"], cwd=dest, env=_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    for doc in {e.doc for e in EXAMPLES}:
        for name, text in doc_examples.files(doc).items():
            for pattern, repl in SHORTER.items():
                text = re.sub(pattern, repl, text)
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_text(text)
    return dest


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    return env


def test_the_documents_have_examples():
    kinds = {e.kind for e in EXAMPLES}
    assert {"dpreg", "python"} <= kinds and len(EXAMPLES) >= 15
    assert all(e.skip or "..." not in e.text for e in EXAMPLES)


def _record_of(stdout: str, clone: Path):
    m = re.search(r"^record\s+(\S+)\s*$", stdout, re.M)
    return json.loads((clone / m.group(1)).read_text()) if m else None


def _learned(rec: dict) -> str | None:
    """Why a run's record shows no learning (None when it learned)."""
    diag = rec.get("diagnostics") or {}
    m, b = diag.get("metrics") or {}, diag.get("baselines") or {}
    for split in ("test", "train"):
        acc, major = m.get(f"{split}_accuracy"), b.get(f"{split}_majority_rate")
        if isinstance(acc, float) and isinstance(major, float):
            if acc <= major:
                return f"{split} accuracy {acc:.4f} is not above the majority-class rate {major:.4f}"
            break
    for k in ("nonprivate_test_accuracy", "nonprivate_train_accuracy"):
        if b.get(k) == 0.0:
            return f"{k} is 0 (a reference that is no reference)"
    return None


@pytest.mark.parametrize("ex", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs_as_written(ex, clone):
    if ex.skip and not any(p in ex.text for p in SUBSTITUTE):
        pytest.skip(ex.skip)
    if "../shared" in ex.text and not SHARED.exists():
        pytest.skip(f"{SHARED} not present")
    text = ex.text
    for pattern, repl in SHORTER.items():
        text = re.sub(pattern, repl, text)
    for p, value in SUBSTITUTE.items():
        if p in text:
            text = text.replace(p, value(clone))
    if ex.kind == "python":
        script = clone / f"example_{ex.line}.py"
        script.write_text(text + "\n")
        args = [sys.executable, script.name]
    else:
        args = ["bash", "-e", "-c", text]
    p = subprocess.run(args, cwd=clone, env=_env(), capture_output=True, text=True, timeout=1800)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{ex.id}: exit {p.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    assert "accuracy 0.0000" not in out, out[-3000:]
    if ex.kind == "dpreg" and ex.text.startswith("dpreg run") and "--json" not in ex.text:
        rec = _record_of(p.stdout, clone)
        assert rec is not None, p.stdout[-2000:]
        why = _learned(rec)
        assert why is None, f"{ex.id}: {why}\n{p.stdout[-2000:]}"
