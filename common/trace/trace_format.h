/* The trace format of tierpool's allocation recorder (common/trace/recorder.c) and replayer
 * (common/bench/include/tierpool_bench/workload_trace.h). Plain C, so both can include it.
 *
 * A trace is one process's allocations, in the order they happened:
 *
 *   header   "TPTRACE1", then a varint length and that many bytes of the process's command line
 *            (arguments separated by spaces, cut at 255 bytes)
 *   records  one byte of operation, then its fields as unsigned LEB128 varints
 *   end      TP_OP_END and its counts; a trace without it was cut short and is refused
 *
 * Every allocating record creates the next block id (0, 1, 2, ...: ids are never reused), so an
 * allocation stores no id. A record that frees names its block as `next id - id` (>= 1): recent
 * blocks, the usual case, take one byte. Sizes are the bytes asked for (calloc: n * size).
 *
 *   TP_OP_THREAD        thread         the following records are that thread's (0, 1, ...)
 *   TP_OP_TIME          delta_ms       the coarse clock (CLOCK_MONOTONIC_COARSE) moved on
 *   TP_OP_MALLOC .. TP_OP_NEW_ARRAY           size
 *   TP_OP_MEMALIGN .. TP_OP_NEW_ALIGNED_ARRAY size, then one byte: log2 of the alignment
 *   TP_OP_FREE .. TP_OP_DELETE_ARRAY          back (next id - id)
 *   TP_OP_REALLOC       back, size     back 0: realloc(NULL, size); a new id either way
 *   TP_OP_END           ops, allocations, threads, unmatched frees, failed calls
 *
 * `ops` counts allocating, freeing and realloc records: what a replay must do, one call each.
 * An unmatched free (a pointer the recorder never saw allocated: from before it was loaded) and a
 * call that failed (NULL) are counted, not recorded.
 */
#ifndef TIERPOOL_TRACE_FORMAT_H_
#define TIERPOOL_TRACE_FORMAT_H_

#define TP_TRACE_MAGIC "TPTRACE1"
#define TP_TRACE_MAGIC_BYTES 8

enum tp_op {
  TP_OP_THREAD = 1,
  TP_OP_TIME = 2,
  /* allocations: a size */
  TP_OP_MALLOC = 3,
  TP_OP_CALLOC = 4,
  TP_OP_NEW = 5,
  TP_OP_NEW_ARRAY = 6,
  /* aligned allocations: a size and log2 of the alignment */
  TP_OP_MEMALIGN = 7,
  TP_OP_POSIX_MEMALIGN = 8,
  TP_OP_ALIGNED_ALLOC = 9,
  TP_OP_VALLOC = 10,
  TP_OP_PVALLOC = 11,
  TP_OP_NEW_ALIGNED = 12,
  TP_OP_NEW_ALIGNED_ARRAY = 13,
  /* frees: which block */
  TP_OP_FREE = 16,
  TP_OP_DELETE = 17,
  TP_OP_DELETE_ARRAY = 18,
  /* realloc: which block (0: none), the new size */
  TP_OP_REALLOC = 20,
  TP_OP_END = 31
};

#endif /* TIERPOOL_TRACE_FORMAT_H_ */
