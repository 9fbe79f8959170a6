"""``dp-trust-region`` (DP-TR, Alg 1) and ``dp-stochastic-trust-region``
(DP-STR, Alg 2) of dp-trust-region.txt, and :func:`reference_minimum`, the
non-private trust-region reference for L* of the paper's section 5.

Each step releases a noisy gradient g~ and a noisy Hessian H~ at w_k, solves
the trust-region subproblem min <g~,h> + 1/2 h^T H~ h over |h| <= r exactly
(:mod:`.trs_solver`: a dense eigendecomposition while the dense Hessian is
cheap, else the matrix-free Krylov solver on H~'s factored form - the data
part's clipped rank-one terms plus the same symmetric noise matrix - which
releases the same H~ and solves to a KKT residual of 1e-8; ``trs``), moves w_{k+1} = w_k + h and stops as soon as the
subproblem's multiplier lam <= sqrt(alpha rho) (Alg 1/2 l.7: post-processing
of released values).  Defaults (Thm 15 / Thm 18, section 5.1): alpha = 0.1,
w_0 = 0, r = sqrt(alpha/rho), T = ceil(6 sqrt(rho) Delta / alpha^1.5) with
Delta bounded by the data-independent f(0; z) = max_y phi(0, y) + psi(0)
(log 2 for logistic, 1/2 for sigmoid losses).

Releases (sensitivities enforced by clipping in the kernels):

* gradient: mean of per-record gradients clipped to C (default G) plus
  N(0, sigma_g^2 I); l2 sensitivity 2C/n (replace-one) on the full batch.
* Hessian: the sum of per-record *data* Hessians phi'' x x^T, each scaled to
  operator norm <= C_H (default M) by the kernel, divided by the public n,
  plus psi's data-independent Hessian, plus a symmetric Gaussian matrix whose
  upper triangle (diagonal included) is i.i.d. N(0, sigma_H^2) and whose lower
  triangle is mirrored.  Every clipped term is rank one, so its Frobenius
  norm equals its operator norm <= C_H: replacing one record moves the
  released upper triangle (a sub-vector of the matrix) by at most 2 C_H / n
  in l2 - ``hess_sensitivity=frobenius``, the default.  ``paper`` uses the
  paper's looser 2 sqrt(p) C_H / n (sigma_H^2 proportional to p M^2): more
  noise for the same epsilon, or the same noise accounted as less privacy.

Noise (``noise`` parameter):

* ``calibrated`` (default): one noise multiplier z for every release, the
  smallest whose whole plan - 2T Gaussians for DP-TR, 2T Poisson-subsampled
  (or sampled-without-replacement) Gaussians for DP-STR - fits (eps, delta)
  in the run's accountant (dp-accounting RDP or PLD).
* ``paper``: the paper's sigma formulas, with the typo corrections of
  specs/remaining-seeds.md (a): DP-TR (Alg 1 l.1, 3, 4):
  phi = (sqrt(eps + ln 1/delta) - sqrt(ln 1/delta))^2,
  sigma_g^2 = 4 C^2 T / (n^2 phi), sigma_H^2 = 4 p C_H^2 T / (n^2 phi);
  DP-STR (Alg 2 l.3, 4, with the factor T that the derivation needs and
  l.3 omits): sigma_g^2 = 256 C^2 T ln(5T/delta) ln(2/delta) / (n^2 eps^2),
  sigma_H^2 = p (C_H/C)^2 sigma_g^2, both on the batch means.  The plan is
  checked against the budget before the first release (refused if over) and
  the accountant reports the epsilon actually spent (usually well below).

DP-STR draws two fresh, independent index sets per step: S for the gradient,
T_H for the Hessian.  ``sampling=poisson`` (default): each record with
probability b/n, released as (clipped sum + noise) / b, add-remove relation,
amplification by Poisson subsampling.  ``sampling=fixed`` (as in the paper):
uniform subsets of exactly b records, replace-one relation, accounted with
dp-accounting's SampledWithoutReplacementDpEvent (RDP accountant only).
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import composed, gaussian_event, poisson_sampled, sampled_without_replacement, self_composed
from dpreg.decisions import Decisions
from dpreg.errors import BudgetExceededError, ParameterError
from dpreg.interfaces import Algorithm, Participation, RunOutput, charge
from dpreg.params import ParamSpec
from dpreg.trajectory import Trajectory

from .trs_solver import solve_trs, solve_trs_krylov

#: ``trs=auto``: the exact (dense eigendecomposition) subproblem solver while the dense Hessian is
#: cheap - at most this many parameters and at most TRS_EXACT_MAX_WORK = n d^2 per step (its O(n d^2)
#: clipped sum) - else the matrix-free Krylov solver (no d x d data Hessian, no O(d^3) per step)
TRS_EXACT_MAX_D = 200
TRS_EXACT_MAX_WORK = 1e9

COMMON = (
    ParamSpec("alpha", "float", 0.1, "target accuracy alpha of the alpha-SOSP",
              "alpha = 0.1 (section 5.1)", low=0, low_open=True),
    ParamSpec("radius", "float", None, "trust-region radius r",
              "r = sqrt(alpha / rho) (Thm 15 / Thm 18; rho: declared Hessian-Lipschitz constant)",
              low=0, low_open=True),
    ParamSpec("steps", "int", None, "iteration budget T (the run may stop earlier, l.7)",
              "T = ceil(6 sqrt(rho) Delta / alpha^1.5) (Thm 15), Delta <= f(0; z) = max_y phi(0,y) + psi(0)",
              low=1),
    ParamSpec("clip", "float", None, "per-record gradient clipping bound C",
              "C = G, the loss's declared Lipschitz constant (Assumption 2)", low=0, low_open=True),
    ParamSpec("hess_clip", "float", None, "per-record data-Hessian clipping bound C_H (operator norm)",
              "C_H = M, the loss's declared smoothness (Alg 1 l.4)", low=0, low_open=True),
    ParamSpec("hess_sensitivity", "str", "frobenius",
              "l2 sensitivity of the released Hessian: frobenius = 2 C_H/n (rank-one terms), "
              "paper = 2 sqrt(p) C_H/n",
              "the paper's sigma_H^2 = 4 p M^2 T/(n^2 phi) corresponds to 'paper'",
              choices=("frobenius", "paper")),
    ParamSpec("noise", "str", "calibrated",
              "calibrated: smallest multiplier whose whole plan fits (eps, delta); paper: the paper's "
              "sigma formulas, the accountant reports the epsilon actually spent",
              "paper: Alg 1 l.1-4 (zCDP) / Alg 2 l.3-4 (advanced composition + subsampling)",
              choices=("calibrated", "paper")),
    ParamSpec("stop", "str", "none",
              "multiplier: output w_{k+1} as soon as the TRS multiplier lam <= sqrt(alpha rho) (Alg 1/2 l.7); "
              "none: run all T steps (the budget is planned for T either way)",
              "Alg 1/2 l.7 is 'multiplier'; practical default 'none': the paper's rule fires after 1-2 steps "
              "(|g| ~ alpha at w = 0) and returns a model at the majority class on adult (0.764 test accuracy, "
              "eps = 1), while all T steps reach a gap 15x smaller on IJCNN1 (docs/experiment-trust-region.md)",
              choices=("multiplier", "none")),
    ParamSpec("trs", "str", "auto", "trust-region subproblem solver: exact (dense eigendecomposition of H~), "
              "krylov (matrix-free: products H~ V only; linear models), or auto (exact up to 200 parameters "
              "while the dense Hessian's n d^2 per step is at most 1e9 - adult, IJCNN1, breast-cancer -, "
              "krylov above for linear models - d = 784 -, exact for softmax and networks)",
              "the paper solves (3) exactly (CVX); krylov solves the same problem on a block Lanczos basis to a "
              "KKT residual of 1e-8 (|g~| + |H~| r), hard case included (trs_solver.solve_trs_krylov): the "
              "released H~ is the same, formed as its data part's factors plus the symmetric noise matrix",
              choices=("auto", "exact", "krylov")),
    ParamSpec("preset", "str", "practical", "practical choices or the paper's literal algorithm",
              "'theory': noise=paper (the sigma formulas of Alg 1 l.1-4 / Alg 2 l.3-4), stop=multiplier "
              "(l.7), hess_sensitivity=paper (2 sqrt(p) C_H/n) and, for DP-STR, sampling=fixed (Alg 2 l.2's "
              "fixed-size sets; rdp accountant); alpha, r and T are Thm 15 / Thm 18's formulas under both "
              "presets. 'theory' overrides those parameters",
              choices=("practical", "theory")),
)

#: what preset=theory sets (the paper's literal choices); DP-STR adds its fixed-size sets (STR_THEORY)
THEORY = {"noise": "paper", "stop": "multiplier", "hess_sensitivity": "paper"}
#: DP-STR's literal sampling: uniform index sets of exactly |S| and |T_H| records (Alg 2 l.2, Lemma 5)
STR_THEORY = {"sampling": "fixed"}


def default_schedule(problem, alpha: float) -> tuple[float, int, float]:
    """(r, T, stopping threshold sqrt(alpha rho)) of Thm 15 for ``problem``'s
    declared rho, with Delta bounded by the data-independent f(0; z)."""
    loss = problem.loss
    rho = problem.constants()[2]
    own = getattr(loss, "origin_bound", None)  # a loss's own bound (softmax: log K; squared, huber: 1/2)
    if own is not None:
        delta_f = float(own())
    else:
        phi = type(loss).phi
        delta_f = max(phi(0.0, 1.0), phi(0.0, -1.0)) + loss.psi(np.zeros(problem.d))
    r = math.sqrt(alpha / rho)
    T = max(1, math.ceil(6.0 * math.sqrt(rho) * delta_f / alpha ** 1.5))
    return r, T, math.sqrt(alpha * rho)


def psi_hessian(loss, w: np.ndarray) -> np.ndarray:
    """Dense Hessian of the loss's data-independent term psi at w."""
    eye = np.eye(len(w))
    P = np.stack([loss.psi_hvp(w, eye[j]) for j in range(len(w))], axis=1)
    return 0.5 * (P + P.T)


def symmetric_gaussian(rng: np.random.Generator, p: int, sigma: float) -> np.ndarray:
    """p x p symmetric matrix: upper triangle (diagonal included) i.i.d.
    N(0, sigma^2), lower triangle mirrored (Alg 1 l.4)."""
    iu = np.triu_indices(p)
    v = rng.standard_normal(len(iu[0])) * sigma
    E = np.zeros((p, p))
    E[iu] = v
    E[(iu[1], iu[0])] = v
    return E


def _hessian_matmat(loss, w: np.ndarray, data_part, E: np.ndarray):
    """V -> H~ V for the released H~ = data part (a product, from
    ``Problem.clipped_hessian_operator``, already divided by the batch) + the
    symmetric noise matrix E + psi's Hessian at w."""
    own_psi = loss.has_psi if hasattr(loss, "has_psi") else True

    def matmat(V):
        out = data_part(V) + E @ V
        if own_psi:
            for j in range(V.shape[1]):
                out[:, j] += loss.psi_hvp(w, V[:, j])
        return out

    return matmat


def paper_phi(eps: float, delta: float) -> float:
    """phi = (sqrt(eps + ln 1/delta) - sqrt(ln 1/delta))^2 (Alg 1 l.1): the
    total zCDP rho whose Lemma-7 conversion is exactly eps at delta."""
    L = math.log(1.0 / delta)
    return (math.sqrt(eps + L) - math.sqrt(L)) ** 2


class _TrustRegion(Algorithm):
    """The loop shared by DP-TR and DP-STR; subclasses plan the noise and
    produce the two releases of a step."""

    uses_noise = False
    data_access = "resample"
    honours_init = True

    @classmethod
    def requirements(cls, params) -> dict:
        return {"clipped_hessian_sum": "per-record clipped Hessians (the noisy Hessian of its trust-region step)"}

    @classmethod
    def release_mechanisms(cls, info: dict, noise: str | None) -> list[dict]:
        """Two Gaussian mechanisms per step: the clipped gradient, and the
        clipped Hessian with symmetric noise (the upper triangle drawn, then
        mirrored); Poisson or fixed-size subsampled in the stochastic variant."""
        sampled = f" ({info['sampling']} subsampling)" if info.get("sampling") else ""
        out = []
        if info.get("noise_multiplier_grad") is not None:
            out.append({"what": f"{cls.name} gradients{sampled}", "noise": "gaussian",
                        "noise_multiplier": float(info["noise_multiplier_grad"])})
        if info.get("noise_multiplier_hess") is not None:
            out.append({"what": f"{cls.name} Hessians{sampled}", "noise": "symmetric gaussian",
                        "noise_multiplier": float(info["noise_multiplier_hess"])})
        return out

    # -- subclass hooks ----------------------------------------------------------
    def _setup(self, T: int) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _grad(self, w, k):  # pragma: no cover
        raise NotImplementedError

    def _hess(self, w, k):  # pragma: no cover
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------
    #: the parameters preset=theory fixes (the paper's literal algorithm)
    theory_values = THEORY

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.p.get("preset") == "theory":
            self.p.update(self.theory_values)

    def _resolve(self):
        pb = self.problem
        G, M, _ = pb.constants()
        alpha = float(self.p["alpha"])
        r0, T0, thr = default_schedule(pb, alpha)
        self.r = float(self.p["radius"] or r0)
        self.T = int(self.p["steps"] or T0)
        self.threshold = thr
        self.C = float(self.p["clip"] or G)
        self.CH = float(self.p["hess_clip"] or M)
        self.hess_scale = math.sqrt(pb.d) if self.p["hess_sensitivity"] == "paper" else 1.0

    def _check_plan(self, plan) -> None:
        """noise=paper: refuse before any release if the plan overshoots; else
        reserve it (as calibrate() does)."""
        acc = self.accountant
        if not acc.fits(plan):
            eps = acc.epsilon_of_plan(plan)
            raise BudgetExceededError(
                f"the paper's noise (noise=paper) spends eps={eps:.4g} > budget {acc.epsilon_budget:g} "
                f"at delta={acc.delta:g} (nothing was released): raise --epsilon, run fewer steps "
                f"(--param steps), or use noise=calibrated (the default), which fits any budget")
        acc.reserve(plan)

    def decisions_record(self, dec: Decisions, info: dict) -> dict:
        """The record's ``sosp_decisions`` (dpreg.decisions): the multiplier
        tests of Alg 1/2 l.7 (each step's subproblem multiplier lam against
        sqrt(alpha rho); ``certified``: steps that passed, whether or not the
        run stops there) and the public comparison behind them: the expected
        operator norm of the symmetric Hessian noise, 2 sqrt(p) sigma_H (the
        edge of the semicircle law), against the threshold - at or above it the
        noise alone can pass or fail the curvature test - and the expected norm
        of the gradient noise, sqrt(p) sigma_g, against r sqrt(alpha rho)."""
        p = self.problem.d
        h_noise = 2.0 * math.sqrt(p) * float(info["noise_std_hess"])
        g_noise = math.sqrt(p) * float(info["noise_std_grad"])
        thr = float(self.threshold)
        decides = h_noise >= thr
        note = (f"the Hessian noise (operator norm about {h_noise:.3g}) is at least the threshold sqrt(alpha rho) "
                f"= {thr:.3g}: the noise decides the curvature test" if decides else
                f"the Hessian noise (about {h_noise:.3g}) is below the threshold {thr:.3g}: a negative eigenvalue "
                f"below -{thr:.3g} fails the test whatever the noise")
        return {"multiplier_tests": {"total": dec.tests, "certified": dec.certificates, "noise_decides": decides},
                "threshold": thr, "hessian_noise_norm": h_noise, "gradient_noise_norm": g_noise,
                "noise_decides": decides, "note": note}

    def run(self) -> RunOutput:
        pb = self.problem
        self._resolve()
        # the factored Hessian is the linear model's (a loss with its own problem - softmax, networks -
        # or a problem whose clipped Hessian sum is changed, e.g. an audit's, keeps the dense release)
        from dpreg.problem import Problem

        factored = (callable(getattr(pb, "clipped_hessian_operator", None))
                    and getattr(type(pb), "clipped_hessian_sum", None) is Problem.clipped_hessian_sum)
        if self.p["trs"] == "krylov" and not factored:
            raise ParameterError(f"trs=krylov needs a linear model's factored Hessian; loss {pb.loss.name!r} "
                                 f"releases its Hessian densely: use trs=exact")
        krylov = self.p["trs"] == "krylov" or (self.p["trs"] == "auto" and factored and (
            pb.d > TRS_EXACT_MAX_D or self._hess_rows() * pb.d * pb.d > TRS_EXACT_MAX_WORK))
        info = self._setup(self.T)
        w = self.initial_point()
        traj = Trajectory(self.T)
        traj.log(0, w)
        lam = math.nan
        stopped = False
        dec = Decisions()
        k = 0
        unconverged = 0
        products = 0
        for k in range(1, self.T + 1):
            g = self._grad(w, k)
            if krylov:
                data_part, E = self._hess_operator(w, k)
                mm = _hessian_matmat(pb.loss, w, data_part, E)
                res = solve_trs_krylov(g, mm, self.r)
                unconverged += int(not res.converged)
                products += res.products
            else:
                H = self._hess(w, k) + psi_hessian(pb.loss, w)
                res = solve_trs(g, H, self.r)
            w = w + res.h
            lam = res.lam
            traj.log(k, w, noisy_grad_norm=np.linalg.norm(g), multiplier=lam,
                     step_norm=np.linalg.norm(res.h))
            self.progress(k, self.T)
            dec.multiplier_test(lam <= self.threshold)
            if self.p["stop"] == "multiplier" and lam <= self.threshold:  # l.7: output w_{k+1}
                stopped = True
                break
        traj.finish(k, w)
        info.update({"radius": self.r, "steps_planned": self.T, "steps_run": k,
                     "stopped_by_multiplier": stopped, "threshold": self.threshold,
                     "last_multiplier": lam, "clip": self.C, "hess_clip": self.CH,
                     "hess_sensitivity": self.p["hess_sensitivity"], "noise": self.p["noise"],
                     "stop": self.p["stop"], "preset": self.p.get("preset", "practical"),
                     "trs": "krylov" if krylov else "exact",
                     "trs_unconverged": unconverged if krylov else None,
                     "trs_products": products if krylov else None,
                     "sosp_decisions": self.decisions_record(dec, info), "trajectory": traj})
        return RunOutput(w, k, self._records_used(k), self._grad_evals(k), traj.series, info)


class DPTrustRegion(_TrustRegion):
    """DP-TR (Alg 1): full-batch noisy gradient and Hessian, exact trust-region step."""

    name = "dp-trust-region"
    summary = "DP trust region (full batch): noisy gradient + symmetric-noise Hessian, exact TRS step"
    paper = "dp-trust-region.txt, Algorithm 1 (DP-TR)"
    relation = "replace-one"
    practitioner = {"epochs": "steps", "max_grad_norm": "clip",
                    "lr": "it takes trust-region steps of radius r (--param radius), not gradient steps",
                    "batch_size": "it is full-batch: every step uses all n records",
                    "noise_multiplier": "its noise is calibrated or the paper's (--param noise=paper)"}
    params = COMMON

    def _setup(self, T):
        pb, acc = self.problem, self.accountant
        f = acc.sensitivity_factor
        self.sens_g = f * self.C / pb.n
        self.sens_h = f * self.CH * self.hess_scale / pb.n
        if self.p["noise"] == "calibrated":
            z = acc.calibrate(lambda z: self_composed(gaussian_event(z), 2 * T))
            self.zg = self.zh = z
        else:
            phi = paper_phi(acc.epsilon_budget, acc.delta)
            sg = math.sqrt(4 * self.C ** 2 * T / (pb.n ** 2 * phi))
            sh = math.sqrt(4 * pb.d * self.CH ** 2 * T / (pb.n ** 2 * phi))
            self.zg, self.zh = sg / self.sens_g, sh / self.sens_h
            self._check_plan(composed([self_composed(gaussian_event(self.zg), T),
                                       self_composed(gaussian_event(self.zh), T)]))
        self.noise_g = self.rng("dp-trust-region gradient noise")
        self.noise_h = self.rng("dp-trust-region hessian noise")
        return {"noise_multiplier_grad": self.zg, "noise_multiplier_hess": self.zh,
                "noise_std_grad": self.zg * self.sens_g, "noise_std_hess": self.zh * self.sens_h}

    def _grad(self, w, k):
        pb = self.problem
        charge(self.accountant, gaussian_event(self.zg), Participation.all(), label="dp-tr gradient")
        s, _ = pb.clipped_grad_sum(w, None, self.C)
        return self.released("gradient", s / pb.n + self.noise_g.standard_normal(pb.d) * (self.zg * self.sens_g))

    def _hess(self, w, k):
        pb = self.problem
        charge(self.accountant, gaussian_event(self.zh), Participation.all(), label="dp-tr hessian")
        S, _ = pb.clipped_hessian_sum(w, None, self.CH)
        return self.released("hessian", S / pb.n + symmetric_gaussian(self.noise_h, pb.d, self.zh * self.sens_h))

    def _hess_rows(self) -> int:
        return self.problem.n

    def _hess_operator(self, w, k):
        """The release of :meth:`_hess` (same charge, same noise draws) in
        factored form: (V -> data part V, the noise matrix E)."""
        pb = self.problem
        charge(self.accountant, gaussian_event(self.zh), Participation.all(), label="dp-tr hessian")
        op, _ = pb.clipped_hessian_operator(w, None, self.CH)
        E = symmetric_gaussian(self.noise_h, pb.d, self.zh * self.sens_h)
        return (lambda V: op(V) / pb.n), E

    def _records_used(self, k):
        return self.problem.n

    def _grad_evals(self, k):
        return k * self.problem.n


class DPStochasticTrustRegion(_TrustRegion):
    """DP-STR (Alg 2): fresh gradient and Hessian subsamples each step."""

    name = "dp-stochastic-trust-region"
    summary = "DP stochastic trust region: subsampled noisy gradient and Hessian, exact TRS step"
    paper = "dp-trust-region.txt, Algorithm 2 (DP-STR)"
    relation = "add-remove"
    practitioner = {"batch_size": "batch", "max_grad_norm": "clip",
                    "epochs": "it samples fresh gradient and Hessian batches each step: its length is --param steps",
                    "lr": "it takes trust-region steps of radius r (--param radius), not gradient steps",
                    "noise_multiplier": "its noise is calibrated or the paper's (--param noise=paper)"}
    params = COMMON + (
        ParamSpec("batch", "int", 5000, "gradient batch size |S| (expected size with Poisson sampling)",
                  "|S| >~ G^2 ln(p/zeta)/alpha^2 (Thm 18); 5,000 on IJCNN (section 5.2); capped at n",
                  low=1),
        ParamSpec("hess_batch", "int", None, "Hessian batch size |T_H|",
                  "|T_H| >~ M^2 ln(p/zeta)/(alpha rho) (Thm 18); default: the gradient batch", low=1),
        ParamSpec("sampling", "str", "poisson",
                  "poisson: each record w.p. b/n, add-remove, amplified; fixed: exactly b records "
                  "without replacement, replace-one, SampledWithoutReplacement (rdp accountant)",
                  "the paper samples fixed-size sets (Alg 2 l.2, Lemma 5): preset=theory sets fixed",
                  choices=("poisson", "fixed")),
    )

    theory_values = {**THEORY, **STR_THEORY}

    @classmethod
    def relation_for(cls, params) -> str:
        fixed = params.get("sampling") == "fixed" or params.get("preset") == "theory"
        return "replace-one" if fixed else "add-remove"

    def _event(self, z: float, b: int):
        n = self.problem.n
        if b >= n:
            return gaussian_event(z)
        if self.fixed:
            return sampled_without_replacement(n, b, gaussian_event(z))
        return poisson_sampled(b / n, gaussian_event(z))

    def _setup(self, T):
        pb, acc = self.problem, self.accountant
        self.fixed = self.p["sampling"] == "fixed"
        want = "replace-one" if self.fixed else "add-remove"
        if acc.relation != want:
            raise ParameterError(f"sampling={self.p['sampling']} is accounted under {want}; "
                                 f"the accountant is {acc.relation}")
        if self.fixed and min(int(self.p["batch"]), int(self.p["hess_batch"] or self.p["batch"])) < pb.n \
                and getattr(acc, "name", "rdp") != "rdp":
            why = "preset=theory samples Alg 2's fixed-size sets" if self.p.get("preset") == "theory" else \
                "sampling=fixed"
            raise ParameterError(f"dp-stochastic-trust-region: {why}, which only the rdp accountant can account "
                                 f"(sampling without replacement): use --accountant rdp")
        self.b = min(int(self.p["batch"]), pb.n)
        self.bh = min(int(self.p["hess_batch"] or self.b), pb.n)
        f = acc.sensitivity_factor
        self.sens_g = f * self.C / self.b                 # of the batch mean (sum / b)
        self.sens_h = f * self.CH * self.hess_scale / self.bh
        if self.p["noise"] == "calibrated":
            def plan(z):
                return composed([self_composed(self._event(z, self.b), T),
                                 self_composed(self._event(z, self.bh), T)])

            z = acc.calibrate(plan)
            self.zg = self.zh = z
        else:
            eps, delta = acc.epsilon_budget, acc.delta
            sg = math.sqrt(256 * self.C ** 2 * T * math.log(5 * T / delta) * math.log(2 / delta)
                           / (pb.n ** 2 * eps ** 2))
            sh = math.sqrt(pb.d) * (self.CH / self.C) * sg
            self.zg, self.zh = sg / self.sens_g, sh / self.sens_h
            self._check_plan(composed([self_composed(self._event(self.zg, self.b), T),
                                       self_composed(self._event(self.zh, self.bh), T)]))
        self.sample_g = self.rng("dp-str gradient sampling")
        self.sample_h = self.rng("dp-str hessian sampling")
        self.noise_g = self.rng("dp-str gradient noise")
        self.noise_h = self.rng("dp-str hessian noise")
        self.used = 0
        return {"noise_multiplier_grad": self.zg, "noise_multiplier_hess": self.zh,
                "noise_std_grad": self.zg * self.sens_g, "noise_std_hess": self.zh * self.sens_h,
                "batch": self.b, "hess_batch": self.bh, "sampling": self.p["sampling"]}

    def _sample(self, rng, b):
        """(indices, participation) of one fresh index set of (expected) size b."""
        n = self.problem.n
        if b >= n:
            return self.problem.all_rows, Participation.all()
        if self.fixed:
            idx = np.sort(rng.choice(n, size=b, replace=False)).astype(np.int64)
            return idx, Participation.all()
        q = b / n
        return np.flatnonzero(rng.random(n) < q).astype(np.int64), Participation.poisson(q)

    def _charge(self, z, b, part, label):
        # the sampled-without-replacement event already carries the sampling
        if self.fixed and b < self.problem.n:
            charge(self.accountant, self._event(z, b), Participation.all(), label=label)
        else:
            charge(self.accountant, gaussian_event(z), part, label=label)

    def _grad(self, w, k):
        pb = self.problem
        idx, part = self._sample(self.sample_g, self.b)
        self._charge(self.zg, self.b, part, "dp-str gradient")
        s, _ = pb.clipped_grad_sum(w, idx, self.C) if len(idx) else (np.zeros(pb.d), 0)
        self.used += len(idx)
        return self.released("gradient", s / self.b + self.noise_g.standard_normal(pb.d) * (self.zg * self.sens_g))

    def _hess(self, w, k):
        pb = self.problem
        idx, part = self._sample(self.sample_h, self.bh)
        self._charge(self.zh, self.bh, part, "dp-str hessian")
        S = pb.clipped_hessian_sum(w, idx, self.CH)[0] if len(idx) else np.zeros((pb.d, pb.d))
        self.used += len(idx)
        return self.released("hessian", S / self.bh + symmetric_gaussian(self.noise_h, pb.d, self.zh * self.sens_h))

    def _hess_rows(self) -> int:
        return min(int(self.p["hess_batch"] or self.p["batch"]), self.problem.n)

    def _hess_operator(self, w, k):
        """The release of :meth:`_hess` (same sample, charge and noise draws) in
        factored form: (V -> data part V, the noise matrix E)."""
        pb = self.problem
        idx, part = self._sample(self.sample_h, self.bh)
        self._charge(self.zh, self.bh, part, "dp-str hessian")
        self.used += len(idx)
        if len(idx):
            op, _ = pb.clipped_hessian_operator(w, idx, self.CH)
        else:
            def op(V):
                return np.zeros_like(V)
        E = symmetric_gaussian(self.noise_h, pb.d, self.zh * self.sens_h)
        return (lambda V: op(V) / self.bh), E

    def _records_used(self, k):
        return self.used

    def _grad_evals(self, k):
        return self.used


def reference_minimum(problem, *, starts: int = 5, seed: int = 0, maxiter: int = 500,
                      gtol: float = 1e-10):
    """Non-private reference for L* (section 5.1: "multiple runs of the
    classical trust region method and taking the best one"): scipy's
    ``trust-exact`` on the exact empirical loss from w = 0 and ``starts - 1``
    public random N(0, I) starts (seeded by ``seed``: public randomness).
    Returns (w*, L*).  Reads the data without privacy: a diagnostic only,
    never an input of a private run."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(seed)
    inits = [np.zeros(problem.d)] + [rng.standard_normal(problem.d) for _ in range(starts - 1)]
    best_w, best_f = None, math.inf
    for x0 in inits:
        res = minimize(problem.value, x0, jac=problem.gradient, hess=problem.hessian,
                       method="trust-exact", options={"maxiter": maxiter, "gtol": gtol})
        f = float(problem.value(res.x))
        if f < best_f:
            best_w, best_f = np.array(res.x), f
    return best_w, best_f


@hookimpl
def dpreg_register_algorithms(register):
    for cls in (DPTrustRegion, DPStochasticTrustRegion):
        register(cls.name, cls, summary=cls.summary)
