// The node-container workload: what std::map and std::list do to an allocator. Each node is one
// allocate(1) of the container's node type through the container's (rebound) allocator, so the
// allocator under test is a C++ allocator *family*, not a byte allocator:
//
//   struct Family {
//     template <class T> using Allocator = ...;   // a standard allocator for value type T
//     template <class T> Allocator<T> Get();      // one bound to this family's memory
//     void EndRound();
//   };
//
// The families of the standard-library and Boost peers are below; a step adds its own beside its
// allocator (step02's PoolAllocator) and registers them all with Register<NodesWorkload, Family>.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <memory_resource>
#include <random>
#include <utility>
#include <vector>

#include "tierpool_bench/harness.h"

#if TIERPOOL_HAVE_BOOST
#include <boost/pool/pool_alloc.hpp>
#endif

namespace tierpool::bench {

// "nodes": each thread keeps one std::map<int, int> and one std::list<int>, made once with the
// family's allocators. One round inserts kKeys keys into the map in a shuffled order and erases
// them in another, then pushes kKeys values onto the list (alternately at the front and the back)
// and erases them through saved iterators in a shuffled order. Orders come from a fixed seed and
// are drawn before the clock starts. A pair is one node allocated and freed: 2 * kKeys per round.
struct NodesWorkload {
  static constexpr const char* kName = "nodes";
  static constexpr std::size_t kKeys = 1000;

  template <class Family>
  static RunResult Run(Family& family, int threads, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : (options.smoke ? 2 : 500);
    const std::size_t keys = options.smoke ? 100 : kKeys;
    struct Plan {
      std::vector<int> insert_order, erase_order;
      std::vector<std::uint32_t> list_erase_order;
    };
    std::vector<Plan> plans(threads);
    for (int t = 0; t < threads; ++t) {
      std::mt19937 rng(7u + unsigned(t));
      Plan& plan = plans[t];
      for (std::size_t i = 0; i < keys; ++i) {
        plan.insert_order.push_back(int(i));
        plan.list_erase_order.push_back(std::uint32_t(i));
      }
      plan.erase_order = plan.insert_order;
      std::shuffle(plan.insert_order.begin(), plan.insert_order.end(), rng);
      std::shuffle(plan.erase_order.begin(), plan.erase_order.end(), rng);
      std::shuffle(plan.list_erase_order.begin(), plan.list_erase_order.end(), rng);
    }
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      using MapAlloc = typename Family::template Allocator<std::pair<const int, int>>;
      using ListAlloc = typename Family::template Allocator<int>;
      std::map<int, int, std::less<int>, MapAlloc> map(
          family.template Get<std::pair<const int, int>>());
      std::list<int, ListAlloc> list(family.template Get<int>());
      std::vector<typename std::list<int, ListAlloc>::iterator> where(keys);
      const Plan& plan = plans[t];
      for (int r = 0; r < rounds; ++r) {
        for (int key : plan.insert_order)
          map.emplace(key, key);
        for (int key : plan.erase_order)
          map.erase(key);
        for (std::size_t i = 0; i < keys; ++i) {
          where[i] =
              i % 2 == 0 ? list.insert(list.end(), int(i)) : list.insert(list.begin(), int(i));
        }
        for (std::uint32_t i : plan.list_erase_order)
          list.erase(where[i]);
        family.EndRound();
      }
    });
    return {std::uint64_t(threads) * rounds * keys * 2, wall};
  }
};

// std::allocator: operator new/delete, so malloc (glibc, or a preloaded library). Register it as
// "malloc" and the runner measures it again under every preloaded malloc.
struct StdAllocatorFamily {
  template <class T>
  using Allocator = std::allocator<T>;
  template <class T>
  Allocator<T> Get() {
    return {};
  }
  void EndRound() {}
};

// std::pmr::polymorphic_allocator over one std::pmr::unsynchronized_pool_resource (one thread).
struct PmrUnsyncFamily {
  std::pmr::unsynchronized_pool_resource resource;
  template <class T>
  using Allocator = std::pmr::polymorphic_allocator<T>;
  template <class T>
  Allocator<T> Get() {
    return Allocator<T>(&resource);
  }
  void EndRound() {}
};

// Any byte allocator of adapters.h (Allocate/Deallocate/EndRound) as a family: the baseline's row
// is then the containers' own work. Blocks are 16-byte aligned by every such allocator.
template <class ByteAlloc>
struct ByteAllocatorFamily {
  template <class T>
  struct Allocator {
    using value_type = T;
    ByteAlloc* bytes;
    explicit Allocator(ByteAlloc* b) noexcept : bytes(b) {}
    template <class U>
    Allocator(const Allocator<U>& other) noexcept : bytes(other.bytes) {}
    T* allocate(std::size_t n) { return static_cast<T*>(bytes->Allocate(n * sizeof(T))); }
    void deallocate(T* p, std::size_t n) noexcept { bytes->Deallocate(p, n * sizeof(T)); }
    template <class U>
    bool operator==(const Allocator<U>& other) const noexcept {
      return bytes == other.bytes;
    }
  };

  ByteAlloc alloc;
  template <class T>
  Allocator<T> Get() {
    return Allocator<T>(&alloc);
  }
  void EndRound() { alloc.EndRound(); }
};

#if TIERPOOL_HAVE_BOOST
// boost::fast_pool_allocator: a singleton pool per node size. `Mutex` is Boost's default (a real
// mutex, taken on every allocation) or boost::details::pool::null_mutex (one thread, like ours).
template <class Mutex = boost::details::pool::default_mutex>
struct BoostFastPoolFamily {
  template <class T>
  using Allocator = boost::fast_pool_allocator<T, boost::default_user_allocator_new_delete, Mutex>;
  template <class T>
  Allocator<T> Get() {
    return {};
  }
  void EndRound() {}
};
#endif

}  // namespace tierpool::bench
