#!/usr/bin/env python3
"""Record a program's allocations as a trace, and read traces (`make trace PROG="..."`).

  scripts/trace.py record NAME 'program and its arguments'   [--out common/traces]
      runs the program (through sh -c) with the recorder preloaded (common/trace/recorder.c,
      build/release/trace/libtierpool_trace.so, built first if missing). Every process it starts is
      recorded; the one with the most records is kept, xz-compressed, as NAME.tptrace.xz, and
      NAME.txt beside it says what was recorded, how, and its counts.
  scripts/trace.py info FILE.tptrace[.xz]
      the counts of a trace: operations, blocks, threads, peak live bytes, calls by kind.

The step 06 benchmark replays every trace in common/traces/ (docs/traces.md).
"""
import argparse
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDER = ROOT / "build" / "release" / "trace" / "libtierpool_trace.so"
MAGIC = b"TPTRACE1"
# trace_format.h
OPS = {3: "malloc", 4: "calloc", 5: "new", 6: "new[]", 7: "memalign", 8: "posix_memalign",
       9: "aligned_alloc", 10: "valloc", 11: "pvalloc", 12: "new aligned", 13: "new[] aligned",
       16: "free", 17: "delete", 18: "delete[]", 20: "realloc"}
THREAD, TIME, END = 1, 2, 31


def read_trace(path, stop_at=None):
    """The counts of a trace, decoded here independently of the C++ reader. With stop_at, only its
    first stop_at operations, and info["live_by_size"]: request size -> bytes live after them."""
    data = Path(path).read_bytes()
    if data[:6] == b"\xfd7zXZ\x00":
        data = lzma.decompress(data)
    if data[:8] != MAGIC:
        raise SystemExit(f"{path}: not an allocation trace")
    pos = 8

    def varint():
        nonlocal pos
        value, shift = 0, 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    n = varint()
    info = {"process": data[pos:pos + n].decode(errors="replace"), "ops": 0, "blocks": 0,
            "threads": set(), "calls": {}, "peak_live_bytes": 0, "ms": 0, "end": None}
    pos += n
    sizes, live, thread = [], 0, 0
    by_size = {}
    while pos < len(data) and (stop_at is None or info["ops"] < stop_at):
        op = data[pos]
        pos += 1
        if op == THREAD:
            thread = varint()
        elif op == TIME:
            info["ms"] += varint()
        elif op == END:
            info["end"] = [varint() for _ in range(5)]
            break
        elif op in OPS:
            info["calls"][OPS[op]] = info["calls"].get(OPS[op], 0) + 1
            info["threads"].add(thread)
            info["ops"] += 1
            gone = None
            if op in (16, 17, 18):
                gone = sizes[len(sizes) - varint()]
            elif op == 20:
                back = varint()
                gone = sizes[len(sizes) - back] if back else None
            if gone is not None:
                live -= gone
                by_size[gone] -= gone
            if op in (16, 17, 18):
                continue
            size = varint()
            if 7 <= op <= 13:
                pos += 1  # log2 of the alignment
            sizes.append(size)
            live += size
            by_size[size] = by_size.get(size, 0) + size
            if live > info["peak_live_bytes"]:
                info["peak_live_bytes"], info["peak_at"] = live, info["ops"]
        else:
            raise SystemExit(f"{path}: unknown record {op} at byte {pos - 1}")
    info["blocks"] = len(sizes)
    info["block_sizes"] = sizes
    info["threads"] = len(info["threads"])
    if stop_at is not None:
        info["live_by_size"] = by_size
        return info
    if info["end"] is None:
        raise SystemExit(f"{path}: no end record (the recording was cut short)")
    if info["end"][0] != info["ops"] or info["end"][1] != info["blocks"]:
        raise SystemExit(f"{path}: the end record's counts differ from the records")
    info["unmatched_frees"], info["failed_calls"] = info["end"][3], info["end"][4]
    return info


def build_recorder():
    if RECORDER.exists():
        return RECORDER
    subprocess.run(["cmake", "--preset", "release"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", "--preset", "release", "--target", "tierpool_trace"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return RECORDER


def record(args):
    recorder = args.recorder or os.environ.get("TIERPOOL_TRACE_RECORDER")
    recorder = Path(recorder) if recorder else build_recorder()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TIERPOOL_TRACE_DIR=tmp, LD_PRELOAD=str(recorder))
        proc = subprocess.run(["sh", "-c", args.program], env=env, cwd=args.cwd)
        if proc.returncode != 0 and not args.any_status:
            raise SystemExit(f"the program exited {proc.returncode}; nothing kept")
        files = sorted(Path(tmp).glob("*.tptrace"), key=lambda p: p.stat().st_size, reverse=True)
        if not files:
            raise SystemExit("no trace written: did the program start at all?")
        kept = files[0]
        info = read_trace(kept)
        others = []
        for f in files[1:]:
            try:
                o = read_trace(f)
                others.append(f"{o['ops']} ops: {o['process']}")
            except SystemExit as e:
                others.append(str(e))
        target = out / f"{args.name}.tptrace.xz"
        with lzma.open(target, "wb", preset=9 | lzma.PRESET_EXTREME) as z:
            z.write(kept.read_bytes())
    note = [f"command: {args.program}",
            f"recorded: make trace NAME={args.name} PROG=\"{args.program}\"",
            f"process: {info['process']}",
            f"threads: {info['threads']}",
            f"ops: {info['ops']}",
            f"blocks: {info['blocks']}",
            f"peak live bytes: {info['peak_live_bytes']}",
            f"recorded ms: {info['ms']}",
            "calls: " + ", ".join(f"{k} {v}" for k, v in sorted(info["calls"].items())),
            f"unmatched frees: {info['unmatched_frees']}",
            f"failed calls: {info['failed_calls']}"]
    note += [f"other process: {o}" for o in others]
    (out / f"{args.name}.txt").write_text("\n".join(note) + "\n")
    print(f"wrote {target} ({target.stat().st_size // 1024} KiB, {info['ops']} ops, "
          f"{info['threads']} thread(s)) and {args.name}.txt")
    return 0


def show(args):
    info = read_trace(args.file)
    for k in ("process", "ops", "blocks", "threads", "peak_live_bytes", "ms", "unmatched_frees",
              "failed_calls"):
        print(f"{k}: {info[k]}")
    print("calls: " + ", ".join(f"{k} {v}" for k, v in sorted(info["calls"].items())))
    # How many blocks of each size band; what the live bytes are made of at their peak, by size
    # band, and the five sizes that hold the most.
    bands = [(128, "<=128 B"), (1024, "<=1 KiB"), (8192, "<=8 KiB"), (65536, "<=64 KiB"),
             (262144, "<=256 KiB"), (float("inf"), ">256 KiB")]
    counts = {}
    for size in info["block_sizes"]:
        label = next(label for limit, label in bands if size <= limit)
        counts[label] = counts.get(label, 0) + 1
    print("blocks by request size: " + ", ".join(
        f"{label} {counts[label]}" for _, label in bands if counts.get(label)))
    at_peak = read_trace(args.file, stop_at=info.get("peak_at", 0))["live_by_size"]
    totals = {}
    for size, live in at_peak.items():
        label = next(label for limit, label in bands if size <= limit)
        totals[label] = totals.get(label, 0) + live
    print("live at peak by request size: " + ", ".join(
        f"{label} {totals[label] // 1024} KiB" for _, label in bands if totals.get(label)))
    top = sorted(at_peak.items(), key=lambda kv: -kv[1])[:5]
    print("largest shares at peak: " + ", ".join(f"{size} B x {live // max(size, 1)}"
                                                  for size, live in top))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record", help="record a program")
    rec.add_argument("name", help="the trace's name (letters, digits, -)")
    rec.add_argument("program", help="the command line, run with sh -c")
    rec.add_argument("--out", default=str(ROOT / "common" / "traces"))
    rec.add_argument("--recorder", help="libtierpool_trace.so (default: $TIERPOOL_TRACE_RECORDER, "
                     "else the release build's)")
    rec.add_argument("--cwd", default=str(ROOT), help="directory to run the program in")
    rec.add_argument("--any-status", action="store_true", help="keep it even if it fails")
    inf = sub.add_parser("info", help="the counts of a trace")
    inf.add_argument("file")
    args = ap.parse_args()
    if args.what == "record" and not shutil.which("sh"):
        raise SystemExit("no sh")
    return record(args) if args.what == "record" else show(args)


if __name__ == "__main__":
    sys.exit(main())
