// The stress workloads: what real programs do to a malloc that W1-W5 do not. Each follows a
// benchmark of the allocator literature (docs/benchmarking.md names it), with its own code and
// parameters sized for a 2-core machine.
//
//   larson               threads replace random entries of one shared table with blocks of random
//                        size: blocks die on other threads, after random lifetimes (a server)
//   prodcons             producer threads pass batches of blocks to consumer threads
//   false-share-active   threads allocate small objects at the same time and write them: does the
//                        allocator put two threads' objects in one cache line?
//   false-share-passive  one thread allocates them, the others free them, then allocate and write
//                        their own: does a freed object go back to the thread that freed it?
//   lifetimes            short-, medium- and long-lived blocks mixed over time (fragmentation)
//   workset              each thread replaces random entries of its own working set with blocks of
//                        random sizes up to 32 KiB
//   huge                 the same with blocks of 1 to 32 MiB
//   threads64            64 threads on a small-block working set (more threads than cores)
//   short-threads        threads that live for a few hundred allocations each, one after another
//                        (a thread per request)
//   teardown             each thread builds half a million small blocks, frees them all in the
//                        order it made them, then works in pages (a structure built and dropped)
//
// Every block is stamped with a tag of its own when it is allocated and checked when it is freed,
// and each run checks that the tags it freed are the tags it allocated: an allocator that hands
// out one block twice, or overlapping blocks, stops the run with a message instead of passing for
// a fast one. Fixed work per thread, not fixed time (docs/benchmarking.md says why).
//
// Blocks outlive rounds and threads here, so the baseline (a bump pointer that rewinds every
// round) has no row: it would hand out memory that is still in use. RegisterStressWorkloads
// registers an allocator on all of them at their thread counts.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tierpool_bench/adapters.h"
#include "tierpool_bench/harness.h"
#include "tierpool_bench/workloads.h"

namespace tierpool::bench {
namespace stress {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
constexpr std::size_t kPage = 4096;

// A wrong result is not a slow one: the run stops and says why.
[[noreturn]] inline void Failed(const char* workload, const char* what) {
  std::fprintf(stderr, "%s: %s\n", workload, what);
  std::abort();
}

inline void* AllocateOrFail(auto& alloc, std::size_t size, const char* workload) {
  void* p = alloc.Allocate(size);
  if (p == nullptr) Failed(workload, "malloc returned NULL");
  return p;
}

// A tag no other block of the run has: the thread (the main thread is `threads`) above bit 40,
// a serial below.
inline std::uint64_t Tag(int thread, std::uint64_t serial) {
  return (std::uint64_t(thread + 1) << 40) | serial;
}

// The tag in a block's first and last 8 bytes (one word for an 8-byte block).
inline void Stamp(void* p, std::size_t size, std::uint64_t tag) {
  auto* bytes = static_cast<unsigned char*>(p);
  std::memcpy(bytes, &tag, sizeof tag);
  std::memcpy(bytes + size - sizeof tag, &tag, sizeof tag);
}

inline void CheckStamp(const void* p, std::size_t size, std::uint64_t tag, const char* workload) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  std::uint64_t head = 0;
  std::uint64_t tail = 0;
  std::memcpy(&head, bytes, sizeof head);
  std::memcpy(&tail, bytes + size - sizeof tail, sizeof tail);
  if (head != tag || tail != tag) Failed(workload, "a block was overwritten while it was in use");
}

// Blocks that travel between threads carry their size and tag in a header: [0, 8) the tag,
// [8, 16) the size, [16, 24) a link (prodcons), and the tag again in the last 8 bytes.
constexpr std::size_t kHeaderBytes = 32;  // the smallest block with a header

inline void PutHeader(void* p, std::size_t size, std::uint64_t tag, void* next = nullptr) {
  auto* bytes = static_cast<unsigned char*>(p);
  Stamp(p, size, tag);
  const std::uint64_t size64 = size;
  std::memcpy(bytes + 8, &size64, sizeof size64);
  std::memcpy(bytes + 16, &next, sizeof next);
}

struct Header {
  std::size_t size;
  std::uint64_t tag;
  void* next;
};

// Reads a header back; a size outside [min, max] or a tail that differs from the head is a block
// that another one overlapped.
inline Header TakeHeader(const void* p, std::size_t min, std::size_t max, const char* workload) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  Header h{};
  std::uint64_t size64 = 0;
  std::memcpy(&h.tag, bytes, sizeof h.tag);
  std::memcpy(&size64, bytes + 8, sizeof size64);
  std::memcpy(&h.next, bytes + 16, sizeof h.next);
  if (size64 < min || size64 > max) Failed(workload, "a block's header was overwritten");
  h.size = std::size_t(size64);
  CheckStamp(p, h.size, h.tag, workload);
  return h;
}

// Random draws, made before the clock starts.
inline std::vector<std::uint32_t> UniformDraws(std::size_t count, std::uint64_t lo,
                                               std::uint64_t hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint64_t> draw(lo, hi);
  std::vector<std::uint32_t> out(count);
  for (auto& v : out)
    v = std::uint32_t(draw(rng));
  return out;
}

// Sizes whose logarithm is uniform: every power of two between lo and hi equally likely, so most
// blocks are small and a few are large, as in real programs.
inline std::vector<std::uint32_t> LogUniformDraws(std::size_t count, std::uint64_t lo,
                                                  std::uint64_t hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> draw(std::log(double(lo)), std::log(double(hi + 1)));
  std::vector<std::uint32_t> out(count);
  for (auto& v : out)
    v = std::uint32_t(std::min<double>(double(hi), std::exp(draw(rng))));
  return out;
}

// Tags allocated and tags freed, summed (mod 2^64) per thread: equal at the end of a run, or a
// block was lost or freed twice.
struct alignas(64) TagSums {
  std::uint64_t allocated = 0;
  std::uint64_t freed = 0;
};

inline void CheckSums(const std::vector<TagSums>& sums, const char* workload) {
  std::uint64_t allocated = 0;
  std::uint64_t freed = 0;
  for (const TagSums& s : sums) {
    allocated += s.allocated;
    freed += s.freed;
  }
  if (allocated != freed) Failed(workload, "the blocks freed are not the blocks allocated");
}

// A block a thread holds, with what it takes to check and free it.
struct Live {
  void* p = nullptr;
  std::size_t size = 0;
  std::uint64_t tag = 0;
};

// Checks and frees a held block; an empty slot is left as it is.
template <class Alloc>
void Release(Alloc& alloc, Live& live, TagSums& sums, const char* workload) {
  if (live.p == nullptr) return;
  CheckStamp(live.p, live.size, live.tag, workload);
  sums.freed += live.tag;
  alloc.Deallocate(live.p, live.size);
  live.p = nullptr;
}

inline int Rounds(const RunOptions& options) {
  return options.rounds > 0 ? options.rounds : 1;
}

// How many times a run repeats its unit of work: `full` (`smoke` in a smoke run) per round.
inline std::size_t PerRun(const RunOptions& options, std::size_t smoke, std::size_t full) {
  return (options.smoke ? smoke : full) * std::size_t(Rounds(options));
}

}  // namespace stress

// "larson" (Larson and Krishnan's server simulation, as in mimalloc-bench): one table of 16 384
// slots, filled by the main thread before the clock starts. Each of T threads then, 100 000 times,
// allocates a block of random size (32 B..1 KiB), writes its header, and swaps it into a random
// slot; the block it takes out, allocated by any thread at any time before, it checks and frees.
// So a block dies on another thread than the one that made it, after a random lifetime. The main
// thread empties the table after the clock stops. A pair is one swap.
struct LarsonWorkload {
  static constexpr const char* kName = "larson";
  static constexpr std::size_t kSlots = 16384;
  static constexpr std::size_t kOps = 100000;
  static constexpr std::size_t kMinSize = stress::kHeaderBytes;
  static constexpr std::size_t kMaxSize = 1024;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const std::size_t slots = options.smoke ? 256 : kSlots;
    const std::size_t plan = options.smoke ? 2000 : kOps;
    const std::size_t ops = plan * std::size_t(stress::Rounds(options));
    std::vector<std::vector<std::uint32_t>> sizes(threads);
    std::vector<std::vector<std::uint32_t>> picks(threads);
    for (int t = 0; t < threads; ++t) {
      sizes[t] = stress::UniformDraws(plan, kMinSize, kMaxSize, 1300u + unsigned(t));
      picks[t] = stress::UniformDraws(plan, 0, slots - 1, 1400u + unsigned(t));
    }
    auto table = std::make_unique<std::atomic<void*>[]>(slots);
    std::vector<stress::TagSums> sums(threads + 1);
    const std::vector<std::uint32_t> fill = stress::UniformDraws(slots, kMinSize, kMaxSize, 1299u);
    for (std::size_t i = 0; i < slots; ++i) {
      void* p = stress::AllocateOrFail(alloc, fill[i], kName);
      const std::uint64_t tag = stress::Tag(threads, i);
      stress::PutHeader(p, fill[i], tag);
      sums[threads].allocated += tag;
      table[i].store(p, std::memory_order_relaxed);
    }
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      stress::TagSums mine;
      for (std::size_t i = 0; i < ops; ++i) {
        const std::size_t size = sizes[t][i % plan];
        void* p = stress::AllocateOrFail(alloc, size, kName);
        const std::uint64_t tag = stress::Tag(t, i);
        stress::PutHeader(p, size, tag);
        mine.allocated += tag;
        void* old = table[picks[t][i % plan]].exchange(p, std::memory_order_acq_rel);
        const stress::Header h = stress::TakeHeader(old, kMinSize, kMaxSize, kName);
        mine.freed += h.tag;
        alloc.Deallocate(old, h.size);
      }
      sums[t] = mine;
    });
    for (std::size_t i = 0; i < slots; ++i) {
      void* p = table[i].load(std::memory_order_relaxed);
      const stress::Header h = stress::TakeHeader(p, kMinSize, kMaxSize, kName);
      sums[threads].freed += h.tag;
      alloc.Deallocate(p, h.size);
    }
    alloc.EndRound();
    stress::CheckSums(sums, kName);
    return {std::uint64_t(threads) * ops, wall};
  }
};

// "prodcons": T/2 producer-consumer pairs. Each producer allocates 1000 batches of 64 blocks of
// random size (32 B..1 KiB), links each batch through the blocks' headers and passes it to its
// consumer through a bounded queue; at most 32 batches of a pair are in flight. The consumer walks
// the batch, checks every block and frees it. Messages and work items handed from the thread that
// parses them to the thread that answers them, a batch at a time. A pair is one block.
struct ProdConsWorkload {
  static constexpr const char* kName = "prodcons";
  static constexpr std::size_t kBatch = 64;
  static constexpr std::size_t kBatches = 1000;
  static constexpr int kMaxInFlight = 32;
  static constexpr std::size_t kMinSize = stress::kHeaderBytes;
  static constexpr std::size_t kMaxSize = 1024;

  struct Lane {
    BoundedQueue queue;
    alignas(64) std::atomic<int> in_flight{0};
  };

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const int pairs = threads / 2 > 0 ? threads / 2 : 1;
    const std::size_t batches = stress::PerRun(options, 40, kBatches);
    const std::size_t plan = (options.smoke ? 40 : kBatches) * kBatch;
    std::vector<std::vector<std::uint32_t>> sizes(pairs);
    std::vector<std::unique_ptr<Lane>> lanes(pairs);
    for (int p = 0; p < pairs; ++p) {
      sizes[p] = stress::UniformDraws(plan, kMinSize, kMaxSize, 1500u + unsigned(p));
      lanes[p] = std::make_unique<Lane>();
    }
    std::vector<stress::TagSums> sums(2 * pairs);
    const std::uint64_t wall = RunOnThreads(2 * pairs, [&](int t) {
      Lane& lane = *lanes[t / 2];
      stress::TagSums mine;
      if (t % 2 == 0) {  // producer
        std::uint64_t serial = 0;
        for (std::size_t b = 0; b < batches; ++b) {
          void* head = nullptr;
          for (std::size_t k = 0; k < kBatch; ++k, ++serial) {
            const std::size_t size = sizes[t / 2][serial % plan];
            void* p = stress::AllocateOrFail(alloc, size, kName);
            const std::uint64_t tag = stress::Tag(t, serial);
            stress::PutHeader(p, size, tag, head);
            mine.allocated += tag;
            head = p;
          }
          while (lane.in_flight.load(std::memory_order_acquire) >= kMaxInFlight)
            std::this_thread::yield();
          lane.in_flight.fetch_add(1, std::memory_order_relaxed);
          lane.queue.Push(head);
        }
        lane.queue.Push(nullptr);
      } else {  // consumer
        while (void* p = lane.queue.Pop()) {
          while (p != nullptr) {
            const stress::Header h = stress::TakeHeader(p, kMinSize, kMaxSize, kName);
            mine.freed += h.tag;
            alloc.Deallocate(p, h.size);
            p = h.next;
          }
          lane.in_flight.fetch_sub(1, std::memory_order_release);
        }
      }
      sums[t] = mine;
    });
    alloc.EndRound();
    stress::CheckSums(sums, kName);
    return {std::uint64_t(pairs) * batches * kBatch, wall};
  }
};

// "false-share-active" and "false-share-passive" (Hoard's cache-thrash and cache-scratch, as in
// mimalloc-bench): objects of 8 bytes, each written 1000 times (a read-modify-write) between its
// allocation and its free, 10 000 objects per thread. Eight such objects fit in one cache line: if
// the allocator gives two threads objects of the same line, every write of one thread takes the
// line away from the other, and the writes cost a cache miss each instead of a cycle.
//   active:  each thread allocates its own objects, at the same time as the others.
//   passive: the main thread allocates one object per thread, one after the other (so they share a
//            line), before the clock starts; each thread frees the one it was given, then runs the
//            loop. An allocator that keeps a freed object for the thread that freed it hands it
//            straight back to that thread, and the line is shared for the whole run.
// A pair is one object (its 1000 writes included: the writes are what this measures).
template <bool kPassive>
struct FalseShareWorkload {
  static constexpr const char* kName = kPassive ? "false-share-passive" : "false-share-active";
  static constexpr std::size_t kObjectSize = 8;
  static constexpr std::size_t kObjects = 10000;
  static constexpr std::uint64_t kWrites = 1000;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const std::size_t objects = stress::PerRun(options, 20, kObjects);
    std::vector<void*> handed(threads, nullptr);
    if constexpr (kPassive) {
      for (int t = 0; t < threads; ++t) {
        handed[t] = stress::AllocateOrFail(alloc, kObjectSize, kName);
        stress::Stamp(handed[t], kObjectSize, stress::Tag(threads, std::uint64_t(t)));
      }
    }
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      if (handed[t] != nullptr) {
        stress::CheckStamp(handed[t], kObjectSize, stress::Tag(threads, std::uint64_t(t)), kName);
        alloc.Deallocate(handed[t], kObjectSize);
      }
      for (std::size_t i = 0; i < objects; ++i) {
        void* p = stress::AllocateOrFail(alloc, kObjectSize, kName);
        const std::uint64_t tag = stress::Tag(t, i);
        volatile std::uint64_t* word = static_cast<std::uint64_t*>(p);
        *word = tag;
        for (std::uint64_t k = 0; k < kWrites; ++k)
          *word = *word + 1;
        if (*word != tag + kWrites) {
          stress::Failed(kName, "another thread wrote into an object in use");
        }
        alloc.Deallocate(p, kObjectSize);
      }
    });
    alloc.EndRound();
    return {std::uint64_t(threads) * objects, wall};
  }
};

using FalseShareActiveWorkload = FalseShareWorkload<false>;
using FalseSharePassiveWorkload = FalseShareWorkload<true>;

// "lifetimes" (the lifetime mix of the allocation traces of cfrac, espresso and mstress in
// mimalloc-bench): each thread, 4 phases of 50 000 steps; every step allocates a block of
// log-uniform size (16 B..4 KiB), writes its stamps, and gives it one of three lives:
//   80 % short:  a queue of 256: it is freed 256 short-lived allocations later;
//   18 % medium: a random slot of a table of 8192 replaces what was there (lives ~45 000 steps);
//    2 % long:   it lives until the end of the phase after its own.
// So long-lived blocks sit among short-lived ones, as a compiler's symbol table among its
// temporaries: an allocator that cannot reuse the holes they leave grows. Everything is freed at
// the end. A pair is one step.
struct LifetimesWorkload {
  static constexpr const char* kName = "lifetimes";
  static constexpr int kPhases = 4;
  static constexpr std::size_t kPhaseSteps = 50000;
  static constexpr std::size_t kShort = 256;
  static constexpr std::size_t kMedium = 8192;
  static constexpr std::uint32_t kShortPercent = 80;
  static constexpr std::uint32_t kMediumPercent = 18;
  static constexpr std::size_t kMinSize = 16;
  static constexpr std::size_t kMaxSize = 4096;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const int phases = (options.smoke ? 2 : kPhases) * stress::Rounds(options);
    const std::size_t phase_steps = options.smoke ? 2000 : kPhaseSteps;
    const std::size_t short_slots = options.smoke ? 32 : kShort;
    const std::size_t medium_slots = options.smoke ? 256 : kMedium;
    const std::size_t plan = phase_steps * std::size_t(options.smoke ? 2 : kPhases);
    struct Plan {
      std::vector<std::uint32_t> sizes, lives, slots;
    };
    std::vector<Plan> plans(threads);
    for (int t = 0; t < threads; ++t) {
      plans[t].sizes = stress::LogUniformDraws(plan, kMinSize, kMaxSize, 1600u + unsigned(t));
      plans[t].lives = stress::UniformDraws(plan, 0, 99, 1700u + unsigned(t));
      plans[t].slots = stress::UniformDraws(plan, 0, medium_slots - 1, 1800u + unsigned(t));
    }
    std::vector<stress::TagSums> sums(threads);
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      using stress::Live;
      const Plan& mine = plans[t];
      stress::TagSums sum;
      auto release = [&](Live& live) { stress::Release(alloc, live, sum, kName); };
      std::vector<Live> short_lived(short_slots);
      std::vector<Live> medium_lived(medium_slots);
      std::vector<Live> long_lived[2];  // this phase's, the previous phase's
      for (auto& set : long_lived)
        set.reserve(phase_steps / 10);
      std::size_t next_short = 0;
      std::uint64_t serial = 0;
      for (int phase = 0; phase < phases; ++phase) {
        for (std::size_t s = 0; s < phase_steps; ++s, ++serial) {
          const std::size_t k = serial % plan;
          Live live{nullptr, mine.sizes[k], stress::Tag(t, serial)};
          live.p = stress::AllocateOrFail(alloc, live.size, kName);
          stress::Stamp(live.p, live.size, live.tag);
          sum.allocated += live.tag;
          Live* slot = nullptr;
          if (mine.lives[k] < kShortPercent) {
            slot = &short_lived[next_short];
            next_short = (next_short + 1) % short_slots;
          } else if (mine.lives[k] < kShortPercent + kMediumPercent) {
            slot = &medium_lived[mine.slots[k]];
          } else {
            long_lived[0].push_back(live);
            continue;
          }
          release(*slot);
          *slot = live;
        }
        for (Live& live : long_lived[1])
          release(live);
        long_lived[1].clear();
        std::swap(long_lived[0], long_lived[1]);
      }
      for (auto* set : {&short_lived, &medium_lived, &long_lived[0], &long_lived[1]}) {
        for (Live& live : *set)
          release(live);
      }
      sums[t] = sum;
    });
    alloc.EndRound();
    stress::CheckSums(sums, kName);
    return {std::uint64_t(threads) * std::uint64_t(phases) * phase_steps, wall};
  }
};

// A working set per thread: each step frees the block in a random slot of the thread's own set
// and puts a new block of random size there, stamped at both ends and written once in every
// 4 KiB page (so all of it is resident). Slots start empty; everything is freed at the end. A pair
// is one step. Three workloads share it, with these parameters:
//   workset    (rptest and xmalloc-test in mimalloc-bench) 1024 slots, log-uniform 16 B..32 KiB,
//              100 000 steps per thread
//   huge       (malloc-large in mimalloc-bench) 4 slots, uniform 1..32 MiB, 32 steps per thread
//   threads64  (a server with a thread per connection) 64 threads, 256 slots, uniform 16..512 B,
//              20 000 steps per thread
template <class Params>
struct WorkingSetWorkload {
  static constexpr const char* kName = Params::kName;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const std::size_t slots = options.smoke ? Params::kSmokeSlots : Params::kSlots;
    const std::size_t plan = options.smoke ? Params::kSmokeSteps : Params::kSteps;
    const std::size_t max_size = options.smoke ? Params::kSmokeMaxSize : Params::kMaxSize;
    const std::size_t steps = plan * std::size_t(stress::Rounds(options));
    std::vector<std::vector<std::uint32_t>> sizes(threads);
    std::vector<std::vector<std::uint32_t>> picks(threads);
    for (int t = 0; t < threads; ++t) {
      const unsigned seed = Params::kSeed + 100u * unsigned(t);
      sizes[t] = Params::kLogUniform
                     ? stress::LogUniformDraws(plan, Params::kMinSize, max_size, seed)
                     : stress::UniformDraws(plan, Params::kMinSize, max_size, seed);
      picks[t] = stress::UniformDraws(plan, 0, slots - 1, seed + 1);
    }
    std::vector<stress::TagSums> sums(threads);
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      std::vector<stress::Live> set(slots);
      stress::TagSums sum;
      for (std::size_t i = 0; i < steps; ++i) {
        stress::Live& live = set[picks[t][i % plan]];
        stress::Release(alloc, live, sum, kName);
        live.size = sizes[t][i % plan];
        live.tag = stress::Tag(t, i);
        live.p = stress::AllocateOrFail(alloc, live.size, kName);
        auto* bytes = static_cast<unsigned char*>(live.p);
        for (std::size_t offset = stress::kPage; offset + 8 <= live.size; offset += stress::kPage)
          std::memcpy(bytes + offset, &live.tag, sizeof live.tag);
        stress::Stamp(live.p, live.size, live.tag);
        sum.allocated += live.tag;
      }
      for (stress::Live& live : set)
        stress::Release(alloc, live, sum, kName);
      sums[t] = sum;
    });
    alloc.EndRound();
    stress::CheckSums(sums, kName);
    return {std::uint64_t(threads) * steps, wall};
  }
};

struct WorksetParams {
  static constexpr const char* kName = "workset";
  static constexpr std::size_t kSlots = 1024, kSteps = 100000, kMinSize = 16;
  static constexpr std::size_t kMaxSize = 32 * stress::kKiB;
  static constexpr bool kLogUniform = true;
  static constexpr std::size_t kSmokeSlots = 64, kSmokeSteps = 2000;
  static constexpr std::size_t kSmokeMaxSize = kMaxSize;
  static constexpr unsigned kSeed = 1900;
};

struct HugeParams {
  static constexpr const char* kName = "huge";
  static constexpr std::size_t kSlots = 4, kSteps = 32, kMinSize = stress::kMiB;
  static constexpr std::size_t kMaxSize = 32 * stress::kMiB;
  static constexpr bool kLogUniform = false;
  static constexpr std::size_t kSmokeSlots = 2, kSmokeSteps = 4;
  static constexpr std::size_t kSmokeMaxSize = 2 * stress::kMiB;
  static constexpr unsigned kSeed = 2900;
};

struct Threads64Params {
  static constexpr const char* kName = "threads64";
  static constexpr std::size_t kSlots = 256, kSteps = 20000, kMinSize = 16, kMaxSize = 512;
  static constexpr bool kLogUniform = false;
  static constexpr std::size_t kSmokeSlots = 16, kSmokeSteps = 100;
  static constexpr std::size_t kSmokeMaxSize = kMaxSize;
  static constexpr unsigned kSeed = 3900;
};

using WorksetWorkload = WorkingSetWorkload<WorksetParams>;
using HugeWorkload = WorkingSetWorkload<HugeParams>;
using Threads64Workload = WorkingSetWorkload<Threads64Params>;

// "short-threads" (a thread per request or per task, as servers and std::async make them): each
// of T lanes starts 500 threads one after another, each joined before the next starts. A thread
// allocates 64 blocks of random size (16 B..1 KiB), writes a line of each, and frees them, four
// times over, then exits: its allocator state is made, used for 256 pairs and given back. What an
// allocator does when a thread starts and ends (a cache made, filled from shared memory, emptied
// back) is measured beside the thread's own creation and exit, the kernel's work, which costs
// every allocator the same and takes most of the time. A pair is one block.
struct ShortThreadsWorkload {
  static constexpr const char* kName = "short-threads";
  static constexpr std::size_t kThreadsPerLane = 500;
  static constexpr std::size_t kBlocks = 64;
  static constexpr int kRepeats = 4;
  static constexpr std::size_t kMinSize = 16;
  static constexpr std::size_t kMaxSize = 1024;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const std::size_t per_lane = stress::PerRun(options, 10, kThreadsPerLane);
    const std::size_t draws =
        kBlocks * 64;  // each thread takes kBlocks of them, from its own start
    std::vector<std::vector<std::uint32_t>> sizes(threads);
    for (int t = 0; t < threads; ++t)
      sizes[t] = stress::UniformDraws(draws, kMinSize, kMaxSize, 4100u + unsigned(t));
    std::vector<stress::TagSums> sums(threads);
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      stress::TagSums lane;
      for (std::size_t n = 0; n < per_lane; ++n) {
        std::thread([&, n] {
          stress::Live live[kBlocks];
          const std::size_t start = (n * 61) % (draws - kBlocks + 1);
          for (int r = 0; r < kRepeats; ++r) {
            for (std::size_t i = 0; i < kBlocks; ++i) {
              live[i].size = sizes[t][start + i];
              live[i].tag = stress::Tag(t, (n * kRepeats + std::size_t(r)) * kBlocks + i);
              live[i].p = stress::AllocateOrFail(alloc, live[i].size, kName);
              std::memset(live[i].p, 0x5a, std::min<std::size_t>(live[i].size, 64));
              stress::Stamp(live[i].p, live[i].size, live[i].tag);
              lane.allocated += live[i].tag;
            }
            for (stress::Live& block : live)
              stress::Release(alloc, block, lane, kName);
          }
        }).join();
      }
      sums[t] = lane;
    });
    alloc.EndRound();
    stress::CheckSums(sums, kName);
    return {std::uint64_t(threads) * per_lane * kRepeats * kBlocks, wall};
  }
};

// "teardown" (a structure built and dropped whole: a compiler's syntax tree, a std::map of half a
// million entries destroyed, a collector sweeping a generation): each thread allocates 500 000
// blocks of 16 B to 128 B (uniform), stamps each, then checks and frees them all in the order it
// made them; then allocates 8 000 blocks of 4 KiB, stamps each, and frees them: the next phase
// asks for other sizes than the memory just freed. A pair is one block of either phase. The
// thread's blocks (36 MB on average) are more than any thread cache holds, so most of them pass
// through what lies behind it, both ways.
struct TeardownWorkload {
  static constexpr const char* kName = "teardown";
  static constexpr std::size_t kNodes = 500000, kPages = 8000;
  static constexpr std::size_t kMinSize = 16, kMaxSize = 128, kPageBlock = 4096;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const std::size_t nodes = options.smoke ? 2000 : kNodes;
    const std::size_t pages = options.smoke ? 40 : kPages;
    const int rounds = stress::Rounds(options);
    std::vector<std::vector<std::uint32_t>> sizes(threads);
    std::vector<std::vector<stress::Live>> held(threads);  // made before the clock starts
    for (int t = 0; t < threads; ++t) {
      sizes[t] = stress::UniformDraws(nodes, kMinSize, kMaxSize, 2100u + unsigned(t));
      held[t].resize(nodes);
    }
    std::vector<stress::TagSums> sums(threads);
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      std::vector<stress::Live>& live = held[t];
      stress::TagSums sum;
      std::uint64_t serial = 0;
      const auto make = [&](stress::Live& block, std::size_t size) {
        block.size = size;
        block.tag = stress::Tag(t, serial++);
        block.p = stress::AllocateOrFail(alloc, size, kName);
        stress::Stamp(block.p, size, block.tag);
        sum.allocated += block.tag;
      };
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < nodes; ++i)
          make(live[i], sizes[t][i]);
        for (std::size_t i = 0; i < nodes; ++i)
          stress::Release(alloc, live[i], sum, kName);
        for (std::size_t i = 0; i < pages; ++i)
          make(live[i], kPageBlock);
        for (std::size_t i = 0; i < pages; ++i)
          stress::Release(alloc, live[i], sum, kName);
      }
      sums[t] = sum;
    });
    alloc.EndRound();
    stress::CheckSums(sums, kName);
    return {std::uint64_t(threads) * std::uint64_t(rounds) * (nodes + pages), wall};
  }
};

// Every stress workload at its thread counts for one allocator. A step calls it with its own
// allocators; RegisterStressPeers adds the malloc rows (glibc, and every preloaded library).
template <class Alloc>
void RegisterStressWorkloads(const std::string& allocator) {
  RegisterThreads<LarsonWorkload, Alloc>(allocator, {2, 8});
  RegisterThreads<ProdConsWorkload, Alloc>(allocator, {2, 8});
  Register<FalseShareActiveWorkload, Alloc>(allocator, 2);
  Register<FalseSharePassiveWorkload, Alloc>(allocator, 2);
  RegisterThreads<LifetimesWorkload, Alloc>(allocator, {1, 2});
  RegisterThreads<WorksetWorkload, Alloc>(allocator, {2, 4});
  RegisterThreads<HugeWorkload, Alloc>(allocator, {1, 2});
  Register<Threads64Workload, Alloc>(allocator, 64);
  Register<ShortThreadsWorkload, Alloc>(allocator, 2);
  RegisterThreads<TeardownWorkload, Alloc>(allocator, {1, 2});
}

inline void RegisterStressPeers() {
  RegisterStressWorkloads<MallocAllocator>("malloc");
}

}  // namespace tierpool::bench
