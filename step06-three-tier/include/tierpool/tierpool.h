// tierpool: a three-tier (thread cache / central cache / page heap) allocator.
//
// The C API below is what the drop-in layer (malloc/free/new/delete) forwards to; the C++ API in
// namespace tierpool is the same allocator under the names the chapter uses.
//
// Contract shared by every entry point (SPEC §6):
//  - size 0 returns a unique pointer that must be freed like any other;
//  - a request that cannot be served returns NULL and sets errno to ENOMEM, never a short block;
//  - an alignment that is not a power of two returns NULL and sets errno to EINVAL;
//  - freeing NULL does nothing.
#ifndef TIERPOOL_TIERPOOL_H_
#define TIERPOOL_TIERPOOL_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TIERPOOL_EXPORT __attribute__((visibility("default")))
#else
#define TIERPOOL_EXPORT
#endif

// A block is 8-aligned at least, and 16-aligned when size is a nonzero multiple of 16 or above 128
// bytes: what an object of that size can need. The drop-in malloc and operator new give 16 to
// every block above 8 bytes, as glibc does; here, ask tierpool_aligned_alloc(16, size) for it.
TIERPOOL_EXPORT void* tierpool_malloc(size_t size);
TIERPOOL_EXPORT void tierpool_free(void* ptr);
// Faster free when the caller knows the size it asked for (C++14 sized delete, free_sized).
// `size` must be the size passed to the allocating call; 0 falls back to tierpool_free.
TIERPOOL_EXPORT void tierpool_free_sized(void* ptr, size_t size);
// Any power-of-two alignment (also beyond a page). Non-power-of-two: NULL + EINVAL.
TIERPOOL_EXPORT void* tierpool_aligned_alloc(size_t alignment, size_t size);
// Zeroed memory; n * size overflowing returns NULL + ENOMEM.
TIERPOOL_EXPORT void* tierpool_calloc(size_t n, size_t size);
// realloc(NULL, n) == malloc(n); realloc(p, 0) frees p and returns a fresh size-0 block;
// on failure returns NULL + ENOMEM and leaves p untouched.
TIERPOOL_EXPORT void* tierpool_realloc(void* ptr, size_t size);
// Bytes usable at ptr (>= the size asked for); 0 for NULL.
TIERPOOL_EXPORT size_t tierpool_usable_size(const void* ptr);

struct tierpool_stats {
  size_t bytes_in_use;          // handed out to the program (by size class / span size)
  size_t thread_cache_bytes;    // free objects parked in thread caches
  size_t central_cache_bytes;   // free objects parked in central free lists / partial spans
                                // (a span's objects not yet handed out included)
  size_t page_heap_free_bytes;  // free spans still backed by memory (not released)
  size_t mapped_bytes;          // total mapped from the OS for user memory
  size_t released_bytes;        // mapped but returned to the OS with madvise(DONTNEED)
  size_t metadata_bytes;        // mapped for spans, thread caches and their arrays, page maps
  size_t large_bytes_in_use;    // part of bytes_in_use served as whole spans (> 256 KiB)
  size_t thread_caches;         // live thread caches
  size_t spans_in_use;          // spans holding at least one live object or a large block
};

// Counters are gathered without stopping other threads: each one is exact, their sum is not
// an atomic snapshot while other threads allocate.
TIERPOOL_EXPORT void tierpool_get_stats(struct tierpool_stats* out);
// Writes a human-readable report to fd (with write(2), no stdio, no allocation).
TIERPOOL_EXPORT void tierpool_print_stats(int fd);
// 1 when ptr lies inside memory tierpool mapped for user blocks, 0 otherwise. The drop-in layer
// uses it to route pointers it did not allocate (from before it was loaded) elsewhere.
TIERPOOL_EXPORT int tierpool_owns(const void* ptr);
// Returns the calling thread's cached free objects to the central cache.
TIERPOOL_EXPORT void tierpool_thread_flush(void);
// Gives every free byte back to the OS now, instead of after the release delay: the calling
// thread's cached objects, the caches exited threads left for the next ones, every batch parked
// in the central lists, every free page (madvise) and the address space of every whole free
// 2 MiB region (munmap). Returns the bytes given back.
// malloc_trim(0) calls it when the library replaces malloc.
TIERPOOL_EXPORT size_t tierpool_release_free_memory(void);

// Fork safety: take every allocator lock in a fixed order before fork and release them after,
// in the parent and in the child. The drop-in layer registers them with pthread_atfork.
TIERPOOL_EXPORT void tierpool_fork_prepare(void);
TIERPOOL_EXPORT void tierpool_fork_parent(void);
TIERPOOL_EXPORT void tierpool_fork_child(void);

#ifdef __cplusplus
}  // extern "C"

#include <cstddef>

namespace tierpool {

using Stats = ::tierpool_stats;

// Never returns nullptr for a serviceable size; returns nullptr (errno ENOMEM) when the OS
// refuses memory or the size cannot be represented.
TIERPOOL_EXPORT void* ConcurrentAlloc(std::size_t size);
TIERPOOL_EXPORT void ConcurrentFree(void* ptr);
// Sized free: skips the page-map lookup for small objects. `size` must be the size allocated.
TIERPOOL_EXPORT void ConcurrentFree(void* ptr, std::size_t size);
// Any power-of-two alignment; nullptr + EINVAL otherwise.
TIERPOOL_EXPORT void* ConcurrentAlignedAlloc(std::size_t size, std::size_t alignment);
TIERPOOL_EXPORT std::size_t UsableSize(const void* ptr);
TIERPOOL_EXPORT Stats GetStats();

}  // namespace tierpool
#endif  // __cplusplus

#endif  // TIERPOOL_TIERPOOL_H_
