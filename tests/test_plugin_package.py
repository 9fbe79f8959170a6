"""A real third-party plugin package (tests/plugin_pkg, distribution
``dpreg-huber``) is pip-installed into a temporary directory and found through
the ``dpreg`` entry-point group: its loss is listed, runs, passes the public
loss contract, and its command is added to the CLI."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).parent / "plugin_pkg"


@pytest.fixture(scope="module")
def plugin_src(tmp_path_factory):
    """A copy of the package to build from (pip builds in the source tree: build/, *.egg-info)."""
    import shutil

    src = tmp_path_factory.mktemp("src") / "plugin_pkg"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return src


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory, plugin_src):
    target = tmp_path_factory.mktemp("site")
    base = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(plugin_src)]
    r = subprocess.run(base + ["--no-build-isolation"], capture_output=True, text=True)
    if r.returncode != 0:  # no setuptools in this environment: let pip fetch it
        r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = dict(os.environ)
    env["PYTHONPATH"] = str(target) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("DPREG_DISABLE_PLUGIN_AUTOLOAD", None)
    return env


def _dpreg(env, *args):
    return subprocess.run([sys.executable, "-m", "dpreg.cli", *args], capture_output=True, text=True, env=env)


def test_third_party_loss_is_listed_with_its_package(plugin_env):
    r = _dpreg(plugin_env, "list", "loss", "--json")
    assert r.returncode == 0, r.stderr
    rows = {e["name"]: e for e in json.loads(r.stdout)}
    assert rows["huber-hinge"]["package"] == "dpreg-huber"
    assert rows["huber-hinge"]["version"] == "0.1.0"
    assert rows["huber-hinge"]["provider"] == "huber"  # the package's entry-point name
    assert rows["huber"]["package"] == "dpreg"  # the built-in regression loss
    assert rows["logistic"]["package"] == "dpreg"


def test_third_party_loss_runs(plugin_env, tmp_path):
    out = tmp_path / "huber.json"
    r = _dpreg(plugin_env, "run", "--algo", "dp-gd", "--loss", "huber-hinge", "--data",
               "synthetic-logistic:n=400,d=5", "--epsilon", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    assert rec["diagnostics"]["problem"]["loss"] == "huber-hinge"
    assert rec["diagnostics"]["privacy"]["epsilon_spent"] <= 2.0


def test_third_party_command_is_added(plugin_env):
    r = _dpreg(plugin_env, "huber-hello")
    assert r.returncode == 0 and r.stdout.strip() == "hello from dpreg-huber"


def test_autoload_can_be_disabled(plugin_env):
    env = dict(plugin_env, DPREG_DISABLE_PLUGIN_AUTOLOAD="1")
    r = _dpreg(env, "list", "loss", "--json")
    assert r.returncode == 0
    assert "huber-hinge" not in {e["name"] for e in json.loads(r.stdout)}


def test_third_party_loss_passes_the_public_contract(plugin_env, plugin_src):
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(plugin_src / "tests" / "test_huber_contract.py")],
                       capture_output=True, text=True, env=plugin_env, cwd=str(plugin_src))
    assert r.returncode == 0, r.stdout[-2000:]
    assert "8 passed" in r.stdout
