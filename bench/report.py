#!/usr/bin/env python3
"""The benchmark suite's report: medians, charts and the README's table, from CSVs of rounds.

    bench/report.py CSV... [--cost COST_CSV] [--out BASE] [--readme README.md | --no-readme]

Each CSV has the columns scenario,model,server,protocol,concurrency,round,infer_per_sec,p50_us,p99_us,
mb_per_sec (bench/csv.sh writes them; bench/suite.sh, bench/languages.sh with SUITE_CSV, and any script
measuring another scenario). Rows are grouped by (scenario, protocol, concurrency); each server's
(nereus, triton, ceiling) median over its rounds is taken. A CSV's companion file, the same name with
.machine.txt for .csv, says the machine and the settings ("key: value" lines); its facts go into the
captions. Writes BASE.md (the medians, every column), BASE.svg (grouped bars of infer/s) and
BASE-ratio.svg (each server's throughput over Triton's), BASE being the first CSV's name less .csv,
and replaces what lies between <!-- bench:begin --> and <!-- bench:end --> in the README (the
repository's top-level README.md unless told otherwise) with the table. With --cost, a second table
follows it: what a server costs rather than how fast it answers (models loaded, memory, threads, CPU
idle and at a low rate, latency under a CPU quota), from a CSV with the columns scenario,measure,server,
round,value (bench/csv.sh's cost_row; the suite's hooks write it), each server's median over its rounds.
Standard library only; needs no server.
"""

import argparse
import csv
import math
import os
import re
import statistics
import sys
from xml.sax.saxutils import escape, quoteattr

COST_COLUMNS = ["scenario", "measure", "server", "round", "value"]
COLUMNS = ["scenario", "model", "server", "protocol", "concurrency", "round",
           "infer_per_sec", "p50_us", "p99_us", "mb_per_sec"]
SERVERS = ("nereus", "triton", "ceiling")
NAMES = {"nereus": "Nereus", "triton": "Triton (python backend)",
         "ceiling": "ceiling (bare hyper / tonic serving simple)"}
COLORS = {"nereus": "#1f6fb2", "triton": "#e07b28", "ceiling": "#9a9a9a"}
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


def die(message):
    sys.exit(f"report.py: {message}")


def number(text, where, column, required):
    if text is None or text.strip() == "":
        if required:
            die(f"{where}: {column} is empty")
        return None
    try:
        value = float(text)
    except ValueError:
        die(f"{where}: {column} is not a number: {text!r}")
    if not math.isfinite(value):
        die(f"{where}: {column} is not finite: {text!r}")
    return value


def records(path, columns):
    """(where, row) for each row of the CSV at path, whose header must be exactly columns."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != columns:
            die(f"{path}: the header must be exactly {','.join(columns)}, not {','.join(header or [])}")
        for n, fields in enumerate(reader, start=2):
            if not fields:
                continue
            where = f"{path}:{n}"
            if len(fields) != len(columns):
                die(f"{where}: {len(fields)} fields, not {len(columns)}")
            row = dict(zip(columns, fields))
            if row["server"] not in SERVERS:
                die(f"{where}: server {row['server']!r} is not one of {', '.join(SERVERS)}")
            yield where, row


def read_rows(path):
    rows = []
    for where, row in records(path, COLUMNS):
        row["concurrency"] = int(number(row["concurrency"], where, "concurrency", True))
        row["round"] = int(number(row["round"], where, "round", True))
        row["infer_per_sec"] = number(row["infer_per_sec"], where, "infer_per_sec", True)
        for column in ("p50_us", "p99_us", "mb_per_sec"):
            row[column] = number(row[column], where, column, False)
        rows.append(row)
    return rows


def read_costs(path):
    """{(scenario, measure): {server: [values]}}, in the order the rows first name them."""
    costs = {}
    for where, row in records(path, COST_COLUMNS):
        number(row["round"], where, "round", True)
        value = number(row["value"], where, "value", True)
        costs.setdefault((row["scenario"], row["measure"]), {s: [] for s in SERVERS})[row["server"]].append(value)
    return costs


def f_cost(v):
    if v is None:
        return "–"
    if abs(v) >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}".rstrip("0").rstrip(".")


def cost_table(costs):
    lines = ["| scenario | measure | Nereus | Triton | ceiling | rounds |", "|---|---|---|---|---|---|"]
    for (scenario, measure), by in costs.items():
        rounds = max(len(v) for v in by.values())
        lines.append("| " + " | ".join([scenario, measure, *(f_cost(median(by[s])) for s in SERVERS),
                                         str(rounds)]) + " |")
    return lines


def read_machine(csv_path):
    path = re.sub(r"\.csv$", "", csv_path) + ".machine.txt"
    facts, notes = {}, []
    if os.path.exists(path):
        for line in open(path):
            key, sep, value = line.rstrip("\n").partition(": ")
            if not sep:
                continue
            if key in ("note", "hook"):
                notes.append(f"{key}: {value}" if key == "hook" else value)
            else:
                facts[key] = value
    return facts, notes


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


class Group:
    """One table row: a scenario at one protocol and concurrency, each server's rounds."""

    def __init__(self, scenario, protocol, concurrency):
        self.scenario, self.protocol, self.concurrency = scenario, protocol, concurrency
        self.rounds = {s: {} for s in SERVERS}  # server -> round -> row
        self.models = {s: [] for s in SERVERS}

    def add(self, row):
        s = row["server"]
        if row["model"] not in self.models[s]:
            self.models[s].append(row["model"])
        # the same round twice (two CSVs of one run): a round number of its own, nothing lost
        r = row["round"]
        while r in self.rounds[s]:
            r += 1000
        self.rounds[s][r] = row

    def has(self, s):
        return bool(self.rounds[s])

    def med(self, s, column):
        return median(row[column] for row in self.rounds[s].values())

    def paired_ratio(self, a, b):
        """Median of the per-round ratios a/b over the rounds both have."""
        both = sorted(set(self.rounds[a]) & set(self.rounds[b]))
        return median(self.rounds[a][r]["infer_per_sec"] / self.rounds[b][r]["infer_per_sec"]
                      for r in both if self.rounds[b][r]["infer_per_sec"] > 0)

    def ratio(self, a, b):
        x, y = self.med(a, "infer_per_sec"), self.med(b, "infer_per_sec")
        return x / y if x is not None and y else None

    def model(self):
        for s in ("nereus", "triton", "ceiling"):
            if self.models[s]:
                return "/".join(self.models[s])
        return ""

    def label(self):
        return f"{self.scenario} {self.protocol} c={self.concurrency}"


def group_rows(rows):
    groups = {}
    for row in rows:
        key = (row["scenario"], row["protocol"], row["concurrency"])
        if key not in groups:
            groups[key] = Group(*key)
        groups[key].add(row)
    for g in groups.values():
        for s in SERVERS:
            if len(g.models[s]) > 1:
                print(f"report.py: warning: {g.label()} has several {s} models ({', '.join(g.models[s])});"
                      " their rounds are taken together", file=sys.stderr)
    return list(groups.values())


# --- text --------------------------------------------------------------------------------------------

def f_int(v):
    return "" if v is None else f"{v:.0f}"


def f_times(v):
    return "" if v is None else f"{v:.2f}×"


def f_pct(v):
    return "" if v is None else f"{100 * v:.0f}%"


def f_mb(v):
    return "" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.1f}")


def caption(machines, csv_paths, readme_dir):
    parts = []
    for (facts, _), path in zip(machines, csv_paths):
        if not facts:
            parts.append(f"`{rel(path, readme_dir)}` (no machine file).")
            continue
        quick = facts.get("mode") == "quick"
        run = "**Quick run** (`bench/suite.sh --quick`" if quick else "Full run (`bench/suite.sh`"
        rounds = facts.get("rounds", "?")
        window = facts.get("perf_interval_ms")
        window = f", {int(window) / 1000:g} s perf_analyzer windows" if window else ""
        commit = facts.get("commit", "?")
        binary = facts.get("nereus_commit")
        binary = f", server built from {binary}" if binary and binary != commit else ""
        args = f", server flags `{facts['nereus_args']}`" if facts.get("nereus_args") else ""
        load = ""
        if facts.get("load_before"):
            load = f", load average {facts['load_before'].split()[0]} before the run"
            if facts.get("load_after"):
                load += f" and {facts['load_after'].split()[0]} after"
        smoke = " A quick run is a smoke test of the suite: one short round, numbers not to quote." if quick else ""
        parts.append(
            f"{run}: medians of {rounds} round{'s' if rounds != '1' else ''}, servers rotated{window}) "
            f"on {facts.get('date', '?')}: {facts.get('cpu', '?')}, `nproc` {facts.get('nproc', '?')}, "
            f"{facts.get('kernel', '?')}{load}, commit {commit}{binary}{args}; "
            f"[every round]({rel(path, readme_dir)}).{smoke}")
    return " ".join(parts)


def rel(path, start):
    return os.path.relpath(os.path.abspath(path), os.path.abspath(start)).replace(os.sep, "/")


def readme_table(groups):
    mb = any(g.med(s, "mb_per_sec") is not None for g in groups for s in SERVERS)
    head = ["scenario", "protocol", "c", "Nereus infer/s", "Triton infer/s", "ceiling infer/s",
            "Nereus/Triton", "Nereus/ceiling", "p50 µs Nereus / Triton / ceiling"]
    if mb:
        head.append("MB/s Nereus / Triton / ceiling")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in groups:
        p50 = " / ".join(f_int(g.med(s, "p50_us")) or "–" for s in SERVERS)
        cells = [f"{g.scenario} (`{g.model()}`)", g.protocol, str(g.concurrency),
                 *(f_int(g.med(s, "infer_per_sec")) or "–" for s in SERVERS),
                 f_times(g.ratio("nereus", "triton")) or "–", f_pct(g.ratio("nereus", "ceiling")) or "–", p50]
        if mb:
            cells.append(" / ".join(f_mb(g.med(s, "mb_per_sec")) or "–" for s in SERVERS))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary_md(groups, machines, csv_paths, base):
    out_dir = os.path.dirname(os.path.abspath(base))
    lines = [f"# Benchmark suite: {', '.join(os.path.basename(p) for p in csv_paths)}", "",
             caption(machines, csv_paths, out_dir), "",
             "Medians over the rounds; Nereus/Triton and Nereus/ceiling as the ratio of the medians and, in "
             "brackets, the median of the per-round ratios (a round measures its three servers seconds apart, "
             "in the same phase of the machine). The ceiling serves `simple` in every row.", ""]
    head = ["scenario", "model", "protocol", "c", "server", "rounds", "infer/s", "p50 µs", "p99 µs", "MB/s",
            "vs Triton", "vs ceiling"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in groups:
        for s in SERVERS:
            if not g.has(s):
                continue
            vs_t = vs_c = ""
            if s != "triton" and g.has("triton"):
                vs_t = f"{f_times(g.ratio(s, 'triton'))} ({f_times(g.paired_ratio(s, 'triton'))})"
            if s != "ceiling" and g.has("ceiling"):
                vs_c = f"{f_pct(g.ratio(s, 'ceiling'))} ({f_pct(g.paired_ratio(s, 'ceiling'))})"
            lines.append("| " + " | ".join([
                g.scenario, "/".join(g.models[s]), g.protocol, str(g.concurrency), s, str(len(g.rounds[s])),
                f_int(g.med(s, "infer_per_sec")), f_int(g.med(s, "p50_us")), f_int(g.med(s, "p99_us")),
                f_mb(g.med(s, "mb_per_sec")), vs_t, vs_c]) + " |")
    notes = [n for facts, ns in machines for n in ns]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    name = os.path.basename(base)
    lines += ["", f"![infer/s per scenario]({name}.svg)", ""]
    if any(g.rounds["triton"] for g in groups):  # the ratio chart exists only where Triton was measured
        lines += [f"![throughput over Triton's]({name}-ratio.svg)", ""]
    return "\n".join(lines)


# --- SVG ---------------------------------------------------------------------------------------------

def nice_step(x):
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least x."""
    if x <= 0:
        return 1
    p = 10 ** math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * p >= x * (1 - 1e-9):
            return m * p
    return 10 * p


def f_short(v):
    if v >= 1000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}" if v >= 10 else f"{v:.2g}"


def text(x, y, s, size=11, anchor="middle", weight="normal", fill="#222", rotate=None):
    transform = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate is not None else ""
    bold = f' font-weight="{weight}"' if weight != "normal" else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"'
            f'{bold}{transform}>{escape(s)}</text>')


def bar_chart(groups, series, title, subtitle, value_fmt, axis_fmt, reference=None):
    """Grouped bars: groups along x, one bar per series (key, name, color, value(group))."""
    values = [v for g in groups for _, _, _, get in series for v in [get(g)] if v is not None]
    vmax = max(values + [reference or 0, 1e-9])
    step = nice_step(vmax * 1.18 / 5)  # room above the tallest bar for its label
    top = step * math.ceil(vmax * 1.18 / step)
    bw, gap = 20, 26
    gw = bw * len(series) + gap
    labels = [g.label() for g in groups]
    rotate = max(len(g.scenario) for g in groups) * 6.6 > gw - 4  # two lines fit under a group, or slant
    left, right, plot_top, plot_h = 72, 24, 84, 300
    bottom = 24 + (max(len(s) for s in labels) * 5.2 + 10 if rotate else 34)
    legend_w = sum(17 + len(name) * 6.6 + 22 for _, name, _, _ in series)
    width = max(left + right + gw * len(groups), left + right + len(title) * 9.2,
                left + right + len(subtitle) * 6.0, left + right + legend_w, 520)
    height = plot_top + plot_h + bottom
    y0 = plot_top + plot_h

    def y(v):
        return y0 - plot_h * v / top

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family={quoteattr(FONT)}>',
           f"<title>{escape(title)}</title>",
           f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
           text(left, 22, title, size=15, anchor="start", weight="bold"),
           text(left, 40, subtitle, size=10.5, anchor="start", fill="#555")]
    lx = left
    for _, name, color, _ in series:  # legend
        out.append(f'<rect x="{lx}" y="52" width="12" height="12" fill="{color}"/>')
        out.append(text(lx + 17, 62, name, size=11.5, anchor="start"))
        lx += 17 + len(name) * 6.6 + 22
    t = 0.0
    while t <= top * (1 + 1e-9):  # grid and y axis
        out.append(f'<line x1="{left}" x2="{width - right:.0f}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                   f'stroke="{"#888" if t == 0 else "#e3e3e3"}" stroke-width="1"/>')
        out.append(text(left - 6, y(t) + 4, axis_fmt(t), size=10.5, anchor="end", fill="#444"))
        t += step
    if reference is not None:
        out.append(f'<line x1="{left}" x2="{width - right:.0f}" y1="{y(reference):.1f}" y2="{y(reference):.1f}" '
                   f'stroke="{COLORS["triton"]}" stroke-width="1.5" stroke-dasharray="5,4"/>')
    for i, g in enumerate(groups):
        gx = left + i * gw + gap / 2
        for j, (_, name, color, get) in enumerate(series):
            v = get(g)
            x = gx + j * bw
            if v is None:
                out.append(text(x + bw / 2, y0 - 4, "–", size=10, fill="#999"))
                continue
            h = max(y0 - y(v), 0.5)
            out.append(f'<rect x="{x + 1:.1f}" y="{y(v):.1f}" width="{bw - 2}" height="{h:.1f}" fill="{color}">'
                       f"<title>{escape(f'{g.label()}, {name}: {value_fmt(v)}')}</title></rect>")
            out.append(text(x + bw / 2 + 3.5, y(v) - 4, value_fmt(v), size=9.5, anchor="start", rotate=-90))
        cx = gx + len(series) * bw / 2
        if rotate:
            out.append(text(cx + 4, y0 + 14, g.label(), size=11, anchor="end", rotate=-35))
        else:
            out.append(text(cx, y0 + 15, g.scenario, size=11))
            out.append(text(cx, y0 + 29, f"{g.protocol} c={g.concurrency}", size=10.5, fill="#555"))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def short_caption(machines):
    for facts, _ in machines:
        if facts:
            quick = "quick run, " if facts.get("mode") == "quick" else ""
            rounds = facts.get("rounds", "?")
            return (f"{quick}medians of {rounds} round{'s' if rounds != '1' else ''}, {facts.get('date', '?')}, "
                    f"{facts.get('cpu', '?')} ×{facts.get('nproc', '?')}, {facts.get('kernel', '?')}, "
                    f"commit {facts.get('commit', '?')}")
    return "medians of the rounds"


def charts(groups, machines):
    sub = short_caption(machines)
    series = [(s, NAMES[s], COLORS[s], (lambda g, s=s: g.med(s, "infer_per_sec"))) for s in SERVERS
              if any(g.has(s) for g in groups)]
    main = bar_chart(groups, series, "Inferences per second (perf_analyzer; higher is better)", sub,
                     f_short, f_short)
    with_triton = [g for g in groups if g.has("triton")]
    ratio = None
    if with_triton:
        rs = [(s, f"{NAMES[s]} / Triton", COLORS[s], (lambda g, s=s: g.ratio(s, "triton")))
              for s in ("nereus", "ceiling") if any(g.has(s) for g in with_triton)]
        ratio = bar_chart(with_triton, rs, "Throughput over Triton's (dashed: Triton = 1×)", sub,
                          lambda v: f"{v:.2f}×", lambda v: f"{v:g}×", reference=1.0)
    return main, ratio


# --- README --------------------------------------------------------------------------------------------

def update_readme(path, block):
    text_ = open(path, encoding="utf-8").read()
    if text_.count(BEGIN) != 1 or text_.count(END) != 1 or text_.index(BEGIN) > text_.index(END):
        die(f"{path} needs one {BEGIN} line and one {END} line after it (or pass --no-readme)")
    head, rest = text_.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + BEGIN + "\n" + block + "\n" + END + tail
    if new != text_:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="CSV files of rounds (bench/csv.sh's columns)")
    ap.add_argument("--cost", help="a CSV of costs (bench/csv.sh's cost_row columns): a second table")
    ap.add_argument("--out", help="base path of the outputs (default: the first CSV's, less .csv)")
    ap.add_argument("--readme", default=os.path.normpath(os.path.join(here, "..", "README.md")),
                    help="the README whose bench markers get the table (default: the repository's)")
    ap.add_argument("--no-readme", action="store_true", help="leave every README alone")
    args = ap.parse_args()

    rows = [row for path in args.csv for row in read_rows(path)]
    if not rows:
        die("no rows in " + ", ".join(args.csv))
    groups = group_rows(rows)
    machines = [read_machine(p) for p in args.csv]
    base = args.out or re.sub(r"\.csv$", "", args.csv[0])

    costs = cost_table(read_costs(args.cost)) if args.cost else []
    def cost_head(start):
        return ["", "What a server costs (the suite's hooks: bench/density.sh, bench/light_load.sh, "
                "bench/quota.sh; medians of the rounds; the ceiling is bare hyper serving `simple`; Triton is "
                f"not loaded with 10,000 python models nor run under a quota; [every round]({rel(args.cost, start)})):",
                ""]
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(summary_md(groups, machines, args.csv, base))
        if costs:
            f.write("\n".join(cost_head(os.path.dirname(os.path.abspath(base))) + costs) + "\n")
    main_svg, ratio_svg = charts(groups, machines)
    with open(base + ".svg", "w", encoding="utf-8") as f:
        f.write(main_svg)
    written = [base + ".md", base + ".svg"]
    if ratio_svg:
        with open(base + "-ratio.svg", "w", encoding="utf-8") as f:
            f.write(ratio_svg)
        written.append(base + "-ratio.svg")

    table = readme_table(groups)
    print("\n".join(table))
    if not args.no_readme:
        readme_dir = os.path.dirname(os.path.abspath(args.readme))
        src = ", ".join(f"`{rel(p, readme_dir)}`" for p in args.csv)
        block = "\n".join([
            f"<!-- generated by bench/report.py from {src}; edits here are overwritten -->",
            caption(machines, args.csv, readme_dir), "",
            *table, "",
            f"![Inferences per second, Nereus, Triton and the ceiling]({rel(base + '.svg', readme_dir)})",
            *((cost_head(readme_dir) + costs) if costs else [])])
        update_readme(args.readme, block)
        written.append(args.readme)
    print("wrote " + ", ".join(written), file=sys.stderr)


if __name__ == "__main__":
    main()
