#!/usr/bin/env python3
"""The benchmark runner behind `make bench`.

For each step it runs every registered (workload, allocator, threads) entry of the step's
benchmark binary in a process of its own (so peak RSS is that entry's alone) and takes the median
ns per alloc+free pair. The rows named `malloc` run once per malloc library: glibc as linked, then
jemalloc, tcmalloc, mimalloc, tbbmalloc (and tierpool's own libtierpool.so once it exists) through
LD_PRELOAD. Each run reports which shared object really served malloc; a run whose provider is not
the library it was meant to measure is an error, so a row named "jemalloc" can never be glibc
under another name.

Rounds. The repetitions of a row (--repetitions, 3 by default) are spread over --rounds (3 by
default) and interleaved: round 1 runs every (entry, row) of the step once, a process each, the
peers of one entry back to back; then round 2 runs the whole plan again, and so on. Each process
runs its share of the repetitions (Google Benchmark's --benchmark_repetitions: 3 over 3 rounds is
one each), after a warm-up of half --min-time (none for the entries that run once per
process). So a slow minute of a shared machine lands on one sample of many rows, not on every
sample of one row. A row's figures over its rounds:
  ns_per_pair     the median of its samples from all rounds
  peak_rss_kb     the largest of its rounds
  end_rss_kb, moves, stopped_at_kb, and a trace's row and memory curve (trace_results.py)
                  those of its median round: the round whose own median is nearest the row's
                  (the trace row's ns_per_op is the row's median, its peak RSS the largest)
The entries that run once per process (iterations:1/repeats:1, the big-block workloads and the
traces) run once per round. An entry skipped in a round is not run again; a row that fails in
any round is left out.

Writes, for the steps it ran (rows of other steps are kept):
  docs/results/results.csv        workload,allocator,threads,ns_per_pair,ratio_vs_glibc,peak_rss_kb,
                                  and what the big-block workloads measure besides (empty on the
                                  other rows): end_rss_kb (the resident set at the end of the run,
                                  not the peak), moves (reallocs that moved the block),
                                  stopped_at_kb (a growth stopped by its time budget)
  docs/results/raw/<step>.json    the Google Benchmark JSON of every process, one per row and
                                  round ("tierpool_row" names the row and its round; a filtered
                                  run replaces only the rows it repeated)
  docs/results/instructions.csv   (--instructions) callgrind instructions per pair
  docs/results/durations.csv      how long each step took: processes (of all rounds) and seconds
                                  of timings, callgrind runs and seconds (unfiltered runs only)
and prints one side-by-side table per workload.
"""
import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trace_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
RESULTS_CSV = RESULTS / "results.csv"
INSTRUCTIONS_CSV = RESULTS / "instructions.csv"
CSV_FIELDS = ["workload", "allocator", "threads", "ns_per_pair", "ratio_vs_glibc", "peak_rss_kb",
              "end_rss_kb", "moves", "stopped_at_kb"]
# The columns only some workloads fill: a CSV written before they existed still loads.
OPTIONAL_FIELDS = {"end_rss_kb", "moves", "stopped_at_kb"}
# Counters a workload reports itself (RunResult::counters) -> the CSV column they fill.
WORKLOAD_COUNTERS = {"end_rss_kib": "end_rss_kb", "moves": "moves",
                     "stopped_at_kib": "stopped_at_kb"}
INSTR_FIELDS = ["workload", "allocator", "instructions_per_pair", "allocator_only_per_pair"]
DURATIONS_CSV = RESULTS / "durations.csv"
DURATION_FIELDS = ["step", "processes", "timing_s", "callgrind_runs", "callgrind_s"]

# The malloc libraries measured by preloading them: row name -> shared object (Debian's names).
PRELOAD_PEERS = {
    "jemalloc": "libjemalloc.so.2",
    "tcmalloc": "libtcmalloc_minimal.so.4",
    "mimalloc": "libmimalloc.so.2",
    "tbbmalloc": "libtbbmalloc_proxy.so.2",
}
TIERPOOL_PRELOAD = "tierpool-preload"

# Workloads that callgrind counts at one thread (two run lengths, the difference). The shorter
# run is never one round: what a run pays once (the thread's exit, the release clock's first
# looks, which under callgrind's slowdown come at other rounds than in a real run) must be the
# same in both, or it shows in the difference. With (1, 3), W4 at 0b97a5b came out at 55.7
# instructions a pair, its steady state being 69.0 (the one-round run paid more of the release
# work and the thread's exit than the three-round run did).
INSTRUCTION_RUNS = {"rational": (20, 120), "shuffle64": (3, 6), "sizes": (3, 9)}


def step_id(step_dir):
    return step_dir.split("-")[0]  # "step05-tls-global" -> "step05"


def find_library(soname):
    """Absolute path of a shared library, or None when it is not installed."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(soname + " "):
            return line.split("=>")[-1].strip()
    return None


def malloc_libraries(build_dir, notes):
    """[(row name, preload path or None)]: glibc first, then every peer that is installed."""
    libs = [("glibc", None)]
    for name, soname in PRELOAD_PEERS.items():
        path = find_library(soname)
        if path:
            libs.append((name, path))
        else:
            notes.append(f"skipped {name}: {soname} is not installed (scripts/install-deps.sh bench)")
    tierpool = build_dir / "step06-three-tier" / "libtierpool.so"
    if tierpool.exists():
        libs.append((TIERPOOL_PRELOAD, str(tierpool)))
    return libs


def preload_arguments(doc, runs):
    """The parser of a script that runs programs under every malloc with /usr/bin/time:
    --build, --runs and --also (its own options are added by the caller)."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--also", action="append", default=[], metavar="NAME=PATH",
                    help="another library to preload (repeatable)")
    return ap


def preload_libraries(args, notes):
    """malloc_libraries, then each `NAME=PATH` of --also (another build, to compare two
    commits). Exits when /usr/bin/time, which such scripts measure with, is missing."""
    if not Path("/usr/bin/time").exists():
        sys.exit("needs /usr/bin/time (apt-get install time)")
    libs = malloc_libraries(Path(args.build), notes)
    for extra in args.also:
        name, _, path = extra.partition("=")
        libs.append((name, str(Path(path).resolve())))
    return libs


# What Google Benchmark appends to an entry's name: "/manual_time", and before it
# "/iterations:1/repeats:1" for the entries that run once per process (the big-block workloads).
GBENCH_SUFFIX = r"(/iterations:[0-9]+)?(/repeats:[0-9]+)?/manual_time"


# Entries that run once per process ("/iterations:1"): they measure a process's first run, so
# they get no warm-up (list_entries fills this).
ONE_SHOT = set()


def list_entries(binary):
    out = subprocess.run([str(binary), "--benchmark_list_tests"], capture_output=True, text=True,
                         check=True).stdout
    names = [n.strip() for n in out.splitlines() if n.strip()]
    ONE_SHOT.update(re.sub(GBENCH_SUFFIX + "$", "", n) for n in names if "/iterations:1/" in n)
    # The entry name is what precedes Google Benchmark's suffix.
    return [re.sub(GBENCH_SUFFIX + "$", "", n) for n in names]


def parse_name(name):
    workload, allocator, threads = name.split("/")
    return workload, allocator, int(threads.split(":")[1])


def regex_escape(text):
    """Escapes for Google Benchmark's POSIX regex (Python's re.escape also escapes '-')."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)


def run_entry(binary, name, repetitions, min_time, preload):
    """Runs one entry in its own process; returns (ns/pair of each repetition, peak RSS KiB, json,
    provider, {CSV column: value} of the counters the workload reported itself)."""
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = preload
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        out_path = out.name
    if trace_results.is_trace(parse_name(name)[0]):
        env["TIERPOOL_TRACE_CURVE"] = out_path + ".curve.csv"
    cmd = [str(binary), f"--benchmark_filter=^{regex_escape(name)}{GBENCH_SUFFIX}$",
           f"--benchmark_repetitions={repetitions}", f"--benchmark_min_time={min_time}",
           "--benchmark_format=json", f"--benchmark_out={out_path}",
           "--benchmark_out_format=json"]
    if name not in ONE_SHOT:
        # A process runs one repetition: without a warm-up, a workload whose first iteration
        # outlasts min_time (the first faults in every page of `huge`: 370 ms, then 7 ms a
        # round) would be timed cold in every round.
        cmd.append(f"--benchmark_min_warmup_time={min_time / 2}")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited {proc.returncode}: {stderr.strip()[-500:]}")
    data = json.loads(Path(out_path).read_text())
    os.unlink(out_path)
    if trace_results.skipped_reason(data) is not None:
        raise trace_results.Skipped(trace_results.skipped_reason(data))
    if "TIERPOOL_TRACE_CURVE" in env:  # a trace's memory curve, handed on beside the JSON
        data["tierpool_curve"] = trace_results.take_curve(env["TIERPOOL_TRACE_CURVE"])
    samples = [b["ns_per_pair"] for b in data["benchmarks"]
               if b.get("run_type") == "iteration" and "ns_per_pair" in b]
    if not samples:
        raise RuntimeError(f"{name}: no samples in the benchmark output")
    provider = data.get("context", {}).get("malloc_provider", "unknown")
    # The binary's own VmHWM; ru_maxrss would include the runner's resident size at fork time.
    peaks = [b["peak_rss_kib"] for b in data["benchmarks"] if "peak_rss_kib" in b]
    peak = int(max(peaks)) if peaks else usage.ru_maxrss
    # The big-block workloads run once per process (one iteration): the last value is the value.
    extra = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        for counter, column in WORKLOAD_COUNTERS.items():
            if counter in b:
                extra[column] = str(int(round(b[counter])))
    return samples, peak, data, provider, extra


def check_provider(row, preload, provider):
    """A preloaded row must really have been served by the preloaded library."""
    expected = Path(preload).name if preload else "libc.so"
    if expected not in provider:
        raise RuntimeError(f"row {row}: malloc was served by {provider}, not {expected}")


def load_csv(path, fields):
    if not path.exists():
        return []
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if set(fields) - OPTIONAL_FIELDS <= set(r)]
    for r in rows:
        for k in OPTIONAL_FIELDS & set(fields):
            r[k] = r.get(k) or ""
    return rows


def write_csv(path, fields, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in fields})


def print_table(rows):
    """One side-by-side table per workload and thread count, fastest first."""
    groups = {}
    for r in rows:
        groups.setdefault((r["workload"], int(r["threads"])), []).append(r)
    for (workload, threads), group in groups.items():
        width = max(len(r["allocator"]) for r in group)
        print(f"\n{workload}  threads={threads}")
        print(f"  {'allocator':<{width}} {'ns/pair':>9} {'vs glibc':>9} {'peak RSS':>10}")
        for r in sorted(group, key=lambda r: float(r["ns_per_pair"])):
            ratio = f"{float(r['ratio_vs_glibc']):.2f}x" if r["ratio_vs_glibc"] else "-"
            rss = f"{int(r['peak_rss_kb']) / 1024:.1f} MiB"
            print(f"  {r['allocator']:<{width}} {float(r['ns_per_pair']):>9.2f} {ratio:>9} "
                  f"{rss:>10}{describe_extra(r)}")


def describe_extra(row):
    """The big-block figures of a row, for the progress lines and the printed tables."""
    text = ""
    if row.get("end_rss_kb"):
        text += f"  end RSS {int(row['end_rss_kb']) / 1024:.1f} MiB"
    if row.get("moves"):
        text += f"  moves {row['moves']}"
    if row.get("stopped_at_kb"):
        text += f"  stopped at {int(row['stopped_at_kb']) / 1024:.0f} MiB"
    return text


def measure_step(build_dir, step, args, notes):
    binary = build_dir / "bench" / step
    if not binary.exists():
        raise SystemExit(f"no benchmark binary {binary}: build the release preset first")
    entries = list_entries(binary)
    if args.filter:
        entries = [e for e in entries if re.search(args.filter, e)]
    libs = malloc_libraries(build_dir, notes)
    plan = []
    for name in entries:
        workload, allocator, threads = parse_name(name)
        if allocator == "malloc":
            plan += [(name, lib, path) for lib, path in libs]
        else:
            plan.append((name, allocator, None))
    shares = round_repetitions(args.repetitions, args.rounds)
    runs = {}  # (entry, row) -> one {samples, peak, extra, data, curve} per round it ran
    dropped = set()  # (entry, row) skipped or failed: not run again
    raw, trace_rows = [], []
    total = len(plan) * len(shares)
    started = time.monotonic()
    for k, repetitions in enumerate(shares, 1):
        for i, (name, row, preload) in enumerate(plan, 1):
            if (name, row) in dropped:
                continue
            workload, _, threads = parse_name(name)
            where = f"[{k}/{len(shares)} {i}/{len(plan)}] {step}"
            t0 = time.monotonic()
            try:
                samples, rss_kb, data, provider, extra = run_entry(binary, name, repetitions,
                                                                   args.min_time, preload)
                if parse_name(name)[1] == "malloc":
                    check_provider(row, preload, provider)
            except trace_results.Skipped as e:
                notes.append(f"skipped {row} on {workload}: {e}")
                print(f"{where} {name} as {row}: skipped ({e})", flush=True)
                dropped.add((name, row))
                if (name, row) not in runs:
                    trace_rows.append(trace_results.skipped_row(workload, row, threads, str(e)))
                continue
            except RuntimeError as e:
                notes.append(f"FAILED {step} {name} as {row}: {e}")
                print(f"{where} {name} as {row}: FAILED ({e})", flush=True)
                dropped.add((name, row))
                runs.pop((name, row), None)
                continue
            data["tierpool_row"] = {"step": step, "allocator": row, "preload": preload,
                                    "round": k}
            curve = data.pop("tierpool_curve", None)
            raw.append(data)
            runs.setdefault((name, row), []).append(
                {"samples": samples, "peak": rss_kb, "extra": extra, "data": data,
                 "curve": curve})
            elapsed = time.monotonic() - started
            print(f"{where} {workload} T={threads} {row:<18} "
                  f"{statistics.median(samples):9.2f} ns/pair {rss_kb / 1024:7.1f} MiB"
                  f"{describe_extra(extra)}  ({time.monotonic() - t0:.1f}s, {elapsed:.0f}s so far)",
                  flush=True)
    # A row that failed in some round is left out, the runs of its other rounds with it.
    ran = {raw_key(r["data"]) for v in runs.values() for r in v}
    raw = [d for d in raw if raw_key(d) in ran]
    rows, trace_curves = [], []
    for name, row, _ in plan:
        if (name, row) not in runs:
            continue
        workload, _, threads = parse_name(name)
        result, median_round = combine_rounds(runs[(name, row)])
        rows.append({"workload": f"{step_id(step)}/{workload}", "allocator": row,
                     "threads": threads, **result})
        if trace_results.is_trace(workload):
            trace_row, curve = trace_results.row_from_run(workload, row, threads,
                                                          median_round["data"],
                                                          median_round["curve"])
            trace_row["ns_per_op"] = f"{float(result['ns_per_pair']):.2f}"
            trace_row["peak_rss_kb"] = result["peak_rss_kb"]
            trace_rows.append(trace_row)
            trace_curves += curve
    set_glibc_ratios(rows)
    trace_results.merge(trace_rows, trace_curves, write_csv)
    (RESULTS / "raw").mkdir(parents=True, exist_ok=True)
    raw_path = RESULTS / "raw" / f"{step}.json"
    if args.filter and raw_path.exists():
        # A filtered run keeps the runs it did not repeat, as it keeps their rows in the CSV.
        raw = [d for d in json.loads(raw_path.read_text()) if raw_key(d) not in ran] + raw
    raw_path.write_text(json.dumps(raw, indent=1))
    return rows, total


def round_repetitions(repetitions, rounds):
    """How many Google Benchmark repetitions each round's process runs: `repetitions` spread
    over at most that many rounds, the earlier rounds taking the remainder (5 over 3: 2, 2, 1)."""
    rounds = max(1, min(rounds, repetitions))
    return [repetitions // rounds + (k < repetitions % rounds) for k in range(rounds)]


def combine_rounds(rounds):
    """A row's results.csv fields from its rounds, and its median round: the median of all the
    samples, the largest peak RSS, the big-block counters of the round whose median is nearest."""
    ns = statistics.median(s for r in rounds for s in r["samples"])
    middle = min(rounds, key=lambda r: abs(statistics.median(r["samples"]) - ns))
    result = {"ns_per_pair": f"{ns:.3f}", "peak_rss_kb": max(r["peak"] for r in rounds),
              "ratio_vs_glibc": "", **{k: "" for k in OPTIONAL_FIELDS}, **middle["extra"]}
    return result, middle


def raw_key(data):
    """(entry, row) of one process's Google Benchmark JSON in docs/results/raw/."""
    names = [b.get("run_name", b.get("name", "")) for b in data.get("benchmarks", [])]
    return names[0] if names else "", data.get("tierpool_row", {}).get("allocator")


def callgrind_instructions(binary, name, rounds, preload):
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = preload
    # libtierpool.so's release thread wakes on the wall clock, which runs some fifty times faster
    # against the program under callgrind: its work would count per pair, and differently in each
    # run (W4 preloaded: 74 to 87 instructions a pair across three runs of one build with it, 68
    # to 77 across six without it: the slow paths' own looks at the clock remain). The measured
    # threads' own work is what is counted.
    env["TIERPOOL_RELEASE_THREAD"] = "0"
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", str(binary),
           f"--tierpool_count={name}", f"--tierpool_rounds={rounds}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip()[-300:])
    collected = re.search(r"Collected : (\d+)", proc.stderr)
    pairs = re.search(r"pairs (\d+)", proc.stdout)
    if not collected or not pairs:
        raise RuntimeError("no instruction count in callgrind's output")
    return int(collected.group(1)), int(pairs.group(1))


def set_glibc_ratios(rows):
    """Each row's time over glibc's on the same workload and thread count, where there is one.
    Run over the merged rows too, so that a row re-measured by a filtered run (glibc's, or one
    allocator's) is set against the glibc row that stands beside it in the file."""
    glibc = {(r["workload"], str(r["threads"])): float(r["ns_per_pair"]) for r in rows
             if r["allocator"] == "glibc"}
    for r in rows:
        base = glibc.get((r["workload"], str(r["threads"])))
        r["ratio_vs_glibc"] = f"{float(r['ns_per_pair']) / base:.3f}" if base else ""


def count_step(build_dir, step, args, notes):
    """Instructions per pair: two run lengths, the difference divided by the extra pairs.
    Returns the rows and how many callgrind runs they took."""
    binary = build_dir / "bench" / step
    libs = malloc_libraries(build_dir, notes)
    rows, runs = [], 0
    for name in list_entries(binary):
        workload, allocator, threads = parse_name(name)
        if workload not in INSTRUCTION_RUNS or threads != 1:
            continue
        if args.filter and not re.search(args.filter, name):
            continue
        short, long_ = INSTRUCTION_RUNS[workload]
        variants = libs if allocator == "malloc" else [(allocator, None)]
        for row, preload in variants:
            runs += 2
            try:
                i1, p1 = callgrind_instructions(binary, name, short, preload)
                i2, p2 = callgrind_instructions(binary, name, long_, preload)
            except RuntimeError as e:
                notes.append(f"callgrind failed for {step} {name} as {row}: {e}")
                continue
            per_pair = (i2 - i1) / (p2 - p1)
            rows.append({"workload": f"{step_id(step)}/{workload}", "allocator": row,
                         "instructions_per_pair": f"{per_pair:.1f}",
                         "allocator_only_per_pair": ""})
            print(f"callgrind {step} {workload:<10} {row:<18} {per_pair:8.1f} instructions/pair",
                  flush=True)
    set_baseline_differences(rows)
    return rows, runs


def set_baseline_differences(rows):
    """Instructions beyond the harness: each row's count minus the baseline row's of its workload
    (run over the merged rows too, as set_glibc_ratios)."""
    base = {r["workload"]: float(r["instructions_per_pair"]) for r in rows
            if r["allocator"] == "baseline"}
    for r in rows:
        if r["workload"] in base:
            r["allocator_only_per_pair"] = (
                f"{float(r['instructions_per_pair']) - base[r['workload']]:.1f}")


def record_durations(durations, full_run):
    """Writes docs/results/durations.csv: a full run anew, otherwise only the steps it timed.
    `durations` maps a step to the fields it measured (timing, callgrind or both)."""
    if not durations:
        return
    old = {} if full_run else {r["step"]: r for r in load_csv(DURATIONS_CSV, DURATION_FIELDS)}
    for step, fields in durations.items():
        old.setdefault(step, {"step": step}).update(fields)
    write_csv(DURATIONS_CSV, DURATION_FIELDS, [old[s] for s in sorted(old)])


PACKAGES = ["libc6", "libjemalloc2", "libtcmalloc-minimal4", "libmimalloc2.0", "libtbbmalloc2",
            "libboost-dev", "libbenchmark1debian", "g++"]


def describe_machine(build_dir):
    """What the numbers were measured on: written beside them, quoted by docs/results/README.md."""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    compiler = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout
    versions = {}
    for p in PACKAGES:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True,
                             text=True)
        versions[p] = out.stdout.strip() if out.returncode == 0 else "not installed"
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": os.uname().release,
            "compiler": compiler.splitlines()[0] if compiler else "unknown",
            "build": str(Path(build_dir).name), "packages": versions,
            "date": time.strftime("%Y-%m-%d")}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="*", help="step folders (default: every step)")
    ap.add_argument("--build", default=str(ROOT / "build" / "release"))
    ap.add_argument("--repetitions", type=int, default=3,
                    help="samples of each row, over all rounds")
    ap.add_argument("--rounds", type=int, default=3,
                    help="times the whole plan of a step runs, one process per row each time")
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--filter", help="regex on entry names (workload/allocator/threads:N)")
    ap.add_argument("--instructions", action="store_true", help="also count with callgrind")
    ap.add_argument("--no-timing", action="store_true", help="only the callgrind counts")
    args = ap.parse_args()

    build_dir = Path(args.build)
    steps = args.steps or sorted(p.name for p in ROOT.glob("step0*") if p.is_dir())
    steps = [Path(s).name for s in steps]
    notes = []
    # How long each step takes (docs/README.md quotes it); a filtered run says nothing about that.
    durations = {}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "machine.json").write_text(json.dumps(describe_machine(build_dir), indent=1) + "\n")
    if not args.no_timing:
        # `make bench` (every step, no filter) writes the whole file anew, so a workload or
        # allocator that no longer exists leaves no stale row; one step replaces only its rows.
        full_run = not args.steps and not args.filter
        all_rows = [] if full_run else load_csv(RESULTS_CSV, CSV_FIELDS)
        for step in steps:
            print(f"== {step}", flush=True)
            started = time.monotonic()
            rows, processes = measure_step(build_dir, step, args, notes)
            if not args.filter:
                durations[step] = {"processes": processes,
                                   "timing_s": f"{time.monotonic() - started:.0f}"}
            # A full run replaces its workloads' rows; a filtered one only the rows it measured.
            if args.filter:
                ran = {(r["workload"], r["allocator"], str(r["threads"])) for r in rows}
                all_rows = [r for r in all_rows
                            if (r["workload"], r["allocator"], str(r["threads"])) not in ran]
            else:
                ran = {r["workload"] for r in rows}
                all_rows = [r for r in all_rows if r["workload"] not in ran]
            all_rows += rows
            set_glibc_ratios(all_rows)
            write_csv(RESULTS_CSV, CSV_FIELDS, sorted(
                all_rows, key=lambda r: (r["workload"], int(r["threads"]), r["allocator"])))
            print_table(rows)
    if args.instructions or args.no_timing:
        if not shutil.which("valgrind"):
            notes.append("skipped instruction counts: valgrind is not installed")
        else:
            full_run = not args.steps and not args.filter
            all_rows = [] if full_run else load_csv(INSTRUCTIONS_CSV, INSTR_FIELDS)
            for step in steps:
                started = time.monotonic()
                rows, runs = count_step(build_dir, step, args, notes)
                if not args.filter:
                    durations.setdefault(step, {}).update(
                        {"callgrind_runs": runs, "callgrind_s": f"{time.monotonic() - started:.0f}"})
                ran = {(r["workload"], r["allocator"]) for r in rows}
                all_rows = [r for r in all_rows if (r["workload"], r["allocator"]) not in ran]
                all_rows += rows
                set_baseline_differences(all_rows)
                write_csv(INSTRUCTIONS_CSV, INSTR_FIELDS,
                          sorted(all_rows, key=lambda r: (r["workload"], r["allocator"])))
    record_durations(durations, full_run=not args.steps and not args.filter
                     and not args.no_timing and args.instructions)
    for n in dict.fromkeys(notes):
        print(f"note: {n}")
    print(f"\nwrote {RESULTS_CSV.relative_to(ROOT)}")
    return 1 if any(n.startswith("FAILED") for n in notes) else 0


if __name__ == "__main__":
    sys.exit(main())
