"""A real Ctrl-C in the middle of a run: ``dpreg run`` on synthetic data with
far more steps than it can finish, sent SIGINT a moment after it starts, exits
with status 130, one line on stderr, no traceback and no output file."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.slow
def test_sigint_during_a_run_exits_130_with_one_line_and_no_file(tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.Popen([sys.executable, "-m", "dpreg.cli", "run", "--algo", "dp-gd", "--param", "steps=200000",
                          "--data", "synthetic-logistic:n=20000,d=10", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env=dict(os.environ, NUMBA_NUM_THREADS="1"))
    time.sleep(4.0)  # past start-up (imports, plugin loading): inside the run
    assert p.poll() is None, p.communicate()[1]
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("the run did not stop within 60 s of SIGINT")
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("interrupted"), err
    assert not out.exists()
