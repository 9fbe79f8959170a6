"""``zo-o2nc``: private zeroth-order Online-to-Non-convex Conversion
(zhang-tran-cutkosky-2024-private-zeroth-order.txt: Alg 3 with projected
online subgradient descent, the private variance-reduced oracle of Alg 4 and
the tree mechanism of Alg 5; ``oracle=naive`` is App. E's Alg 6 baseline).

For non-smooth, non-convex, L-Lipschitz losses, from function values only.
The smoothing radius ``h`` (the paper's delta; renamed against DP's delta) is
also the Goldstein radius: the run looks for a (h, eps)-stationary point of the
smoothed loss F_h, i.e. a (2h, eps)-Goldstein-stationary point of F (Cor 2.3).

Passes over disjoint batches (within a pass records are used at most once;
Alg 3 makes one pass, the practical default four on 20,000 records or more
and up to 16 on fewer, each pass K blocks over a fresh secret permutation).  Block k
(k = 1..K) runs T steps of O2NC, restarting OSD and the running sum:

    Delta_1 = 0;  Delta_t = Pi_{|.| <= D}(Delta_{t-1} - eta_t g~_{t-1})        (OSD, t >= 2)
    w_t = x_t + s_t Delta_t (s_t ~ U[0,1]);  x_{t+1} = x_t + Delta_t            (Alg 3 l.4)
    v_1 = GRAD(w_1, Z^k_1) (B1 records),  v_t = DIFF(w_t, w_{t-1}, Z^k_t) (B2)  (Alg 4)
    g~_t = noise.add(v_t, s_t, disjoint batch)  = sum_{i<=t} v_i + noise        (Alg 5 for tree)
    w-bar^k = (1/T) sum_t w_t;  output w-bar^k, k uniform (a secret stream)

Sensitivities are enforced by the oracle's clipping (Lemmas 3.1-3.2, replace
one record): s_1 = 2dL/B1 and s_t = 2dL|w_t - w_{t-1}|/(B2 h) - the actual
(public) distance, at most 4dL/(B2 T) since |Delta| <= D = h/T (with the
practical record clip C, d L becomes min(d L, C)).  Any noise
plugin releases the running sum (default ``tree``: the existing
TreeMechanism with disjoint groups is Alg 5, node std = z x the largest
sensitivity among its leaves).  Accounting goes through the one accountant:
each batch is charged, before its release, what the mechanism's record_event
says (tree: L = bit_length(T) Gaussians of multiplier z, which is
dp-accounting's SingleEpochTreeAggregation; gaussian: one).  The blocks of a
pass use disjoint records: no composition across k within a pass, and a
record's exposure is one add per pass, composed over the passes.  z is
calibrated so the worst-case record's planned exposure spends the budget; ``noise_rule=paper``
(the default under ``preset=theory``) is Cor 4.4's literal sigma_t = sqrt(2 ln T) s_max / rho
on every tree node, s_max = max{2dL/B1, 4dL/(B2 T)} the bound of every add's sensitivity and rho
the paper's privacy parameter for (eps, delta) (see ``ZoO2NC._noise_multiplier``); the
accountant reports what it spends, and the run refuses where it does not fit (T < 7, where
Thm 4.3's |OUT| <= 2 ln T fails).

``preset=theory`` gives Thm 4.9's values: B1 = T + 1, B2 = 1, D = h/T, K = M/(2T) and
T = max{(sqrt(d) L h M/(F + L h))^(2/3), (d^(3/2) L h M/((F + L h) rho))^(1/2)}
(the paper prints min, which its proof contradicts: see default_block_length)
(capped so that one block fits in the data: at a9a's d = 123 and eps <= 2
the naive oracle's T exceeds M) with F the public bound ``f_gap`` on
F(x_1) - inf F, and rho the paper's
privacy parameter for the budget: rho^2/2 the zCDP that (eps, delta) allows
(sqrt(rho_z) = sqrt(ln(1/delta) + eps) - sqrt(ln(1/delta))).  The sqrt(d)
in the first term is lost in the text extraction and implied by the rate.

``oracle=naive`` (Alg 6): every step releases (1/B) sum_i d c_i u_i (one
direction per record, c_i the clipped two-point difference) plus independent
noise of std z 2dL/B (the noise plugin restarted at every step, so ``tree``
and ``gaussian`` coincide); each record is charged one Gaussian(z).  Its
defaults (App. E): B = 1, K = M/(B T), and
T = max{(sqrt(d) L h M/(F + L h))^(2/3), (d^(3/2) L h M/((F + L h) rho))^(2/3)}.

``preset=practical`` (the default) changes, for each parameter left unset,
what measurement on adult's training split (eps = 1, logistic; see
docs/experiment-zeroth-order.md) showed to stop learning; the theory values
do not move the model there (seed 0: train loss 0.6929 against 0.6931 at
w = 0, test accuracy 0.631 below the majority class's 0.764):

* the path: Thm 4.9's T (4818 at eps = 1 on adult) leaves K = M/(2T) = 3
  blocks, and a block moves at most T D = h = 0.1, a path of 0.3 from w = 0, while the
  logistic optimum needs |w| of 5-10 for 0.82 accuracy.  Practical: choose K
  (PRACTICAL_BLOCKS) and T (PRACTICAL_T), then B2 = M/(2 K T), B1 = T B2
  (Thm 4.9's half/half split), D = h/T, and a larger h (PRACTICAL_H: the margin
  of a linear model moves by h<x, u> ~ h|x|/sqrt(d), about 0.4 on adult), so the
  path K h per pass, over several passes, is long enough; few large batches mean
  a small sensitivity per add and fewer tree levels (smaller z);
* the sensitivity: a record's term is bounded by d L = 124 x 1.12 on adult,
  while its typical norm is about sqrt(2)|grad f_i| < 1.6 (d random unit
  directions): the record clip C (PRACTICAL_CLIP) is the bound instead
  (sensitivity factor min(dL, C)/b, enforced in the kernel);
* DIFF: Alg 2 carries a common-mode term <grad f, x - y> sum_j u_j of norm
  ~sqrt(d)|grad f||x - y|/h that the record clip would cut together with the
  signal; the symmetric DIFF (GRAD(x) - GRAD(y), same directions) has none;
* the output: a uniformly random block average sits on average halfway along
  the path; practical returns the last one (post-processing either way).

OSD step: the paper only says "tuned"; the default is adaptive,
eta_t = D / sqrt(sum_{s<t} |g~_s|^2) (post-processing of releases); ``step``
fixes eta.  The run is unconstrained (a loss's feasible radius is ignored).
"""
from __future__ import annotations

import math

import numpy as np

from dpreg import hookimpl
from dpreg.access import PASSES_MIN_RECORDS, Passes
from dpreg.accounting import self_composed
from dpreg.errors import ParameterError
from dpreg.interfaces import Algorithm, RunOutput
from dpreg.params import ParamSpec
from dpreg.trajectory import OutputChoice, Trajectory
from dpreg_plugins.oracles.zeroth_order import ZerothOrderOracle

from .schedule import practical_passes

PAPER = "zhang-tran-cutkosky-2024-private-zeroth-order.txt"

#: practical defaults (``preset=practical``), chosen on training data only: adult's
#: training split, IJCNN1's training file and a public synthetic set
#: (``dpreg info zo-o2nc``)
PRACTICAL_H = 4.0
PRACTICAL_CLIP = 1.0
PRACTICAL_BLOCKS = 4
#: steps per block: B2 = M/(2 K T) (Thm 4.9's half/half split with K and T chosen): few,
#: large batches (small sensitivity per add, a shallow tree)
PRACTICAL_T = 6
#: practical passes over the records on dpreg.access.PASSES_MIN_RECORDS records or more (``passes``)
PASSES = 4
#: iterates per block kept for the Goldstein-stationarity diagnostic (evenly spaced over the block)
GOLDSTEIN_POINTS = 16
#: practical directions per record of GRAD and DIFF (``directions``): min(d, this)
PRACTICAL_DIRECTIONS = 32


def practical_batch2(M: int, K: int) -> int:
    """B2 = M/(2 K PRACTICAL_T) (at least 1): the DIFF batch that gives a block
    PRACTICAL_T steps with half of its records in the GRAD (B1 = T B2)."""
    return max(1, M // (2 * K * PRACTICAL_T))


def paper_rho(epsilon: float, delta: float) -> float:
    """The paper's rho for an (eps, delta) budget: rho^2/2 = the zCDP rho_z
    with rho_z + 2 sqrt(rho_z ln(1/delta)) = eps (Bun-Steinke conversion)."""
    lg = math.log(1.0 / delta)
    rz = (math.sqrt(lg + epsilon) - math.sqrt(lg)) ** 2
    return math.sqrt(2.0 * rz)


def default_block_length(M: int, d: int, L: float, h: float, f_gap: float, rho: float, oracle: str) -> int:
    """T of Thm 4.9 (``vr``) or of App. E (``naive``), at least 1: the larger
    of the non-private balance point (sqrt(d) L h M/(F + L h))^(2/3) and the
    private one (d^(3/2) L h M/((F + L h) rho))^(1/2) (``naive``: ^(2/3)).

    The paper prints ``min``; its proof needs ``max``: the bound is
    (F + L h) 2T/(h M) (increasing in T) plus terms decreasing in T, each
    balanced against the first at one of the two points, so only T = max of
    them keeps both decreasing terms below the balance (with ``min``, rho -> oo,
    i.e. no privacy, would give T -> 0).  ``rho = inf``: the non-private T."""
    a = (math.sqrt(d) * L * h * M / (f_gap + L * h)) ** (2.0 / 3.0)
    priv = d ** 1.5 * L * h * M / ((f_gap + L * h) * rho)
    b = priv ** 0.5 if oracle == "vr" else priv ** (2.0 / 3.0)
    return max(1, int(math.floor(max(a, b))))


def project_ball(v: np.ndarray, radius: float) -> np.ndarray:
    nrm = float(np.linalg.norm(v))
    return v if nrm <= radius else v * (radius / nrm)


class ZoO2NC(Algorithm):
    """Private zeroth-order O2NC (Zhang, Tran, Cutkosky 2024)."""

    name = "zo-o2nc"
    summary = ("private zeroth-order O2NC for non-smooth losses (Zhang-Tran-Cutkosky): GRAD/DIFF "
               "variance-reduced oracle, running sum via --noise (tree = Alg 5), passes of disjoint batches")
    paper = f"{PAPER}, Algorithms 3-5 (oracle=naive: Algorithm 6, App. E)"
    uses_noise = True
    data_access = "single-pass"
    relation = "replace-one"
    honours_init = True
    practitioner = {"lr": "step", "batch_size": "its batches are per oracle (batch1/batch2, or batch with oracle=naive)"}
    @classmethod
    def requirements(cls, params) -> dict:
        return {"clipped_zo_sum": "clipped zeroth-order sums (loss values along random directions)"}

    #: set True (before run) to keep every block's iterates w^k_1..w^k_T in
    #: ``block_iterates`` for evaluation after the run (the Goldstein proxy);
    #: O(M d) memory, off by default
    keep_iterates: bool = False

    params = (
        ParamSpec("preset", "str", "practical", "practical constants or the literal Thm 4.9 / App. E values",
                  "theory: h = 0.1, T, K, B1, B2, D = h/T of Thm 4.9, no record clip, Alg 2's DIFF; "
                  "practical (default): the practical values noted below wherever a parameter is left unset",
                  choices=("practical", "theory")),
        ParamSpec("oracle", "str", "vr", "gradient oracle: variance-reduced GRAD+DIFF or the naive one",
                  "vr: Alg 4 (GRAD at t=1, DIFF after); naive: Alg 6 (App. E)", choices=("vr", "naive")),
        ParamSpec("smoothing", "float", None, "smoothing radius h (the paper's delta; also the Goldstein radius)",
                  "F_h(w) = E F(w + h v), v ~ U(ball) (Lemma 2.2); theory: 0.1 (the spec's worked example); "
                  "practical: 4 (a block moves at most h; a linear model's margin moves by h<x,u>, "
                  "about h|x|/sqrt(d) = 0.4 on adult; the first practical value was 8: IJCNN1 gap ratio to "
                  "dp-sgd 2.28 at h = 8 against 1.50 at h = 4, with K = 4, B2 = 1024, 4 passes, tuning seeds)",
                  low=0, low_open=True),
        ParamSpec("lipschitz", "float", None, "L: clip of each finite difference per unit distance",
                  "L = G, the loss's declared Lipschitz constant (Lemmas 3.1-3.2)", low=0, low_open=True),
        ParamSpec("f_gap", "float", 1.0, "public bound F on F(x_1) - inf F (for the default T)",
                  "Thm 4.9's F; 1 bounds every loss with values in [0, 1] (ramp, sigmoid)",
                  low=0, low_open=True),
        ParamSpec("record_clip", "float", None, "C: clip of each record's estimate (norm), sets the sensitivity",
                  "theory: none, a record's term is bounded by Lemmas 3.1-3.2's d L; practical: C = 1 "
                  "(GRAD term <= C, DIFF term <= C|x-y|/h, sensitivity factor min(dL, C)/b): d L = 124 "
                  "on adult against a typical |term| of about sqrt(2)|grad f| < 1.6", low=0, low_open=True),
        ParamSpec("diff", "str", None, "DIFF estimator: Alg 2's two evaluations or the symmetric four",
                  "theory: paper (Alg 2); practical: symmetric = GRAD(x) - GRAD(y) with the same directions "
                  "(same bound L|x-y| per coefficient, no common-mode term of norm ~sqrt(d)|grad f||x-y|/h)",
                  choices=("paper", "symmetric")),
        ParamSpec("directions", "int", None, "J: random directions per record of GRAD and DIFF",
                  "Algs 1-2: J = d (theory); practical: J = min(d, 32), each term scaled by d/J (the same "
                  "expectation and the same bound d L, so the same sensitivity; a d/J larger sampling variance "
                  "per record, small beside the privacy noise for batches of hundreds): a run's work is "
                  "O(n J d) per pass instead of O(n d^2), the difference between seconds and minutes at d = 784",
                  low=1),
        ParamSpec("osd_radius", "float", None, "D: OSD radius, the largest move per step",
                  "Thm 4.9: D = h/T (a block moves at most h: one Goldstein ball); both presets", low=0,
                  low_open=True),
        ParamSpec("block_length", "int", None, "T: steps per block (OSD restart, tree phase)",
                  "Thm 4.9: T = max{(sqrt(d) L h M/(F+Lh))^(2/3), (d^(3/2) L h M/((F+Lh) rho))^(1/2)} "
                  "(paper: min, contradicted by its proof); naive (App. E): exponent 2/3 on the second term; "
                  "practical: T = 6, with B2 = M/(2 K T) (so T = M/(2 K B2); naive: T = M/(K B))", low=1),
        ParamSpec("blocks", "int", None, "K: number of blocks",
                  "K = M/(B1 + B2 (T-1)) = M/(2T) with Thm 4.9's batches; naive: K = M/(B T); "
                  "practical: K = 4 per pass (the path is at most K h = 16 per pass) from 20,000 records on, "
                  "1 per pass below, where the run makes many passes (schedule.practical_passes): with a "
                  "block's noise fixed, one block of large batches per pass carries the most signal. On "
                  "validation splits (experiments/targets_models_learn.py --validation, 4 seeds, 16 passes) "
                  "K = 4 / 2 / 1 gave eps = 1 accuracy 0.702 / 0.702 / 0.794 (breast-cancer), 0.546 / 0.542 "
                  "/ 0.574 (digits), 0.485 / 0.532 / 0.620 (synthetic, majority 0.51); eps = 4: 0.908 / 0.851 "
                  "/ 0.912, 0.729 / 0.744 / 0.788, 0.591 / 0.679 / 0.758", low=1),
        ParamSpec("batch1", "int", None, "B1: records of GRAD at the start of a block",
                  "Thm 4.9: B1 = T + 1 (Cor 4.4 needs B1 >= T B2 / 2); practical: B1 = T B2 (= B2 h/D), "
                  "so GRAD's sensitivity 2C/B1 is DIFF's typical 2C|w_t - w_t-1|/(B2 h) at |.| = D", low=1),
        ParamSpec("batch2", "int", None, "B2: records of each DIFF",
                  "Thm 4.9: B2 = 1; practical: M/(2 K T) with T = 6 steps per block (1041 on IJCNN1, "
                  "678 on adult): few, large batches (a small sensitivity per add, fewer tree levels). "
                  "Chosen on training data (tune_on_training_data.py zo-o2nc, tuning seeds, K = 4, h = 4, "
                  "4 passes): B2 = 128 / 256 / 512 / 1024 / 2048 gave IJCNN1 gap ratios to dp-sgd "
                  "2.23 / 1.82 / 1.57 / 1.50 / 1.77", low=1),
        ParamSpec("batch", "int", None, "B: records per step of the naive oracle",
                  "App. E: B = 1, T from its formula; practical: B = the vr run's B2 and T = M/(K B) "
                  "(the vr run's path and K)", low=1),
        ParamSpec("step", "float", None, "fixed OSD step size eta (default: adaptive)",
                  "paper: 'tuned'; default eta_t = D/sqrt(sum_{s<t} |g~_s|^2), D = h/T", low=0,
                  low_open=True),
        ParamSpec("noise_rule", "str", None, "noise multiplier rule",
                  "calibrated (practical default): smallest z whose plan spends (eps, delta); paper "
                  "(preset=theory): Cor 4.4's sigma = sqrt(2 ln T) s_max/rho on every tree node, s_max = "
                  "max{2dL/B1, 4dL/(B2 T)} (replace-one) and rho the paper's for (eps, delta) (tree only; the "
                  "naive oracle: App. E's sigma = s/rho); refused where it does not fit (T < 7)",
                  choices=("calibrated", "paper")),
        ParamSpec("passes", "int", None, "passes over the records: each pass K blocks over a fresh secret "
                  "permutation cut into disjoint batches, the noise calibrated for all passes together",
                  "Alg 3 is single-pass (preset=theory: 1); practical default 4 from 20,000 records on "
                  "(a record is in one add of each pass: one pass's exposure composed passes times). Chosen on "
                  "training data (tune_on_training_data.py zo-o2nc, tuning seeds; K = 4, h = 4, T = 6), passes "
                  "4 / 6: IJCNN1 gap ratio to dp-sgd 1.50 / 1.36, adult train accuracy 0.8341 / 0.8348, "
                  "synthetic gap ratio 26.1 / 27.8 (h = 8, B2 = 128, 2 passes: 2.97, 0.8317, "
                  "58.8); 4 for a third less work; the 20,000-record rule as adaptive-spider's and "
                  "perturbed-sgd's; below 20,000 records ceil(20,000/n) passes, at most 16 (schedule.practical_passes), "
                  "one block each (blocks): validation splits (experiments/targets_models_learn.py --validation, "
                  "4 seeds, one block per pass) passes 4 / 16 -> eps = 1 accuracy 0.654 / 0.794 (breast-cancer), "
                  "0.567 / 0.574 (digits), 0.578 / 0.620 (synthetic); eps = 4: 0.846 / 0.912, 0.767 / 0.788, "
                  "0.749 / 0.758", low=1),
        ParamSpec("output", "str", None, "which block average to return",
                  "Alg 3 l.11: w-bar^k with k ~ Uniform[K] ('random', theory); practical: 'last' (the "
                  "random block is on average halfway along the path: on adult it was often near w = 0)",
                  choices=("random", "last", "average")),
    )

    # ----------------------------------------------------------------- plan
    def plan(self) -> dict:
        """The run's public sizes: T, K, batches, D, L, h, C (no data read but n, d).

        ``preset=theory``: Thm 4.9 / App. E.  ``practical`` (each unset
        parameter): h = PRACTICAL_H, C = PRACTICAL_CLIP, symmetric DIFF and,
        for ``vr``, B2 = practical_batch2(M, K), K = PRACTICAL_BLOCKS (at most
        what the data holds), T = M/(2 K B2) and B1 = T B2 - Thm 4.9's split (half the
        records in GRADs, B1 = T + 1 at B2 = 1) with K chosen instead of T:
        the run's path is at most K h, and Thm 4.9's T at eps = 1 on adult
        (4818) leaves K = 3, a path of 3 h = 0.3 from w = 0."""
        pb = self.problem
        M, d = pb.n, pb.d
        p = self.p
        theory = p["preset"] == "theory"
        h = float(p["smoothing"] if p["smoothing"] is not None else (0.1 if theory else PRACTICAL_H))
        L = float(p["lipschitz"]) if p.get("lipschitz") is not None else float(pb.constants()[0])
        C = p["record_clip"] if p["record_clip"] is not None else (None if theory else PRACTICAL_CLIP)
        diff = p["diff"] or ("paper" if theory else "symmetric")
        oracle = p["oracle"]
        rho = paper_rho(self.accountant.epsilon_budget, self.accountant.delta)
        T = p["block_length"]
        B2 = p["batch2"]
        # practical K: PRACTICAL_BLOCKS per pass on PASSES_MIN_RECORDS records or more; one block per pass
        # below, where the run makes many passes (a block's noise is the same for any K: fewer, larger
        # batches carry more signal against it)
        K0 = int(p["blocks"] or (PRACTICAL_BLOCKS if M >= PASSES_MIN_RECORDS else 1))
        B = int(p["batch"] or (1 if theory else practical_batch2(M, K0)))
        if oracle == "vr" and not theory:
            B2 = int(B2 or practical_batch2(M, K0))
        if not theory and T is None:  # K chosen, T follows (vr: half the records in GRADs)
            T = max(1, M // (2 * K0 * B2)) if oracle == "vr" else max(1, M // (K0 * B))
        if T is None:  # the formula, capped so that one block fits in the data (K >= 1)
            cap = M // 2 if oracle == "vr" else M // B
            T = max(1, min(default_block_length(M, d, L, h, float(p["f_gap"]), rho, oracle), cap))
        T = int(T)
        if oracle == "vr":
            B2 = int(B2 or 1)
            B1 = int(p["batch1"] or (T + 1 if theory else T * B2))
            per_block = B1 + B2 * (T - 1)
        else:
            B1 = B2 = B
            per_block = B1 * T
        K = int(p["blocks"] or M // per_block)
        if K < 1 or K * per_block > M:
            raise ParameterError(
                f"zo-o2nc needs K x {per_block} records (T={T}, {oracle} oracle) and the data has {M}: "
                "lower block_length/blocks/batches")
        D = float(p["osd_radius"]) if p["osd_radius"] is not None else h / T
        out = p["output"] or ("random" if theory else "last")
        J = int(p["directions"]) if p["directions"] is not None else (d if theory else min(d, PRACTICAL_DIRECTIONS))
        return {"directions": min(J, d), "oracle": oracle, "T": T, "K": K, "B1": B1, "B2": B2, "D": D, "h": h, "L": L,
                "record_clip": C, "diff": diff, "output": out, "rho": rho, "records_per_block": per_block}

    def passes(self) -> int:
        """Passes over the records (:func:`schedule.practical_passes`: the
        parameter, else 1 under preset=theory, else :data:`PASSES` from
        20,000 records on, up to 16 below)."""
        return practical_passes(self.p["passes"], self.p["preset"], self.problem.n, PASSES)

    def noise_rule(self) -> str:
        """``calibrated`` or ``paper``: the parameter, else ``paper`` under
        preset=theory (Cor 4.4's sigma; App. E's for the naive oracle)."""
        given = self.p["noise_rule"]
        return given if given is not None else ("paper" if self.p["preset"] == "theory" else "calibrated")

    def paper_sensitivity(self, plan) -> float:
        """s_max of Cor 4.4: the largest sensitivity any add of a block may have,
        max{s_1, s_t} with s_1 = f c / B1 (GRAD, Lemma 3.1) and s_t = f c
        |w_t - w_t-1| / (B2 h) <= 2 f c / (B2 T) (DIFF, Lemma 3.2, Remark 4.1:
        |w_t - w_t-1| <= 2D = 2h/T), c = min(d L, C) the per-record bound (f = 2,
        replace-one: 4 d L/(B2 T) as the paper writes it).  The naive oracle's
        every add: f c / B."""
        f = float(self.accountant.sensitivity_factor)
        d = self.problem.d
        c = d * plan["L"] if plan["record_clip"] is None else min(d * plan["L"], float(plan["record_clip"]))
        if plan["oracle"] != "vr":
            return f * c / plan["B1"]
        return max(f * c / plan["B1"], 2.0 * f * c / (plan["B2"] * plan["T"]))

    def _noise_multiplier(self, plan) -> float:
        """The noise multiplier z of every add.

        ``calibrated``: the worst-case record is in one add of one phase (its
        batch), whose exposure is the mechanism's ``record_event(z, horizon,
        "disjoint", ...)``; blocks are disjoint, so nothing composes across k
        within a pass; z is the smallest whose exposure, composed over the
        passes, fits (eps, delta).

        ``paper`` (Cor 4.4, the literal formula): every tree node gets
        sigma = sqrt(2 ln T) s_max / rho, rho the paper's privacy parameter for
        the budget (:func:`paper_rho`) - as node std = z x the node's
        sensitivity, z = sqrt(2 ln T) / rho with every add declared at s_max
        (:meth:`paper_sensitivity`, an upper bound of its enforced sensitivity).
        Naive oracle (App. E): sigma = s / rho, the Gaussian mechanism of
        (alpha, alpha rho^2/2)-RDP, z = 1 / rho.  The accountant charges what the
        mechanism releases; where the literal sigma does not fit the budget
        (Thm 4.3's |OUT(q)| <= 2 ln T fails for T < 7, so its sigma is too small)
        the run refuses in one line before any release (T = 1: sigma = 0)."""
        T = plan["T"]
        horizon = T if plan["oracle"] == "vr" else 1  # naive: a fresh phase per step (Alg 6)
        passes = self.passes()  # a record is in one add of each pass: one pass's exposure, composed

        def plan_event(z):
            return self_composed(self.noise.record_event(z, horizon, "disjoint", horizon), passes)

        if self.noise_rule() == "calibrated":
            return self.accountant.calibrate(plan_event)
        if plan["oracle"] == "vr" and self.noise.name != "tree":
            raise ParameterError("zo-o2nc: noise_rule=paper (preset=theory) is Cor 4.4's tree noise (Alg 5): "
                                 "use --noise tree")
        rho = plan["rho"]
        z = (math.sqrt(2.0 * math.log(T)) if plan["oracle"] == "vr" else 1.0) / rho
        acc = self.accountant
        if z <= 0 or not acc.fits(plan_event(z)):
            eps = acc.epsilon_of_plan(plan_event(z)) if z > 0 else math.inf
            raise ParameterError(
                f"zo-o2nc: the paper's noise (noise_rule=paper) sigma = sqrt(2 ln T) s_max/rho at T={T} spends "
                f"eps={eps:.4g} > budget {acc.epsilon_budget:g} (Thm 4.3 counts 2 ln T = {2 * math.log(T):.3g} tree "
                f"levels, the tree has {int(T).bit_length()}, over {passes} pass(es)); nothing was released: give a "
                f"longer block_length, fewer passes or noise_rule=calibrated")
        acc.reserve(plan_event(z))
        return z

    # ------------------------------------------------------------------ run
    def run(self) -> RunOutput:
        if self.noise is None:
            raise ParameterError("zo-o2nc needs a noise mechanism (--noise tree|gaussian|...)")
        pb = self.problem
        plan = self.plan()
        T, K, D = plan["T"], plan["K"], plan["D"]
        z = self._noise_multiplier(plan)
        # the literal rule declares every add at the paper's bound s_max (>= its enforced sensitivity)
        s_paper = self.paper_sensitivity(plan) if self.noise_rule() == "paper" else None
        factor = float(self.accountant.sensitivity_factor)
        oracle = ZerothOrderOracle(pb, smoothing=plan["h"], lipschitz=plan["L"],
                                   rng=self.rng("zo-o2nc directions"), record_clip=plan["record_clip"],
                                   symmetric_diff=plan["diff"] == "symmetric", directions=plan["directions"])
        passes = self.passes()
        access = Passes(pb.n, self.rng("zo-o2nc permutation"), passes)
        blocks = K * passes  # K blocks per pass
        s_rng = self.rng("zo-o2nc interpolation")
        vr = plan["oracle"] == "vr"
        mech = self.noise(dim=pb.d, noise_multiplier=z, horizon=T if vr else 1, accountant=self.accountant,
                          seed=self.seed_sequence("zo-o2nc noise"))
        fixed_step = self.p.get("step")
        x = self.initial_point()
        output = OutputChoice(plan["output"], blocks, self.rng("zo-o2nc output"), x)
        traj = Trajectory(blocks, checkpoints=blocks)  # every block average w-bar^k is kept
        traj.log(0, x)
        self.block_iterates: list[np.ndarray] = []
        # the Goldstein diagnostic's iterates: GOLDSTEIN_POINTS evenly spaced steps of every block (public
        # indices), evaluated on the data only after the run (pipeline diagnostics, non-private)
        gold_t = set(np.unique(np.linspace(1, T, min(T, GOLDSTEIN_POINTS)).round().astype(int)).tolist())
        gold: list[np.ndarray] = []
        clipped = 0
        s_max = 0.0
        first = True
        for k in range(1, blocks + 1):
            if k > 1 and (k - 1) % K == 0:  # the next pass (every block restarts OSD and the running sum)
                access.next_pass()
            delta = np.zeros(pb.d)
            sumsq = 0.0
            g = None
            w_prev = None
            wsum = np.zeros(pb.d)
            gsum = np.zeros(pb.d)
            kept = np.empty((T, pb.d)) if self.keep_iterates else None
            gk = []
            if vr and not first:
                mech.reset()
            for t in range(1, T + 1):
                if t >= 2:  # OSD on the linear losses <g~_s, .>, restarted every block
                    eta = fixed_step if fixed_step is not None else (D / math.sqrt(sumsq) if sumsq > 0 else 0.0)
                    delta = project_ball(delta - eta * g, D)
                w = x + float(s_rng.random()) * delta
                x = x + delta
                if vr:
                    if t == 1:
                        idx, part = access.take(plan["B1"])
                        est = oracle.grad(w, idx, part, factor=factor)
                    else:
                        idx, part = access.take(plan["B2"])
                        est = oracle.diff(w, w_prev, idx, part, factor=factor)
                else:
                    if not first:
                        mech.reset()
                    idx, part = access.take(plan["B1"])
                    est = oracle.naive(w, idx, part, factor=factor)
                first = False
                if s_paper is not None and est.sensitivity > s_paper * (1 + 1e-9):
                    raise RuntimeError(f"zo-o2nc: an add's sensitivity {est.sensitivity:g} exceeds Cor 4.4's "
                                       f"bound {s_paper:g} (a bug: Remark 4.1's |w_t - w_t-1| <= 2D)")
                g = mech.add(est.value, est.sensitivity if s_paper is None else s_paper, part)
                sumsq += float(g @ g)
                clipped += est.clipped
                s_max = max(s_max, est.sensitivity)
                w_prev = w
                wsum += w
                gsum += g
                if kept is not None:
                    kept[t - 1] = w
                if t in gold_t:
                    gk.append(w.copy())
            wbar = wsum / T
            if kept is not None:
                self.block_iterates.append(kept)
            gold.append(np.array(gk))
            output.see(k, wbar)
            traj.log(k, wbar, noisy_grad_norm=float(np.linalg.norm(gsum / T)), end_norm=float(np.linalg.norm(x)))
            self.progress(k, blocks)
        traj.finish(blocks, wbar)
        out = output.result(wbar)
        info = {
            "noise": self.noise.name, "noise_multiplier": z, "noise_rule": self.noise_rule(),
            "paper_sensitivity": s_paper,
            "oracle": plan["oracle"], "directions": plan["directions"], "block_length": T, "blocks": K,
            "passes": passes, "passes_made": access.number,
            "batch1": plan["B1"],
            "batch2": plan["B2"], "smoothing": plan["h"], "osd_radius": D, "lipschitz": plan["L"],
            "record_clip": plan["record_clip"], "diff": plan["diff"], "preset": self.p["preset"],
            "output": plan["output"],
            "paper_rho": plan["rho"], "max_sensitivity": s_max,
            "noise_std_max_node": z * (s_max if s_paper is None else s_paper),
            "clipped_terms": clipped, "function_evaluations": oracle.function_evaluations,
            "epsilon_spent": self.accountant.epsilon_spent, "trajectory": traj,
            # evaluated after the run by the pipeline (metrics.goldstein), then dropped from the record
            "goldstein": {"iterates": gold, "block": (None if plan["output"] == "average" else
                                                      int(output.chosen_step(blocks)) - 1),
                          "radius": plan["h"], "points_per_block": len(gold_t)},
        }
        return RunOutput(out, blocks * T, access.used, 0, traj.series, info)


@hookimpl
def dpreg_register_algorithms(register):
    register(ZoO2NC.name, ZoO2NC, summary=ZoO2NC.summary)
