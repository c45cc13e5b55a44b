/* The public header is usable from C: this file is compiled as C and called from the API test. */
#include <errno.h>
#include <string.h>

#include "tierpool/tierpool.h"

int tierpool_c_roundtrip(void) {
  struct tierpool_stats stats;
  char* p = (char*)tierpool_malloc(100);
  void* q;
  if (p == NULL) return 1;
  memset(p, 7, 100);
  p = (char*)tierpool_realloc(p, 5000);
  if (p == NULL || p[99] != 7) return 2;
  if (tierpool_usable_size(p) < 5000) return 3;
  tierpool_free(p);
  q = tierpool_calloc(10, 10);
  if (q == NULL || ((char*)q)[50] != 0) return 4;
  tierpool_free_sized(q, 100);
  errno = 0;
  if (tierpool_aligned_alloc(3, 8) != NULL || errno != EINVAL) return 5;
  tierpool_get_stats(&stats);
  if (stats.mapped_bytes == 0 || tierpool_owns(&stats) != 0) return 6;
  tierpool_thread_flush();
  return 0;
}
