// Step 05: the GlobalPool of article 000, shared by the LocalPools of a quarter of the threads
// (kGlobalPoolNum of them, assigned round-robin; object_pool.h). Its two halves, each behind its
// own lock: the FreeSlotsManager parks full free lists, which LocalPools hand in and take out
// whole; the BlockManager maps BlockChunks from the OS and hands out their Blocks, one at a time,
// for a LocalPool to carve. Beyond the article: what exiting threads leave (a short list, merged
// into one partial list; the uncarved rest of a Block), taken by any thread that needs it; the
// code of that is in thread_registry.h (LeftByExitedThreads), the data here.
//
// A GlobalPool is built from the pool's data structures (object_pool.h: its FreeSlots, BlockRest
// and BlockChunk) and its Traits; the calls that touch the pool itself (mapping and unmapping a
// chunk, which the hardened mode and the memory tools are told of: hardened.h) take it as a
// parameter. Stats() reads the managers and the published count of lists (pool_stats.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

#include "lock_policies.h"    // step04: the spinlock
#include "thread_registry.h"  // LeftByExitedThreads

namespace step05::detail {

inline constexpr std::size_t kCacheLine = 64;

template <class FreeSlots, class BlockRest, class BlockChunk, class Traits>
class alignas(kCacheLine) GlobalPool
    : public LeftByExitedThreads<GlobalPool<FreeSlots, BlockRest, BlockChunk, Traits>, Traits> {
  friend LeftByExitedThreads<GlobalPool, Traits>;
  template <class Pool, class PoolTraits>
  friend class PoolStatsOf;  // Stats() reads the managers (pool_stats.h)

  struct BlockManager {
    std::vector<BlockChunk*> block_chunks_;  // every chunk; unmapped when the pool dies
    // The next uncarved Block of block_chunks_.back() (none: kBlockChunkSize).
    std::size_t next_block_ = Traits::kBlockChunkSize;
    std::vector<BlockRest> returned_rests_;  // beyond the article: rests of exited threads
  };

  struct FreeSlotsManager {
    // The article's freeslots_ptrs (its free_num_ is size()). Lists of kFreeSlotsSize, except
    // that one merged from exited threads may be a little longer, so each keeps its length.
    std::vector<FreeSlots> freeslots_;
    // Beyond the article: short lists left by exiting threads, merged until they are full.
    FreeSlots partial_;
  };

 public:
  GlobalPool() { freeslots_manager_.freeslots_.reserve(64); }  // (not copyable: its locks)

  // Takes one list (a full one first, else the partial one); false when there is none. It looks
  // before it locks: the threads of the other GlobalPools try here too when theirs is empty
  // (beyond the article), and their attempts must not pile onto the lock of an empty pool.
  // [snippet:pop-freeslots]
  bool PopFreeSlots(FreeSlots& out) noexcept {
    if (lists_available_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard<step04::SpinLock> lock(freeslots_lock_);
    auto& lists = freeslots_manager_.freeslots_;
    if (lists.empty()) return this->PopPartialLocked(out);  // beyond the article
    out = lists.back();
    lists.pop_back();
    PublishCount();
    return true;
  }
  // [/snippet]

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

  // Gives a Block (or the rest of one) to a LocalPool, mapping a new chunk only when this
  // GlobalPool has nothing left: the pool grows on demand, never ahead of it.
  bool PopBlock(BlockRest& out, auto& pool) noexcept {
    std::lock_guard<std::mutex> lock(block_mutex_);
    if (this->PopReturnedRestLocked(out)) return true;
    if (block_manager_.next_block_ == Traits::kBlockChunkSize && !NewBlockChunk(pool)) return false;
    auto& block = block_manager_.block_chunks_.back()->blocks_[block_manager_.next_block_++];
    out = {block.slots_, block.slots_ + Traits::kBlockSize};
    return true;
  }

  // Every chunk goes back to the OS, whether or not its objects were freed (the pool dies).
  void ReleaseChunks(auto& pool) noexcept {
    for (BlockChunk* chunk : block_manager_.block_chunks_)
      pool.UnmapChunk(chunk);
  }

 private:
  bool NewBlockChunk(auto& pool) noexcept {
    auto& chunks = block_manager_.block_chunks_;
    try {  // room for the chunk before it is mapped: a failure after would leak it
      if (chunks.size() == chunks.capacity()) chunks.reserve(2 * chunks.size() + 4);
    } catch (const std::bad_alloc&) {
      return false;
    }
    void* memory = pool.MapChunk();  // Traits::MapChunk(), told to the hardened mode and the tools
    if (memory == nullptr) return false;
    chunks.push_back(static_cast<BlockChunk*>(memory));
    block_manager_.next_block_ = 0;
    return true;
  }

  // Caller holds freeslots_lock_.
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
  std::atomic<std::size_t> lists_available_{0};  // the lists parked, published under the lock
  alignas(kCacheLine) std::mutex block_mutex_;
  BlockManager block_manager_;
  std::atomic<std::size_t> rests_available_{0};
};

}  // namespace step05::detail
