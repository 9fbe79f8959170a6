"""dpreg.dp_accounting_names: dp-accounting's names without the package's heavy
__init__, and the package whole for everyone else.  Each check runs in a fresh
interpreter (the test process has usually imported dp_accounting already)."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_an_rdp_run_imports_no_pld_and_no_scipy_signal():
    out = _run("""
        import sys
        from dpreg.registry import get_registry
        acc = get_registry().get("accountant", "rdp")(10.0, 1e-5, "add-remove")
        from dpreg.accounting import gaussian_event, poisson_sampled, self_composed
        acc.charge(self_composed(poisson_sampled(0.01, gaussian_event(1.1)), 1000))
        print(acc.epsilon_spent)
        print(sorted(m for m in sys.modules if m.startswith(("dp_accounting.pld", "scipy.signal", "scipy.stats",
                                                             "dp_accounting.mechanism_calibration"))))
        # the same composition through the whole package's own RDP accountant
        import dp_accounting as d
        ref = d.rdp.RdpAccountant()
        ref.compose(d.PoissonSampledDpEvent(0.01, d.GaussianDpEvent(1.1)), 1000)
        print(ref.get_epsilon(1e-5))
    """).split("\n")
    assert out[1] == "[]", out[1]
    assert abs(float(out[0]) - float(out[2])) <= 1e-9 * float(out[2]), out


def test_the_package_stays_whole_for_other_users():
    out = _run("""
        from dpreg.accounting import _dpa
        names = _dpa()
        names.GaussianDpEvent, names.rdp.RdpAccountant   # the light import
        import dp_accounting
        assert dp_accounting.GaussianDpEvent is names.GaussianDpEvent
        print(dp_accounting.get_sigma_gaussian(1.0, 1e-5) > 0)          # a name only the __init__ defines
        print(callable(dp_accounting.calibrate_dp_mechanism))
        print(dp_accounting.pld.PLDAccountant.__name__)                 # a sub-package not imported yet
        print("DpEventBuilder" in dir(dp_accounting))                   # completed by the first such access
        try:
            dp_accounting.no_such_name
        except AttributeError as e:
            print("AttributeError", e)
        ns = {}
        exec("from dp_accounting import *", ns)
        print("LaplaceDpEvent" in ns)
    """).split("\n")
    assert out[:5] == ["True", "True", "PLDAccountant", "True",
                       "AttributeError module 'dp_accounting' has no attribute 'no_such_name'"], out
    assert out[5] == "True", out


def test_an_already_imported_package_is_used_as_it_is():
    out = _run("""
        import dp_accounting
        from dpreg.accounting import _dpa
        print(_dpa().GaussianDpEvent is dp_accounting.GaussianDpEvent, _dpa().pld is dp_accounting.pld)
    """)
    assert out.split() == ["True", "True"]
