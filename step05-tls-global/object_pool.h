// Step 05: the thread-local object pool, the plain design.
//
// Step 04 put one pool behind one lock, and every allocation of every thread queued on it. Here
// each thread owns a LocalPool that it reaches without any lock, and threads meet only when they
// exchange whole free lists or whole Blocks with a GlobalPool, once every kFreeSlotsSize
// operations. The design is the object pool of article 000 (Slot, Block, BlockChunk, FreeSlots,
// BlockManager, FreeSlotsManager, LocalPool, GlobalPool, ObjectPool); what the article leaves out
// is marked "beyond the article": a thread that exits gives its lists and Block rest back; a
// LocalPool whose GlobalPool is empty takes lists from the others before it asks for memory;
// pools and threads may die in any order; chunks are mmap'ed, and unmapped when the pool dies.
//
// To read the plain design: this file, top to bottom, then global_pool.h. The rest is in the
// headers it includes, each named for what it holds; the pool reaches them through short hooks
// (a call, or an `if constexpr` branch):
//   global_pool.h      the GlobalPool: its FreeSlotsManager and BlockManager, each behind a lock
//   ladder.h           the rungs of the ladder (NoRungs, WithUnrolledList ... WithRecentFrees), the
//                      speed of ObjectPool<T>, and the list and array each Traits builds;
//                      unrolled_list.h and recent_frees.h hold their code, and the `if constexpr`
//                      branches below are their hooks
//   thread_registry.h  how a thread finds its LocalPool (Local(); made, and given its GlobalPool,
//                      on first use), and what the LocalPool gives back when the thread exits
//                      (beyond the article)
//   hardened.h         the hardened mode (double frees, foreign pointers, encoded links), and
//                      where it and the memory tools look at a slot or a chunk (PoolChecks)
//   pool_stats.h       Stats(), what a pool holds, read from its GlobalPools
//   memory_tools.h     what ASan and valgrind are told about every slot
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <utility>

#include "global_pool.h"
#include "hardened.h"
#include "ladder.h"
#include "memory_tools.h"
#include "pool_stats.h"
#include "thread_registry.h"

#define STEP05_LIKELY(x) __builtin_expect(!!(x), 1)
#define STEP05_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace step05 {

// The tunables. Derive from a Traits struct and redefine what you want to change:
//   struct BigLists : step05::DefaultPoolTraits { static constexpr std::size_t kFreeSlotsSize =
//   1024; }; step05::ObjectPool<Order, BigLists> orders;
// [snippet:traits]
struct PlainPoolTraits : NoRungs {  // every rung of the ladder off (ladder.h)
  // Slots per Block: what a LocalPool carves without a lock. A thread holds at most one partly
  // carved Block, so this is also the most fresh memory one thread can sit on.
  static constexpr std::size_t kBlockSize = 512;
  // Blocks per BlockChunk: one mmap. 512 x 32 slots of 64 B = 1 MiB.
  static constexpr std::size_t kBlockChunkSize = 32;
  // Length of a full free list, the unit exchanged with a GlobalPool: one lock per this many
  // frees (or allocations). A thread caches at most about this many free objects in its list,
  // plus kRecentSize in its array.
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
};
// [/snippet]

// [snippet:default-traits]
// ObjectPool<T>'s default: every rung of the ladder (ladder.h) that pays.
struct DefaultPoolTraits
    : WithRecentFrees<WithItemPrefetch<WithInterleavedChains<WithUnrolledList<>>>> {};
// [/snippet]

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

  void Push(Slot* slot, const auto& pool) noexcept {
    tools::OpenSlot(slot, sizeof(Slot*));
    slot->links_[0] = pool.EncodeLink(head_);
    tools::CloseSlot(slot, sizeof(Slot));
    head_ = slot;
    ++length_;
  }

  // Pops one slot, left closed (poisoned); second: whether it was a node (it always is here).
  std::pair<Slot*, bool> Pop(const auto& pool) noexcept {
    Slot* top = head_;
    tools::OpenSlot(top, sizeof(Slot));
    head_ = pool.FollowLink(top, top->links_[0]);
    tools::CloseSlot(top, sizeof(Slot));
    --length_;
    return {top, true};
  }
  // [/snippet]
};

// Its bases, each in the header that names it: how a thread finds its LocalPool (made on its
// first use of the pool), and what it gives back when it exits (thread_registry.h; first, so that
// the fast path reaches the pool's id at the pool's own address); Stats() and the sizes
// (pool_stats.h); where the hardened mode and the memory tools look, and the pool's life as the
// memory tools see it (hardened.h).
template <class T, class Traits = DefaultPoolTraits>
class ObjectPool : private detail::ThreadLocalPools<ObjectPool<T, Traits>>,
                   public detail::PoolStatsOf<ObjectPool<T, Traits>, Traits>,
                   private detail::PoolChecks<ObjectPool<T, Traits>, Traits> {
  friend detail::ThreadLocalPools<ObjectPool>;
  friend detail::PoolStatsOf<ObjectPool, Traits>;
  friend detail::PoolChecks<ObjectPool, Traits>;

  static constexpr std::size_t kFreeSlotsSize = Traits::kFreeSlotsSize;
  static constexpr std::size_t kGlobalPoolNum = Traits::kGlobalPoolNum;
  static_assert(Traits::kBlockSize > 0 && Traits::kBlockChunkSize > 0 && kFreeSlotsSize > 1 &&
                kGlobalPoolNum > 0);

  // --- The data structures of article 000 ------------------------------------------------

  // One object's memory. While free, its bytes belong to the free list, so a free object costs
  // no extra memory. The article's Slot holds one link; the unrolled list uses all the links
  // that fit (unrolled_list.h). As many links as cover a T: the union is a whole number of
  // links, aligned for both (sizeof(T) is a multiple of alignof(T)), so the links fill it.
  union Slot {
    Slot* links_[(sizeof(T) + sizeof(Slot*) - 1) / sizeof(Slot*)];
    alignas(T) unsigned char storage_[sizeof(T)];
  };

  // The unit a LocalPool takes from its GlobalPool. Unlike the article's Block it holds no idx_:
  // the carving cursor lives in the LocalPool, so a Block is slots and nothing else, a chunk is
  // an exact multiple of the slot size, and a slot never straddles a stray counter.
  struct Block {
    Slot slots_[Traits::kBlockSize];
  };
  // The unit a GlobalPool maps from the OS.
  struct BlockChunk {
    Block blocks_[Traits::kBlockChunkSize];
  };

  // The list a LocalPool hands out from, and the unit it exchanges with a GlobalPool: the
  // article's PlainFreeSlots above, unless a rung switches in another (ladder.h).
  using FreeSlots = FreeSlotsFor<Slot, Traits>;
  friend FreeSlots;  // it calls EncodeLink() and FollowLink()
  // The free objects a LocalPool keeps in front of its list: none in the plain design.
  using Recent = RecentFreesFor<Slot, Traits>;
  friend Recent;  // it calls RetireFullList()

  // The uncarved rest of a Block: [next_, end_).
  struct BlockRest {
    Slot* next_ = nullptr;
    Slot* end_ = nullptr;
  };

  // Beyond the LocalPools, kGlobalPoolNum of these (global_pool.h), each shared by the threads
  // assigned to it: full free lists are parked there, Blocks carved from chunks come from there.
  using GlobalPool = detail::GlobalPool<FreeSlots, BlockRest, BlockChunk, Traits>;
  friend GlobalPool;  // it maps and unmaps its chunks through the pool (MapChunk, UnmapChunk)

  // One per (thread, pool): touched by its thread only, so it needs no lock. (Its base is what
  // the thread registry keeps of it: the pool it belongs to.) Made on the thread's first use of
  // the pool, and assigned to a GlobalPool round-robin, as in the article (thread_registry.h).
  struct alignas(detail::kCacheLine) LocalPool final : detail::LocalPoolOf<ObjectPool> {
    LocalPool(ObjectPool* owner, GlobalPool* global)
        : detail::LocalPoolOf<ObjectPool>(owner), global_pool_(global) {}

    GlobalPool* const global_pool_;
    FreeSlots freeslots_;  // hands out and takes back, LIFO: the last freed is the next given
    // Rung WithRecentFrees: the objects freed last, the first handed out (recent_frees.h).
    [[no_unique_address]] Recent recent_;
    BlockRest block_;  // the article's block_/idx_: what is left to carve
  };

 public:
  using value_type = T;

  // Default-constructible (its base PoolChecks tells the memory tools of the new pool); not
  // copyable, as its GlobalPools' locks are not.

  // Everything goes: every chunk is unmapped, live objects included (their destructors are not
  // run: Delete them first). Threads still attached keep an orphaned LocalPool that they
  // delete when they exit. No thread may use the pool while it dies.
  ~ObjectPool() {
    this->locals_.OrphanAll();
    for (GlobalPool& global : global_pools_)
      global.ReleaseChunks(*this);
  }

  // --- The interface of article 000 -------------------------------------------------------

  // Memory for one T, uninitialised; nullptr when the OS refuses more memory.
  // [snippet:fast-path]
  void* Allocate() noexcept {
    LocalPool* local = this->Local();  // this thread's (thread_registry.h)
    if (STEP05_UNLIKELY(local == nullptr)) return this->AllocateWithoutLocalPool();
    if constexpr (Traits::kRecentSize > 0) {  // rung WithRecentFrees
      if (STEP05_LIKELY(!local->recent_.Empty())) return this->HandOut(local->recent_.Take(), true);
    }
    if (STEP05_LIKELY(local->freeslots_.length_ != 0)) return PopLocal(*local);
    return AllocateSlow(*local);
  }

  // Gives back memory from Allocate() of this pool, from any thread. nullptr is a no-op.
  void Free(void* p) noexcept {
    if (p == nullptr) return;
    Slot* slot = static_cast<Slot*>(p);
    this->TakeBack(slot);
    LocalPool* local = this->Local();
    if (STEP05_UNLIKELY(local == nullptr)) return this->FreeWithoutLocalPool(slot);
    // Rung WithRecentFrees: into the array, whose older half goes into the list when it is full.
    if constexpr (Traits::kRecentSize > 0) return Recent::Put(slot, *this, *local);
    local->freeslots_.Push(slot, *this);
    if (STEP05_UNLIKELY(local->freeslots_.length_ >= kFreeSlotsSize)) RetireFullList(*local);
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

 private:
  // The local list is empty. In the article's order, reuse before new memory: a list from this
  // thread's GlobalPool, one from another GlobalPool, the rest of this thread's Block, a Block
  // rest left by an exited thread, a new Block.
  __attribute__((noinline)) void* AllocateSlow(LocalPool& local) noexcept {
    GlobalPool& home = *local.global_pool_;
    auto take_list = [&](GlobalPool& global) { return global.PopFreeSlots(local.freeslots_); };
    if (take_list(home) || FromOtherGlobalPools(home, take_list)) {
      if constexpr (Traits::kUnrolledList) local.freeslots_.PrefetchHeads();  // its chains
      return PopLocal(local);
    }
    if (STEP05_LIKELY(local.block_.next_ != local.block_.end_)) return Carve(local);
    auto take_rest = [&](GlobalPool& global) { return global.StealReturnedRest(local.block_); };
    if (FromOtherGlobalPools(home, take_rest) || home.PopBlock(local.block_, *this))
      return Carve(local);
    return nullptr;  // out of memory
  }

  // Beyond the article: take(global) on the GlobalPools other than `home`, the next one first,
  // until it succeeds. A thread that only allocates (a producer) would otherwise map new memory
  // forever while the lists its consumer frees pile up in another GlobalPool.
  bool FromOtherGlobalPools(GlobalPool& home, auto take) noexcept {
    const std::size_t home_index = &home - global_pools_;
    for (std::size_t i = 1; i < kGlobalPoolNum; ++i)
      if (take(global_pools_[(home_index + i) % kGlobalPoolNum])) return true;
    return false;
  }

  void* PopLocal(LocalPool& local) noexcept {
    auto [slot, was_node] = local.freeslots_.Pop(*this);
    return this->HandOut(slot, !was_node);  // an item holds the fill pattern, a node links
  }

  void* Carve(LocalPool& local) noexcept { return this->HandOut(local.block_.next_++, false); }

  // A full local list goes to the GlobalPool whole, as in the article. (A spare list kept back,
  // Bonwick's second magazine, was a rung once: the chapter says what it measured.)
  __attribute__((noinline)) void RetireFullList(LocalPool& local) noexcept {
    if (local.global_pool_->PushFreeSlots(local.freeslots_)) local.freeslots_ = {};
    // else: out of memory for the manager's vector; the list simply stays here, longer
  }

  GlobalPool global_pools_[kGlobalPoolNum];
  detail::SlotDirectory<sizeof(T), sizeof(Slot), sizeof(BlockChunk)> directory_;  // hardened mode
};

}  // namespace step05
