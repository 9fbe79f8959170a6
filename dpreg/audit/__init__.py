"""Empirical privacy audit: a statistical *lower* bound ``epsilon_lower`` on
the epsilon a noise mechanism, an algorithm or a selector really has, to set
beside the epsilon its accountant claims.  With probability at least
``confidence`` (over the audit's own randomness, and under the assumptions
stated for the method used) a target that really is (eps, delta)-DP gets
``epsilon_lower <= eps``; so ``epsilon_lower > epsilon_claimed`` is evidence of
a privacy bug.  A low bound proves nothing; a high one is a finding.

Two audits, :func:`run_audit` runs either.

End to end (the default)
========================

1. Two neighbouring data sets that differ in one crafted **canary** record
   (:func:`canary_data`): ``n - 1`` *null* records (``x = 0``, ``y = +1``:
   their per-record gradient and gradient difference are exactly zero for a
   loss without a data-independent term, e.g. ``logistic``) plus the canary
   ``x = c e_1``, ``y = +1``.  The neighbour replaces the canary according to
   the algorithm's neighbouring relation: by its mirror ``y = -1`` under
   ``replace-one`` (opposite gradient: the worst case for a clipped sum), by a
   null record under ``add-remove`` (output-equivalent to removing it while
   the public size ``n`` stays the same).  ``c = 1`` is a legal record;
   ``canary_norm`` above 1 feeds one that bypassed the loaders' scaling, to
   show that clipping in the kernels bounds its influence.
2. ``trials`` runs on each data set, each with its own seed and a fresh
   accountant, through the target's own code: a noise mechanism alone
   (``steps`` adds holding the canary's contribution, sensitivity 1, in every
   add or in the first only), an algorithm (the registered class on an
   in-memory problem), or a selector (its own ``select`` on a fixed candidate
   list: see *Selectors* below).
3. A distinguishing statistic of what was released: for a mechanism, a
   linear statistic of the whole sequence of releases (Fisher's
   discriminant: the likelihood-ratio test for Gaussian noise); for an
   algorithm, the same over every noisy prefix sum its noise mechanism
   returned, projected on ``e_1`` (at most :data:`MAX_RELEASES`), and the
   final ``w[0]``; for a selector, the event "returned index k" (or its
   complement).  Statistic, threshold and direction are chosen on the first
   half of each data set's runs; the error rates are counted on the second
   half only, so the bound is valid.
4. The bound: ``method="clopper-pearson"`` (default, assumption-free) turns
   Clopper-Pearson upper bounds on the false-positive and false-negative
   rates (each at level ``(1 - confidence)/2``) into a lower bound on epsilon
   through ``FPR + e^eps FNR >= 1 - delta`` and ``FNR + e^eps FPR >= 1 -
   delta``.  ``method="gaussian"`` (a mechanism alone: data-independent
   Gaussian noise on a deterministic signal, so a linear statistic is Gaussian
   with the same variance under both data sets) bounds the shift-to-noise
   ratio ``mu`` from below (Welch t on the mean difference, chi-square on the
   pooled sigma, the error split between them) and reports the exact epsilon
   of a Gaussian mechanism with that ``mu`` (Balle & Wang 2018).  It needs far
   fewer trials than threshold tests at small epsilon, and rests on the
   Gaussian model.

The end-to-end audit checks what the white-box one cannot: clipping (a huge
canary), the neighbouring relation the algorithm declares (``neighbour
"remove"``: the canary removed, ``n - 1`` records), subsampling, selectors.
Its power is limited by the canary and by estimating the shift: a real
record's gradient differences are far below their clipping bound, the
iterate only half shows the noise, and the factorisation with its column
norm dropped (a sensitivity under-stated by 1.31) gets ``epsilon_lower``
0.44 at 1000 runs with ``method="gaussian"`` and only reaches its claimed 1
at about 4000 (Clopper-Pearson: 0 at 1000).

White box (``white_box=True``)
==============================

The audit measures the target's Gaussian releases directly, with the canary
as a *worst-case increment*, and bounds each against the epsilon the
accountant was charged for exactly those releases.

* **Noise mechanisms** (a mechanism alone, or the mechanism of an algorithm
  that keeps a running sum).  A schedule of mechanism calls - per instance its
  dimension, noise multiplier and horizon, and per phase the ``(sensitivity,
  participation)`` of every add - is replayed into fresh instances with zero
  increments except the canary's, ``s e_1`` with ``s`` the sensitivity the add
  declares: in one disjoint add, or in every add of a phase of full-batch
  adds.  For a mechanism alone the schedule is one phase of ``steps`` adds
  whose sensitivities follow ``schedule`` (``"constant"``, or
  ``"decreasing"``: 1/t, under which a mechanism that forgets an earlier,
  larger sensitivity shows); for an algorithm it is recorded from one run on
  the canary data set (the first :data:`~dpreg.audit.whitebox.MAX_REPLAY_ADDS`
  adds).  The mechanism's promise is that any increments within the declared
  sensitivities cost a record what it charges; a replay is one such sequence.
  Poisson-sampled adds cannot hold the canary (their amplification needs a
  sampling the replay does not repeat).
* **Releases outside a mechanism** - those an algorithm reports through
  :meth:`~dpreg.interfaces.Algorithm.released` (the trust regions' gradient
  and Hessian).  The problem's canary contributes exactly ``+- clip e_1`` to
  every clipped gradient sum and ``+- clip e_1 e_1^T`` to every clipped data
  Hessian, at whatever bound the algorithm asks the kernel for (its mirror
  the opposite sign under replace-one, a null record under add-remove): the
  largest change clipping allows, so a noise scale set from an under-stated
  sensitivity shows.  Run with the same seed on both data sets, the runs agree
  until the canary changes a release; the releases made before the
  trajectories part (those whose shift is the same in every calibration pair:
  for the trust region, the first step's gradient and Hessian) are audited.

Protocol (:func:`~dpreg.audit.whitebox.measure`).  Runs without the canary on
a calibration half give the noise covariance of every phase's releases; for
every place the canary can go (each disjoint add, each full-batch phase, each
release and the set of them) the claimed epsilon is that of the events the
accountant was charged for the canary there (composed in a fresh accountant of
the audit's kind), the statistic is the likelihood-ratio direction
``w = S^-1 m`` of the canary's shift ``m`` whitened by the estimated
covariance ``S`` (for the tree mechanisms and the factorisation, the
correlation of their prefix releases), and the place whose estimated epsilon
exceeds its claim the most is chosen.  On the measurement half each seed runs
without and with the canary there; their difference must be the same shift in
every run (else the audit stops: the releases are not data-independent noise
plus the canary's contribution).  ``method="gaussian"`` (the white-box
default): the shift of ``w . y`` is known, its noise sigma is bounded above by
the chi-square bound on the measured runs' variance, so ``mu_lower =
shift / sigma_upper`` and ``epsilon_lower`` is the exact epsilon of a Gaussian
mechanism with that mu.  Needed assumption: the mechanism's noise is
Gaussian (checked: its shift, its independence from the data; assumed: the
normal law of the draws, which every built-in mechanism takes from
``standard_normal``).  ``method="clopper-pearson"``: a threshold test of
``w . y`` chosen on the calibration runs, counted on the measured pairs -
assumption-free but weak at small epsilon.

Power.  The known shift leaves only the noise to estimate (a chi-square
bound with ``trials / 2`` degrees of freedom, about 1.04 times sigma at 1000
trials): a sensitivity under-stated by 1.3 (mu 1.3 times the claimed one) is
caught at claimed epsilon = 1 with about 1000 runs per data set - a few
seconds for a mechanism.  Releases that carry less of a record's exposure than it
is charged for (``tree-honaker``'s estimates: mu 0.93 of the charged one at 8
adds; a canary in an add late in a phase) leave less room and need more runs.
A correct mechanism stays below its claim, with the rdp accountant well below
(0.75-0.9 of it at epsilon = 1: rdp's epsilon is itself an upper bound on the
exact Gaussian one), with the pld accountant (exact for Gaussians) within
10 per cent of it at 2000 runs.

Selectors (end to end only)
===========================

The same canary data sets, a fixed candidate list, and the selector's own
``select`` (charged to a fresh accountant, ``fit=True``) in every run.

* ``exponential`` (default relation ``replace-one``): candidates ``w_0 = R
  e_1`` and ``candidates - 1`` copies of ``-R e_1`` (``R`` the selector's
  radius).  Null records have margin 0 at every candidate; the canary's
  margins are ``+-c R``, so with the default clipping range (``phi`` over
  ``|m| <= R``) and ``c >= 1`` it contributes exactly ``lo`` to ``w_0``'s
  score and ``hi`` to the others', and its mirror the reverse: every score
  moves by the full range in opposite directions - the exponential mechanism's
  worst case.
* ``above-threshold`` (default relation ``add-remove``; gradient query,
  ``check=fosp``, ``grad_clip`` 0.1): candidates ``w_move`` then ``w_still``,
  where the canary's clipped gradient is ``C`` at ``w_move`` and ~0 at
  ``w_still`` (``0`` and ``R' e_1``, ``R' = 20``; swapped under replace-one).
  The default ``alpha = C / (2 n)`` puts ``w_move``'s normalised deficit at
  ``+1/2`` with the canary and ``-1/2`` without.  AboveThreshold's accounting
  is loose for a single moving query, so expect a small ``epsilon_lower``.

Both assume a margin loss like ``logistic``; with another loss the canary is
weaker and the bound only looser, never invalid.

``fault`` names a **test-only** deliberate privacy bug
(:mod:`dpreg.testing.faults`) that shows the audit can fail.
"""
from .blackbox import FAR, canary_data
from .config import (AUDIT_PARAMS, MAX_RELEASES, MAX_TRIALS, METHODS, SCHEDULES, SELECTOR_AUDIT, AuditConfig,
                     AuditResult)
from .runner import run_audit
from .stats import (choose_event, choose_test, clopper_pearson_upper, epsilon_lower_bound, fisher_direction,
                    gaussian_epsilon, gaussian_lower_bound, known_shift_lower_bound)
from .whitebox import MAX_REPLAY_ADDS

__all__ = ["AUDIT_PARAMS", "FAR", "MAX_RELEASES", "MAX_REPLAY_ADDS", "MAX_TRIALS", "METHODS", "SCHEDULES",
           "SELECTOR_AUDIT", "AuditConfig", "AuditResult", "canary_data", "choose_event", "choose_test",
           "clopper_pearson_upper", "epsilon_lower_bound", "fisher_direction", "gaussian_epsilon",
           "gaussian_lower_bound", "known_shift_lower_bound", "run_audit"]
