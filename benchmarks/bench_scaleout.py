"""Data-parallel scaling (dpreg.backends, docs/scale-out.md): one step's clipped
gradient sum - the work of a dp-gd step (every record), of a large Poisson
batch and of dp-sgd's small batch - on the same synthetic shards held

* by this process as one array (the single-process run: ``Problem``),
* by Dask worker processes (``--backend dask``; 1 worker holding half the
  records, 2 workers holding all of them, each under a memory limit below the
  whole data set),

timed in interleaved rounds, as records per second; plus the bytes each step
sends each way, every worker's memory against the bytes of the shards it
holds, and what bypassing the compiled multi-step paths costs a sharded run.

    python -m pytest benchmarks/bench_scaleout.py --benchmark-enable    # tiny (CI runs it untimed)
    python benchmarks/bench_scaleout.py --rows 8000000 --features 50 --shards 8 --worker-memory 3GiB \\
        --dir /tmp/d41-dask/scale --rounds 5 --reps 3 --check-limit --json scale.json   # the page's figures
    python benchmarks/bench_scaleout.py --model scale.json                # the projection to 8-64 workers
    python benchmarks/bench_scaleout.py --rows 20000000 --shards 16 --dir DIR --write-only   # data for dpreg run

The shards are written once (npz, a public seed per shard) and reused while
their manifest matches.  Threads: the single-process run and every worker use
one numba thread each (``--threads``), so 2 workers against 1 process is a
speed-up whose ideal is 2; the single process with 2 threads is timed too.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest

LOSS = "logistic"


# ------------------------------------------------------------------ the data
def write_shards(root: str, rows: int, d: int, shards: int, seed: int = 0) -> list[str]:
    """``shards`` .npz files of about ``rows / shards`` records each (d
    Gaussian features, labels of a fixed linear model with 10 % flips): one
    shard in memory at a time.  Reused when ``manifest.json`` matches."""
    os.makedirs(root, exist_ok=True)
    spec = {"rows": rows, "features": d, "shards": shards, "seed": seed, "format": "npz"}
    man = os.path.join(root, "manifest.json")
    paths = [os.path.join(root, f"part-{i:04d}.npz") for i in range(shards)]
    if os.path.exists(man) and json.load(open(man)) == spec and all(os.path.exists(p) for p in paths):
        return paths
    w_true = np.random.default_rng(seed).standard_normal(d)
    cuts = [round(rows * i / shards) for i in range(shards + 1)]
    for i, p in enumerate(paths):
        rng = np.random.default_rng([seed, i])
        X = rng.standard_normal((cuts[i + 1] - cuts[i], d))
        y = np.where(X @ w_true > 0, 1.0, -1.0)
        y[rng.random(y.shape[0]) < 0.1] *= -1
        tmp = os.path.join(root, f"_writing-{i}.npz")  # "_": never taken for a shard
        np.savez(tmp, X=X, y=y)
        os.replace(tmp, p)
        del X, y
    json.dump(spec, open(man, "w"))
    return paths


def plain_problem(paths, intercept: bool = True):
    """The single-process run's problem: every shard read and prepared into
    one array in this process (as ``dpreg run`` on one file would hold it)."""
    from dpreg.backends.shards import ShardFile, ShardOptions, ShardReader
    from dpreg.preprocess import Preprocessing
    from dpreg.problem import Problem
    from dpreg.registry import get_registry

    readers = [ShardReader(ShardFile(i, p, "npz", os.path.getsize(p)), ShardOptions()) for i, p in enumerate(paths)]
    n, d = sum(r.rows for r in readers), readers[0].features
    prep = Preprocessing(d, "none", intercept=intercept)
    X = np.empty((n, prep.n_weights))
    y = np.empty(n)
    at = 0
    for r in readers:
        y[at:at + r.rows] = r.labels()
        for lo, B in r.blocks():
            X[at + lo:at + lo + B.shape[0]] = prep.transform(B, in_place=True)
        at += r.rows
    return Problem(get_registry().get("loss", LOSS), X, y, row_bound=prep.row_bound)


def sharded_problem(data, *, backend="dask", **kw):
    from dpreg.backends.pipeline import open_problem
    from dpreg.registry import get_registry

    return open_problem(data, get_registry().get("loss", LOSS), backend=backend, **kw)


# ----------------------------------------------------------------- the steps
def batches(n: int, b: int, k: int, seed: int = 1):
    """``k`` Poisson batches of expected size ``b`` over ``n`` records (sorted,
    global row numbers), the same for every holder of the records."""
    from dpreg.access import poisson_rows_many

    rows, off = poisson_rows_many(np.random.default_rng(seed), n, min(1.0, b / n), k)
    return [rows[off[i]:off[i + 1]] for i in range(k)]


def step_seconds(pb, idx, w, reps: int) -> list[float]:
    """Wall seconds of ``reps`` clipped gradient sums over ``idx`` (None: every
    record), one per repetition."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        pb.clipped_grad_sum(w, idx, 1.0)
        out.append(time.perf_counter() - t0)
    return out


def _cpu(pb) -> list[float]:
    """CPU seconds spent so far: this thread's (a plain problem: the kernel's
    own on one thread; the numba threads of a parallel kernel are not
    counted), or each holder's in its sums (a sharded one)."""
    if hasattr(pb, "executor"):
        return [c["cpu_s"] for c in pb.executor.call("counters", [()] * len(pb.executor.groups))]
    return [time.thread_time()]


def _threads(k: int) -> None:
    import numba

    numba.set_num_threads(max(1, min(k, numba.config.NUMBA_NUM_THREADS)))


def measure(args) -> dict:
    """The page's measurements (see the module docstring); returns a dict
    written as JSON."""
    from distributed import LocalCluster

    paths = write_shards(args.dir, args.rows, args.features, args.shards)
    half = paths[:len(paths) // 2]
    res: dict = {"rows": args.rows, "features": args.features, "shards": args.shards,
                 "bytes_on_disk": sum(os.path.getsize(p) for p in paths), "worker_memory": args.worker_memory,
                 "threads": args.threads, "load_start": os.getloadavg(), "cpus": os.cpu_count()}
    print(f"data: {args.rows:,} x {args.features} float64 in {args.shards} shards "
          f"({res['bytes_on_disk'] / 2**30:.2f} GiB on disk); load average {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.perf_counter()
    plain = plain_problem(paths)
    res["plain_load_s"] = time.perf_counter() - t0
    n, d = plain.n, plain.d
    res["bytes_prepared"] = int(plain.X.nbytes + plain.y.nbytes + 8 * n)
    w = np.random.default_rng(0).standard_normal(d) * 0.1
    big = batches(n, args.big_batch, args.reps)
    small = batches(n, args.small_batch, args.reps)
    kinds = {"full": (None, None), "big": (big, None), "small": (small, None)}
    clusters = {}
    try:
        for k in (1, 2):
            t0 = time.perf_counter()
            cl = LocalCluster(n_workers=k, threads_per_worker=1, processes=True, host="127.0.0.1",
                              dashboard_address=None, memory_limit=args.worker_memory,
                              env={"NUMBA_NUM_THREADS": str(args.threads)})
            clusters[k] = (cl, None, 0.0)  # closed in the end, whatever happens next
            pb = sharded_problem(args.dir if k == 2 else subset(half), scheduler=cl.scheduler_address,
                                 threads=args.threads)
            clusters[k] = (cl, pb, time.perf_counter() - t0)
            mem = pb.executor.call("memory", [()] * len(pb.executor.groups))
            res[f"dask{k}_memory"] = mem
            res[f"dask{k}_start_and_load_s"] = clusters[k][2]
            print(f"dask {k} worker(s): {pb.n:,} records, started and loaded in {clusters[k][2]:.1f} s; memory "
                  + "; ".join(f"peak {m['peak_rss'] / 2**30:.2f} GiB (start {m['rss_start'] / 2**30:.2f}, shards "
                              f"{m['held_bytes'] / 2**30:.2f})" for m in mem), flush=True)
        # interleaved rounds: plain (1 thread), plain (2 threads), dask 1, dask 2, for each kind of step
        times: dict = {}
        for r in range(args.rounds):
            for kind in kinds:
                for name in ("plain1", "plain2", "dask1", "dask2"):
                    pb = plain if name.startswith("plain") else clusters[int(name[-1])][1]
                    if name.startswith("plain"):
                        _threads(int(name[-1]))
                    todo = ([None] * args.reps if kind == "full" else
                            [b[b < pb.n] for b in (big if kind == "big" else small)])  # dask1: the first half
                    cpu0 = _cpu(pb)
                    secs = [step_seconds(pb, b, w, 1)[0] for b in todo]
                    cpu = [(b - a) / len(todo) for a, b in zip(cpu0, _cpu(pb))]
                    recs = [pb.n if b is None else len(b) for b in todo]
                    times.setdefault(kind, {}).setdefault(name, []).append(
                        (float(np.median(secs)), float(np.median(recs)), max(cpu), sum(cpu)))
            print(f"round {r + 1}/{args.rounds} done; load average {os.getloadavg()[0]:.1f}", flush=True)
        _threads(args.threads)
        res["steps"] = {}
        for kind, per in times.items():
            res["steps"][kind] = {}
            for name, rows_ in per.items():
                s = [t for t, _, _, _ in rows_]
                rec = statistics.median([b for _, b, _, _ in rows_])
                res["steps"][kind][name] = {"seconds_median": statistics.median(s), "seconds_min": min(s),
                                            "records": rec, "records_per_s": rec / statistics.median(s),
                                            "cpu_s_max_holder": statistics.median([c for _, _, c, _ in rows_]),
                                            "cpu_s_max_holder_min": min(c for _, _, c, _ in rows_),
                                            "cpu_s_total": statistics.median([c for _, _, _, c in rows_]),
                                            "cpu_s_total_min": min(c for _, _, _, c in rows_)}
        # bytes per step (payload), from the problem's own counters, one step of each kind
        pb2 = clusters[2][1]
        res["bytes"] = {}
        for kind in kinds:
            before = pb2.traffic()
            pb2.clipped_grad_sum(w, None if kind == "full" else (big if kind == "big" else small)[0], 1.0)
            after = pb2.traffic()
            res["bytes"][kind] = {"down": after["bytes_down"] - before["bytes_down"],
                                  "up": after["bytes_up"] - before["bytes_up"],
                                  "records": n if kind == "full" else len((big if kind == "big" else small)[0])}
        # latency of a call with (almost) no work: one record per step (on one holder, and on every holder)
        res["latency"] = {}
        for k, (cl, pb, _) in clusters.items():
            for tag, b in (("", np.array([0])), ("_all_holders", np.array([0, pb.n - 1]))):
                t = [step_seconds(pb, b, w, 1)[0] for _ in range(max(20, args.reps))]
                res["latency"][f"dask{k}{tag}"] = statistics.median(t)
                res["latency"][f"dask{k}{tag}_min"] = min(t)
        res["latency"]["plain"] = statistics.median(step_seconds(plain, np.array([0]), w, 20))
        # the driver's own per-record work on a sampled batch: routing its row numbers to the shards
        pb2 = clusters[2][1]
        t = []
        for b in big:
            c0 = time.thread_time()
            pb2.route(b)
            t.append((time.thread_time() - c0) / len(b))
        res["route_s_per_record"] = statistics.median(t)
    finally:
        for cl, pb, _ in clusters.values():
            if pb is not None:
                pb.executor.close()
            cl.close()
    if args.check_limit:
        res["limit_check"] = limit_check(args)
    res["fast_paths"] = fast_path_cost(args)
    res["load_end"] = os.getloadavg()
    return res


def subset(paths) -> str:
    """A directory of links to some of the shard files (``half/`` beside them)."""
    sub = os.path.join(os.path.dirname(paths[0]), "half")
    if os.path.isdir(sub):
        for f in os.listdir(sub):
            os.unlink(os.path.join(sub, f))
    os.makedirs(sub, exist_ok=True)
    for p in paths:
        os.symlink(p, os.path.join(sub, os.path.basename(p)))
    return sub


def limit_check(args) -> str:
    """Every shard on one worker under the memory limit: the run must fail in
    one line (the worker is stopped by its nanny), not hold the data."""
    from distributed import LocalCluster

    from dpreg.errors import DpregError

    t0 = time.perf_counter()
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                      memory_limit=args.worker_memory, env={"NUMBA_NUM_THREADS": "1"}) as cl:
        try:
            pb = sharded_problem(args.dir, scheduler=cl.scheduler_address, threads=1)
        except DpregError as exc:
            msg = f"failed after {time.perf_counter() - t0:.0f} s: {exc}"
        else:
            pb.executor.close()
            msg = "HELD (the limit did not stop it)"
    print(f"all shards on one worker: {msg}", flush=True)
    return msg


def fast_path_cost(args) -> dict:
    """dp-sgd (b = 256) and dp-spider (gaussian) on 50,000 x 22 synthetic
    records in this process: the plain problem (compiled multi-step paths)
    against the same records as one shard held by this process (step by
    step, the protocol's calls); run seconds, median of 3, interleaved."""
    import dpreg

    rng = np.random.default_rng(5)
    X = rng.standard_normal((50_000, 22))
    y = np.where(X[:, 0] + 0.3 * rng.standard_normal(50_000) > 0, 1.0, -1.0)
    tmp = os.path.join(args.dir, "fast-path")
    os.makedirs(tmp, exist_ok=True)
    np.savez(os.path.join(tmp, "one.npz"), X=X, y=y)
    out = {}
    for algo, params, noise in (("dp-sgd", {"batch": 256, "steps": 2000}, None),
                                ("dp-spider", {"steps": 400}, "gaussian")):
        t = {"plain": [], "sharded": []}
        for _ in range(3):
            for kind, data in (("plain", os.path.join(tmp, "one.npz")), ("sharded", tmp)):
                rec = dpreg.run(algo=algo, noise=noise, data=data, params=params, seed=0, scaling="none",
                                diagnostics="light")
                t[kind].append(rec["diagnostics"]["timing"]["run_s"])
        out[algo] = {k: statistics.median(v) for k, v in t.items()}
        out[algo]["steps"] = params["steps"]
        print(f"{algo}: plain {out[algo]['plain']:.3f} s, sharded (step by step) {out[algo]['sharded']:.3f} s "
              f"for {params['steps']} steps", flush=True)
    return out


# --------------------------------------------------------------- the model
def model(res: dict, workers=(1, 2, 4, 8, 16, 32, 64), rtt: float = 100e-6, bandwidth: float = 1.25e9,
          target: float = 0.9, c: float | None = None, L1: float | None = None, h: float | None = None) -> dict:
    """A projection of a step's time on m workers, each on a core of its own,
    from the measured figures:

    ``T(m, b) = L(m) + c b / m + s b``

    * ``c``: CPU seconds per record of the clipped sum on one thread (the
      single process's full step: its CPU time / n);
    * ``s``: the driver's seconds per record of a sampled batch: routing its
      row numbers to the shards (measured: CPU time of ``route``), plus
      sending them, 4 bytes a record over ``bandwidth`` (the batch itself
      is drawn by the algorithm as on one machine, not counted);
    * ``L(m) = L1 + (m - 1) h + rtt + 2 m B / bandwidth``: the call overhead,
      ``L1`` the fastest one-holder call measured, ``h`` what each further
      holder added (the driver serialises, sends and answers each call itself),
      ``B`` a holder's bytes each way (the point, the sums and a call's
      framing), ``rtt`` one network round trip (loopback had none).

    ``c``, ``L1``, ``h`` given: those instead of the measured ones (a
    projection for another machine, e.g. an idle one).

    The gather (the overhead) dominates where ``L(m) > c b / m``; it is at
    most ``1 - target`` of the step from ``b >= target / (1 - target) L(m) m / c``."""
    n = res["rows"]
    d = res["features"] + 1
    full = res["steps"]["full"]
    lat = res["latency"]
    c = full["plain1"]["cpu_s_total"] / full["plain1"]["records"] if c is None else c
    L1 = lat["dask1_min"] if L1 is None else L1
    h = max(0.0, lat["dask2_all_holders_min"] - lat["dask1_min"]) if h is None else h
    s = res["route_s_per_record"] if "route_s_per_record" in res else route_cost(res)
    B = 8 * d + 512
    rows = []
    for m in workers:
        L = L1 + (m - 1) * h + rtt + 2 * m * B / bandwidth

        def step(b, m=m, L=L):
            return L + c * b / m + (s + 4 / bandwidth) * b * (b < n)
        rows.append({"workers": m, "overhead_s": L, "batch_gather_equals_work": L * m / c,
                     "batch_gather_10pct": target / (1 - target) * L * m / c,
                     "full_step_s": step(n), "full_speedup": c * n / step(n),
                     "full_efficiency": c * n / step(n) / m,
                     "batch_1pct_step_s": step(n // 100), "batch_1pct_speedup": c * (n // 100) / step(n // 100)})
    return {"c_s_per_record": c, "L1_s": L1, "h_s_per_holder": h, "s_s_per_record": s, "rtt_s": rtt,
            "bandwidth_Bps": bandwidth, "holder_bytes": B, "target": target, "rows": rows}


def route_cost(res: dict) -> float:
    """CPU seconds per record of routing a batch of ``rows / 20`` sampled
    records to the shards (``ShardedProblem.route``, no holder called)."""
    from dpreg.backends.problem import ShardedProblem

    class Holders:
        groups = [list(range(res["shards"] // 2)), list(range(res["shards"] // 2, res["shards"]))]

    n, S = res["rows"], res["shards"]
    pb = ShardedProblem(Holders(), None, np.diff([round(n * i / S) for i in range(S + 1)]), 1, None)
    t = []
    for b in batches(n, n // 20, 5):
        c0 = time.thread_time()
        pb.route(b)
        t.append((time.thread_time() - c0) / len(b))
    return statistics.median(t)


def print_tables(res: dict, **model_args) -> None:
    steps = res["steps"]
    print(f"\n{res['rows']:,} x {res['features']} ({res['bytes_prepared'] / 2**30:.2f} GiB prepared), "
          f"{res['shards']} shards, worker memory limit {res['worker_memory']}; load average "
          f"{res['load_start'][0]:.1f} at the start, {res['load_end'][0]:.1f} at the end")
    print("\nwall clock: records per second (median step); the last column: 2 workers against 1 process, 1 thread")
    print("| step | records | 1 process, 1 thread | 1 process, 2 threads | 1 worker (half the records) | "
          "2 workers | speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    labels = (("full", "every record (dp-gd)"), ("big", "Poisson batch"), ("small", "small batch (dp-sgd)"))
    for kind, label in labels:
        st = steps[kind]
        r = {k: v["records_per_s"] for k, v in st.items()}
        print(f"| {label} | {st['dask2']['records']:,.0f} | {r['plain1']:,.0f} | {r['plain2']:,.0f} | "
              f"{r['dask1']:,.0f} | {r['dask2']:,.0f} | {r['dask2'] / r['plain1']:.2f}x |")
    lat = res["latency"]
    print("\nCPU seconds per step (the single process's; each worker's in its sums, the busiest shown) and the "
          "step on a core per worker: busiest worker + fastest call overhead")
    print("| step | 1 process (CPU s) | 2 workers: busiest (CPU s) | both (CPU s) | 2 workers, a core each (s) | "
          "speed-up | ideal 2.00x: within |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, label in labels[:2]:
        st = steps[kind]
        for stat, sfx in (("median", ""), ("least", "_min")):
            if f"cpu_s_total{sfx}" not in st["plain1"]:
                continue
            one = st["plain1"][f"cpu_s_total{sfx}"]
            two = st["dask2"][f"cpu_s_max_holder{sfx}"] + lat["dask2_all_holders_min"]
            print(f"| {label} ({stat} of the rounds) | {one:.3f} | {st['dask2'][f'cpu_s_max_holder{sfx}']:.3f} | "
                  f"{st['dask2'][f'cpu_s_total{sfx}']:.3f} | {two:.3f} | {one / two:.2f}x | {2 / (one / two):.2f}x |")
    print("\nbytes per step (payload, 2 workers)")
    for kind, b in res["bytes"].items():
        print(f"  {kind}: {b['down']:,} down, {b['up']:,} up ({b['records']:,} records)")
    print(f"\ncall overhead (a one-record step), median / fastest: 1 worker {lat['dask1'] * 1e3:.2f} / "
          f"{lat['dask1_min'] * 1e3:.2f} ms, 2 workers both called {lat['dask2_all_holders'] * 1e3:.2f} / "
          f"{lat['dask2_all_holders_min'] * 1e3:.2f} ms; the single process {lat['plain'] * 1e3:.3f} ms")
    for w in ("dask1", "dask2"):
        for m in res.get(f"{w}_memory", []):
            print(f"memory {w} pid {m['pid']}: peak {m['peak_rss'] / 2**30:.2f} GiB, before loading "
                  f"{m['rss_start'] / 2**30:.2f} GiB, shards held {m['held_bytes'] / 2**30:.2f} GiB")
    if "limit_check" in res:
        print(f"all shards on one worker under the limit: {res['limit_check']}")
    if "fast_paths" in res:
        for algo, f in res["fast_paths"].items():
            print(f"{algo} ({f['steps']} steps): compiled steps {f['plain']:.3f} s, one shard step by step "
                  f"{f['sharded']:.3f} s ({f['sharded'] / f['plain']:.1f}x)")
    m = model(res, **model_args)
    print(f"\nprojection (c = {m['c_s_per_record'] * 1e9:.1f} ns/record, L1 = {m['L1_s'] * 1e3:.2f} ms, "
          f"h = {m['h_s_per_holder'] * 1e3:.2f} ms/holder, s = {m['s_s_per_record'] * 1e9:.2f} ns/record, "
          f"rtt {m['rtt_s'] * 1e6:.0f} us, {m['bandwidth_Bps'] * 8 / 1e9:.0f} Gbit/s)")
    print("| workers | overhead per step | batch where gather = work | batch for overhead <= 10 % | "
          f"step, every record ({res['rows']:,}) | speed-up | efficiency | step, 1 % batch | speed-up |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in m["rows"]:
        print(f"| {r['workers']} | {r['overhead_s'] * 1e3:.2f} ms | {r['batch_gather_equals_work']:,.0f} | "
              f"{r['batch_gather_10pct']:,.0f} | {r['full_step_s'] * 1e3:.1f} ms | {r['full_speedup']:.1f}x | "
              f"{r['full_efficiency']:.0%} | {r['batch_1pct_step_s'] * 1e3:.2f} ms | {r['batch_1pct_speedup']:.1f}x |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--worker-memory", default="1GiB")
    ap.add_argument("--dir", default="/tmp/dpreg-scaleout")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--big-batch", type=int, default=None, help="expected Poisson batch [default: n / 20]")
    ap.add_argument("--small-batch", type=int, default=256)
    ap.add_argument("--check-limit", action="store_true",
                    help="also load every shard on one worker under the memory limit (it must fail)")
    ap.add_argument("--write-only", action="store_true",
                    help="write the shards into --dir (or find them there) and stop: data for dpreg run")
    ap.add_argument("--json", default=None, help="write the measurements here")
    ap.add_argument("--model", default=None, help="print the tables and projection of a measurements file")
    ap.add_argument("--c-ns", type=float, default=None, help="projection: ns per record on one core")
    ap.add_argument("--l1-ms", type=float, default=None, help="projection: one-holder call overhead, ms")
    ap.add_argument("--h-ms", type=float, default=None, help="projection: each further holder's overhead, ms")
    args = ap.parse_args(argv)
    if args.model:
        print_tables(json.load(open(args.model)), c=None if args.c_ns is None else args.c_ns * 1e-9,
                     L1=None if args.l1_ms is None else args.l1_ms * 1e-3,
                     h=None if args.h_ms is None else args.h_ms * 1e-3)
        return
    if args.write_only:
        paths = write_shards(args.dir, args.rows, args.features, args.shards)
        print(f"{len(paths)} shards of {args.rows:,} x {args.features} in {args.dir}")
        return
    args.big_batch = args.big_batch or args.rows // 20
    _threads(args.threads)
    res = measure(args)
    if args.json:
        json.dump(res, open(args.json, "w"), indent=1)
    print_tables(res)


# ------------------------------------------------------- the pytest suite (tiny)
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """4 shards of 10,000 x 50; the single process's problem, and the same
    records held by 2 Dask worker processes (127.0.0.1)."""
    distributed = pytest.importorskip("distributed")
    root = tmp_path_factory.mktemp("scaleout")
    paths = write_shards(str(root), 40_000, 50, 4)
    plain = plain_problem(paths)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, env={"NUMBA_NUM_THREADS": "1"}) as cl:
        pb = sharded_problem(str(root), scheduler=cl.scheduler_address, threads=1)
        try:
            yield plain, pb
        finally:
            pb.executor.close()


@pytest.mark.parametrize("holder", ["single-process", "two-workers"])
@pytest.mark.parametrize("kind", ["full", "small"])
def test_step(benchmark, tiny, holder, kind):
    plain, sharded = tiny
    pb = plain if holder == "single-process" else sharded
    w = np.full(pb.d, 0.01)
    idx = None if kind == "full" else batches(pb.n, 256, 1)[0]
    s, _ = benchmark(pb.clipped_grad_sum, w, idx, 1.0)
    ref, _ = plain.clipped_grad_sum(w, idx, 1.0)
    np.testing.assert_allclose(s, ref, rtol=1e-10, atol=1e-12)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
