// small_sizes THREADS STEPS: the pattern of glibc's malloc benchmark (benchtests'
// bench-malloc-thread, also in mimalloc-bench), with a fixed number of steps instead of a fixed
// time. Each thread keeps 1024 slots; a step frees the block in a random slot and puts there a
// new block whose size is drawn from a density falling as 1/size^2 between 4 B and 32 KiB (most
// blocks are a few dozen bytes, the size class changes at almost every step, as in a program of
// many small objects), then writes each of its bytes. Prints a sum read back from the blocks.
#include <stdio.h>
#include <stdlib.h>

#include "run_threads.h"

enum { kSlots = 1024, kSizes = 8000, kPicks = 4 * kSlots };

static unsigned sizes[kSizes], picks[kPicks];
static long steps;

// An inverse-square density on [4, 32768]: the inverse of its distribution function at u.
static unsigned DrawSize(double u) {
  const double lo = 1.0 / 4, hi = 1.0 / 32768;
  return (unsigned)(1.0 / (lo - u * (lo - hi)));
}

// The sum is of each block's last byte read back when the block is freed: an allocator that
// hands out overlapping blocks changes it.
static unsigned long Release(unsigned char* p, unsigned size) {
  const unsigned long last = p != NULL ? p[size - 1] : 0;
  free(p);
  return last;
}

static void* Work(void* arg) {
  const unsigned offset = (unsigned)(size_t)arg;
  unsigned char* slots[kSlots] = {0};
  unsigned slot_sizes[kSlots] = {0};
  unsigned long sum = 0;
  for (long i = 0; i < steps; i++) {
    const unsigned slot = picks[(i + offset) % kPicks];
    const unsigned size = sizes[(i + 7 * offset) % kSizes];
    sum += Release(slots[slot], slot_sizes[slot]);
    unsigned char* p = malloc(size);
    if (p == NULL) abort();
    for (unsigned k = 0; k < size; k++)
      p[k] = (unsigned char)k;
    slots[slot] = p;
    slot_sizes[slot] = size;
  }
  for (int s = 0; s < kSlots; s++)
    sum += Release(slots[s], slot_sizes[s]);
  return (void*)sum;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: small_sizes THREADS STEPS\n");
    return 2;
  }
  const int threads = atoi(argv[1]);
  steps = atol(argv[2]);
  if (threads < 1 || threads > 64 || steps < 1) return 2;
  srand(88);
  for (int i = 0; i < kSizes; i++)
    sizes[i] = DrawSize((double)rand() / RAND_MAX);
  for (int i = 0; i < kPicks; i++)
    picks[i] = (unsigned)rand() % kSlots;
  void* offsets[64];  // where each thread starts in the tables
  for (int t = 0; t < threads; t++)
    offsets[t] = (void*)(size_t)(t * 977);
  return RunThreadsAndPrintSum(threads, Work, offsets);
}
