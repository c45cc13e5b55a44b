/* The C API: the same allocator, with errors reported through errno like malloc's. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <tierpool/tierpool.h>

int main(void) {
  double* values = tierpool_calloc(1000, sizeof(double));
  if (values == NULL) return 1;
  values = tierpool_realloc(values, 2000 * sizeof(double));
  if (values == NULL) return 1;
  tierpool_free(values);

  errno = 0;
  if (tierpool_calloc(SIZE_MAX, 2) != NULL || errno != ENOMEM) return 2; /* overflow */
  errno = 0;
  if (tierpool_aligned_alloc(48, 64) != NULL || errno != EINVAL) return 3; /* not 2^k */

  struct tierpool_stats stats;
  tierpool_get_stats(&stats);
  printf("tierpool: %zu bytes mapped\n", stats.mapped_bytes);
  tierpool_print_stats(1);
  return 0;
}
