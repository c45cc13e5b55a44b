// The five shared workloads of SPEC §3. Each is a struct with a name and
//   static RunResult Run(Alloc& alloc, int threads, const RunOptions& options);
// templated on the allocator interface of adapters.h (W1: the factory interface). Parameters are
// the articles' own, so our numbers can be set beside theirs (docs/benchmarking.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tierpool_bench/harness.h"

namespace tierpool::bench {

// Stores into every block it gets, so an allocator cannot win by handing out memory it never
// makes resident, and a block that overlaps another is visible to the tests' sanitizers.
inline void TouchBlock(void* p, std::uint64_t tag) {
  std::memcpy(p, &tag, sizeof(tag));
}

// W1 "rational" (article 001): 5000 x new Rational(i), then 5000 x delete. One round is one
// batch; Google Benchmark repeats rounds, the article's example.cpp runs 10 000 of them.
struct RationalWorkload {
  static constexpr const char* kName = "rational";
  static constexpr int kBatch = 5000;

  template <class Factory>
  static RunResult Run(Factory& factory, int /*threads*/, const RunOptions& options) {
    using Object = typename Factory::Object;
    Object* objects[kBatch];
    const int rounds = options.rounds > 0 ? options.rounds : 1;
    const std::uint64_t start = NowNs();
    for (int r = 0; r < rounds; ++r) {
      for (int i = 0; i < kBatch; ++i)
        objects[i] = factory.New(i);
      KeepAlive(objects);
      for (int i = 0; i < kBatch; ++i)
        factory.Delete(objects[i]);
      factory.EndRound();
    }
    return {std::uint64_t(rounds) * kBatch, NowNs() - start};
  }
};

// W2 "shuffle64" (article 000): each thread, per round, allocates 100 000 objects of 64 B, writes
// them, shuffles them and frees them all; 50 rounds.
struct Shuffle64Workload {
  static constexpr const char* kName = "shuffle64";
  static constexpr std::size_t kObjectSize = 64;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : (options.smoke ? 2 : 50);
    const std::size_t objects = options.smoke ? 2000 : 100000;
    std::vector<std::vector<void*>> blocks(threads, std::vector<void*>(objects));
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      std::minstd_rand rng(12345u + unsigned(t));
      std::vector<void*>& mine = blocks[t];
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < objects; ++i) {
          mine[i] = alloc.Allocate(kObjectSize);
          TouchBlock(mine[i], i);
        }
        std::shuffle(mine.begin(), mine.end(), rng);
        for (void* p : mine)
          alloc.Deallocate(p, kObjectSize);
        alloc.EndRound();
      }
    });
    return {std::uint64_t(threads) * rounds * objects, wall};
  }
};

// W3 "mt512" (article 004): 4 threads, each 20 rounds x (allocate 25 000 blocks of 512 B, free
// all, in allocation order).
struct Mt512Workload {
  static constexpr const char* kName = "mt512";
  static constexpr std::size_t kBlockSize = 512;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : (options.smoke ? 2 : 20);
    const std::size_t count = options.smoke ? 500 : 25000;
    std::vector<std::vector<void*>> blocks(threads, std::vector<void*>(count));
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      std::vector<void*>& mine = blocks[t];
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < count; ++i) {
          mine[i] = alloc.Allocate(kBlockSize);
          TouchBlock(mine[i], i);
        }
        for (void* p : mine)
          alloc.Deallocate(p, kBlockSize);
        alloc.EndRound();
      }
    });
    return {std::uint64_t(threads) * rounds * count, wall};
  }
};

// What one thread of a random-size workload does in every round, drawn before the clock starts
// from a fixed seed per thread: the sizes it allocates, the order it frees them in, and room
// for the blocks.
struct SizedPlan {
  std::vector<std::size_t> sizes;
  std::vector<std::uint32_t> free_order;
  std::vector<void*> blocks;
};

inline std::vector<SizedPlan> MakeSizedPlans(int threads, std::size_t count, unsigned seed,
                                             std::size_t min_size, std::size_t max_size) {
  std::vector<SizedPlan> plans(threads);
  for (int t = 0; t < threads; ++t) {
    std::mt19937 rng(seed + unsigned(t));
    std::uniform_int_distribution<std::size_t> size(min_size, max_size);
    SizedPlan& plan = plans[t];
    plan.sizes.resize(count);
    for (auto& s : plan.sizes)
      s = size(rng);
    plan.free_order.resize(count);
    for (std::uint32_t i = 0; i < count; ++i)
      plan.free_order[i] = i;
    std::shuffle(plan.free_order.begin(), plan.free_order.end(), rng);
    plan.blocks.resize(count);
  }
  return plans;
}

// W4 "sizes" (article 003): each thread, 200 rounds x (allocate 10 000 blocks of random sizes
// 8 B..2048 B, free them in random order). Sizes and order come from a fixed seed per thread and
// are drawn before the clock starts, so the timed part is allocation, a store, and free.
struct SizesWorkload {
  static constexpr const char* kName = "sizes";
  static constexpr std::size_t kMinSize = 8;
  static constexpr std::size_t kMaxSize = 2048;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int threads, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : (options.smoke ? 2 : 200);
    const std::size_t count = options.smoke ? 500 : 10000;
    std::vector<SizedPlan> plans = MakeSizedPlans(threads, count, 2024u, kMinSize, kMaxSize);
    const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
      SizedPlan& plan = plans[t];
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < count; ++i) {
          plan.blocks[i] = alloc.Allocate(plan.sizes[i]);
          TouchBlock(plan.blocks[i], i);
        }
        for (std::uint32_t i : plan.free_order)
          alloc.Deallocate(plan.blocks[i], plan.sizes[i]);
        alloc.EndRound();
      }
    });
    return {std::uint64_t(threads) * rounds * count, wall};
  }
};

// A single-producer single-consumer ring of pointers: W5's bounded queue. The bound is what
// keeps memory in check when the producer runs ahead.
class BoundedQueue {
 public:
  static constexpr std::size_t kCapacity = 4096;  // power of two

  void Push(void* p) {
    const std::size_t tail = tail_.load(std::memory_order_relaxed);
    while (tail - head_.load(std::memory_order_acquire) == kCapacity)
      std::this_thread::yield();
    slots_[tail & (kCapacity - 1)] = p;
    tail_.store(tail + 1, std::memory_order_release);
  }
  void* Pop() {
    const std::size_t head = head_.load(std::memory_order_relaxed);
    while (tail_.load(std::memory_order_acquire) == head)
      std::this_thread::yield();
    void* p = slots_[head & (kCapacity - 1)];
    head_.store(head + 1, std::memory_order_release);
    return p;
  }

 private:
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) std::atomic<std::size_t> tail_{0};
  alignas(64) void* slots_[kCapacity];
};

// W5 "xthread": a producer thread allocates 64 B blocks, a consumer thread frees them, through a
// bounded queue: the cross-thread free every server does (a request parsed on one thread,
// answered and freed on another). 10 rounds of 100 000 blocks; a null marks a round's end, and
// the producer waits for the consumer to drain it before the next round (so the baseline can
// reset).
struct XthreadWorkload {
  static constexpr const char* kName = "xthread";
  static constexpr std::size_t kBlockSize = 64;

  template <class Alloc>
  static RunResult Run(Alloc& alloc, int /*threads: always 2*/, const RunOptions& options) {
    const int rounds = options.rounds > 0 ? options.rounds : (options.smoke ? 2 : 10);
    const std::size_t count = options.smoke ? 5000 : 100000;
    auto queue = std::make_unique<BoundedQueue>();
    std::atomic<int> drained_rounds{0};
    const std::uint64_t wall = RunOnThreads(2, [&](int t) {
      if (t == 0) {  // producer
        for (int r = 0; r < rounds; ++r) {
          for (std::size_t i = 0; i < count; ++i) {
            void* p = alloc.Allocate(kBlockSize);
            TouchBlock(p, i);
            queue->Push(p);
          }
          queue->Push(nullptr);
          while (drained_rounds.load(std::memory_order_acquire) <= r)
            std::this_thread::yield();
          alloc.EndRound();
        }
      } else {  // consumer
        for (int r = 0; r < rounds; ++r) {
          while (void* p = queue->Pop())
            alloc.Deallocate(p, kBlockSize);
          drained_rounds.store(r + 1, std::memory_order_release);
        }
      }
    });
    return {std::uint64_t(rounds) * count, wall};
  }
};

}  // namespace tierpool::bench
