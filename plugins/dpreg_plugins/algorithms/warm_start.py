"""``warm-start``: the warm-start meta-algorithm (Alg. 2 for ERM, Alg. 4 for the
population loss, of lowy-ullman-wright-2024-warm-start.txt).

Stage A ("warm") finds a point with small excess risk privately with budget
``(eps1, delta1)``; stage B ("then") - any registered algorithm that honours
:attr:`dpreg.interfaces.Algorithm.init` - runs from A's output with the rest.
Both stages charge the run's ONE accountant:

* A runs in a :class:`~dpreg.accounting.BudgetView` limited to
  ``(eps1, delta1) = (warm_fraction * eps, delta1_fraction * delta)`` (Alg. 2:
  (eps/2, delta/2)), so A alone is (eps1, delta1)-DP, as the theorem needs;
* ``split=tight`` (default): B calibrates against what the shared accountant
  has left, so the composition of A and B (tight, RDP or PLD) spends exactly
  the run's (eps, delta);  ``split=basic``: B gets its own view of
  (eps - eps1, delta - delta1) as in Alg. 2 (the accountant's tight total is
  then below eps).
* optional ``select=above-threshold``: AboveThreshold over B's recorded
  iterates with ``select_fraction * eps`` (pure), charged *before* B runs (a
  reservation), so B cannot spend it.

``warm`` may be ``exponential`` (Def. 4.1: the exponential mechanism over a
seeded random net of the ball of radius D, pure eps1-DP), any registered
algorithm (``dp-sgd``: Alg. 3, the quasar-convex warm start of Cor. 5.3; the
section 9 experiment), or ``none`` (B alone, e.g. to add a private SOSP
selection to any algorithm).  ``then=none`` returns A's output.

Neighbouring relation: the stages' common relation; if they differ,
``replace-one`` (an add-remove stage is then accounted under replace-one with
sensitivity factor 2: dp-accounting's PLD supports Poisson-subsampled
Gaussians so, RDP does not - use ``--accountant pld``).  A replace-one stage is
never run under an add-remove accountant.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dpreg import hookimpl
from dpreg.accounting import pure_dp_event
from dpreg.errors import DpregError, ParameterError
from dpreg.interfaces import Algorithm, Participation, RunOutput, charge
from dpreg.params import PRACTITIONER, ParamSpec, bind, parse_pairs
from dpreg.trajectory import Trajectory

SPECIAL = ("exponential", "none")


def _sub_params(raw: str | None) -> dict:
    if not raw:
        return {}
    return parse_pairs([p for p in raw.split(",") if p.strip()])


def _stage_cls(name: str):
    from dpreg.registry import get_registry

    return get_registry().get("algorithm", name)


class WarmStart(Algorithm):
    """Warm start A (exponential mechanism or a DP algorithm) then B from A's output."""

    name = "warm-start"
    summary = "warm-start meta-algorithm: DP warm start A (exponential / dp-sgd) then any algorithm B from its output"
    paper = "lowy-ullman-wright-2024-warm-start.txt, Algorithms 2 and 4 (Def. 4.1 exponential warm start)"
    uses_noise = True  # passed to the stages that keep a running sum
    data_access = "resample"
    relation = "replace-one"
    honours_init = True  # passed to stage A
    practitioner = {k: "it is a meta-algorithm: give its stages' parameters in warm_params / then_params "
                       "(e.g. --param then_params=step=0.01,steps=50)" for k in PRACTITIONER}
    @classmethod
    def release_mechanisms(cls, info: dict, noise: str | None) -> list[dict]:
        """Stage A's mechanisms (the exponential mechanism's epsilon share, or
        the warm algorithm's own), stage B's, and the above-threshold
        selection's epsilon share, each named by its stage."""
        from dpreg.registry import get_registry

        reg = get_registry()
        out: list[dict] = []
        for stage, key, what in (("warm", "warm_info", "warm start"), ("then", "then_info", "stage B")):
            name, sub = info.get(stage), info.get(key)
            if not name or name == "none" or not isinstance(sub, dict):
                continue
            if name == "exponential":
                out.append({"what": f"{what}: exponential mechanism over a net of candidates",
                            "noise": "exponential mechanism (pure epsilon-DP)",
                            "epsilon_share": float(sub.get("epsilon", 0.0))})
                continue
            algo = reg.get("algorithm", name)
            for m in algo.release_mechanisms(sub, sub.get("noise") or (noise if algo.uses_noise else None)):
                out.append(dict(m, what=f"{what} ({name}): {m['what']}"))
        sel = info.get("selection")
        if isinstance(sel, dict) and sel.get("epsilon"):
            out.append({"what": "above-threshold choice among stage B's iterates",
                        "noise": "sparse vector (pure epsilon-DP)", "epsilon_share": float(sel["epsilon"])})
        return out

    params = (
        ParamSpec("warm", "str", "dp-sgd", "warm-start algorithm A: 'exponential', 'none' or a registered algorithm",
                  "Alg. 2: A = exponential mechanism (Def. 4.1, Cor. 4.3) or DP-SGD (Alg. 3, Cor. 5.3)"),
        ParamSpec("then", "str", "dp-spider", "stationary-point finder B (a registered algorithm honouring init) or 'none'",
                  "Alg. 2: B = DP-SPIDER (Alg. 1) or DP-SPIDER-SOSP"),
        ParamSpec("warm_fraction", "float", 0.5, "eps1 / eps: the share of epsilon for A",
                  "Alg. 2: eps1 = eps/2; App. G tunes eps1 in {eps/4, eps/2}", low=0, high=1, low_open=True),
        ParamSpec("delta1_fraction", "float", 0.5, "delta1 / delta: the share of delta for A",
                  "Alg. 2: delta1 = delta/2", low=0, high=1, low_open=True),
        ParamSpec("split", "str", "tight", "budget of B: 'tight' (what the accountant has left) or 'basic' "
                  "((eps - eps1, delta - delta1) of its own)", "Lemma 2.6 (basic composition)",
                  choices=("tight", "basic")),
        ParamSpec("warm_params", "str", "", "parameters of A as 'k=v,k=v' (e.g. 'step=0.0005,steps=50')",
                  "App. G (eta_sgd, T1)"),
        ParamSpec("then_params", "str", "", "parameters of B as 'k=v,k=v' (e.g. 'step=0.005,steps=50')",
                  "App. G (eta_spider, q, T2)"),
        ParamSpec("net_size", "int", 1000, "exponential warm start: points of the random net of the ball",
                  "N <= (2 D eps n / d)^d for the paper's D d/(eps n)-net (section 4)", low=1),
        ParamSpec("net_radius", "float", None, "exponential warm start: radius D of the ball",
                  "D: the loss's feasible radius (else 1)", low=0, low_open=True),
        ParamSpec("lo", "float", None, "exponential warm start: lower clip of per-record loss values",
                  "Delta_u = hi - lo (Def. 4.1 uses 2 L D); default: min of phi over |m| <= D"),
        ParamSpec("hi", "float", None, "exponential warm start: upper clip of per-record loss values",
                  "default: max of phi over |m| <= D"),
        ParamSpec("select", "str", "none", "private selection among B's recorded iterates",
                  "AboveThreshold (perturbed-sgd-adaptive-spider-distributed-sosp.txt section 3, Alg. 4)",
                  choices=("none", "above-threshold")),
        ParamSpec("select_fraction", "float", 0.1, "share of epsilon for the selection (pure)",
                  "practical default eps/10", low=0, high=1, low_open=True),
        ParamSpec("alpha", "float", None, "alpha of the alpha-SOSP test of the selection (required with select)",
                  "|grad| <= alpha, lambda_min >= -sqrt(rho alpha)", low=0, low_open=True),
        ParamSpec("select_check", "str", "sosp", "selection test: 'sosp' (d <= 300) or 'fosp'",
                  "Alg. 4 line 7", choices=("sosp", "fosp")),
        ParamSpec("preset", "str", "practical", "practical split or the literal Alg. 2",
                  "'theory': Alg. 2 as written - A with (eps/2, delta/2), B with its own (eps/2, delta/2) "
                  "(warm_fraction = delta1_fraction = 1/2, split=basic: Lemma 2.6), and preset=theory passed "
                  "to every stage that offers it (dp-sgd: Prop. D.1); a stage without one (dp-spider: the paper "
                  "states no formulas for it) keeps its defaults, listed in the run info as theory_missing. "
                  "Overrides warm_fraction, delta1_fraction and split",
                  choices=("practical", "theory")),
    )

    # ------------------------------------------------------------ composition
    @classmethod
    def _stages(cls, params) -> list:
        out = []
        for key in ("warm", "then"):
            name = params.get(key) or "none"
            if name in SPECIAL:
                continue
            if name == cls.name:
                raise ParameterError("warm-start cannot use itself as a stage")
            out.append(_stage_cls(name))
        return out

    @classmethod
    def requirements(cls, params) -> dict:
        out: dict = {}
        for c in cls._stages(params):
            out.update(c.requirements({}))
        return out

    @classmethod
    def relation_for(cls, params) -> str:
        rels = {c.relation for c in cls._stages(params)}
        return rels.pop() if len(rels) == 1 else "replace-one"

    def _run_stage(self, name: str, raw: str, accountant, seed: int | None, init, offset: int):
        cls = _stage_cls(name)
        given = _sub_params(raw)
        if self.p.get("preset") == "theory":
            if any(s.name == "preset" for s in cls.params):
                given.setdefault("preset", "theory")
            else:
                self.theory_missing.append(name)
        params = bind(cls.params, given, f"stage {name!r} of warm-start")
        if cls.relation == "replace-one" and accountant.relation == "add-remove":
            raise ParameterError(f"stage {name!r} is accounted as replace-one; it cannot run under an "
                                 f"add-remove accountant")
        if init is not None and not cls.honours_init:
            raise ParameterError(f"algorithm {name!r} does not honour an initial point (honours_init): "
                                 f"it cannot be the stage after a warm start")
        algo = cls(self.problem, params, noise=self.noise, accountant=accountant, seed=seed,
                   progress=lambda s, t: self.progress(offset + int(50 * s / max(t, 1)), 100))
        algo.init = None if init is None else np.array(init, dtype=float)
        try:
            return algo.run()
        except DpregError as exc:
            if "cannot account" in str(exc):
                raise DpregError(f"warm-start stage {name!r} ({cls.relation}) under a {accountant.relation} "
                                 f"accountant: {exc}; try --accountant pld") from None
            raise

    def run(self) -> RunOutput:
        pb, acc, p = self.problem, self.accountant, self.p
        self.theory_missing: list = []
        if p.get("preset") == "theory":  # Alg. 2 as written
            p.update(warm_fraction=0.5, delta1_fraction=0.5, split="basic")
        warm, then = p["warm"] or "none", p["then"] or "none"
        self._stages(p)  # validates names
        eps, delta = acc.epsilon_budget, acc.delta
        eps1, delta1 = p["warm_fraction"] * eps, p["delta1_fraction"] * delta
        eps_sel = p["select_fraction"] * eps if p["select"] != "none" else 0.0
        if p["select"] != "none" and p["alpha"] is None:
            raise ParameterError("warm-start: select=above-threshold needs the accuracy of its alpha-SOSP test: "
                                 "add --param alpha=A (e.g. alpha=0.1)")
        if eps1 + eps_sel >= eps and warm != "none" and then != "none":
            raise ParameterError(
                f"warm-start: warm_fraction={p['warm_fraction']:g} + select_fraction="
                f"{p['select_fraction'] if eps_sel else 0:g} must leave budget for stage B ({then}): lower "
                f"warm_fraction (Alg. 2 uses 0.5, App. G 0.25) or select_fraction so that they sum below 1")
        info: dict = {"warm": warm, "then": then, "split": p["split"]}
        traj = Trajectory(1)
        traj.steps, traj.iterates = [], []
        iterations = records = evals = 0

        # ---- stage A
        w0 = self.init
        if warm == "exponential":
            from dpreg_plugins.selectors.private_selection import ExponentialSelector

            view = acc.view(eps1, delta1)
            sel = ExponentialSelector(pb, accountant=view, rng=self.rng("warm-start exponential"),
                                      lo=p["lo"], hi=p["hi"], radius=p["net_radius"])
            net = sel.net(p["net_size"])
            s = sel.select(net, eps1, fit=True, label="warm-start exponential mechanism")
            w0 = np.asarray(s.w, dtype=float)
            info["warm_info"] = dict(s.info, index=s.index, epsilon=view.epsilon_spent)
            traj.steps.append(0)
            traj.iterates.append(w0.copy())
            records += pb.n
            evals += pb.n * len(net)
        elif warm != "none":
            view = acc.view(eps1, delta1)
            outA = self._run_stage(warm, p["warm_params"], view, self.child_seed("warm-start stage A"), self.init, 0)
            w0 = np.asarray(outA.w, dtype=float)
            ta = outA.info.pop("trajectory", None)
            if ta is not None:
                traj.steps += list(ta.steps)
                traj.iterates += list(ta.iterates)
                for k, v in ta.series.items():
                    traj.series[f"warm/{k}"] = list(v)
            info["warm_info"] = dict(outA.info, epsilon=view.epsilon_spent, delta=view.delta)
            iterations += outA.iterations
            records += outA.records_used
            evals += outA.gradient_evaluations
        offset = iterations
        if w0 is not None:
            info["warm_output"] = [float(v) for v in w0]

        # ---- reservation for the selection, then stage B
        if eps_sel > 0:
            from dpreg_plugins.selectors.private_selection import fit_pure_epsilon

            eps_sel = fit_pure_epsilon(acc, eps_sel)
            charge(acc, pure_dp_event(eps_sel), Participation.all(), label="above-threshold (reserved)")
        w = w0 if w0 is not None else np.zeros(pb.d)
        candidates = [w]
        if then != "none":
            accB: Any  # a view of the budget, or the accountant itself
            if p["split"] == "basic" and warm != "none":
                accB = acc.view(eps - eps1 - eps_sel, delta - delta1)
            else:
                accB = acc
            outB = self._run_stage(then, p["then_params"], accB, self.child_seed("warm-start stage B"), w0, 50)
            w = np.asarray(outB.w, dtype=float)
            tb = outB.info.pop("trajectory", None)
            if tb is not None:
                traj.steps += [offset + s for s in tb.steps]
                traj.iterates += list(tb.iterates)
                for k, v in tb.series.items():
                    traj.series[f"then/{k}"] = list(v)
                candidates = list(tb.iterates)
            else:
                candidates = [w]
            info["then_info"] = dict(outB.info)
            if accB is not acc:
                info["then_info"]["epsilon"] = accB.epsilon_spent
            iterations += outB.iterations
            records += outB.records_used
            evals += outB.gradient_evaluations

        # ---- optional private SOSP selection among B's iterates
        if eps_sel > 0:
            from dpreg_plugins.selectors.private_selection import AboveThresholdSelector, above_threshold_scan

            at = AboveThresholdSelector(pb, accountant=acc, rng=self.rng("warm-start above-threshold"),
                                        check=p["select_check"])
            u = at.deficits(candidates, p["alpha"])
            k = above_threshold_scan(u, eps_sel, at.rng)  # charged above (reservation)
            info["selection"] = {"index": k, "candidates": len(candidates), "epsilon": eps_sel}
            if k is not None:
                w = np.asarray(candidates[k], dtype=float)
            evals += pb.n * len(candidates)

        traj.finish(iterations, w)
        self.progress(100, 100)
        info["trajectory"] = traj
        info["stage_budget"] = {"warm": [eps1, delta1], "total": [eps, delta]}
        info["preset"] = p.get("preset", "practical")
        if p.get("preset") == "theory":
            info["theory_missing"] = list(self.theory_missing)
        return RunOutput(w, iterations, records, evals, traj.series, info)


@hookimpl
def dpreg_register_algorithms(register):
    register(WarmStart.name, WarmStart, summary=WarmStart.summary)
