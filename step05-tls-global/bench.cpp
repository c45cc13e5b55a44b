// Step 05 on the shared harness: W2 "shuffle64" exactly as article 000 measured it (64 B objects,
// 100 000 per thread per round, shuffled, 50 rounds, 1..16 threads), W1 "rational" (the pool
// typed for an 8-byte object) and W5 "xthread" (allocated on one thread, freed on another),
// beside glibc and every preloaded malloc, and beside step 04's pool behind a spinlock: the jump
// from one lock for all threads to one LocalPool per thread. Each rung of the ladder (the plain
// design, then one optimisation more per row) runs W1, W2 at 1 and 16 threads, and W5.
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

// W1's factory: the pool typed for the article's Rational.
template <class Traits>
struct ObjectPoolFactory {
  using Object = tierpool::bench::PlainRational;
  step05::ObjectPool<Object, Traits> pool;
  Object* New(int i) { return pool.New(i); }
  void Delete(Object* p) { pool.Delete(p); }
  void EndRound() {}
};

template <class Traits>
struct ObjectPoolAllocator {
  step05::ObjectPool<Object64, Traits> pool;
  void* Allocate(std::size_t) { return pool.Allocate(); }
  void Deallocate(void* p, std::size_t) { pool.Free(p); }
  void EndRound() {}
};

// One rung of the ladder (object_pool.h) on every workload of the chapter's waterfall.
template <class Traits>
void RegisterRung(const char* name) {
  using namespace tierpool::bench;
  Register<RationalWorkload, ObjectPoolFactory<Traits>>(name, 1);
  RegisterThreads<Shuffle64Workload, ObjectPoolAllocator<Traits>>(name, {1, 16});
  Register<XthreadWorkload, ObjectPoolAllocator<Traits>>(name, 2);
}

const bool registered = [] {
  using namespace tierpool::bench;
  using namespace step05;
  using Fast = ObjectPoolAllocator<DefaultPoolTraits>;
  using Hardened = ObjectPoolAllocator<HardenedTraits>;
  // The ladder, cumulative: the plain design, then one rung more per row; the last row is
  // step05-objectpool itself (DefaultPoolTraits), registered below with more thread counts.
  RegisterRung<PlainPoolTraits>("step05-plain");
  RegisterRung<WithUnrolledList<>>("step05-plus-unrolled");
  RegisterRung<WithInterleavedChains<WithUnrolledList<>>>("step05-plus-chains");
  RegisterRung<WithItemPrefetch<WithInterleavedChains<WithUnrolledList<>>>>(
      "step05-plus-items-ahead");

  RegisterThreads<Shuffle64Workload, Fast>("step05-objectpool", {1, 2, 4, 8, 16});
  RegisterThreads<Shuffle64Workload, Hardened>("step05-objectpool-hardened", {1, 2});
  RegisterThreads<Shuffle64Workload, step04::LockedPoolAllocator<64, step04::SpinLock>>(
      "step04-spin", {1, 2, 4, 8, 16});
  RegisterPeers<Shuffle64Workload>({1, 2, 4, 8, 16}, kMallocPeers);

  Register<RationalWorkload, ObjectPoolFactory<DefaultPoolTraits>>("step05-objectpool", 1);
  RegisterPeers<RationalWorkload>({1}, kMallocPeers);

  Register<XthreadWorkload, Fast>("step05-objectpool", 2);
  RegisterPeers<XthreadWorkload>({2}, kPeersOfW5);
  return true;
}();

}  // namespace
