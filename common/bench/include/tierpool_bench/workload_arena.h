// The per-request arena workload: what a server does while it handles one request. Many blocks
// of mixed sizes are allocated and used, and when the request is answered they all die at once.
// The allocator is a byte allocator of adapters.h; a round is one request:
//   Allocate every block of the request (and write into it), Deallocate them all (newest first,
//   the order in which a request's objects are destroyed), then EndRound(), where an arena
//   releases or rewinds everything in one go (for an arena Deallocate is typically a no-op).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "tierpool_bench/harness.h"
#include "tierpool_bench/workloads.h"  // TouchBlock

namespace tierpool::bench {

// "request": kPlans requests drawn once from a fixed seed, each of 256..1024 blocks whose sizes
// are log-uniform in 8 B..2 KiB (most blocks small, a few large: ~370 B on average, ~240 KiB a
// request), replayed in turn; 2000 requests per run. A pair is one block allocated and freed.
struct RequestWorkload {
  static constexpr const char* kName = "request";
  static constexpr std::size_t kMinSize = 8;
  static constexpr std::size_t kMaxSize = 2048;
  static constexpr int kPlans = 64;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : (options.smoke ? 4 : 2000);
    const std::size_t max_blocks = options.smoke ? 64 : 1024;
    std::vector<std::vector<std::vector<std::uint32_t>>> plans(threads);
    for (int t = 0; t < threads; ++t) {
      std::mt19937 rng(4242u + unsigned(t));
      std::uniform_int_distribution<std::size_t> blocks(max_blocks / 4, max_blocks);
      std::uniform_real_distribution<double> log_size(std::log(double(kMinSize)),
                                                      std::log(double(kMaxSize)));
      plans[t].resize(kPlans);
      for (auto& plan : plans[t]) {
        plan.resize(blocks(rng));
        for (auto& size : plan)
          size = std::uint32_t(std::lround(std::exp(log_size(rng))));
      }
    }
    std::vector<std::uint64_t> pairs(threads, 0);
    std::vector<std::vector<void*>> live(threads, std::vector<void*>(max_blocks));
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      std::vector<void*>& blocks = live[t];
      std::uint64_t done = 0;
      for (int r = 0; r < rounds; ++r) {
        const std::vector<std::uint32_t>& plan = plans[t][r % kPlans];
        for (std::size_t i = 0; i < plan.size(); ++i) {
          blocks[i] = alloc.Allocate(plan[i]);
          TouchBlock(blocks[i], i);
        }
        for (std::size_t i = plan.size(); i-- > 0;)
          alloc.Deallocate(blocks[i], plan[i]);
        alloc.EndRound();
        done += plan.size();
      }
      pairs[t] = done;
    });
    std::uint64_t total = 0;
    for (std::uint64_t p : pairs)
      total += p;
    return {total, wall};
  }
};

}  // namespace tierpool::bench
