// Out of memory: when the OS refuses, every entry point returns NULL with errno ENOMEM, nothing
// is corrupted, and the allocator works again once memory is back. Two ways to refuse: a hook
// that makes the allocator's mmap fail (works under every tool), and a real address-space limit
// (setrlimit(RLIMIT_AS)) in a forked child.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "allocator.h"
#include "core_test_util.h"
#include "os.h"
#include "tierpool/tierpool.h"

namespace {

using tierpool::internal::SetMapFailureAfter;

struct MapFailure {
  MapFailure() { SetMapFailureAfter(0); }
  ~MapFailure() { SetMapFailureAfter(-1); }
};

// A new thread whose arrays cannot be mapped: the objects the central cache already holds still
// serve it, one at a time, and its frees go back there.
TEST(CoreOom, AThreadWhoseArraysCannotBeMappedIsServedWithoutThem) {
  constexpr std::size_t kSize = 64, kCount = 20000;
  std::vector<void*> blocks(kCount);
  for (void*& p : blocks)
    p = tierpool_malloc(kSize);
  for (void* p : blocks)
    tierpool_free(p);
  tierpool_thread_flush();  // all of them in the central cache
  std::thread([&] {
    MapFailure no_more_memory;
    for (void*& p : blocks) {
      p = tierpool_malloc(kSize);
      ASSERT_NE(p, nullptr);
      std::memset(p, 3, kSize);
    }
    for (void* p : blocks)
      tierpool_free(p);
  }).join();
  std::vector<void*> again(kCount);
  for (void*& p : again) {
    p = tierpool_malloc(kSize);
    ASSERT_NE(p, nullptr);
  }
  for (void* p : again)
    tierpool_free(p);
}

// A refill takes fresh objects on to the end of their cache line, past what it asked for, and
// grows its list's chunk for them; when the OS refuses the bigger chunk, what the chunk cannot
// hold goes back. Written past the chunk, it landed in the array of the list whose chunk came
// next in the arena, whose pops then handed out objects of the wrong class. Staged in a cache of
// the test's own: the 8-byte list takes the arena's whole first region, the 16-byte list its
// freed 32-slot chunk, so that the 24-byte list (whose objects end inside lines) cannot grow
// from 16 slots; its refill of 16 then starts inside a line (an uncached allocation carved one
// object just before) and carves on to the line's end. Exit codes: see the test.
void RefillPastARefusedChunk() {
  using namespace tierpool::internal;
  const auto c = static_cast<std::uint32_t>(SizeToClass(8));
  const auto d = static_cast<std::uint32_t>(SizeToClass(16));
  const auto e = static_cast<std::uint32_t>(SizeToClass(24));
  for (const std::size_t size : {8, 16, 24})  // spans for all three before memory runs out
    tierpool_free(tierpool_malloc(size));
  std::vector<void*> held;
  held.reserve(100000);
  auto tc = std::make_unique<ThreadCache>();
  tc->Init(16 << 20);
  SetMapFailureAfter(1);  // the cache's first arena region, then nothing
  while (tc->max_length(c) < 4096 || tc->length(c) > 0) {  // its chunks fill the region
    held.push_back(AllocateClass(tc.get(), c));
    if (held.back() == nullptr) _exit(10);
  }
  while (tc->max_length(d) < 20 || tc->length(d) > 0) {  // takes the freed 32-slot chunk
    held.push_back(AllocateClass(tc.get(), d));
    if (held.back() == nullptr) _exit(11);
  }
  for (int i = 0; i < 5; ++i)  // 5 of the 16-byte list's 20 stay cached
    held.push_back(AllocateClass(tc.get(), d));
  while (tc->max_length(e) < 15 || tc->length(e) > 0) {
    held.push_back(AllocateClass(tc.get(), e));
    if (held.back() == nullptr) _exit(12);
  }
  void* one = G().central[e].RemoveOne();  // the next carve starts inside a line
  if (one == nullptr) _exit(13);
  held.push_back(AllocateClass(tc.get(), e));  // the refill of 16, and more to the line's end
  // Every object the 16-byte list hands out must be a 16-byte one.
  while (tc->length(d) > 0) {
    void* p = AllocateClass(tc.get(), d);
    if (page_map.ClassOf(p) != d) _exit(20);
    held.push_back(p);
  }
  SetMapFailureAfter(-1);
  tc->ReleaseAll();
  tc->RetireArrays();
  for (void* p : held)
    tierpool_free(p);
  StoreNext(one, nullptr);  // never handed out to a user: back the way it came
  G().central[e].InsertRange(one, nullptr, 1);
  _exit(0);
}

TEST(CoreOomDeathTest, ARefillPastAChunkTheOsRefusedKeepsToItsChunk) {
  if (core_test::UnderValgrind()) GTEST_SKIP() << "a re-run of the binary under valgrind";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: every list untouched
  EXPECT_EXIT(RefillPastARefusedChunk(), testing::ExitedWithCode(0), "")
      << "10-13: the staging, 20: a list handed out an object of another class";
}

TEST(CoreOom, InjectedMapFailureGivesNullAndEnomemThenRecovers) {
  std::vector<void*> kept;
  {
    MapFailure no_more_memory;
    errno = 0;
    EXPECT_EQ(tierpool_malloc(std::size_t{1} << 34), nullptr);  // 16 GiB: must map
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(tierpool_aligned_alloc(std::size_t{1} << 30, 1 << 20), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(tierpool_calloc(1 << 16, 1 << 16), nullptr);  // 4 GiB
    EXPECT_EQ(errno, ENOMEM);
    void* small = tierpool_malloc(64);
    if (small != nullptr) {  // served from memory already mapped: fine
      errno = 0;
      EXPECT_EQ(tierpool_realloc(small, std::size_t{1} << 34), nullptr);
      EXPECT_EQ(errno, ENOMEM);
      kept.push_back(small);
    }
    // Use up what is mapped: sooner or later a request needs the OS and fails cleanly.
    bool saw_enomem = false;
    for (int i = 0; i < 100000 && !saw_enomem; ++i) {
      errno = 0;
      void* p = tierpool_malloc(48 * 1024);
      if (p == nullptr) {
        EXPECT_EQ(errno, ENOMEM);
        saw_enomem = true;
      } else {
        std::memset(p, 1, 48 * 1024);
        kept.push_back(p);
      }
    }
    EXPECT_TRUE(saw_enomem);
    // A new thread cannot even get a cache: it is served without one, or refused, cleanly.
    std::thread([] {
      void* p = tierpool_malloc(100);
      if (p != nullptr) tierpool_free(p);
    }).join();
  }
  for (void* p : kept)
    tierpool_free(p);
  // Memory is back: everything works, big and small.
  void* big = tierpool_malloc(std::size_t{64} << 20);
  ASSERT_NE(big, nullptr);
  std::memset(big, 2, 4096);
  tierpool_free(big);
  std::vector<void*> blocks;
  for (int i = 0; i < 10000; ++i) {
    blocks.push_back(tierpool_malloc(static_cast<std::size_t>(i % 3000)));
    ASSERT_NE(blocks.back(), nullptr);
  }
  for (void* p : blocks)
    tierpool_free(p);
}

TEST(CoreOom, AddressSpaceLimitInAChild) {
  if (core_test::UnderValgrind() || core_test::UnderSanitizer()) {
    GTEST_SKIP() << "valgrind and the sanitizers reserve address space of their own";
  }
  tierpool_free(tierpool_malloc(16));  // initialized before the limit
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const rlim_t limit = core_test::VirtualBytes() + (256u << 20);
    const rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(10);
    std::vector<void*> kept;
    kept.reserve(100000);
    int refused = 0;
    for (int i = 0; i < 100000 && refused == 0; ++i) {
      errno = 0;
      void* p = tierpool_malloc((i % 2) ? 1000000 : 30000);
      if (p == nullptr) {
        if (errno != ENOMEM) _exit(11);
        ++refused;
      } else {
        std::memset(p, 3, 4096);
        kept.push_back(p);
      }
    }
    if (refused == 0) _exit(12);
    for (void* p : kept)
      tierpool_free(p);
    void* again = tierpool_malloc(30000);
    if (again == nullptr) _exit(13);
    tierpool_free(again);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
