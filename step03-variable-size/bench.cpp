// Step 03 on the shared harness.
//   W4 "sizes" (one thread): the size-class pool (sized free, and free(p) that reads the chunk
//                header), the arena (rewound every round), and the peers.
//   "request":   the per-request arena workload: the arena rewound (reset) or emptied (release)
//                after every request, the size-class pool, std::pmr's monotonic and pool
//                resources, malloc and the baseline.
// The "-hardened" rows are the same pools with the Hardened policy: what the checks cost.
#include "byte_memory_pool.h"
#include "pool_resource.h"
#include "size_class_pool.h"
#include "tierpool_bench/peers.h"
#include "tierpool_bench/workload_arena.h"

namespace {

enum class ArenaEnd { kReset, kRelease };

template <ArenaEnd kEnd, class Checks = step03::Fast>
struct ArenaAdapter {
  step03::ByteMemoryPool<Checks> pool;
  void* Allocate(std::size_t bytes) { return pool.alloc(bytes); }
  void Deallocate(void* p, std::size_t bytes) { pool.free(p, bytes); }
  void EndRound() {
    if constexpr (kEnd == ArenaEnd::kReset) {
      pool.reset();
    } else {
      pool.release();
    }
  }
};

// The arena through std::pmr::memory_resource's virtual calls, rewound every round.
struct ArenaResourceAdapter {
  step03::ArenaResource resource;
  void* Allocate(std::size_t bytes) { return resource.allocate(bytes); }
  void Deallocate(void* p, std::size_t bytes) { resource.deallocate(p, bytes); }
  void EndRound() { resource.pool().reset(); }
};

enum class Free { kSized, kUnsized };

template <Free kFree, class Checks = step03::Fast>
struct SizeClassAdapter {
  step03::SizeClassPool<Checks> pool;
  void* Allocate(std::size_t bytes) { return pool.alloc(bytes); }
  void Deallocate(void* p, std::size_t bytes) {
    if constexpr (kFree == Free::kSized) {
      pool.free(p, bytes);
    } else {
      pool.free(p);
    }
  }
  void EndRound() {}
};

using tierpool::bench::PmrAllocator;
using Monotonic = PmrAllocator<std::pmr::monotonic_buffer_resource>;

const bool registered = [] {
  using namespace tierpool::bench;
  Register<SizesWorkload, SizeClassAdapter<Free::kSized>>("step03-sizeclass", 1);
  Register<SizesWorkload, SizeClassAdapter<Free::kUnsized>>("step03-sizeclass-unsized", 1);
  Register<SizesWorkload, SizeClassAdapter<Free::kSized, step03::Hardened>>(
      "step03-sizeclass-hardened", 1);
  Register<SizesWorkload, PmrAllocator<step03::SizeClassResource>>("step03-sizeclass-pmr", 1);
  Register<SizesWorkload, ArenaAdapter<ArenaEnd::kReset>>("step03-arena", 1);
  Register<SizesWorkload, Monotonic>("pmr-monotonic", 1);
  RegisterPeers<SizesWorkload>({1});

  Register<RequestWorkload, ArenaAdapter<ArenaEnd::kReset>>("step03-arena", 1);
  Register<RequestWorkload, ArenaAdapter<ArenaEnd::kRelease>>("step03-arena-release", 1);
  Register<RequestWorkload, ArenaAdapter<ArenaEnd::kReset, step03::Hardened>>(
      "step03-arena-hardened", 1);
  Register<RequestWorkload, ArenaResourceAdapter>("step03-arena-pmr", 1);
  Register<RequestWorkload, SizeClassAdapter<Free::kSized>>("step03-sizeclass", 1);
  Register<RequestWorkload, Monotonic>("pmr-monotonic", 1);
  RegisterPeers<RequestWorkload>({1});
  return true;
}();

}  // namespace
