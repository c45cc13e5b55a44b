// One rung of the ladder from article 003's three tiers to this allocator (the chapter's "From the
// plain design to this one"). CMakeLists.txt compiles this file once per rung, each time against a
// core built with the rung's switches (config.h) in a namespace of its own:
//   TIERPOOL_RUNG_ROW         the row's name in the tables
//   TIERPOOL_RUNG_SIZED_FREE  1: free with the size the caller knows (no page-map lookup);
//                             0: free(ptr) alone, the size found in the page map, as the article
//                             does
// The last rung is the library itself, the step06-tierpool row of bench.cpp.
#include "allocator.h"
#include "tierpool_bench/peers.h"

namespace {

namespace core = tierpool::TIERPOOL_INTERNAL_NS;

// Out of line and opaque to the optimizer, as the library's ConcurrentAlloc and ConcurrentFree are
// for the final row (another file): every rung pays the same call, and none is compiled for the
// one size a workload happens to use.
__attribute__((noipa)) void* RungAllocate(std::size_t bytes) {
  return core::Allocate(bytes);
}
__attribute__((noipa)) void RungFree(void* p, std::size_t bytes) {
  if constexpr (TIERPOOL_RUNG_SIZED_FREE != 0) {
    core::FreeSized(p, bytes);
  } else {
    (void)bytes;
    core::Free(p);
  }
}

struct RungAllocator {
  void* Allocate(std::size_t bytes) { return RungAllocate(bytes); }
  void Deallocate(void* p, std::size_t bytes) { RungFree(p, bytes); }
  void EndRound() {}
};

const bool registered = [] {
  using namespace tierpool::bench;
  constexpr const char* kName = TIERPOOL_RUNG_ROW;
  Register<RationalWorkload, AllocatorFactory<RungAllocator>>(kName, 1);
  RegisterThreads<Shuffle64Workload, RungAllocator>(kName, {1, 16});
  RegisterThreads<SizesWorkload, RungAllocator>(kName, {1, 16});
  Register<XthreadWorkload, RungAllocator>(kName, 2);
  return true;
}();

}  // namespace
