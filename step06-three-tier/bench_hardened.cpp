// The hardened build of the allocator (double-free bitmap, free-pattern checks, encoded links)
// beside the release one, so the table shows what the checks cost. Compiled with
// TIERPOOL_INTERNAL_NS=hardened and TIERPOOL_HARDENED=1, against the tierpool_core_hardened
// library.
#include "allocator.h"
#include "tierpool_bench/peers.h"

namespace {

struct HardenedAllocator {
  void* Allocate(std::size_t bytes) { return tierpool::hardened::Allocate(bytes); }
  void Deallocate(void* p, std::size_t bytes) { tierpool::hardened::FreeSized(p, bytes); }
  void EndRound() {}
};

const bool registered = [] {
  using namespace tierpool::bench;
  constexpr const char* kName = "step06-tierpool-hardened";
  Register<RationalWorkload, AllocatorFactory<HardenedAllocator>>(kName, 1);
  RegisterThreads<SizesWorkload, HardenedAllocator>(kName, {1, 2});
  Register<Shuffle64Workload, HardenedAllocator>(kName, 1);
  return true;
}();

}  // namespace
