// Reading a recorded allocation trace (common/trace/trace_format.h, written by
// common/trace/recorder.c, compressed with xz) into the form the replay runs from: one array of
// operations per recorded thread, each operation with its block's id, size and global position.
//
// Everything here lives in memory mapped with mmap, not malloc'd: the replay measures how much
// memory the allocator under test holds, and blocks this reader freed into that allocator before
// the replay would be memory the allocator got for free.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

namespace tierpool::bench {

// A std::allocator that takes its memory straight from the OS.
template <class T>
struct MmapAllocator {
  using value_type = T;
  MmapAllocator() = default;
  template <class U>
  MmapAllocator(const MmapAllocator<U>&) {}
  T* allocate(std::size_t n) {
    void* p =
        mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) { munmap(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const MmapAllocator<U>&) const {
    return true;
  }
};
template <class T>
using MappedVector = std::vector<T, MmapAllocator<T>>;

// What the replay does for one recorded call.
enum class TraceKind : std::uint8_t {
  kAlloc,         // malloc, operator new, new[]
  kAllocZeroed,   // calloc
  kAllocAligned,  // memalign, posix_memalign, aligned_alloc, valloc, pvalloc, aligned new
  kFree,          // free, every delete
  kRealloc,       // realloc (of a block, or of NULL when old_id is kNoBlock)
};

struct TraceOp {
  static constexpr std::uint8_t kOtherThread = 1;  // frees a block another thread allocated
  static constexpr std::uint8_t kSample = 2;       // the resident set is read after this op
  static constexpr std::uint32_t kNoBlock = ~std::uint32_t{0};

  std::uint64_t size;      // bytes asked for (kFree: the block's size)
  std::uint32_t id;        // the block it creates (kFree: the block it frees)
  std::uint32_t old_id;    // kRealloc: the block it resizes
  std::uint32_t old_size;  // kRealloc: that block's size
  std::uint32_t seq;       // position in the whole trace, all threads together
  TraceKind kind;
  std::uint8_t align_log2;  // kAllocAligned
  std::uint8_t flags;
};

// The program's own memory at one point of the trace: what the replay sets beside the resident
// set of the allocator at the same point.
struct TracePoint {
  std::uint64_t ops;         // operations done, all threads together
  std::uint64_t live_bytes;  // bytes asked for and not yet freed, after them
  std::uint64_t ms;          // the recording's coarse clock, from its start
};

struct Trace {
  std::string command;  // the recorded process's command line
  std::uint64_t ops = 0;
  std::uint64_t blocks = 0;  // allocations (ids)
  unsigned threads = 0;
  std::uint64_t unmatched_frees = 0;  // counted by the recorder, not replayed
  std::uint64_t failed_calls = 0;
  bool complete = false;  // read to its end record (not a prefix)
  std::vector<MappedVector<TraceOp>> per_thread;
  MappedVector<std::uint64_t> block_size;  // by id
  // Peak of bytes asked for and not yet freed, in the trace's own order (malloc lab's numerator).
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t max_size = 0;
  std::uint64_t max_align = 0;  // of the aligned calls (0: none)
  std::uint64_t reallocs = 0;
  std::uint64_t callocs = 0;
  std::uint64_t cross_thread_frees = 0;
  std::uint64_t sample_every = 0;  // ops between two kSample ops
  std::vector<TracePoint> points;  // after each kSample op, in order
};

// Reads `path` (xz-compressed). op_limit > 0 reads only the first op_limit operations (the smoke
// run). Returns false with `error` set when the file cannot be read or is not a whole trace.
bool LoadTrace(const std::string& path, std::uint64_t op_limit, Trace& trace, std::string& error);

// The traces in `dir` (files named *.tptrace.xz), sorted by name.
std::vector<std::string> ListTraces(const std::string& dir);

// A trace's name: the file name without its directory and ".tptrace.xz".
std::string TraceName(const std::string& path);

// Beside every trace, <name>.txt says how it was recorded; its line "threads: N" is the number of
// threads it replays with (read without decompressing the trace). 0 when the line is missing.
unsigned TraceThreadsFromNote(const std::string& path);

}  // namespace tierpool::bench
