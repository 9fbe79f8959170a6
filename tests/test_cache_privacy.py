"""The caches hold copies of private data (a parsed data file, the
non-private optimum) or code numba will unpickle (compiled kernels), so:
directories 0700 and files 0600, created that way; a directory owned by
someone else or open to group/others refused (one warning, cache off), never
adopted or changed; copies of the user's own data kept only on request
(DPREG_DATA_CACHE=1).

The tests run as root here, so they assert on modes and owners, never on an
access being denied (root is never denied)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import warnings

import pytest

from dpreg import PrivacyWarning

OTHER_UID = 54321  # a uid no test process runs as


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def _svm(path, rng, n=60, d=5):
    lines = [f"{1 if rng.random() < .5 else -1} " + " ".join(f"{j + 1}:{rng.normal():.5f}" for j in range(d))
             for _ in range(n)]
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache location, the umask most systems have (022), and no opt-in."""
    monkeypatch.setenv("DPREG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DPREG_DATA_CACHE", raising=False)
    old = os.umask(0o022)
    yield tmp_path / "cache"
    os.umask(old)


def _tree(root):
    """(relative path, mode) of every directory and file under root, root included."""
    out = [(".", _mode(root))]
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            out.append((os.path.relpath(p, root), _mode(p)))
    return out


def _run_with_diagnostics(data, **kw):
    import dpreg

    return dpreg.run(algo="dp-gd", data=data, params={"steps": 3}, warn=False, **kw)


def test_opted_in_copies_are_0600_in_0700_directories(cache, tmp_path, monkeypatch, rng):
    """A 0600 svmlight file through `dpreg run` with the opt-in: its parsed copy
    and its optimum are 0600, every directory 0700, under umask 022 - and no
    chmod ever widened or narrowed a cache path (created with its mode)."""
    monkeypatch.setenv("DPREG_DATA_CACHE", "1")
    f = _svm(tmp_path / "private.svm", rng)
    chmods = []
    real_chmod = os.chmod
    monkeypatch.setattr(os, "chmod", lambda p, *a, **k: (chmods.append(str(p)), real_chmod(p, *a, **k))[1])
    _run_with_diagnostics(str(f), features=5, zero_based=False, labels="-1,1")
    tree = dict(_tree(cache))
    assert {p.split(os.sep)[0] for p in tree} >= {".", "svmlight", "optima"}
    files = {p: m for p, m in tree.items() if os.path.isfile(cache / p)}
    assert any(p.startswith("svmlight") for p in files) and any(p.startswith("optima") for p in files)
    assert all(m == 0o600 for m in files.values()), tree
    assert all(m == 0o700 for p, m in tree.items() if p not in files), tree
    assert not [p for p in chmods if str(cache) in p], chmods


def test_without_the_opt_in_nothing_of_the_users_data_is_kept(cache, tmp_path, rng):
    """Default: the user's file is parsed and its optimum solved in memory
    only; the cache holds nothing derived from it (not even a directory)."""
    f = _svm(tmp_path / "private.svm", rng)
    rec = _run_with_diagnostics(str(f), features=5, zero_based=False, labels="-1,1")
    assert rec["diagnostics"]["baselines"].get("nonprivate_train_loss") is not None  # solved, in memory
    assert not cache.exists()


def test_public_data_sets_are_cached_privately_by_default(cache):
    """A data set that declares itself public (synthetic-*): its optimum is
    kept by default, still 0600 in 0700 directories."""
    _run_with_diagnostics("synthetic-logistic:n=300,d=3")
    tree = _tree(cache)
    files = [(p, m) for p, m in tree if os.path.isfile(cache / p)]
    assert files and all(p.startswith("optima") and m == 0o600 for p, m in files), tree
    assert all(m == 0o700 for p, m in tree if not os.path.isfile(cache / p)), tree


@pytest.mark.parametrize("owner_is_other, mode", [(True, 0o700), (True, 0o777), (False, 0o755), (False, 0o770)])
def test_a_foreign_or_open_cache_directory_is_refused_once(cache, tmp_path, monkeypatch, rng, owner_is_other, mode):
    """A cache directory owned by another user, or open to group/others: one
    PrivacyWarning naming it, the cache off (nothing read or written in it),
    the directory left exactly as it was."""
    if owner_is_other and os.geteuid() != 0:
        pytest.skip("making a directory another user's needs root")
    monkeypatch.setenv("DPREG_DATA_CACHE", "1")
    from dpreg import usercache

    monkeypatch.setattr(usercache, "_warned", set())
    cache.mkdir()
    os.chmod(cache, mode)
    if owner_is_other:
        os.chown(cache, OTHER_UID, OTHER_UID)
    before = os.stat(cache)
    f = _svm(tmp_path / "private.svm", rng)
    from dpreg.svmlight import load_svmlight

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infos = [load_svmlight(str(f))[2] for _ in range(2)]
        _run_with_diagnostics(str(f), features=5, zero_based=False, labels="-1,1")
    mine = [w for w in caught if issubclass(w.category, PrivacyWarning)]
    assert len(mine) == 1 and str(cache) in str(mine[0].message), [str(w.message) for w in caught]
    assert ("owned by uid" if owner_is_other else "open to group/others") in str(mine[0].message)
    assert [i["cache"] for i in infos] == ["off", "off"]
    assert os.listdir(cache) == []
    after = os.stat(cache)
    assert (after.st_uid, after.st_mode) == (before.st_uid, before.st_mode)


def test_write_atomic_private_is_0600_even_with_umask_0(tmp_path):
    from dpreg.results import write_atomic

    old = os.umask(0)
    try:
        write_atomic(str(tmp_path / "entry"), "secret", private=True)
        write_atomic(str(tmp_path / "record.json"), "{}")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "entry") == 0o600
    assert _mode(tmp_path / "record.json") == 0o666  # a record the user writes: their umask decides


def test_private_dir_creates_every_missing_level_0700(tmp_path):
    from dpreg_kernels import private_dir

    old = os.umask(0)
    try:
        assert private_dir(str(tmp_path / "a" / "b" / "c")) is None
    finally:
        os.umask(old)
    assert [_mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3


# ------------------------------------------------------------------ compiled kernels
_FALLBACK = """
import json, os, sys
real = os.access
os.access = lambda p, mode, **kw: (False if mode & os.W_OK and any(r in str(p) for r in ("dpreg_kernels", "dpreg_plugins"))
                                   else real(p, mode, **kw))
import dpreg_kernels
print(json.dumps({"dir": os.environ.get("NUMBA_CACHE_DIR"), "numba": "numba" in sys.modules}))
"""


def _fallback(env_extra, tmp_path):
    """Import dpreg_kernels (not numba) in a fresh process with a read-only
    install: the cache directory chosen, and stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DPREG_CACHE_DIR", "XDG_CACHE_HOME")}
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where HOME should be a directory")
    env.update(HOME=str(blocker / "home"), TMPDIR=str(tmp_path / "tmp"))
    env.update(env_extra)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    res = subprocess.run([sys.executable, "-c", _FALLBACK], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert not out["numba"]
    return out["dir"], res.stderr


def test_kernel_cache_in_tmp_is_a_private_per_user_folder(tmp_path):
    d, err = _fallback({}, tmp_path)
    root = tmp_path / "tmp" / f"dpreg-cache-{os.getuid()}"
    assert d == str(root / "numba")
    assert _mode(root) == _mode(root / "numba") == 0o700 and os.stat(root).st_uid == os.geteuid()
    assert len(err.splitlines()) == 1 and d in err


@pytest.mark.parametrize("owner_is_other, mode", [(True, 0o777), (True, 0o700), (False, 0o777), (False, 0o755)])
def test_kernel_cache_never_adopts_a_folder_someone_else_could_have_planted(tmp_path, owner_is_other, mode):
    """The per-user folder under the shared temporary directory already exists,
    another user's or open to others (planted to feed numba a pickle): it is
    not used and not changed; the kernels go to a fresh private directory of
    the process, removed at exit, said in one line."""
    if owner_is_other and os.geteuid() != 0:
        pytest.skip("making a directory another user's needs root")
    planted = tmp_path / "tmp" / f"dpreg-cache-{os.getuid()}"
    (planted / "numba").mkdir(parents=True)
    for p in (planted, planted / "numba"):
        os.chmod(p, mode)
        if owner_is_other:
            os.chown(p, OTHER_UID, OTHER_UID)
    before = [os.stat(p) for p in (planted, planted / "numba")]
    d, err = _fallback({}, tmp_path)
    assert not d.startswith(str(planted)) and os.path.dirname(d) == str(tmp_path / "tmp")
    assert os.path.basename(d).startswith("dpreg-kernels-")
    assert not os.path.exists(d)  # the process's own directory is gone with it
    lines = err.splitlines()
    assert len(lines) == 1 and str(planted) in lines[0] and "removed at exit" in lines[0], err
    after = [os.stat(p) for p in (planted, planted / "numba")]
    assert [(s.st_uid, s.st_mode) for s in after] == [(s.st_uid, s.st_mode) for s in before]
    assert os.listdir(planted / "numba") == []


def test_kernel_cache_skips_an_open_user_directory_for_the_next_private_one(tmp_path):
    """$DPREG_CACHE_DIR left at 0755: skipped (not changed); $XDG_CACHE_HOME/dpreg,
    created 0700, is used silently."""
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    d, err = _fallback({"DPREG_CACHE_DIR": str(open_dir), "XDG_CACHE_HOME": str(tmp_path / "xdg")}, tmp_path)
    assert d == str(tmp_path / "xdg" / "dpreg" / "numba") and err == ""
    assert _mode(tmp_path / "xdg" / "dpreg") == 0o700 and _mode(open_dir) == 0o755
    assert not (open_dir / "numba").exists()
