// Bad pointers handed back: what every build reports (a pointer that is not ours, or not the
// start of a live block), and the hardened builds' checks (one live bit per object in its span).
#include "allocator.h"
#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

[[noreturn]] void ReportBadFree(const void* ptr) {
  if (!page_map.Owns(ptr)) Fatal("free of a pointer this allocator never returned", ptr);
  Fatal("double free, or free of a pointer that is not the start of a block", ptr);
}

#if TIERPOOL_HARDENED
namespace {
struct ObjectSlot {
  Span* span;
  std::size_t index;
};

ObjectSlot SlotOf(void* ptr, std::uint32_t cl, bool freeing) {
  if (!page_map.Owns(ptr)) Fatal("free of a pointer this allocator never returned", ptr);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  Span* span = page_map.Get(address >> kPageShift);
  if (span == nullptr || span->state != SpanState::kSmall) ReportBadFree(ptr);
  if (span->size_class != cl) {
    if (freeing) Fatal("sized free with a size that does not match the allocation", ptr);
    Fatal("heap corrupted: a free list leads into a span of another class", ptr);
  }
  const std::size_t offset = address - reinterpret_cast<std::uintptr_t>(span->start());
  const std::size_t size = ClassSize(cl);
  if (offset % size != 0 || offset / size >= kClasses[cl].objects) {
    Fatal("free of a pointer inside a block, not at its start", ptr);
  }
  return ObjectSlot{span, offset / size};
}
}  // namespace

void HardenedOnAllocate(void* ptr, std::uint32_t cl) {
  if (!FreePatternIntact(ptr, ClassSize(cl))) Fatal("block was written after it was freed", ptr);
  const ObjectSlot slot = SlotOf(ptr, cl, false);
  const std::uint64_t bit = std::uint64_t{1} << (slot.index % 64);
  if (slot.span->live[slot.index / 64].fetch_or(bit, std::memory_order_relaxed) & bit) {
    Fatal("heap corrupted: a free list holds a block that is in use", ptr);
  }
}

void HardenedOnFree(void* ptr, std::uint32_t cl_from_size) {
  const ObjectSlot slot = SlotOf(ptr, cl_from_size, true);
  const std::uint64_t bit = std::uint64_t{1} << (slot.index % 64);
  if (!(slot.span->live[slot.index / 64].fetch_and(~bit, std::memory_order_relaxed) & bit)) {
    Fatal("double free", ptr);
  }
}
#else
void HardenedOnAllocate(void*, std::uint32_t) {}
void HardenedOnFree(void*, std::uint32_t) {}
#endif

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
