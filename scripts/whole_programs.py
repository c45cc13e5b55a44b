#!/usr/bin/env python3
"""Real programs, whole, under every malloc: how long they take and how much memory they hold.

The benchmark's workloads are made for the allocator; these programs were not. Each is run as a
user would try a malloc on it,

    LD_PRELOAD=<library> /usr/bin/time -f %M <program> ...

under glibc (nothing preloaded), every peer of the benchmark that is installed, and
build/release/step06-three-tier/libtierpool.so, interleaved (one run of each allocator, then the
next round), so that the machine's drift falls on all of them alike. The time is the wall-clock
time of the whole process (its start, its exit and the kernel's work included), the memory its
maximum resident set (%M, KiB; for a pipeline, that of its largest process).

The programs (those not installed are skipped, with the package to install):

    python-dicts    PYTHONMALLOC=malloc python3 common/traces/programs/dicts.py: every Python
                    object a malloc (the script the python-dicts trace recorded)
    python-threads  PYTHONMALLOC=malloc python3 .../python_threads.py: four threads, objects
                    freed by another thread than the one that made them
    python-json     python3 (its own small-object pool, as Python runs by default) turning
                    300 000 records into JSON and back: big strings and lists grown by realloc
    perl-hash       perl building a hash of 500 000 strings
    sqlite          sqlite3 :memory: < common/traces/programs/sqlite.sql (the sqlite-index trace)
    gxx             g++ -O2 compiling step 01's example (cc1plus: the gxx-compile trace)
    git-log         git log -p --stat over this repository's last 60 commits (the git-log trace)
    sort            sort -n --parallel=2 of 2 000 000 numbers (two threads, one big buffer)
    xz              xz -T2 -3 of 3 MiB of text in blocks of 1 MiB (two threads, buffers of
                    megabytes)
    lua             Lua 5.4 keeping one tree of tables while it builds and drops thousands of
                    others, then building a list of strings: one size after another (if
                    installed)
    jq, node        a JSON program in jq, an object-heavy one in Node.js (if installed)

Prints per program and allocator the median wall time and its range, the median over glibc's,
and the median peak resident set over glibc's (--markdown: then the ratios again, as a table).
Writes nothing.

    python3 scripts/whole_programs.py [--runs 7] [--only NAME,NAME] [--also NAME=PATH ...]
                                      [--markdown]
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the peers and the library, found as make bench finds them)

ROOT = bench.ROOT
PYTHON = "/usr/bin/python3"  # Debian's: the interpreter the traces were recorded with

JSON_SCRIPT = ("import json; d=[{'a': i, 'b': str(i) * 5, 'c': [i] * 3} for i in range(300000)]; "
               "s=json.dumps(d); print(len(json.loads(s)), len(s))")
PERL_SCRIPT = ('my %h; for my $i (1..500000) { $h{"k$i"} = "v" x ($i % 64) } '
               'my $n = 0; $n += length $h{$_} for keys %h; print "$n\\n"')
LUA_SCRIPT = ("local function tree(d) if d == 0 then return {} end "
              "return {tree(d - 1), tree(d - 1)} end "
              "local function count(t) if t[1] then return 1 + count(t[1]) + count(t[2]) end "
              "return 1 end "
              "local keep = tree(16) local n = 0 "
              "for d = 4, 16, 2 do for i = 1, 2 ^ (20 - d) do n = n + count(tree(d)) end end "
              "local parts = {} "
              "for i = 1, 300000 do parts[i] = tostring(i) .. string.rep('z', i % 60) end "
              "print(n, count(keep), #table.concat(parts))")
JQ_SCRIPT = "map({a: ., b: (. | tostring)}) | group_by(.a % 7) | map(length)"
NODE_SCRIPT = ("let a=[]; for (let i=0;i<4e5;i++) a.push({k:'x'+i, v:new Array(i%50).fill(i)}); "
               "let m=new Map(); for (const o of a) m.set(o.k, o.v.length); console.log(m.size)")


def programs(work):
    """[(name, the command it needs, argv, environment additions, stdin file or None)]"""
    threads = ROOT / "step06-three-tier" / "tests" / "programs" / "python_threads.py"
    return [
        ("python-dicts", PYTHON, [PYTHON, str(ROOT / "common/traces/programs/dicts.py"), "6"],
         {"PYTHONMALLOC": "malloc"}, None),
        ("python-threads", PYTHON, [PYTHON, str(threads), "20"], {"PYTHONMALLOC": "malloc"}, None),
        ("python-json", PYTHON, [PYTHON, "-c", JSON_SCRIPT], {}, None),
        ("perl-hash", "perl", ["perl", "-e", PERL_SCRIPT], {}, None),
        ("sqlite", "sqlite3", ["sqlite3", ":memory:"], {},
         ROOT / "common/traces/programs/sqlite.sql"),
        ("gxx", "g++", ["g++", "-O2", "-std=c++20", "-c",
                        str(ROOT / "step01-rational-freelist/example.cpp"), "-o", "/dev/null"],
         {}, None),
        ("git-log", "git", ["git", "-C", str(ROOT), "log", "-p", "--stat", "-n", "60"], {}, None),
        ("sort", "sort", ["sort", "-n", "--parallel=2", "-S", "64M", str(work / "numbers")], {},
         None),
        ("xz", "xz", ["xz", "-T2", "-3", "--block-size=1MiB", "-c", str(work / "text")], {}, None),
        ("lua", "lua5.4", ["lua5.4", "-e", LUA_SCRIPT], {}, None),
        ("jq", "jq", ["jq", "-s", JQ_SCRIPT, str(work / "numbers-short")], {}, None),
        ("node", "node", ["node", "-e", NODE_SCRIPT], {}, None),
    ]


PACKAGES = {PYTHON: "python3", "perl": "perl", "sqlite3": "sqlite3", "g++": "g++", "git": "git",
            "sort": "coreutils", "xz": "xz-utils", "lua5.4": "lua5.4", "jq": "jq",
            "node": "nodejs"}


def make_inputs(work):
    rng = random.Random(2026)
    numbers = list(range(2_000_000))
    rng.shuffle(numbers)
    (work / "numbers").write_text("\n".join(map(str, numbers)) + "\n")
    (work / "numbers-short").write_text("\n".join(map(str, numbers[:200_000])) + "\n")
    words = [f"{rng.getrandbits(40):x}" for _ in range(4096)]
    text = []
    size = 0
    while size < 3 << 20:
        line = " ".join(rng.choice(words) for _ in range(12))
        text.append(line)
        size += len(line) + 1
    (work / "text").write_text("\n".join(text) + "\n")


def run_once(argv, extra_env, stdin, preload, work):
    """(wall seconds, maximum resident set in KiB, exit status)"""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(extra_env)
    if preload:
        env["LD_PRELOAD"] = preload
    report = work / "time.out"
    start = time.perf_counter()
    with open(stdin if stdin else os.devnull, "rb") as source:
        status = subprocess.run(["/usr/bin/time", "-o", str(report), "-f", "%M"] + argv, env=env,
                                stdin=source, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=work).returncode
    wall = time.perf_counter() - start
    return wall, int(report.read_text().split()[-1]), status


def print_markdown(chosen, libs, walls, peaks):
    """One row a program: glibc's medians, then each allocator's over glibc's (time / memory)."""
    others = [lib for lib, _ in libs if lib != "glibc"]
    print("| program | glibc: s, MiB | " + " | ".join(others) + " |")
    print("|---|---:|" + "---:|" * len(others))
    for name, *_ in chosen:
        wall = statistics.median(walls[(name, "glibc")])
        peak = statistics.median(peaks[(name, "glibc")])
        cells = [f"{statistics.median(walls[(name, lib)]) / wall:.2f} / "
                 f"{statistics.median(peaks[(name, lib)]) / peak:.2f}" for lib in others]
        print(f"| {name} | {wall:.2f}, {peak / 1024:.1f} | " + " | ".join(cells) + " |")


def main():
    ap = bench.preload_arguments(__doc__, runs=7)
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument("--markdown", action="store_true",
                    help="a table: each allocator's time and peak over glibc's")
    args = ap.parse_args()
    notes = []
    libs = bench.preload_libraries(args, notes)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        make_inputs(work)
        chosen = []
        for name, needs, argv, env, stdin in programs(work):
            if args.only and name not in args.only.split(","):
                continue
            if not shutil.which(needs):
                notes.append(f"skipped {name}: {needs} is not installed (apt-get install "
                             f"{PACKAGES.get(needs, needs)})")
                continue
            chosen.append((name, argv, env, stdin))
        for note in notes:
            print(note, file=sys.stderr)
        walls = {(p[0], lib): [] for p in chosen for lib, _ in libs}
        peaks = {(p[0], lib): [] for p in chosen for lib, _ in libs}
        for _ in range(args.runs):
            for name, argv, env, stdin in chosen:
                for lib, preload in libs:
                    wall, peak, status = run_once(argv, env, stdin, preload, work)
                    if status != 0:
                        sys.exit(f"{name} under {lib} exited with status {status}")
                    walls[(name, lib)].append(wall)
                    peaks[(name, lib)].append(peak)
    print(f"{args.runs} runs each, interleaved; wall time s (range), over glibc; "
          f"peak RSS MiB, over glibc")
    for name, *_ in chosen:
        base_wall = statistics.median(walls[(name, "glibc")])
        base_peak = statistics.median(peaks[(name, "glibc")])
        print(name)
        for lib, _ in libs:
            w = walls[(name, lib)]
            p = statistics.median(peaks[(name, lib)])
            print(f"  {lib:16s} {statistics.median(w):7.3f} ({min(w):.3f}-{max(w):.3f}) "
                  f"{statistics.median(w) / base_wall:5.2f}x   {p / 1024:7.1f} "
                  f"{p / base_peak:5.2f}x")
    if args.markdown:
        print_markdown(chosen, libs, walls, peaks)


if __name__ == "__main__":
    main()
