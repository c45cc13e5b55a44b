// Large blocks (over 256 KiB, or aligned past a page: whole spans of the page heap) and what
// treats small and large blocks alike: aligned allocation, calloc (with its zero tracking),
// realloc, the usable size, and the free of anything the page map has no class for.
#include <cerrno>
#include <cstring>

#include "allocator.h"
#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

namespace {

// The large span whose block starts at ptr, or nullptr.
Span* LargeSpanOf(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if ((address & (kPageSize - 1)) != 0) return nullptr;
  Span* span = page_map.Get(address >> kPageShift);
  if (span == nullptr || span->state != SpanState::kLarge ||
      span->first_page != address >> kPageShift)
    return nullptr;
  return span;
}

void FreeLarge(Span* span, FreedPages pages = FreedPages::kRecent) {
  ToolsOnFree(span->start(), span->bytes());
  Globals& g = G();
  g.page_heap.AccountLarge(-static_cast<std::ptrdiff_t>(span->bytes()));
  g.page_heap.Delete(span, pages);
  Tick();
}

// A whole span of at least `size` bytes for the user, `room` pages left free after it where
// possible (see PageHeap::New); nullptr + ENOMEM when it cannot be had.
Span* NewLargeSpan(std::size_t size, std::size_t alignment, std::size_t room = 0) {
  if (size > kMaxRequest || alignment > kMaxRequest) {
    errno = ENOMEM;
    return nullptr;
  }
  EnsureInit();
  Globals& g = G();
  std::size_t pages = (size + kPageSize - 1) >> kPageShift;
  if (pages == 0) pages = 1;
  Span* span = alignment > kPageSize
                   ? g.page_heap.NewAligned(pages, alignment >> kPageShift, SpanState::kLarge)
                   : g.page_heap.New(pages, SpanState::kLarge, room);
  if (span == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  g.page_heap.AccountLarge(static_cast<std::ptrdiff_t>(span->bytes()));
  ToolsOnAllocate(span->start(), span->bytes());
  Tick();
  return span;
}

}  // namespace

// Sizes above the fast path's table: a class from the coarse one up to kMaxSmallSize (the same
// for malloc, whose rounding to 16 changes nothing there), a whole span above.
void* AllocateSlow(std::size_t size) {
  if (size <= kMaxSmallSize) return AllocateClass(tls_cache, SizeToClass(size));
  return AllocateLarge(size, kPageSize);
}

void* AllocateLarge(std::size_t size, std::size_t alignment) {
  Span* span = NewLargeSpan(size, alignment);
  return span != nullptr ? span->start() : nullptr;
}

void FreeSlow(void* ptr) {
  if (ptr == nullptr) return;
  const std::uint32_t cl = page_map.ClassOf(ptr);
  if (cl == 0) {
    Span* span = LargeSpanOf(ptr);
    if (span == nullptr) ReportBadFree(ptr);
    FreeLarge(span);
    return;
  }
  PushFree(tls_cache, ptr, cl);
}

// A sized free past the fine table: the class from the coarse one, as for a size the fast path
// looks up (so the hardened build still checks the size against the block), or a large block.
void FreeSizedSlow(void* ptr, std::size_t size) {
  if (ptr != nullptr && size <= kMaxSmallSize) return PushFree(tls_cache, ptr, SizeToClass(size));
  FreeSlow(ptr);
}

void* AlignedAllocate(std::size_t size, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (alignment <= alignof(std::max_align_t) / 2)
    return Allocate(size);  // every class is 8-aligned
  if (size <= kMaxSmallSize && alignment <= kPageSize) {
    // Spans start on a page boundary, so a class whose size is a multiple of the alignment
    // has every object aligned. The first such class at or above the size: none is below the
    // alignment's own class, and a mask, not a division, tests each (a `div` a class was most of
    // this function's time in a churn of 16- to 4096-aligned blocks).
    for (std::uint32_t cl = SizeToClass(size > alignment ? size : alignment); cl < kNumClasses;
         ++cl) {
      if ((ClassSize(cl) & (alignment - 1)) == 0) return AllocateClass(tls_cache, cl);
    }
  }
  return AllocateLarge(size, alignment > kPageSize ? alignment : kPageSize);
}

void* Calloc(std::size_t n, std::size_t size) {
  std::size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (total > kMaxSmallSize) {
    // Pages fresh from the OS, or given back to it, read as zero: clearing them would only make
    // every page of a big sparse table resident.
    Span* span = NewLargeSpan(total, kPageSize);
    if (span == nullptr) return nullptr;
    if (!span->zeroed || kToolsWatchMemory) std::memset(span->start(), 0, total);
    return span->start();
  }
  void* ptr = Allocate(total);
  if (ptr != nullptr) std::memset(ptr, 0, total);
  return ptr;
}

std::size_t UsableSize(const void* ptr) {
  if (ptr == nullptr) return 0;
  const std::uint32_t cl = page_map.ClassOf(ptr);
  if (cl != 0) return ClassSize(cl);
  const Span* span = LargeSpanOf(ptr);
  if (span == nullptr) {
    if constexpr (kHardened) Fatal("usable size of a pointer that is not a live block", ptr);
    return 0;
  }
  return span->bytes();
}

namespace {

// The block at `ptr` (`old_usable` bytes) to a fresh one of `size` bytes, by copying.
void* ReallocByCopy(void* ptr, std::size_t old_usable, std::size_t size) {
  void* fresh = Allocate(size);
  if (fresh == nullptr) return nullptr;  // errno is ENOMEM, ptr untouched
  std::memcpy(fresh, ptr, size < old_usable ? size : old_usable);
  Free(ptr);
  return fresh;
}

// A large block that needs more pages than follow it: to a new span with as much room again
// after it (so a buffer grown step by step moves O(log n) times, not once per step), its pages
// moved there by the kernel rather than copied when it is big.
void* MoveLarge(Span* span, std::size_t size) {
  const std::size_t old_bytes = span->bytes();
  const std::size_t pages = (size + kPageSize - 1) >> kPageShift;
  Span* fresh = NewLargeSpan(size, kPageSize, pages);
  if (fresh == nullptr) return nullptr;
  if (!kToolsWatchMemory && old_bytes >= kMovePagesMinBytes &&
      OsMovePages(span->start(), fresh->start(), old_bytes)) {
    FreeLarge(span, FreedPages::kZero);
  } else {
    std::memcpy(fresh->start(), span->start(), old_bytes);
    FreeLarge(span);
  }
  return fresh->start();
}

}  // namespace

void* Realloc(void* ptr, std::size_t size) {
  if (ptr == nullptr) return Allocate(size);
  if (size > kMaxRequest) {
    errno = ENOMEM;
    return nullptr;
  }
  const std::uint32_t cl = page_map.ClassOf(ptr);
  if (cl != 0) {
    // Stay in place only within the same class: a later sized free with the new size must find
    // the class the block really lives in.
    if (size <= kMaxSmallSize && SizeToClass(size) == cl) return ptr;
    return ReallocByCopy(ptr, ClassSize(cl), size);
  }
  Span* span = LargeSpanOf(ptr);
  if (span == nullptr) ReportBadFree(ptr);
  if (size <= kMaxSmallSize) return ReallocByCopy(ptr, span->bytes(), size);
  // Within its own pages a block needs nothing: a buffer grown a few bytes at a time (a string
  // appended to by realloc) crosses a page boundary once every kPageSize bytes, and only then
  // takes the page heap's lock.
  const std::size_t pages = (size + kPageSize - 1) >> kPageShift;
  if (pages == span->num_pages) return ptr;
  // In place when the pages after it are free (growing) or always (shrinking: the tail goes
  // back to the page heap, and to the OS after the release delay).
  const std::size_t old_bytes = span->bytes();
  if (G().page_heap.Resize(span, pages)) {
    G().page_heap.AccountLarge(static_cast<std::ptrdiff_t>(span->bytes()) -
                               static_cast<std::ptrdiff_t>(old_bytes));
    ToolsOnResize(ptr, old_bytes, span->bytes());
    Tick();
    return ptr;
  }
  return MoveLarge(span, size);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
