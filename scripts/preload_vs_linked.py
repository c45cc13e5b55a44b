#!/usr/bin/env python3
"""Does LD_PRELOAD=libtierpool.so measure what linking step 06's C++ API measures?

One run of `make bench` gives each row one process (three repetitions, their median). On a shared
2-core machine two rows of the same allocator can then differ by more than the allocator does, so
this script runs the pair many times, alternating: for every workload and thread count of
step 06's benchmark it runs the preloaded row (the `malloc` entry under
LD_PRELOAD=build/release/step06-three-tier/libtierpool.so) and the linked row that frees the same
way, in turn, `--rounds` times, each run exactly as scripts/bench.py runs an entry. The same way:
W1 deletes with C++ sized delete, so its counterpart is `step06-tierpool` (sized free); the other
workloads call free(), which has no size, so theirs is `step06-tierpool-unsized` where the
benchmark has that row, else `step06-tierpool`. It prints, per pair, the median over the rounds,
the range of the rounds, and preload over linked.

Where the two ranges overlap, one run cannot tell the rows apart; where they do not, something
other than the machine's noise differs: the path (malloc's rounding to 16 bytes, a call through
the PLT), or the process around it (under LD_PRELOAD the benchmark's own arrays come from tierpool
too). --harness-on-tierpool tells the two apart: it preloads libtierpool.so under the linked row
as well, so that only the measured calls differ between the rows. --linked-row compares with
another linked row of the benchmark instead (step06-tierpool-main-block: the linked allocator in a
process whose main thread has used the workload's size class, as the preloaded one has). Writes
nothing: `make bench` owns docs/results/.

    python3 scripts/preload_vs_linked.py [--rounds 5] [--filter REGEX] [--harness-on-tierpool]
                                         [--linked-row ROW]
"""
import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the runner's own way of running one entry)

STEP = "step06-three-tier"
SIZED = "step06-tierpool"
UNSIZED = "step06-tierpool-unsized"
SIZED_DELETE_WORKLOADS = {"rational"}  # the harness frees these with C++ sized delete


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(bench.ROOT / "build" / "release"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--filter", help="regex on workload/T, e.g. 'sizes/1|xthread'")
    ap.add_argument("--harness-on-tierpool", action="store_true",
                    help="preload libtierpool.so under the linked row too")
    ap.add_argument("--linked-row", help="compare with this linked row instead (where the "
                    "workload has it), e.g. step06-tierpool-main-block")
    args = ap.parse_args()

    build = Path(args.build)
    binary = build / "bench" / STEP
    library = build / STEP / "libtierpool.so"
    if not binary.exists() or not library.exists():
        raise SystemExit(f"build the release preset first (missing {binary} or {library})")
    entries = bench.list_entries(binary)
    pairs = []
    for name in entries:
        workload, allocator, threads = bench.parse_name(name)
        if allocator != "malloc":
            continue
        if args.filter and not re.search(args.filter, f"{workload}/{threads}"):
            continue
        unsized = f"{workload}/{UNSIZED}/threads:{threads}"
        if args.linked_row:
            chosen = f"{workload}/{args.linked_row}/threads:{threads}"
            if chosen in entries:
                pairs.append((workload, threads, chosen, name))
        elif workload not in SIZED_DELETE_WORKLOADS and unsized in entries:
            pairs.append((workload, threads, unsized, name))
        elif f"{workload}/{SIZED}/threads:{threads}" in entries:
            pairs.append((workload, threads, f"{workload}/{SIZED}/threads:{threads}", name))

    if not pairs:
        raise SystemExit("no preloaded row has a linked counterpart here: check --filter and "
                         "--linked-row against `--benchmark_list_tests` of the binary")
    print(f"{len(pairs)} pairs x {args.rounds} rounds, linked and preloaded in turn", flush=True)
    results = []
    for workload, threads, linked_name, preload_name in pairs:
        times = {"linked": [], "preload": []}
        for r in range(args.rounds):
            # Alternate which goes first, so a drift in the machine's load favours neither.
            linked_preload = str(library) if args.harness_on_tierpool else None
            order = [("linked", linked_name, linked_preload),
                     ("preload", preload_name, str(library))]
            for label, name, preload in order if r % 2 == 0 else reversed(order):
                ns, _, _, provider = bench.run_entry(binary, name, args.repetitions,
                                                     args.min_time, preload)
                if preload:  # the library really served malloc, in either row
                    bench.check_provider(label, preload, provider)
                times[label].append(ns)
        linked, preload = times["linked"], times["preload"]
        results.append((f"{workload} T={threads}", bench.parse_name(linked_name)[1], linked,
                        preload))
        print(f"  {workload} T={threads}: linked {fmt(linked)}, preload {fmt(preload)}",
              flush=True)

    print(f"\n{'workload':<16} {'linked row':<24} {'linked ns (range)':>24} "
          f"{'preload ns (range)':>24} {'preload/linked':>14}  ranges")
    for label, row, linked, preload in results:
        ratio = statistics.median(preload) / statistics.median(linked)
        overlap = min(max(linked), max(preload)) >= max(min(linked), min(preload))
        print(f"{label:<16} {row:<24} {fmt(linked):>24} {fmt(preload):>24} {ratio:>13.2f}x  "
              f"{'overlap' if overlap else 'apart'}")
    return 0


def fmt(samples):
    return (f"{statistics.median(samples):.2f} ({min(samples):.2f}-{max(samples):.2f})")


if __name__ == "__main__":
    sys.exit(main())
