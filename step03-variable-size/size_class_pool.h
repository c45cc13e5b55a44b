// Step 03, part 2: a pool of many sizes that frees block by block.
//
//   SizeClassPool     a request is rounded up to a size class; each class has its own free list
//                     (step 02's, one per size) and carves its blocks from chunks of its own
//
//   sizes 1..128      classes every 8 bytes:  8, 16, 24, ..., 128                    (16 classes)
//   129..4096         four classes per doubling: 160, 192, 224, 256, 320, ..., 4096   (20 classes)
//   above 4096        upstream (`operator new`), one block per allocation, with a header
//
// Rounding wastes at most 7 bytes below 128 B and under 25 % above. A chunk is 64 KiB, aligned to
// 64 KiB, and starts with a header that names its size class: so free(p) finds the class of any
// block by masking the low bits of p, and needs no size (free(p, size), what std::pmr and sized
// delete give, does not even read the header). Step 06 keeps the classes and the free lists, and
// replaces the mask by a page map, so that chunks can be any size and go back to the OS.
//
// Alignment: alloc(size) gives a block aligned for any object of `size` bytes (the class size's
// lowest set bit, at least 8, at most 64); alloc(size, align) any power of two up to 4096.
// Memory goes back upstream only in release() and the destructor. Not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>

#include "byte_memory_pool.h"  // kStepName, IsPowerOfTwo
#include "pool_debug.h"        // step02

namespace step03 {

namespace detail {

inline constexpr std::size_t kMaxClassSize = 4096;
inline constexpr unsigned kClassCount = 36;

constexpr std::array<std::uint16_t, kClassCount> MakeClassSizes() {
  std::array<std::uint16_t, kClassCount> sizes{};
  unsigned c = 0;
  for (unsigned s = 8; s <= 128; s += 8)
    sizes[c++] = std::uint16_t(s);
  for (unsigned power = 128; power < kMaxClassSize; power *= 2) {
    for (unsigned quarter = 5; quarter <= 8; ++quarter)
      sizes[c++] = std::uint16_t(power / 4 * quarter);
  }
  return sizes;
}

// index[j]: the class of every size in (8 * (j - 1), 8 * j]. Class sizes are multiples of 8, so
// the class of 8 * j serves the whole range.
constexpr std::array<std::uint8_t, kMaxClassSize / 8 + 1> MakeClassIndex() {
  constexpr auto sizes = MakeClassSizes();
  std::array<std::uint8_t, kMaxClassSize / 8 + 1> index{};
  unsigned c = 0;
  for (std::size_t j = 0; j < index.size(); ++j) {
    while (sizes[c] < 8 * j)
      ++c;
    index[j] = std::uint8_t(c);
  }
  return index;
}

}  // namespace detail

class SizeClasses {
 public:
  static constexpr std::size_t kMaxSize = detail::kMaxClassSize;
  static constexpr unsigned kCount = detail::kClassCount;

  static constexpr std::size_t Size(unsigned size_class) noexcept { return kSizes[size_class]; }
  // The smallest class that holds `size` bytes (size <= kMaxSize): one table load.
  static constexpr unsigned IndexOf(std::size_t size) noexcept { return kIndex[(size + 7) >> 3]; }

 private:
  static constexpr std::array<std::uint16_t, kCount> kSizes = detail::MakeClassSizes();
  static constexpr std::array<std::uint8_t, kMaxSize / 8 + 1> kIndex = detail::MakeClassIndex();
  static_assert(kSizes[kCount - 1] == kMaxSize);
};

template <class Checks = DefaultChecks>
class SizeClassPool {
 public:
  static constexpr std::size_t kMaxSize = SizeClasses::kMaxSize;
  static constexpr std::size_t kChunkSize = std::size_t{64} << 10;
  static constexpr std::size_t kMaxClassAlign = 64;  // what a chunk's layout guarantees
  static constexpr std::size_t kMaxAlign = 4096;     // larger alignments: std::bad_alloc

  SizeClassPool() noexcept { tracker_.Start(this); }
  SizeClassPool(const SizeClassPool&) = delete;
  SizeClassPool& operator=(const SizeClassPool&) = delete;
  ~SizeClassPool() {
    release();
    tracker_.Stop();
  }

  // A block for `size` bytes (0 included), aligned for any object of that size. Throws
  // std::bad_alloc when upstream memory runs out.
  void* alloc(std::size_t size) {
    if (size > kMaxSize) [[unlikely]]
      return AllocLarge(size, alignof(std::max_align_t));
    return AllocSmall(SizeClasses::IndexOf(size), size);
  }
  // Aligned to `align`, a power of two up to kMaxAlign (else std::bad_alloc).
  void* alloc(std::size_t size, std::size_t align) {
    const unsigned size_class = ClassFor(size, align);
    if (size_class == kLarge) return AllocLarge(size, align);
    return AllocSmall(size_class, size);
  }

  // `p` from this pool, or nullptr (a no-op). The class comes from the chunk's header.
  void free(void* p) noexcept {
    if (p == nullptr) return;
    if (tracker_.watched()) [[unlikely]]
      return FreeWatched(p, kUnknown);
    Chunk* chunk = ChunkOf(p);
    if (chunk->size_class == kLarge) [[unlikely]]
      return FreeLarge(chunk);
    classes_[chunk->size_class].free.Push(p);
  }
  // The size (and alignment) `p` was allocated with: the class comes from the size alone.
  void free(void* p, std::size_t size) noexcept {
    FreeSized(p, size > kMaxSize ? kLarge : SizeClasses::IndexOf(size));
  }
  void free(void* p, std::size_t size, std::size_t align) noexcept {
    FreeSized(p, ClassFor(size, align));
  }

  // Gives every chunk and every large block back upstream; every block becomes invalid.
  void release() noexcept {
    tracker_.Stop();
    for (Chunk* list : {chunks_, large_}) {
      while (list != nullptr) {
        Chunk* next = list->next;
        FreeChunk(list);
        list = next;
      }
    }
    chunks_ = large_ = nullptr;
    chunk_count_ = 0;
    classes_ = {};
    tracker_.Start(this);
  }

  // Whether `p` is in one of this pool's chunks or large blocks (walks them all: for hardened
  // checks and tests).
  bool owns(const void* p) const noexcept {
    const Chunk* target = ChunkOf(p);
    for (const Chunk* list : {chunks_, large_}) {
      for (const Chunk* chunk = list; chunk != nullptr; chunk = chunk->next) {
        if (chunk == target) return true;
      }
    }
    return false;
  }

  std::size_t chunk_count() const noexcept { return chunk_count_; }
  std::size_t large_count() const noexcept {
    std::size_t n = 0;
    for (const Chunk* chunk = large_; chunk != nullptr; chunk = chunk->next)
      ++n;
    return n;
  }

 private:
  static constexpr unsigned kLarge = SizeClasses::kCount;
  static constexpr unsigned kUnknown = kLarge + 1;
  static constexpr std::size_t kHeaderBytes = 64;  // keeps the first block 64-byte aligned

  // At the start of every chunk and of every large block.
  struct Chunk {
    Chunk* next;
    Chunk* prev;  // large blocks only: they are unlinked one by one
    std::size_t bytes;
    unsigned size_class;  // kLarge for a large block
  };
  static_assert(sizeof(Chunk) <= kHeaderBytes);

  struct ClassState {
    step02::debug::FreeList<Checks> free;
    char* carve = nullptr;  // the never-used rest of this class's newest chunk
    char* carve_end = nullptr;
  };

  static Chunk* ChunkOf(const void* p) noexcept {
    return reinterpret_cast<Chunk*>(reinterpret_cast<std::uintptr_t>(p) & ~(kChunkSize - 1));
  }
  // The class serving `size` bytes aligned to `align`, or kLarge (where a bad alignment is
  // refused): rounding the size up to a multiple of `align` (<= 64) lands on a class whose blocks
  // are all aligned to `align`.
  static unsigned ClassFor(std::size_t size, std::size_t align) noexcept {
    if (align > kMaxClassAlign || !IsPowerOfTwo(align) || size > kMaxSize) return kLarge;
    // Size 0 counts as 1: rounded up it must reach a class of `align`, not stay in the first.
    if (align > 8) size = (std::max<std::size_t>(size, 1) + align - 1) & ~(align - 1);
    return size > kMaxSize ? kLarge : SizeClasses::IndexOf(size);
  }

  void* AllocSmall(unsigned size_class, std::size_t size) {
    if (tracker_.watched()) [[unlikely]]
      return AllocWatched(size_class, size);
    if (void* p = classes_[size_class].free.Pop()) [[likely]]
      return p;
    return Carve(size_class, size);
  }
  void FreeSized(void* p, unsigned size_class) noexcept {
    if (p == nullptr) return;
    if (size_class == kLarge || tracker_.watched()) [[unlikely]]
      return FreeWatched(p, size_class);
    classes_[size_class].free.Push(p);
  }

  void* AllocWatched(unsigned size_class, std::size_t size) {
    const std::size_t block = SizeClasses::Size(size_class);
    void* p = classes_[size_class].free.PopWatched(block, tracker_);
    if (p == nullptr) return Carve(size_class, size);
    try {
      tracker_.HandOut(p, size, block);
    } catch (...) {  // the hardened ledger could not grow: the block goes back, nothing changed
      classes_[size_class].free.PushWatched(p, block, tracker_);
      throw;
    }
    return p;
  }
  // Also the path of every large block (watched or not).
  void FreeWatched(void* p, unsigned expected_class) noexcept {
    if (tracker_.watched() && tracker_.TakeBack(p) == 0) tracker_.Misfree(p, owns(p));
    Chunk* chunk = ChunkOf(p);
    if (Checks::kHardened && expected_class != kUnknown && expected_class != chunk->size_class) {
      tracker_.Fail("free with the wrong size:", p);
    }
    if (chunk->size_class == kLarge) return FreeLarge(chunk);
    classes_[chunk->size_class].free.PushWatched(p, SizeClasses::Size(chunk->size_class), tracker_);
  }

  // The slow path: the next never-used block of the class's chunk, after a new chunk if needed.
  [[gnu::noinline]] void* Carve(unsigned size_class, std::size_t size) {
    ClassState& state = classes_[size_class];
    const std::size_t block = SizeClasses::Size(size_class);
    if (std::size_t(state.carve_end - state.carve) < block) {
      char* raw = static_cast<char*>(NewChunk(kChunkSize));  // throws: nothing changed yet
      ::new (raw) Chunk{chunks_, nullptr, kChunkSize, size_class};
      chunks_ = reinterpret_cast<Chunk*>(raw);
      ++chunk_count_;
      state.carve = raw + kHeaderBytes;
      state.carve_end = state.carve + (kChunkSize - kHeaderBytes) / block * block;
      tracker_.Seal(state.carve, kChunkSize - kHeaderBytes);
    }
    void* p = state.carve;
    if (tracker_.watched()) tracker_.HandOut(p, size, block);  // may throw: nothing taken yet
    state.carve += block;
    return p;
  }

  [[gnu::noinline]] void* AllocLarge(std::size_t size, std::size_t align) {
    if (!IsPowerOfTwo(align) || align > kMaxAlign) throw std::bad_alloc();
    const std::size_t offset = std::max(kHeaderBytes, align);
    if (size > std::numeric_limits<std::size_t>::max() - offset) throw std::bad_alloc();
    const std::size_t bytes = offset + size;
    char* raw = static_cast<char*>(NewChunk(bytes));
    auto* chunk = ::new (raw) Chunk{large_, nullptr, bytes, kLarge};
    if (large_ != nullptr) large_->prev = chunk;
    large_ = chunk;
    void* p = raw + offset;
    if (tracker_.watched()) tracker_.HandOut(p, size, bytes - offset);
    return p;
  }
  void FreeLarge(Chunk* chunk) noexcept {
    (chunk->prev != nullptr ? chunk->prev->next : large_) = chunk->next;
    if (chunk->next != nullptr) chunk->next->prev = chunk->prev;
    FreeChunk(chunk);
  }

  // Chunks and large blocks are aligned to kChunkSize, so ChunkOf() finds their header.
  static void* NewChunk(std::size_t bytes) {
    return ::operator new (bytes, std::align_val_t{kChunkSize});
  }
  void FreeChunk(Chunk* chunk) noexcept {
    tracker_.Disown(chunk, chunk->bytes);
    ::operator delete (chunk, std::align_val_t{kChunkSize});
  }

  step02::debug::BlockTracker<Checks> tracker_{kStepName, "SizeClassPool"};  // read by every call
  std::array<ClassState, SizeClasses::kCount> classes_{};
  Chunk* chunks_ = nullptr;  // every class's chunks, newest first
  Chunk* large_ = nullptr;   // live large blocks
  std::size_t chunk_count_ = 0;
};

}  // namespace step03
