// Step 05 on the shared harness: W2 "shuffle64" exactly as article 000 measured it (64 B objects,
// 100 000 per thread per round, shuffled, 50 rounds, 1..16 threads) and W5 "xthread" (allocated
// on one thread, freed on another), beside glibc and every preloaded malloc, and beside step 04's
// pool behind a spinlock: the jump from one lock for all threads to one LocalPool per thread.
#include "locked_pools.h"  // step04
#include "object_pool.h"
#include "tierpool_bench/peers.h"

namespace {

// The workloads ask for 64 bytes; the pool is typed, so it pools an object of that size.
struct Object64 {
  unsigned char bytes[64];
};

struct HardenedTraits : step05::DefaultPoolTraits {
  static constexpr bool kHardened = true;
};

// libstdc++'s __mt_alloc and __pool_alloc initialise themselves with plain flags checked twice,
// which ThreadSanitizer reports as races inside those headers: the TSan build leaves them out.
#if TIERPOOL_TSAN
constexpr unsigned kPeersOfW5 = tierpool::bench::kAllPeers & ~tierpool::bench::kGnuPeers;
#else
constexpr unsigned kPeersOfW5 = tierpool::bench::kAllPeers;
#endif

template <class Traits>
struct ObjectPoolAllocator {
  step05::ObjectPool<Object64, Traits> pool;
  void* Allocate(std::size_t) { return pool.Allocate(); }
  void Deallocate(void* p, std::size_t) { pool.Free(p); }
  void EndRound() {}
};

const bool registered = [] {
  using namespace tierpool::bench;
  using Fast = ObjectPoolAllocator<step05::DefaultPoolTraits>;
  using Hardened = ObjectPoolAllocator<HardenedTraits>;
  RegisterThreads<Shuffle64Workload, Fast>("step05-objectpool", {1, 2, 4, 8, 16});
  RegisterThreads<Shuffle64Workload, Hardened>("step05-objectpool-hardened", {1, 2});
  RegisterThreads<Shuffle64Workload, step04::LockedPoolAllocator<64, step04::SpinLock>>(
      "step04-spin", {1, 2, 4, 8, 16});
  RegisterPeers<Shuffle64Workload>({1, 2, 4, 8, 16}, kMallocPeers);

  Register<XthreadWorkload, Fast>("step05-objectpool", 2);
  RegisterPeers<XthreadWorkload>({2}, kPeersOfW5);
  return true;
}();

}  // namespace
