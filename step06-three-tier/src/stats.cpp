// Counters of every tier, gathered without stopping other threads.
#include <unistd.h>

#include "allocator.h"
#include "tierpool/tierpool.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

void GetStats(tierpool_stats* out) {
  *out = tierpool_stats{};
  if (init_state.load(std::memory_order_acquire) != 2) return;
  Globals& g = G();
  std::size_t central_bytes = 0;
  std::size_t handed_out_bytes = 0;  // to thread caches or to users
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    central_bytes += g.central[cl].FreeObjects() * ClassSize(cl);
    handed_out_bytes += g.central[cl].OutObjects() * ClassSize(cl);
  }
  std::size_t cache_bytes = 0;
  {
    SpinLockHolder hold(g.registry_lock);
    for (ThreadCache* tc = g.registry_head; tc != nullptr; tc = tc->registry_next)
      cache_bytes += tc->CachedBytes();
    out->thread_caches = g.thread_caches;
  }
  const PageHeapStats heap = g.page_heap.Stats();
  const std::size_t small_in_use =
      handed_out_bytes > cache_bytes ? handed_out_bytes - cache_bytes : 0;
  out->bytes_in_use = small_in_use + heap.large_in_use_bytes;
  out->thread_cache_bytes = cache_bytes;
  out->central_cache_bytes = central_bytes;
  out->page_heap_free_bytes = heap.free_backed_bytes;
  out->mapped_bytes = heap.mapped_bytes;
  out->released_bytes = heap.free_released_bytes;
  out->metadata_bytes = Metadata().MappedBytes() +
                        page_map.LeavesAllocated() * PageMap::kLeafBytes + SlotArena::MappedBytes();
  out->large_bytes_in_use = heap.large_in_use_bytes;
  out->spans_in_use = heap.spans_in_use;
}

namespace {
// A line of the report, formatted by hand: printf may allocate, and this runs inside malloc.
void WriteLine(int fd, const char* label, std::size_t value) {
  char text[96];
  std::size_t n = 0;
  for (const char* s = label; *s && n < 40; ++s)
    text[n++] = *s;
  while (n < 28)
    text[n++] = ' ';
  char digits[24];
  std::size_t d = 0;
  do {
    digits[d++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (d > 0)
    text[n++] = digits[--d];
  text[n++] = '\n';
  for (std::size_t done = 0; done < n;) {
    const ssize_t w = write(fd, text + done, n - done);
    if (w <= 0) return;
    done += static_cast<std::size_t>(w);
  }
}
}  // namespace

void PrintStats(int fd) {
  tierpool_stats s;
  GetStats(&s);
  WriteLine(fd, "tierpool bytes_in_use", s.bytes_in_use);
  WriteLine(fd, "  large_bytes_in_use", s.large_bytes_in_use);
  WriteLine(fd, "  thread_cache_bytes", s.thread_cache_bytes);
  WriteLine(fd, "  central_cache_bytes", s.central_cache_bytes);
  WriteLine(fd, "  page_heap_free_bytes", s.page_heap_free_bytes);
  WriteLine(fd, "  mapped_bytes", s.mapped_bytes);
  WriteLine(fd, "  released_bytes", s.released_bytes);
  WriteLine(fd, "  metadata_bytes", s.metadata_bytes);
  WriteLine(fd, "  thread_caches", s.thread_caches);
  WriteLine(fd, "  spans_in_use", s.spans_in_use);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
