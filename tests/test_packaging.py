"""Packaging: one source for the version, a wheel that carries every module and data file
of the three import packages, and CI's floor constraints equal to the pins' floors."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import dpreg

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: import package -> its folder in the checkout
PACKAGE_ROOTS = {"dpreg": ROOT / "dpreg", "dpreg_kernels": ROOT / "kernels" / "dpreg_kernels",
                 "dpreg_plugins": ROOT / "plugins" / "dpreg_plugins"}


def test_the_version_is_written_once():
    """pyproject reads the version from dpreg/__init__.py; the installed metadata agrees."""
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dpreg.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|(a|b|rc)\d+)?", dpreg.__version__)
    assert metadata.version("dpreg") == dpreg.__version__


def test_floor_constraints_are_the_pins_floors():
    """Every dependency's lower bound is pinned exactly in .ci/floor-constraints.txt, so the
    floor leg of CI tests what pyproject admits (and a raised pin raises the leg)."""
    lines = (ROOT / ".ci" / "floor-constraints.txt").read_text().splitlines()
    floor = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            floor[req.name.lower()] = Version(spec.version)
    pins = {}
    for text in PYPROJECT["project"]["dependencies"]:
        req = Requirement(text)
        lower = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert len(lower) == 1, f"{text}: one lower bound"
        pins[req.name.lower()] = lower[0]
    assert set(floor) == set(pins)
    for name, low in pins.items():
        # the lowest release the pin admits: the same version, or (a yanked x.y.0) its first patch
        major_minor = (low.release + (0, 0))[:2]
        assert floor[name] >= low and floor[name].release[:2] == major_minor, (name, low, floor[name])


@pytest.mark.slow
def test_the_wheel_carries_every_module_and_data_file(tmp_path):
    """A wheel built from a copy of the sources holds every ``.py`` of the three packages, the
    packaged data, ``py.typed``, the console script and the version of ``dpreg.__version__``."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc", "*.egg-info")
    for rel in ("dpreg", "kernels", "plugins"):
        shutil.copytree(ROOT / rel, src / rel, ignore=ignore)
    for rel in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / rel, src / rel)
    out = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = out.glob("dpreg-*.whl")
    assert wheel.name.startswith(f"dpreg-{dpreg.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for pkg, folder in PACKAGE_ROOTS.items():
        for path in folder.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".nbi", ".nbc"):
                expected.add(f"{pkg}/{path.relative_to(folder).as_posix()}")
    assert expected - names == set(), "files of the packages missing from the wheel"
    assert {n for n in names if not n.startswith(("dpreg-", *(p + "/" for p in PACKAGE_ROOTS)))} == set()
    dist_info = f"dpreg-{dpreg.__version__}.dist-info"
    assert "dpreg = dpreg.cli:main" in zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
