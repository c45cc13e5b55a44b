// The trace workloads (common/bench/include/tierpool_bench/workload_trace.h) in step 06's
// benchmark: every recorded program in common/traces/ replayed against step 06 (linked), step 03's
// size-class pool, every malloc (the runner preloads the peers) and the baseline, in one run.
#if TIERPOOL_HAVE_TRACES
#include <algorithm>
#include <cstring>

#include "tierpool/tierpool.h"
#include "tierpool_bench/workload_trace.h"

#if TIERPOOL_HAVE_STEP03
#include "size_class_pool.h"
#endif

namespace {

// Step 06 as a C program calls it: free(p) without a size (the page map finds the span), and
// realloc, calloc and the aligned calls of its C API.
struct TierpoolTraceAllocator {
  void* Allocate(std::size_t bytes) { return tierpool::ConcurrentAlloc(bytes); }
  void Deallocate(void* p, std::size_t) { tierpool::ConcurrentFree(p); }
  void EndRound() {}
  void* Reallocate(void* p, std::size_t, std::size_t bytes) { return tierpool_realloc(p, bytes); }
  void* AllocateZeroed(std::size_t bytes) { return tierpool_calloc(1, bytes); }
  void* AllocateAligned(std::size_t bytes, std::size_t align) {
    return tierpool::ConcurrentAlignedAlloc(bytes, align);
  }
};

// The same, giving every free byte back to the OS after every 1024th free
// (tierpool_release_free_memory: the thread's cache, the central lists, every free page). Slower
// by design: its row says how much of step 06's memory at peak was free memory not yet given back
// (the release clock, the caches) and how much is rounding and partly used spans.
struct TierpoolReleasingAllocator : TierpoolTraceAllocator {
  unsigned frees = 0;
  void Deallocate(void* p, std::size_t) {
    tierpool::ConcurrentFree(p);
    if (++frees % 1024 == 0) tierpool_release_free_memory();
  }
};

#if TIERPOOL_HAVE_STEP03
// Step 03's size-class pool: one thread, no realloc (the replay allocates, copies and frees, as a
// program on this pool would), alignments up to 4096 bytes.
struct Step03TraceAllocator {
  static constexpr bool kThreadSafe = false;
  static constexpr std::size_t kMaxAlign = step03::SizeClassPool<>::kMaxAlign;
  step03::SizeClassPool<> pool;
  void* Allocate(std::size_t bytes) { return pool.alloc(bytes); }
  void Deallocate(void* p, std::size_t) { pool.free(p); }
  void EndRound() {}
  void* AllocateAligned(std::size_t bytes, std::size_t align) { return pool.alloc(bytes, align); }
};
#endif

const bool registered = [] {
  using namespace tierpool::bench;
  RegisterTraces<TierpoolTraceAllocator>("step06-tierpool");
  RegisterTraces<TierpoolReleasingAllocator>("step06-tierpool-release");
#if TIERPOOL_HAVE_STEP03
  RegisterTraces<Step03TraceAllocator>("step03-sizeclass");
#endif
  RegisterTraces<TraceMallocAllocator>("malloc");
  RegisterTraces<TraceBaselineAllocator>("baseline");
  return true;
}();

}  // namespace
#endif
