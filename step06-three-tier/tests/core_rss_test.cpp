// Memory goes back to the OS: after a 1 GiB working set of mixed sizes is allocated, touched
// and freed, the process's resident set (from /proc/self/statm) is back within 64 MiB of where
// it started. Free memory stays warm for the release delay (10 ms: a program that
// allocates in waves does not pay page faults every wave), then goes back: the release thread
// sees to it, and so does the next call that reaches the page heap (here tierpool_thread_flush,
// as at thread exit). Sanitizers keep shadow
// memory for every byte ever touched, so under them the test checks the allocator's own counters
// instead of the RSS.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core_test_util.h"
#include "tierpool/tierpool.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A mix in the shape of real heaps: many small blocks, some medium, a few large.
std::size_t MixedSize(std::mt19937& rng) {
  const unsigned r = rng() % 100;
  if (r < 60) return 8 + rng() % 1024;
  if (r < 90) return 1024 + rng() % (64 * 1024);
  if (r < 98) return 64 * 1024 + rng() % (192 * 1024);
  return 256 * 1024 + rng() % (4 * kMiB);
}

TEST(CoreRss, ResidentMemoryFallsBackAfterAFreedOneGibPeak) {
  const std::size_t working_set = core_test::UnderSanitizer() ? 256 * kMiB : 1024 * kMiB;
  std::mt19937 rng(42);
  std::vector<std::pair<void*, std::size_t>> blocks;
  blocks.reserve(200000);
  tierpool_thread_flush();
  const std::size_t rss_start = core_test::ResidentBytes();

  std::size_t total = 0;
  while (total < working_set) {
    const std::size_t size = MixedSize(rng);
    void* p = tierpool_malloc(size);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5a, size);  // resident for real
    blocks.emplace_back(p, size);
    total += size;
  }
  const std::size_t rss_peak = core_test::ResidentBytes();
  const tierpool::Stats peak = tierpool::GetStats();
  EXPECT_GE(peak.bytes_in_use, working_set);

  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (auto [p, size] : blocks)
    tierpool_free_sized(p, size);
  blocks.clear();
  blocks.shrink_to_fit();
  tierpool_thread_flush();  // what thread exit does; the test thread lives on
  const std::size_t rss_at_once = core_test::ResidentBytes();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the release delay
  tierpool_thread_flush();

  const std::size_t rss_end = core_test::ResidentBytes();
  const tierpool::Stats end = tierpool::GetStats();
  std::printf(
      "rss start %zu MiB, peak %zu MiB, at once after free %zu MiB, after the delay %zu MiB; "
      "free backed %zu MiB, central %zu MiB, released %zu MiB\n",
      rss_start / kMiB, rss_peak / kMiB, rss_at_once / kMiB, rss_end / kMiB,
      end.page_heap_free_bytes / kMiB, end.central_cache_bytes / kMiB, end.released_bytes / kMiB);
  EXPECT_LT(end.bytes_in_use, 1 * kMiB);
  EXPECT_EQ(end.thread_cache_bytes, 0u);
  EXPECT_GE(end.released_bytes, working_set - 64 * kMiB);
  if (!core_test::UnderSanitizer()) {
    EXPECT_GE(rss_peak, rss_start + working_set / 2);
    EXPECT_LE(rss_end, rss_start + 64 * kMiB);
  }
}

}  // namespace
