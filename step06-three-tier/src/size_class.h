// Size classes: every small request is rounded up to one of 84 sizes, 8 B .. 256 KiB. Up to
// 128 B the step is 8 B; above, each doubling of the size is cut into eight equal steps up to
// 8 KiB (rounding wastes at most 1/9 of a block) and into four above (at most 1/5):
//
//     size range          step     classes
//     (0, 128]            8 B        16
//     (128, 256]          16 B        8
//     ...                 ...       8 a doubling
//     (4 KiB, 8 KiB]      512 B       8
//     (8 KiB, 16 KiB]     2 KiB       4
//     ...                 ...       4 a doubling
//     (128 KiB, 256 KiB]  32 KiB      4
//
// Every class costs memory in every thread that uses it (a list holding a batch or more) and in
// the central cache (a span at least partly carved), so there are as few as the waste allows.
// Article 003's table, a fixed step over whole ranges (1 KiB from 8 to 64 KiB), had 208 classes;
// with these, a program of many sizes holds less (the chapter's "Size classes" measures both).
//
// Everything is computed at compile time. Size -> class is one table load on the fast path (the
// article's perf lesson: computing the class took 15 % of its run time): one byte per 8 bytes of
// size up to kMaxIndexedSize (32 KiB), indexed by (size + 7) / 8, no branch. Above it, up to
// 256 KiB, every class is a multiple of 8 KiB and a 33-entry table indexed by (size + 8191) / 8192
// answers; the fast paths send those sizes to a slow path, whose size check they make anyway,
// so the fine table stays 4 KiB. (One byte per 8 bytes all the way to 256 KiB was 32 KiB a
// table: a short program had 64 KiB of them in its resident set, the kernel mapping a file's
// pages around the one that faults.) malloc has a second fine table, with its rounding to 16
// built in (MallocSizeToClass). Class 0 means "no class".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "config.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

inline constexpr int kNumClasses = 85;  // 84 classes + the unused class 0

struct SizeClassInfo {
  std::uint32_t size;            // object size in bytes
  std::uint16_t pages;           // pages per span
  std::uint16_t batch;           // objects moved between a thread cache and the central cache
  std::uint16_t objects;         // objects per span
  std::uint16_t transfer_slots;  // batches the central cache keeps ready for thread caches
};

// Most objects moved between tiers at once (a batch): the bound of the arrays that hold one.
inline constexpr std::size_t kMaxBatch = 128;

// The fine table's range. Every size up to it is one load away from its class on the fast path,
// and it is where the thread cache ends (kMaxCachedSize, thread_cache.h).
inline constexpr std::size_t kMaxIndexedSize = 32 * 1024;

namespace size_class_detail {

// Objects moved at once between tiers: about 32 KiB worth, 2..128 objects (the article's
// NumMoveSize, scaled so small objects travel in bigger batches).
constexpr std::uint16_t BatchFor(std::size_t size) {
  std::size_t n = (32 * 1024) / size;
  if (n < 2) n = 2;
  if (n > kMaxBatch) n = kMaxBatch;
  return static_cast<std::uint16_t>(n);
}

// Fewest pages such that the tail left over after the last object wastes at most 1/8 of the
// span, and a span holds at least one batch (so one refill rarely needs two spans).
constexpr std::uint16_t PagesFor(std::size_t size, std::size_t batch) {
  for (std::size_t pages = 1;; ++pages) {
    const std::size_t bytes = pages * kPageSize;
    if (bytes < size) continue;
    const bool little_waste = bytes % size <= bytes / 8;
    const bool holds_a_batch = bytes / size >= batch;
    if (little_waste && holds_a_batch) return static_cast<std::uint16_t>(pages);
  }
}

// Batches kept ready in the central cache per class: at most 1024 (CentralFreeList::
// kMaxTransferSlots), up to a quarter of kMaxParkedBytes worth (16 MiB) for objects smaller than a
// page, 1 MiB for the others. Moving a batch through a slot touches no object, so threads that
// allocate and free in waves (or on different threads) trade memory in O(1); a batch of small
// objects that goes through its spans instead costs a page-map lookup and a span update for each
// of a hundred objects, and comes out of them in random order. A batch of page-sized objects is
// two to four of them: little to move one by one, and a lot of memory to pin. Free objects parked
// here pin their spans, so a class whose slots nobody takes from is drained to its spans
// (CentralFreeList::DrainIfIdle). Objects over kMaxIndexedSize skip the thread cache, so no batch
// of theirs ever arrives: none.
constexpr std::uint16_t TransferSlotsFor(std::size_t size, std::size_t batch) {
  if (size > kMaxIndexedSize) return 0;
  const std::size_t bytes = size < kPageSize ? kMaxParkedBytes / 4 : std::size_t{1} << 20;
  std::size_t n = bytes / (size * batch);
  if (n > 1024) n = 1024;
  return static_cast<std::uint16_t>(n);
}

constexpr std::array<SizeClassInfo, kNumClasses> MakeClasses() {
  std::array<SizeClassInfo, kNumClasses> classes{};
  struct Range {
    std::size_t limit, step;
  };
  // 8 B steps to 128 B, then (limit/2, limit] in eight steps up to 8 KiB and four above.
  int cl = 1;
  std::size_t size = 0;
  for (Range range{128, 8}; range.limit <= kMaxSmallSize;
       range = {2 * range.limit, range.limit / (range.limit < 8 * 1024 ? 8 : 4)}) {
    while (size < range.limit) {
      size += range.step;
      const std::uint16_t batch = BatchFor(size);
      const std::uint16_t pages = PagesFor(size, batch);
      classes[cl] = SizeClassInfo{static_cast<std::uint32_t>(size), pages, batch,
                                  static_cast<std::uint16_t>(pages * kPageSize / size),
                                  TransferSlotsFor(size, batch)};
      ++cl;
    }
  }
  return classes;
}

}  // namespace size_class_detail

namespace size_class_detail {

constexpr std::size_t kIndexEntries = (kMaxIndexedSize >> 3) + 1;  // 4097
constexpr std::size_t kCoarseShift = 13;                           // 8 KiB steps above 32 KiB
constexpr std::size_t kCoarseEntries = (kMaxSmallSize >> kCoarseShift) + 1;  // 33

constexpr std::size_t IndexOf(std::size_t size) {
  return (size + 7) >> 3;
}
constexpr std::size_t CoarseIndexOf(std::size_t size) {
  return (size + (std::size_t{1} << kCoarseShift) - 1) >> kCoarseShift;
}

// Entry i serves sizes up to i << shift: the first class that holds that many bytes.
template <std::size_t kEntries>
constexpr std::array<std::uint8_t, kEntries> MakeIndex(
    const std::array<SizeClassInfo, kNumClasses>& classes, std::size_t shift) {
  std::array<std::uint8_t, kEntries> index{};
  int cl = 1;
  for (std::size_t i = 0; i < kEntries; ++i) {
    while (classes[cl].size < i << shift)
      ++cl;
    index[i] = static_cast<std::uint8_t>(cl);
  }
  return index;
}

// malloc's table: the same entries, but each size above 8 first rounded up to a multiple of 16
// (malloc must align every block for any type that fits in it; see dropin.h). A table of its own,
// rather than rounding the size before the lookup, keeps malloc's fast path as short as the C++
// API's. (Above the fine table the classes are multiples of 8 KiB: no rounding to do there.)
constexpr std::array<std::uint8_t, kIndexEntries> MakeMallocIndex(
    const std::array<std::uint8_t, kIndexEntries>& index) {
  std::array<std::uint8_t, kIndexEntries> malloc_index{};
  for (std::size_t i = 0; i < kIndexEntries; ++i) {
    const std::size_t rounded = i <= 1 ? i : (i + 1) & ~std::size_t{1};  // in 8-byte units
    malloc_index[i] = index[rounded];  // kMaxIndexedSize is a multiple of 16: rounded stays in
  }
  return malloc_index;
}

}  // namespace size_class_detail

inline constexpr std::array<SizeClassInfo, kNumClasses> kClasses = size_class_detail::MakeClasses();
inline constexpr std::array<std::uint8_t, size_class_detail::kIndexEntries> kClassIndex =
    size_class_detail::MakeIndex<size_class_detail::kIndexEntries>(kClasses, 3);
inline constexpr std::array<std::uint8_t, size_class_detail::kCoarseEntries> kCoarseClassIndex =
    size_class_detail::MakeIndex<size_class_detail::kCoarseEntries>(
        kClasses, size_class_detail::kCoarseShift);
inline constexpr std::array<std::uint8_t, size_class_detail::kIndexEntries> kMallocClassIndex =
    size_class_detail::MakeMallocIndex(kClassIndex);

static_assert(kClasses[kNumClasses - 1].size == kMaxSmallSize);
static_assert(kClasses[16].size == 128 && kClasses[17].size == 144);
static_assert(kMaxSmallSize % 16 == 0 && kMaxIndexedSize % 16 == 0);
static_assert([] {  // the coarse table's steps: no class falls inside one
  for (int cl = 1; cl < kNumClasses; ++cl)
    if (kClasses[cl].size > kMaxIndexedSize &&
        kClasses[cl].size % (std::size_t{1} << size_class_detail::kCoarseShift) != 0)
      return false;
  return true;
}());
// Hardened builds keep one bit per object of a span; the smallest class in one page is the most.
inline constexpr std::size_t kMaxObjectsPerSpan = 1024;
static_assert([] {
  for (int cl = 1; cl < kNumClasses; ++cl)
    if (kClasses[cl].objects > kMaxObjectsPerSpan || kClasses[cl].objects == 0) return false;
  return true;
}());

// Class of a small size (size <= kMaxSmallSize). Size 0 gets the 8-byte class, so it returns a
// unique pointer like any other. The fast paths call it only after checking size <=
// kMaxIndexedSize, so once inlined the compiler keeps one load and drops the coarse branch.
TIERPOOL_ALWAYS_INLINE std::size_t SizeToClass(std::size_t size) {
  if (size <= kMaxIndexedSize) return kClassIndex[size_class_detail::IndexOf(size)];
  return kCoarseClassIndex[size_class_detail::CoarseIndexOf(size)];
}
// The class malloc serves a small size from: that of the size rounded up to 16 (above 8 bytes).
// With the table of its own, one load; without it, the rounding first (four instructions more).
TIERPOOL_ALWAYS_INLINE std::size_t MallocSizeToClass(std::size_t size) {
  if constexpr (!kMallocClassTable)
    return SizeToClass(size <= 8 ? size : (size + 15) & ~std::size_t{15});
  if (size <= kMaxIndexedSize) return kMallocClassIndex[size_class_detail::IndexOf(size)];
  return SizeToClass(size);  // above the fine table every class is a multiple of 16 already
}
TIERPOOL_ALWAYS_INLINE std::size_t ClassSize(std::uint32_t cl) {
  return kClasses[cl].size;
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
