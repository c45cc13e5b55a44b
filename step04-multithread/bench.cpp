// Step 04 on the shared harness: step02's MemoryPool behind a mutex, a spinlock, or no lock (and
// step03's SizeClassPool behind the spinlock), on
// W3 "mt512" (article 004: 4 threads x 20 x 25 000 blocks of 512 B) and W2 "shuffle64" at 1, 2,
// 4 and 8 threads, beside glibc and the preloaded mallocs, __mt_alloc, __pool_alloc and
// std::pmr::synchronized_pool_resource. The rows show the lock's cost growing with the threads.
#include "locked_pools.h"
#include "tierpool_bench/peers.h"

namespace {

// libstdc++'s __mt_alloc and __pool_alloc initialise themselves with plain (non-atomic) flags
// checked twice, which ThreadSanitizer rightly reports as races inside those headers. They are
// peers, not the code under test: the TSan build leaves them out.
#if TIERPOOL_TSAN
constexpr unsigned kGnuPeersUnlessTsan = 0;
#else
constexpr unsigned kGnuPeersUnlessTsan = tierpool::bench::kGnuPeers;
#endif

const bool registered = [] {
  using namespace tierpool::bench;
  using step04::LockedPoolAllocator;
  using step04::LockedSizeClassAllocator;
  using step04::MutexLock;
  using step04::NullLock;
  using step04::SpinLock;

  Register<Mt512Workload, LockedPoolAllocator<512, MutexLock>>("step04-mutex", 4);
  Register<Mt512Workload, LockedPoolAllocator<512, SpinLock>>("step04-spin", 4);
  Register<Mt512Workload, LockedSizeClassAllocator<SpinLock>>("step04-sizeclass-spin", 4);
  RegisterPeers<Mt512Workload>({4}, kMallocPeers | kGnuPeersUnlessTsan | kPmrPeers);

  RegisterThreads<Shuffle64Workload, LockedPoolAllocator<64, MutexLock>>("step04-mutex",
                                                                         {1, 2, 4, 8});
  RegisterThreads<Shuffle64Workload, LockedPoolAllocator<64, SpinLock>>("step04-spin",
                                                                        {1, 2, 4, 8});
  RegisterThreads<Shuffle64Workload, LockedSizeClassAllocator<SpinLock>>("step04-sizeclass-spin",
                                                                         {1, 2, 4, 8});
  // The price of step02's hardened checks (ledger of live blocks, fill pattern) under the lock.
  RegisterThreads<Shuffle64Workload, LockedPoolAllocator<64, SpinLock, step02::Hardened>>(
      "step04-spin-hardened", {1, 2});
  // One thread only: the null lock is the pool without any locking, the floor of this design.
  Register<Shuffle64Workload, LockedPoolAllocator<64, NullLock>>("step04-nolock", 1);
  RegisterPeers<Shuffle64Workload>({1, 2, 4, 8}, kMallocPeers | kGnuPeersUnlessTsan | kPmrPeers);
  return true;
}();

}  // namespace
