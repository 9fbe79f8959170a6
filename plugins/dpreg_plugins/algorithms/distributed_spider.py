"""``distributed-spider``: Algorithm 1 (Gaussian-perturbed SGD with the
drift-distance escape test) driven by the Algorithm 3 oracle (distributed
adaptive DP-SPIDER) of perturbed-sgd-adaptive-spider-distributed-sosp.txt.

m clients each hold a shard and add their own noise; the server is untrusted
(inter-client record-level DP, Def 3).  Alg 1 is ``perturbed-sgd``'s own loop
(:meth:`PerturbedSGD.descend`, reused, not copied); only the oracle changes:

    server: drift >= kappa (or the phase holds `horizon` adds) ? O1 : O2;
            broadcast (mode, x_{t-1}, x_{t-2})          [O1: (mode, x_{t-1})]
    client j: O1: next b1 unused records of its shard, new running sum;
              O2: next b2, clipped difference added;  release g_j through its
              own noise mechanism, charged to its own accountant first
    server: g_t = (1/m) sum_j g_j ;  drift += |x_{t-1} - x_{t-2}|^2

(drift is the distance the query point moved, as in ``perturbed-sgd``; Alg 3
line 17's eta^2 |g_t|^2 is the same for an unprojected step).  Every
``--noise`` plugin works per client; clients and their transport live in
:mod:`~dpreg_plugins.algorithms.distributed_core` (backends ``local`` and
``dask``).

Privacy.  Each client is single pass over its shard and charges its own
accountant (same kind and (epsilon, delta) as the run's) before each release,
which refuses anything its budget does not cover.  The reported epsilon is
the maximum over clients; the run's accountant stays the one source of it:
before each round the server charges it the event every client is about to
charge (the noise plugin's ``record_event(z, horizon, "disjoint", 1)``, to the
round's batch group - all clients release the same event each round, so this
*is* the worst client's history), and after the run every client's accountant
state is put in the run info and checked not to exceed the reported epsilon.
Averaging is post-processing; the server's noise is sqrt(m) times what a
trusted curator would need (the price of trusting no one).

Defaults follow Thm 3: n is the records of the smallest client's training
part; alpha and kappa use mn and sqrt(m) n eps (the paper prints sqrt(mn) eps;
its proof, eq. 94-95, and Remark 2 give sqrt(m) n eps).  Batch sizes, the
noise calibration and the horizon are ``perturbed-sgd``'s resolution with that
n, so changes to it flow through; its practical floors size the batches for the
averaged estimate, whose noise is 1/sqrt(m) of one client's message (sizing
them for one message - as before - made alpha sqrt(m) too coarse and the
defaults returned the majority class on a9a).  The practical alpha is
``alpha_scale`` times Thm 3's (the floor if larger), with perturbed-sgd's
practical step 2/M and mu = 3.  With ``clients=1`` the run is
``perturbed-sgd`` bit for bit (same randomness streams, same data order).

Sharding.  Which client holds which record is public information only (the
simulation of where data lives, like a test split): ``sharding=iid`` cuts a
permutation of the record indices drawn from the public ``shard_seed``,
``contiguous`` cuts the data's record order into consecutive blocks, and
``given`` reads a public client assignment given with the data
(``assignment=FILE``).  No rule reads a label or a feature, so changing one
record (the neighbouring relation) moves no other record between clients and
each client's epsilon bounds the run; a label-skewed layout is simulated by
giving it as an assignment, which the guarantee then treats as public.

Optional private model selection (Alg 4) after the run: ``select=
distributed-selection`` reserves ``selection_fraction`` of every shard as fresh
data and runs :class:`~dpreg_plugins.selectors.distributed_selection.DistributedSelection`
over the run's checkpoint iterates (training and selection records are
disjoint, so they compose in parallel: each gets the full budget).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from dpreg import hookimpl
from dpreg.access import Exhausted, new_pass_id
from dpreg.decisions import Decisions
from dpreg.errors import DpregError, ParameterError
from dpreg.interfaces import Participation, RunOutput, charge
from dpreg.params import ParamSpec

from .distributed_core import BACKENDS, SHARDINGS, client_stream, make_backend, read_assignment, shard
from .perturbed_sgd import PAPER, PerturbedSGD


# --------------------------------------------------------------------- defaults
def theorem3_alpha(n: int, d: int, eps: float, G: float, M: float, rho: float, U: float, m: int = 1) -> float:
    """alpha of Theorem 3 (log factors dropped), n records per client:
    (G U M/(m n))^(1/3) + G^(2/15) U^(2/5) M^(8/15) rho^(-1/15) (sqrt(d)/(sqrt(m) n eps))^(2/5)."""
    return ((G * U * M / (m * n)) ** (1 / 3)
            + G ** (2 / 15) * U ** 0.4 * M ** (8 / 15) * rho ** (-1 / 15)
            * (math.sqrt(d) / (math.sqrt(m) * n * eps)) ** 0.4)


def theorem3_kappa(n: int, d: int, eps: float, G: float, M: float, rho: float, U: float, m: int = 1) -> float:
    """kappa of Theorem 3: max{G^1.5 U^.5 rho^.5/(M^2.5 (m n)^.5),
    G^(14/15) d^(2/5) U^(4/5) rho^(8/15)/(M^(34/15) (sqrt(m) n eps)^(4/5))}."""
    return max(G ** 1.5 * U ** 0.5 * rho ** 0.5 / (M ** 2.5 * (m * n) ** 0.5),
               G ** (14 / 15) * d ** 0.4 * U ** 0.8 * rho ** (8 / 15)
               / (M ** (34 / 15) * (math.sqrt(m) * n * eps) ** 0.8))


# ----------------------------------------------------------------------- oracle
class DistributedSpiderOracle:
    """Alg 3 on the server side: a drop-in for
    :class:`~dpreg_plugins.algorithms.perturbed_sgd.AdaptiveSpiderOracle`
    (same drift rule, same reuse of a repeated query point, same forced O1
    after ``max_phase`` adds), whose releases are the average of the clients'.

    ``query(x)`` raises :class:`~dpreg.access.Exhausted` before any round when
    the smallest training shard cannot pay for it; otherwise it charges the
    run's ``accountant`` the round's per-client event (see the module
    docstring), broadcasts, and averages.  Record counts are per client.
    """

    def __init__(self, backend, accountant, event, *, b1: int, b2: int, kappa: float, max_phase: int,
                 records: int, passes: int = 1):
        self.backend = backend
        self.m = len(backend)
        self.accountant = accountant
        self.event = event
        self.b1, self.b2, self.kappa = int(b1), int(b2), float(kappa)
        self.max_phase = int(max_phase)
        self.n = int(records)
        #: passes over every shard the plan allows (each a fresh permutation on every client); the
        #: run accountant's pass id of the current pass: a one-pass run keeps the default pass (None),
        #: which Alg 4's selection group shares; several passes take fresh ids (dpreg.access.new_pass_id)
        self.passes, self.pass_no, self._used_before = int(passes), 1, 0
        self._pass_id = None if self.passes == 1 else new_pass_id()
        self.drift = math.inf
        self.prev: np.ndarray | None = None
        self.g: np.ndarray | None = None
        self.used = self.rounds = self.phase_steps = 0
        self.o1 = self.o2 = self.longest = self.n_reused = 0
        self.gradient_evaluations = 0
        #: O1 refreshes by cause (dpreg.decisions): start, drift, cap, pass_start
        self.decisions = Decisions()

    @property
    def records_used(self) -> int:
        """Record uses each client has spent, summed over the passes (all clients spend the same)."""
        return self._used_before + self.used

    @property
    def records_total(self) -> int:
        return self.passes * self.n

    def stats(self) -> dict:
        return dict(o1_queries=self.o1, o2_queries=self.o2, longest_phase=self.longest,
                    reused_queries=self.n_reused, rounds=self.rounds, passes_made=self.pass_no)

    def query(self, x: np.ndarray) -> np.ndarray:
        if self.prev is not None:
            moved = float(np.dot(x - self.prev, x - self.prev))
            if moved == 0.0:  # O2(x, x) = 0: no round, nothing released
                self.n_reused += 1
                return self.g.copy()
            self.drift += moved
        o1 = self.g is None or self.drift >= self.kappa or self.phase_steps >= self.max_phase
        cause = "start" if self.g is None else "drift" if self.drift >= self.kappa else "cap"
        b = self.b1 if o1 else self.b2
        if self.used + b > self.n and self.pass_no < self.passes:
            # the next pass: every client re-permutes its shard; its first round is an O1 refresh
            self._used_before += self.used
            self.used, self.pass_no, self.drift = 0, self.pass_no + 1, math.inf
            self._pass_id = new_pass_id()
            o1, b, cause = True, self.b1, "pass_start"
        if self.used + b > self.n:
            raise Exhausted(f"{b} records requested, {self.n - self.used} unused on the smallest shard")
        self.rounds += 1
        # the run's accountant: the event each client charges its own before releasing (a record
        # is in one batch of each pass of its client: the batches of a pass are one pass's groups)
        charge(self.accountant, self.event, Participation.disjoint(("batch", self.rounds), pass_id=self._pass_id),
               label=f"round {self.rounds} (per-client release)")
        x = np.array(x, dtype=float)
        if o1:
            msgs = self.backend.call("step", self.rounds, "O1", x, None, self.pass_no)
        else:
            msgs = self.backend.call("step", self.rounds, "O2", x, self.prev, self.pass_no)
        g = np.array(msgs[0], dtype=float, copy=True)
        for v in msgs[1:]:
            g += v
        g /= self.m
        self.used += b
        if o1:
            self.o1 += 1
            self.decisions.refresh(cause)
            self.drift = 0.0
            self.phase_steps = 1
            self.gradient_evaluations += self.m * b
        else:
            self.o2 += 1
            self.phase_steps += 1
            self.gradient_evaluations += 2 * self.m * b
        self.longest = max(self.longest, self.phase_steps)
        self.g = g
        self.prev = x
        return self.g.copy()


# -------------------------------------------------------------------- algorithm
def _replace(specs, **new):
    return tuple(new.get(s.name, s) for s in specs)


class DistributedSpider(PerturbedSGD):
    """Alg 1 over the distributed adaptive DP-SPIDER oracle of Alg 3 (m clients, client-side noise)."""

    name = "distributed-spider"
    summary = ("distributed adaptive DP-SPIDER (m clients, each adding its own noise; ICRL-DP) inside "
               "perturbed SGD's escape test; backends local and dask")
    paper = (f"{PAPER}, Algorithm 1 with the Algorithm 3 oracle (distributed adaptive DP-SPIDER); "
             f"optional Algorithm 4 (distributed private model selection)")
    params = _replace(
        PerturbedSGD.params,
        alpha=ParamSpec("alpha", "float", None, "target accuracy alpha = 4 chi; |g| <= 3 chi triggers the escape test",
                        "Thm 3: alpha = (GUM/(mn))^(1/3) + G^(2/15) U^(2/5) M^(8/15) rho^(-1/15) "
                        "(sqrt(d)/(sqrt(m) n eps))^(2/5), n = records per client (log factors dropped; "
                        "preset=theory); practical: alpha_scale x that, or the o1_budget floor (for the average "
                        "of m messages) if larger, as perturbed-sgd", low=0, low_open=True),
        kappa=ParamSpec("kappa", "float", None, "drift threshold triggering an O1 refresh",
                        "Thm 3: kappa = max{G^1.5 U^.5 rho^.5/(M^2.5 (mn)^.5), "
                        "G^(14/15) d^(2/5) U^(4/5) rho^(8/15)/(M^(34/15)(sqrt(m) n eps)^(4/5))}",
                        low=0, low_open=True),
        batch1=ParamSpec("batch1", "int", None, "O1 batch size b1 per client",
                         "Thm 3: b1 = n kappa/(2 U eta), n per client; practical floor as perturbed-sgd, for the server's average of m noisy messages (noise / sqrt(m))", low=1),
        batch2=ParamSpec("batch2", "int", None, "O2 batch size b2 per client",
                         "Thm 3: b2 = n eta chi^2/(2U), n per client (preset=theory); practical: the noise floor as "
                         "perturbed-sgd, for the server's average of m noisy messages (noise / sqrt(m))", low=1),
        step_cap=ParamSpec("step_cap", "float", None, "largest step length |x_{t+1} - x_t| (post-processing of the "
                           "release; 0: no cap)",
                           "not in Alg 1: a safeguard from released quantities only, perturbed-sgd's: practical "
                           "default 0.5 G/M (preset=theory: none). With 2 clients a run makes few steps (24 over 12 "
                           "passes on 4,601 records at eps = 1), and 0.1 G/M kept the model at the majority class. "
                           "Validation splits (experiments/targets_models_learn.py "
                           "--validation, 3 seeds at eps = 1, 2 at eps = 4; cap 0.36 (= 0.1 G/M) / 1 / 2): "
                           "adult-4601 0.763 / 0.785 / 0.788 (eps = 1), 0.803 / - / 0.806 (eps = 4); breast-cancer "
                           "0.626 / 0.678 / 0.734, 0.803 / - / 0.912; digits 0.694 / 0.711 / 0.714, 0.824 / - / "
                           "0.810; synthetic 0.636 / 0.632 / 0.626, 0.764 / - / 0.711", low=0),
    ) + (
        ParamSpec("clients", "int", 2, "number of clients m",
                  "Alg 3: m clients, each holding a shard D_j; default 2: client-side noise costs sqrt(m) "
                  "(a9a train accuracy at eps=1: 0.821 at m=2, 5 seeds; 0.812 at m=4, 3 seeds, at the "
                  "paper-scale perturbed-sgd rules; at the defaults, experiments/tune_on_training_data.py: m = 1, 2, 4 -> adult train "
                  "accuracy 0.8309, 0.8283, 0.8179, IJCNN1 gap ratio to dp-sgd 1.99, 2.64, 3.33, all with one pass; with "
                  "the passes default, IJCNN1 at m = 2 makes 3 passes of 24,995 records per client: 1.68 on "
                  "tuning seeds, see passes)", low=1),
        ParamSpec("sharding", "str", "iid", "how records are spread over clients, by public information "
                  "only: 'iid' (a permutation of the record indices from shard_seed), 'contiguous' (consecutive "
                  "blocks of the data's record order) or 'given' (a public client assignment given with the data: "
                  "assignment=FILE); never by a label or feature, so changing one record moves no other between "
                  "clients", "section 2: clients hold local data sets D_j (heterogeneous D_j: 'contiguous' on data "
                  "gathered client by client, or 'given')", choices=SHARDINGS),
        ParamSpec("assignment", "str", None, "sharding=given: a file with record i's client (0..m-1) on line i, in "
                  "the training data's record order (or a .npy integer vector); public input, like the data's "
                  "layout", "the clients' own holdings (Alg 3: client j holds D_j)"),
        ParamSpec("shard_seed", "int", 0, "public seed of the iid sharding and of the selection shares "
                  "(a simulation of where data lives)",
                  "not a mechanism draw: public, like a test split", low=0),
        ParamSpec("backend", "str", "local", "where the clients run: in-process or Dask actors",
                  "implementation (dask needs the 'distributed' extra)", choices=BACKENDS),
        ParamSpec("scheduler", "str", None, "address of a running Dask scheduler (backend=dask); "
                  "default: a LocalCluster with one single-thread worker per client", "implementation"),
        ParamSpec("select", "str", "none", "private model selection among the checkpoints after the run",
                  "Alg 4 (distributed private model selection); 'none': Alg 1's own certificate",
                  choices=("none", "distributed-selection")),
        ParamSpec("selection_fraction", "float", 0.2, "share of every shard kept fresh for select",
                  "Alg 4 needs S_j independent of the iterates; used only when select is set",
                  low=0, high=0.9),
        ParamSpec("select_alpha", "float", None, "alpha of Alg 4's test", "default: the run's alpha",
                  low=0, low_open=True),
        ParamSpec("omega", "float", 0.1, "failure probability omega' of Alg 4's thresholds",
                  "Thm 4: omega'", low=0, low_open=True, high=1),
    )

    @classmethod
    def requirements(cls, params) -> dict:
        if (params.get("select") or "none") != "none":
            return {"clipped_hessian_sum": "per-record clipped Hessians (the distributed selection's lambda_min test)"}
        return {}

    @classmethod
    def release_mechanisms(cls, info: dict, noise: str | None) -> list[dict]:
        """Each client's noisy SPIDER estimates (its own noise mechanism and
        accountant) and, with Alg 4, each client's noisy gradients and
        Hessians of the candidates on its fresh selection share."""
        out = [dict(m, what="distributed-spider per-client releases (each client its own noise)")
               for m in super().release_mechanisms(info, noise)]
        sel = info.get("selection")
        if isinstance(sel, dict) and sel.get("noise_multiplier") is not None:
            out.append({"what": "distributed selection: per-client gradients and symmetric-noise Hessians "
                                "of the candidates", "noise": "gaussian",
                        "noise_multiplier": float(sel["noise_multiplier"])})
        return out

    # ---------------------------------------------------------------- resolution
    def _shards(self):
        if getattr(self, "_shard_cache", None) is None:
            p = self.p
            frac = float(p["selection_fraction"]) if p["select"] != "none" else 0.0
            n = self.problem.n
            given = p["assignment"]
            if given is not None and p["sharding"] != "given":
                raise ParameterError("assignment=FILE goes with sharding=given (and only with it)")
            self._shard_cache = shard(n, int(p["clients"]), scheme=p["sharding"], seed=int(p["shard_seed"]),
                                      selection_fraction=frac,
                                      assignment=None if given is None else read_assignment(given, n))
        return self._shard_cache

    def sample_size(self) -> int:
        """n of Thm 3: the training records of the smallest client."""
        return min(tr.size for tr, _ in self._shards())

    def passes(self) -> int:
        """perturbed-sgd's rule, but one pass when the run ends with Alg 4's
        selection: the selection shares are disjoint from the training
        records (so the selection gets the whole budget), which the
        accountant's per-pass rule (worst group of each pass, summed) can
        state only when the training batches make one pass; ``passes`` > 1
        with ``select`` is refused."""
        if self.p["select"] == "none":
            return super().passes()
        if self.p["passes"] is not None and int(self.p["passes"]) > 1:
            raise ParameterError("distributed-spider: select=distributed-selection needs passes=1 (its selection "
                                 "shares get the whole budget in parallel with one pass of training batches)")
        return 1

    def messages_averaged(self) -> int:
        """m: the server averages one independently noised message per client."""
        return int(self.p["clients"])

    def theory(self):
        m = int(self.p["clients"])
        return functools.partial(theorem3_alpha, m=m), functools.partial(theorem3_kappa, m=m)

    # ------------------------------------------------------------------------ run
    def client_specs(self, r: dict) -> list[dict]:
        """What each client is built from: its shard (training rows, then its
        selection share), its own seed streams, the public plan."""
        pb, m = self.problem, int(self.p["clients"])
        cfg = dict(noise_multiplier=r["noise_multiplier"], horizon=r["horizon"], clip=r["clip"],
                   diff_clip=r["diff_clip"], batch1=r["batch1"], batch2=r["batch2"], passes=r["passes"],
                   epsilon=self.accountant.epsilon_budget, delta=self.accountant.delta,
                   relation=self.accountant.relation, row_bound=float(getattr(pb, "row_bound", 1.0)))
        specs = []
        for j, (tr, sel) in enumerate(self._shards()):
            rows = np.concatenate([tr, sel])
            seeds = {"noise": self.seed_sequence(client_stream("perturbed-sgd noise", j, m)),
                     "batches": self.seed_sequence(client_stream("perturbed-sgd batches", j, m)),
                     "selection": self.seed_sequence(f"distributed-selection client {j}")}
            specs.append(dict(j=j, X=pb.X[rows], y=pb.y[rows], n_select=int(sel.size), loss=pb.loss,
                              noise_cls=self.noise, accountant_cls=type(self.accountant), seeds=seeds,
                              config=cfg))
        return specs

    def run(self) -> RunOutput:
        if self.noise is None:
            raise ParameterError("distributed-spider needs a noise mechanism (--noise)")
        p = self.p
        if p["scheduler"] is not None and p["backend"] != "dask":
            raise ParameterError("scheduler is an address for backend=dask")
        r = self.resolve()
        m = int(p["clients"])
        event = self.noise.record_event(r["noise_multiplier"], r["horizon"], "disjoint", 1)  # per round
        backend = make_backend(p["backend"], self.client_specs(r), scheduler=p["scheduler"])
        try:
            oracle = DistributedSpiderOracle(backend, self.accountant, event, b1=r["batch1"], b2=r["batch2"],
                                             kappa=r["kappa"], max_phase=r["horizon"],
                                             records=self.sample_size(), passes=r["passes"])
            out = self.descend(oracle, r)
            selection = None
            if p["select"] != "none":
                out, selection = self._select(backend, out, r)
            statuses = backend.call("status")
            traffic = backend.traffic.as_dict()
        finally:
            backend.close()
        eps_clients = [s["privacy"]["epsilon_spent"] for s in statuses]
        if max(eps_clients) > self.accountant.epsilon_spent * (1 + 1e-6) + 1e-12:
            raise DpregError(
                f"client accountants spent epsilon={max(eps_clients):.6g} > the run's "
                f"{self.accountant.epsilon_spent:.6g}: noise {self.noise.name!r}'s record_event does not "
                f"match its charges; no record written")
        rounds = oracle.rounds
        d = self.problem.d
        info = out.info
        info.update(clients=m, sharding=p["sharding"], backend=backend.name,
                    records_per_client=[s["records"] for s in statuses],
                    selection_records_per_client=[s["selection_records"] for s in statuses],
                    client_privacy=[s["privacy"] for s in statuses],
                    epsilon_max_over_clients=max(eps_clients),
                    clipped_terms=sum(s["clipped_terms"] for s in statuses),
                    communication=dict(traffic, rounds=rounds,
                                       floats_down_per_round_per_client=(traffic["floats_down"] / (m * rounds)
                                                                         if rounds else 0.0),
                                       floats_up_per_round_per_client=(traffic["floats_up"] / (m * rounds)
                                                                       if rounds else 0.0),
                                       model_floats=d),
                    selection=selection)
        out.records_used = sum(s["records_used"] for s in statuses)
        out.gradient_evaluations = sum(s["gradient_evaluations"] for s in statuses)
        return out

    def _select(self, backend, out: RunOutput, r: dict):
        """Alg 4 over the checkpoints (and the output) with every client's selection share."""
        from dpreg.registry import get_registry

        sel_cls = get_registry().get("selector", self.p["select"])
        traj = out.info["trajectory"]
        cands = [np.asarray(v, dtype=float) for v in traj.iterates]
        if not cands or not np.array_equal(cands[-1], out.w):
            cands.append(np.asarray(out.w, dtype=float))
        alpha = self.p["select_alpha"] if self.p["select_alpha"] is not None else r["alpha"]
        selector = sel_cls(self.problem, accountant=self.accountant, omega=float(self.p["omega"]),
                           grad_clip=r["clip"])
        res = selector.select(backend, cands, alpha=alpha)
        info = dict(res.info, index=res.index, alpha=alpha, fallback_to_run_output=res.index is None,
                    steps=list(traj.steps) + ([] if len(traj.steps) == len(cands) else [None]))
        if res.index is not None:
            out.w = np.asarray(res.w, dtype=float)
        return out, info


@hookimpl
def dpreg_register_algorithms(register):
    register(DistributedSpider.name, DistributedSpider, summary=DistributedSpider.summary)
