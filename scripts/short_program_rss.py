#!/usr/bin/env python3
"""What does a short program pay in memory for the malloc it is given?

A C program that allocates 100 bytes, prints the address and frees it is compiled once and run
`--runs` times under each allocator in turn (glibc, every peer of the benchmark that is installed,
and build/release/step06-three-tier/libtierpool.so), as a user would measure it:

    LD_PRELOAD=<library> /usr/bin/time -f %M ./program

%M is the process's maximum resident set in KiB. /usr/bin/time is preloaded too; its child's
image before the exec is smaller than the program's, so the figure is the program's. The runs
are interleaved (one of each allocator, then the next round), so that the machine's drift falls
on all of them alike. `--empty` adds a preloaded library that defines nothing: the cost of being
preloaded at all (the loader's work, the pages of the library's own file).

Prints per allocator the median, the range and the median over glibc's. Writes nothing.

`--also NAME=PATH` adds any other library (another build of this one, to compare two commits).

    python3 scripts/short_program_rss.py [--runs 15] [--empty] [--also NAME=PATH ...]
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the peers and the library, found as make bench finds them)

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  char* p = malloc(100);
  printf("%p\n", (void*)p);
  free(p);
  return 0;
}
"""


def max_rss_kib(program, preload):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    out = subprocess.run(["/usr/bin/time", "-f", "%M", program], env=env, check=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
    return int(out.strip().splitlines()[-1])


def main():
    ap = bench.preload_arguments(__doc__, runs=15)
    ap.add_argument("--empty", action="store_true",
                    help="also preload a library that defines nothing")
    args = ap.parse_args()
    notes = []
    libs = bench.preload_libraries(args, notes)
    for note in notes:
        print(note, file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "short.c"
        source.write_text(PROGRAM)
        program = str(Path(tmp) / "short")
        cc = shutil.which("cc") or shutil.which("gcc")
        subprocess.run([cc, "-O2", "-o", program, str(source)], check=True)
        if args.empty:
            empty = Path(tmp) / "empty.c"
            empty.write_text("int short_program_rss_nothing(void) { return 0; }\n")
            subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(Path(tmp) / "empty.so"),
                            str(empty)], check=True)
            libs.insert(1, ("empty library", str(Path(tmp) / "empty.so")))
        kib = {name: [] for name, _ in libs}
        for _ in range(args.runs):
            for name, preload in libs:
                kib[name].append(max_rss_kib(program, preload))
    base = statistics.median(kib["glibc"])
    print(f"maximum resident set, KiB, {args.runs} runs each")
    for name, values in kib.items():
        median = statistics.median(values)
        print(f"  {name:16s} {median:7.0f}  ({min(values)}-{max(values)})  {median / base:.2f}x")


if __name__ == "__main__":
    main()
