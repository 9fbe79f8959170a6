"""Turn a pytest-benchmark JSON into markdown tables of ratios.

    python -m pytest benchmarks --benchmark-enable --benchmark-json=bench.json
    python benchmarks/report.py bench.json [--out docs-fragment.md]

Medians unless ``--stat`` says otherwise.  One table per topic, each from the
suites that measured it in this run: the hot kernels (time, kernel / limit,
kernel / numpy, 2-thread speed-up), generic vs loss-specialised kernel,
networks, softmax, sparse data, Poisson sampling, dp-spider's compiled steps,
the step loop against a plain-numpy loop, end-to-end runs, data loading,
memory / start-up / compile, the per-step peers, and the kernel targets each
marked held or missed with the measured number.  A suite that did not run (or
was skipped) leaves its table out.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict


STAT = "median"


def _med(b):
    """The statistic every table uses (``--stat``; median unless told)."""
    return float(b["stats"][STAT])


def load(path):
    with open(path) as fh:
        data = json.load(fh)
    return data, data.get("benchmarks", [])


def kernel_table(benches):
    """{(size, batch, threads): {impl/kernel: median}} plus row metadata."""
    cells = defaultdict(dict)
    meta = {}
    for b in benches:
        e = b.get("extra_info", {})
        if e.get("impl") not in ("limit", "numba", "numpy") or "size" not in e:
            continue
        if not b["name"].startswith(("test_numba", "test_numpy")):
            continue
        key = (e["size"], e["batch"], e["threads"])
        name = "limit" if e["impl"] == "limit" else f"{e['kernel']}-{e['impl']}"
        cells[key][name] = _med(b)
        meta[e["size"]] = (e["n"], e["d"], e.get("data", ""))
        meta[key] = e["bytes"]
    return cells, meta


def fmt_ms(t):
    return "-" if t is None else (f"{t * 1e3:.2f}" if t >= 1e-3 else f"{t * 1e3:.3f}")


def fmt_x(x):
    return "-" if x is None else f"{x:.2f}x"


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def render(data, benches) -> tuple[str, list]:
    out = []
    targets = []  # (text, value, held)
    cells, meta = kernel_table(benches)
    sizes = []
    for (size, batch, threads) in cells:
        if size not in sizes:
            sizes.append(size)
    if cells:
        out.append(f"### Hot kernels (float64, {STAT} of each benchmark's rounds)\n")
        out.append("| size | batch | kernel | 2 thr ms | limit ms (GB/s) | kernel / limit (2 thr) | "
                   "kernel / limit (1 thr) | kernel / numpy | 2-thread speed-up |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for size in sizes:
            n, d, desc = meta[size]
            for batch in ("full", "4096"):
                c2 = cells.get((size, batch, 2), {})
                c1 = cells.get((size, batch, 1), {})
                if not c2:
                    continue
                lim2 = c2.get("limit")
                gbs = meta.get((size, batch, 2), 0) / lim2 / 1e9 if lim2 else None
                for k in ("o1", "o2"):
                    t2 = c2.get(f"{k}-numba")
                    t1 = c1.get(f"{k}-numba")
                    r2 = _ratio(t2, lim2)
                    r1 = _ratio(t1, c1.get("limit"))
                    rn = _ratio(c2.get(f"{k}-numpy"), t2)
                    sp = _ratio(t1, t2)
                    lim_txt = f"{fmt_ms(lim2)} ({gbs:.1f})" if gbs else fmt_ms(lim2)
                    out.append(f"| {size} {n:,} x {d:,} | {batch} | {k.upper()} | {fmt_ms(t2)} | {lim_txt} | "
                               f"{fmt_x(r2)} | {fmt_x(r1)} | {('%.1fx faster' % rn) if rn else '-'} | {fmt_x(sp)} |")
                    if batch == "full" and size == "d1000" and k == "o1":
                        targets.append(("O1 <= 1.3x limit at 100,000 x 1,000", r2, r2 is not None and r2 <= 1.3))
                        targets.append(("O1 >= 3x faster than numpy at 100,000 x 1,000", rn, rn is not None and rn >= 3))
                    if batch == "full" and size == "covtype" and k == "o1":
                        targets.append(("O1 <= 2.0x limit at 581,012 x 54", r2, r2 is not None and r2 <= 2.0))
                        targets.append(("O1 >= 3x faster than numpy at 581,012 x 54", rn, rn is not None and rn >= 3))
                    if batch == "full" and size == "d1000" and k == "o2":
                        targets.append(("O2 <= 1.5x limit at 100,000 x 1,000", r2, r2 is not None and r2 <= 1.5))
                    if batch == "4096" and size == "d1000":
                        targets.append((f"{k.upper()} sampled 4,096 rows <= 2x limit (rows touched) at d = 1,000",
                                        r2, r2 is not None and r2 <= 2.0))
                    if batch == "full" and size in ("covtype", "d1000"):
                        targets.append((f"{k.upper()} 2-thread speed-up >= 1.6 at {size}", sp, sp is not None and sp >= 1.6))
        out.append("")
        out.append("Limit: a numba `prange` row-sum over the same rows (sampled: the same fresh random "
                   "4,096-row gather), measured in the same run. Speed-up: 1-thread time / 2-thread time "
                   "(`numba.set_num_threads`).\n")

    # ---- generic vs specialised
    loss = defaultdict(dict)
    for b in benches:
        if b["name"].startswith("test_loss"):
            e = b["extra_info"]
            loss[(e["loss"], e["size"])][e["impl"]] = _med(b)
    if loss:
        out.append("### Generic kernel (loss as a first-class function) vs specialised for the loss (O1, full, 2 threads)\n")
        out.append("| loss | size | generic ms | specialised ms | generic / specialised |")
        out.append("|---|---|---|---|---|")
        for (ln, size), v in sorted(loss.items()):
            r = _ratio(v.get("generic"), v.get("hand"))
            out.append(f"| {ln} | {size} | {fmt_ms(v.get('generic'))} | {fmt_ms(v.get('hand'))} | {fmt_x(r)} |")
            targets.append((f"generic within 10% of specialised: {ln} at {size}", r, r is not None and r <= 1.10))
        out.append("")

    # ---- networks (bench_networks.py)
    net = defaultdict(dict)
    descs = {}
    for b in benches:
        e = b.get("extra_info", {})
        if e.get("kind") == "network":
            net[(e["shape"], e["hidden"], e["threads"])][e["impl"]] = _med(b)
            descs[(e["shape"], e["hidden"])] = e["desc"]
    if net:
        out.append("### Networks: the clipped gradient sum of one dp-sgd step against plain numpy\n")
        out.append("| network | threads | dpreg ms | numpy per-example ms | numpy ghost ms | per-example / dpreg | "
                   "ghost / dpreg |")
        out.append("|---|---|---|---|---|---|---|")
        for (shape, hidden, threads), v in sorted(net.items()):
            out.append(f"| {descs[(shape, hidden)]} | {threads} | {fmt_ms(v.get('dpreg'))} | "
                       f"{fmt_ms(v.get('numpy-per-example'))} | {fmt_ms(v.get('numpy-ghost'))} | "
                       f"{fmt_x(_ratio(v.get('numpy-per-example'), v.get('dpreg')))} | "
                       f"{fmt_x(_ratio(v.get('numpy-ghost'), v.get('dpreg')))} |")
        out.append("")

    # ---- other frameworks
    other = [b for b in benches if b["extra_info"].get("impl") in ("torch", "jax")]
    if other:
        out.append("### Other frameworks (O1, full)\n")
        out.append("| framework | size | ms |")
        out.append("|---|---|---|")
        for b in other:
            out.append(f"| {b['extra_info']['impl']} | {b['extra_info']['size']} | {fmt_ms(_med(b))} |")
        out.append("")

    # ---- softmax (bench_softmax.py)
    sm = [b["extra_info"] for b in benches if b["extra_info"].get("kind") == "softmax-kernel"]
    if sm:
        out.append("### Softmax (784 features, 10 classes): fused kernel against numpy, batch 256, one thread\n")
        out.append("| oracle | rows | kernel ms | numpy ms | numpy / kernel |")
        out.append("|---|---|---|---|---|")
        for e in sorted(sm, key=lambda e: (e["oracle"], e["layout"])):
            out.append(f"| {e['oracle']} | {e['layout']} | {fmt_ms(e['kernel_median_s'])} | "
                       f"{fmt_ms(e['numpy_median_s'])} | {fmt_x(e['numpy_over_kernel'])} |")
        for e in (b["extra_info"] for b in benches if b["extra_info"].get("kind") == "softmax-dp-sgd"):
            out.append(f"\ndp-sgd, {e['steps']} steps of batch {e['batch']}: run {e['run_s']:.2f} s, of which "
                       f"kernel calls {e['kernel_s']:.2f} s (the rest, {100 * e['overhead_share']:.0f} %: sampling, "
                       f"noise, trajectory, Python); training accuracy {e['train_accuracy']:.3f}.")
        out.append("")

    # ---- sparse (bench_sparse.py)
    sparse = [b["extra_info"] for b in benches if b["extra_info"].get("kind") == "sparse"]
    if sparse:
        out.append("### Sparse rows: O1 over all rows, CSR kernel against dense kernel and scipy\n")
        out.append("| data | non-zeros | CSR kernel ms | dense kernel ms | scipy `X @ w`, `X.T @ a` ms | "
                   "scipy / CSR |")
        out.append("|---|---|---|---|---|---|")
        for e in sparse:
            out.append(f"| {e['name']} | {e['nnz']:,} | {fmt_ms(e['csr'])} | {fmt_ms(e.get('dense'))} | "
                       f"{fmt_ms(e['scipy'])} | {fmt_x(_ratio(e['scipy'], e['csr']))} |")
        out.append("")

    # ---- sampling (bench_sampling.py)
    samp = defaultdict(dict)
    for b in benches:
        e = b["extra_info"]
        if e.get("kind") == "sampling":
            samp[e["q"]][e["impl"]] = (_med(b), e["samples"], e["n"])
    if samp:
        out.append("### Poisson sampling: 256 samples of n = 49,990 rows\n")
        out.append("| rate q | compiled gaps ms | numpy gaps ms | numpy mask ms | numpy gaps / compiled | "
                   "numpy mask / compiled |")
        out.append("|---|---|---|---|---|---|")
        for q, v in sorted(samp.items(), reverse=True):
            g, ng, nm = (v.get(k, (None,))[0] for k in ("geometric-gaps", "numpy-gaps", "numpy-mask"))
            out.append(f"| {q:.4g} | {fmt_ms(g)} | {fmt_ms(ng)} | {fmt_ms(nm)} | {fmt_x(_ratio(ng, g))} | "
                       f"{fmt_x(_ratio(nm, g))} |")
        out.append("")

    # ---- dp-spider compiled steps (bench_spider_steps.py)
    for e in (b["extra_info"] for b in benches if b["extra_info"].get("kind") == "spider-steps"):
        out.append("### dp-spider on IJCNN1: compiled phases against the step-at-a-time loop\n")
        out.append("| run phase | compiled s | loop s | loop / compiled |")
        out.append("|---|---|---|---|")
        out.append(f"| median | {e['compiled_median_s']:.3f} | {e['loop_median_s']:.3f} | "
                   f"{fmt_x(e['loop_over_compiled'])} |")
        out.append(f"| minimum | {e['compiled_min_s']:.3f} | {e['loop_min_s']:.3f} | "
                   f"{fmt_x(_ratio(e['loop_min_s'], e['compiled_min_s']))} |")
        out.append("")

    # ---- step loop against plain numpy (bench_end_to_end.py::test_race_numpy)
    races = [b["extra_info"] for b in benches if b["extra_info"].get("kind") == "race"]
    if races:
        out.append("### The run phase against a plain-numpy loop doing the same steps (IJCNN1, logistic, eps 1)\n")
        out.append("| algorithm | busy processes | parallel variant | steps | dpreg s (first, calibrating) | "
                   "dpreg s (repeat) | numpy s | numpy / dpreg (repeat) | numpy / dpreg (first) |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for e in sorted(races, key=lambda e: (e["algo"], e["load"], e["warm_parallel"])):
            out.append(f"| {e['algo']} | {e['load']} | {'warm' if e['warm_parallel'] else 'cold'} | {e['steps']:,} | "
                       f"{e['dpreg_first_s']:.3f} | {e['dpreg_s']:.3f} | {e['numpy_s']:.3f} | "
                       f"{fmt_x(e['speedup'])} | {fmt_x(e['speedup_first'])} |")
        out.append("")

    # ---- peers, per step (bench_peers.py)
    peers = [b["extra_info"] for b in benches if b["extra_info"].get("kind") == "peer"]
    if peers:
        out.append("### DP-SGD per step against the peers (logistic regression, batch 256)\n")
        out.append("| data | peer | dpreg ms/step | peer ms/step | peer / dpreg |")
        out.append("|---|---|---|---|---|")
        for e in peers:
            out.append(f"| {e['data']} | {e['peer']} | {e['dpreg_ms']:.3f} | {e['peer_ms']:.3f} | "
                       f"{fmt_x(e['ratio'])} |")
        out.append("")

    # ---- data loading (bench_end_to_end.py::test_svmlight_cache)
    for e in (b["extra_info"] for b in benches if b["extra_info"].get("kind") == "load"):
        out.append(f"Loading {e['file']}: parse {e['first']:.3f} s, from the cache {e['second']:.3f} s "
                   f"({fmt_x(e['ratio'])}).\n")

    # ---- end to end
    e2e = [b for b in benches if b["extra_info"].get("kind") == "e2e"]
    if e2e:
        out.append("### End to end: `dpreg run` per algorithm on IJCNN1 (loss sigmoid-l2, eps 1, seed 0)\n")
        out.append("| algorithm | noise | wall s | data s | compile/load s | run s | eval s | gradient evaluations |")
        out.append("|---|---|---|---|---|---|---|---|")
        for b in sorted(e2e, key=lambda b: b["extra_info"]["algo"]):
            e = b["extra_info"]
            out.append(f"| {e['algo']} | {e.get('noise') or '-'} | {_med(b):.2f} | {e['data_s']:.2f} | "
                       f"{e['compile_s']:.2f} | {e['run_s']:.2f} | {e['eval_s']:.2f} | {e['grad_evals']:,} |")
        out.append("")

    # ---- memory, start-up, compile
    misc = [b for b in benches if b["extra_info"].get("kind") in ("rss", "startup", "compile")]
    if misc:
        out.append("### Memory, start-up, compile\n")
        out.append("| measurement | value | target |")
        out.append("|---|---|---|")
        for b in misc:
            e = b["extra_info"]
            if e["kind"] == "rss":
                out.append(f"| peak RSS `{e['command']}` | {e['peak_mb']:.0f} MB = baseline {e['base_mb']:.0f} MB "
                           f"(same command on breast-cancer) + data {e['data_mb']:.0f} MB + {e['excess_mb']:.0f} MB | "
                           f"data + 100 MB |")
                targets.append(("peak RSS on 581,012 x 54 <= baseline + data + 100 MB", e["excess_mb"],
                                e["excess_mb"] <= 100))
            elif e["kind"] == "startup":
                t = _med(b)
                out.append(f"| `{e['command']}` wall (median) | {t:.3f} s | < 0.5 s |")
                targets.append((f"`{e['command']}` < 0.5 s", t, t < 0.5))
            else:
                extra = e["cold_wall_s"] - e["warm_wall_s"]
                out.append(f"| `{e['command']}` first run, empty numba cache: wall {e['cold_wall_s']:.1f} s, of which "
                           f"kernel compile before the run {e['cold_compile_s']:.1f} s | all compiling: "
                           f"{extra:.1f} s (first wall - second wall) | < 15 s |")
                out.append(f"| same, second run (cache warm) | wall {e['warm_wall_s']:.1f} s, kernel load "
                           f"{e['warm_compile_s']:.2f} s | no recompilation (tests/test_startup.py) |")
                targets.append(("first run compiles in < 15 s (default pipeline; first - second wall)", extra,
                                extra < 15))
        out.append("")

    if targets:
        out.append("### Kernel targets in this run\n")
        out.append("| target | measured | held |")
        out.append("|---|---|---|")
        for text, v, ok in targets:
            val = "-" if v is None else f"{v:.2f}"
            out.append(f"| {text} | {val} | {'yes' if ok else 'NO'} |")
        out.append("")
    return "\n".join(out), targets


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("--out", default=None, help="write the markdown here (default: stdout)")
    ap.add_argument("--stat", default="median", choices=["median", "min", "mean"],
                    help="statistic of each benchmark's rounds (min: least disturbed by other load)")
    a = ap.parse_args(argv)
    global STAT
    STAT = a.stat
    data, benches = load(a.json)
    text, _ = render(data, benches)
    dt = data.get("datetime", "")
    head = f"Run of {dt}, pytest-benchmark {data.get('version', '')}; statistic: {STAT}.\n\n" if dt else ""
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(head + text + "\n")
    else:
        sys.stdout.write(head + text + "\n")


if __name__ == "__main__":
    main()
