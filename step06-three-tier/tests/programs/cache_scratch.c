// cache_scratch THREADS ITERATIONS WRITES SIZE: Hoard's cache-scratch benchmark, in a few lines.
// The main thread allocates one SIZE-byte object for each thread, one after the other, so that
// they share cache lines. Each thread frees the one it was given, then ITERATIONS times allocates
// an object, writes each of its bytes WRITES times and frees it. An allocator that hands a thread
// back the object it freed first, a neighbour of another thread's, makes the threads write one
// line for their whole lives (passive false sharing); its time shows it. Prints the bytes' sum.
#include <stdio.h>
#include <stdlib.h>

#include "run_threads.h"

static int iterations, writes, size;

static void* Work(void* given) {
  free(given);
  unsigned long sum = 0;
  for (int i = 0; i < iterations; i++) {
    volatile unsigned char* p = malloc((size_t)size);
    if (p == NULL) abort();
    for (int k = 0; k < size; k++)
      p[k] = 0;
    for (int w = 0; w < writes; w++) {
      for (int k = 0; k < size; k++)
        p[k]++;
    }
    for (int k = 0; k < size; k++)
      sum += p[k];
    free((void*)p);
  }
  return (void*)sum;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: cache_scratch THREADS ITERATIONS WRITES SIZE\n");
    return 2;
  }
  const int threads = atoi(argv[1]);
  iterations = atoi(argv[2]);
  writes = atoi(argv[3]);
  size = atoi(argv[4]);
  if (threads < 1 || threads > 64 || iterations < 1 || writes < 1 || size < 1) return 2;
  void* given[64];
  for (int t = 0; t < threads; t++) {
    given[t] = malloc((size_t)size);
    if (given[t] == NULL) return 1;
  }
  return RunThreadsAndPrintSum(threads, Work, given);
}
