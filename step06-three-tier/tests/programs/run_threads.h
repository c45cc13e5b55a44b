// For the test programs: runs work(args[t]) on `threads` threads at once, each returning its
// share of a sum, and prints the total. 0, or 1 when a thread cannot be started.
#pragma once

#include <pthread.h>
#include <stdio.h>

static int RunThreadsAndPrintSum(int threads, void* (*work)(void*), void* const* args) {
  pthread_t ids[64];
  if (threads > 64) return 1;
  for (int t = 0; t < threads; t++) {
    if (pthread_create(&ids[t], NULL, work, args[t]) != 0) return 1;
  }
  unsigned long total = 0;
  for (int t = 0; t < threads; t++) {
    void* sum;
    pthread_join(ids[t], &sum);
    total += (unsigned long)sum;
  }
  printf("%lu\n", total);
  return 0;
}
