"""The trace workloads' figures (workload_trace.h), for scripts/bench.py and scripts/results.py.

A trace row has more than the other workloads' (ns per op, peak RSS): the peak of memory the
allocator held above the replay's start, the trace's own peak of live bytes, malloc lab's
utilisation (live over held), and the resident set over the trace as a curve. They are kept apart
from results.csv, in
  docs/results/traces.csv        trace,allocator,threads,ops,ns_per_op,held_peak_kb,live_peak_kb,
                                 utilisation_pct,peak_rss_kb,skipped
  docs/results/trace_curves.csv  trace,allocator,ops,ms,live_kb,held_kb  (about 200 points a row)
A row whose allocator cannot replay the trace (workload_trace.h: CannotServe) has only `skipped`.

Generated blocks (scripts/results.py):
  <!-- results traces -->                          every trace: utilisation and time side by side
  <!-- results traces only=a,b -->                 the same, those allocators only
  <!-- results trace=git-log -->                   one trace's table
  <!-- results trace=git-log only=a,b -->          the same, those allocators only
"""
import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
TRACES_CSV = RESULTS / "traces.csv"
CURVES_CSV = RESULTS / "trace_curves.csv"
FIELDS = ["trace", "allocator", "threads", "ops", "ns_per_op", "held_peak_kb", "live_peak_kb",
          "utilisation_pct", "peak_rss_kb", "skipped"]
CURVE_FIELDS = ["trace", "allocator", "ops", "ms", "live_kb", "held_kb"]
# The column order of the side-by-side tables: the steps, the peers, the harness.
ORDER = ["step06-tierpool", "tierpool-preload", "step06-tierpool-release", "step03-sizeclass", "glibc", "jemalloc",
         "tcmalloc", "mimalloc", "tbbmalloc", "baseline"]
# "vs best" in the tables: a row's utilisation over the best of the malloc libraries'.
PEERS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "tbbmalloc"]


class Skipped(Exception):
    """The allocator cannot replay this trace; the message says why."""


def is_trace(workload):
    return workload.split("/", 1)[-1].startswith("trace-")


def trace_name(workload):
    return workload.split("/", 1)[-1][len("trace-"):]


def skipped_reason(data):
    """The reason of an entry the binary skipped (Google Benchmark's error message), or None."""
    for b in data.get("benchmarks", []):
        message = b.get("error_message", "")
        if b.get("error_occurred") and message.startswith("skipped: "):
            return message[len("skipped: "):]
    return None


def take_curve(path):
    """The rows of the curve file a replay wrote (workload_trace.h), and the file removed."""
    path = Path(path)
    if not path.exists():
        return []
    with path.open() as f:
        rows = list(csv.DictReader(f))
    path.unlink()
    return rows


def row_from_run(workload, allocator, threads, data, curve_rows):
    """(traces.csv row, curve rows) of one process's run."""
    b = next(b for b in data["benchmarks"] if b.get("run_type") == "iteration")
    name = trace_name(workload)
    row = {"trace": name, "allocator": allocator, "threads": threads,
           "ops": int(b.get("trace_ops", 0)), "ns_per_op": f"{b['ns_per_pair']:.2f}",
           "held_peak_kb": int(b.get("held_peak_kib", 0)),
           "live_peak_kb": int(b.get("live_peak_kib", 0)),
           "utilisation_pct": f"{b.get('utilisation_pct', 0):.1f}",
           "peak_rss_kb": int(b.get("peak_rss_kib", 0)), "skipped": ""}
    curve = [{"trace": name, "allocator": allocator, "ops": r["ops"], "ms": r["ms"],
              "live_kb": r["live_kib"], "held_kb": r["held_kib"]} for r in curve_rows or []]
    return row, curve


def skipped_row(workload, allocator, threads, reason):
    row = {k: "" for k in FIELDS}
    row.update(trace=trace_name(workload), allocator=allocator, threads=threads, skipped=reason)
    return row


def read(path):
    """Rows of a CSV file as dicts; none when the file does not exist."""
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def merge(rows, curves, write_csv):
    """Writes the rows measured now over the old ones with the same (trace, allocator), with
    bench.py's write_csv(path, fields, rows)."""
    if not rows:
        return
    ran = {(r["trace"], r["allocator"]) for r in rows}
    keep = [r for r in read(TRACES_CSV) if (r["trace"], r["allocator"]) not in ran]
    keep_curves = [r for r in read(CURVES_CSV) if (r["trace"], r["allocator"]) not in ran]
    for path, fields, data in ((TRACES_CSV, FIELDS, keep + rows),
                               (CURVES_CSV, CURVE_FIELDS, keep_curves + curves)):
        data.sort(key=lambda r: (r["trace"], order_key(r["allocator"])))
        write_csv(path, fields, data)


def order_key(allocator):
    return (ORDER.index(allocator) if allocator in ORDER else len(ORDER), allocator)


def mib(kb):
    return f"{int(kb) / 1024:.1f}"


def trace_note(name):
    """What the note beside the trace says: its command and counts."""
    note = ROOT / "common" / "traces" / f"{name}.txt"
    fields = {}
    if note.exists():
        for line in note.read_text().splitlines():
            key, _, value = line.partition(": ")
            fields.setdefault(key, value)
    return fields


def trace_table(rows, name, only=None):
    rows = [r for r in rows if r["trace"] == name and (not only or r["allocator"] in only)]
    if not rows:
        return f"*No results for `trace-{name}` yet: run `make bench STEP=step06-three-tier`.*\n"
    measured = [r for r in rows if not r["skipped"]]
    best = max((float(r["utilisation_pct"]) for r in measured if r["allocator"] in PEERS),
               default=0)
    glibc = next((float(r["ns_per_op"]) for r in measured if r["allocator"] == "glibc"), None)
    out = ["| allocator | ns per op | vs glibc | held at peak (MiB) | utilisation | "
           "vs best | peak RSS (MiB) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: order_key(r["allocator"])):
        if r["skipped"]:
            out.append(f"| {r['allocator']} | skipped: {r['skipped']} | | | | | |")
            continue
        util = float(r["utilisation_pct"])
        ratio = f"{float(r['ns_per_op']) / glibc:.2f}×" if glibc else "–"
        vs_best = f"{util / best:.2f}" if best and r["allocator"] != "baseline" else "–"

        ns = float(r["ns_per_op"])
        out.append(f"| {r['allocator']} | {ns:.1f} | {ratio} | {mib(r['held_peak_kb'])} | "
                   f"{util:.0f} % | {vs_best} | {mib(r['peak_rss_kb'])} |")
    first = measured[0] if measured else rows[0]
    live = mib(first["live_peak_kb"]) if first["live_peak_kb"] else "?"
    note = trace_note(name)
    head = (f"`trace-{name}`: {note.get('process', '?').split(' ')[0].split('/')[-1]}, "
            f"{first['ops'] or note.get('ops', '?')} operations, "
            f"{first['threads']} thread{'s' if str(first['threads']) != '1' else ''}, "
            f"peak of live bytes {live} MiB. Utilisation = that peak over the memory held at "
            f"peak (resident set above the replay's start); vs best = over the best malloc "
            f"library's:\n\n")
    return head + "\n".join(out) + "\n"


def summary_table(rows, only=None):
    """One row per trace, one column per allocator: utilisation, and ns per op."""
    if only:
        rows = [r for r in rows if r["allocator"] in only]
    traces = sorted({r["trace"] for r in rows})
    if not traces:
        return "*No trace results yet: run `make bench STEP=step06-three-tier`.*\n"
    allocators = sorted({r["allocator"] for r in rows if r["allocator"] != "baseline"},
                        key=order_key)
    cell = {(r["trace"], r["allocator"]): r for r in rows}
    out = ["| trace | " + " | ".join(allocators) + " |",
           "|---|" + "---:|" * len(allocators)]
    for t in traces:
        cells = []
        for a in allocators:
            r = cell.get((t, a))
            if r is None:
                cells.append("–")
            elif r["skipped"]:
                cells.append("skipped")
            else:
                cells.append(f"{float(r['utilisation_pct']):.0f} % · {float(r['ns_per_op']):.0f}")
        out.append(f"| {t} | " + " | ".join(cells) + " |")
    return ("Utilisation (peak live bytes over peak memory held; higher is better) · ns per "
            "operation (lower is better), each allocator replaying the same trace:\n\n"
            + "\n".join(out) + "\n")


def render(spec_fields, spec):
    rows = read(TRACES_CSV)
    only = spec_fields["only"].split(",") if "only" in spec_fields else None
    if spec.split()[0] == "traces":
        return summary_table(rows, only)
    return trace_table(rows, spec_fields["trace"], only)


def plot_curves(plt):
    """docs/results/trace_<name>.png: memory held over each trace, one line per allocator, and
    the program's own live bytes. Returns the file names."""
    rows = read(CURVES_CSV)
    written = []
    for name in sorted({r["trace"] for r in rows}):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        mine = [r for r in rows if r["trace"] == name]
        live_drawn = False
        for allocator in sorted({r["allocator"] for r in mine}, key=order_key):
            if allocator == "baseline":
                continue
            pts = [r for r in mine if r["allocator"] == allocator]
            xs = [int(r["ops"]) / 1e6 for r in pts]
            step = allocator.startswith("step")
            ax.plot(xs, [int(r["held_kb"]) / 1024 for r in pts], "-" if step else "--",
                    linewidth=2.2 if step else 1.1, label=allocator)
            if not live_drawn:
                ax.fill_between(xs, [int(r["live_kb"]) / 1024 for r in pts], color="0.85",
                                label="live bytes (the program's)")
                live_drawn = True
        ax.set_xlabel("operations replayed (millions)")
        ax.set_ylabel("MiB")
        ax.set_title(f"trace-{name}: memory held (resident set above the start) over the trace")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        out = RESULTS / f"trace_{name}.png"
        fig.savefig(out, dpi=90)
        plt.close(fig)
        written.append(out.name)
    return written


def index_section():
    """The part of docs/results/README.md about the traces."""
    rows = read(TRACES_CSV)
    if not rows:
        return []
    parts = ["## Recorded programs (traces)\n",
             "Real programs' allocations replayed by step 06's benchmark "
             "([../traces.md](../traces.md)); `traces.csv` and `trace_curves.csv`.\n",
             "<!-- results traces -->\n<!-- /results -->\n"]
    for name in sorted({r["trace"] for r in rows}):
        parts.append(f"### trace-{name}\n")
        if (RESULTS / f"trace_{name}.png").exists():
            parts.append(f"![trace-{name}](trace_{name}.png)\n")
        parts.append(f"<!-- results trace={name} -->\n<!-- /results -->\n")
    return parts


INLINE_KINDS = {"util", "held", "nsop"}


def inline_value(kind, workload, allocator, missing):
    """One trace figure for a sentence (results.py's inline blocks)."""
    name = trace_name(workload)
    for r in read(TRACES_CSV):
        if r["trace"] == name and r["allocator"] == allocator and not r["skipped"]:
            if kind == "util":
                return f"{float(r['utilisation_pct']):.0f} %"
            if kind == "held":
                return mib(r["held_peak_kb"])
            return f"{float(r['ns_per_op']):.0f}"
    missing.append(f"{kind} {workload} {allocator}")
    return "?"
