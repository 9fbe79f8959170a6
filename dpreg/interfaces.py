"""The plugin interfaces: what a loss, oracle, noise mechanism, selector and
algorithm promise.  Built-in and third-party plugins implement these.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Hashable, Sequence

import numpy as np

from .params import ParamSpec

if TYPE_CHECKING:  # pragma: no cover
    from .accounting import Accountant
    from .problem import Problem


# ---------------------------------------------------------------------- randomness
def secret_seed(seed: int | None = None) -> int:
    """The root seed of a run's mechanism randomness (privacy rule 4).

    ``None`` (the default everywhere): 128 bits from the operating system's
    entropy source (``secrets``), so every noise draw, sample, permutation and
    perturbation is unpredictable to anyone who reads the code, the record or
    the command line.  An integer ``seed >= 0`` is the reproducible research
    mode: the guarantee then holds only while that seed stays secret.
    """
    if seed is None:
        import secrets

        return secrets.randbits(128)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 or None, got {seed!r}")
    return int(seed)


def derive_seed(ss: np.random.SeedSequence) -> int:
    """A 128-bit integer seed drawn from a SeedSequence (for sub-runs)."""
    w = [int(x) for x in ss.generate_state(4)]
    return w[0] | (w[1] << 32) | (w[2] << 64) | (w[3] << 96)


# ----------------------------------------------------------------------------- loss
class LinearModelLoss:
    """Per-sample loss ``f(w; x, y) = phi(<x, w>, y) + psi(w)``.

    Subclasses set ``phi``, ``dphi`` (d phi / d m) and ``d2phi`` as
    ``staticmethod`` s of plain, numba-compatible Python functions of two floats
    ``(m, y)`` defined at module level (they are compiled lazily by
    :meth:`scalar_kernels` and cached on disk), and override ``psi``,
    ``psi_grad``, ``psi_hvp`` (numpy, O(d)) when there is a data-independent
    term.  ``constants(d)`` returns ``(G, M, rho)``: Lipschitz, smoothness and
    Hessian-Lipschitz constants of ``f(.; z)`` for records with ``|x| <= 1``
    (and ``|w| <= radius`` when a radius is set).  They are *defaults for
    clipping bounds*: privacy never depends on them being right, because every
    sensitivity is enforced by clipping.
    """

    name: ClassVar[str] = ""
    #: "binary" (labels in {-1,+1}), "real" (any finite y), "ignored"
    labels: ClassVar[str] = "binary"
    #: what the loss learns: "binary", "multiclass" or "regression"; None:
    #: derived from ``labels`` (:func:`dpreg.tasks.loss_task`)
    task: ClassVar[str | None] = None
    #: feasible set: the ball of this radius (None: all of R^d)
    radius: ClassVar[float | None] = None
    #: whether sign(<x, w>) predicts the label (accuracy is reported)
    classifier: ClassVar[bool] = True

    phi: Callable[[float, float], float]
    dphi: Callable[[float, float], float]
    d2phi: Callable[[float, float], float]
    #: optional block form of ``dphi``: a plain, numba-compatible function
    #: ``f(m, y, out, work, bits, dphi)`` (module level, like ``dphi``) that sets
    #: ``out[i] = dphi(m[i], y[i])`` for every i < len(m), given float and int64
    #: scratch arrays ``work``, ``bits`` at least as long - or its import path
    #: ``"package.module:name"`` (imported only when a pipeline is built, so a
    #: module that imports numba stays out of plugin registration).  The hot
    #: kernels call it once per stage of rows; a vectorised form (e.g. with
    #: :func:`dpreg_kernels.vmath.exp_nonpos`, as the built-in logistic and
    #: sigmoid losses in :mod:`dpreg_kernels.loss_blocks`) makes small-d kernels
    #: 2-3x faster.  None: the kernels call ``dphi`` row by row.
    dphi_block: Callable | str | None = None
    #: optional compiled form of ``psi_grad`` for the many-step kernels
    #: (``dpreg_kernels.sgd``): a numba-compatible ``f(w, params, out)`` writing
    #: grad psi(w) into ``out``, with ``params = psi_params()`` - or its import
    #: path, as ``dphi_block``.  A loss that overrides ``psi_grad`` without one
    #: runs its algorithms step by step from Python (the same results, slower
    #: for small batches).
    psi_grad_kernel: Callable | str | None = None

    def constants(self, d: int) -> tuple[float, float, float]:
        """(G, M, rho) for |x| <= 1; see class docstring."""
        raise NotImplementedError

    def psi(self, w: np.ndarray) -> float:
        return 0.0

    def psi_grad(self, w: np.ndarray) -> np.ndarray:
        return np.zeros_like(w)

    def psi_hvp(self, w: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.zeros_like(v)

    def psi_params(self) -> np.ndarray:
        """The parameters ``psi_grad_kernel`` reads (float64 array; e.g. the
        regularisation weight), so a subclass that changes them needs no new
        compiled function."""
        return np.zeros(0)

    @property
    def has_psi(self) -> bool:
        """Whether the loss has a data-independent term (overrides psi_grad)."""
        return type(self).psi_grad is not LinearModelLoss.psi_grad

    def scalar_kernels(self):
        """(phi, dphi, d2phi) compiled with the kernels' scalar signature."""
        cached = getattr(self, "_compiled", None)
        if cached is None:
            from dpreg_kernels import compile_scalar

            cached = tuple(compile_scalar(f) for f in (type(self).phi, type(self).dphi, type(self).d2phi))
            self._compiled = cached
        return cached

    def psi_kernel(self):
        """The compiled psi gradient for the many-step kernels: the loss's
        ``psi_grad_kernel`` (or the zero gradient when it has no psi), or None
        when it has a psi but no compiled form."""
        cached = getattr(self, "_compiled_psi", False)
        if cached is False:
            from dpreg_kernels import compile_psi

            own = _resolve(type(self).psi_grad_kernel)
            if own is None and self.has_psi:
                cached = None
            else:
                cached = compile_psi(own)
            self._compiled_psi = cached
        return cached

    def block_kernels(self):
        """(dphi_block,) compiled with the kernels' block signature: the
        loss's own ``dphi_block``, else the kernels' row-by-row
        :func:`dpreg_kernels.linear_model.scalar_block_fn`."""
        cached = getattr(self, "_compiled_blocks", None)
        if cached is None:
            from dpreg_kernels import compile_block

            cached = (compile_block(_resolve(type(self).dphi_block)),)
            self._compiled_blocks = cached
        return cached

    def describe(self) -> str:
        return (self.__doc__ or "").strip().splitlines()[0] if self.__doc__ else self.name


def _resolve(func):
    """A loss's compiled-helper attribute: the callable itself, or imported from
    its ``"package.module:name"`` path (None stays None)."""
    if isinstance(func, str):
        import importlib

        module, _, attr = func.partition(":")
        return getattr(importlib.import_module(module), attr)
    return func


def problem_supports(problem, capability: str) -> str | None:
    """None when ``problem`` provides ``capability`` (an optional method of the
    problem protocol: ``clipped_hessian_sum``, ``clipped_zo_sum``, ...), else
    why not, in a few words: the problem's own ``supports(capability)`` when
    it has one, else whether it has the method."""
    supports = getattr(problem, "supports", None)
    if supports is not None:
        return supports(capability)
    return None if callable(getattr(problem, capability, None)) else "not provided"


# ------------------------------------------------------------------- participation
@dataclass(frozen=True)
class Participation:
    """Which records a release may involve, for the accountant.

    kind "all":      any record may be in it (full batch or fixed-size sample
                     without amplification): charged globally.
    kind "poisson":  each record independently with probability ``q``:
                     charged globally with Poisson amplification.
    kind "disjoint": only the records of batch ``group`` of the pass
                     ``pass_id``, which are used in no other batch of that
                     pass (single pass): charged to that group of that pass.
                     A record's exposure sums, over passes, its group's
                     charges (dpreg.accounting); ``pass_id=None`` is the
                     accountant's default pass.
    """

    kind: str
    q: float = 1.0
    group: Hashable | None = None
    pass_id: Hashable | None = None

    @staticmethod
    def all() -> "Participation":
        return Participation("all")

    @staticmethod
    def poisson(q: float) -> "Participation":
        return Participation("poisson", q=float(q))

    @staticmethod
    def disjoint(group: Hashable, pass_id: Hashable | None = None) -> "Participation":
        return Participation("disjoint", group=group, pass_id=pass_id)


def charge(accountant: "Accountant", event, participation: Participation, label: str = "", *,
           count: int = 1) -> float:
    """Charge ``event`` (the exposure of a record that *is* in the release) to
    ``accountant`` according to ``participation``, ``count`` times (``count``
    releases of the same kind, each charged as one call would charge it); the
    one place the participation kinds are turned into accounting.  Returns
    the accountant's epsilon after the last charge."""
    from .accounting import poisson_sampled

    if participation.kind == "all":
        ev, kw = event, {}
    elif participation.kind == "poisson":
        ev, kw = poisson_sampled(participation.q, event), {}
    elif participation.kind == "disjoint":
        ev, kw = event, ({} if participation.pass_id is None else {"pass_id": participation.pass_id})
    else:
        raise ValueError(f"unknown participation kind {participation.kind!r}")
    group = participation.group if participation.kind == "disjoint" else None
    out = 0.0
    for _ in range(int(count)):
        out = accountant.charge(ev, group, label=label, **kw)
    return out


# -------------------------------------------------------------------------- oracle
@dataclass
class Estimate:
    """A non-private gradient (difference) estimate and its enforced sensitivity.

    value:        the estimate (a mean over the batch; d-vector)
    sensitivity:  l2 sensitivity of ``value`` to one record under the
                  accountant's relation, guaranteed by clipping in the kernel
    participation: which records it involved
    batch:        number of records in the batch
    clipped:      how many per-record terms were clipped
    """

    value: np.ndarray
    sensitivity: float
    participation: Participation
    batch: int
    clipped: int = 0


class Oracle(ABC):
    """A gradient estimator on a problem (a loss and its data).

    Constructed as ``OracleClass(problem)``.  ``estimate`` returns an
    :class:`Estimate` whose sensitivity the kernel enforces by clipping.
    Oracles add no noise: noise is the mechanism's job.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def __init__(self, problem: "Problem"):
        self.problem = problem

    @abstractmethod
    def estimate(self, *args: Any, **kwargs: Any) -> Estimate: ...


# --------------------------------------------------------------------------- noise
class NoiseMechanism(ABC):
    """A private continual-release mechanism for a running sum.

    The algorithm adds increments ``v_1, v_2, ...`` (each a d-vector with a
    known l2 sensitivity ``s_t`` and :class:`Participation`); after each ``add``
    the mechanism returns a noisy release of the prefix sum ``v_1 + ... + v_t``.
    Noise is calibrated by the noise multiplier ``z``: every Gaussian the
    mechanism releases has standard deviation ``z`` times the sensitivity of
    what it covers.  ``add`` charges the accountant *before* it computes the
    release.  ``reset`` starts a new sum (a new phase).

    Constructed as ``Mechanism(dim=d, noise_multiplier=z, horizon=T,
    accountant=acc, seed=s)``; ``horizon`` bounds the number of adds between
    resets (the tree mechanism's depth depends on it).  Noise comes from a
    numpy ``Generator`` seeded by ``seed`` and is drawn in Python, never in a
    parallel kernel.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    #: True when every add's noise is an independent N(0, (z s)^2 I) draw of its
    #: own (the ``gaussian`` plugin): :meth:`draw` then gives the draws of several
    #: adds at once, for callers that keep the running sum themselves
    independent_adds: ClassVar[bool] = False

    def __init__(self, *, dim: int, noise_multiplier: float, horizon: int,
                 accountant: "Accountant", seed: int | np.random.SeedSequence):
        if noise_multiplier <= 0 or not np.isfinite(noise_multiplier):
            raise ValueError(f"noise multiplier must be > 0, got {noise_multiplier}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.dim = int(dim)
        self.z = float(noise_multiplier)
        self.horizon = int(horizon)
        self.accountant = accountant
        self.seed = seed
        self.phase = -1
        self.steps = 0
        self.reset()

    def reset(self) -> None:
        """Start a new running sum (next phase)."""
        self.phase += 1
        self.steps = 0

    @abstractmethod
    def add(self, increment: np.ndarray, sensitivity: float,
            participation: Participation) -> np.ndarray:
        """Add one increment; return the noisy prefix sum since the last reset."""

    @classmethod
    def draws_as_it_adds(cls) -> bool:
        """Whether a caller may use :meth:`draw` and :meth:`draw_phases` in
        place of :meth:`add`: :attr:`independent_adds`, and all three defined
        by one class - a subclass that changes one of them alone (an
        instrumented or audited mechanism, ``dpreg audit``'s faults) is used
        through ``add``."""
        def owner(name):
            return next(k for k in cls.__mro__ if name in k.__dict__)

        return bool(cls.independent_adds) and owner("draw") is owner("add") is owner("draw_phases")

    def draw(self, k: int, participation: Participation) -> np.ndarray:
        """Only where :attr:`independent_adds`: the noise of the next ``k`` adds
        of this phase, unscaled - a (k, dim) array of standard normals drawn
        now from the mechanism's secret generator in the order ``k`` calls of
        :meth:`add` would draw them - with the ``k`` adds charged now (before
        any of them is released) and counted against the horizon.  Row i times
        ``z * s_i`` (s_i the i-th add's sensitivity) is the noise ``add`` would
        have added to that increment; the caller keeps the running sum."""
        raise NotImplementedError(f"{type(self).__name__} does not release independent adds")

    def draw_phases(self, phases: Sequence[Sequence[tuple[int, Participation]]], *,
                    reset_first: bool = True) -> np.ndarray:
        """Only where :attr:`independent_adds`: the noise of whole phases at
        once.  For each phase - a list of ``(k, participation)``, adds in add
        order - :meth:`reset` (before the first phase only when
        ``reset_first``), then :meth:`draw` of each ``k`` with its
        participation: the same horizon checks, charges and standard normals,
        stacked in draw order into one ``(sum of k, dim)`` array.  A class may
        do it faster (one charge per participation, one draw from its
        generator: the gaussian plugin) if the normals, the charges and the
        state it ends in are the same.  Here a phase past the horizon raises
        after the phases before it were charged (more charged than released:
        never less)."""
        rows = []
        for i, adds in enumerate(phases):
            if i or reset_first:
                self.reset()
            rows.extend(self.draw(int(k), p) for k, p in adds if k)
        return np.concatenate(rows) if rows else np.empty((0, self.dim))

    @classmethod
    @abstractmethod
    def record_event(cls, noise_multiplier: float, horizon: int, participation_kind: str,
                     steps: int):
        """Worst-case exposure of one record over ``steps`` adds of one phase of
        horizon ``horizon``, for calibration: with participation ``"disjoint"``
        the record is in exactly one add; otherwise it may be in every add
        (``"poisson"`` callers wrap the per-add event themselves via
        :meth:`add_event`)."""

    @classmethod
    def noise_std_per_step(cls, noise_multiplier: float, sensitivity: float, t: int) -> float:
        """Std of one coordinate of the noise in the prefix sum at step t (1-based),
        when every add has the given sensitivity (for diagnostics and tests)."""
        raise NotImplementedError


# ------------------------------------------------------------------------ selector
class Selector(ABC):
    """A private choice among finitely many candidates (see the selector plugins)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    params: ClassVar[tuple[ParamSpec, ...]] = ()
    #: whether it works on sparse (CSR) records: it reads the data only through
    #: the problem's methods, which have CSR kernels (else ``--select`` refuses sparse data)
    sparse_data: ClassVar[bool] = False


# ----------------------------------------------------------------------- algorithm
@dataclass
class RunOutput:
    """What an algorithm returns; evaluation metrics are computed afterwards."""

    w: np.ndarray
    iterations: int
    records_used: int
    gradient_evaluations: int
    trajectory: dict[str, list] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def _checked_progress(progress: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
    """The progress callback an algorithm calls at every step, preceded by
    :func:`dpreg.interrupts.check`: a Ctrl-C that a compiled call swallowed
    still stops the run at the next step."""
    from .interrupts import check

    if progress is None:
        def report(step, total):
            check()
    else:
        def report(step, total):
            check()
            progress(step, total)
    return report


class Algorithm(ABC):
    """An outer loop.  Subclasses declare ``params`` (documented
    :class:`ParamSpec` s), ``paper`` (file and algorithm number it implements),
    ``uses_noise`` (whether ``--noise`` selects its running-sum mechanism) and
    ``data_access`` ("single-pass": passes of disjoint batches, one pass
    unless the algorithm has a ``passes`` parameter; or "resample").

    Constructed as ``Algo(problem, params, noise=NoiseClass, accountant=acc,
    seed=s, progress=callback)``; :meth:`run` returns a :class:`RunOutput`.
    Every noisy release goes through the accountant; ``run`` must call
    ``progress(step, total)`` now and then.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    params: ClassVar[tuple[ParamSpec, ...]] = ()
    uses_noise: ClassVar[bool] = False
    #: the noise mechanism used when ``--noise`` is not given (None: "tree")
    default_noise: ClassVar[str | None] = None
    data_access: ClassVar[str] = "resample"
    #: neighbouring relation the algorithm's accounting is stated in
    relation: ClassVar[str] = "replace-one"
    #: whether :meth:`run` starts from :attr:`init` when it is set
    honours_init: ClassVar[bool] = False
    #: practitioner (Opacus-style) names -> this algorithm's parameter names,
    #: e.g. ``{"lr": "step", "batch_size": "batch"}``; a value that is not a
    #: parameter name is the sentence saying why there is no counterpart.
    #: None: derived from the parameter names (:func:`dpreg.params.practitioner_table`)
    practitioner: ClassVar[dict[str, str] | None] = None
    #: why ``--param preset=theory`` is not offered (algorithms without a
    #: ``preset`` parameter); shown by ``dpreg info`` and in the refusal
    theory_note: ClassVar[str] = ""
    #: optional starting point, set by a meta-algorithm (warm start) after
    #: construction and before :meth:`run`; None: the algorithm's own default
    #: (the problem's initial point).  Algorithms that read it set ``honours_init = True`` and
    #: start from :meth:`initial_point`.
    init: np.ndarray | None = None
    #: white-box audits (:mod:`dpreg.audit`): None, or a callable that
    #: :meth:`released` shows every noisy release made outside a noise
    #: mechanism, as ``(label, value)``; it never changes the run
    release_observer: Callable[[str, np.ndarray], None] | None = None

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> dict[str, str]:
        """What a run with these (bound) params needs of its problem beyond the
        problem protocol's clipped gradient sums: ``{capability: what it is
        for}``, e.g. ``{"clipped_hessian_sum": "per-record clipped Hessians"}``.
        The pipeline refuses, in one line and before any release, a problem
        that does not provide one (:func:`problem_supports`)."""
        return {}

    @classmethod
    def release_mechanisms(cls, info: dict, noise: str | None) -> list[dict]:
        """The mechanisms behind a run's releases, for the release's privacy
        statement: one dict per mechanism with ``what`` (which releases),
        ``noise`` (the mechanism) and ``noise_multiplier`` (noise std over
        sensitivity) or ``epsilon_share`` (a pure epsilon-DP step).  ``info``
        is the run's :attr:`RunOutput.info`, ``noise`` the ``--noise`` plugin's
        name (None for an algorithm that takes none).  The default is one
        mechanism, ``info["noise_multiplier"]`` through ``noise`` (else
        Gaussian); an algorithm with other or more mechanisms overrides it (the
        statement must list every one)."""
        z = info.get("noise_multiplier") if isinstance(info, dict) else None
        if z is None:
            return []
        return [{"what": f"{cls.name} releases", "noise": noise or "gaussian", "noise_multiplier": float(z)}]

    @classmethod
    def relation_for(cls, params: dict[str, Any]) -> str:
        """Relation of a run with these (bound) params; composite algorithms
        whose relation depends on their stages override it."""
        return cls.relation

    def initial_point(self) -> np.ndarray:
        """A copy of :attr:`init` (checked to be a finite d-vector), or the
        problem's data-independent default start
        (``problem.initial_point(self.rng("initial point"))``: the origin for
        linear models, a random point for networks)."""
        d = self.problem.d
        if self.init is None:
            return self.problem.initial_point(self.rng("initial point"))
        w = np.array(self.init, dtype=float).reshape(-1)
        if w.shape != (d,) or not np.all(np.isfinite(w)):
            from .errors import ParameterError

            raise ParameterError(f"initial point must be a finite vector of length {d}")
        return w

    def __init__(self, problem: "Problem", params: dict[str, Any], *, noise: type[NoiseMechanism] | None,
                 accountant: "Accountant", seed: int | None = None,
                 progress: Callable[[int, int], None] | None = None):
        self.problem = problem
        self.p = dict(params)
        self.noise = noise
        self.accountant = accountant
        #: the run's secret root seed (privacy rule 4): 128 bits of OS entropy
        #: unless a research seed was given.  Never written or printed.
        self.seed = secret_seed(seed)
        #: whether the randomness is reproducible from a user-given seed
        self.seeded = seed is not None
        self.progress = _checked_progress(progress)

    def seed_sequence(self, stream: str) -> np.random.SeedSequence:
        """The SeedSequence of a named stream, derived from the run's secret
        root seed (the same stream name always gives the same numbers for the
        same seed); for components that seed themselves, such as noise
        mechanisms.  Every mechanism draw (noise, sampling, permutation,
        perturbation, selector noise) comes from such a stream."""
        return np.random.SeedSequence([self.seed] + [ord(c) for c in stream])

    def released(self, label: str, value: np.ndarray) -> np.ndarray:
        """Return ``value`` - a noisy release the algorithm has just charged and
        computed outside a noise mechanism (a trust-region step's gradient or
        Hessian) - after showing it to :attr:`release_observer`, if set.  The
        white-box audit reads such releases; noise mechanisms' releases it
        reads from the mechanism itself."""
        if self.release_observer is not None:
            self.release_observer(label, value)
        return value

    def rng(self, stream: str) -> np.random.Generator:
        """A Generator for a named stream (see :meth:`seed_sequence`)."""
        return np.random.default_rng(self.seed_sequence(stream))

    def child_seed(self, stream: str) -> int:
        """A 128-bit seed for a sub-run (a stage of a composite algorithm),
        derived from the secret root seed: as secret as it, and never short
        enough to brute-force."""
        return derive_seed(self.seed_sequence(stream))

    @abstractmethod
    def run(self) -> RunOutput: ...
