// The big-block workloads: what real programs do with blocks far above every size class, where
// an allocator answers with its page level and its dealings with the OS.
//
//   realloc-grow    one buffer grown with realloc from 64 KiB to 256 MiB in 64 KiB steps, the new
//                   bytes written at each step (a growing std::string, Python's bytearray/BytesIO)
//   calloc-sparse   calloc(1 GiB), one byte read and written every 1 MiB, free (a sparse table)
//   release-64k     1 GiB allocated in 64 KiB blocks, every page written, all freed; then 100 ms of
//   release-1m      small malloc/free traffic, and the resident set at the end (a program after
//                   its peak: does the memory go back to the OS?). The same in 1 MiB blocks.
//
// One run is one pattern (one "pair" in ns_per_pair: ns_per_pair is the time of the whole
// pattern). Each entry runs once in a fresh process (kOneShot): the figures that matter are the
// process's resident set, and a second run would start from the heap the first one left.
//
// They need realloc and calloc: an allocator takes part only if it has
//   void* Reallocate(void* p, std::size_t old_bytes, std::size_t new_bytes);
//   void* AllocateZeroed(std::size_t bytes);
// beside the usual calls (adapters.h). The baseline has neither, and is not registered.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tierpool_bench/harness.h"
#include "tierpool_bench/workloads.h"

namespace tierpool::bench {

template <class A>
concept ResizingAllocator = requires(A& alloc, void* p, std::size_t bytes) {
  { alloc.Allocate(bytes) } -> std::same_as<void*>;
  alloc.Deallocate(p, bytes);
  alloc.EndRound();
  { alloc.Reallocate(p, bytes, bytes) } -> std::same_as<void*>;
  { alloc.AllocateZeroed(bytes) } -> std::same_as<void*>;
};

namespace detail {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
constexpr std::size_t kGiB = 1024 * kMiB;

// A wrong result is not a slow one: the run stops and says why.
[[noreturn]] inline void BigBlockFailed(const char* workload, const char* what) {
  std::fprintf(stderr, "%s: %s\n", workload, what);
  std::abort();
}

}  // namespace detail

// "realloc-grow": one buffer, 64 KiB to 256 MiB in 64 KiB steps, each step a realloc and a
// memset of the 64 KiB it added. The time is the whole growth and the final free; the counter
// `moves` is how many reallocs returned another address than the block they were given (each one
// a copy of everything so far). A growth that has not reached 256 MiB after kBudgetNs stops there
// (an allocator that copies at every step needs minutes), and `stopped_at_kib` says how far it
// got (the counter is there only then).
struct GrowWorkload {
  static constexpr const char* kName = "realloc-grow";
  static constexpr bool kOneShot = true;
  static constexpr std::size_t kStep = 64 * detail::kKiB;
  static constexpr std::size_t kFinalSize = 256 * detail::kMiB;
  static constexpr std::uint64_t kBudgetNs = 10'000'000'000;

  // Chunk k of the buffer holds this byte: never 0, so memory that was not copied shows.
  static unsigned char ChunkByte(std::size_t chunk) {
    return static_cast<unsigned char>(chunk % 251 + 1);
  }

  template <ResizingAllocator Alloc>
  static RunResult Run(Alloc& alloc, int /*threads*/, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : 1;
    const std::size_t final_size = options.smoke ? detail::kMiB : kFinalSize;
    std::uint64_t wall = 0;
    std::uint64_t moves = 0;
    std::size_t stopped_at = 0;
    for (int r = 0; r < rounds; ++r) {
      const std::uint64_t start = NowNs();
      auto* buffer = static_cast<unsigned char*>(alloc.Allocate(kStep));
      if (buffer == nullptr) detail::BigBlockFailed(kName, "malloc(64 KiB) failed");
      std::memset(buffer, ChunkByte(0), kStep);
      std::size_t size = kStep;
      while (size < final_size) {
        void* grown = alloc.Reallocate(buffer, size, size + kStep);
        if (grown == nullptr) detail::BigBlockFailed(kName, "realloc failed");
        if (grown != buffer) ++moves;
        buffer = static_cast<unsigned char*>(grown);
        std::memset(buffer + size, ChunkByte(size / kStep), kStep);
        size += kStep;
        if (!options.smoke && NowNs() - start > kBudgetNs) break;
      }
      KeepAlive(buffer);
      wall += NowNs() - start;
      // Outside the clock: every chunk still holds its byte at both ends, so a realloc that
      // lost what it should have copied cannot pass for a fast one.
      for (std::size_t chunk = 0; chunk < size / kStep; ++chunk) {
        if (buffer[chunk * kStep] != ChunkByte(chunk) ||
            buffer[chunk * kStep + kStep - 1] != ChunkByte(chunk)) {
          detail::BigBlockFailed(kName, "realloc did not keep the buffer's contents");
        }
      }
      const std::uint64_t free_start = NowNs();
      alloc.Deallocate(buffer, size);
      wall += NowNs() - free_start;
      alloc.EndRound();
      if (size < final_size) stopped_at = size;
    }
    RunResult result(std::uint64_t(rounds), wall);
    result.counters = {{"moves", double(moves) / double(rounds)}};
    if (stopped_at != 0)
      result.counters.emplace_back("stopped_at_kib", double(stopped_at) / double(detail::kKiB));
    return result;
  }
};

// "calloc-sparse": calloc(1 GiB), then one byte read (it must be 0) and written every 1 MiB, as a
// sparse hash table or a bitmap indexed by id touches its slots, then free. 1024 pages touched:
// an allocator that takes fresh pages from the OS (already zero) makes 4 MiB resident, one that
// clears the whole block makes the whole gigabyte resident. Its figure is the peak RSS.
struct CallocSparseWorkload {
  static constexpr const char* kName = "calloc-sparse";
  static constexpr bool kOneShot = true;
  static constexpr std::size_t kSize = detail::kGiB;
  static constexpr std::size_t kStride = detail::kMiB;

  template <ResizingAllocator Alloc>
  static RunResult Run(Alloc& alloc, int /*threads*/, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : 1;
    const std::size_t size = options.smoke ? 8 * detail::kMiB : kSize;
    const std::uint64_t start = NowNs();
    for (int r = 0; r < rounds; ++r) {
      auto* table = static_cast<volatile unsigned char*>(alloc.AllocateZeroed(size));
      if (table == nullptr) detail::BigBlockFailed(kName, "calloc(1 GiB) failed");
      for (std::size_t offset = 0; offset < size; offset += kStride) {
        if (table[offset] != 0) detail::BigBlockFailed(kName, "calloc returned memory not zero");
        table[offset] = 1;
      }
      alloc.Deallocate(const_cast<unsigned char*>(table), size);
      alloc.EndRound();
    }
    return {std::uint64_t(rounds), NowNs() - start};
  }
};

// "release-64k" and "release-1m": 1 GiB allocated in blocks of kBlock bytes, one word written in
// every 4 KiB page (so it is all resident), all freed in allocation order: that is the timed
// part. Then, untimed, 100 ms of small traffic (a working set of 1000 blocks of 16..512 bytes,
// one freed and one allocated per step), as the program goes on after its peak; an allocator that
// releases memory lazily (on a timer, or every N calls) gets the chance to do it here. At the end
// the counter `end_rss_kib` is the resident set now (not the peak), `rss_after_free_kib` the same
// just after the frees.
template <std::size_t kBlock>
struct ReleaseWorkload {
  static_assert(kBlock == 64 * detail::kKiB || kBlock == detail::kMiB);
  static constexpr const char* kName = kBlock == detail::kMiB ? "release-1m" : "release-64k";
  static constexpr bool kOneShot = true;
  static constexpr std::size_t kTotal = detail::kGiB;
  static constexpr std::size_t kTouchStride = 4096;
  static constexpr std::uint64_t kTrafficNs = 100'000'000;
  static constexpr std::size_t kWorkingSet = 1000;
  static constexpr std::size_t kMinSmall = 16;
  static constexpr std::size_t kMaxSmall = 512;

  template <ResizingAllocator Alloc>
  static RunResult Run(Alloc& alloc, int /*threads*/, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : 1;
    const std::size_t count = (options.smoke ? 16 * detail::kMiB : kTotal) / kBlock;
    const std::uint64_t traffic_ns = options.smoke ? kTrafficNs / 100 : kTrafficNs;
    std::vector<void*> blocks(count);
    // The small traffic's steps, drawn before the clock: which slot, and the new block's size.
    std::mt19937 rng(7070u);
    std::uniform_int_distribution<std::size_t> slot_of(0, kWorkingSet - 1);
    std::uniform_int_distribution<std::size_t> size_of(kMinSmall, kMaxSmall);
    std::vector<std::uint32_t> steps(4096);
    std::vector<std::uint32_t> step_sizes(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i) {
      steps[i] = std::uint32_t(slot_of(rng));
      step_sizes[i] = std::uint32_t(size_of(rng));
    }
    std::vector<void*> live(kWorkingSet, nullptr);
    std::vector<std::size_t> live_sizes(kWorkingSet, 0);

    std::uint64_t wall = 0;
    double rss_after_free = 0.0;
    double end_rss = 0.0;
    for (int r = 0; r < rounds; ++r) {
      const std::uint64_t start = NowNs();
      for (std::size_t i = 0; i < count; ++i) {
        auto* block = static_cast<char*>(alloc.Allocate(kBlock));
        if (block == nullptr) detail::BigBlockFailed(kName, "malloc failed");
        for (std::size_t offset = 0; offset < kBlock; offset += kTouchStride)
          TouchBlock(block + offset, i);
        blocks[i] = block;
      }
      for (void* block : blocks)
        alloc.Deallocate(block, kBlock);
      wall += NowNs() - start;
      rss_after_free = CurrentRssKiB();

      const std::uint64_t traffic_end = NowNs() + traffic_ns;
      std::size_t step = 0;
      do {
        for (int k = 0; k < 64; ++k, step = (step + 1) % steps.size()) {
          const std::uint32_t slot = steps[step];
          if (live[slot] != nullptr) alloc.Deallocate(live[slot], live_sizes[slot]);
          live_sizes[slot] = step_sizes[step];
          live[slot] = alloc.Allocate(live_sizes[slot]);
          if (live[slot] == nullptr) detail::BigBlockFailed(kName, "malloc failed");
          TouchBlock(live[slot], step);
        }
      } while (NowNs() < traffic_end);
      end_rss = CurrentRssKiB();
      for (std::size_t slot = 0; slot < kWorkingSet; ++slot) {
        if (live[slot] != nullptr) alloc.Deallocate(live[slot], live_sizes[slot]);
        live[slot] = nullptr;
      }
      alloc.EndRound();
    }
    RunResult result(std::uint64_t(rounds), wall);
    result.counters = {{"end_rss_kib", end_rss}, {"rss_after_free_kib", rss_after_free}};
    return result;
  }
};

using Release64kWorkload = ReleaseWorkload<64 * detail::kKiB>;
using Release1mWorkload = ReleaseWorkload<detail::kMiB>;

}  // namespace tierpool::bench
