// The drop-in malloc over a process's whole life: before main (static constructors), threads that
// exit, fork() while other threads allocate, dlopen()ed libraries that allocate, and after exit
// begins (atexit handlers, static destructors, thread_local destructors).
//
// Built twice (the test's CMake block): dropin_process_linked_test links libtierpool.a;
// dropin_process_preload_test is a plain program run with LD_PRELOAD=libtierpool.so.
// A failure after main returns cannot be an EXPECT: it prints why and ends the process with
// exit status 3, which fails the ctest entry.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tierpool/tierpool.h"

namespace {

// --- tierpool's C API as this binary reaches it ------------------------------------------------

template <class F>
F Api(const char* name) {
#if DROPIN_MODE_LINKED
  (void)name;
  return nullptr;
#else
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
#endif
}

int Owns(const void* p) {
#if DROPIN_MODE_LINKED
  return tierpool_owns(p);
#else
  static auto owns = Api<int (*)(const void*)>("tierpool_owns");
  return owns != nullptr && owns(p);
#endif
}

tierpool_stats Stats() {
  tierpool_stats stats{};
#if DROPIN_MODE_LINKED
  tierpool_get_stats(&stats);
#else
  static auto get = Api<void (*)(tierpool_stats*)>("tierpool_get_stats");
  if (get != nullptr) get(&stats);
#endif
  return stats;
}

bool UnderValgrind() {
  return std::getenv("TIERPOOL_UNDER_VALGRIND") != nullptr;
}

[[noreturn]] void FailAfterMain(const char* what) {
  // No stdio: it may be gone by now.
  const char prefix[] = "dropin_process_test: after main: ";
  (void)!write(STDERR_FILENO, prefix, sizeof prefix - 1);
  (void)!write(STDERR_FILENO, what, strlen(what));
  (void)!write(STDERR_FILENO, "\n", 1);
  _exit(3);
}

// Allocates a spread of sizes with every family, checks each block is tierpool's, frees it all.
// Returns what went wrong, or nullptr.
const char* AllocateAndFreeEverything() {
  std::vector<void*> blocks;
  for (size_t n = 1; n < 70000; n = n * 3 + 5) {
    void* p = malloc(n);
    if (p == nullptr || !Owns(p)) return "malloc did not come from tierpool";
    memset(p, 0x11, n);
    blocks.push_back(p);
  }
  void* aligned = nullptr;
  if (posix_memalign(&aligned, 256, 1000) != 0 || !Owns(aligned)) return "posix_memalign failed";
  blocks.push_back(aligned);
  for (void* p : blocks)
    free(p);
  auto text = std::make_unique<std::string>(300, 'z');
  if (!Owns(text.get()) || !Owns(text->data())) return "new did not come from tierpool";
  return nullptr;
}

// --- before main -------------------------------------------------------------------------------

struct AllocatesBeforeMain {
  const char* error = "not run";
  void* kept = nullptr;
  AllocatesBeforeMain() {
    error = AllocateAndFreeEverything();
    kept = malloc(4000);  // kept past main, freed by the destructor after exit
  }
  ~AllocatesBeforeMain() {
    if (!Owns(kept)) FailAfterMain("a block allocated before main is not tierpool's");
    free(kept);
    if (const char* e = AllocateAndFreeEverything()) FailAfterMain(e);
  }
};
AllocatesBeforeMain before_main;

TEST(DropinProcess, StaticConstructorsAllocateBeforeMain) {
  EXPECT_EQ(before_main.error, nullptr) << before_main.error;
  EXPECT_TRUE(Owns(before_main.kept));
}

// --- after exit begins ---------------------------------------------------------------------------

struct AllocatesInThreadLocalDestructor {
  std::vector<std::string> strings;
  ~AllocatesInThreadLocalDestructor() {
    strings.emplace_back(500, 'q');
    if (!Owns(strings.back().data())) FailAfterMain("thread_local destructor: not tierpool's");
  }
};

void AllocateInAtexitHandler() {
  if (const char* e = AllocateAndFreeEverything()) FailAfterMain(e);
  // A handler registered during exit runs too, and may allocate as well.
  static int depth = 0;
  if (depth++ == 0) atexit(AllocateInAtexitHandler);
}

TEST(DropinProcess, AtexitHandlersAndDestructorsAllocateAfterExit) {
  ASSERT_EQ(atexit(AllocateInAtexitHandler), 0);
  thread_local AllocatesInThreadLocalDestructor main_thread_local;
  main_thread_local.strings.emplace_back(100, 'r');
  EXPECT_TRUE(Owns(main_thread_local.strings.back().data()));
  static std::vector<std::string> destroyed_at_exit(50, std::string(1000, 's'));
  EXPECT_TRUE(Owns(destroyed_at_exit.data()));
}

// --- thread exit -------------------------------------------------------------------------------

// Threads that allocate and exit return their caches: the count of live caches comes back, and
// many short-lived threads do not grow the heap (each would otherwise strand its cache).
TEST(DropinProcess, ThreadsThatExitReturnTheirCaches) {
  const int kWaves = UnderValgrind() ? 5 : 50;
  constexpr int kThreadsPerWave = 8;
  const tierpool_stats before = Stats();
  std::vector<void*> handed_over(kThreadsPerWave);
  size_t mapped_after_first_wave = 0;
  for (int wave = 0; wave < kWaves; ++wave) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreadsPerWave; ++t) {
      threads.emplace_back([&, t] {
        std::vector<void*> blocks;
        for (int i = 0; i < 2000; ++i)
          blocks.push_back(malloc(16 + (i * 13) % 1500));
        for (void* p : blocks)
          free(p);                    // now cached by this thread
        handed_over[t] = malloc(64);  // freed by the main thread after the join
        auto text = std::make_unique<std::string>(100, 'x');
        (void)text;
      });
    }
    for (auto& thread : threads)
      thread.join();
    for (void*& p : handed_over) {
      ASSERT_TRUE(Owns(p));
      free(p);
    }
    if (wave == 0) mapped_after_first_wave = Stats().mapped_bytes;
  }
  const tierpool_stats after = Stats();
  EXPECT_EQ(after.thread_caches, before.thread_caches) << "exited threads kept their caches";
  EXPECT_LE(after.mapped_bytes, mapped_after_first_wave + (size_t{32} << 20))
      << "short-lived threads made the heap grow";
}

// --- fork --------------------------------------------------------------------------------------

// Other threads allocate, reallocate and free without pause while the main thread forks; each
// child allocates (also from a new thread of its own) and must finish. A child stuck on a lock
// held at the time of fork is killed by its alarm and fails the test.
TEST(DropinProcess, ForkWhileOtherThreadsAllocate) {
  const int kForks = UnderValgrind() ? 3 : 30;
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 3; ++t) {
    busy.emplace_back([&, t] {
      std::vector<void*> blocks(64, nullptr);
      for (unsigned i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        void*& slot = blocks[(i * 7 + t) % blocks.size()];
        const size_t n = 1 + (i * 131) % (i % 50 == 0 ? 400000 : 3000);
        slot = i % 5 == 0 ? realloc(slot, n) : (free(slot), malloc(n));
      }
      for (void* p : blocks)
        free(p);
    });
  }
  for (int i = 0; i < kForks; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(20);
      if (AllocateAndFreeEverything() != nullptr) _exit(1);
      std::thread in_child([] {
        if (AllocateAndFreeEverything() != nullptr) _exit(2);
      });
      in_child.join();
      std::vector<std::string> strings(100, std::string(70, 'c'));
      _exit(Owns(strings.data()) ? 0 : 4);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status))
        << "child " << i << " died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    ASSERT_EQ(WEXITSTATUS(status), 0) << "child " << i;
  }
  stop = true;
  for (auto& thread : busy)
    thread.join();
}

// --- dlopen --------------------------------------------------------------------------------------

// The plugin (tests/dropin_plugin.cpp) allocates in its constructor, in its functions and in a
// thread_local; blocks cross the library boundary both ways; it is loaded and unloaded repeatedly.
TEST(DropinProcess, DlopenedLibraryAllocates) {
  const int kRounds = UnderValgrind() ? 3 : 20;
  for (int round = 0; round < kRounds; ++round) {
    void* plugin = dlopen(DROPIN_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(plugin, nullptr) << dlerror();
    auto make = reinterpret_cast<char* (*)(size_t)>(dlsym(plugin, "dropin_plugin_make"));
    auto release = reinterpret_cast<void (*)(void*)>(dlsym(plugin, "dropin_plugin_release"));
    auto work = reinterpret_cast<int (*)(int)>(dlsym(plugin, "dropin_plugin_work"));
    ASSERT_TRUE(make && release && work);
    char* from_plugin = make(5000);
    EXPECT_TRUE(Owns(from_plugin));
    EXPECT_EQ(from_plugin[4998], 'p');
    free(from_plugin);     // allocated there, freed here
    release(malloc(300));  // allocated here, freed there
    EXPECT_EQ(work(1000), 1000);
    int from_thread = 0;
    std::thread([&] { from_thread = work(100); }).join();  // its thread_local in a new thread
    EXPECT_EQ(from_thread, 100);
    ASSERT_EQ(dlclose(plugin), 0);
  }
}

}  // namespace
