#!/usr/bin/env python3
"""`make results`: tables and plots from docs/results/results.csv and instructions.csv.

Writes docs/results/README.md (every workload's table, the instruction counts, the machine) and
one PNG per workload, and refreshes every generated block in the Markdown files of the repository.
A generated block is what a chapter quotes; it looks like

    <!-- results table=step01/rational -->        (one workload, all thread counts)
    <!-- results table=step05/shuffle64 threads=1,16 only=step05-objectpool,glibc,mimalloc -->
    <!-- results instructions=step01/rational -->
    <!-- results headline -->
    <!-- results durations -->                   (how long each step's benchmark took; links
                                                  written for a page in docs/)
    ...generated, never edited by hand...
    <!-- /results -->

and a number quoted inside a sentence is an inline block, `<!--v KIND WORKLOAD[@T] A [B]-->`
value `<!--/v-->`, KIND one of
    ns       A's ns per pair              (<!--v ns step01/rational step01-freelist-->2.08<!--/v-->)
    ratio    A's ns over B's ns, as 1.18× (<!--v ratio step04/mt512@4 step04-spin glibc-->...)
    rss      A's peak RSS in MiB
    instr    A's instructions per pair (callgrind); instr-only: minus the baseline
    ms       A's time for the whole pattern, in ms (the big-block workloads)
    rss-end  A's resident set at the end of the run, in MiB (release-64k, release-1m)
    util     A's utilisation on a trace, in % (<!--v util trace-git-log step06-tierpool-->);
    held     A's memory held at a trace's peak, in MiB; nsop: A's ns per op on a trace
             (traces.csv; WORKLOAD is trace-<name>)
T is the thread count (1 if left out).

The recorded traces (docs/traces.md) have blocks of their own: scripts/trace_results.py.

The big-block workloads of step 06 (realloc-grow, calloc-sparse, release-64k, release-1m) have
tables of their own: the time of the whole pattern in ms, the memory figure each is about beside
glibc's, and the block moves of the growth.

`--check` regenerates nothing and exits 1 if any block differs from what the CSV says now: the
test that keeps chapters from quoting numbers nobody measured.
"""
import argparse
import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import trace_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
PEERS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "tbbmalloc"]
HEADLINE_COLORS = {"the step": "tab:red", "glibc": "tab:blue", "jemalloc": "tab:orange",
                   "tcmalloc": "tab:green", "mimalloc": "tab:purple", "tbbmalloc": "tab:brown"}
BLOCK = re.compile(r"(<!-- results (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- /results -->)",
                   re.S)
# Each step's headline: the workload and thread count its chapter is about, and the allocators
# that stand for the step (the fastest of them is shown). Variants that answer another question
# (hardened, unsized free, an arena that never frees) stay in the chapters' tables.
HEADLINE = [
    ("step01", "rational", 1, ["step01-freelist"]),
    ("step02", "rational", 1, ["step02-mempool"]),
    ("step03", "sizes", 1, ["step03-sizeclass"]),
    ("step04", "mt512", 4, ["step04-mutex", "step04-spin"]),
    ("step05", "shuffle64", 1, ["step05-objectpool"]),
    ("step06", "sizes", 2, ["step06-tierpool"]),
]


# The big-block workloads: one pattern per process, `ns_per_pair` is the time of the whole pattern.
# Each names the CSV column of the memory figure it is about (its table is sorted by it, with a
# ratio to glibc's), or None where time is the figure.
BIGBLOCK = {
    "realloc-grow": None,
    "calloc-sparse": "peak_rss_kb",
    "release-64k": "end_rss_kb",
    "release-1m": "end_rss_kb",
}
MEMORY_LABELS = {"peak_rss_kb": "peak RSS", "end_rss_kb": "RSS at the end"}


def bigblock_kind(workload):
    """The workload's name without its step ("step06/realloc-grow" -> "realloc-grow") when it is a
    big-block workload, else None."""
    name = workload.split("/", 1)[-1]
    return name if name in BIGBLOCK else None


def read_csv(path):
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def fmt_ns(v):
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt_ms(ns):
    ms = ns / 1e6
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def mib(kb):
    return f"{int(kb) / 1024:.1f}"


def bigblock_table(rows, workload, only=None):
    """Markdown for a big-block workload: time of the whole pattern, its memory figure beside
    glibc's, the growth's block moves; sorted by the memory figure where there is one."""
    rows = [r for r in rows if r["workload"] == workload and int(r["threads"]) == 1]
    if only:
        rows = [r for r in rows if r["allocator"] in only]
    if not rows:
        return f"*No results for `{workload}` yet: run `make bench`.*\n"
    memory = BIGBLOCK[bigblock_kind(workload)]
    glibc = next((r for r in rows if r["allocator"] == "glibc"), None)
    has_moves = any(r.get("moves") for r in rows)
    key = (lambda r: int(r[memory] or 0)) if memory else (lambda r: float(r["ns_per_pair"]))
    head = ["allocator", "time (ms)", "vs glibc"]
    if has_moves:
        head.append("block moves")
    if memory:
        head += [f"{MEMORY_LABELS[memory]} (MiB)", "vs glibc"]
    if memory != "peak_rss_kb":
        head.append("peak RSS (MiB)")
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    stopped = False
    for r in sorted(rows, key=key):
        time_cell = fmt_ms(float(r["ns_per_pair"]))
        if r.get("stopped_at_kb"):
            stopped = True
            time_cell = f"> {time_cell} (stopped at {int(r['stopped_at_kb']) // 1024} MiB)"
        ratio = f"{float(r['ratio_vs_glibc']):.2f}×" if r["ratio_vs_glibc"] else "–"
        cells = [r["allocator"], time_cell, ratio]
        if has_moves:
            cells.append(r.get("moves") or "–")
        if memory:
            # The figure the workload is about, and its ratio to glibc's.
            value, base = r.get(memory), glibc.get(memory) if glibc else None
            cells += [mib(value) if value else "–",
                      f"{int(value) / int(base):.2f}×" if value and base and int(base) else "–"]
        if memory != "peak_rss_kb":
            cells.append(mib(r["peak_rss_kb"]))
        out.append("| " + " | ".join(cells) + " |")
    note = ""
    if stopped:
        note = ("\n\nA row marked *stopped* ran out of its time budget before the buffer reached "
                "256 MiB: its time is the budget, not the growth.")
    sorted_by = f"{MEMORY_LABELS[memory]}, smallest first" if memory else "time, fastest first"
    return (f"`{workload}`, 1 thread, one run in a fresh process per row (sorted by "
            f"{sorted_by}):\n\n" + "\n".join(out) + note + "\n")


def by_workload(rows):
    groups = defaultdict(list)
    for r in rows:
        groups[r["workload"]].append(r)
    return groups


def table(rows, workload, threads=None, only=None):
    """Markdown: rows = allocators (fastest first at the first thread count), columns = threads."""
    if bigblock_kind(workload):
        return bigblock_table(rows, workload, only)
    rows = [r for r in rows if r["workload"] == workload]
    if threads:
        rows = [r for r in rows if int(r["threads"]) in threads]
    if only:
        rows = [r for r in rows if r["allocator"] in only]
    if not rows:
        return f"*No results for `{workload}` yet: run `make bench`.*\n"
    counts = sorted({int(r["threads"]) for r in rows})
    cell = {(r["allocator"], int(r["threads"])): r for r in rows}
    allocators = sorted({r["allocator"] for r in rows},
                        key=lambda a: min(float(cell[(a, t)]["ns_per_pair"])
                                          for t in counts if (a, t) in cell))
    if len(counts) == 1:
        t = counts[0]
        out = ["| allocator | ns per pair | vs glibc | peak RSS (MiB) |", "|---|---:|---:|---:|"]
        for a in allocators:
            r = cell[(a, t)]
            ratio = f"{float(r['ratio_vs_glibc']):.2f}×" if r["ratio_vs_glibc"] else "–"
            out.append(f"| {a} | {fmt_ns(float(r['ns_per_pair']))} | {ratio} | "
                       f"{int(r['peak_rss_kb']) / 1024:.1f} |")
        return f"`{workload}`, {t} thread{'s' if t > 1 else ''}:\n\n" + "\n".join(out) + "\n"
    head = "| allocator | " + " | ".join(f"T={t} ns (vs glibc)" for t in counts)
    head += f" | peak RSS T={counts[-1]} (MiB) |"
    out = [head, "|---|" + "---:|" * (len(counts) + 1)]
    for a in allocators:
        cells = []
        for t in counts:
            r = cell.get((a, t))
            if r is None:
                cells.append("–")
                continue
            ratio = f" ({float(r['ratio_vs_glibc']):.2f}×)" if r["ratio_vs_glibc"] else ""
            cells.append(fmt_ns(float(r["ns_per_pair"])) + ratio)
        last = cell.get((a, counts[-1]))
        rss = f"{int(last['peak_rss_kb']) / 1024:.1f}" if last else "–"
        out.append(f"| {a} | " + " | ".join(cells) + f" | {rss} |")
    return f"`{workload}`, ns per alloc+free pair:\n\n" + "\n".join(out) + "\n"


def instruction_table(rows, workload):
    rows = sorted((r for r in rows if r["workload"] == workload),
                  key=lambda r: float(r["instructions_per_pair"]))
    if not rows:
        return f"*No instruction counts for `{workload}` yet: run `make bench`.*\n"
    out = ["| allocator | instructions per pair | allocator only |", "|---|---:|---:|"]
    for r in rows:
        out.append(f"| {r['allocator']} | {float(r['instructions_per_pair']):.0f} | "
                   f"{float(r['allocator_only_per_pair']):.0f} |" if r["allocator_only_per_pair"]
                   else f"| {r['allocator']} | {float(r['instructions_per_pair']):.0f} | – |")
    return (f"`{workload}`, callgrind, instructions per alloc+free pair (allocator only = minus "
            f"the baseline):\n\n" + "\n".join(out) + "\n")


def step_rows(rows, step, workload, threads):
    return {r["allocator"]: float(r["ns_per_pair"]) for r in rows
            if r["workload"] == f"{step}/{workload}" and int(r["threads"]) == threads}


def headline_table(rows):
    out = ["| step | workload | the step's allocator (ns) | " + " | ".join(PEERS) + " |",
           "|---|---|---:|" + "---:|" * len(PEERS)]
    any_row = False
    for step, workload, threads, names in HEADLINE:
        cells = step_rows(rows, step, workload, threads)
        own = {a: v for a, v in cells.items() if a in names}
        if not own:
            continue
        any_row = True
        best = min(own, key=own.get)
        peers = [fmt_ns(cells[p]) if p in cells else "–" for p in PEERS]
        out.append(f"| {step} | {workload} T={threads} | {best}: **{fmt_ns(own[best])}** | "
                   + " | ".join(peers) + " |")
    if not any_row:
        return "*No results yet: run `make bench`.*\n"
    return "ns per alloc+free pair, median, same run per row:\n\n" + "\n".join(out) + "\n"


def render(spec, rows, instr):
    fields = dict(kv.split("=", 1) for kv in spec.split() if "=" in kv)
    if spec.split()[0] == "traces" or "trace" in fields:
        return trace_results.render(fields, spec)
    if spec.strip() == "headline":
        return headline_table(rows)
    if "table" in fields:
        threads = [int(t) for t in fields["threads"].split(",")] if "threads" in fields else None
        only = fields["only"].split(",") if "only" in fields else None
        return table(rows, fields["table"], threads, only)
    if "instructions" in fields:
        return instruction_table(instr, fields["instructions"])
    if "machine" in fields or spec.strip() == "machine":
        return machine_text()
    if spec.strip() == "durations":
        return durations_table()
    raise SystemExit(f"unknown results block: {spec}")


def machine_text():
    path = RESULTS / "machine.json"
    if not path.exists():
        return "*Machine not recorded yet: run `make bench`.*\n"
    m = json.loads(path.read_text())
    pk = ", ".join(f"{k} {v}" for k, v in m["packages"].items())
    return (f"Measured on {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}, {m['compiler']}, "
            f"build `{m['build']}`, {m['date']}. Packages: {pk}.\n")


def fmt_seconds(seconds):
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60} s"


def durations_table():
    """How long `make bench` spent on each step (scripts/bench.py times its own work)."""
    rows = read_csv(RESULTS / "durations.csv")
    if not rows:
        return "*No durations recorded yet: run `make bench`.*\n"
    out = ["| step | processes | timing | callgrind runs | callgrind counts | together |",
           "|---|---:|---:|---:|---:|---:|"]
    total_timing = total_callgrind = 0
    for r in rows:
        timing, callgrind = float(r["timing_s"] or 0), float(r["callgrind_s"] or 0)
        total_timing += timing
        total_callgrind += callgrind
        out.append(f"| [{r['step']}](../{r['step']}/README.md) | {r['processes'] or '–'} | "
                   f"{fmt_seconds(timing)} | {r['callgrind_runs'] or '–'} | "
                   f"{fmt_seconds(callgrind)} | {fmt_seconds(timing + callgrind)} |")
    return ("\n".join(out) + f"\n\nAll steps: {fmt_seconds(total_timing)} of timings and "
            f"{fmt_seconds(total_callgrind)} of callgrind counts, "
            f"{fmt_seconds(total_timing + total_callgrind)} together.\n")


INLINE = re.compile(r"(<!--v (?P<spec>[^>]*?)-->)(?P<body>[^<]*)(<!--/v-->)")


def inline_value(spec, rows, instr, missing):
    """One number for a sentence; `missing` collects what the CSVs do not have."""
    kind, workload, *names = spec.split()
    if kind in trace_results.INLINE_KINDS:
        return trace_results.inline_value(kind, workload, names[0], missing)
    workload, _, threads = workload.partition("@")
    threads = int(threads or 1)

    def row(table, name):
        for r in table:
            if (r["workload"] == workload and r["allocator"] == name
                    and int(r.get("threads", 1)) == threads):
                return r
        missing.append(f"{kind} {workload}@{threads} {name}")
        return None

    if kind in ("instr", "instr-only"):
        r = row(instr, names[0])
        key = "instructions_per_pair" if kind == "instr" else "allocator_only_per_pair"
        return f"{float(r[key]):.0f}" if r and r[key] else "?"
    rs = [row(rows, n) for n in names]
    if None in rs:
        return "?"
    if kind == "ns":
        return fmt_ns(float(rs[0]["ns_per_pair"]))
    if kind == "rss":
        return f"{int(rs[0]['peak_rss_kb']) / 1024:.1f}"
    if kind == "rss-end":
        if not rs[0].get("end_rss_kb"):
            missing.append(f"{kind} {workload}@{threads} {names[0]}")
            return "?"
        return mib(rs[0]["end_rss_kb"])
    if kind == "ms":
        return fmt_ms(float(rs[0]["ns_per_pair"]))
    if kind == "ratio":
        v = float(rs[0]["ns_per_pair"]) / float(rs[1]["ns_per_pair"])
        return f"{v:.2f}×" if v < 10 else f"{v:.1f}×"
    raise SystemExit(f"unknown inline value kind: {spec}")


def refresh_blocks(rows, instr, check, missing=None):
    stale = []
    missing = [] if missing is None else missing
    files = [p for p in ROOT.rglob("*.md") if "build" not in p.relative_to(ROOT).parts]
    for path in files:
        text = path.read_text()
        new = BLOCK.sub(lambda m: m.group(1) + "\n" + render(m.group("spec"), rows, instr) + "\n"
                        + m.group(4), text)
        new = INLINE.sub(lambda m: m.group(1) + inline_value(m.group("spec"), rows, instr,
                                                             missing) + m.group(4), new)
        missing += [f"table {w} in {path.relative_to(ROOT)}" for w in
                    re.findall(r"\*No (?:results|instruction counts) for `([^`]+)`", new)]
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new)
    return stale


def plot(rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = trace_results.plot_curves(plt)
    for workload, group in sorted(by_workload(rows).items()):
        if trace_results.is_trace(workload):
            continue  # its own plots: memory over the trace (trace_results.py)
        counts = sorted({int(r["threads"]) for r in group})
        if bigblock_kind(workload):
            fig = plot_bigblock(plt, workload, group)
            out = RESULTS / (workload.replace("/", "_") + ".png")
            fig.savefig(out, dpi=90)
            plt.close(fig)
            written.append(out.name)
            continue
        fig, ax = plt.subplots(figsize=(8, 4.5))
        if len(counts) == 1:
            group = sorted(group, key=lambda r: float(r["ns_per_pair"]))
            names = [r["allocator"] for r in group]
            values = [float(r["ns_per_pair"]) for r in group]
            colors = ["tab:red" if n.startswith("step") else
                      "tab:gray" if n == "baseline" else "tab:blue" for n in names]
            ax.barh(names, values, color=colors)
            ax.invert_yaxis()
            ax.set_xlabel("ns per alloc+free pair (median; lower is better)")
            for y, v in enumerate(values):
                ax.text(v, y, f" {fmt_ns(v)}", va="center", fontsize=8)
        else:
            for allocator in sorted({r["allocator"] for r in group}):
                pts = sorted((int(r["threads"]), float(r["ns_per_pair"])) for r in group
                             if r["allocator"] == allocator)
                style = "-o" if allocator.startswith("step") else "--."
                width = 2.5 if allocator.startswith("step") else 1
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=allocator,
                        linewidth=width)
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts, [str(c) for c in counts])
            ax.set_yscale("log")
            ax.set_xlabel("threads (this machine has %s cores)" % machine_cores())
            ax.set_ylabel("ns per pair, all threads (log)")
            ax.legend(fontsize=7, ncol=2)
        ax.set_title(f"{workload}")
        fig.tight_layout()
        out = RESULTS / (workload.replace("/", "_") + ".png")
        fig.savefig(out, dpi=90)
        plt.close(fig)
        written.append(out.name)

    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels, series = [], defaultdict(list)
    for step, workload, threads, names in HEADLINE:
        cells = step_rows(rows, step, workload, threads)
        own = {a: v for a, v in cells.items() if a in names}
        if not own:
            continue
        labels.append(f"{step}\n{workload} T={threads}")
        series["the step"].append(min(own.values()))
        for p in PEERS:
            series[p].append(cells.get(p, float("nan")))
    if labels:
        width = 0.8 / len(series)
        for i, (name, values) in enumerate(series.items()):
            ax.bar([x + i * width for x in range(len(labels))], values, width, label=name,
                   color=HEADLINE_COLORS[name])
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))], labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ns per alloc+free pair (log)")
        ax.set_title("Each step on its workload, beside the malloc libraries")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(RESULTS / "headline.png", dpi=90)
        written.append("headline.png")
    plt.close(fig)
    return written


def plot_bigblock(plt, workload, group):
    """Two panels: the time of the whole pattern, and the memory figure the workload is about
    (peak RSS for the growth and the calloc, the RSS at the end for release-*), each on a log
    scale where the rows span more than a factor 30."""
    memory = BIGBLOCK[bigblock_kind(workload)] or "peak_rss_kb"
    group = sorted(group, key=lambda r: float(r["ns_per_pair"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    names = [r["allocator"] for r in group]
    colors = ["tab:red" if n.startswith("step") else "tab:blue" for n in names]
    panels = [(left, [float(r["ns_per_pair"]) / 1e6 for r in group], "ms for the whole pattern"),
              (right, [int(r[memory] or 0) / 1024 for r in group],
               f"{MEMORY_LABELS[memory]}, MiB")]
    for ax, values, label in panels:
        ax.barh(names, values, color=colors)
        ax.invert_yaxis()
        positive = [v for v in values if v > 0]
        if positive and max(positive) / min(positive) > 30:
            ax.set_xscale("log")
        ax.set_xlabel(label + " (lower is better)")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:.0f}" if v >= 100 else f" {v:.1f}" if v >= 10 else f" {v:.2f}",
                    va="center", fontsize=8)
    for y, r in enumerate(group):
        if r.get("stopped_at_kb"):
            left.text(float(r["ns_per_pair"]) / 1e6, y, "  stopped", va="bottom", fontsize=7)
    right.set_yticks(range(len(names)), [""] * len(names))
    fig.suptitle(f"{workload}")
    fig.tight_layout()
    return fig


def machine_cores():
    path = RESULTS / "machine.json"
    return json.loads(path.read_text())["cores"] if path.exists() else "?"


def write_index(rows, instr, plots):
    parts = ["# Results\n",
             "Generated by `make results` from `results.csv` and `instructions.csv`, which "
             "`make bench` measures (`scripts/bench.py`). Do not edit: run `make bench`.\n",
             "<!-- results machine -->\n<!-- /results -->\n",
             "`workload` is `<step>/<workload>`: each step runs its workloads against its own "
             "allocators and every peer in one run, so ratios compare numbers taken minutes "
             "apart, not days. `ns per pair` is the wall time of all threads divided by all "
             "alloc+free pairs (median of the repetitions); peak RSS is the benchmark process's "
             "high-water mark (VmHWM, read by the process itself), its own few MiB included; "
             "the `baseline` row never reuses memory within a round, so its RSS is no floor. "
             "The big-block workloads of step 06 (`realloc-grow`, `calloc-sparse`, `release-64k`, "
             "`release-1m`) run one whole pattern once per process: their tables give its time in "
             "ms and the memory figure each is about beside glibc's. See "
             "[../benchmarking.md](../benchmarking.md).\n",
             "![headline](headline.png)\n", "<!-- results headline -->\n<!-- /results -->\n"]
    for workload in sorted(by_workload(rows)):
        if trace_results.is_trace(workload):
            continue  # in the traces' section below
        parts.append(f"## {workload}\n")
        png = workload.replace("/", "_") + ".png"
        if png in plots:
            parts.append(f"![{workload}]({png})\n")
        parts.append(f"<!-- results table={workload} -->\n<!-- /results -->\n")
    parts += trace_results.index_section()
    if instr:
        parts.append("## Instructions per pair (callgrind)\n")
        for workload in sorted({r["workload"] for r in instr}):
            parts.append(f"<!-- results instructions={workload} -->\n<!-- /results -->\n")
    (RESULTS / "README.md").write_text("\n".join(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if any block is stale")
    args = ap.parse_args()
    rows = read_csv(RESULTS / "results.csv")
    instr = read_csv(RESULTS / "instructions.csv")
    missing = []
    if args.check:
        stale = refresh_blocks(rows, instr, check=True, missing=missing)
        for p in stale:
            print(f"stale generated block in {p}: run `make results`")
        for m in missing:
            print(f"quoted but never measured: {m}")
        return 1 if stale or missing else 0
    plots = []
    try:
        plots = plot(rows)
    except ImportError:
        print("note: matplotlib is missing (apt-get install python3-matplotlib): no plots")
    write_index(rows, instr, plots)
    refresh_blocks(rows, instr, check=False, missing=missing)
    for m in sorted(set(missing)):
        print(f"note: a chapter quotes {m}, which results.csv does not have (shown as ?)")
    print(f"wrote docs/results/README.md and {len(plots)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
