// Step 05: the thread-local object pool.
//
// Step 04 put one pool behind one lock, and every allocation of every thread queued on it. Here
// each thread owns a LocalPool that it reaches without any lock, and threads meet only when they
// exchange whole free lists or whole Blocks with a GlobalPool, once every kFreeSlotsSize
// operations. The design is the object pool of article 000 (Slot, Block, BlockChunk, FreeSlots,
// BlockManager, FreeSlotsManager, LocalPool, GlobalPool, ObjectPool); what the article leaves out
// is added and marked "beyond the article" below:
//   - a thread that exits gives its free lists and the uncarved rest of its Block back;
//   - a LocalPool whose own GlobalPool is empty takes lists from the other GlobalPools before it
//     asks for new memory (a producer/consumer pair stays bounded);
//   - many pools of the same type, pools that die while threads live, threads that die while
//     pools live; chunks are mmap'ed and unmapped when the pool dies;
//   - ASan/valgrind see every slot (memory_tools.h) and a hardened mode catches double frees and
//     foreign pointers, and keeps the addresses stored in free slots encoded (see FollowLink()).
//
// This file is the plain design: PlainPoolTraits builds it, one linked free list per thread. The
// speed of ObjectPool<T> (DefaultPoolTraits) comes from rungs that the Traits switch on, one at
// a time (the ladder below; the chapter measures each rung, and one that was tried and removed):
//   WithUnrolledList       a free slot holds the addresses of other free slots (unrolled_list.h)
//   WithInterleavedChains  the list's nodes dealt onto 8 chains, each next node prefetched
//   WithItemPrefetch       the items of the node two down prefetched when a node is started
//   WithRecentFrees        frees go into an array first, half of it moved at a time
//                          (recent_frees.h)
// To read the plain design: PlainPoolTraits, PlainFreeSlots, then ObjectPool from "The data
// structures of article 000" to "Without a LocalPool". The `if constexpr` branches there are the
// rungs' hooks; the sections after it (the memory tools, the hardened mode) are not needed to
// follow the design.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "lock_policies.h"  // step04: the spinlock
#include "memory_tools.h"
#include "recent_frees.h"
#include "tierpool_common/encoded_link.h"
#include "unrolled_list.h"

#define STEP05_LIKELY(x) __builtin_expect(!!(x), 1)
#define STEP05_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace step05 {

inline constexpr std::size_t kCacheLine = 64;

// Hardened by default when built with -DTIERPOOL_HARDENED=1 (as step02's pools); any pool can
// also ask for it with a Traits whose kHardened is true.
#if TIERPOOL_HARDENED
inline constexpr bool kHardenedByDefault = true;
#else
inline constexpr bool kHardenedByDefault = false;
#endif

// The tunables. Derive from a Traits struct and redefine what you want to change:
//   struct BigLists : step05::DefaultPoolTraits { static constexpr std::size_t kFreeSlotsSize =
//   1024; }; step05::ObjectPool<Order, BigLists> orders;
// [snippet:traits]
struct PlainPoolTraits {
  // Slots per Block: what a LocalPool carves without a lock. A thread holds at most one partly
  // carved Block, so this is also the most fresh memory one thread can sit on.
  static constexpr std::size_t kBlockSize = 512;
  // Blocks per BlockChunk: one mmap. 512 x 32 slots of 64 B = 1 MiB.
  static constexpr std::size_t kBlockChunkSize = 32;
  // Length of a full free list, the unit exchanged with a GlobalPool: one lock per this many
  // frees (or allocations). A thread caches at most about twice this many free objects in its
  // lists, plus kRecentSize in its array.
  static constexpr std::size_t kFreeSlotsSize = 256;
  // GlobalPools, assigned to threads round-robin: fewer threads per lock, more memory spread.
  static constexpr std::size_t kGlobalPoolNum = 4;
  // Double-free / foreign-pointer detection and the freed-memory fill pattern (see Free()).
  static constexpr bool kHardened = kHardenedByDefault;

  // Where chunks come from. mmap: pages become resident only when touched, and go back to the OS
  // when the pool dies. Return nullptr when there is no memory.
  static void* MapChunk(std::size_t bytes) noexcept {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  static void UnmapChunk(void* p, std::size_t bytes) noexcept { munmap(p, bytes); }

  // The rungs of the ladder, all off: one linked free list, pushed at every Free.
  static constexpr bool kUnrolledList = false;
  static constexpr std::size_t kChains = 1;
  static constexpr std::size_t kItemsAhead = 0;
  static constexpr std::size_t kRecentSize = 0;
};
// [/snippet]

// --- The ladder: each rung a Traits on top of the one below -------------------------------
// [snippet:ladder]
// One free slot carries the addresses of up to seven others (64-byte slots).
template <class Base = PlainPoolTraits>
struct WithUnrolledList : Base {
  static constexpr bool kUnrolledList = true;
};
// The list's nodes dealt round-robin onto 8 chains: the node 8 down is prefetched.
template <class Base>
struct WithInterleavedChains : Base {
  static constexpr std::size_t kChains = 8;
};
// Starting a node, the items of the node 2 down are prefetched.
template <class Base>
struct WithItemPrefetch : Base {
  static constexpr std::size_t kItemsAhead = 2;
};
// Frees go into an array of 128 first; its older half is moved into the list at a time.
template <class Base>
struct WithRecentFrees : Base {
  static constexpr std::size_t kRecentSize = 128;
};

// ObjectPool<T>'s default: every rung that pays.
struct DefaultPoolTraits
    : WithRecentFrees<WithItemPrefetch<WithInterleavedChains<WithUnrolledList<>>>> {};
// [/snippet]

// What a pool holds, for tests and for the curious.
struct PoolStats {
  std::size_t chunks = 0;         // BlockChunks mapped now
  std::size_t bytes_mapped = 0;   // their size
  std::size_t blocks_carved = 0;  // Blocks ever taken from a chunk (returned rests not counted)
  std::size_t local_pools = 0;    // threads attached now
  std::size_t global_lists = 0;   // free lists parked in the GlobalPools
};

namespace detail {

[[noreturn]] inline void Die(const char* what, const void* p, std::size_t object_size) {
  std::fprintf(stderr, "tierpool step05-tls-global: %s %p (ObjectPool of %zu-byte objects)\n", what,
               p, object_size);
  std::abort();
}

// --- Which LocalPools a thread has, so they can be given back when it exits ----------------
// (beyond the article: its LocalPool is a `thread_local` pointer that is never cleaned up).

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

}  // namespace detail

// A free list as the article has it: each free slot holds the address of the next, and head_ and
// length_ are all a list exchange needs, so lists move between pools in O(1). Every address
// written into a free slot goes through pool.EncodeLink(), every one read back through
// pool.FollowLink() (hardened mode: encoded and checked; otherwise plain).
// [snippet:plain-list]
template <class Slot>
struct PlainFreeSlots {
  static constexpr std::size_t kObjectsPerNode = 1;  // every free slot is a node

  Slot* head_ = nullptr;
  std::size_t length_ = 0;

  template <class Pool>
  void Push(Slot* slot, const Pool& pool) noexcept {
    tools::OpenSlot(slot, sizeof(Slot*));
    slot->links_[0] = pool.EncodeLink(head_);
    tools::CloseSlot(slot, sizeof(Slot));
    head_ = slot;
    ++length_;
  }

  // Pops one slot, left closed (poisoned); second: whether it was a node (it always is here).
  template <class Pool>
  std::pair<Slot*, bool> Pop(const Pool& pool) noexcept {
    Slot* top = head_;
    tools::OpenSlot(top, sizeof(Slot));
    head_ = pool.FollowLink(top, top->links_[0]);
    tools::CloseSlot(top, sizeof(Slot));
    --length_;
    return {top, true};
  }
  // [/snippet]

  template <class Pool>
  void PushRange(Slot* const* slots, std::size_t count, const Pool& pool) noexcept {
    for (std::size_t i = 0; i < count; ++i)
      Push(slots[i], pool);
  }
  void PrefetchHeads() const noexcept {}
};

template <class T, class Traits = DefaultPoolTraits>
class ObjectPool {
  static constexpr std::size_t kBlockSize = Traits::kBlockSize;
  static constexpr std::size_t kBlockChunkSize = Traits::kBlockChunkSize;
  static constexpr std::size_t kFreeSlotsSize = Traits::kFreeSlotsSize;
  static constexpr std::size_t kGlobalPoolNum = Traits::kGlobalPoolNum;
  static constexpr std::size_t kRecentSize = Traits::kRecentSize;
  static constexpr bool kHardened = Traits::kHardened;
  static_assert(kBlockSize > 0 && kBlockChunkSize > 0 && kFreeSlotsSize > 1 && kGlobalPoolNum > 0);
  static_assert(kRecentSize == 0 || kRecentSize >= 2);

  // --- The data structures of article 000 ------------------------------------------------

  // One object's memory. While free, its bytes belong to the free list, so a free object costs
  // no extra memory. The article's Slot holds one link; the unrolled list uses all the links
  // that fit (unrolled_list.h).
  static constexpr std::size_t kSlotAlign = alignof(T) > alignof(void*) ? alignof(T)
                                                                        : alignof(void*);
  static constexpr std::size_t kSlotSize =
      ((sizeof(T) > sizeof(void*) ? sizeof(T) : sizeof(void*)) + kSlotAlign - 1) / kSlotAlign *
      kSlotAlign;
  union Slot {
    Slot* links_[kSlotSize / sizeof(Slot*)];
    alignas(T) unsigned char storage_[sizeof(T)];
  };
  static_assert(sizeof(Slot) == kSlotSize);
  // The hardened mode writes this over a freed object and checks it on reuse.
  static constexpr unsigned char kFreedByte = 0xDD;

  // The unit a LocalPool takes from its GlobalPool. Unlike the article's Block it holds no idx_:
  // the carving cursor lives in the LocalPool, so a Block is slots and nothing else, a chunk is
  // an exact multiple of the slot size, and a slot never straddles a stray counter.
  struct Block {
    Slot slots_[kBlockSize];
  };
  // The unit a GlobalPool maps from the OS.
  struct BlockChunk {
    Block blocks_[kBlockChunkSize];
  };
  static constexpr std::size_t kChunkBytes = sizeof(BlockChunk);

  // The list a LocalPool hands out from, and the unit it exchanges with a GlobalPool.
  using FreeSlots =
      std::conditional_t<Traits::kUnrolledList,
                         UnrolledFreeSlots<Slot, Traits::kChains, Traits::kItemsAhead>,
                         PlainFreeSlots<Slot>>;
  friend FreeSlots;  // it calls EncodeLink() and FollowLink()
  // The free objects a LocalPool keeps in front of its list (none in the plain design).
  using Recent =
      std::conditional_t<(kRecentSize > 0), RecentFrees<Slot, (kRecentSize > 0 ? kRecentSize : 2)>,
                         NoRecentFrees>;

  // The uncarved rest of a Block: [next_, end_).
  struct BlockRest {
    Slot* next_ = nullptr;
    Slot* end_ = nullptr;
  };

  struct BlockManager {
    std::vector<BlockChunk*> block_chunks_;     // every chunk; unmapped when the pool dies
    std::size_t next_block_ = kBlockChunkSize;  // next uncarved Block of block_chunks_.back()
    std::vector<BlockRest> returned_rests_;     // beyond the article: rests of exited threads
  };

  struct FreeSlotsManager {
    // The article's freeslots_ptrs (its free_num_ is size()). Lists of kFreeSlotsSize, except
    // that one merged from exited threads may be a little longer, so each keeps its length.
    std::vector<FreeSlots> freeslots_;
    // Beyond the article: short lists left by exiting threads, merged until they are full.
    FreeSlots partial_;
  };

  class alignas(kCacheLine) GlobalPool {
   public:
    GlobalPool() { freeslots_manager_.freeslots_.reserve(64); }
    GlobalPool(const GlobalPool&) = delete;
    GlobalPool& operator=(const GlobalPool&) = delete;

    // Takes one list (a full one first, else the partial one); false when there is none.
    bool PopFreeSlots(FreeSlots& out) noexcept {
      std::lock_guard<step04::SpinLock> lock(freeslots_lock_);
      auto& lists = freeslots_manager_.freeslots_;
      if (!lists.empty()) {
        out = lists.back();
        lists.pop_back();
      } else if (freeslots_manager_.partial_.length_ != 0) {
        out = freeslots_manager_.partial_;
        freeslots_manager_.partial_ = {};
      } else {
        return false;
      }
      PublishCount();
      return true;
    }

    // The same for a thread of another GlobalPool, which first looks without the lock: steal
    // attempts must not pile onto the lock of an empty pool.
    bool StealFreeSlots(FreeSlots& out) noexcept {
      if (lists_available_.load(std::memory_order_relaxed) == 0) return false;
      return PopFreeSlots(out);
    }

    // Parks a full list. False only if the manager's vector cannot grow (out of memory).
    bool PushFreeSlots(const FreeSlots& list) noexcept {
      std::lock_guard<step04::SpinLock> lock(freeslots_lock_);
      try {
        freeslots_manager_.freeslots_.push_back(list);
      } catch (const std::bad_alloc&) {
        return false;
      }
      PublishCount();
      return true;
    }

    // A short list from an exiting thread: moved slot by slot (at most two lists' worth, once
    // per thread) onto the partial list, which is parked as a full list once long enough.
    void MergePartial(FreeSlots list, const ObjectPool& pool) noexcept {
      std::lock_guard<step04::SpinLock> lock(freeslots_lock_);
      FreeSlots& partial = freeslots_manager_.partial_;
      while (list.length_ > 0) {
        auto [slot, was_node] = list.Pop(pool);
        if constexpr (kHardened) {
          // It held links; it may become a mere item here, which must carry the fill pattern.
          if (was_node) FillFreed(slot);
        }
        partial.Push(slot, pool);
      }
      if (partial.length_ >= kFreeSlotsSize) {
        try {
          freeslots_manager_.freeslots_.push_back(partial);
          partial = {};
        } catch (const std::bad_alloc&) {
          // keep it as the partial list: still reachable, just longer
        }
      }
      PublishCount();
    }

    // Gives a Block (or the rest of one) to a LocalPool, mapping a new chunk only when this
    // GlobalPool has nothing left: the pool grows on demand, never ahead of it.
    bool PopBlock(BlockRest& out, ObjectPool& pool) noexcept {
      std::lock_guard<std::mutex> lock(block_mutex_);
      BlockManager& blocks = block_manager_;
      if (PopReturnedRestLocked(out)) return true;
      if (STEP05_UNLIKELY(blocks.next_block_ == kBlockChunkSize)) {
        if (!NewBlockChunk(pool)) return false;
      }
      Block& block = blocks.block_chunks_.back()->blocks_[blocks.next_block_++];
      out = {block.slots_, block.slots_ + kBlockSize};
      pool.blocks_carved_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }

    // A Block rest an exited thread left here, for a thread of another GlobalPool that would
    // otherwise carve a new Block.
    bool StealReturnedRest(BlockRest& out) noexcept {
      if (rests_available_.load(std::memory_order_relaxed) == 0) return false;
      std::lock_guard<std::mutex> lock(block_mutex_);
      return PopReturnedRestLocked(out);
    }

    void ReturnBlockRest(const BlockRest& rest) noexcept {
      std::lock_guard<std::mutex> lock(block_mutex_);
      try {
        block_manager_.returned_rests_.push_back(rest);
      } catch (const std::bad_alloc&) {
        // out of memory: the rest stays unused until the pool dies, nothing is corrupted
      }
      rests_available_.store(block_manager_.returned_rests_.size(), std::memory_order_relaxed);
    }

    std::size_t ListCount() noexcept {
      std::lock_guard<step04::SpinLock> lock(freeslots_lock_);
      return freeslots_manager_.freeslots_.size() + (freeslots_manager_.partial_.length_ ? 1 : 0);
    }

    // Every chunk goes back to the OS, whether or not its objects were freed.
    void ReleaseChunks(ObjectPool& pool) noexcept {
      for (BlockChunk* chunk : block_manager_.block_chunks_) {
        pool.ForgetChunk(chunk);
        tools::ChunkUnmapping(chunk, kChunkBytes);
        Traits::UnmapChunk(chunk, kChunkBytes);
      }
      block_manager_.block_chunks_.clear();
    }

   private:
    bool NewBlockChunk(ObjectPool& pool) noexcept {
      if (block_manager_.block_chunks_.size() == block_manager_.block_chunks_.capacity()) {
        try {
          block_manager_.block_chunks_.reserve(2 * block_manager_.block_chunks_.size() + 4);
        } catch (const std::bad_alloc&) {
          return false;
        }
      }
      void* memory = Traits::MapChunk(kChunkBytes);
      if (STEP05_UNLIKELY(memory == nullptr)) return false;
      if (!pool.RememberChunk(memory)) {
        Traits::UnmapChunk(memory, kChunkBytes);
        return false;
      }
      tools::ChunkMapped(memory, kChunkBytes);
      block_manager_.block_chunks_.push_back(static_cast<BlockChunk*>(memory));
      block_manager_.next_block_ = 0;
      return true;
    }

    bool PopReturnedRestLocked(BlockRest& out) noexcept {
      auto& rests = block_manager_.returned_rests_;
      if (rests.empty()) return false;
      out = rests.back();
      rests.pop_back();
      rests_available_.store(rests.size(), std::memory_order_relaxed);
      return true;
    }

    void PublishCount() noexcept {
      lists_available_.store(
          freeslots_manager_.freeslots_.size() + (freeslots_manager_.partial_.length_ ? 1 : 0),
          std::memory_order_relaxed);
    }

    // The article's two locks: a spinlock for the free lists (a few instructions inside: step
    // 04's test-and-test-and-set lock), a mutex for the blocks (the critical section may map
    // memory). Each on its own cache line.
    step04::SpinLock freeslots_lock_;
    FreeSlotsManager freeslots_manager_;
    std::atomic<std::size_t> lists_available_{0};
    alignas(kCacheLine) std::mutex block_mutex_;
    BlockManager block_manager_;
    std::atomic<std::size_t> rests_available_{0};
  };

  // One per (thread, pool): touched by its thread only, so it needs no lock.
  struct alignas(kCacheLine) LocalPool final : detail::LocalPoolBase {
    LocalPool(ObjectPool* owner, GlobalPool* global)
        : LocalPoolBase(owner->id_), owner_(owner), global_pool_(global) {}
    ~LocalPool() override {
      // The thread's fast-path cache must never point at a dead LocalPool.
      if (t_cache_.local == this) t_cache_ = {};
    }
    void ReturnToOwner() noexcept override { owner_->Detach(*this); }

    ObjectPool* const owner_;
    GlobalPool* const global_pool_;
    FreeSlots freeslots_;  // hands out and takes back, LIFO: the last freed is the next given
    // Rung WithRecentFrees: the objects freed last, the first handed out (MoveRecentToList).
    [[no_unique_address]] Recent recent_;
    BlockRest block_;  // the article's block_/idx_: what is left to carve
  };

  // The fast path's way to its LocalPool: one thread_local per pool type, plain data so that
  // reading it is a single %fs-relative load. It remembers the last pool this thread used; a
  // thread that switches between pools of one type pays a registry lookup on each switch.
  struct ThreadCache {
    std::uint64_t owner_id;
    LocalPool* local;
  };
  static inline thread_local ThreadCache t_cache_{0, nullptr};

 public:
  using value_type = T;

  ObjectPool()
      : id_(detail::g_next_pool_id.fetch_add(1, std::memory_order_relaxed)),
        link_key_(MakeLinkKey(this)) {
    tools::PoolCreated(this);
  }
  ObjectPool(const ObjectPool&) = delete;
  ObjectPool& operator=(const ObjectPool&) = delete;

  // Everything goes: every chunk is unmapped, live objects included (their destructors are not
  // run: Delete them first). Threads still attached keep an orphaned LocalPool that they
  // delete when they exit. No thread may use the pool while it dies.
  ~ObjectPool() {
    {
      std::lock_guard<std::mutex> lock(detail::RegistryMutex());
      for (LocalPool* local : locals_)
        local->orphaned = true;
      locals_.clear();
    }
    for (GlobalPool& global : global_pools_)
      global.ReleaseChunks(*this);
    for (auto& record : directory_)
      delete[] record.live;
    tools::PoolDestroyed(this);
  }

  // --- The interface of article 000 -------------------------------------------------------

  // Memory for one T, uninitialised; nullptr when the OS refuses more memory.
  // [snippet:fast-path]
  void* Allocate() noexcept {
    LocalPool* local = Local();
    if (STEP05_LIKELY(local != nullptr)) {
      if constexpr (kRecentSize > 0) {  // rung WithRecentFrees
        if (STEP05_LIKELY(!local->recent_.Empty()))
          return HandOutReused(local->recent_.Take(), false);
      }
      if (STEP05_LIKELY(local->freeslots_.length_ != 0)) return PopLocal(*local);
      return AllocateSlow(*local);
    }
    return AllocateWithoutLocalPool();
  }

  // Gives back memory from Allocate() of this pool, from any thread. nullptr is a no-op.
  void Free(void* p) noexcept {
    if (p == nullptr) return;
    Slot* slot = static_cast<Slot*>(p);
    TakeBack(slot);
    LocalPool* local = Local();
    if (STEP05_UNLIKELY(local == nullptr)) return FreeWithoutLocalPool(slot);
    if constexpr (kRecentSize > 0) {  // rung WithRecentFrees
      if (STEP05_UNLIKELY(local->recent_.Full())) MoveRecentToList(*local);
      tools::CloseSlot(slot, kSlotSize);
      local->recent_.Put(slot);
    } else {
      local->freeslots_.Push(slot, *this);
      if (STEP05_UNLIKELY(local->freeslots_.length_ >= kFreeSlotsSize)) RetireFullList(*local);
    }
  }
  // [/snippet]

  // Placement new with perfect forwarding. Throws std::bad_alloc when out of memory; if the
  // constructor throws, the memory goes back to the pool before the exception goes on.
  template <class... Args>
  T* New(Args&&... args) {
    void* p = Allocate();
    if (STEP05_UNLIKELY(p == nullptr)) throw std::bad_alloc();
    try {
      return ::new (p) T(std::forward<Args>(args)...);
    } catch (...) {
      Free(p);
      throw;
    }
  }

  // Runs the destructor and frees. nullptr is a no-op.
  void Delete(T* p) noexcept {
    if (p == nullptr) return;
    p->~T();
    Free(p);
  }

  PoolStats Stats() noexcept {
    PoolStats stats;
    stats.chunks = chunks_.load(std::memory_order_relaxed);
    stats.bytes_mapped = stats.chunks * kChunkBytes;
    stats.blocks_carved = blocks_carved_.load(std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(detail::RegistryMutex());
      stats.local_pools = locals_.size();
    }
    for (GlobalPool& global : global_pools_)
      stats.global_lists += global.ListCount();
    return stats;
  }

  static constexpr std::size_t slot_size() { return kSlotSize; }
  static constexpr std::size_t chunk_bytes() { return kChunkBytes; }
  static constexpr bool hardened() { return kHardened; }

 private:
  LocalPool* Local() noexcept {
    const ThreadCache& cache = t_cache_;
    if (STEP05_LIKELY(cache.owner_id == id_)) return cache.local;
    return Attach();
  }

  // First use of this pool by this thread (or a switch between pools of one type): find or
  // make its LocalPool. nullptr if the thread is already exiting or memory is out.
  LocalPool* Attach() noexcept {
    if (detail::t_thread_state == detail::kExited) return nullptr;
    try {
      detail::ThreadRegistry& registry = detail::ThisThreadRegistry();
      std::lock_guard<std::mutex> lock(detail::RegistryMutex());
      registry.Prune();
      LocalPool* local = nullptr;
      for (detail::LocalPoolBase* base : registry.pools) {
        if (base->owner_id == id_) local = static_cast<LocalPool*>(base);
      }
      if (local == nullptr) {
        // Round-robin over the GlobalPools, as in the article.
        const std::size_t index = next_global_pool_.fetch_add(1, std::memory_order_relaxed);
        auto fresh = std::make_unique<LocalPool>(this, &global_pools_[index % kGlobalPoolNum]);
        registry.pools.reserve(registry.pools.size() + 1);
        locals_.reserve(locals_.size() + 1);
        local = fresh.release();
        registry.pools.push_back(local);
        locals_.push_back(local);
      }
      t_cache_ = {id_, local};
      return local;
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

  // The thread exits (or, with a temporary LocalPool, one call is done): give back the list
  // and the Block's rest. Caller holds RegistryMutex() or owns `local`.
  void Drain(LocalPool& local) noexcept {
    if constexpr (kRecentSize > 0) PushRecent(local, local.recent_.count_);
    GlobalPool& global = *local.global_pool_;
    if (local.freeslots_.length_ != 0) {
      global.MergePartial(local.freeslots_, *this);
      local.freeslots_ = {};
    }
    if (local.block_.next_ != local.block_.end_) global.ReturnBlockRest(local.block_);
    local.block_ = {};
  }

  void Detach(LocalPool& local) noexcept {
    Drain(local);
    locals_.erase(std::find(locals_.begin(), locals_.end(), &local));
  }

  // The local list is empty. In the article's order, reuse before new memory: a list from this
  // thread's GlobalPool, one from another GlobalPool, the rest of this
  // thread's Block, a Block rest left by an exited thread, a new Block.
  __attribute__((noinline)) void* AllocateSlow(LocalPool& local) noexcept {
    if (FetchFreeSlots(local)) {
      local.freeslots_.PrefetchHeads();
      return PopLocal(local);
    }
    if (STEP05_LIKELY(local.block_.next_ != local.block_.end_)) return Carve(local);
    if (FetchBlock(local)) return Carve(local);
    return nullptr;
  }

  bool FetchBlock(LocalPool& local) noexcept {
    GlobalPool* home = local.global_pool_;
    const std::size_t first = static_cast<std::size_t>(home - global_pools_);
    for (std::size_t i = 1; i < kGlobalPoolNum; ++i) {
      if (global_pools_[(first + i) % kGlobalPoolNum].StealReturnedRest(local.block_)) return true;
    }
    return home->PopBlock(local.block_, *this);
  }

  bool FetchFreeSlots(LocalPool& local) noexcept {
    GlobalPool* home = local.global_pool_;
    if (home->StealFreeSlots(local.freeslots_)) return true;  // (looks before it locks)
    // Beyond the article: a thread that only allocates (a producer) would otherwise map new
    // memory forever while the lists its consumer frees pile up in another GlobalPool.
    const std::size_t first = static_cast<std::size_t>(home - global_pools_);
    for (std::size_t i = 1; i < kGlobalPoolNum; ++i) {
      if (global_pools_[(first + i) % kGlobalPoolNum].StealFreeSlots(local.freeslots_)) return true;
    }
    return false;
  }

  void* PopLocal(LocalPool& local) noexcept {
    auto [slot, was_node] = local.freeslots_.Pop(*this);
    return HandOutReused(slot, was_node);
  }

  void* Carve(LocalPool& local) noexcept {
    Slot* slot = local.block_.next_++;
    tools::OpenSlot(slot, kSlotSize);
    if constexpr (kHardened) MarkLive(slot);
    tools::HandOut(this, slot, sizeof(T));
    return slot;
  }

  // The array of recent frees is full: its older half goes into the free list. Why an array in
  // front of the list: a slot that becomes a node is written to, and it is a line the thread
  // has not touched since it allocated it, often long ago. Written at Free, that is a cache miss
  // that holds up every later store of the thread (stores leave the core in order). Here the
  // slots that will become nodes at the next move are known one move ahead and prefetched now,
  // so their lines have arrived when they are written, kRecentSize / 2 frees later.
  __attribute__((noinline)) void MoveRecentToList(LocalPool& local) noexcept {
    constexpr std::size_t kMove = kRecentSize / 2;
    constexpr std::size_t kPerNode = FreeSlots::kObjectsPerNode;
    PushRecent(local, kMove);
    // recent_[i] will be pushed at position length + i: a node where that is a multiple of
    // kPerNode (a hint only: a list handed on in between changes the count).
    const std::size_t used = local.freeslots_.length_ % kPerNode;
    for (std::size_t i = used == 0 ? 0 : kPerNode - used; i < kMove; i += kPerNode)
      __builtin_prefetch(local.recent_.slots_[i], 1);
  }

  // The oldest `count` recent frees go into the free list, in the order they were freed; each
  // list that fills up is retired.
  void PushRecent(LocalPool& local, std::size_t count) noexcept {
    for (std::size_t i = 0; i < count;) {
      const std::size_t length = local.freeslots_.length_;
      // (Longer than full only when retiring failed for want of memory: one at a time then.)
      const std::size_t room = length < kFreeSlotsSize ? kFreeSlotsSize - length : 1;
      const std::size_t run = std::min(count - i, room);
      local.freeslots_.PushRange(local.recent_.slots_ + i, run, *this);
      i += run;
      if (STEP05_UNLIKELY(local.freeslots_.length_ >= kFreeSlotsSize)) RetireFullList(local);
    }
    local.recent_.DropOldest(count);
  }

  // A full local list goes to the GlobalPool whole, as in the article. (A spare list kept back,
  // Bonwick's second magazine, was a rung once: the chapter says what it measured.)
  __attribute__((noinline)) void RetireFullList(LocalPool& local) noexcept {
    if (local.global_pool_->PushFreeSlots(local.freeslots_)) local.freeslots_ = {};
    // else: out of memory for the manager's vector; the list simply stays here, longer
  }

  // --- Without a LocalPool: a thread past its thread_local destructors, or out of memory ------
  // A temporary LocalPool does the one operation and is drained at once: slow, always correct.
  // Out of line, as AllocateSlow(): inlined, they cost the fast path of W1 3 instructions a pair.

  __attribute__((noinline)) void* AllocateWithoutLocalPool() noexcept {
    LocalPool temporary(this, &global_pools_[0]);
    void* p = AllocateSlow(temporary);
    Drain(temporary);
    return p;
  }

  __attribute__((noinline)) void FreeWithoutLocalPool(Slot* slot) noexcept {
    LocalPool temporary(this, &global_pools_[0]);
    temporary.freeslots_.Push(slot, *this);
    Drain(temporary);
  }

  // --- Handing out and taking back: where the tools and the hardened mode look -------------

  void* HandOutReused(Slot* slot, [[maybe_unused]] bool was_node) noexcept {
    if constexpr (kHardened) {
      // A slot that was only an item of a node must still hold the fill pattern, every byte.
      if (!was_node) {
        tools::OpenSlot(slot, kSlotSize);
        const unsigned char* bytes = reinterpret_cast<const unsigned char*>(slot);
        for (std::size_t i = 0; i < kSlotSize; ++i) {
          if (bytes[i] != kFreedByte)
            detail::Die("use after free: written after free:", slot, sizeof(T));
        }
      }
      MarkLive(slot);
    }
    tools::OpenSlot(slot, kSlotSize);
    tools::HandOut(this, slot, sizeof(T));
    return slot;
  }

  void TakeBack(Slot* slot) noexcept {
    if constexpr (kHardened) {
      MarkFree(slot);
      std::memset(static_cast<void*>(slot), kFreedByte, kSlotSize);
    }
    tools::TakeBack(this, slot);
  }

  static void FillFreed(Slot* slot) noexcept {
    tools::OpenSlot(slot, kSlotSize);
    std::memset(static_cast<void*>(slot), kFreedByte, kSlotSize);
    tools::CloseSlot(slot, kSlotSize);
  }

  // --- Hardened mode: one "live" bit per slot, found through a directory of chunks ----------

  struct ChunkRecord {
    std::uintptr_t begin;
    std::atomic<std::uint64_t>* live;  // kBlockSize * kBlockChunkSize bits
  };

  bool RememberChunk(void* chunk) noexcept {
    chunks_.fetch_add(1, std::memory_order_relaxed);
    if constexpr (!kHardened) return true;
    constexpr std::size_t kWords = (kBlockSize * kBlockChunkSize + 63) / 64;
    try {
      auto live = std::make_unique<std::atomic<std::uint64_t>[]>(kWords);
      std::unique_lock<std::shared_mutex> lock(directory_mutex_);
      ChunkRecord record{reinterpret_cast<std::uintptr_t>(chunk), live.get()};
      directory_.insert(
          std::upper_bound(directory_.begin(), directory_.end(), record.begin,
                           [](std::uintptr_t a, const ChunkRecord& r) { return a < r.begin; }),
          record);
      live.release();
      return true;
    } catch (const std::bad_alloc&) {
      chunks_.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
  }

  void ForgetChunk(void*) noexcept { chunks_.fetch_sub(1, std::memory_order_relaxed); }

  // Where `slot` lies: the chunk that holds it (nullptr if none) and its offset there. Caller
  // holds directory_mutex_.
  std::pair<const ChunkRecord*, std::uintptr_t> ChunkOfLocked(const Slot* slot) const noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(slot);
    auto it = std::upper_bound(directory_.begin(), directory_.end(), address,
                               [](std::uintptr_t a, const ChunkRecord& r) { return a < r.begin; });
    if (it == directory_.begin()) return {nullptr, 0};
    --it;
    const std::uintptr_t offset = address - it->begin;
    if (offset >= kChunkBytes) return {nullptr, 0};
    return {&*it, offset};
  }

  // The live bit of `slot`, or death if the pointer is not one this pool could have handed out.
  std::pair<std::atomic<std::uint64_t>*, std::uint64_t> LiveBit(const Slot* slot) noexcept {
    std::shared_lock<std::shared_mutex> lock(directory_mutex_);
    const auto [chunk, offset] = ChunkOfLocked(slot);
    if (chunk == nullptr) detail::Die("free of a pointer not from this pool:", slot, sizeof(T));
    if (offset % kSlotSize != 0) {
      detail::Die("free of a pointer inside an object, not its start:", slot, sizeof(T));
    }
    const std::size_t index = offset / kSlotSize;
    return {&chunk->live[index / 64], std::uint64_t{1} << (index % 64)};
  }

  // --- Hardened mode: the addresses kept in free slots are stored encoded --------------------
  // A free slot holds the links and item addresses of its free list. A stray write into a freed
  // object (a dangling pointer) that put a plausible address there would make the pool hand that
  // address out. Encoded with this pool's secret key (the lists travel between threads, so the key
  // is the pool's, not a list's), such a write decodes to an address that is no slot of this pool,
  // and FollowLink() stops there.
  struct NoLinkKey {};
  using LinkKey = std::conditional_t<kHardened, tierpool_common::LinkKey, NoLinkKey>;
  static LinkKey MakeLinkKey([[maybe_unused]] const ObjectPool* self) noexcept {
    if constexpr (kHardened) {
      return tierpool_common::LinkKeyFor(self, tierpool_common::ProcessLinkKey());
    } else {
      return {};
    }
  }

  Slot* EncodeLink(Slot* slot) const noexcept {
    if constexpr (kHardened) {
      return reinterpret_cast<Slot*>(tierpool_common::EncodeLink(slot, link_key_));
    }
    return slot;
  }
  Slot* DecodeLink(Slot* stored) const noexcept {
    if constexpr (kHardened) {
      return static_cast<Slot*>(
          tierpool_common::DecodeLink(reinterpret_cast<std::uintptr_t>(stored), link_key_));
    }
    return stored;
  }
  // A stored address that the pool is about to use, read from the free slot `holder`.
  Slot* FollowLink([[maybe_unused]] const Slot* holder, Slot* stored) const noexcept {
    Slot* slot = DecodeLink(stored);
    if constexpr (kHardened) {
      if (slot != nullptr && !IsSlot(slot)) {
        detail::Die("free list corrupted: an address overwritten in freed slot", holder, sizeof(T));
      }
    }
    return slot;
  }
  bool IsSlot(const Slot* slot) const noexcept {
    std::shared_lock<std::shared_mutex> lock(directory_mutex_);
    const auto [chunk, offset] = ChunkOfLocked(slot);
    return chunk != nullptr && offset % kSlotSize == 0;
  }

  void MarkLive(const Slot* slot) noexcept {
    auto [word, bit] = LiveBit(slot);
    if (word->fetch_or(bit, std::memory_order_relaxed) & bit) {
      detail::Die("free list corrupted: handed out twice:", slot, sizeof(T));
    }
  }

  void MarkFree(const Slot* slot) noexcept {
    auto [word, bit] = LiveBit(slot);
    if (!(word->fetch_and(~bit, std::memory_order_relaxed) & bit)) {
      detail::Die("double free (or free of a never allocated slot) of", slot, sizeof(T));
    }
  }

  const std::uint64_t id_;
  [[no_unique_address]] const LinkKey link_key_;
  GlobalPool global_pools_[kGlobalPoolNum];
  std::atomic<std::size_t> next_global_pool_{0};
  std::atomic<std::size_t> chunks_{0};
  std::atomic<std::size_t> blocks_carved_{0};
  std::vector<LocalPool*> locals_;  // guarded by detail::RegistryMutex()
  mutable std::shared_mutex directory_mutex_;
  std::vector<ChunkRecord> directory_;  // hardened mode only, sorted by begin
};

}  // namespace step05
