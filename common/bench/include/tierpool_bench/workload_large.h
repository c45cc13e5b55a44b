// The large-block workload: what buffers, images and arrays do to an allocator. Blocks of
// 64 KiB to 1 MiB sit above the small-object caches of every allocator (tcmalloc's and
// tierpool's classes end at 256 KiB, glibc's mmap threshold starts at 128 KiB), so this measures
// the page level: finding runs of pages, reusing them, and what giving memory back to the OS
// costs when the memory is used again (page faults).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierpool_bench/harness.h"
#include "tierpool_bench/workloads.h"

namespace tierpool::bench {

// "large": each of T threads, per round, allocates 64 blocks of random sizes 64 KiB..1 MiB
// (about 34 MiB), writes one word in every 4 KiB page of each (so the memory is really used),
// and frees them in random order; 20 rounds. Sizes and order come from a fixed seed per thread
// and are drawn before the clock starts.
struct LargeWorkload {
  static constexpr const char* kName = "large";
  static constexpr std::size_t kMinSize = 64 * 1024;
  static constexpr std::size_t kMaxSize = 1024 * 1024;
  static constexpr std::size_t kTouchStride = 4096;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : (options.smoke ? 2 : 20);
    const std::size_t count = options.smoke ? 8 : 64;
    std::vector<SizedPlan> plans = MakeSizedPlans(threads, count, 4242u, kMinSize, kMaxSize);
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      SizedPlan& plan = plans[t];
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < count; ++i) {
          auto* block = static_cast<char*>(alloc.Allocate(plan.sizes[i]));
          for (std::size_t offset = 0; offset < plan.sizes[i]; offset += kTouchStride)
            TouchBlock(block + offset, i);
          plan.blocks[i] = block;
        }
        for (std::uint32_t i : plan.free_order)
          alloc.Deallocate(plan.blocks[i], plan.sizes[i]);
        alloc.EndRound();
      }
    });
    return {std::uint64_t(threads) * rounds * count, wall};
  }
};

}  // namespace tierpool::bench
