// Step 05: which LocalPools a thread has, so they can be given back when it exits (beyond the
// article: its LocalPool is a `thread_local` pointer that is never cleaned up).
//
// Every thread that uses a pool has one ThreadRegistry (a `thread_local`), the list of its
// LocalPools, one per pool it used; every pool has its PoolLocals, the list of the LocalPools of
// the threads that used it. One mutex guards both sides, and every link between threads and pools:
//   - a thread exits: each of its LocalPools gives its lists and Block rest back to its pool
//     (LocalPoolBase::ReturnToOwner(), implemented by LocalPoolOf below: Detach, then Drain),
//     then is deleted;
//   - a pool dies: its LocalPools are marked orphaned, and their threads delete them when they
//     exit (or when they next attach to a pool);
//   - a thread uses a pool for the first time: its LocalPool is made and put on both lists.
// All three are rare: the fast path never takes the mutex. What an exiting thread gives back
// waits in the GlobalPools for other threads (LeftByExitedThreads), and a thread that has no
// LocalPool (it is past its thread_local destructors) uses a temporary one. A pool finds this
// thread's LocalPool, and drains one, through its base ThreadLocalPools.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "hardened.h"  // FillFreed()

namespace step05::detail {

struct LocalPoolBase {
  explicit LocalPoolBase(std::uint64_t id) : owner_id(id) {}
  virtual ~LocalPoolBase() = default;
  // Give everything cached back to the owning pool. Called with RegistryMutex() held, only while
  // the owner is alive.
  virtual void ReturnToOwner() noexcept = 0;

  const std::uint64_t owner_id;
  bool orphaned = false;  // the owner died; guarded by RegistryMutex()
};

// Guards every link between pools and threads: thread exit, pool death and attaching. All rare.
inline std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}

enum ThreadState : int { kNoRegistry = 0, kRegistered = 1, kExited = 2 };
// Plain data: readable during and after the thread's thread_local destructors.
inline thread_local int t_thread_state = kNoRegistry;

struct ThreadRegistry {
  std::vector<LocalPoolBase*> pools;

  ThreadRegistry() { t_thread_state = kRegistered; }
  ~ThreadRegistry() {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    for (LocalPoolBase* local : pools) {
      if (!local->orphaned) local->ReturnToOwner();
      delete local;
    }
    pools.clear();
    t_thread_state = kExited;
  }

  // Forget LocalPools whose pool died. Caller holds RegistryMutex().
  void Prune() {
    auto dead = std::partition(pools.begin(), pools.end(),
                               [](LocalPoolBase* local) { return !local->orphaned; });
    for (auto it = dead; it != pools.end(); ++it)
      delete *it;
    pools.erase(dead, pools.end());
  }
};

inline ThreadRegistry& ThisThreadRegistry() {
  static thread_local ThreadRegistry registry;
  return registry;
}

inline std::atomic<std::uint64_t> g_next_pool_id{1};

// A pool's side: the LocalPools of the threads that have used it.
class PoolLocals {
 public:
  // This thread's LocalPool of the pool `id`, made by make() (a std::unique_ptr to a type derived
  // from LocalPoolBase) on the thread's first use of the pool. nullptr if the thread is already
  // exiting or memory is out.
  template <class Make>
  LocalPoolBase* FindOrAdd(std::uint64_t id, Make make) noexcept {
    if (t_thread_state == kExited) return nullptr;
    try {
      ThreadRegistry& registry = ThisThreadRegistry();
      std::lock_guard<std::mutex> lock(RegistryMutex());
      registry.Prune();
      LocalPoolBase* local = nullptr;
      for (LocalPoolBase* base : registry.pools) {
        if (base->owner_id == id) local = base;
      }
      if (local == nullptr) {
        std::unique_ptr<LocalPoolBase> fresh = make();
        registry.pools.reserve(registry.pools.size() + 1);
        locals_.reserve(locals_.size() + 1);
        local = fresh.release();
        registry.pools.push_back(local);
        locals_.push_back(local);
      }
      return local;
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

  // The pool dies: its LocalPools are left to their threads, which delete them when they exit.
  void OrphanAll() noexcept {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    for (LocalPoolBase* local : locals_)
      local->orphaned = true;
    locals_.clear();
  }

  // A LocalPool given back by its exiting thread. Caller holds RegistryMutex().
  void Erase(LocalPoolBase* local) noexcept {
    locals_.erase(std::find(locals_.begin(), locals_.end(), local));
  }

  std::size_t Count() noexcept {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    return locals_.size();
  }

 private:
  std::vector<LocalPoolBase*> locals_;  // guarded by RegistryMutex()
};

template <class Pool>
class ThreadLocalPools;

// The registry's part of a pool's LocalPool (Pool::LocalPool derives from it): the pool it
// belongs to, which it gives everything back to when its thread exits.
template <class Pool>
struct LocalPoolOf : LocalPoolBase {
  explicit LocalPoolOf(ThreadLocalPools<Pool>* owner) : LocalPoolBase(owner->id_), owner_(owner) {}
  ~LocalPoolOf() override {
    // The thread's fast-path cache must never point at a dead LocalPool.
    auto& cache = ThreadLocalPools<Pool>::t_cache_;
    if (cache.local == this) cache = {};
  }
  void ReturnToOwner() noexcept override { owner_->Detach(*this); }

  ThreadLocalPools<Pool>* const owner_;
};

// What exiting threads leave in a GlobalPool, beyond the article: their short free lists, merged
// into one partial list, and the uncarved rests of their Blocks, for any thread that needs them.
// A base of the GlobalPool (Global, global_pool.h, which derives from it; Traits the pool's): the
// data is the GlobalPool's (its managers' partial_ and returned_rests_), guarded by the
// GlobalPool's locks. A `list` is one of its FreeSlots, a `rest` one of its BlockRests.
template <class Global, class Traits>
class LeftByExitedThreads {
 public:
  // A short list from an exiting thread: moved slot by slot (at most a list's worth and the
  // array's, once per thread) onto the partial list, which is parked as a full list once long
  // enough.
  void MergePartial(auto list, const auto& pool) noexcept {
    Global& global = Self();
    std::lock_guard lock(global.freeslots_lock_);
    auto& partial = global.freeslots_manager_.partial_;
    while (list.length_ > 0) {
      auto [slot, was_node] = list.Pop(pool);
      if constexpr (Traits::kHardened) {
        if (was_node) FillFreed(slot);  // a node may become an item here
      }
      partial.Push(slot, pool);
    }
    if (partial.length_ >= Traits::kFreeSlotsSize) {
      try {
        global.freeslots_manager_.freeslots_.push_back(partial);
        partial = {};
      } catch (const std::bad_alloc&) {
        // keep it as the partial list: still reachable, just longer
      }
    }
    global.PublishCount();
  }

  // A Block rest an exited thread left here, for a thread of another GlobalPool that would
  // otherwise carve a new Block.
  bool StealReturnedRest(auto& out) noexcept {
    if (Self().rests_available_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard<std::mutex> lock(Self().block_mutex_);
    return PopReturnedRestLocked(out);
  }

  void ReturnBlockRest(const auto& rest) noexcept {
    Global& global = Self();
    std::lock_guard<std::mutex> lock(global.block_mutex_);
    try {
      global.block_manager_.returned_rests_.push_back(rest);
    } catch (const std::bad_alloc&) {
      // out of memory: the rest stays unused until the pool dies, nothing is corrupted
    }
    global.rests_available_.store(global.block_manager_.returned_rests_.size(),
                                  std::memory_order_relaxed);
  }

 protected:
  // The partial list, taken whole when no full list is parked; false when it is empty. Caller
  // holds the GlobalPool's freeslots lock.
  bool PopPartialLocked(auto& out) noexcept {
    auto& partial = Self().freeslots_manager_.partial_;
    if (partial.length_ == 0) return false;
    out = partial;
    partial = {};
    Self().PublishCount();
    return true;
  }

  // Caller holds the GlobalPool's block mutex.
  bool PopReturnedRestLocked(auto& out) noexcept {
    auto& rests = Self().block_manager_.returned_rests_;
    if (rests.empty()) return false;
    out = rests.back();
    rests.pop_back();
    Self().rests_available_.store(rests.size(), std::memory_order_relaxed);
    return true;
  }

 private:
  Global& Self() noexcept { return static_cast<Global&>(*this); }
};

// A base of the ObjectPool (Pool, which derives from it): how a thread finds its LocalPool of
// the pool (Local()), and what a LocalPool gives back when its thread exits (Drain()). The
// article's LocalPool is a `thread_local` pointer: one pool of a type, never cleaned up.
template <class Pool>
class ThreadLocalPools {
  friend LocalPoolOf<Pool>;

 protected:
  ThreadLocalPools() : id_(g_next_pool_id.fetch_add(1, std::memory_order_relaxed)) {}

  // This thread's LocalPool of the pool; nullptr if the thread is exiting or memory is out.
  // The fast path's way to it: one thread_local per pool type, plain data so that reading it is
  // a single %fs-relative load, and a compare with the pool's id (ids are never reused: a new
  // pool at a dead pool's address never picks up a stale LocalPool). It remembers the last pool
  // this thread used; a thread that switches between pools of one type pays a registry lookup
  // on each switch.
  auto* Local() noexcept {
    const ThreadCache& cache = t_cache_;
    if (__builtin_expect(cache.owner_id == id_, 1)) {
      return static_cast<typename Pool::LocalPool*>(cache.local);
    }
    return Attach();
  }

  // The thread exits (or, with a temporary LocalPool, one call is done): give back the array,
  // the list and the Block's rest. Caller holds RegistryMutex() or owns `local`.
  template <class Local>
  void Drain(Local& local) noexcept {
    Pool& pool = Self();
    if constexpr (Pool::Recent::kCapacity > 0) {
      Pool::Recent::MoveOldest(local.recent_.count_, pool, local);
    }
    auto& global = *local.global_pool_;
    if (local.freeslots_.length_ != 0) {
      global.MergePartial(local.freeslots_, pool);
      local.freeslots_ = {};
    }
    if (local.block_.next_ != local.block_.end_) global.ReturnBlockRest(local.block_);
    local.block_ = {};
  }

  // A thread without a LocalPool: one past its thread_local destructors, or out of memory. A
  // temporary LocalPool does the one operation and is drained at once: slow, always correct.
  // Out of line, as the pool's AllocateSlow(): inlined, they cost the fast path of W1 3
  // instructions a pair.
  __attribute__((noinline)) void* AllocateWithoutLocalPool() noexcept {
    typename Pool::LocalPool temporary(&Self(), &Self().global_pools_[0]);
    void* p = Self().AllocateSlow(temporary);
    Drain(temporary);
    return p;
  }

  template <class Slot>
  __attribute__((noinline)) void FreeWithoutLocalPool(Slot* slot) noexcept {
    typename Pool::LocalPool temporary(&Self(), &Self().global_pools_[0]);
    temporary.freeslots_.Push(slot, Self());
    Drain(temporary);
  }

  const std::uint64_t id_;
  PoolLocals locals_;

 private:
  // First use of the pool by this thread (or a switch between pools of one type): find or make
  // its LocalPool (NewLocalPool()). Out of line, as AllocateSlow(): the fast path only calls it.
  __attribute__((noinline)) auto* Attach() noexcept {
    auto* local = static_cast<typename Pool::LocalPool*>(
        locals_.FindOrAdd(id_, [this] { return NewLocalPool(); }));
    if (local != nullptr) t_cache_ = {id_, local};
    return local;
  }

  // A thread's first use of the pool: its LocalPool, assigned to a GlobalPool round-robin, as in
  // the article.
  auto NewLocalPool() {
    const std::size_t index = next_global_pool_.fetch_add(1, std::memory_order_relaxed);
    return std::make_unique<typename Pool::LocalPool>(
        &Self(), &Self().global_pools_[index % Pool::kGlobalPoolNum]);
  }

  // The exiting thread's LocalPool goes back to its pool. Caller holds RegistryMutex().
  void Detach(LocalPoolOf<Pool>& local) noexcept {
    Drain(static_cast<typename Pool::LocalPool&>(local));
    locals_.Erase(&local);
  }

  Pool& Self() noexcept { return static_cast<Pool&>(*this); }

  std::atomic<std::size_t> next_global_pool_{0};  // the GlobalPool of the next LocalPool made

  struct ThreadCache {
    std::uint64_t owner_id;
    LocalPoolBase* local;
  };
  static inline thread_local ThreadCache t_cache_{0, nullptr};
};

}  // namespace step05::detail
