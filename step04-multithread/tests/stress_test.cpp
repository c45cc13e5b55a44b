// Several threads, random allocations and frees, blocks handed to other threads and freed there,
// threads replaced by new ones, every byte checked before a block is freed. Under TSan in
// `make test`; shrunk under valgrind.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "locked_pools.h"

namespace {

constexpr std::size_t kBlock = 64;

void Stamp(unsigned char* p, std::uint32_t stamp) {
  std::memcpy(p, &stamp, sizeof(stamp));
  for (std::size_t i = sizeof(stamp); i < kBlock; ++i)
    p[i] = static_cast<unsigned char>(stamp + i);
}

void Check(const unsigned char* p) {
  std::uint32_t stamp;
  std::memcpy(&stamp, p, sizeof(stamp));
  for (std::size_t i = sizeof(stamp); i < kBlock; ++i)
    ASSERT_EQ(p[i], static_cast<unsigned char>(stamp + i)) << "block changed while live";
}

template <class Pool>
void Stress() {
  const bool valgrind = std::getenv("TIERPOOL_UNDER_VALGRIND") != nullptr;
  const int threads = valgrind ? 2 : 4;
  const int generations = valgrind ? 2 : 4;
  const int operations = valgrind ? 3000 : 30000;
  Pool pool;
  std::mutex handoff_mutex;
  std::vector<unsigned char*> handoff;  // blocks allocated by one thread, freed by another
  std::atomic<std::uint32_t> stamps{1};
  for (int g = 0; g < generations; ++g) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t, g] {
        std::mt19937 rng(unsigned(g * 100 + t));
        std::vector<unsigned char*> mine;
        auto release = [&](unsigned char* p) {
          Check(p);
          pool.free(p);
        };
        for (int op = 0; op < operations; ++op) {
          const unsigned dice = rng() % 10;
          if (dice < 5 || mine.empty()) {
            auto* p = static_cast<unsigned char*>(pool.alloc(kBlock));
            Stamp(p, stamps.fetch_add(1, std::memory_order_relaxed));
            mine.push_back(p);
          } else if (dice < 7) {
            std::swap(mine[rng() % mine.size()], mine.back());
            release(mine.back());
            mine.pop_back();
          } else if (dice < 9) {
            std::lock_guard<std::mutex> lock(handoff_mutex);
            handoff.push_back(mine.back());
            mine.pop_back();
          } else {
            std::vector<unsigned char*> theirs;
            {
              std::lock_guard<std::mutex> lock(handoff_mutex);
              theirs.swap(handoff);
            }
            for (auto* p : theirs)
              release(p);
          }
        }
        for (auto* p : mine)
          release(p);
      });
    }
    for (auto& w : workers)
      w.join();
  }
  for (auto* p : handoff) {
    Check(p);
    pool.free(p);
  }
}

TEST(LockedPoolStress, MemoryPoolBehindAMutex) {
  Stress<step04::LockedMemoryPool<kBlock, step04::MutexLock>>();
}
TEST(LockedPoolStress, MemoryPoolBehindASpinLock) {
  Stress<step04::LockedMemoryPool<kBlock, step04::SpinLock>>();
}
TEST(LockedPoolStress, SizeClassPoolBehindASpinLock) {
  Stress<step04::MTMemoryPool<step03::SizeClassPool<>, step04::SpinLock>>();
}

}  // namespace
