// The drop-in semantics: what glibc's malloc family and the C++ allocation operators promise,
// written once on top of the allocator.
//
// malloc_shim.cpp and new_delete.cpp only give these functions the standard names. Keeping the
// rules here, under names of their own, lets a test exercise every edge case without replacing the
// process's malloc, so the rules also run under ASan, TSan and valgrind (which bring their own
// malloc and cannot run beside a replacement).
//
// Where glibc and the C standard differ, glibc wins (programs on Linux were tested against it):
//   realloc(p, 0)      frees p and returns NULL (glibc; C23 leaves it undefined)
//   memalign(a, n)     a not a power of two is rounded up to one (glibc's implementation)
//   aligned_alloc(a,n) a not a power of two: NULL + EINVAL (C17 DR 460, glibc >= 2.38)
// and one deliberate difference: a block of 8 bytes or less is 8-byte aligned, not 16 (nothing of
// that size needs more; jemalloc and tcmalloc do the same). Everything larger is 16-byte aligned,
// as glibc and the x86-64 ABI promise.
#pragma once

#include <errno.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <new>

#include "allocator.h"
#include "tierpool/tierpool.h"

namespace tierpool::dropin {

// malloc, free and operator new/delete call the allocator's inline fast paths directly (not the C
// API's functions), so a preloaded malloc costs what a call of the C++ API costs.
namespace impl = tierpool::TIERPOOL_INTERNAL_NS;

inline constexpr std::size_t kMallocAlignment = 16;  // alignof(max_align_t) on x86-64

inline bool IsPowerOfTwo(std::size_t n) {
  return n != 0 && (n & (n - 1)) == 0;
}

// The size classes step by 8 bytes up to 128, so a 24-byte class holds objects 8 bytes apart.
// A malloc caller may store any 16-byte-aligned type in 24 bytes: rounding every request above
// 8 bytes to a multiple of 16 lands it in a class whose objects all start 16-byte aligned (a
// class whose size is a multiple of 16 packs its objects at multiples of that size from a page
// boundary). The fast paths do not round: their class comes from malloc's own class table
// (MallocSizeToClass), which has the rounding built in; the slow paths round the request.
// Requests too big to round are left alone: the allocator refuses them with ENOMEM.
inline std::size_t MallocRequest(std::size_t size) {
  if (size <= 8 || size > SIZE_MAX - (kMallocAlignment - 1)) return size;
  return (size + kMallocAlignment - 1) & ~(kMallocAlignment - 1);
}

// A large size (past the classes) needs no rounding: large blocks start on a page.
inline void* Malloc(std::size_t size) {
  return impl::Allocate<impl::MallocSizeToClass>(size);
}

inline void Free(void* ptr) {
  impl::Free(ptr);
}

inline void* Calloc(std::size_t count, std::size_t size) {
  std::size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return tierpool_calloc(1, MallocRequest(bytes));
}

inline void* Realloc(void* ptr, std::size_t size) {
  if (ptr == nullptr) return Malloc(size);
  if (size == 0) {  // glibc: the block is freed and the caller gets NULL
    impl::Free(ptr);
    return nullptr;
  }
  // A small block shrinks in place while it stays at least half used: C callers free without a
  // size, so it may keep its larger class (the C++ API's realloc moves it to the new size's
  // class, for the sake of a later sized free). A large one is the allocator's to resize: in
  // place whenever it can, its tail given back when it shrinks.
  const std::size_t request = MallocRequest(size);
  if (const std::uint32_t cl = impl::page_map.ClassOf(ptr); cl != 0) {
    const std::size_t usable = impl::ClassSize(cl);
    if (request <= usable && request >= usable / 2) return ptr;
  }
  return tierpool_realloc(ptr, request);
}

inline void* ReallocArray(void* ptr, std::size_t count, std::size_t size) {
  std::size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;  // ptr is left untouched
    return nullptr;
  }
  return Realloc(ptr, bytes);
}

// `alignment` is a power of two. Alignments malloc already gives take malloc's faster path.
inline void* AlignedAllocate(std::size_t alignment, std::size_t size) {
  if (alignment <= 8 || (alignment <= kMallocAlignment && size > 8)) return Malloc(size);
  return tierpool_aligned_alloc(alignment, size);
}

inline void* AlignedAlloc(std::size_t alignment, std::size_t size) {
  if (!IsPowerOfTwo(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return AlignedAllocate(alignment, size);
}

// glibc's memalign: an alignment that is no power of two is rounded up to the next one; one too
// large to round is EINVAL.
inline void* Memalign(std::size_t alignment, std::size_t size) {
  constexpr std::size_t kLargestAlignment = SIZE_MAX / 2 + 1;
  if (alignment > kLargestAlignment) {
    errno = EINVAL;
    return nullptr;
  }
  if (!IsPowerOfTwo(alignment)) {
    alignment = alignment == 0 ? 1 : std::size_t{1} << (64 - __builtin_clzll(alignment));
  }
  return AlignedAllocate(alignment, size);
}

// POSIX: errors are returned, errno is left as it was, and *memptr is written only on success.
inline int PosixMemalign(void** memptr, std::size_t alignment, std::size_t size) {
  if (!IsPowerOfTwo(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  const int saved_errno = errno;
  void* block = AlignedAllocate(alignment, size);
  errno = saved_errno;
  if (block == nullptr) return ENOMEM;
  *memptr = block;
  return 0;
}

inline std::size_t PageSize() {
  return static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

inline void* Valloc(std::size_t size) {
  return AlignedAllocate(PageSize(), size);
}

// pvalloc rounds the size up to whole pages (0 becomes one page).
inline void* Pvalloc(std::size_t size) {
  const std::size_t page = PageSize();
  std::size_t rounded;
  if (__builtin_add_overflow(size == 0 ? 1 : size, page - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  return AlignedAllocate(page, rounded & ~(page - 1));
}

inline std::size_t UsableSize(const void* ptr) {
  return ptr == nullptr ? 0 : tierpool_usable_size(ptr);
}

// --- C++ operator new / delete ------------------------------------------------------------------
//
// Every form of `operator new` aligns as malloc does: 16 bytes for every block above 8. The
// standard asks less of the single-object forms (storage for an object of size n, whose
// alignment divides n: 8 for 40 bytes), but compiled code assumes more. Debian's libclang-cpp 14
// calls `operator new(40)` and zeroes bytes 16..31 of the result with `movaps`, an aligned
// 16-byte store: the compiler that built it took the result as aligned to
// __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16 on x86-64) whatever the size, and clang crashed on its
// first file when that block came back 8-aligned. glibc, jemalloc, tcmalloc and mimalloc all
// round small sizes to 16, and so does every form here, with its sized delete rounding the same
// way so that the allocator finds the class the block came from.
//
// malloc_shim.cpp and new_delete.cpp are built without exceptions: a noexcept function that may
// call a throwing one keeps a frame and cannot end in a tail call, which costs the fast paths a few
// instructions. What throws lives in dropin.cpp.

// The slow path of every operator new, taken only once the allocator has said no: call the
// new-handler and retry `request` bytes (already rounded) for as long as there is a handler
// ([new.delete.single]); without one, throw std::bad_alloc, or for the nothrow forms return
// nullptr (a handler that throws ends the nothrow forms the same way, as libstdc++ does).
// `alignment` 0 means the default alignment.
void* RetryNew(std::size_t request, std::size_t alignment, bool nothrow);
[[noreturn]] void ThrowBadAlloc();

// Everything operator new does past the thread's cache: the allocator's slow path, then
// RetryNew if that fails. Out of line, so that the fast path below needs nothing kept across a
// call: written as one function, the size must survive the call to the allocator's slow path for
// RetryNew, and every call then pays for a stack frame: 7 instructions more than the 22 of the
// path (callgrind, W1 preloaded).
void* NewSlow(std::size_t request, bool nothrow);

inline void* OperatorNew(std::size_t size) {
  if (void* block = impl::TryAllocateCached<impl::MallocSizeToClass>(size)) return block;
  return NewSlow(MallocRequest(size), false);
}

inline void* OperatorNewNothrow(std::size_t size) noexcept {
  if (void* block = impl::TryAllocateCached<impl::MallocSizeToClass>(size)) return block;
  return NewSlow(MallocRequest(size), true);
}

// An alignment that is not a power of two cannot be served: std::bad_alloc (as libstdc++ does),
// or nullptr for the nothrow form.
inline void* OperatorNewAligned(std::size_t size, std::size_t alignment) {
  if (!IsPowerOfTwo(alignment)) ThrowBadAlloc();
  void* block = AlignedAllocate(alignment, size);
  if (__builtin_expect(block != nullptr, 1)) return block;
  return RetryNew(size, alignment, false);
}

inline void* OperatorNewAlignedNothrow(std::size_t size, std::size_t alignment) noexcept {
  if (!IsPowerOfTwo(alignment)) return nullptr;
  void* block = AlignedAllocate(alignment, size);
  if (__builtin_expect(block != nullptr, 1)) return block;
  return RetryNew(size, alignment, true);
}

inline void OperatorDelete(void* ptr) noexcept {
  impl::Free(ptr);
}

// Sized delete passes the size the program asked for, which malloc's class table rounds as
// operator new did, so the allocator finds the size class without a page-map lookup.
inline void OperatorDeleteSized(void* ptr, std::size_t size) noexcept {
  impl::FreeSized<impl::MallocSizeToClass>(ptr, size);
}

}  // namespace tierpool::dropin
