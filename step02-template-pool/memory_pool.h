// Step 02: the fixed-size pool as a template, with what the book's version leaves out.
//
//   BlockPool<Checks>          the engine: blocks of one size and alignment chosen at run time,
//                              a LIFO free list, memory carved from contiguous chunks
//   MemoryPool<T>              BlockPool with T's geometry fixed at compile time; grows on demand
//   MemoryPool<T, N>           N blocks inside the pool object itself; never grows, alloc() returns
//                              nullptr when full
//
// Compared with the book's version 2 (book_memory_pool.h):
//   - every block is aligned for T, whatever alignof(T) is, and holds at least a link even when T
//     is smaller than a pointer;
//   - one upstream allocation per chunk, not per element: 32 blocks in the first chunk, then twice
//     as many each time, up to kMaxChunkBytes; a new chunk is carved block by block as it is used;
//   - every chunk is freed when the pool is released or destroyed, even if blocks are still in use.
//
// The interface is the book's (`void* alloc(size_t)`, `void free(void*)`), so the locked wrapper
// of step 04 can take any of these pools. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>

#include "pool_debug.h"

namespace step02 {

inline constexpr const char* kStepName = "step02-template-pool";

// A block must hold the object while in use and the free-list link while free, and every block
// of a chunk must start at a multiple of the object's alignment: so the block size is the larger
// of the two sizes rounded up to the larger of the two alignments.
constexpr std::size_t BlockAlignFor(std::size_t align) noexcept {
  return std::max(align, alignof(void*));
}
constexpr std::size_t BlockSizeFor(std::size_t size, std::size_t align) noexcept {
  const std::size_t block_align = BlockAlignFor(align);
  const std::size_t bytes = std::max(size, sizeof(void*));
  return (bytes + block_align - 1) / block_align * block_align;
}

template <class Checks = DefaultChecks>
class BlockPool {
 public:
  static constexpr std::size_t kFirstChunkBlocks = 32;  // the book's EXPANSION_SIZE
  static constexpr std::size_t kMaxChunkBytes = std::size_t{256} << 10;

  constexpr BlockPool(std::size_t object_size, std::size_t object_align,
                      std::size_t first_chunk_blocks = kFirstChunkBlocks,
                      const char* name = "BlockPool") noexcept
      : tracker_(kStepName, name),
        block_size_(BlockSizeFor(object_size, object_align)),
        block_align_(BlockAlignFor(object_align)),
        first_chunk_blocks_(std::max<std::size_t>(first_chunk_blocks, 1)),
        next_chunk_blocks_(first_chunk_blocks_) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;
  ~BlockPool() { release(); }

  // A block for `size` bytes (0 included). Throws std::bad_alloc if `size` is larger than a block
  // or the upstream allocator fails; the pool is then unchanged.
  void* alloc(std::size_t size) {
    if (size > block_size_) throw std::bad_alloc();
    return TakeBlock(size);
  }
  // `p` must come from this pool's alloc(); nullptr is a no-op.
  void free(void* p) noexcept {
    if (p != nullptr) ReturnBlock(p);
  }

  // The two fast paths, for callers that already know the request fits a block. Unwatched, they
  // are the book's pop and push; the memory tools and the hardened checks take the other branch.
  void* TakeBlock(std::size_t bytes) {
    if (tracker_.watched()) [[unlikely]]
      return TakeWatchedBlock(bytes);
    if (void* p = free_.Pop()) [[likely]]
      return p;
    return CarveBlock(bytes);
  }
  void ReturnBlock(void* p) noexcept {
    if (tracker_.watched()) [[unlikely]]
      return ReturnWatchedBlock(p);
    free_.Push(p);
  }

  // Gives every chunk back upstream. Every block this pool handed out becomes invalid.
  void release() noexcept {
    tracker_.Stop();
    while (chunks_ != nullptr) {
      Chunk* next = chunks_->next;
      char* begin = chunks_->begin;
      tracker_.Disown(begin, ChunkBytes(chunks_));
      FreeChunk(begin);
      chunks_ = next;
    }
    free_.Clear();
    carve_ = carve_end_ = nullptr;
    chunk_count_ = 0;
    next_chunk_blocks_ = first_chunk_blocks_;
  }

  // Whether `p` is the start of a block this pool has handed out at least once (walks the chunks:
  // for hardened checks and tests, not for fast paths).
  bool owns(const void* p) const noexcept {
    const char* c = static_cast<const char*>(p);
    for (const Chunk* chunk = chunks_; chunk != nullptr; chunk = chunk->next) {
      // The newest chunk is handed out only up to carve_.
      const char* end = chunk == chunks_ ? carve_ : reinterpret_cast<const char*>(chunk);
      if (c >= chunk->begin && c < end) return std::size_t(c - chunk->begin) % block_size_ == 0;
    }
    return false;
  }

  std::size_t block_size() const noexcept { return block_size_; }
  std::size_t block_align() const noexcept { return block_align_; }
  std::size_t chunk_count() const noexcept { return chunk_count_; }

 private:
  // A chunk is its blocks, from the first byte `operator new` gave (so already aligned: no
  // padding), followed by this trailer that links the chunks.
  struct Chunk {
    Chunk* next;
    char* begin;
  };
  static_assert(alignof(Chunk) <= alignof(void*), "block sizes are multiples of alignof(void*)");

  static std::size_t ChunkBytes(const Chunk* chunk) noexcept {
    return std::size_t(reinterpret_cast<const char*>(chunk) - chunk->begin) + sizeof(Chunk);
  }

  void* TakeWatchedBlock(std::size_t bytes) {
    void* p = free_.PopWatched(block_size_, tracker_);
    if (p == nullptr) return CarveBlock(bytes);
    HandOutOrPutBack(p, bytes);
    return p;
  }
  // The hardened ledger may fail to grow (std::bad_alloc): the block goes back on the list, so
  // the pool is unchanged, as alloc() promises.
  void HandOutOrPutBack(void* p, std::size_t bytes) {
    try {
      tracker_.HandOut(p, bytes, block_size_);
    } catch (...) {
      free_.PushWatched(p, block_size_, tracker_);
      throw;
    }
  }
  void ReturnWatchedBlock(void* p) noexcept {
    if (tracker_.TakeBack(p) == 0) [[unlikely]]
      tracker_.Misfree(p, owns(p));
    free_.PushWatched(p, block_size_, tracker_);
  }

  // The slow path: the next never-used block of the newest chunk, after a new chunk if needed.
  // The first chunk is also when the pool learns whether memcheck watches it.
  // [snippet:carve-block]
  [[gnu::noinline]] void* CarveBlock(std::size_t bytes) {
    if (carve_ == carve_end_) Expand();
    void* p = carve_;
    if (tracker_.watched()) tracker_.HandOut(p, bytes, block_size_);  // may throw: nothing taken
    carve_ += block_size_;
    return p;
  }
  // [/snippet]

  void Expand() {
    if (next_chunk_blocks_ >
        (std::numeric_limits<std::size_t>::max() - sizeof(Chunk)) / block_size_) {
      throw std::bad_alloc();
    }
    const std::size_t blocks_bytes = next_chunk_blocks_ * block_size_;
    char* raw = static_cast<char*>(AllocateChunk(blocks_bytes + sizeof(Chunk)));  // may throw
    tracker_.Start(this);
    chunks_ = ::new (raw + blocks_bytes) Chunk{chunks_, raw};
    ++chunk_count_;
    carve_ = raw;
    carve_end_ = raw + blocks_bytes;
    tracker_.Seal(carve_, blocks_bytes);
    const std::size_t max_blocks = std::max<std::size_t>(kMaxChunkBytes / block_size_, 1);
    next_chunk_blocks_ = std::min(next_chunk_blocks_ * 2, std::max(max_blocks, next_chunk_blocks_));
  }

  bool OverAligned() const noexcept { return block_align_ > __STDCPP_DEFAULT_NEW_ALIGNMENT__; }
  void* AllocateChunk(std::size_t bytes) const {
    if (OverAligned()) return ::operator new (bytes, std::align_val_t{block_align_});
    return ::operator new(bytes);
  }
  // Unsized: clang before 19 has no sized global delete without -fsized-deallocation.
  void FreeChunk(void* p) const noexcept {
    if (OverAligned()) {
      ::operator delete (p, std::align_val_t{block_align_});
    } else {
      ::operator delete(p);
    }
  }

  // The free list's head and the tracker's watched() flag first: both fast paths read only them.
  debug::FreeList<Checks> free_;
  debug::BlockTracker<Checks> tracker_;
  char* carve_ = nullptr;  // the never-used rest of the newest chunk: [carve_, carve_end_)
  char* carve_end_ = nullptr;
  Chunk* chunks_ = nullptr;  // newest first
  std::size_t chunk_count_ = 0;
  std::size_t block_size_;
  std::size_t block_align_;
  std::size_t first_chunk_blocks_;
  std::size_t next_chunk_blocks_;
};

// Capacity 0 (the default): grows by chunks. Capacity N > 0: the specialization below.
template <class T, std::size_t Capacity = 0, class Checks = DefaultChecks>
class MemoryPool;

template <class T, class Checks>
class MemoryPool<T, 0, Checks> {
 public:
  static constexpr std::size_t kBlockSize = BlockSizeFor(sizeof(T), alignof(T));

  // constexpr, so a static MemoryPool is initialized before any code runs (Rational's is).
  constexpr explicit MemoryPool(
      std::size_t first_chunk_blocks = BlockPool<Checks>::kFirstChunkBlocks) noexcept
      : blocks_(sizeof(T), alignof(T), first_chunk_blocks, "MemoryPool<T>") {}

  // Throws std::bad_alloc if `size` exceeds a block or upstream memory runs out.
  void* alloc(std::size_t size = sizeof(T)) {
    if (size > kBlockSize) throw std::bad_alloc();
    return blocks_.TakeBlock(size);
  }
  void free(void* p) noexcept { blocks_.free(p); }

  void release() noexcept { blocks_.release(); }
  bool owns(const void* p) const noexcept { return blocks_.owns(p); }
  std::size_t chunk_count() const noexcept { return blocks_.chunk_count(); }

 private:
  BlockPool<Checks> blocks_;
};

// A pool of exactly `Capacity` blocks stored inside the pool object (on the stack, in a static, in
// another object): no upstream allocation ever. alloc() returns nullptr when all blocks are in use
// or `size` exceeds a block; it never throws in the Fast policy.
template <class T, std::size_t Capacity, class Checks>
class MemoryPool {
 public:
  static constexpr std::size_t kBlockSize = BlockSizeFor(sizeof(T), alignof(T));
  static constexpr std::size_t kBlockAlign = BlockAlignFor(alignof(T));

  MemoryPool() noexcept {
    tracker_.Start(this);
    tracker_.Seal(storage_, sizeof(storage_));
  }
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;
  ~MemoryPool() {
    tracker_.Stop();
    tracker_.Disown(storage_, sizeof(storage_));  // it may be stack memory: leave it clean
  }

  // [snippet:fixed-alloc]
  void* alloc(std::size_t size = sizeof(T)) noexcept(!Checks::kHardened) {
    if (size > kBlockSize) return nullptr;
    const bool watched = tracker_.watched();
    void* p = watched ? free_.PopWatched(kBlockSize, tracker_) : free_.Pop();
    const bool carved = p == nullptr;
    if (carved) {
      if (carved_ == Capacity) return nullptr;
      p = storage_ + carved_ * kBlockSize;
    }
    if constexpr (Checks::kHardened) {
      try {
        tracker_.HandOut(p, size, kBlockSize);
      } catch (...) {  // the ledger could not grow: leave the pool as it was
        if (!carved) free_.PushWatched(p, kBlockSize, tracker_);
        throw;
      }
    } else if (watched) {
      tracker_.HandOut(p, size, kBlockSize);  // only the tools' hooks: cannot throw
    }
    carved_ += carved;
    ++in_use_;
    return p;
  }
  // [/snippet]
  void free(void* p) noexcept {
    if (p == nullptr) return;
    --in_use_;
    if (!tracker_.watched()) return free_.Push(p);
    if (tracker_.TakeBack(p) == 0) [[unlikely]]
      tracker_.Misfree(p, owns(p));
    free_.PushWatched(p, kBlockSize, tracker_);
  }

  // Byte offsets, not typed-pointer differences: a slot index computed from a T* difference and
  // then divided by the block size again is how a published version of this pool made slots alias.
  bool owns(const void* p) const noexcept {
    const auto* c = static_cast<const unsigned char*>(p);
    if (c < storage_ || c >= storage_ + carved_ * kBlockSize) return false;
    return std::size_t(c - storage_) % kBlockSize == 0;
  }
  static constexpr std::size_t capacity() noexcept { return Capacity; }
  std::size_t in_use() const noexcept { return in_use_; }

 private:
  alignas(kBlockAlign) unsigned char storage_[Capacity * kBlockSize];
  std::size_t carved_ = 0;  // blocks [0, carved_) have been handed out at least once
  std::size_t in_use_ = 0;
  debug::FreeList<Checks> free_;
  debug::BlockTracker<Checks> tracker_{kStepName, "MemoryPool<T, N>"};
};

}  // namespace step02
