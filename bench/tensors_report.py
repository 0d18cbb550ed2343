"""Summarises bench/tensors.sh's CSV: medians per point, the issue's goals as ratios, and which side
limits each ceiling point. python3 bench/tensors_report.py CSV [MACHINE] [ROUNDS] > summary.md
(standard library only)."""
import csv
import statistics
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
machine = sys.argv[2] if len(sys.argv) > 2 else ""
rounds = sys.argv[3] if len(sys.argv) > 3 else "?"


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


# (kind, size MiB, path, c, who) -> lists of measurements; who: wasm, onnx, triton, ceiling, ceiling_perf
runs = defaultdict(lambda: defaultdict(list))
for r in rows:
    _, kind, size = r["scenario"].split("_")
    mib = int(size.removesuffix("MiB"))
    who = r["server"]
    if who == "nereus":
        who = "onnx" if r["model"].endswith("_onnx") else "wasm"
    if r.get("client") == "perf_analyzer":
        who += "_perf"
    point = runs[(kind, r["protocol"], mib, int(r["concurrency"]), who)]
    for col in ("infer_per_sec", "mb_per_sec", "p50_us", "p99_us", "client_cpu_ms_per_req", "server_cpu_ms_per_req"):
        if num(r[col]) is not None:
            point[col].append(num(r[col]))


def med(kind, path, mib, c, who, col="mb_per_sec"):
    vals = runs.get((kind, path, mib, c, who), {}).get(col)
    return statistics.median(vals) if vals else None


def fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


kinds = sorted({k[0] for k in runs}, key=lambda k: k != "identity")
paths = [p for p in ("http", "grpc", "grpc-stream", "shm") if any(k[1] == p for k in runs)]
sizes = sorted({k[2] for k in runs})
concs = sorted({k[3] for k in runs})

print(f"# Large tensors: Nereus (Wasm and ONNX) vs Triton's python backend vs the bare ceiling\n")
print(f"`bench/tensors.sh`, median of {rounds} rounds, servers in rotated order; {machine}.")
print("One FP32 input of the size shown per request (shape [1, n]); MB/s is payload one way (10^6 bytes/s).")
print("Client: bench/tensors' `tensor-load`. 'limit' says which side spent more CPU per request at the ceiling")
print("(client or server); both share the machine's cores.\n")
goals = defaultdict(lambda: [0, 0])


def goal(name, ok):
    if ok is not None:
        goals[name][0] += bool(ok)
        goals[name][1] += 1


for kind in kinds:
    print(f"## {kind}\n")
    print("| path | MiB | c | Wasm MB/s | p50 ms | ONNX MB/s | Triton MB/s | ceiling MB/s | Wasm/ceiling | ONNX/ceiling"
          " | Wasm/Triton | ONNX/Triton | Wasm/ONNX | limit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        for mib in sizes:
            for c in concs:
                w, o, t, l = (med(kind, path, mib, c, x) for x in ("wasm", "onnx", "triton", "ceiling"))
                if all(v is None for v in (w, o, t, l)):
                    continue
                p50 = med(kind, path, mib, c, "wasm", "p50_us")
                cc = med(kind, path, mib, c, "ceiling", "client_cpu_ms_per_req")
                sc = med(kind, path, mib, c, "ceiling", "server_cpu_ms_per_req")
                limit = "–" if cc is None or sc is None else ("client" if cc > sc else "server")
                rs = [ratio(w, l), ratio(o, l), ratio(w, t), ratio(o, t), ratio(w, o)]
                goal("Nereus (Wasm) ≥ 90% of the ceiling", None if rs[0] is None else rs[0] >= 0.9)
                goal("Nereus (ONNX) ≥ 90% of the ceiling", None if rs[1] is None else rs[1] >= 0.9)
                goal("Nereus (Wasm) ≥ Triton", None if rs[2] is None else rs[2] >= 1.0)
                goal("Nereus (ONNX) ≥ Triton", None if rs[3] is None else rs[3] >= 1.0)
                if kind == "identity":
                    goal("Wasm identity within 1.5× of ONNX", None if rs[4] is None else rs[4] >= 1 / 1.5)
                cells = [fmt(x) for x in (w,)] + [fmt(None if p50 is None else p50 / 1000, 2)] + [fmt(x) for x in (o, t, l)]
                cells += [fmt(100 * x, 0) + "%" if x is not None else "–" for x in rs[:2]]
                cells += [fmt(x, 2) + "×" if x is not None else "–" for x in rs[2:]]
                print(f"| {path} | {mib} | {c} | " + " | ".join(cells) + f" | {limit} |")
    print()

print("## gRPC against HTTP (Nereus, gRPC MB/s ÷ HTTP MB/s)\n")
print("| kind | backend | " + " | ".join(f"{m} MiB c={c}" for m in sizes for c in concs) + " |")
print("|---|---|" + "---|" * (len(sizes) * len(concs)))
for kind in kinds:
    for who in ("wasm", "onnx", "ceiling"):
        cells = []
        for mib in sizes:
            for c in concs:
                x = ratio(med(kind, "grpc", mib, c, who), med(kind, "http", mib, c, who))
                if who != "ceiling":
                    goal(f"gRPC ≥ HTTP ({'Wasm' if who == 'wasm' else 'ONNX'})", None if x is None else x >= 1.0)
                cells.append(fmt(x, 2) + "×" if x is not None else "–")
        print(f"| {kind} | {who} | " + " | ".join(cells) + " |")
print()

if any(k[4].endswith("_perf") for k in runs):
    print("## The ceiling through perf_analyzer and through tensor-load (MB/s, round 1)\n")
    print("| kind | path | MiB | c | perf_analyzer | tensor-load | tensor-load ÷ perf_analyzer |")
    print("|---|---|---|---|---|---|---|")
    for kind in kinds:
        for path in ("http", "grpc"):
            for mib in sizes:
                for c in concs:
                    pa, tl = med(kind, path, mib, c, "ceiling_perf"), med(kind, path, mib, c, "ceiling")
                    if pa is None:
                        continue
                    x = ratio(tl, pa)
                    print(f"| {kind} | {path} | {mib} | {c} | {fmt(pa)} | {fmt(tl)} | {fmt(x, 2) + '×' if x else '–'} |")
    print()

print("## Goals met (points)\n")
for name, (ok, n) in goals.items():
    print(f"- {name}: {ok} of {n}")
