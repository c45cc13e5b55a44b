"""A thread per task, as a server that starts one per request: for running under LD_PRELOAD.

Run with PYTHONMALLOC=malloc so that every Python object comes from malloc. TASKS tasks (argv[1],
default 3000), two at a time, each a thread that builds a dict of 200 entries (keys, small lists,
strings, tuples), drops it and ends: each thread's allocator state is made, used for a few
thousand blocks and given back. What it prints is a checksum of deterministic work.
"""
import sys
import threading

TASKS = int(sys.argv[1]) if len(sys.argv) > 1 else 3000


def task(n, sums):
    table = {}
    for i in range(200):
        table["k%d" % (n * 7 + i)] = [i, str(i) * (i % 9), (i, n)]
    sums[n] = sum(len(v[1]) for v in table.values()) + len(table)


sums = [0] * TASKS
for first in range(0, TASKS, 2):
    pair = range(first, min(first + 2, TASKS))
    threads = [threading.Thread(target=task, args=(n, sums)) for n in pair]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print(sum(sums))
