"""A Python program that builds and drops dicts and strings, for `make trace`.

Each round builds an index of words (a dict of str -> list), a dict of records built from
formatted strings, joins and splits text, then drops most of it and keeps a small part, so the
live set grows, falls and grows again as a long-running script's does. Run it with
PYTHONMALLOC=malloc so that every object comes from malloc, not only the large ones.
"""
import random
import sys

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
rng = random.Random(2026)
alphabet = "abcdefghijklmnopqrstuvwxyz"
kept = []
for r in range(ROUNDS):
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(2, 12))) for _ in range(6000)]
    index = {}
    for i, w in enumerate(words):
        index.setdefault(w[:3], []).append(i)
    records = {f"id-{r}-{i}": {"name": w.title(), "tags": w[::2], "n": i * r} for i, w in
               enumerate(words)}
    text = " ".join(f"{k}={v['name']}" for k, v in records.items())
    parts = text.split(" ")
    counts = {}
    for p in parts:
        counts[len(p)] = counts.get(len(p), 0) + 1
    kept.append({k: records[k] for k in list(records)[:: 50]})
    del words, index, records, text, parts
    if len(kept) > 3:
        kept.pop(0)
print(sum(len(k) for k in kept), sorted(counts)[:3])
