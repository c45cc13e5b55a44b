// The in-process peers: the fixed-size and standard-library counterparts of the steps' pools, and
// RegisterPeers(), which puts every peer that fits a workload beside a step's own allocators.
//
// Names (the `allocator` column of docs/results/results.csv):
//   malloc        glibc, or the preloaded jemalloc/tcmalloc/mimalloc/tbbmalloc (renamed by the
//   runner) baseline      the harness alone (adapters.h) boost-pool    boost::pool<> of the
//   workload's block size      (one thread) boost-singleton  boost::singleton_pool, a mutex around
//   it     (any threads) pmr-unsync    std::pmr::unsynchronized_pool_resource          (one thread)
//   pmr-sync      std::pmr::synchronized_pool_resource            (any threads)
//   pmr-monotonic std::pmr::monotonic_buffer_resource, released every round (one thread)
//   mt-alloc      __gnu_cxx::__mt_alloc<char>                     (any threads)
//   pool-alloc    __gnu_cxx::__pool_alloc<char>                   (any threads)
#pragma once

#include <ext/mt_allocator.h>
#include <ext/pool_allocator.h>

#include <concepts>
#include <memory_resource>
#include <stdexcept>

#include "tierpool_bench/adapters.h"
#include "tierpool_bench/harness.h"
#include "tierpool_bench/workloads.h"

#if TIERPOOL_HAVE_BOOST
#include <boost/pool/pool.hpp>
#include <boost/pool/singleton_pool.hpp>
#endif

namespace tierpool::bench {

template <class Resource>
struct PmrAllocator {
  Resource resource;
  void* Allocate(std::size_t bytes) { return resource.allocate(bytes); }
  void Deallocate(void* p, std::size_t bytes) { resource.deallocate(p, bytes); }
  void EndRound() {
    if constexpr (std::is_same_v<Resource, std::pmr::monotonic_buffer_resource>) resource.release();
  }
};

struct GnuMtAllocator {
  __gnu_cxx::__mt_alloc<char> alloc;
  void* Allocate(std::size_t bytes) { return alloc.allocate(bytes); }
  void Deallocate(void* p, std::size_t bytes) { alloc.deallocate(static_cast<char*>(p), bytes); }
  void EndRound() {}
};

struct GnuPoolAllocator {
  __gnu_cxx::__pool_alloc<char> alloc;
  void* Allocate(std::size_t bytes) { return alloc.allocate(bytes); }
  void Deallocate(void* p, std::size_t bytes) { alloc.deallocate(static_cast<char*>(p), bytes); }
  void EndRound() {}
};

#if TIERPOOL_HAVE_BOOST
// Boost.Pool hands out blocks of one size, so it only fits the fixed-size workloads.
template <std::size_t kSize>
struct BoostPoolAllocator {
  boost::pool<> pool{kSize};
  void* Allocate(std::size_t) { return pool.malloc(); }
  void Deallocate(void* p, std::size_t) { pool.free(p); }
  void EndRound() {}
};

template <std::size_t kSize>
struct BoostSingletonPoolAllocator {
  struct Tag {};
  using Pool = boost::singleton_pool<Tag, kSize>;
  void* Allocate(std::size_t) { return Pool::malloc(); }
  void Deallocate(void* p, std::size_t) { Pool::free(p); }
  void EndRound() {}
  ~BoostSingletonPoolAllocator() { Pool::purge_memory(); }
};
#endif

// Which peers a step wants beside its own rows (all of them by default).
enum PeerSet : unsigned {
  kMallocPeers = 1u << 0,  // malloc (+ every preloaded library) and the baseline
  kFixedPeers = 1u << 1,   // boost pools, where the workload has one block size
  kPmrPeers = 1u << 2,     // std::pmr pool resources
  kGnuPeers = 1u << 3,     // __mt_alloc, __pool_alloc
  kAllPeers = ~0u,
};

namespace detail {
template <class Workload>
constexpr std::size_t FixedSizeOf() {
  if constexpr (requires { Workload::kObjectSize; }) return Workload::kObjectSize;
  if constexpr (requires { Workload::kBlockSize; }) return Workload::kBlockSize;
  return 0;
}
}  // namespace detail

// Whether `Workload` can run on `Alloc`. A workload that needs more than Allocate/Deallocate/
// EndRound (the big-block ones need realloc and calloc) constrains its Run, so a peer without
// those calls fails this test instead of the build.
template <class Workload, class Alloc>
concept RunsOn = requires(Alloc& alloc, const RunOptions& options) {
  { Workload::Run(alloc, 1, options) } -> std::same_as<RunResult>;
};

namespace detail {
template <class Workload, class Alloc>
void RegisterIfRuns(const char* name, int threads) {
  if constexpr (RunsOn<Workload, Alloc>) Register<Workload, Alloc>(name, threads);
}
}  // namespace detail

// Registers the peers of `Workload` at each thread count. One-thread-only peers are registered
// only where threads == 1 and the workload really has one thread; a peer that lacks a call the
// workload needs (RunsOn) is not registered.
template <class Workload>
void RegisterPeers(std::initializer_list<int> thread_counts, unsigned peers = kAllPeers) {
  constexpr bool kCrossThread = std::is_same_v<Workload, XthreadWorkload>;
  for (int threads : thread_counts) {
    const bool one_thread = threads == 1 && !kCrossThread;
    if (peers & kMallocPeers) {
      if constexpr (std::is_same_v<Workload, RationalWorkload>) {
        Register<Workload, GlobalNewFactory>("malloc", threads);
        Register<Workload, AllocatorFactory<BaselineAllocator>>("baseline", threads);
      } else {
        detail::RegisterIfRuns<Workload, MallocAllocator>("malloc", threads);
        detail::RegisterIfRuns<Workload, BaselineAllocator>("baseline", threads);
      }
    }
    auto add = [&]<class Alloc>(const char* name, bool any_threads) {
      if (!any_threads && !one_thread) return;
      if constexpr (std::is_same_v<Workload, RationalWorkload>) {
        Register<Workload, AllocatorFactory<Alloc>>(name, threads);
      } else {
        detail::RegisterIfRuns<Workload, Alloc>(name, threads);
      }
    };
    if (peers & kPmrPeers) {
      add.template operator()<PmrAllocator<std::pmr::unsynchronized_pool_resource>>("pmr-unsync",
                                                                                    false);
      add.template operator()<PmrAllocator<std::pmr::synchronized_pool_resource>>("pmr-sync", true);
    }
    if (peers & kGnuPeers) {
      add.template operator()<GnuMtAllocator>("mt-alloc", true);
      add.template operator()<GnuPoolAllocator>("pool-alloc", true);
    }
#if TIERPOOL_HAVE_BOOST
    constexpr std::size_t kFixed = std::is_same_v<Workload, RationalWorkload>
                                       ? sizeof(PlainRational)
                                       : detail::FixedSizeOf<Workload>();
    if constexpr (kFixed > 0) {
      if (peers & kFixedPeers) {
        add.template operator()<BoostPoolAllocator<kFixed>>("boost-pool", false);
        add.template operator()<BoostSingletonPoolAllocator<kFixed>>("boost-singleton", true);
      }
    }
#endif
  }
}

}  // namespace tierpool::bench
