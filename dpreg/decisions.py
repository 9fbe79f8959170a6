"""What made each second-order decision of a run: the counters the SOSP
finders fill and the one line ``dpreg run`` prints from them.

An SOSP finder decides from released values (noisy gradients, noisy Hessians):
whether a point is a candidate saddle, whether an escape attempt left it,
when to refresh its running gradient estimate, when to perturb.  Each decision
is counted here by what made it, so that a reader can tell the landscape's
decisions from the privacy noise's:

* escape tests (perturbed-sgd, distributed-spider; Alg 1 of
  perturbed-sgd-adaptive-spider-distributed-sosp.txt) end ``escaped`` (an
  attempt moved ``S`` away while the privacy noise alone could not),
  ``certified`` (no attempt of ``Q`` left: the point is returned as an SOSP
  candidate), ``decided_by_noise`` (an attempt left, but the expected norm of
  the privacy noise in the estimates it followed was at least the escape bar
  ``S / (T_esc eta)``, the gradient norm an attempt needs to move ``S`` in
  ``T_esc`` steps: the noise alone moves it that far) or ``interrupted``
  (records or the step cap ran out during the test);
* O1 refreshes (every SPIDER running sum) by cause: ``start`` (the first
  query), ``drift`` (the drift reached kappa: the paper's switching rule),
  ``cap`` (the public phase cap H, a noise horizon), ``pass_start`` (a new
  pass over the records starts a new sum), ``o2_costlier`` (an O2 batch would
  take more records than a fresh O1 batch);
* perturbations (adaptive-spider; Alg 2 l.9-11 of
  liu-talwar-2024-adaptive-batch-sosp.txt), with how many were dominated by
  the privacy noise already in the estimate (its norm at least the
  perturbation's);
* certificates (the trust-region pair's multiplier test, Alg 1/2 l.7 of
  dp-trust-region.txt: steps whose multiplier was at most sqrt(alpha rho)).

The noise norms are public: a noise multiplier times an enforced sensitivity
times sqrt(d), never a value read off the data; the outcomes are
post-processing of releases.  They live in the record's ``run_info``.
"""
from __future__ import annotations

import math
from collections import Counter

ESCAPE_OUTCOMES = ("escaped", "certified", "decided_by_noise", "interrupted")
REFRESH_CAUSES = ("start", "drift", "cap", "pass_start", "o2_costlier")


def noise_norm(noise_multiplier: float, sensitivity: float, d: int, messages: int = 1) -> float:
    """Expected norm (to within 1/(4d)) of a Gaussian release of ``d``
    coordinates with std ``noise_multiplier x sensitivity`` each, averaged
    over ``messages`` independently noised messages: z s sqrt(d / messages).
    Public: the multiplier is calibrated from the plan, the sensitivity is the
    enforced clip over a public batch size."""
    return float(noise_multiplier) * float(sensitivity) * math.sqrt(d / max(1, int(messages)))


class Decisions:
    """Counters of a run's second-order decisions (see the module docstring)."""

    def __init__(self):
        self.escapes: Counter = Counter()
        self.refreshes: Counter = Counter()
        self.perturbations = 0
        self.perturbations_by_noise = 0
        self.tests = 0
        self.certificates = 0

    def refresh(self, cause: str) -> None:
        if cause not in REFRESH_CAUSES:
            raise ValueError(f"unknown O1 refresh cause {cause!r}")
        self.refreshes[cause] += 1

    def escape_test(self, outcome: str) -> None:
        if outcome not in ESCAPE_OUTCOMES:
            raise ValueError(f"unknown escape-test outcome {outcome!r}")
        self.escapes[outcome] += 1

    def perturbation(self, by_noise: bool) -> None:
        self.perturbations += 1
        self.perturbations_by_noise += int(bool(by_noise))

    def multiplier_test(self, certified: bool) -> None:
        self.tests += 1
        self.certificates += int(bool(certified))

    def escape_dict(self) -> dict:
        d = {k: int(self.escapes[k]) for k in ESCAPE_OUTCOMES}
        d["total"] = sum(d.values())
        return d

    def refresh_dict(self) -> dict:
        d = {k: int(self.refreshes[k]) for k in REFRESH_CAUSES}
        d["total"] = sum(d.values())
        return d


def escape_outcome(escaped: bool, interrupted: bool, noise: float, bar: float) -> str:
    """The outcome of one escape test: ``interrupted``, ``certified`` (no
    attempt left), ``decided_by_noise`` (left while the privacy noise norm was
    at least the escape bar) or ``escaped``."""
    if interrupted:
        return "interrupted"
    if not escaped:
        return "certified"
    return "decided_by_noise" if noise >= bar else "escaped"


def summary_line(dec: dict) -> str | None:
    """The ``dpreg run`` summary's line for a record's ``sosp_decisions``
    (None when there is nothing to show)."""
    if not dec:
        return None
    parts = []
    esc = dec.get("escape_tests")
    if esc is not None:
        parts.append(f"escape tests {esc['total']} (escaped {esc['escaped']}, certified {esc['certified']}, "
                     f"decided by noise {esc['decided_by_noise']}, interrupted {esc['interrupted']})")
    ref = dec.get("o1_refreshes")
    if ref is not None:
        causes = ", ".join(f"{k.replace('_', ' ')} {ref[k]}" for k in REFRESH_CAUSES if k != "start" and
                           (ref[k] or k in ("drift", "cap", "pass_start")))
        parts.append(f"O1 refreshes {ref['total']} ({causes})")
    per = dec.get("perturbations")
    if per is not None:
        parts.append(f"perturbations {per['total']} ({per['decided_by_noise']} smaller than the noise)")
    mt = dec.get("multiplier_tests")
    if mt is not None:
        parts.append(f"multiplier tests {mt['total']} (certified {mt['certified']}"
                     f"{', decided by noise' if mt.get('noise_decides') else ''})")
    if dec.get("possible") is False:
        parts.append("certification not possible at this n, d, eps")
    return "; ".join(parts) if parts else None
