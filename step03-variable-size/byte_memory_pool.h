// Step 03, part 1: the book's variable-size pool ("Efficient C++", ch. 6, version 3): an arena.
//
//   ByteMemoryPool    bump allocation inside MemoryChunks; free() is a no-op; everything goes
//                     back at once (release(), reset(), the destructor)
//
// What the book's version leaves out, and this one does:
//   - every block is aligned: to alignof(std::max_align_t) unless the caller asks for another
//     power of two (the book rounded nothing, so a double could land on an odd address);
//   - a request larger than a chunk gets a chunk of its own, and the current chunk keeps serving;
//   - chunks grow geometrically (each twice the last, as std::pmr::monotonic_buffer_resource's do),
//     so N bytes cost O(log N) upstream allocations;
//   - memory can be reused: reset() rewinds the arena and keeps its largest chunk, so a server
//     that handles one request per round stops calling upstream once the chunk fits a request
//     (the book never reused anything: one destructor, at the end);
//   - an optional initial buffer (stack memory, say) is used before any chunk.
//
// Interface: the book's `void* alloc(size_t)`, `void free(void*)`, plus an alignment argument and
// a sized free (what std::pmr passes). Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>

#include "pool_debug.h"  // step02: ASan/valgrind hooks and the hardened checks

namespace step03 {

using step02::DefaultChecks;
using step02::Fast;
using step02::Hardened;

inline constexpr const char* kStepName = "step03-variable-size";

constexpr bool IsPowerOfTwo(std::size_t n) noexcept {
  return n != 0 && (n & (n - 1)) == 0;
}

template <class Checks = DefaultChecks>
class ByteMemoryPool {
 public:
  static constexpr std::size_t kDefaultChunkSize = 4096;  // the book's DEFAULT_CHUNK_SIZE
  static constexpr std::size_t kDefaultAlign = alignof(std::max_align_t);

  explicit ByteMemoryPool(std::size_t first_chunk_size = kDefaultChunkSize) noexcept
      : ByteMemoryPool(nullptr, 0, first_chunk_size) {}
  // Serves from [buffer, buffer + size) first. The buffer stays the caller's: never freed.
  ByteMemoryPool(void* buffer, std::size_t size,
                 std::size_t first_chunk_size = kDefaultChunkSize) noexcept
      : buffer_(static_cast<char*>(buffer)),
        buffer_size_(buffer == nullptr ? 0 : size),
        first_chunk_size_(std::max(first_chunk_size, sizeof(MemoryChunk) + 1)),
        next_chunk_size_(first_chunk_size_) {
    tracker_.Start(this);
    Rewind();
  }
  ByteMemoryPool(const ByteMemoryPool&) = delete;
  ByteMemoryPool& operator=(const ByteMemoryPool&) = delete;
  ~ByteMemoryPool() {
    release();
    tracker_.Stop();
    tracker_.Disown(buffer_, buffer_size_);  // leave the caller's buffer as we found it
  }

  // `size` bytes aligned to `align` (a power of two). Size 0 gives a distinct pointer. Throws
  // std::bad_alloc if `align` is not a power of two, the size overflows, or upstream fails.
  void* alloc(std::size_t size, std::size_t align = kDefaultAlign) {
    if (!IsPowerOfTwo(align)) [[unlikely]]
      throw std::bad_alloc();
    size += size == 0;
    const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(end_);
    const std::uintptr_t p = (reinterpret_cast<std::uintptr_t>(cursor_) + align - 1) & ~(align - 1);
    if (p > end || size > end - p) [[unlikely]]
      return AllocSlow(size, align);
    cursor_ = reinterpret_cast<char*>(p + size);
    if (tracker_.watched()) [[unlikely]]
      tracker_.HandOut(reinterpret_cast<void*>(p), size, size);
    return reinterpret_cast<void*>(p);
  }

  // A no-op, as in the book: the memory comes back with reset(), release() or the destructor.
  // Under the memory tools and in hardened mode the block is marked freed (the sized form lets
  // ASan poison it without hardened bookkeeping).
  void free(void* p) noexcept {
    if (p != nullptr && tracker_.watched()) [[unlikely]]
      FreeWatched(p, 0);
  }
  void free(void* p, std::size_t size, std::size_t /*align*/ = kDefaultAlign) noexcept {
    if (p != nullptr && tracker_.watched()) [[unlikely]]
      FreeWatched(p, size + (size == 0));
  }

  // Every block becomes invalid; the largest chunk is kept for the next round, the others go
  // back upstream. Allocation starts again in the initial buffer, then in the kept chunk.
  void reset() noexcept {
    MemoryChunk* largest = spare_;
    for (MemoryChunk* chunk = chunks_; chunk != nullptr;) {
      MemoryChunk* next = chunk->next;
      if (largest == nullptr || chunk->size > largest->size) std::swap(largest, chunk);
      if (chunk != nullptr) FreeChunk(chunk);
      chunk = next;
    }
    chunks_ = nullptr;
    spare_ = largest;
    RestartTracking();
  }

  // Every chunk goes back upstream, and chunk sizes start again from the first.
  void release() noexcept {
    for (MemoryChunk* chunk = chunks_; chunk != nullptr;) {
      MemoryChunk* next = chunk->next;
      FreeChunk(chunk);
      chunk = next;
    }
    if (spare_ != nullptr) FreeChunk(spare_);
    chunks_ = spare_ = nullptr;
    next_chunk_size_ = first_chunk_size_;
    RestartTracking();
  }

  // Whether `p` lies in memory this arena has handed out since the last reset (walks the chunks).
  bool owns(const void* p) const noexcept {
    const char* c = static_cast<const char*>(p);
    if (c >= buffer_ && c < buffer_ + buffer_size_) return true;
    for (const MemoryChunk* chunk = chunks_; chunk != nullptr; chunk = chunk->next) {
      if (c >= chunk->Begin() && c < chunk->End()) return true;
    }
    return false;
  }

  std::size_t chunk_count() const noexcept {
    std::size_t n = spare_ != nullptr;
    for (const MemoryChunk* chunk = chunks_; chunk != nullptr; chunk = chunk->next)
      ++n;
    return n;
  }
  std::size_t next_chunk_size() const noexcept { return next_chunk_size_; }

 private:
  // The header of every chunk; the chunk's memory follows it. (The book kept the header in a
  // separate object and the memory in a `new char[]`: two allocations per chunk.)
  struct alignas(std::max_align_t) MemoryChunk {
    MemoryChunk* next;
    std::size_t size;  // bytes, header included
    char* Begin() noexcept { return reinterpret_cast<char*>(this + 1); }
    char* End() noexcept { return reinterpret_cast<char*>(this) + size; }
    const char* Begin() const noexcept { return reinterpret_cast<const char*>(this + 1); }
    const char* End() const noexcept { return reinterpret_cast<const char*>(this) + size; }
  };

  // The block does not fit the current chunk: a chunk of its own if it is bigger than a chunk,
  // else the kept chunk or a new one twice the size of the last.
  [[gnu::noinline]] void* AllocSlow(std::size_t size, std::size_t align) {
    constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
    if (size > kMax - align - sizeof(MemoryChunk)) throw std::bad_alloc();
    const std::size_t needed = sizeof(MemoryChunk) + size + align - 1;
    if (needed > next_chunk_size_) {
      MemoryChunk* own = NewChunk(needed);  // the current chunk stays current
      own->next = chunks_;
      chunks_ = own;
      char* p = AlignUp(own->Begin(), align);
      if (tracker_.watched()) tracker_.HandOut(p, size, size);
      return p;
    }
    MemoryChunk* chunk = nullptr;
    if (spare_ != nullptr && spare_->size >= needed) {
      chunk = spare_;
      spare_ = nullptr;
    } else {
      chunk = NewChunk(next_chunk_size_);
      if (next_chunk_size_ <= kMax / 2) next_chunk_size_ *= 2;
    }
    chunk->next = chunks_;
    chunks_ = chunk;
    cursor_ = chunk->Begin();
    end_ = chunk->End();
    return alloc(size, align);
  }

  MemoryChunk* NewChunk(std::size_t bytes) {
    void* raw = ::operator new(bytes);  // throws: nothing changed yet
    auto* chunk = ::new (raw) MemoryChunk{nullptr, bytes};
    tracker_.Seal(chunk->Begin(), bytes - sizeof(MemoryChunk));
    return chunk;
  }
  void FreeChunk(MemoryChunk* chunk) noexcept {
    tracker_.Disown(chunk, chunk->size);
    ::operator delete(chunk);
  }

  // Starts handing out from the initial buffer (or from nothing), every block freed.
  void Rewind() noexcept {
    cursor_ = buffer_;
    end_ = buffer_ + buffer_size_;
    tracker_.Seal(buffer_, buffer_size_);
    if (spare_ != nullptr) tracker_.Seal(spare_->Begin(), spare_->size - sizeof(MemoryChunk));
  }
  void RestartTracking() noexcept {
    tracker_.Stop();
    tracker_.Start(this);
    Rewind();
  }

  void FreeWatched(void* p, std::size_t size) noexcept {
    const std::size_t live = tracker_.TakeBack(p);
    if (live == 0) tracker_.Misfree(p, owns(p));
    if (size == 0) size = Checks::kHardened ? live : 0;
    tracker_.Seal(p, size);
  }

  static char* AlignUp(char* p, std::size_t align) noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return reinterpret_cast<char*>((a + align - 1) & ~(align - 1));
  }

  step02::debug::BlockTracker<Checks> tracker_{kStepName, "ByteMemoryPool"};  // read by alloc()
  char* cursor_ = nullptr;  // the bump region: [cursor_, end_)
  char* end_ = nullptr;
  MemoryChunk* chunks_ = nullptr;  // in use since the last reset, newest first
  MemoryChunk* spare_ = nullptr;   // kept by reset() for the next round
  char* buffer_;
  std::size_t buffer_size_;
  std::size_t first_chunk_size_;
  std::size_t next_chunk_size_;
};

}  // namespace step03
