// Step 02 on the shared harness.
//   W1 "rational": the book's version 1 (step 01's free list), version 2 (BookRational over
//                  book::MemoryPool) and the chunked MemoryPool<Rational>, beside the peers.
//   "nodes":       std::map and std::list nodes from PoolAllocator, std::allocator (malloc),
//                  boost::fast_pool_allocator and std::pmr::unsynchronized_pool_resource.
// The "-hardened" rows are the same pools with the Hardened policy: what the checks cost.
#include "pool_allocator.h"
#include "pooled_rational.h"
#include "rational.h"
#include "tierpool_bench/peers.h"
#include "tierpool_bench/workload_nodes.h"

namespace {

using tierpool::bench::PlainRational;

// `new`/`delete` of a class whose operators use a pool: the W1 program itself.
template <class R>
struct ClassNewFactory {
  using Object = R;
  Object* New(int i) { return new R(i); }
  void Delete(Object* p) { delete p; }
  void EndRound() {}
};

struct BookV2Factory : ClassNewFactory<step02::BookRational> {
  BookV2Factory() { step02::BookRational::newMemPool(); }
  ~BookV2Factory() { step02::BookRational::deleteMemPool(); }
};

// A pool as a byte allocator of the harness (adapters.h).
template <class Pool>
struct PoolAdapter {
  Pool pool;
  void* Allocate(std::size_t bytes) { return pool.alloc(bytes); }
  void Deallocate(void* p, std::size_t) { pool.free(p); }
  void EndRound() {}
};

template <class Checks>
struct PoolAllocatorFamily {
  std::shared_ptr<step02::PoolSet<Checks>> pools = std::make_shared<step02::PoolSet<Checks>>();
  template <class T>
  using Allocator = step02::PoolAllocator<T, Checks>;
  template <class T>
  Allocator<T> Get() {
    return Allocator<T>(pools);
  }
  void EndRound() {}
};

const bool registered = [] {
  using namespace tierpool::bench;
  Register<RationalWorkload, ClassNewFactory<step01::Rational>>("step01-freelist", 1);
  Register<RationalWorkload, BookV2Factory>("step02-book-v2", 1);
  Register<RationalWorkload, ClassNewFactory<step02::Rational>>("step02-mempool", 1);
  Register<RationalWorkload,
           AllocatorFactory<PoolAdapter<step02::MemoryPool<PlainRational, 0, step02::Hardened>>>>(
      "step02-mempool-hardened", 1);
  RegisterPeers<RationalWorkload>({1});

  Register<NodesWorkload, PoolAllocatorFamily<step02::Fast>>("step02-poolallocator", 1);
  Register<NodesWorkload, PoolAllocatorFamily<step02::Hardened>>("step02-poolallocator-hardened",
                                                                 1);
  Register<NodesWorkload, StdAllocatorFamily>("malloc", 1);
  Register<NodesWorkload, ByteAllocatorFamily<BaselineAllocator>>("baseline", 1);
  Register<NodesWorkload, PmrUnsyncFamily>("pmr-unsync", 1);
#if TIERPOOL_HAVE_BOOST
  Register<NodesWorkload, BoostFastPoolFamily<>>("boost-fast-pool", 1);
  Register<NodesWorkload, BoostFastPoolFamily<boost::details::pool::null_mutex>>(
      "boost-fast-pool-nolock", 1);
#endif
  return true;
}();

}  // namespace
