#include "page_map.h"

#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

bool PageMap::Ensure(std::uintptr_t first, std::size_t count) {
  if (count == 0) return true;
  const std::uintptr_t last = first + count - 1;
  if ((last >> kLeafBits) >= kRootEntries || last < first) return false;
  for (std::uintptr_t index = first >> kLeafBits; index <= (last >> kLeafBits); ++index) {
    if (__atomic_load_n(&root_[index], __ATOMIC_ACQUIRE) != nullptr) continue;
    auto* leaf = static_cast<Leaf*>(OsMap(sizeof(Leaf), 4096));
    if (leaf == nullptr) return false;
    Leaf* expected = nullptr;
    if (__atomic_compare_exchange_n(&root_[index], &expected, leaf, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      __atomic_fetch_add(&leaves_, 1, __ATOMIC_RELAXED);
    } else {
      // Another thread installed this leaf first; ours was never seen by anyone.
      OsUnmap(leaf, sizeof(Leaf));
    }
  }
  return true;
}

void PageMap::MarkMapped(std::uintptr_t address, std::size_t bytes) {
  for (std::uintptr_t region = address >> kRegionShift;
       region < (address + bytes + kRegionSize - 1) >> kRegionShift; ++region) {
    const std::uintptr_t page = region << (kRegionShift - kPageShift);
    Leaf* leaf = LeafOf(page);
    const std::size_t bit = (page & (kLeafEntries - 1)) / kPagesPerRegion;
    leaf->mapped[bit / 64].fetch_or(std::uint64_t{1} << (bit % 64), std::memory_order_release);
  }
}

void PageMap::MarkUnmapped(std::uintptr_t address, std::size_t bytes) {
  for (std::uintptr_t region = address >> kRegionShift; region < (address + bytes) >> kRegionShift;
       ++region) {
    const std::uintptr_t page = region << (kRegionShift - kPageShift);
    Leaf* leaf = LeafOf(page);
    const std::size_t bit = (page & (kLeafEntries - 1)) / kPagesPerRegion;
    leaf->mapped[bit / 64].fetch_and(~(std::uint64_t{1} << (bit % 64)), std::memory_order_release);
  }
}

bool PageMap::Owns(const void* address) const {
  const auto page = reinterpret_cast<std::uintptr_t>(address) >> kPageShift;
  const Leaf* leaf = LeafOf(page);
  if (leaf == nullptr) return false;
  const std::size_t bit = (page & (kLeafEntries - 1)) / kPagesPerRegion;
  return (leaf->mapped[bit / 64].load(std::memory_order_acquire) >> (bit % 64)) & 1;
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
