#!/usr/bin/env bash
# The recorder and the replay together: `make trace` records a Python program (one thread, then
# four), and step 06's benchmark replays each trace on step 06, malloc and step 03's pool. Each
# replay must do exactly the operations the recorder counted (its end record, read back by
# scripts/trace.py), and its checksums must show every block given back as it was handed out (no
# block lost or doubled: tags_equal 1, blocks_bad 0). Step 03's pool, not thread-safe, must
# refuse the four-thread trace with a note.
#   record_replay_test.sh <repository> <libtierpool_trace.so> <step06 benchmark binary>
set -euo pipefail
root=$1
export TIERPOOL_TRACE_RECORDER=$2
bench=$3
py=$(command -v /usr/bin/python3 || command -v python3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

fail() {
  echo "FAIL: $*"
  failed=1
}

# replay <name> <allocator>: checks the replay against the recorder's count.
replay() {
  local name=$1 allocator=$2 ops threads out
  ops=$("$py" "$root/scripts/trace.py" info "$tmp/$name.tptrace.xz" | sed -n 's/^ops: //p')
  threads=$(sed -n 's/^threads: //p' "$tmp/$name.txt")
  out=$(TIERPOOL_TRACE_DIR=$tmp "$bench" --tierpool_count="trace-$name/$allocator/threads:$threads" \
          --tierpool_rounds=1) || { fail "$name on $allocator: the replay failed"; return; }
  echo "$name ($threads thread(s), $ops ops recorded) on $allocator:" $out
  grep -qx "pairs $ops" <<<"$out" || fail "$name on $allocator: not $ops operations"
  grep -qx "tags_equal 1" <<<"$out" || fail "$name on $allocator: checksums differ"
  grep -qx "blocks_bad 0" <<<"$out" || fail "$name on $allocator: blocks came back changed"
}

make -s -C "$root" trace NAME=one OUT="$tmp" PROG="PYTHONMALLOC=malloc $py -c '
d = {str(i): \"x\" * (i % 300) for i in range(20000)}
b = [bytearray(i) for i in range(2000)]
del d
print(len(b))'"
make -s -C "$root" trace NAME=four OUT="$tmp" PROG="PYTHONMALLOC=malloc $py -c '
import threading
def work(n):
    for r in range(20):
        d = {f\"{n}-{i}\": [i] * (i % 9) for i in range(500)}
ts = [threading.Thread(target=work, args=(n,)) for n in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]'"

[ "$(sed -n 's/^threads: //p' "$tmp/four.txt")" -ge 4 ] || fail "four threads recorded as fewer"
for allocator in step06-tierpool malloc step03-sizeclass; do
  replay one "$allocator"
done
for allocator in step06-tierpool malloc; do
  replay four "$allocator"
done
threads=$(sed -n 's/^threads: //p' "$tmp/four.txt")
out=$(TIERPOOL_TRACE_DIR=$tmp "$bench" --tierpool_count="trace-four/step03-sizeclass/threads:$threads" \
        --tierpool_rounds=1)
echo "four on step03-sizeclass: $out"
grep -q "^skipped: not thread-safe" <<<"$out" || fail "step 03's pool did not refuse the threads"
exit $failed
