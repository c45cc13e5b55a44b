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
// lock, except three: leaf creation, which is a compare-and-swap; the mapped bits of a region
// the heap just mapped, set before it takes the lock; and the entries of a small-object span's
// pages, written by the central cache while that span is its alone (carved, or about to go).
//
// PageMap has no constructor on purpose: a static one is all zeros from the loader (no code runs,
// so it works before main, and no compiler has to evaluate 2^20 constexpr initializations).
// Value-initialize one that is not static (`new PageMap()`).
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
  // Whole regions given back to the OS.
  void MarkUnmapped(std::uintptr_t address, std::size_t bytes);
  bool Owns(const void* address) const;

  std::size_t LeavesAllocated() const { return __atomic_load_n(&leaves_, __ATOMIC_RELAXED); }

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
    // The mask changes nothing at run time; it shows the compiler the index is in range (GCC's
    // -Wstringop-overflow otherwise looks at the path the check above has already cut off).
    return __atomic_load_n(&root_[index & (kRootEntries - 1)], __ATOMIC_ACQUIRE);
  }

  Leaf* root_[kRootEntries];  // written with compare-and-swap, read with acquire loads
  std::size_t leaves_;        // leaves created (relaxed atomic adds)
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
