"""``distributed-selection``: distributed private model selection (Algorithm 4
of perturbed-sgd-adaptive-spider-distributed-sosp.txt), the AboveThreshold-style
alpha-SOSP test when the data is split over m untrusted-by-each-other clients.

For each candidate x_t (t <= T'), every client j releases from its *selection
share* S_j (n_s fresh records, disjoint from the training records):

* its clipped mean gradient + N(0, sigma_g^2 I), sigma_g = z f C / n_s, and
* its clipped mean Hessian (each record's rank-one data part scaled to norm
  <= M, so Frobenius sensitivity f M / n_s) + a symmetric Gaussian matrix whose
  upper triangle (with the diagonal) is iid N(0, sigma_h^2), sigma_h = z f M / n_s;

f = 2 under replace-one, 1 under add-remove.  The server averages and returns
the first x_t with

    |grad F(x_t)| <= alpha + C log(8d/w)/sqrt(m n_s) + sigma_g sqrt(d log(16/w))/sqrt(m)
    lambda_min(H(x_t)) >= -(sqrt(rho alpha) + M sqrt(log(8d/w)/(m n_s)) + sigma_h sqrt(d log(32/w))/sqrt(m))

(Alg 4 line 7 with the paper's G sqrt(T' log(1/delta))/(n eps) and
M sqrt(d T' log(1/delta))/(n eps) replaced by the calibrated per-client noise
stds sigma_g and sigma_h they stand for; w = omega').  The paper's theta_{i,t},
"client i" and sqrt(mn eps) are typos (eq. 97 and 100); this follows the
derivation, as ../shared/specs/remaining-seeds.md (c) does.

Accounting per client: ``Composed([SelfComposed(Gaussian(z), T'),
SelfComposed(Gaussian(z), T')])`` charged to the client's own accountant,
group "selection", before anything is computed; z is the smallest multiplier
whose event fits (epsilon, delta) on an empty accountant of the run's kind (the
selection share is disjoint from the training records: parallel composition,
so the selection gets the whole budget).  The run's accountant is charged the
same event (group "selection") before the clients are asked, so it keeps
reporting the worst client's epsilon.

Remark 3: the selection error stays below alpha only if
d <= min{(sqrt(m) n eps)^2, (sqrt(m) n eps)^(6/13)}; :func:`remark3_bound`
gives the bound, and the result's info says whether it holds.
Communication: d + d(d+1)/2 floats per client per candidate.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import composed, gaussian_event, self_composed
from dpreg.errors import ParameterError
from dpreg.interfaces import Participation, Selector, charge
from dpreg.params import ParamSpec

from .private_selection import DENSE_MAX_D, Selection


def selection_event(z: float, candidates: int):
    """One client's exposure: T' gradient and T' Hessian releases at multiplier z."""
    return composed([self_composed(gaussian_event(z), candidates), self_composed(gaussian_event(z), candidates)])


def remark3_bound(m: int, n: int, eps: float) -> float:
    """Remark 3's largest dimension for which selection is harmless:
    min{(sqrt(m) n eps)^2, (sqrt(m) n eps)^(6/13)} (n records per client)."""
    a = math.sqrt(m) * n * eps
    return min(a ** 2, a ** (6 / 13))


class DistributedSelection(Selector):
    """Alg 4: clients release noisy gradients and Hessians of the candidates on fresh
    selection shares; the server returns the first averaged alpha-SOSP."""

    name = "distributed-selection"
    summary = ("distributed private model selection (Alg 4): every client perturbs its gradient and Hessian "
               "on a fresh selection share; first averaged alpha-SOSP ((eps, delta) per client)")
    params = (
        ParamSpec("alpha", "float", None, "target alpha of the test", "Alg 4 line 7", low=0, low_open=True),
        ParamSpec("omega", "float", 0.1, "failure probability omega'", "Thm 4", low=0, low_open=True, high=1),
        ParamSpec("grad_clip", "float", None, "per-record gradient clip C", "C = G (declared Lipschitz)",
                  low=0, low_open=True),
        ParamSpec("hess_clip", "float", None, "per-record Hessian norm clip M", "M (declared smoothness)",
                  low=0, low_open=True),
    )

    def __init__(self, problem, *, accountant, omega: float = 0.1, grad_clip: float | None = None,
                 hess_clip: float | None = None, rng=None):
        if rng is not None:  # built by the pipeline's --select, which holds no clients
            raise ParameterError("distributed-selection needs the clients' selection shares: use "
                                 "--algo distributed-spider --param select=distributed-selection")
        G, M, rho = problem.constants()
        if problem.d > DENSE_MAX_D:
            raise ParameterError(f"distributed-selection releases d x d Hessians: d <= {DENSE_MAX_D}, "
                                 f"got d = {problem.d}")
        self.problem = problem
        self.accountant = accountant
        self.omega = float(omega)
        self.C = float(grad_clip if grad_clip is not None else G)
        self.M = float(hess_clip if hess_clip is not None else M)
        self.rho = float(rho)
        if not (0 < self.omega <= 1 and self.C > 0 and self.M > 0):
            raise ParameterError("omega must be in (0, 1], grad_clip and hess_clip > 0")

    def calibrate(self, candidates: int) -> float:
        """Smallest z for which one client's selection event fits (epsilon, delta) on its own."""
        acc = self.accountant.fresh(self.accountant.epsilon_budget, self.accountant.delta)
        return acc.calibrate(lambda z: selection_event(z, candidates), what="selection noise multiplier")

    def thresholds(self, *, alpha: float, m: int, n_s: int, z: float) -> tuple[float, float]:
        """(gradient-norm bound, lambda_min lower bound) of the test (module docstring)."""
        d, w = self.problem.d, self.omega
        f = self.accountant.sensitivity_factor
        sg, sh = z * f * self.C / n_s, z * f * self.M / n_s
        g_tol = alpha + self.C * math.log(8 * d / w) / math.sqrt(m * n_s) + sg * math.sqrt(d * math.log(16 / w) / m)
        h_tol = (math.sqrt(self.rho * alpha) + self.M * math.sqrt(math.log(8 * d / w) / (m * n_s))
                 + sh * math.sqrt(d * math.log(32 / w) / m))
        return g_tol, -h_tol

    def select(self, backend, candidates: Sequence[np.ndarray], *, alpha: float) -> Selection:
        """Run Alg 4 with the clients of ``backend`` (each built with a selection
        share) over ``candidates``; index None when no candidate passes."""
        if not (alpha > 0 and math.isfinite(alpha)):
            raise ParameterError(f"alpha must be a finite number > 0, got {alpha!r}")
        W = np.stack([np.asarray(c, dtype=float) for c in candidates])
        K, d = W.shape
        st = backend.call("status")
        sizes = [s["selection_records"] for s in st]
        if min(sizes) < 1:
            raise ParameterError("distributed-selection needs a selection share on every client")
        m, n_s = len(sizes), min(sizes)
        z = self.calibrate(K)
        event = selection_event(z, K)
        charge(self.accountant, event, Participation.disjoint("selection"), label="distributed selection")
        msgs = backend.call("selection_release", W, z, z, self.C, self.M)
        grads = sum(g for g, _ in msgs) / m
        packed = sum(h for _, h in msgs) / m
        iu = np.triu_indices(d)
        g_tol, l_tol = self.thresholds(alpha=alpha, m=m, n_s=n_s, z=z)
        gnorm, lmin = [], []
        index = None
        for k in range(K):
            H = np.zeros((d, d))
            H[iu] = packed[k]
            H = H + np.triu(H, 1).T
            gnorm.append(float(np.linalg.norm(grads[k])))
            lmin.append(float(np.linalg.eigvalsh(H)[0]))
            if index is None and gnorm[-1] <= g_tol and lmin[-1] >= l_tol:
                index = k
        n_client = min(s["records"] + s["selection_records"] for s in st)
        eps = self.accountant.epsilon_budget
        bound = remark3_bound(m, n_client, eps)
        info = {"candidates": K, "noise_multiplier": z, "grad_threshold": g_tol, "lambda_threshold": l_tol,
                "noisy_grad_norms": gnorm, "noisy_lambda_min": lmin, "selection_records_min": n_s,
                "remark3_dimension_bound": bound, "remark3_holds": bool(d <= bound),
                "floats_up_per_client": K * (d + d * (d + 1) // 2)}
        return Selection(index, None if index is None else W[index].copy(), eps, info)


@hookimpl
def dpreg_register_selectors(register):
    register(DistributedSelection.name, DistributedSelection, summary=DistributedSelection.summary)
