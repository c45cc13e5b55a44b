// The shared benchmark harness: a registry of (workload, allocator, threads) entries that the one
// main() in common/bench/src/main.cpp turns into Google Benchmark runs, a smoke run for the tests,
// and a fixed-length run for callgrind instruction counts.
//
// A step's benchmark is a single .cpp that registers its allocators on the workloads it cares about
// (see workloads.h) and the peers (see peers.h); it never copies a workload.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tierpool::bench {

// How long a workload runs. Zero fields mean "the published parameters" (SPEC §3).
struct RunOptions {
  int rounds = 0;      // rounds per thread; 0 = the workload's default
  bool smoke = false;  // tiny run for `make test`: every code path, no meaningful time
};

// What one run reports: alloc+free pairs done by all threads together, and the wall time of the
// timed part (set-up such as precomputing random sizes is outside it).
struct RunResult {
  RunResult() = default;
  RunResult(std::uint64_t pairs_done, std::uint64_t wall) : pairs(pairs_done), wall_ns(wall) {}

  std::uint64_t pairs = 0;
  std::uint64_t wall_ns = 0;
  // Figures beyond time that a workload measures itself (the resident set at its end, how often
  // a block moved): main.cpp reports each as a Google Benchmark counter of that name, with the
  // value of the entry's last iteration.
  std::vector<std::pair<std::string, double>> counters;
  // Not empty: the allocator cannot run this workload (it lacks a call the workload needs), and
  // this says why. The run did nothing; the runner reports the entry as skipped with this note.
  std::string skipped;
};

// An open benchmark: it owns the allocator under test for as long as the benchmark runs.
using Session = std::function<RunResult(const RunOptions&)>;

struct Entry {
  std::string workload;   // e.g. "shuffle64"
  std::string allocator;  // e.g. "step05-objectpool", "malloc", "baseline"
  int threads = 1;
  std::function<Session()> open;
  // One iteration and one repetition per process, whatever the runner asks for: a workload whose
  // figures are the process's resident set says so with `static constexpr bool kOneShot = true`
  // (a second run would start from the heap the first one left).
  bool one_shot = false;

  std::string Name() const {
    return workload + "/" + allocator + "/threads:" + std::to_string(threads);
  }
};

std::vector<Entry>& Registry();

// Register `Workload` run by `threads` threads against an `Alloc` built from `args` when the
// benchmark starts and destroyed when it ends (so a pool that dies is part of what is tested).
template <class Workload, class Alloc, class... Args>
void Register(std::string allocator, int threads, Args... args) {
  bool one_shot = false;
  if constexpr (requires { Workload::kOneShot; }) one_shot = Workload::kOneShot;
  Registry().push_back(Entry{std::string(Workload::kName), std::move(allocator), threads,
                             [=]() -> Session {
                               auto alloc = std::make_shared<Alloc>(args...);
                               return [alloc, threads](const RunOptions& options) {
                                 return Workload::Run(*alloc, threads, options);
                               };
                             },
                             one_shot});
}

template <class Workload, class Alloc, class... Args>
void RegisterThreads(const std::string& allocator, std::initializer_list<int> threads,
                     Args... args) {
  for (int t : threads)
    Register<Workload, Alloc>(allocator, t, args...);
}

// Runs body(thread_index) on `threads` new threads released together; returns the wall time from
// the release to the last thread's end. Thread start-up is outside the timed part.
template <class Body>
std::uint64_t RunOnThreads(int threads, Body body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire))
        std::this_thread::yield();
      body(t);
    });
  }
  while (ready.load() != threads)
    std::this_thread::yield();
  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& w : workers)
    w.join();
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

inline std::uint64_t NowNs() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// The process's resident set now (not its peak), in KiB: the second field of /proc/self/statm,
// in pages. 0 where /proc is not there.
inline double CurrentRssKiB() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0.0;
  unsigned long long size = 0;
  unsigned long long resident = 0;
  const int fields = std::fscanf(statm, "%llu %llu", &size, &resident);
  std::fclose(statm);
  if (fields != 2) return 0.0;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / 1024.0;
}

// Keeps the compiler from dropping stores into memory it can prove is never read.
inline void KeepAlive(void* p) {
  asm volatile("" : : "g"(p) : "memory");
}

}  // namespace tierpool::bench
