// The public API: the C functions the drop-in layer forwards to, and the C++ names of the
// chapter. Each is a thin wrapper over an inline fast path of allocator.h.
#include <cerrno>

#include "allocator.h"
#include "os.h"
#include "tierpool/tierpool.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {
void GetStats(tierpool_stats* out);
void PrintStats(int fd);
}  // namespace tierpool::TIERPOOL_INTERNAL_NS

namespace impl = tierpool::TIERPOOL_INTERNAL_NS;

extern "C" {

void* tierpool_malloc(size_t size) {
  return impl::Allocate(size);
}
void tierpool_free(void* ptr) {
  impl::Free(ptr);
}
void tierpool_free_sized(void* ptr, size_t size) {
  if (size == 0) return impl::Free(ptr);  // 0: the size is not known (tierpool.h)
  impl::FreeSized(ptr, size);
}
void* tierpool_aligned_alloc(size_t alignment, size_t size) {
  return impl::AlignedAllocate(size, alignment);
}
void* tierpool_calloc(size_t n, size_t size) {
  return impl::Calloc(n, size);
}
void* tierpool_realloc(void* ptr, size_t size) {
  return impl::Realloc(ptr, size);
}
size_t tierpool_usable_size(const void* ptr) {
  return impl::UsableSize(ptr);
}
void tierpool_get_stats(struct tierpool_stats* out) {
  if (out != nullptr) impl::GetStats(out);
}
void tierpool_print_stats(int fd) {
  impl::PrintStats(fd);
}
int tierpool_owns(const void* ptr) {
  return impl::page_map.Owns(ptr) ? 1 : 0;
}
void tierpool_thread_flush(void) {
  impl::FlushThreadCache();
}
size_t tierpool_release_free_memory(void) {
  return impl::ReleaseFreeMemory();
}
void tierpool_fork_prepare(void) {
  impl::ForkPrepare();
}
void tierpool_fork_parent(void) {
  impl::ForkParent();
}
void tierpool_fork_child(void) {
  impl::ForkChild();
}

}  // extern "C"

namespace tierpool {

void* ConcurrentAlloc(std::size_t size) {
  return impl::Allocate(size);
}
void ConcurrentFree(void* ptr) {
  impl::Free(ptr);
}
void ConcurrentFree(void* ptr, std::size_t size) {
  impl::FreeSized(ptr, size);
}
void* ConcurrentAlignedAlloc(std::size_t size, std::size_t alignment) {
  return impl::AlignedAllocate(size, alignment);
}
std::size_t UsableSize(const void* ptr) {
  return impl::UsableSize(ptr);
}
Stats GetStats() {
  Stats stats;
  impl::GetStats(&stats);
  return stats;
}

}  // namespace tierpool
