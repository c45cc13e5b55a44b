// teardown ROUNDS BLOCKS: the benchmark's `teardown` row as a plain program, one round a thread.
// Each round starts a thread (the next only after it ends), which makes BLOCKS blocks of 16 to 128
// bytes (uniform), stamps each at both ends, checks and frees them in the order it made them,
// then makes and frees 8 000 blocks of 4 KiB. Prints a sum of the stamps read back (the same under
// every malloc, unless one hands out overlapping blocks).
//
// On stderr, what the allocator decided (the same program, preloaded, under each malloc):
//   - the time a thread took in each phase, averaged over the rounds after the first two;
//   - how the blocks of a class lie in the order they were made: of each block and the block of
//     its class made before it, how many lie at most 256 bytes above it ("up"), at most 256 bytes
//     below ("down"), or farther ("far"), in the fourth round and in the last;
//   - a pass that reads every block's two stamps after a 32 MiB write has evicted them, averaged
//     over the first ten rounds and the last ten.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kMinSize = 16, kMaxSize = 128, kPages = 8000, kPageBlock = 4096, kClasses = 9 };
enum { kEvictBytes = 32 << 20 };

typedef struct {
  unsigned char* p;
  size_t size;
  uint64_t tag;
} Live;

static long blocks;
static Live* live;
static unsigned* sizes;
static unsigned char* evict;
static uint64_t serial;
static unsigned long sum;
static int round_now;
static double build_ms, free_ms, pages_ms;

static double NowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void Make(Live* b, size_t size) {
  b->size = size;
  b->tag = ++serial;
  b->p = malloc(size);
  if (b->p == NULL) abort();
  memcpy(b->p, &b->tag, 8);
  memcpy(b->p + size - 8, &b->tag, 8);
}

static void Release(Live* b) {
  uint64_t head, tail;
  memcpy(&head, b->p, 8);
  memcpy(&tail, b->p + b->size - 8, 8);
  if (head != b->tag || tail != b->tag) {
    fprintf(stderr, "teardown: a block's stamps were overwritten\n");
    abort();
  }
  sum += (unsigned long)(head % 1000003);
  free(b->p);
}

// Of each block and the one of its class (size rounded up to 16) made before it: up, down, far.
static void Layout(long counts[3]) {
  uintptr_t last[kClasses + 1] = {0};
  counts[0] = counts[1] = counts[2] = 0;
  for (long i = 0; i < blocks; i++) {
    const int cl = (int)((live[i].size + 15) / 16);
    const uintptr_t a = (uintptr_t)live[i].p;
    if (last[cl] != 0) {
      const long d = (long)(a - last[cl]);
      counts[d > 0 && d <= 256 ? 0 : d < 0 && d >= -256 ? 1 : 2]++;
    }
    last[cl] = a;
  }
}

static double ReadPass(void) {
  memset(evict, round_now, kEvictBytes);
  const double start = NowMs();
  uint64_t s = 0;
  for (long i = 0; i < blocks; i++) {
    uint64_t v;
    memcpy(&v, live[i].p, 8);
    s += v;
    memcpy(&v, live[i].p + live[i].size - 8, 8);
    s += v;
  }
  if (s == 1) fputc(' ', stderr);  // (keeps the loop)
  return NowMs() - start;
}

static double read_first_ms, read_last_ms;
static int rounds;

static void* Round(void* unused) {
  (void)unused;
  const double t0 = NowMs();
  for (long i = 0; i < blocks; i++)
    Make(&live[i], sizes[i]);
  const double t1 = NowMs();
  if (round_now == 3 || round_now == rounds - 1) {
    long counts[3];
    Layout(counts);
    fprintf(stderr, "round %d: up %ld down %ld far %ld\n", round_now + 1, counts[0], counts[1],
            counts[2]);
  }
  if (round_now < 10) read_first_ms += ReadPass();
  if (round_now >= rounds - 10) read_last_ms += ReadPass();
  const double t2 = NowMs();
  for (long i = 0; i < blocks; i++)
    Release(&live[i]);
  const double t3 = NowMs();
  for (long i = 0; i < kPages; i++)
    Make(&live[i], kPageBlock);
  for (long i = 0; i < kPages; i++)
    Release(&live[i]);
  const double t4 = NowMs();
  if (round_now >= 2) {
    build_ms += t1 - t0;
    free_ms += t3 - t2;
    pages_ms += t4 - t3;
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: teardown ROUNDS BLOCKS\n");
    return 2;
  }
  rounds = atoi(argv[1]);
  blocks = atol(argv[2]);
  if (rounds < 3 || blocks < kPages) return 2;
  live = calloc((size_t)blocks, sizeof *live);
  sizes = calloc((size_t)blocks, sizeof *sizes);
  evict = malloc(kEvictBytes);
  if (live == NULL || sizes == NULL || evict == NULL) return 1;
  srand(2100);
  for (long i = 0; i < blocks; i++)
    sizes[i] = kMinSize + (unsigned)rand() % (kMaxSize - kMinSize + 1);
  for (round_now = 0; round_now < rounds; round_now++) {
    pthread_t id;
    if (pthread_create(&id, NULL, Round, NULL) != 0) return 1;
    pthread_join(id, NULL);
  }
  const int timed = rounds - 2, read_rounds = rounds < 10 ? rounds : 10;
  fprintf(stderr, "a thread: build %.2f ms, free %.2f ms, pages %.2f ms\n", build_ms / timed,
          free_ms / timed, pages_ms / timed);
  fprintf(stderr, "read pass: %.2f ms (first %d rounds), %.2f ms (last %d)\n",
          read_first_ms / read_rounds, read_rounds, read_last_ms / read_rounds, read_rounds);
  printf("%lu\n", sum);
  free(evict);
  free(sizes);
  free(live);
  return 0;
}
