// The trace workloads: real programs' allocations, recorded (common/trace/recorder.c, `make
// trace`) and replayed here against any allocator, with the recorded threads as threads.
//
// One entry per trace in common/traces/ (or $TIERPOOL_TRACE_DIR) and allocator, named
// "trace-<name>". Each replays the whole trace three times in one process (once in a smoke run, a
// prefix of 20 000 ops); after each replay the blocks the program never freed are freed, untimed.
//   ns_per_pair      ns per operation (malloc, free, realloc, ... each one op), mean of the replays
//   held_peak_kib    the first replay's peak resident set minus the resident set before it: the
//                    most memory the allocator held from the OS at once (VmHWM, reset before the
//                    replay through /proc/self/clear_refs)
//   live_peak_kib    the trace's own peak of bytes asked for and not yet freed
//   utilisation_pct  live_peak / held_peak, CS:APP's malloc-lab score
//   curve            with $TIERPOOL_TRACE_CURVE set, the first replay writes the resident set over
//                    the trace there (CSV: ops, ms, live bytes, resident KiB above the start)
//
// What a replay does per op: the call, then a tag (from the block's id) written into the block's
// first and last 8 bytes and one word in every 4 KiB page between, so the block's memory is
// resident as a program's would be. A free reads the tag back first: a block that another block
// overlapped, or a realloc that lost the contents, shows as a wrong tag, and the sum of the tags
// read back must equal the sum of the tags written (TraceCheck): no block lost or doubled.
//
// An allocator takes part if it has Allocate/Deallocate/EndRound; more calls are used when there:
//   void* Reallocate(void* p, std::size_t old_bytes, std::size_t new_bytes);  else malloc+copy+free
//   void* AllocateZeroed(std::size_t bytes);                                   else malloc+memset
//   void* AllocateAligned(std::size_t bytes, std::size_t align);  else only alignments <= 16
//   static constexpr std::size_t kMaxAlign;          largest alignment AllocateAligned serves
//   static constexpr bool kThreadSafe = false;       one-thread traces only
//   static constexpr bool kChecked = false;          blocks may overlap (the baseline): no tags
//   read
// A trace that needs what the allocator does not have is skipped, and the run says why
// (RunResult::skipped): the runner prints it as a note.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tierpool_bench/harness.h"
#include "tierpool_bench/trace_reader.h"

#ifndef TIERPOOL_TRACE_DIR
#define TIERPOOL_TRACE_DIR ""
#endif

namespace tierpool::bench {

// What a replay checked: equal sums and no bad tag mean every block came back as it was given.
struct TraceCheck {
  std::uint64_t ops = 0;
  std::uint64_t tags_written = 0;  // sum of every block's tag
  std::uint64_t tags_read = 0;     // sum of what was read back at its free (or realloc, or end)
  std::uint64_t bad_tags = 0;      // frees whose block did not hold its tag at both ends
  std::uint64_t live_at_end = 0;   // blocks the program never freed
};

namespace trace_detail {

inline std::uint64_t Tag(std::uint32_t id) {
  std::uint64_t x = (std::uint64_t(id) + 1) * 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29);
}
// The tag as a block of `size` bytes holds it: its first min(size, 8) bytes.
inline std::uint64_t HeadOf(std::uint64_t tag, std::uint64_t size) {
  return size >= 8 ? tag : tag & ((std::uint64_t{1} << (8 * size)) - 1);
}
inline std::uint64_t ReadHead(const void* p, std::uint64_t size) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, std::min<std::uint64_t>(size, 8));
  return v;
}
inline void WriteTag(void* p, std::uint64_t size, std::uint64_t tag) {
  auto* bytes = static_cast<char*>(p);
  std::memcpy(bytes, &tag, std::min<std::uint64_t>(size, 8));
  for (std::uint64_t offset = 4096; offset + 8 < size; offset += 4096)
    std::memcpy(bytes + offset, &tag, 8);
  if (size >= 16) std::memcpy(bytes + size - 8, &tag, 8);
}
inline bool TailHolds(const void* p, std::uint64_t size, std::uint64_t tag) {
  if (size < 16) return true;
  std::uint64_t v;
  std::memcpy(&v, static_cast<const char*>(p) + size - 8, 8);
  return v == tag;
}

// The resident set in KiB, read without allocating (the replay's own mallocs would be counted).
class RssReader {
 public:
  RssReader() : fd_(open("/proc/self/statm", O_RDONLY | O_CLOEXEC)) {}
  ~RssReader() {
    if (fd_ >= 0) close(fd_);
  }
  RssReader(const RssReader&) = delete;
  RssReader& operator=(const RssReader&) = delete;
  std::uint64_t KiB() const {
    char buf[128];
    if (fd_ < 0) return 0;
    const ssize_t n = pread(fd_, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char* p = std::strchr(buf, ' ');
    return p ? std::strtoull(p + 1, nullptr, 10) * std::uint64_t(sysconf(_SC_PAGESIZE)) / 1024 : 0;
  }

 private:
  int fd_;
};

// VmHWM, the peak resident set, in KiB; ResetPeak() starts it again from the resident set now.
inline std::uint64_t PeakKiB() {
  char buf[4096];
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strstr(buf, "VmHWM:");
  return p ? std::strtoull(p + 6, nullptr, 10) : 0;
}
inline bool ResetPeak() {
  const int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, "5", 1) == 1;
  close(fd);
  return ok;
}

// Threads start epoch e (ops e*kEpoch .. of the whole trace) only when every other thread has
// finished epoch e-2: the replay keeps near the recorded interleaving (a thread cannot run far
// ahead and raise the live peak the trace never had), at one check per 1024 ops.
constexpr std::uint32_t kEpoch = 1024;
struct alignas(64) EpochCounter {
  std::atomic<std::uint64_t> done{0};  // epochs before this one are finished
};

template <class A>
constexpr bool kThreadSafe = [] {
  if constexpr (requires { A::kThreadSafe; }) return A::kThreadSafe;
  return true;
}();
template <class A>
constexpr bool kChecked = [] {
  if constexpr (requires { A::kChecked; }) return A::kChecked;
  return true;
}();
template <class A>
constexpr std::size_t kMaxAlign = [] {
  if constexpr (requires { A::kMaxAlign; }) return A::kMaxAlign;
  if constexpr (requires(A & a) { a.AllocateAligned(std::size_t{}, std::size_t{}); })
    return ~std::size_t{0};
  return std::size_t{16};
}();

// Why `A` cannot replay `trace`, or "" when it can.
template <class A>
std::string CannotServe(const Trace& trace) {
  if (trace.threads > 1 && !kThreadSafe<A>)
    return "not thread-safe, and the trace has " + std::to_string(trace.threads) + " threads";
  if (trace.max_align > kMaxAlign<A>)
    return "an alignment of " + std::to_string(trace.max_align) + " bytes (it serves up to " +
           std::to_string(kMaxAlign<A>) + ")";
  return "";
}

template <class A>
void* AllocAligned(A& alloc, std::uint64_t size, std::size_t align) {
  if constexpr (requires { alloc.AllocateAligned(size, align); }) {
    return alloc.AllocateAligned(size, align);
  } else {
    return alloc.Allocate(size);  // align <= 16, checked before the replay
  }
}

template <class A>
void* Realloc(A& alloc, void* p, std::uint64_t old_size, std::uint64_t size) {
  if constexpr (requires { alloc.Reallocate(p, old_size, size); }) {
    return alloc.Reallocate(p, old_size, size);
  } else {
    void* q = alloc.Allocate(size);
    if (q != nullptr && p != nullptr) {
      if constexpr (kChecked<A>) std::memcpy(q, p, std::min(old_size, size));
      alloc.Deallocate(p, old_size);
    }
    return q;
  }
}

[[noreturn]] inline void ReplayFailed(const char* what, std::uint64_t seq) {
  std::fprintf(stderr, "trace replay: %s at op %llu\n", what, (unsigned long long)seq);
  std::abort();
}

struct Sample {
  std::uint64_t rss_kib;
};

// One replay of `trace` on `alloc`; `slots` (one per block id, zeroed) receive the pointers.
template <class A>
std::uint64_t ReplayOnce(A& alloc, const Trace& trace, std::atomic<void*>* slots, TraceCheck& check,
                         Sample* samples, const RssReader& rss) {
  const int threads = int(std::max(1u, trace.threads));
  std::vector<EpochCounter> epochs(threads);
  std::vector<TraceCheck> checks(threads);
  const std::uint64_t wall = RunOnThreads(threads, [&](int t) {
    const MappedVector<TraceOp>& ops = trace.per_thread[t];
    TraceCheck& mine = checks[t];
    std::uint64_t epoch = 0;
    for (const TraceOp& op : ops) {
      if (threads > 1 && op.seq / kEpoch != epoch) {
        epoch = op.seq / kEpoch;
        epochs[t].done.store(epoch, std::memory_order_release);
        for (int other = 0; other < threads; ++other) {
          while (other != t && epochs[other].done.load(std::memory_order_acquire) < epoch - 1)
            std::this_thread::yield();
        }
      }
      // A block freed here that another thread allocates: wait until it has.
      auto take = [&](std::uint32_t id) {
        void* p = slots[id].load(std::memory_order_relaxed);
        if (op.flags & TraceOp::kOtherThread) {
          while ((p = slots[id].load(std::memory_order_acquire)) == nullptr)
            std::this_thread::yield();
        }
        return p;
      };
      auto give = [&](std::uint32_t id, void* p, std::uint64_t size) {
        if (p == nullptr) ReplayFailed("the allocator returned NULL", op.seq);
        const std::uint64_t tag = Tag(id);
        WriteTag(p, size, tag);
        mine.tags_written += HeadOf(tag, size);
        slots[id].store(p, std::memory_order_release);
      };
      auto check_back = [&](std::uint32_t id, const void* p, std::uint64_t size) {
        if constexpr (kChecked<A>) {
          const std::uint64_t head = ReadHead(p, size);
          mine.tags_read += head;
          if (head != HeadOf(Tag(id), size) || !TailHolds(p, size, Tag(id))) ++mine.bad_tags;
        }
      };
      switch (op.kind) {
        case TraceKind::kAlloc:
          give(op.id, alloc.Allocate(op.size), op.size);
          break;
        case TraceKind::kAllocZeroed: {
          void* p;
          if constexpr (requires { alloc.AllocateZeroed(op.size); }) {
            p = alloc.AllocateZeroed(op.size);
          } else {
            p = alloc.Allocate(op.size);
            if (p != nullptr) std::memset(p, 0, op.size);
          }
          give(op.id, p, op.size);
          break;
        }
        case TraceKind::kAllocAligned:
          give(op.id, AllocAligned(alloc, op.size, std::size_t{1} << op.align_log2), op.size);
          break;
        case TraceKind::kFree: {
          void* p = take(op.id);
          check_back(op.id, p, op.size);
          alloc.Deallocate(p, op.size);
          break;
        }
        case TraceKind::kRealloc: {
          void* old = op.old_id == TraceOp::kNoBlock ? nullptr : take(op.old_id);
          if (old != nullptr) {
            // The tail is checked before the call (realloc keeps only what fits); the head after,
            // in the block realloc returned: the copy kept it.
            if constexpr (kChecked<A>) {
              if (!TailHolds(old, op.old_size, Tag(op.old_id))) ++mine.bad_tags;
            }
          }
          void* p = Realloc(alloc, old, op.old_size, op.size);
          if (p == nullptr) ReplayFailed("realloc returned NULL", op.seq);
          if (old != nullptr) {
            const std::uint64_t kept = std::min<std::uint64_t>(op.old_size, op.size);
            if constexpr (kChecked<A>) {
              const std::uint64_t head = ReadHead(p, kept);
              mine.tags_read += head;
              if (head != HeadOf(Tag(op.old_id), kept)) ++mine.bad_tags;
              // The part realloc dropped cannot be read back: count it as read.
              mine.tags_read += HeadOf(Tag(op.old_id), op.old_size) - HeadOf(Tag(op.old_id), kept);
            }
          }
          give(op.id, p, op.size);
          break;
        }
      }
      ++mine.ops;
      if (op.flags & TraceOp::kSample) samples[op.seq / trace.sample_every].rss_kib = rss.KiB();
    }
    epochs[t].done.store(~std::uint64_t{0}, std::memory_order_release);
  });
  for (const TraceCheck& c : checks) {
    check.ops += c.ops;
    check.tags_written += c.tags_written;
    check.tags_read += c.tags_read;
    check.bad_tags += c.bad_tags;
  }
  return wall;
}

// After a replay, untimed: what the program never freed (it would go at exit), then the slots
// are cleared for the next replay.
template <class A>
void FreeRemaining(A& alloc, const Trace& trace, std::atomic<void*>* slots, TraceCheck& check) {
  std::vector<bool> freed(trace.blocks, false);
  for (const auto& ops : trace.per_thread) {
    for (const TraceOp& op : ops) {
      if (op.kind == TraceKind::kFree) freed[op.id] = true;
      if (op.kind == TraceKind::kRealloc && op.old_id != TraceOp::kNoBlock) freed[op.old_id] = true;
    }
  }
  for (std::uint64_t id = 0; id < trace.blocks; ++id) {
    void* p = slots[id].load(std::memory_order_relaxed);
    if (!freed[id]) {
      const std::uint64_t size = trace.block_size[id];
      if constexpr (kChecked<A>) {
        const std::uint64_t head = ReadHead(p, size);
        check.tags_read += head;
        if (head != HeadOf(Tag(std::uint32_t(id)), size) ||
            !TailHolds(p, size, Tag(std::uint32_t(id))))
          ++check.bad_tags;
      }
      ++check.live_at_end;
      alloc.Deallocate(p, size);
    }
    slots[id].store(nullptr, std::memory_order_relaxed);
  }
  alloc.EndRound();
}

// Decoded traces are kept for the process's life: the three replays and every entry of a smoke
// run read the same file once.
inline const Trace* CachedTrace(const std::string& path, std::uint64_t op_limit,
                                std::string& error) {
  struct Cached {
    std::string path;
    std::uint64_t limit;
    std::unique_ptr<Trace> trace;
  };
  static std::vector<Cached> cache;
  for (const Cached& c : cache)
    if (c.path == path && c.limit == op_limit) return c.trace.get();
  auto trace = std::make_unique<Trace>();
  if (!LoadTrace(path, op_limit, *trace, error)) return nullptr;
  trace->blocks = trace->block_size.size();
  cache.push_back({path, op_limit, std::move(trace)});
  return cache.back().trace.get();
}

}  // namespace trace_detail

constexpr std::uint64_t kTraceSmokeOps = 20000;

// Replays `path` on `alloc` and returns what the runner reports; `check` gets what the replays
// checked (all of them summed).
template <class A>
RunResult ReplayTrace(A& alloc, const std::string& path, const RunOptions& options,
                      TraceCheck* check_out = nullptr) {
  using namespace trace_detail;
  std::string error;
  const Trace* trace = CachedTrace(path, options.smoke ? kTraceSmokeOps : 0, error);
  if (trace == nullptr) ReplayFailed(error.c_str(), 0);
  RunResult result;
  result.skipped = CannotServe<A>(*trace);
  if (!result.skipped.empty()) return result;

  const int rounds = options.rounds > 0 ? options.rounds : (options.smoke ? 1 : 3);
  MappedVector<std::atomic<void*>> slots(trace->blocks);  // zeroed, and resident: written here
  std::memset(static_cast<void*>(slots.data()), 0, slots.size() * sizeof(slots[0]));
  std::vector<Sample> samples(trace->points.size() + 1);
  RssReader rss;
  TraceCheck check;
  std::uint64_t wall = 0;
  std::uint64_t before = 0, held_peak = 0;
  bool peak_reset = false;  // without /proc/self/clear_refs, the samples' maximum is the peak
  for (int r = 0; r < rounds; ++r) {
    if (r == 0) {
      before = rss.KiB();
      peak_reset = ResetPeak();
    }
    wall += ReplayOnce(alloc, *trace, slots.data(), check, samples.data(), rss);
    if (r == 0) {
      std::uint64_t peak = peak_reset ? PeakKiB() : 0;
      for (std::size_t i = 0; i < trace->points.size(); ++i)
        peak = std::max(peak, samples[i].rss_kib);
      held_peak = peak > before ? peak - before : 0;
      if (const char* curve = std::getenv("TIERPOOL_TRACE_CURVE"); curve && *curve) {
        if (std::FILE* out = std::fopen(curve, "w")) {
          std::fprintf(out, "ops,ms,live_kib,held_kib\n");
          for (std::size_t i = 0; i < trace->points.size(); ++i) {
            const TracePoint& point = trace->points[i];
            const std::uint64_t held =
                samples[i].rss_kib > before ? samples[i].rss_kib - before : 0;
            std::fprintf(out, "%llu,%llu,%llu,%llu\n", (unsigned long long)point.ops,
                         (unsigned long long)point.ms,
                         (unsigned long long)(point.live_bytes / 1024), (unsigned long long)held);
          }
          std::fclose(out);
        }
      }
    }
    FreeRemaining(alloc, *trace, slots.data(), check);
  }
  if (check_out != nullptr) {
    *check_out = check;  // the caller judges it (the tests)
  } else if (kChecked<A> && (check.bad_tags != 0 || check.tags_read != check.tags_written))
    ReplayFailed("a block came back changed: lost or handed out twice", 0);
  result.pairs = check.ops;
  result.wall_ns = wall;
  const double live_kib = double(trace->peak_live_bytes) / 1024.0;
  result.counters = {{"held_peak_kib", double(held_peak)},
                     {"live_peak_kib", live_kib},
                     {"utilisation_pct", held_peak ? 100.0 * live_kib / double(held_peak) : 0.0},
                     {"trace_ops", double(trace->ops)},
                     {"trace_threads", double(trace->threads)},
                     {"blocks_live_at_end", double(check.live_at_end) / rounds},
                     {"blocks_bad", double(check.bad_tags)},
                     {"tags_equal", check.tags_read == check.tags_written ? 1.0 : 0.0}};
  return result;
}

inline std::string TraceDir() {
  if (const char* dir = std::getenv("TIERPOOL_TRACE_DIR"); dir && *dir) return dir;
  return TIERPOOL_TRACE_DIR;
}

// Registers "trace-<name>" for every trace in TraceDir(), replayed on an `A` built fresh per
// entry. `threads` in the entry's name is the trace's (from the note beside it).
template <class A>
void RegisterTraces(const std::string& allocator) {
  for (const std::string& path : ListTraces(TraceDir())) {
    const int threads = int(std::max(1u, TraceThreadsFromNote(path)));
    Registry().push_back(Entry{"trace-" + TraceName(path), allocator, threads,
                               [path]() -> Session {
                                 auto alloc = std::make_shared<A>();
                                 return [alloc, path](const RunOptions& options) {
                                   return ReplayTrace(*alloc, path, options);
                                 };
                               },
                               /*one_shot=*/true});
  }
}

// The malloc rows on traces: the process's malloc (the runner preloads the peers), with every
// call a C program has.
struct TraceMallocAllocator {
  void* Allocate(std::size_t bytes) { return std::malloc(bytes); }
  void Deallocate(void* p, std::size_t) { std::free(p); }
  void EndRound() {}
  void* Reallocate(void* p, std::size_t, std::size_t bytes) { return std::realloc(p, bytes); }
  void* AllocateZeroed(std::size_t bytes) { return std::calloc(1, bytes); }
  void* AllocateAligned(std::size_t bytes, std::size_t align) {
    void* p = nullptr;
    return posix_memalign(&p, std::max(align, sizeof(void*)), bytes) == 0 ? p : nullptr;
  }
};

// The harness alone on a trace: per thread, a bump pointer through an 8 MiB ring that wraps (so
// blocks overlap once it has: kChecked is false, no tag is read back), and every block of more
// than 1 MiB at the start of one region of its own. Its memory stays resident and mostly in cache,
// so its time is the replay's own work (the loop, the tags, the waits between threads) and not
// page faults; its memory means nothing.
class TraceBaselineAllocator {
 public:
  static constexpr bool kChecked = false;
  TraceBaselineAllocator() = default;
  TraceBaselineAllocator(const TraceBaselineAllocator&) = delete;
  TraceBaselineAllocator& operator=(const TraceBaselineAllocator&) = delete;
  ~TraceBaselineAllocator() {
    for (const Region& r : regions_)
      munmap(r.base, r.bytes);
  }

  void* Allocate(std::size_t bytes) { return AllocateAligned(bytes, 16); }
  void* AllocateAligned(std::size_t bytes, std::size_t align) {
    Cursor& c = cursor_;
    if (c.owner != id_) Attach(c);
    if (bytes > kBig) {
      if (bytes > kBigBytes)
        trace_detail::ReplayFailed("the baseline serves blocks up to 1 GiB", 0);
      return c.big;
    }
    char* p = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(c.next) + align - 1) &
                                      ~std::uintptr_t(align - 1));
    if (p + bytes > c.end) p = c.begin;
    c.next = p + bytes;
    return p;
  }
  void Deallocate(void*, std::size_t) {}
  void EndRound() {}

 private:
  static constexpr std::size_t kRing = std::size_t{8} << 20;
  static constexpr std::size_t kBig = std::size_t{1} << 20;
  static constexpr std::size_t kBigBytes = std::size_t{1} << 30;
  struct Cursor {
    std::uint64_t owner;
    char* begin;
    char* next;
    char* end;
    char* big;
  };
  struct Region {
    char* base;
    std::size_t bytes;
  };
  static inline thread_local Cursor cursor_{};
  static inline std::atomic<std::uint64_t> next_id_{1};

  char* Map(std::size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    std::lock_guard<std::mutex> lock(mutex_);
    regions_.push_back({static_cast<char*>(p), bytes});
    return static_cast<char*>(p);
  }
  void Attach(Cursor& c) {
    char* ring = Map(kRing);
    c = Cursor{id_, ring, ring, ring + kRing, Map(kBigBytes)};
  }

  const std::uint64_t id_ = next_id_.fetch_add(1);
  std::mutex mutex_;
  std::vector<Region> regions_;
};

}  // namespace tierpool::bench
