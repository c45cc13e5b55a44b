// PageMap: page number -> Span*, and page number -> size class, over the whole 48-bit address
// space, as a two-level radix tree.
//
//   address:  | 20 bits: root index | 15 bits: leaf index | 13 bits: offset in page |
//
// The root is 2^20 pointers (8 MiB of zero-filled .bss: the OS backs only the parts touched).
// A leaf covers 2^15 pages = 256 MiB and is mapped only when the heap first grows into that
// range: the article's lesson that eagerly clearing a big flat array (its memset at 33 % of the
// profile) is what makes a naive page map slow. Fresh anonymous mappings are already zero, so a
// leaf costs no memset at all.
//
// Reads take no lock (free() looks up the span of any pointer): entries are relaxed atomics,
// leaves are published with release and read with acquire. Writes happen under the page heap's
// lock, except leaf creation, which is a compare-and-swap.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "config.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

struct Span;

class PageMap {
 public:
  static constexpr int kLeafBits = 15;
  static constexpr int kRootBits = kPageNumberBits - kLeafBits;  // 20
  static constexpr std::size_t kLeafEntries = std::size_t{1} << kLeafBits;
  static constexpr std::size_t kRootEntries = std::size_t{1} << kRootBits;
  static constexpr std::size_t kPagesPerRegion = kRegionSize / kPageSize;         // 256
  static constexpr std::size_t kRegionsPerLeaf = kLeafEntries / kPagesPerRegion;  // 128

  constexpr PageMap() = default;
  PageMap(const PageMap&) = delete;
  PageMap& operator=(const PageMap&) = delete;

  // Makes sure leaves exist for pages [first, first + count); false when the OS refuses memory.
  bool Ensure(std::uintptr_t first, std::size_t count);

  // nullptr for a page never set, or outside the 48-bit space.
  Span* Get(std::uintptr_t page) const {
    const Leaf* leaf = LeafOf(page);
    return leaf ? leaf->spans[page & (kLeafEntries - 1)].load(std::memory_order_relaxed) : nullptr;
  }
  // The leaf must exist (Ensure).
  void Set(std::uintptr_t page, Span* span) {
    LeafOf(page)->spans[page & (kLeafEntries - 1)].store(span, std::memory_order_relaxed);
  }

  // Size class of the object at `address`; 0 for a page of no small-object span (large span,
  // free page, not ours).
  TIERPOOL_ALWAYS_INLINE std::uint32_t ClassOf(const void* address) const {
    const auto page = reinterpret_cast<std::uintptr_t>(address) >> kPageShift;
    const Leaf* leaf = LeafOf(page);
    return leaf ? leaf->classes[page & (kLeafEntries - 1)].load(std::memory_order_relaxed) : 0;
  }
  void SetClass(std::uintptr_t page, std::uint32_t cl) {
    LeafOf(page)->classes[page & (kLeafEntries - 1)].store(static_cast<std::uint8_t>(cl),
                                                           std::memory_order_relaxed);
  }

  // Regions (2 MiB) the heap mapped from the OS: what tierpool_owns answers from.
  void MarkMapped(std::uintptr_t address, std::size_t bytes);
  bool Owns(const void* address) const;

  std::size_t LeavesAllocated() const { return leaves_.load(std::memory_order_relaxed); }

 private:
  struct Leaf {
    std::atomic<Span*> spans[kLeafEntries];
    std::atomic<std::uint8_t> classes[kLeafEntries];
    std::atomic<std::uint64_t> mapped[kRegionsPerLeaf / 64];
  };

 public:
  static constexpr std::size_t kLeafBytes = sizeof(Leaf);

 private:
  TIERPOOL_ALWAYS_INLINE Leaf* LeafOf(std::uintptr_t page) const {
    const std::uintptr_t index = page >> kLeafBits;
    if (TIERPOOL_UNLIKELY(index >= kRootEntries)) return nullptr;
    return root_[index].load(std::memory_order_acquire);
  }

  std::atomic<Leaf*> root_[kRootEntries] = {};
  std::atomic<std::size_t> leaves_{0};
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
