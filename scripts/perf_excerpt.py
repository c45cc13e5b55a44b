#!/usr/bin/env python3
"""The perf excerpts the chapters show: written by `make perf`, never pasted by hand.

Each profile a page of the book shows has a name (PROFILES below: the step, the entry, and the
function whose hot instructions it shows, if any). When `make perf STEP=<step> [FILTER=<regex>]`
records one of them, scripts/perf.sh calls this script, which writes docs/results/perf/<name>.txt:

    a stamp: the machine (CPU model, cores, L1 data cache, kernel), the commit (marked "source dirty" when a
        tracked file outside docs/ and the Markdown pages differs from it), the date, the entry
        and its sample count, and the `make perf` command that writes the file again;
    the heaviest rows of the flat profile (self time per symbol);
    the heaviest frames by inclusive time, inlined frames included (the view that names a pool's
        fast path once it is inlined into the benchmark's loop), the harness's frames left out;
    for a profile that names a function, its hottest instructions (perf annotate).

`make perf-diff A=<step> B=<step>` writes docs/results/perf/diff.<A>.<B>.txt for the pairs in
DIFFS. Symbol names are shortened the same way every time: template arguments nested deeper
than a row needs are written `<…>` and parameter lists `(…)`, never so far that two rows become
the same. scripts/check_docs.py copies each file into the pages' `<!-- perf … -->` blocks.

    perf_excerpt.py name STEP FILTER          the profile's name, or nothing when no page shows it
    perf_excerpt.py list                      every profile: "STEP<tab>FILTER" (FILTER may be empty)
    perf_excerpt.py diffs                     every pair of DIFFS: "A<tab>B"
    perf_excerpt.py record NAME DATA ENTRY    write the excerpt of DATA, a recording of ENTRY
    perf_excerpt.py diff A B DATA_A DATA_B    write the excerpt of `make perf-diff A=A B=B`
"""
import datetime
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "perf"

# name: (step, FILTER or "" for the step's default entry in scripts/perf.sh, function to annotate:
# its name, or "@top" for the heaviest symbol of the flat profile)
PROFILES = {
    "step01-rational-freelist.malloc": ("step01-rational-freelist", "^rational/malloc/", None),
    "step01-rational-freelist": ("step01-rational-freelist", "", None),
    "step02-template-pool.book-v2": ("step02-template-pool", "^rational/step02-book-v2/threads:1/",
                                     "step02::BookRational::operator new"),
    "step02-template-pool.nodes-pool": ("step02-template-pool",
                                        "^nodes/step02-poolallocator/threads:1/", None),
    "step02-template-pool.nodes-malloc": ("step02-template-pool", "^nodes/malloc/threads:1/", None),
    "step03-variable-size": ("step03-variable-size", "", None),
    "step03-variable-size.sizes-malloc": ("step03-variable-size", "^sizes/malloc/threads:1/", None),
    "step03-variable-size.pmr-monotonic": ("step03-variable-size",
                                           "^request/pmr-monotonic/threads:1/", None),
    "step04-multithread": ("step04-multithread", "", None),
    "step04-multithread.spin": ("step04-multithread", "^shuffle64/step04-spin/threads:4/", "@top"),
    "step05-tls-global": ("step05-tls-global", "", None),
    "step06-three-tier": ("step06-three-tier", "", None),
    "step06-three-tier.fast": ("step06-three-tier", "^rational/step06-tierpool/threads:1/",
                               "tierpool::ConcurrentAlloc"),
    "step06-three-tier.refill": ("step06-three-tier", "^sizes/step06-tierpool/threads:16/", None),
}
DIFFS = [("step01-rational-freelist", "step02-template-pool"),
         ("step04-multithread", "step05-tls-global")]

FLAT_ROWS = 10
FRAME_ROWS = 8
INSTRUCTIONS = 8
WIDTH = 96  # a symbol longer than this is shortened
# Frames of the benchmark harness and of thread start-up, the same in every step (as in perf.sh).
HARNESS = re.compile(r"^(std::__invoke|__invoke|std::thread::_|operator\(\) \(inlined\)|_M_invoke|"
                     r"_M_run|tierpool::bench::RunOnThreads|start_thread|clone3|0x[0-9a-f]+$)")


def run(*args):
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True).stdout


def collapse(symbol, depth):
    """`symbol` with template arguments nested deeper than `depth` written `<…>` and non-empty
    parameter lists `(…)` ("(anonymous namespace)" and "operator()" kept)."""
    inlined = symbol.endswith(" (inlined)")
    symbol = symbol.removesuffix(" (inlined)")
    symbol = symbol.replace("(anonymous namespace)", "\0").replace("operator()", "\1")
    out, level, paren, inside = [], 0, 0, ""
    for ch in symbol:
        if paren:
            paren += {"(": 1, ")": -1}.get(ch, 0)
            inside += ch
            if paren == 0:
                out.append("(…)" if inside != ")" else "()")
            continue
        if ch == "(" and level == 0:
            paren, inside = 1, ""
            continue
        if ch in "<>" and "".join(out[-8:]).endswith("operator"):
            out.append(ch)  # operator<, operator<<, operator>
            continue
        if ch == "<":
            level += 1
            if level <= depth:
                out.append(ch)
            elif level == depth + 1:
                out.append("<…")
            continue
        if ch == ">" and level > 0:
            level -= 1
            if level < depth + 1:
                out.append(ch)
            continue
        if level <= depth:
            out.append(ch)
    text = "".join(out).replace("\0", "(anonymous namespace)").replace("\1", "operator()")
    return text + (" (inlined)" if inlined else "")


def shorten_all(symbols, width=WIDTH):
    """Each symbol shortened as little as fits `width`, and no two distinct symbols alike."""
    def fit(s, start=4):
        for depth in range(start, 0, -1):
            short = collapse(s, depth)
            if len(short) <= width:
                return short, depth
        return collapse(s, 1), 1
    chosen = {s: fit(s) for s in symbols}
    for _ in range(8):
        seen = {}
        for s, (short, _) in chosen.items():
            seen.setdefault(short, []).append(s)
        clashes = [group for group in seen.values() if len(set(group)) > 1]
        if not clashes:
            break
        for group in clashes:
            for s in group:
                depth = chosen[s][1] + 1
                chosen[s] = (collapse(s, depth), depth) if depth < 12 else (s, depth)
    return {s: short for s, (short, _) in chosen.items()}


def report(data, *options):
    """perf report's rows as lists of fields (tab-separated output)."""
    out = run("perf", "report", "-i", str(data), "--stdio", "-g", "none", "-t", "\t", *options)
    rows = []
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        rows.append([f.strip() for f in line.split("\t")])
    return rows


def samples(data):
    """"1019 cpu-clock samples": the sum of the per-object sample counts."""
    out = run("perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "dso", "-n",
              "-g", "none", "-t", "\t")
    event = re.search(r"of event '([^']+)'", out)
    total = sum(int(r.split("\t")[1]) for r in out.splitlines()
                if not r.startswith("#") and r.count("\t") >= 2)
    return f"{total} {event.group(1) if event else ''} samples"


def flat(data, rows=FLAT_ROWS):
    """"  32.81%  libc.so.6  [.] _int_free" lines, the heaviest first."""
    found = [r for r in report(data, "--no-children", "--sort", "dso,symbol", "--percent-limit",
                               "0.5") if len(r) >= 3]
    found = found[:rows]
    short = shorten_all([r[2][4:] for r in found])
    dso = max((len(r[1]) for r in found), default=0)
    return [f"{r[0]:>8}  {r[1]:<{dso}}  {r[2][:4]}{short[r[2][4:]]}" for r in found]


def frames(data, rows=FRAME_ROWS, width=WIDTH):
    """(children%, self%, symbol) of the heaviest frames, the harness's left out, one row per name
    (perf can print two entries of one name, e.g. a function and a copy of it inlined elsewhere:
    the heavier stays)."""
    found = []
    for r in report(data, "--children", "--sort", "symbol", "--percent-limit", "1"):
        if len(r) < 3:
            continue
        symbol = r[2][4:]
        if HARNESS.match(symbol) or re.match(r"0x[0-9a-f]+", symbol):
            continue
        if any(symbol == f[2] for f in found):
            continue
        found.append((r[0], r[1], symbol))
        if len(found) == rows:
            break
    short = shorten_all([f[2] for f in found], width)
    return [(c, s, short[sym]) for c, s, sym in found]


def annotate(data, symbol, rows=INSTRUCTIONS):
    """The instructions of `symbol` with their share of its samples: all of them for a short
    function, else the `rows` hottest and the three before the hottest, in address order."""
    out = run("perf", "annotate", "-i", str(data), "--stdio", "-s", symbol)
    lines = [l.rstrip() for l in out.splitlines() if re.match(r"^\s+[0-9]+\.[0-9]+ :", l)]
    # A jump's target, "<the function's whole name+0x24f>", as "<_M_run()+0x24f>".
    lines = [re.sub(r"<(.+)(\+0x[0-9a-f]+)>$",
                    lambda m: "<" + re.split(r"::(?![^<]*>)", collapse(m.group(1), 0))[-1]
                    + m.group(2) + ">", l) for l in lines]
    if len(lines) <= 4 * rows:
        return lines
    share = [float(l.split(":")[0]) for l in lines]
    order = sorted(range(len(lines)), key=lambda i: -share[i])
    # The hottest instructions, and the three before the hottest of all (the one it waits for).
    shown = set(order[:rows]) | set(range(max(0, order[0] - 3), order[0]))
    return [lines[i] for i in sorted(shown)]


def machine():
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    cores = len(re.findall(r"^processor\s*:", cpuinfo, re.M))
    kernel = run("uname", "-r").strip()
    l1d = ""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        if (index / "level").read_text().strip() == "1" and \
                (index / "type").read_text().strip() == "Data":
            l1d = f", {(index / 'size').read_text().strip().replace('K', ' KiB')} L1d per core"
    return (f"{model.group(1).strip() if model else 'unknown CPU'}, {cores} cores{l1d}, "
            f"Linux {kernel}")


def commit():
    head = run("git", "rev-parse", "--short", "HEAD").strip() or "unknown"
    changed = [l[3:] for l in run("git", "status", "--porcelain", "--untracked-files=no")
               .splitlines()]
    dirty = [f for f in changed if not (f.startswith("docs/") or f.endswith(".md"))]
    return head + (" (source dirty)" if dirty else "")


def stamp(command, what):
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return [f"machine: {machine()}",
            f"commit:  {commit()}, recorded {today}",
            f"command: {command}",
            f"entry:   {what}",
            ""]


def make_command(step, filt):
    return f"make perf STEP={step}" + (f" FILTER='{filt}'" if filt else "")


def write_record(name, data, entry):
    step, filt, function = PROFILES[name]
    lines = stamp(make_command(step, filt), f"{entry} of {step}'s benchmark, {samples(data)}")
    lines.append("Self time per symbol, the heaviest rows of 0.5 % or more "
                 "(perf report --no-children --sort dso,symbol):")
    lines += flat(data)
    lines += ["", "Time per frame, callees and inlined frames included, the heaviest "
              "(perf report --children; harness frames left out):"]
    lines += [f"{c:>8} {s:>8}  {sym}" for c, s, sym in frames(data)]
    if function == "@top":  # the heaviest symbol of the flat profile, whatever its name
        function = report(data, "--no-children", "--sort", "symbol")[0][1][4:]
    if function:
        label = shorten_all([function])[function]
        lines += ["", f"The instructions of {label} (all, or the hottest), in address order "
                  f"(perf annotate; a sample lands on the instruction after the one that waits):"]
        lines += annotate(data, function)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.txt"
    path.write_text("\n".join(lines) + "\n")
    print(f"(excerpt: {path.relative_to(ROOT)})")


def write_diff(a, b, data_a, data_b):
    lines = stamp(f"make perf-diff A={a} B={b}",
                  f"each step's default entry, {samples(data_a)} and {samples(data_b)}")
    for step, data in ((a, data_a), (b, data_b)):
        lines.append(f"Time per frame in {step}, callees and inlined frames included, the "
                     f"heaviest (perf report --children; harness frames left out):")
        lines += [f"{c:>8} {s:>8}  {sym}" for c, s, sym in frames(data, 10)]
        lines.append("")
    out = run("perf", "diff", "--sort", "symbol", "-t", "\t", str(data_a), str(data_b))
    rows = [[f.strip() for f in l.split("\t")] for l in out.splitlines()
            if l.strip() and not l.startswith("#")]
    rows = [r for r in rows if len(r) >= 3 and r[2].startswith("[.]")]

    def weight(r):
        numbers = [abs(float(x.rstrip("%"))) for x in r[:2] if x.rstrip("%")]
        return -max(numbers, default=0)
    rows = sorted(rows, key=weight)[:10]
    short = shorten_all([r[2][4:] for r in rows])
    lines.append(f"Self time per symbol in {a} (Baseline) and its change in {b} (Delta), "
                 "symbols matched by name, the heaviest (perf diff --sort symbol):")
    lines += [f"{r[0] + ('%' if r[0] else ''):>8} {r[1]:>8}  {short[r[2][4:]]}" for r in rows]
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"diff.{a}.{b}.txt"
    path.write_text("\n".join(lines) + "\n")
    print(f"(excerpt: {path.relative_to(ROOT)})")


def main(argv):
    if argv[:1] == ["name"] and len(argv) == 3:
        for name, (step, filt, _) in PROFILES.items():
            if step == argv[1].rstrip("/") and filt == argv[2]:
                print(name)
    elif argv == ["list"]:
        for step, filt, _ in PROFILES.values():
            print(f"{step}\t{filt}")
    elif argv == ["diffs"]:
        for a, b in DIFFS:
            print(f"{a}\t{b}")
    elif argv[:1] == ["record"] and len(argv) == 4:
        write_record(argv[1], Path(argv[2]), argv[3])
    elif argv[:1] == ["diff"] and len(argv) == 5:
        if (argv[1], argv[2]) in DIFFS:
            write_diff(argv[1], argv[2], Path(argv[3]), Path(argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
