// Many threads at once: random sizes, contents verified byte by byte, blocks freed by threads
// that did not allocate them, and thousands of short-lived threads. Run under TSan in make test.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core_test_util.h"
#include "tierpool/tierpool.h"

namespace {

using core_test::Scaled;

struct Block {
  unsigned char* data;
  std::size_t size;
  unsigned char tag;
};

// Mostly small (where the tiers matter), some medium, a few large.
std::size_t RandomSize(std::mt19937& rng) {
  const unsigned r = rng() % 1000;
  if (r < 800) return rng() % 1024;
  if (r < 990) return 1024 + rng() % (32 * 1024);
  return 256 * 1024 + rng() % (512 * 1024);
}

Block Make(std::mt19937& rng) {
  Block b{nullptr, RandomSize(rng), static_cast<unsigned char>(rng())};
  b.data = static_cast<unsigned char*>(tierpool::ConcurrentAlloc(b.size));
  if (b.data != nullptr) std::memset(b.data, b.tag, b.size);
  return b;
}

bool Intact(const Block& b) {
  for (std::size_t i = 0; i < b.size; ++i)
    if (b.data[i] != b.tag) return false;
  return true;
}

void Release(const Block& b, bool sized) {
  if (sized) {
    tierpool::ConcurrentFree(b.data, b.size);
  } else {
    tierpool::ConcurrentFree(b.data);
  }
}

// Per-thread inbox of blocks other threads hand over for freeing.
struct Inbox {
  std::mutex mutex;
  std::vector<Block> blocks;
};

TEST(CoreStress, ThreadsAllocateVerifyAndFreeEachOthersBlocks) {
  const int threads = 4;
  const int ops = Scaled(100000, 20000, 3000);
  std::vector<Inbox> inboxes(threads);
  std::atomic<int> corrupted{0}, failed{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(1000 + t);
      std::vector<Block> mine;
      for (int op = 0; op < ops; ++op) {
        const unsigned r = rng() % 100;
        if (r < 50 || mine.empty()) {
          Block b = Make(rng);
          if (b.data == nullptr) {
            ++failed;
            continue;
          }
          mine.push_back(b);
        } else if (r < 80) {
          const std::size_t i = rng() % mine.size();
          if (!Intact(mine[i])) ++corrupted;
          Release(mine[i], rng() % 2);
          mine[i] = mine.back();
          mine.pop_back();
        } else if (r < 95) {  // hand a block to another thread
          const std::size_t i = rng() % mine.size();
          Inbox& inbox = inboxes[(t + 1 + rng() % (threads - 1)) % threads];
          std::lock_guard<std::mutex> lock(inbox.mutex);
          inbox.blocks.push_back(mine[i]);
          mine[i] = mine.back();
          mine.pop_back();
        } else {  // free what others handed us
          std::vector<Block> received;
          {
            std::lock_guard<std::mutex> lock(inboxes[t].mutex);
            received.swap(inboxes[t].blocks);
          }
          for (const Block& b : received) {
            if (!Intact(b)) ++corrupted;
            Release(b, rng() % 2);
          }
        }
      }
      for (const Block& b : mine) {
        if (!Intact(b)) ++corrupted;
        Release(b, false);
      }
    });
  }
  for (auto& w : workers)
    w.join();
  for (Inbox& inbox : inboxes) {
    for (const Block& b : inbox.blocks) {
      if (!Intact(b)) ++corrupted;
      Release(b, true);
    }
  }
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_EQ(failed.load(), 0);
}

TEST(CoreStress, ProducerAllocatesConsumerFrees) {
  const int count = Scaled(300000, 30000, 5000);
  std::mutex mutex;
  std::vector<Block> queue;
  std::atomic<bool> done{false};
  std::atomic<int> corrupted{0};
  std::thread consumer([&] {  // its first call into the allocator is a free
    for (;;) {
      std::vector<Block> batch;
      {
        std::lock_guard<std::mutex> lock(mutex);
        batch.swap(queue);
      }
      for (const Block& b : batch) {
        if (!Intact(b)) ++corrupted;
        Release(b, true);
      }
      if (batch.empty()) {
        if (done.load()) break;
        std::this_thread::yield();
      }
    }
  });
  std::thread producer([&] {
    std::mt19937 rng(5);
    for (int i = 0; i < count; ++i) {
      Block b{static_cast<unsigned char*>(tierpool::ConcurrentAlloc(64)), 64,
              static_cast<unsigned char>(i)};
      std::memset(b.data, b.tag, b.size);
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(b);
    }
    done = true;
  });
  producer.join();
  consumer.join();
  EXPECT_EQ(corrupted.load(), 0);
}

TEST(CoreStress, TenThousandShortLivedThreadsGiveTheirCachesBack) {
  const int total = Scaled(10000, 2000, 200);
  const int concurrent = 8;
  // Warm up so that the counters below measure the churn, not the first use.
  std::thread([] { tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(100)); }).join();
  const tierpool::Stats before = tierpool::GetStats();
  std::atomic<int> corrupted{0};
  for (int started = 0; started < total; started += concurrent) {
    std::vector<std::thread> wave;
    for (int t = 0; t < concurrent; ++t) {
      wave.emplace_back([&, seed = started + t] {
        std::mt19937 rng(seed);
        std::vector<Block> blocks;
        for (int i = 0; i < 20; ++i) {
          Block b{nullptr, rng() % 2048, static_cast<unsigned char>(i)};
          b.data = static_cast<unsigned char*>(tierpool::ConcurrentAlloc(b.size));
          std::memset(b.data, b.tag, b.size);
          blocks.push_back(b);
        }
        for (const Block& b : blocks) {
          if (!Intact(b)) ++corrupted;
          Release(b, true);
        }
      });
    }
    for (auto& t : wave)
      t.join();
  }
  const tierpool::Stats after = tierpool::GetStats();
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_EQ(after.thread_caches, before.thread_caches);
  // Everything the threads cached went back: nothing is in use that was not before.
  EXPECT_LE(after.bytes_in_use, before.bytes_in_use + 64 * 1024);
  // And memory stays bounded: the caches' contents are reused, not piled up.
  EXPECT_LE(after.mapped_bytes, before.mapped_bytes + (64u << 20));
}

TEST(CoreStress, AThreadThatFreesBeforeItEverAllocatesWorks) {
  void* p = tierpool::ConcurrentAlloc(200);
  void* large = tierpool::ConcurrentAlloc(1 << 20);
  std::thread([&] {
    tierpool::ConcurrentFree(p);
    tierpool::ConcurrentFree(large);
  }).join();
  tierpool_thread_flush();
}

}  // namespace
