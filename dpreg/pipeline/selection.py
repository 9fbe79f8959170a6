"""Private output selection (``--select``): the selector's pure-DP release
charged before the run, then a pick among the run's checkpoint iterates."""
from __future__ import annotations

import inspect

import numpy as np

from ..errors import DpregError


def prepare_selection(sel_cls, opts, problem, accountant, cfg, rng):
    """Build the output selector and charge its pure-DP release now, before the
    run (the selector gets a :class:`~dpreg.accounting.Prepaid` view that
    matches its own charge against this one)."""
    from ..accounting import Prepaid, pure_dp_event

    eps_sel = float(cfg.select_share) * float(cfg.epsilon)
    event = pure_dp_event(eps_sel)
    selector = sel_cls(problem, accountant=Prepaid(accountant, event), rng=rng, **opts)
    accountant.charge(event, None, label=f"{cfg.select} output selection (charged before the run)")
    return selector, eps_sel


def select_output(selector, eps_sel, out, w, cfg):
    """Privately pick the output among the run's checkpoint iterates and its
    final point (candidates are post-processing of private releases).  An
    AboveThreshold scan that passes no candidate returns the final point."""
    traj = out.info.get("trajectory")
    cands = [np.asarray(v, dtype=float) for v in (traj.iterates if traj is not None else [])]
    if not cands or not np.array_equal(cands[-1], w):
        cands.append(w)
    kw = {"alpha": float(cfg.alpha)} if "alpha" in inspect.signature(selector.select).parameters else {}
    res = selector.select(cands, eps_sel, **kw)
    if not selector.accountant.used:  # the selector must have charged exactly the prepaid event
        raise DpregError(f"selector {cfg.select!r} did not charge its release as planned")
    chosen = w if res.index is None else np.asarray(res.w, dtype=float)
    info = {"selector": cfg.select, "epsilon": eps_sel, "candidates": len(cands),
            "index": res.index, "steps": (list(traj.steps) + ([] if len(traj.steps) == len(cands) else [None]))
            if traj is not None else None,
            "fallback_to_last": res.index is None}
    info.update({k: v for k, v in res.info.items() if k != "candidates"})
    return chosen, info
