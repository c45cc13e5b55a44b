// Step 05: what a pool holds, for tests and for the curious (ObjectPool::Stats()), and the sizes
// it was built with.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>

namespace step05 {

struct PoolStats {
  std::size_t chunks = 0;         // BlockChunks mapped now
  std::size_t bytes_mapped = 0;   // their size
  std::size_t blocks_carved = 0;  // Blocks ever taken from a chunk (returned rests not counted)
  std::size_t local_pools = 0;    // threads attached now
  std::size_t global_lists = 0;   // free lists parked in the GlobalPools
};

namespace detail {

// A base of the ObjectPool (Pool, which derives from it; Traits its Traits): Stats(), read from
// the GlobalPools' managers (each under its lock) and the published count of their lists, and the
// sizes.
template <class Pool, class Traits>
class PoolStatsOf {
 public:
  PoolStats Stats() noexcept {
    Pool& pool = static_cast<Pool&>(*this);
    PoolStats stats;
    stats.local_pools = pool.locals_.Count();
    for (auto& global : pool.global_pools_) {
      stats.global_lists += global.lists_available_.load(std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(global.block_mutex_);
      const auto& blocks = global.block_manager_;
      stats.chunks += blocks.block_chunks_.size();
      // Every Block of every chunk but the last, and the first next_block_ of the last (before
      // the first chunk, next_block_ is kBlockChunkSize: none).
      stats.blocks_carved += blocks.block_chunks_.size() * Traits::kBlockChunkSize +
                             blocks.next_block_ - Traits::kBlockChunkSize;
    }
    stats.bytes_mapped = stats.chunks * chunk_bytes();
    return stats;
  }

  static constexpr std::size_t slot_size() { return sizeof(typename Pool::Slot); }
  static constexpr std::size_t chunk_bytes() { return sizeof(typename Pool::BlockChunk); }
  static constexpr bool hardened() { return Traits::kHardened; }
};

}  // namespace detail
}  // namespace step05
