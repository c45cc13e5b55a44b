// Many threads, random operations, objects freed by other threads through queues, threads that
// come and go, and every byte of every object checked before it is freed. Run under TSan in
// `make test` (TIERPOOL_TSAN), and shrunk under valgrind (TIERPOOL_UNDER_VALGRIND).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "object_pool.h"
#include "pool_under_test.h"

namespace {

bool UnderValgrind() {
  const char* v = std::getenv("TIERPOOL_UNDER_VALGRIND");
  return v != nullptr && v[0] == '1';
}

// 48 bytes: the stamp says who wrote the object, and the bytes are a function of the stamp.
struct Object {
  std::uint64_t stamp;
  unsigned char bytes[40];
};

void Fill(Object* o, std::uint64_t stamp) {
  o->stamp = stamp;
  for (std::size_t i = 0; i < sizeof(o->bytes); ++i)
    o->bytes[i] = static_cast<unsigned char>(stamp * 31 + i);
}

void Verify(const Object* o) {
  for (std::size_t i = 0; i < sizeof(o->bytes); ++i) {
    ASSERT_EQ(o->bytes[i], static_cast<unsigned char>(o->stamp * 31 + i))
        << "object " << o << " changed while it was live";
  }
}

// A mailbox per thread slot: other threads drop objects here, the owner frees them.
struct Mailbox {
  std::mutex mutex;
  std::deque<Object*> objects;
};

struct Params {
  int threads;
  int generations;  // threads are replaced this many times (thread churn)
  int operations;   // per thread per generation
};

Params ScaledParams() {
  if (UnderValgrind()) return {3, 3, 3000};
#if TIERPOOL_TSAN || TIERPOOL_ASAN
  return {4, 4, 20000};
#else
  return {4, 6, 100000};
#endif
}

template <class Traits>
void Stress() {
  step05::ObjectPool<Object, Traits> pool;
  const Params params = ScaledParams();
  std::vector<Mailbox> mailboxes(params.threads);
  std::atomic<std::uint64_t> next_stamp{1};
  std::atomic<long> live{0};

  for (int generation = 0; generation < params.generations; ++generation) {
    std::vector<std::thread> threads;
    for (int t = 0; t < params.threads; ++t) {
      threads.emplace_back([&, t, generation] {
        std::mt19937 rng(1000u * unsigned(generation) + unsigned(t));
        std::vector<Object*> mine;
        auto free_checked = [&](Object* o) {
          Verify(o);
          pool.Free(o);
          live.fetch_sub(1, std::memory_order_relaxed);
        };
        for (int op = 0; op < params.operations; ++op) {
          const unsigned dice = rng() % 100;
          if (dice < 45 || mine.empty()) {
            auto* o = static_cast<Object*>(pool.Allocate());
            ASSERT_NE(o, nullptr);
            Fill(o, next_stamp.fetch_add(1, std::memory_order_relaxed));
            live.fetch_add(1, std::memory_order_relaxed);
            mine.push_back(o);
          } else if (dice < 75) {  // free one of ours, chosen at random
            std::swap(mine[rng() % mine.size()], mine.back());
            free_checked(mine.back());
            mine.pop_back();
          } else if (dice < 92) {  // hand one to another thread
            Mailbox& box = mailboxes[rng() % mailboxes.size()];
            std::lock_guard<std::mutex> lock(box.mutex);
            box.objects.push_back(mine.back());
            mine.pop_back();
          } else {  // free what others sent us
            std::deque<Object*> received;
            {
              std::lock_guard<std::mutex> lock(mailboxes[t].mutex);
              received.swap(mailboxes[t].objects);
            }
            for (Object* o : received)
              free_checked(o);
          }
        }
        // All but one are freed here; the last stays live for a thread of the next generation.
        while (mine.size() > 1) {
          free_checked(mine.back());
          mine.pop_back();
        }
        if (!mine.empty()) {
          std::lock_guard<std::mutex> lock(mailboxes[(t + 1) % params.threads].mutex);
          mailboxes[(t + 1) % params.threads].objects.push_back(mine.back());
        }
      });
    }
    for (auto& thread : threads)
      thread.join();
    EXPECT_EQ(pool.Stats().local_pools, 0u) << "every exited thread detached";
  }
  for (Mailbox& box : mailboxes) {
    for (Object* o : box.objects) {
      Verify(o);
      pool.Free(o);
      live.fetch_sub(1);
    }
  }
  EXPECT_EQ(live.load(), 0);
}

struct Tiny : PoolTraits {  // every boundary crossed all the time
  static constexpr std::size_t kBlockSize = 4;
  static constexpr std::size_t kBlockChunkSize = 3;
  static constexpr std::size_t kFreeSlotsSize = 5;
  static constexpr std::size_t kRecentSize = RecentOr(2);
  static constexpr std::size_t kGlobalPoolNum = 3;
};
struct Hardened : PoolTraits {
  static constexpr bool kHardened = true;
};
struct TinyHardened : Tiny {
  static constexpr bool kHardened = true;
};

TEST(ObjectPoolStress, DefaultTunables) {
  Stress<PoolTraits>();
}
TEST(ObjectPoolStress, TinyTunables) {
  Stress<Tiny>();
}
TEST(ObjectPoolStress, Hardened) {
  Stress<Hardened>();
}
TEST(ObjectPoolStress, TinyHardened) {
  Stress<TinyHardened>();
}

// Many threads start, use the pool briefly, and exit while others still allocate.
TEST(ObjectPoolStress, ThreadChurnWhileOthersAllocate) {
  step05::ObjectPool<Object, Tiny> pool;
  const int waves = UnderValgrind() ? 20 : 300;
  std::atomic<bool> stop{false};
  std::thread steady([&] {
    std::vector<Object*> mine;
    std::uint64_t stamp = 0;
    while (!stop.load()) {
      for (int i = 0; i < 50; ++i) {
        auto* o = static_cast<Object*>(pool.Allocate());
        Fill(o, ++stamp);
        mine.push_back(o);
      }
      for (Object* o : mine) {
        Verify(o);
        pool.Free(o);
      }
      mine.clear();
    }
  });
  for (int wave = 0; wave < waves; ++wave) {
    std::thread a([&] {
      Object* kept[20];
      for (auto*& o : kept) {
        o = static_cast<Object*>(pool.Allocate());
        Fill(o, std::uint64_t(wave) << 8);
      }
      for (auto* o : kept) {
        Verify(o);
        pool.Free(o);
      }
    });
    a.join();
  }
  stop = true;
  steady.join();
  EXPECT_EQ(pool.Stats().local_pools, 0u);
}

}  // namespace
