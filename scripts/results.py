#!/usr/bin/env python3
"""`make results`: tables and plots from docs/results/results.csv and instructions.csv.

Writes docs/results/README.md (every workload's table, the instruction counts, the machine) and
one PNG per workload, and refreshes every generated block in the Markdown files of the repository.
A generated block is what a chapter quotes; it looks like

    <!-- results table=step01/rational -->        (one workload, all thread counts)
    <!-- results table=step05/shuffle64 threads=1,16 only=step05-objectpool,glibc,mimalloc -->
    <!-- results instructions=step01/rational -->  (only= works here too)
    <!-- results headline -->
    <!-- results final -->                       (step 06 on every shared workload beside every
                                                  malloc library, ratios to the best of each row)
    <!-- results durations -->                   (how long each step's benchmark took; links
                                                  written for a page in docs/)
    <!-- results ladder=step05 -->               (a step's optimisation ladder, rung by rung:
                                                  time and instructions per pair, see LADDERS)
    ...generated, never edited by hand...
    <!-- /results -->

and a number quoted inside a sentence is an inline block, `<!--v KIND WORKLOAD[@T] A [B]-->`
value `<!--/v-->`, KIND one of
    ns       A's ns per pair              (<!--v ns step01/rational step01-freelist-->2.08<!--/v-->)
    ratio    A's ns over B's ns, as 1.18× (<!--v ratio step04/mt512@4 step04-spin glibc-->...)
    rss      A's peak RSS in MiB; rss-ratio: A's peak RSS over B's, as 1.18×
    instr    A's instructions per pair (callgrind); instr-only: minus the baseline
    ms       A's time for the whole pattern, in ms (the big-block workloads)
    rss-end  A's resident set at the end of the run, in MiB (release-64k, release-1m)
    util     A's utilisation on a trace, in % (<!--v util trace-git-log step06-tierpool-->);
    held     A's memory held at a trace's peak, in MiB; nsop: A's ns per op on a trace
             (traces.csv; WORKLOAD is trace-<name>)
T is the thread count (1 if left out).

A comparison in a sentence is rendered the same way, so that the words change when the data does:
    cmp          A against B at one thread count: "ahead of", "level with" or "behind"
                 (<!--v cmp step06/sizes@16 tcmalloc step06-tierpool-->behind<!--/v-->)
    cmp-threads  A against B at every thread count both were measured at, as one phrase:
                 "ahead at 1 and 2 threads; level at 4; behind at 8 and 16"
                 ("ahead at every thread count" when they agree)
    level        the tolerance itself, as "1.50×" (<!--v level-->...<!--/v-->, no workload)
"Level" means the two times are within a factor LEVEL of each other, LEVEL being the run-to-run
spread of the malloc libraries: every step's run measures them again, so each library's row on
each workload is measured several times, minutes or hours apart; LEVEL is the median, over those
rows, of the largest time over the smallest (level_tolerance()). A rendered comparison that
changes is named when `make results` rewrites it, and fails `--check` like a number.
The recorded traces (docs/traces.md) have blocks of their own: scripts/trace_results.py.

The big-block workloads of step 06 (realloc-grow, calloc-sparse, release-64k, release-1m) have
tables of their own: the time of the whole pattern in ms, the memory figure each is about beside
glibc's, and the block moves of the growth.

The stress workloads of step 06 (larson, prodcons, false-share-active, false-share-passive,
lifetimes, workset, huge, threads64) have tables of their own too: at every thread count the time
per pair beside the best malloc peer's and the peak RSS beside the lowest malloc peer's, and
plots with a panel for each.

`--check` regenerates nothing and exits 1 if any block differs from what the CSV says now: the
test that keeps chapters from quoting numbers nobody measured.
"""
import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import trace_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
PEERS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "tbbmalloc"]
# One colour per allocator in every plot: the malloc peers and the baseline fixed here, every
# other allocator a colour of its own from the palette below (none of them a peer's hue), in name
# order (colors_for()).
PEER_COLORS = {"glibc": "tab:blue", "jemalloc": "tab:orange", "tcmalloc": "tab:green",
               "mimalloc": "tab:purple", "tbbmalloc": "tab:brown", "baseline": "tab:gray"}
OTHER_COLORS = ["#e41a1c", "#e7298a", "#1b9e77", "#e6ab02", "#17becf", "#bcbd22", "#393b79",
                "#637939", "#8c6d31", "#843c39", "#7b4173", "#f781bf", "#9c9ede", "#66a61e",
                "#e7ba52", "#ad494a", "#de9ed6", "#9edae5", "#dbdb8d", "#c49c94", "#5254a3",
                "#8ca252", "#bd9e39", "#d6616b", "#a55194", "#ce6dbd", "#6b6ecf", "#b5cf6b",
                "#e7969c", "#008080", "#800000", "#40e0d0", "#ffd700", "#4b0082", "#000000",
                "#cedb9c"]
HEADLINE_COLORS = {"the step": "tab:red", **PEER_COLORS}
# Values spanning more than this factor get a log axis.
LOG_SPAN = 30
# A row whose repetitions, those of all the runner's rounds (docs/results/raw/), differ by more
# than this factor is bimodal: its median stands for no typical run. Tables mark it, and the
# headline never divides by it.
BIMODAL = 1.5
_RANGES = {}


def repetition_ranges():
    """(workload, allocator, threads) -> (fastest, slowest repetition) in ns per pair, from the
    Google Benchmark JSON that `make bench` keeps in docs/results/raw/: one process per row and
    round (tierpool_row.round), or, in a file written before rounds, one process per row."""
    if _RANGES:
        return _RANGES
    for path in sorted((RESULTS / "raw").glob("*.json")):
        try:
            processes = json.loads(path.read_text())
        except ValueError:
            continue
        for proc in processes:
            row = proc.get("tierpool_row") or {}
            step = (row.get("step") or "")[:6]
            for b in proc.get("benchmarks", []):
                m = re.match(r"([\w-]+)/[^/]+/threads:(\d+)", b.get("run_name", ""))
                if b.get("run_type") != "iteration" or not m or "ns_per_pair" not in b:
                    continue
                key = (f"{step}/{m.group(1)}", row.get("allocator"), int(m.group(2)))
                lo, hi = _RANGES.get(key, (float("inf"), 0.0))
                _RANGES[key] = (min(lo, b["ns_per_pair"]), max(hi, b["ns_per_pair"]))
    return _RANGES


def bimodal(workload, allocator, threads):
    """(fastest, slowest) when the row's repetitions differ by more than BIMODAL, else None."""
    lo, hi = repetition_ranges().get((workload, allocator, int(threads)), (0, 0))
    return (lo, hi) if lo > 0 and hi / lo > BIMODAL else None


def bimodal_note(flagged):
    """The line under a table that explains its ‡ marks."""
    if not flagged:
        return ""
    ranges = "; ".join(f"{a} at {t} thread{'s' if t > 1 else ''}: {fmt_ns(lo)}–{fmt_ns(hi)}"
                       for a, t, (lo, hi) in flagged)
    return (f"\n‡ bimodal: a marked row's repetitions differ by more than {BIMODAL}× "
            f"(fastest–slowest ns: {ranges}); its median is no typical run.\n")


def own_allocator(name):
    """The book's own allocators (the steps' and the preloaded library), drawn apart from peers."""
    return name.startswith("step") or name.startswith("tierpool")


def colors_for(rows):
    """allocator -> colour, the same in every plot of one results.csv."""
    others = sorted({r["allocator"] for r in rows} - set(PEER_COLORS))
    colors = dict(PEER_COLORS)
    for i, name in enumerate(others):
        colors[name] = OTHER_COLORS[i % len(OTHER_COLORS)]
    return colors


def bar_style(name, colors):
    """Bars: the book's own allocators hatched with a black edge, the peers plain."""
    if own_allocator(name):
        return {"color": colors[name], "hatch": "//", "edgecolor": "black", "linewidth": 1.2}
    return {"color": colors[name], "edgecolor": colors[name]}


def line_style(name, colors):
    """Lines: the book's own allocators bold and solid with round markers, the peers thin and
    dashed."""
    if own_allocator(name):
        return {"color": colors[name], "linestyle": "-", "marker": "o", "linewidth": 2.6,
                "markersize": 6}
    return {"color": colors[name], "linestyle": "--", "marker": ".", "linewidth": 1.2}


def label_own_bars(ax, names):
    """Bold tick labels for the book's own allocators."""
    for tick, name in zip(ax.get_yticklabels(), names):
        if own_allocator(name):
            tick.set_fontweight("bold")


def draw_bars(ax, names, values, colors, xlabel, fmt):
    """Horizontal bars, first name on top, each labelled with its value; a log axis where the
    values span more than LOG_SPAN."""
    for y, (n, v) in enumerate(zip(names, values)):
        ax.barh(y, v, **bar_style(n, colors))
    ax.set_yticks(range(len(names)), names, fontsize=8)
    label_own_bars(ax, names)
    ax.invert_yaxis()
    log = log_if_wide(ax, values)
    ax.set_xlim(right=max(values) * (3 if log else 1.2))
    ax.set_xlabel(xlabel + ("; log" if log else ""))
    for y, v in enumerate(values):
        ax.text(v, y, f" {fmt(v)}", va="center", fontsize=8)


def log_if_wide(ax, values, axis="x"):
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > LOG_SPAN:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        return True
    return False
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


# The stress workloads (workload_stress.h): time and peak RSS side by side, each set against the
# best of the malloc peers at the same thread count (the fastest time, the lowest peak RSS).
STRESS = ["larson", "prodcons", "false-share-active", "false-share-passive", "lifetimes",
          "workset", "huge", "threads64", "short-threads", "teardown"]


def stress_kind(workload):
    """The workload's name without its step when it is a stress workload, else None."""
    name = workload.split("/", 1)[-1]
    return name if name in STRESS else None


def stress_summary(rows, step, allocator):
    """Markdown: one line per stress workload and thread count of `step`: the allocator's time
    and peak RSS, each over the best malloc peer's (the fastest time, the lowest peak RSS), and
    which peer that was."""
    out = ["| workload | T | time vs best peer | best peer | peak RSS vs lowest | lowest peer |",
           "|---|---:|---:|---|---:|---|"]
    for name in STRESS:
        workload = f"{step}/{name}"
        cell = {(r["allocator"], int(r["threads"])): r for r in rows if r["workload"] == workload}
        for t in sorted({t for _, t in cell}):
            mine = cell.get((allocator, t))
            peers = [cell[(p, t)] for p in PEERS if (p, t) in cell]
            if mine is None or not peers:
                continue
            fast = min(peers, key=lambda r: float(r["ns_per_pair"]))
            small = min(peers, key=lambda r: int(r["peak_rss_kb"]))
            out.append(f"| `{name}` | {t} | "
                       f"{float(mine['ns_per_pair']) / float(fast['ns_per_pair']):.2f}× | "
                       f"{fast['allocator']} | "
                       f"{int(mine['peak_rss_kb']) / int(small['peak_rss_kb']):.2f}× | "
                       f"{small['allocator']} |")
    if len(out) == 2:
        return f"*No stress results for `{step}` yet: run `make bench`.*\n"
    return (f"`{allocator}` on the stress workloads, each figure over the best of the malloc "
            f"libraries ({', '.join(PEERS)}) at the same thread count:\n\n" + "\n".join(out) + "\n")


def stress_table(rows, workload, threads=None, only=None):
    """Markdown for a stress workload: per thread count, the time per pair and its ratio to the
    fastest malloc peer, the peak RSS and its ratio to the lowest malloc peer's."""
    rows = [r for r in rows if r["workload"] == workload
            and (not threads or int(r["threads"]) in threads)]
    if not rows:
        return f"*No results for `{workload}` yet: run `make bench`.*\n"
    counts = sorted({int(r["threads"]) for r in rows})
    cell = {(r["allocator"], int(r["threads"])): r for r in rows}
    best_ns, lowest_rss = {}, {}
    for t in counts:
        peers = [cell[(p, t)] for p in PEERS if (p, t) in cell]
        best_ns[t] = min((float(r["ns_per_pair"]) for r in peers), default=None)
        lowest_rss[t] = min((int(r["peak_rss_kb"]) for r in peers), default=None)
    shown = [r for r in rows if not only or r["allocator"] in only]
    # Times of a tenth of a millisecond and more (huge) are given in ms.
    in_ms = min(float(r["ns_per_pair"]) for r in rows) >= 1e5
    unit = "ms" if in_ms else "ns"
    # Ties (two rows of one median) in name order: a set's order changes from run to run.
    allocators = sorted({r["allocator"] for r in shown},
                        key=lambda a: (float(cell[(a, counts[0])]["ns_per_pair"])
                                       if (a, counts[0]) in cell else float("inf"), a))
    head = ["allocator"]
    for t in counts:
        head += [f"T={t} {unit}", "vs best", "peak RSS (MiB)", "vs lowest"]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for a in allocators:
        cells = [a]
        for t in counts:
            r = cell.get((a, t))
            if r is None:
                cells += ["–"] * 4
                continue
            ns, rss = float(r["ns_per_pair"]), int(r["peak_rss_kb"])
            cells += [fmt_ms(ns) if in_ms else fmt_ns(ns),
                      f"{ns / best_ns[t]:.2f}×" if best_ns[t] else "–", mib(rss),
                      f"{rss / lowest_rss[t]:.2f}×" if lowest_rss[t] else "–"]
        out.append("| " + " | ".join(cells) + " |")
    return (f"`{workload}`, {unit} per alloc+free pair and peak RSS; *vs best* is the time over "
            f"the fastest malloc peer's ({', '.join(PEERS)}), *vs lowest* the peak RSS over the "
            f"lowest of theirs, at the same thread count:\n\n" + "\n".join(out) + "\n")


def plot_stress(plt, workload, group, colors):
    """Two panels: time per pair and peak RSS; bars for one thread count, lines against the
    thread count for several. A value axis is logarithmic where the rows span more than 10x."""
    counts = sorted({int(r["threads"]) for r in group})
    fig, panels = plt.subplots(1, 2, figsize=(11, 4.5))
    figures = [("ns_per_pair", 1.0, "ns per alloc+free pair"),
               ("peak_rss_kb", 1024.0, "peak RSS, MiB")]
    for ax, (column, scale, label) in zip(panels, figures):
        values = [float(r[column]) / scale for r in group]
        spans_decades = min(values) > 0 and max(values) / min(values) > 10
        if len(counts) == 1:
            ordered = sorted(group, key=lambda r: float(r["ns_per_pair"]))
            names = [r["allocator"] for r in ordered]
            bars = [float(r[column]) / scale for r in ordered]
            draw_bars(ax, names, bars, colors, label + " (lower is better)", fmt_ns)
            continue
        for allocator in sorted({r["allocator"] for r in group}):
            pts = sorted((int(r["threads"]), float(r[column]) / scale) for r in group
                         if r["allocator"] == allocator)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=allocator,
                    **line_style(allocator, colors))
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        if spans_decades:
            ax.set_yscale("log")
        ax.set_xlabel("threads (this machine has %s cores)" % machine_cores())
        ax.set_ylabel(label + (" (log)" if spans_decades else ""))
    if len(counts) > 1:
        panels[0].legend(fontsize=7, ncol=2)
    else:
        panels[1].set_yticks(range(len(group)), [""] * len(group))
    fig.suptitle(f"{workload} (lower is better)")
    fig.tight_layout()
    return fig


read_csv = trace_results.read


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
    if stress_kind(workload):
        return stress_table(rows, workload, threads, only)
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
                        key=lambda a: (min(float(cell[(a, t)]["ns_per_pair"])
                                           for t in counts if (a, t) in cell), a))
    if len(counts) == 1:
        t = counts[0]
        out = ["| allocator | ns per pair | vs glibc | peak RSS (MiB) |", "|---|---:|---:|---:|"]
        flagged = []
        for a in allocators:
            r = cell[(a, t)]
            ratio = f"{float(r['ratio_vs_glibc']):.2f}×" if r["ratio_vs_glibc"] else "–"
            mark = ""
            if bimodal(workload, a, t):
                flagged.append((a, t, bimodal(workload, a, t)))
                mark = " ‡"
            out.append(f"| {a} | {fmt_ns(float(r['ns_per_pair']))}{mark} | {ratio} | "
                       f"{int(r['peak_rss_kb']) / 1024:.1f} |")
        return (f"`{workload}`, {t} thread{'s' if t > 1 else ''}:\n\n" + "\n".join(out) + "\n"
                + bimodal_note(flagged))
    head = "| allocator | " + " | ".join(f"T={t} ns (vs glibc)" for t in counts)
    head += f" | peak RSS T={counts[-1]} (MiB) |"
    out = [head, "|---|" + "---:|" * (len(counts) + 1)]
    flagged = []
    for a in allocators:
        cells = []
        for t in counts:
            r = cell.get((a, t))
            if r is None:
                cells.append("–")
                continue
            ratio = f" ({float(r['ratio_vs_glibc']):.2f}×)" if r["ratio_vs_glibc"] else ""
            mark = ""
            if bimodal(workload, a, t):
                flagged.append((a, t, bimodal(workload, a, t)))
                mark = " ‡"
            cells.append(fmt_ns(float(r["ns_per_pair"])) + mark + ratio)
        last = cell.get((a, counts[-1]))
        rss = f"{int(last['peak_rss_kb']) / 1024:.1f}" if last else "–"
        out.append(f"| {a} | " + " | ".join(cells) + f" | {rss} |")
    return (f"`{workload}`, ns per alloc+free pair:\n\n" + "\n".join(out) + "\n"
            + bimodal_note(flagged))


def instruction_table(rows, workload, only=None):
    rows = sorted((r for r in rows if r["workload"] == workload
                   and (not only or r["allocator"] in only)),
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


# A step's optimisation ladder: its plain design first, then one rung more per row, the last row
# the step's final allocator; and the (workload, threads) it is measured on. results.py draws it
# as a waterfall (<step>_ladder.png: time and callgrind instructions per pair, rung by rung) and
# renders it as a table (<!-- results ladder=<step> -->).
LADDERS = {
    "step05": {
        "rungs": ["step05-plain", "step05-plus-unrolled",
                  "step05-plus-chains", "step05-plus-items-ahead", "step05-objectpool"],
        "workloads": [("rational", 1), ("shuffle64", 1), ("shuffle64", 16), ("xthread", 2)],
        "peers": ["glibc", "mimalloc"],
    },
    "step06": {
        "rungs": ["step06-plain", "step06-plus-sized-free", "step06-plus-byte-budget",
                  "step06-plus-transfer-slots", "step06-plus-two-ahead", "step06-plus-node-items",
                  "step06-tierpool"],
        "workloads": [("rational", 1), ("shuffle64", 1), ("shuffle64", 16), ("sizes", 1),
                      ("sizes", 16), ("xthread", 2)],
        "peers": ["glibc", "mimalloc"],
    },
}


def ladder_cells(rows, instr, step):
    """{(rung, column): value}: ns per pair of every (workload, threads) of the ladder, and
    instructions per pair (callgrind, one thread) of each workload that has them."""
    spec = LADDERS[step]
    names = spec["rungs"] + spec["peers"]
    cells = {}
    for r in rows:
        for w, t in spec["workloads"]:
            if (r["workload"] == f"{step}/{w}" and int(r["threads"]) == t
                    and r["allocator"] in names):
                cells[(r["allocator"], f"{w}@{t}")] = float(r["ns_per_pair"])
    for r in instr:
        w = r["workload"].split("/", 1)[-1]
        if r["workload"].startswith(step + "/") and r["allocator"] in names:
            cells[(r["allocator"], f"{w} instr")] = float(r["instructions_per_pair"])
    columns = [f"{w}@{t}" for w, t in spec["workloads"]]
    columns += [f"{w} instr" for w in dict.fromkeys(w for w, _ in spec["workloads"])
                if any(c == f"{w} instr" for _, c in cells)]
    return names, columns, cells


def within_noise(step, column, a, b, a_value, b_value):
    """Whether rung a's figure in `column` is no change from rung b's: instructions within 3 %;
    times whose repetitions (docs/results/raw/) overlap, fastest to slowest, or, without them,
    times within 3 % of each other."""
    if column.endswith("instr"):
        return abs(a_value / b_value - 1) < 0.03
    workload, threads = column.split("@")
    ranges = repetition_ranges()
    ra = ranges.get((f"{step}/{workload}", a, int(threads)))
    rb = ranges.get((f"{step}/{workload}", b, int(threads)))
    if ra and rb:
        return ra[0] <= rb[1] and rb[0] <= ra[1]
    return abs(a_value / b_value - 1) < 0.03


def ladder_table(rows, instr, step):
    """Markdown: a row per rung (then the peers), a column per workload; each rung's cell says how
    it moved from the rung above (×, the rung's over the one before; ≈ within the level)."""
    if step not in LADDERS:
        raise SystemExit(f"no ladder for {step}")
    names, columns, cells = ladder_cells(rows, instr, step)
    if not any(k[0] == LADDERS[step]["rungs"][0] for k in cells):
        return f"*No results for `{step}`'s ladder yet: run `make bench STEP=...`.*\n"
    rungs = LADDERS[step]["rungs"]

    def head(c):
        w, rest = c.split("@") if "@" in c else (c.split()[0], None)
        return f"{w}, {rest} thr. ns" if rest else f"{w}, instr."

    out = ["| rung | " + " | ".join(head(c) for c in columns) + " |",
           "|---|" + "---:|" * len(columns)]
    for i, name in enumerate(names):
        row = []
        for c in columns:
            v = cells.get((name, c))
            if v is None:
                row.append("–")
                continue
            text = f"{v:.0f}" if c.endswith("instr") else fmt_ns(v)
            before = cells.get((rungs[i - 1], c)) if 0 < i < len(rungs) else None
            if before:
                close = within_noise(step, c, name, rungs[i - 1], v, before)
                text += f" ({'≈' if close else ''}{v / before:.2f}×)"
            row.append(text)
        out.append(f"| {name} | " + " | ".join(row) + " |")
    return (f"`{step}`'s ladder, per alloc+free pair: ns (threads as marked; median of the "
            f"repetitions) and callgrind instructions (one thread); in brackets each rung over "
            f"the rung above, ≈ where that is within the noise: the two rows' repetitions "
            f"overlap (fastest to slowest), or the instructions differ by less than 3 %:\n\n"
            + "\n".join(out) + "\n")


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


# The final allocator on every shared workload (W1-W5) at every thread count its step ran, beside
# every malloc library: the README's verdict, where the headline shows each step on one workload.
FINAL_STEP = "step06"
FINAL = ["step06-tierpool", "tierpool-preload"]
SHARED = ["rational", "shuffle64", "mt512", "sizes", "xthread"]


def final_rows(rows):
    """[(workload, threads, {allocator: ns}, best peer or None)] for the final step; the best
    peer is the fastest malloc library of the row whose repetitions are not bimodal."""
    out = []
    for name in SHARED:
        workload = f"{FINAL_STEP}/{name}"
        for threads in sorted({int(r["threads"]) for r in rows if r["workload"] == workload}):
            cells = step_rows(rows, FINAL_STEP, name, threads)
            if not any(a in cells for a in FINAL):
                continue
            steady = [p for p in PEERS if p in cells and not bimodal(workload, p, threads)]
            best = min(steady or [p for p in PEERS if p in cells], key=cells.get, default=None)
            out.append((workload, threads, cells, best))
    return out


def final_table(rows):
    """Markdown: the final allocator beside every malloc library, with its ratio to the best one
    of each row, and a sentence that counts the rows it is ahead, level and behind on."""
    table_rows = final_rows(rows)
    if not table_rows:
        return "*No results yet: run `make bench`.*\n"
    level = level_tolerance(rows)
    head = ["workload", *FINAL, *PEERS, "best malloc", *(f"{a} ÷ best" for a in FINAL)]
    out = ["| " + " | ".join(head) + " |",
           "|---|" + "---:|" * (len(FINAL) + len(PEERS)) + "---|" + "---:|" * len(FINAL)]
    verdicts = defaultdict(int)
    for workload, threads, cells, best in table_rows:
        def ns(a):
            if a not in cells:
                return "–"
            return fmt_ns(cells[a]) + (" ‡" if bimodal(workload, a, threads) else "")
        ratios = [f"**{cells[a] / cells[best]:.2f}×**" if a in cells and best else "–"
                  for a in FINAL]
        if FINAL[0] in cells and best:
            verdicts[verdict(cells[FINAL[0]], cells[best], level)] += 1
        name = workload.split("/", 1)[1]
        out.append(f"| {name} T={threads} | " + " | ".join(ns(a) for a in [*FINAL, *PEERS])
                   + f" | {best or '–'} | " + " | ".join(ratios) + " |")
    total = sum(verdicts.values())
    summary = (f"Against the fastest malloc library of each row, `{FINAL[0]}` is ahead on "
               f"{verdicts['ahead']} of {total} rows, level on {verdicts['level']} and behind on "
               f"{verdicts['behind']} (level: within {level:.2f}×, the run-to-run spread).")
    return ("ns per alloc+free pair, median, one run of the step's benchmark; `÷ best` is the "
            "time "
            "over the fastest malloc library of the row (below 1× is faster than it); ‡ marks a "
            "bimodal row, never taken as the best:\n\n" + "\n".join(out) + "\n\n" + summary
            + "\n")


def render(spec, rows, instr):
    fields = dict(kv.split("=", 1) for kv in spec.split() if "=" in kv)
    if spec.split()[0] == "traces" or "trace" in fields:
        return trace_results.render(fields, spec)
    if spec.strip() == "headline":
        return headline_table(rows)
    if spec.strip() == "final":
        return final_table(rows)
    if "ladder" in fields:
        return ladder_table(rows, instr, fields["ladder"])
    if "table" in fields:
        threads = [int(t) for t in fields["threads"].split(",")] if "threads" in fields else None
        only = fields["only"].split(",") if "only" in fields else None
        return table(rows, fields["table"], threads, only)
    if "stress-summary" in fields:
        return stress_summary(rows, fields["stress-summary"], fields.get("allocator", ""))
    if "instructions" in fields:
        only = fields["only"].split(",") if "only" in fields else None
        return instruction_table(instr, fields["instructions"], only)
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


def level_tolerance(rows):
    """The factor within which two times are called level: the median run-to-run spread of the
    malloc libraries (PEERS), each measured again in every step's run. 1.25 when no row was
    measured twice."""
    times = defaultdict(list)
    for r in rows:
        if r["allocator"] in PEERS and not bigblock_kind(r["workload"]):
            times[(r["workload"].split("/", 1)[-1], r["allocator"], r["threads"])].append(
                float(r["ns_per_pair"]))
    spreads = sorted(max(v) / min(v) for v in times.values() if len(v) > 1)
    if not spreads:
        return 1.25
    mid = len(spreads) // 2
    median = spreads[mid] if len(spreads) % 2 else (spreads[mid - 1] + spreads[mid]) / 2
    return round(median, 2)


def verdict(a_ns, b_ns, level):
    """'ahead', 'level' or 'behind': A against B, lower time ahead."""
    if a_ns * level < b_ns:
        return "ahead"
    if b_ns * level < a_ns:
        return "behind"
    return "level"


def thread_phrase(counts, first):
    """[1, 2] -> 'at 1 and 2 threads' (first group) or 'at 1 and 2'."""
    words = " and ".join([", ".join(map(str, counts[:-1])), str(counts[-1])] if len(counts) > 1
                         else [str(counts[0])])
    unit = " thread" + ("s" if counts != [1] else "") if first else ""
    return f"at {words}{unit}"


def compare_threads(rows, workload, a, b, level, missing):
    """A against B at every thread count both have: 'ahead at 1 and 2 threads, level at 4, ...'."""
    ns = defaultdict(dict)
    for r in rows:
        if r["workload"] == workload and r["allocator"] in (a, b):
            ns[int(r["threads"])][r["allocator"]] = float(r["ns_per_pair"])
    counts = sorted(t for t, v in ns.items() if len(v) == 2)
    if not counts:
        missing.append(f"cmp-threads {workload} {a} {b}")
        return "?"
    groups = []
    for t in counts:
        v = verdict(ns[t][a], ns[t][b], level)
        if groups and groups[-1][0] == v:
            groups[-1][1].append(t)
        else:
            groups.append((v, [t]))
    if len(groups) == 1:
        return f"{groups[0][0]} at every thread count ({counts[0]} to {counts[-1]})"
    return "; ".join(f"{v} {thread_phrase(ts, i == 0)}" for i, (v, ts) in enumerate(groups))


def inline_value(spec, rows, instr, missing):
    """One number (or comparison) for a sentence; `missing` collects what the CSVs do not
    have."""
    if spec.strip() == "level":
        return f"{level_tolerance(rows):.2f}×"
    kind, workload, *names = spec.split()
    if kind in trace_results.INLINE_KINDS:
        return trace_results.inline_value(kind, workload, names[0], missing)
    if kind == "cmp-threads":
        return compare_threads(rows, workload, names[0], names[1], level_tolerance(rows), missing)
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
    if kind == "rss-ratio":
        return f"{int(rs[0]['peak_rss_kb']) / int(rs[1]['peak_rss_kb']):.2f}×"
    if kind == "rss-end":
        if not rs[0].get("end_rss_kb"):
            missing.append(f"{kind} {workload}@{threads} {names[0]}")
            return "?"
        return mib(rs[0]["end_rss_kb"])
    if kind == "ms":
        return fmt_ms(float(rs[0]["ns_per_pair"]))
    if kind == "ratio":
        v = float(rs[0]["ns_per_pair"]) / float(rs[1]["ns_per_pair"])
        if v < 0.1:  # two significant digits: 0.0041x, not 0.00x
            return f"{v:.2g}×"
        return f"{v:.2f}×" if v < 10 else f"{v:.1f}×"
    if kind == "cmp":
        v = verdict(float(rs[0]["ns_per_pair"]), float(rs[1]["ns_per_pair"]), level_tolerance(rows))
        return {"ahead": "ahead of", "level": "level with", "behind": "behind"}[v]
    raise SystemExit(f"unknown inline value kind: {spec}")


CLAIMS = ("cmp", "cmp-threads", "level")


def render_inline(m, rows, instr, missing, flipped, path):
    """An inline block rendered again; a comparison whose words change is added to `flipped`."""
    body = inline_value(m.group("spec"), rows, instr, missing)
    if m.group("spec").split()[0] in CLAIMS and body != m.group("body"):
        flipped.append(f"{path.relative_to(ROOT)}: <!--v {m.group('spec')}--> was "
                       f"'{m.group('body')}', the data now says '{body}'")
    return m.group(1) + body + m.group(4)


def refresh_blocks(rows, instr, check, missing=None, flipped=None):
    stale = []
    missing = [] if missing is None else missing
    flipped = [] if flipped is None else flipped
    files = [p for p in ROOT.rglob("*.md") if "build" not in p.relative_to(ROOT).parts]
    for path in files:
        text = path.read_text()
        new = BLOCK.sub(lambda m: m.group(1) + "\n" + render(m.group("spec"), rows, instr) + "\n"
                        + m.group(4), text)
        new = INLINE.sub(lambda m: render_inline(m, rows, instr, missing, flipped, path), new)
        missing += [f"table {w} in {path.relative_to(ROOT)}" for w in
                    re.findall(r"\*No (?:results|instruction counts) for `([^`]+)`", new)]
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new)
    return stale


def plot_ladder(plt, rows, instr, step, colors):
    """The waterfall of a step's ladder: a panel per workload (time) and per counted workload
    (instructions), a bar per rung from the plain design down to the final allocator, each
    labelled with its value and its change from the rung above; the peers as dashed lines."""
    names, columns, cells = ladder_cells(rows, instr, step)
    rungs = LADDERS[step]["rungs"]
    columns = [c for c in columns if any((r, c) in cells for r in rungs)]
    if not columns:
        return None
    cols = 3
    lines = (len(columns) + cols - 1) // cols
    fig, axes = plt.subplots(lines, cols, figsize=(15, 0.6 + 2.4 * lines), squeeze=False)
    for ax, c in zip(axes.flat, columns):
        present = [r for r in rungs if (r, c) in cells]
        values = [cells[(r, c)] for r in present]
        instructions = c.endswith("instr")
        for y, (r, v) in enumerate(zip(present, values)):
            ax.barh(y, v, **bar_style(r, colors))
            above = rungs[rungs.index(r) - 1] if rungs.index(r) else None
            before = cells.get((above, c)) if above else None
            change = ""
            if before:
                close = within_noise(step, c, r, above, v, before)
                change = f"  {'≈' if close else ''}{v / before:.2f}×"
            ax.text(v, y, f" {v:.0f}{change}" if instructions else f" {fmt_ns(v)}{change}",
                    va="center", fontsize=7)
        peak = max(values)
        for peer in LADDERS[step]["peers"]:
            v = cells.get((peer, c))
            if v is not None:
                ax.axvline(v, color=colors.get(peer, "black"), linestyle="--", linewidth=1)
                ax.text(v, len(present) - 0.4, f" {peer}", color=colors.get(peer, "black"),
                        fontsize=7, va="bottom")
                peak = max(peak, v)
        ax.set_yticks(range(len(present)), [r.replace(step + "-", "") for r in present],
                      fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, peak * 1.45)
        w = c.split("@")[0].split()[0]
        ax.set_title(f"{w}, callgrind instructions per pair" if instructions else
                     f"{w}, {c.split('@')[1]} thread(s), ns per pair", fontsize=9)
    for ax in list(axes.flat)[len(columns):]:
        ax.axis("off")
    fig.suptitle(f"{step}: the plain design, then one rung more per bar (lower is better; "
                 f"× = over the bar above, ≈ within the noise)", fontsize=10)
    fig.tight_layout()
    return fig


def plot(rows, instr=()):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = colors_for(rows)
    written = trace_results.plot_curves(plt)
    for workload, group in sorted(by_workload(rows).items()):
        if trace_results.is_trace(workload):
            continue  # its own plots: memory over the trace (trace_results.py)
        counts = sorted({int(r["threads"]) for r in group})
        if bigblock_kind(workload):
            fig = plot_bigblock(plt, workload, group, colors)
        elif stress_kind(workload):
            fig = plot_stress(plt, workload, group, colors)
        elif len(counts) == 1:
            fig = plot_bars(plt, workload, group, colors)
        else:
            fig = plot_lines(plt, workload, group, counts, colors)
        out = RESULTS / (workload.replace("/", "_") + ".png")
        fig.savefig(out, dpi=90)
        plt.close(fig)
        written.append(out.name)
    for step in LADDERS:
        fig = plot_ladder(plt, rows, instr, step, colors)
        if fig is not None:
            fig.savefig(RESULTS / f"{step}_ladder.png", dpi=90)
            written.append(f"{step}_ladder.png")
            plt.close(fig)
    fig = plot_final(plt, rows)
    if fig is not None:
        fig.savefig(RESULTS / "final.png", dpi=90)
        written.append("final.png")
        plt.close(fig)
    fig = plot_headline(plt, rows)
    if fig is not None:
        fig.savefig(RESULTS / "headline.png", dpi=90)
        written.append("headline.png")
        plt.close(fig)
    return written


def plot_bars(plt, workload, group, colors):
    """One thread count: a bar per allocator, fastest on top, log axis where the bars span more
    than LOG_SPAN."""
    group = sorted(group, key=lambda r: float(r["ns_per_pair"]))
    names = [r["allocator"] for r in group]
    values = [float(r["ns_per_pair"]) for r in group]
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.28 * len(names)))
    draw_bars(ax, names, values, colors, "ns per alloc+free pair (median; lower is better)",
              fmt_ns)
    ax.set_title(f"{workload}, {group[0]['threads']} thread(s); hatched: this book's allocators")
    fig.tight_layout()
    return fig


def plot_lines(plt, workload, group, counts, colors):
    """Several thread counts: a line per allocator, both axes log, the legend outside the plot."""
    fig, ax = plt.subplots(figsize=(10, 5))
    for allocator in sorted({r["allocator"] for r in group}):
        pts = sorted((int(r["threads"]), float(r["ns_per_pair"])) for r in group
                     if r["allocator"] == allocator)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=allocator,
                **line_style(allocator, colors))
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.set_yscale("log")
    ax.set_xlabel("threads (this machine has %s cores)" % machine_cores())
    ax.set_ylabel("ns per pair, all threads (log)")
    ax.set_title(f"{workload}; bold: this book's allocators")
    legend = ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    for text in legend.get_texts():
        if own_allocator(text.get_text()):
            text.set_fontweight("bold")
    fig.tight_layout()
    return fig


def plot_final(plt, rows):
    """A heat map: the final allocator and every malloc library on every shared workload and
    thread count, each cell its time over the row's fastest malloc library (log colour scale,
    1 = that library). None without data."""
    import matplotlib.colors as mcolors
    table_rows = [r for r in final_rows(rows) if r[3]]
    if not table_rows:
        return None
    columns = [*FINAL, *PEERS]
    grid = [[cells[a] / cells[best] if a in cells else float("nan") for a in columns]
            for _, _, cells, best in table_rows]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(grid) + 1.6))
    finite = [v for row in grid for v in row if v == v]
    span = max(max(finite), 1 / min(finite), 2)
    image = ax.imshow(grid, cmap="RdYlGn_r", aspect="auto",
                      norm=mcolors.LogNorm(vmin=1 / span, vmax=span))
    ax.set_xticks(range(len(columns)), columns, fontsize=8, rotation=20)
    for tick, name in zip(ax.get_xticklabels(), columns):
        if own_allocator(name):
            tick.set_fontweight("bold")
    ax.set_yticks(range(len(grid)), [f"{w.split('/', 1)[1]} T={t}" for w, t, _, _ in table_rows],
                  fontsize=8)
    for y, row in enumerate(grid):
        for x, v in enumerate(row):
            if v == v:
                ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(image, ax=ax, label="time ÷ the row's fastest malloc library (log)")
    ax.set_title(f"{FINAL_STEP}'s allocator on every shared workload, beside the malloc libraries")
    fig.tight_layout()
    return fig


def plot_headline(plt, rows):
    """Each step on its chapter's workload beside the malloc peers; None without data."""
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
    if not labels:
        return None
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        style = ({"hatch": "//", "edgecolor": "black"} if name == "the step" else {})
        ax.bar([x + i * width for x in range(len(labels))], values, width, label=name,
               color=HEADLINE_COLORS[name], **style)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))], labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ns per alloc+free pair (log)")
    ax.set_title("Each step on its workload, beside the malloc libraries")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def plot_bigblock(plt, workload, group, colors):
    """Two panels: the time of the whole pattern, and the memory figure the workload is about
    (peak RSS for the growth and the calloc, the RSS at the end for release-*), each on a log
    scale where the rows span more than a factor 30."""
    memory = BIGBLOCK[bigblock_kind(workload)] or "peak_rss_kb"
    group = sorted(group, key=lambda r: float(r["ns_per_pair"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    names = [r["allocator"] for r in group]
    panels = [(left, [float(r["ns_per_pair"]) / 1e6 for r in group], "ms for the whole pattern"),
              (right, [int(r[memory] or 0) / 1024 for r in group],
               f"{MEMORY_LABELS[memory]}, MiB")]
    for ax, values, label in panels:
        draw_bars(ax, names, values, colors, label + " (lower is better)",
                  lambda v: f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}")
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
             "alloc+free pairs (median of the repetitions of all rounds); peak RSS is the benchmark process's "
             "high-water mark (VmHWM, read by the process itself), its own few MiB included; "
             "the `baseline` row never reuses memory within a round, so its RSS is no floor. "
             "The big-block workloads of step 06 (`realloc-grow`, `calloc-sparse`, `release-64k`, "
             "`release-1m`) run one whole pattern once per process: their tables give its time in "
             "ms and the memory figure each is about beside glibc's. The stress workloads of step 06 "
             "set each row's time and peak RSS beside the best malloc peer's. See "
             "[../benchmarking.md](../benchmarking.md).\n",
             "In the plots, the book's own allocators (the steps' and `tierpool-preload`) are "
             "hatched bars and bold lines, the peers plain bars and dashed lines; an allocator "
             f"has the same colour in every plot; an axis is logarithmic where its values span "
             f"more than a factor {LOG_SPAN}.\n",
             "![headline](headline.png)\n", "<!-- results headline -->\n<!-- /results -->\n",
             "![the final allocator beside the malloc libraries](final.png)\n",
             "<!-- results final -->\n<!-- /results -->\n"]
    for step in LADDERS:
        parts.append(f"## {step}'s ladder\n")
        if f"{step}_ladder.png" in plots:
            parts.append(f"![{step}'s ladder]({step}_ladder.png)\n")
        parts.append(f"<!-- results ladder={step} -->\n<!-- /results -->\n")
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
    missing, flipped = [], []
    if args.check:
        stale = refresh_blocks(rows, instr, check=True, missing=missing, flipped=flipped)
        for f in flipped:
            print(f"claim changed: {f}")
        for p in stale:
            print(f"stale generated block in {p}: run `make results`")
        for m in missing:
            print(f"quoted but never measured: {m}")
        return 1 if stale or missing else 0
    plots = []
    try:
        plots = plot(rows, instr)
    except ImportError:
        print("note: matplotlib is missing (apt-get install python3-matplotlib): no plots")
    write_index(rows, instr, plots)
    refresh_blocks(rows, instr, check=False, missing=missing, flipped=flipped)
    for f in flipped:
        print(f"claim changed (reread the sentence around it): {f}")
    for m in sorted(set(missing)):
        print(f"note: a chapter quotes {m}, which results.csv does not have (shown as ?)")
    print(f"wrote docs/results/README.md and {len(plots)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
