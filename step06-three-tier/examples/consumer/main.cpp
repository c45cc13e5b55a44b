// tierpool used two ways at once: by name (the C++ API) and unknowingly (new, the standard
// containers and malloc all come from it once the library is linked).
#include <tierpool/tierpool.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

int main() {
  // By name: allocate, free with the size (the fast path), read the stats.
  void* block = tierpool::ConcurrentAlloc(100);
  void* aligned = tierpool::ConcurrentAlignedAlloc(1000, 64);
  if (block == nullptr || aligned == nullptr) return 1;
  tierpool::ConcurrentFree(block, 100);
  tierpool::ConcurrentFree(aligned);

  // Unknowingly: everything else in the program allocates from tierpool as well.
  std::map<std::string, std::vector<int>> index;
  for (int i = 0; i < 1000; ++i)
    index["key" + std::to_string(i % 97)].push_back(i);
  void* from_malloc = std::malloc(5000);
  const bool all_tierpool = tierpool_owns(from_malloc) && tierpool_owns(&*index.begin());
  std::free(from_malloc);
  if (!all_tierpool) {
    std::fprintf(stderr, "malloc and new are not served by tierpool\n");
    return 1;
  }

  const tierpool::Stats stats = tierpool::GetStats();
  std::printf("%zu keys; tierpool: %zu bytes in use, %zu mapped, %zu thread cache(s)\n",
              index.size(), stats.bytes_in_use, stats.mapped_bytes, stats.thread_caches);
  return 0;
}
