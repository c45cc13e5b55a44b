#!/usr/bin/env python3
"""Does LD_PRELOAD=libtierpool.so measure what linking step 06's C++ API measures?

One run of `make bench` gives each row one process (three repetitions, their median). On a shared
2-core machine two rows of the same allocator can then differ by more than the allocator does, so
this script runs the pair many times, alternating: for every workload and thread count of
step 06's benchmark it runs the preloaded row (the `malloc` entry under
LD_PRELOAD=build/release/step06-three-tier/libtierpool.so) and a linked row, in turn, `--rounds`
times, each run exactly as scripts/bench.py runs an entry. It prints, per pair, the median over
the rounds, the range of the rounds, and preload over linked.

The linked row is, by default, `step06-tierpool-shared` run as a program linked with
libtierpool.so runs: the library serves the process's malloc (it is preloaded under this row too),
and the row calls its C++ API as such a program does, through the PLT (as a preloaded malloc is
called), freeing as the preloaded row frees (W1 with C++ sized delete, the rest with free()).
That is the comparison the chapter's claim rests on.

--static compares with the statically linked rows instead, as `make bench` runs them (the
benchmark's own arrays on glibc's malloc): `step06-tierpool` for W1, `step06-tierpool-unsized`
elsewhere where the benchmark has it. Their calls are direct, and the process around them is
another: --harness-on-tierpool preloads libtierpool.so under them as well, so that only the
measured calls differ. --linked-row compares with any other linked row
(step06-tierpool-main-block: the linked allocator in a process whose main thread has used W5's
size class, as the preloaded one has).

Where the two ranges overlap, one run cannot tell the rows apart; where they do not, something
other than the machine's noise differs. Writes nothing: `make bench` owns docs/results/.

    python3 scripts/preload_vs_linked.py [--rounds 5] [--filter REGEX] [--harness-on-tierpool]
                                         [--static | --linked-row ROW]
"""
import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the runner's own way of running one entry)

STEP = "step06-three-tier"
SHARED = "step06-tierpool-shared"
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
                    help="preload libtierpool.so under the linked row too (always done for "
                    "the default row)")
    choice = ap.add_mutually_exclusive_group()
    choice.add_argument("--static", action="store_true",
                        help="compare with the statically linked rows (direct calls)")
    choice.add_argument("--linked-row", help="compare with this linked row instead (where the "
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
        def row(allocator):
            return f"{workload}/{allocator}/threads:{threads}"
        if not args.static:
            candidates = [args.linked_row or SHARED]
        elif workload in SIZED_DELETE_WORKLOADS:
            candidates = [SIZED]
        else:
            candidates = [UNSIZED, SIZED]
        chosen = next((row(c) for c in candidates if row(c) in entries), None)
        if chosen:
            pairs.append((workload, threads, chosen, name))

    if not pairs:
        raise SystemExit("no preloaded row has a linked counterpart here: check --filter and "
                         "--linked-row against `--benchmark_list_tests` of the binary")
    print(f"{len(pairs)} pairs x {args.rounds} rounds, linked and preloaded in turn", flush=True)
    results = []
    for workload, threads, linked_name, preload_name in pairs:
        times = {"linked": [], "preload": []}
        on_tierpool = args.harness_on_tierpool or bench.parse_name(linked_name)[1] == SHARED
        linked_preload = str(library) if on_tierpool else None
        for r in range(args.rounds):
            # Alternate which goes first, so a drift in the machine's load favours neither.
            order = [("linked", linked_name, linked_preload),
                     ("preload", preload_name, str(library))]
            for label, name, preload in order if r % 2 == 0 else reversed(order):
                ns, _, _, provider, _ = bench.run_entry(binary, name, args.repetitions,
                                                        args.min_time, preload)
                if preload:  # the library really served malloc, in either row
                    bench.check_provider(label, preload, provider)
                times[label].append(ns)
        linked, preload = times["linked"], times["preload"]
        results.append((f"{workload} T={threads}", bench.parse_name(linked_name)[1], linked,
                        preload))
        print(f"  {workload} T={threads}: linked {fmt(linked)}, preload {fmt(preload)}",
              flush=True)

    print(f"\n{'workload':<16} {'linked row':<24} {'linked ns (range)':>26} "
          f"{'preload ns (range)':>26} {'preload/linked':>14}  ranges")
    for label, row, linked, preload in results:
        ratio = statistics.median(preload) / statistics.median(linked)
        overlap = min(max(linked), max(preload)) >= max(min(linked), min(preload))
        print(f"{label:<16} {row:<24} {fmt(linked):>26} {fmt(preload):>26} {ratio:>13.2f}x  "
              f"{'overlap' if overlap else 'apart'}")
    return 0


def fmt(samples):
    return (f"{statistics.median(samples):.2f} ({min(samples):.2f}-{max(samples):.2f})")


if __name__ == "__main__":
    sys.exit(main())
