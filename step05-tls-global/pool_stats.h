// Step 05: what a pool holds, for tests and for the curious (ObjectPool::Stats()), and the sizes
// it was built with.
#pragma once

#include <atomic>
#include <cstddef>

namespace step05 {

struct PoolStats {
  std::size_t chunks = 0;         // BlockChunks mapped now
  std::size_t bytes_mapped = 0;   // their size
  std::size_t blocks_carved = 0;  // Blocks ever taken from a chunk (returned rests not counted)
  std::size_t local_pools = 0;    // threads attached now
  std::size_t global_lists = 0;   // free lists parked in the GlobalPools
};

namespace detail {

// A base of the ObjectPool (Pool, which derives from it): the pool's counters, and Stats().
template <class Pool>
class PoolStatsOf {
 public:
  PoolStats Stats() noexcept {
    Pool& pool = static_cast<Pool&>(*this);
    PoolStats stats;
    stats.chunks = chunks_.load(std::memory_order_relaxed);
    stats.bytes_mapped = stats.chunks * Pool::kChunkBytes;
    stats.blocks_carved = blocks_carved_.load(std::memory_order_relaxed);
    stats.local_pools = pool.locals_.Count();
    for (auto& global : pool.global_pools_)
      stats.global_lists += global.ListCount();
    return stats;
  }

  static constexpr std::size_t slot_size() { return Pool::kSlotSize; }
  static constexpr std::size_t chunk_bytes() { return Pool::kChunkBytes; }
  static constexpr bool hardened() { return Pool::kHardened; }

 protected:
  std::atomic<std::size_t> chunks_{0};         // counted by PoolChecks::ChunkMapped/Unmapping
  std::atomic<std::size_t> blocks_carved_{0};  // counted by GlobalPool::PopBlock
};

}  // namespace detail
}  // namespace step05
