"""An allocation-heavy Python workload in several threads, for running under LD_PRELOAD.

Run with PYTHONMALLOC=malloc so that every Python object comes from malloc (not only the large
ones). Threads build and drop dicts, lists, strings, bytes and bytearrays of many sizes (growing
ones go through realloc); a producer hands objects to a consumer thread that frees them, so blocks
cross threads. Everything printed is a checksum of deterministic work: the same on any malloc.
"""
import hashlib
import json
import queue
import random
import sys
import threading
import zlib

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
THREADS = 4


def churn(seed, results):
    rng = random.Random(seed)
    digest = hashlib.sha256()
    for _ in range(ROUNDS):
        table = {f"key{i}-{rng.random():.6f}": "v" * rng.randint(1, 3000) for i in range(150)}
        blobs = [bytes(rng.randint(0, 6000)) for _ in range(60)]
        grown = bytearray()
        for _ in range(300):
            grown += b"x" * rng.randint(1, 400)
        text = json.dumps(sorted(table.items()))
        digest.update(zlib.compress(text.encode()))
        digest.update(len(grown).to_bytes(8, "little"))
        digest.update(sum(len(b) for b in blobs).to_bytes(8, "little"))
        numbers = sorted(rng.random() for _ in range(2000))
        digest.update(repr(numbers[::100]).encode())
    results[seed] = digest.hexdigest()


def produce(channel, count):
    rng = random.Random(99)
    for i in range(count):
        channel.put([str(i) * rng.randint(1, 200) for _ in range(20)])
    channel.put(None)


def consume(channel, results):
    total = 0
    while (item := channel.get()) is not None:
        total += sum(len(s) for s in item)
    results["handoff"] = total


def main():
    results = {}
    channel = queue.Queue(maxsize=64)
    threads = [threading.Thread(target=churn, args=(seed, results)) for seed in range(THREADS)]
    threads.append(threading.Thread(target=produce, args=(channel, ROUNDS * 100)))
    threads.append(threading.Thread(target=consume, args=(channel, results)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for key in sorted(results, key=str):
        print(key, results[key])


if __name__ == "__main__":
    main()
