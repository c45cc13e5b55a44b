// The trace replay (common/bench/include/tierpool_bench/workload_trace.h) checks what it claims:
// every op replayed once, and a block handed out twice or a realloc that lost its contents shows
// in the tags; a trace the allocator cannot serve is skipped with the reason; a trace cut short or
// with wrong counts is refused.
#include <lzma.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tierpool/tierpool.h"
#include "tierpool_bench/workload_trace.h"
#include "trace_format.h"

namespace {

using tierpool::bench::ReplayTrace;
using tierpool::bench::RunOptions;
using tierpool::bench::RunResult;
using tierpool::bench::Trace;
using tierpool::bench::TraceCheck;

// Writes trace records by hand, then the xz file the replay reads.
class TraceWriter {
 public:
  TraceWriter() {
    bytes_.assign(TP_TRACE_MAGIC, TP_TRACE_MAGIC + TP_TRACE_MAGIC_BYTES);
    Varint(4);
    bytes_.insert(bytes_.end(), {'t', 'e', 's', 't'});
  }
  void Thread(unsigned t) {
    Op(TP_OP_THREAD);
    Varint(t);
  }
  void Alloc(int op, std::uint64_t size) {
    Op(op);
    Varint(size);
    ++ops_, ++blocks_;
  }
  void Aligned(std::uint64_t size, unsigned log2) {
    Op(TP_OP_POSIX_MEMALIGN);
    Varint(size);
    bytes_.push_back(std::uint8_t(log2));
    ++ops_, ++blocks_;
  }
  void Free(std::uint64_t id) {
    Op(TP_OP_FREE);
    Varint(blocks_ - id);
    ++ops_;
  }
  void Realloc(std::uint64_t id, std::uint64_t size) {
    Op(TP_OP_REALLOC);
    Varint(blocks_ - id);
    Varint(size);
    ++ops_, ++blocks_;
  }
  void End(std::uint64_t ops_claimed) {
    Op(TP_OP_END);
    for (std::uint64_t v :
         {ops_claimed, blocks_, std::uint64_t{1}, std::uint64_t{0}, std::uint64_t{0}})
      Varint(v);
  }
  void End() { End(ops_); }
  std::uint64_t ops() const { return ops_; }

  std::string Save(const std::string& name) const {
    std::vector<std::uint8_t> out(bytes_.size() + 1024);
    std::size_t len = 0;
    EXPECT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr, bytes_.data(), bytes_.size(),
                                      out.data(), &len, out.size()),
              LZMA_OK);
    const std::string path =
        ::testing::TempDir() + name + "-" + std::to_string(getpid()) + ".tptrace.xz";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(out.data()), std::streamsize(len));
    return path;
  }

 private:
  void Op(int op) { bytes_.push_back(std::uint8_t(op)); }
  void Varint(std::uint64_t v) {
    while (v >= 0x80) {
      bytes_.push_back(std::uint8_t((v & 0x7f) | 0x80));
      v >>= 7;
    }
    bytes_.push_back(std::uint8_t(v));
  }
  std::vector<std::uint8_t> bytes_;
  std::uint64_t ops_ = 0;
  std::uint64_t blocks_ = 0;
};

// malloc, calloc, new, an aligned block, a realloc that grows and one that shrinks, frees, and two
// blocks never freed.
TraceWriter Mixed() {
  TraceWriter w;
  w.Alloc(TP_OP_MALLOC, 24);  // 0
  w.Alloc(TP_OP_NEW, 100);    // 1
  w.Realloc(1, 9000);         // 2
  w.Alloc(TP_OP_CALLOC, 40);  // 3
  w.Aligned(64, 6);           // 4
  w.Free(0);
  w.Realloc(2, 5);           // 5
  w.Alloc(TP_OP_MALLOC, 0);  // 6
  w.Free(4);
  w.Alloc(TP_OP_NEW_ARRAY, 3);  // 7, never freed
  w.Free(6);
  w.End();
  return w;
}

struct Malloc : tierpool::bench::TraceMallocAllocator {};

RunResult Replay(auto& alloc, const std::string& path, TraceCheck& check) {
  RunOptions options;
  options.rounds = 1;
  return ReplayTrace(alloc, path, options, &check);
}

TEST(TraceReplay, EveryOpOnceAndEveryBlockBackAsItWasGiven) {
  const TraceWriter w = Mixed();
  const std::string path = w.Save("mixed");
  Malloc glibc;
  TraceCheck check;
  const RunResult result = Replay(glibc, path, check);
  EXPECT_TRUE(result.skipped.empty());
  EXPECT_EQ(result.pairs, w.ops());
  EXPECT_EQ(check.ops, w.ops());
  EXPECT_EQ(check.bad_tags, 0u);
  EXPECT_EQ(check.tags_read, check.tags_written);
  EXPECT_EQ(check.live_at_end, 3u);  // blocks 3, 5 and 7
  std::remove(path.c_str());
}

// Every Allocate returns the same block: two live blocks share memory.
struct Doubling {
  alignas(64) char block[1 << 16];
  void* Allocate(std::size_t) { return block; }
  void Deallocate(void*, std::size_t) {}
  void EndRound() {}
};

TEST(TraceReplay, ABlockHandedOutTwiceShows) {
  TraceWriter w;
  w.Alloc(TP_OP_MALLOC, 32);
  w.Alloc(TP_OP_MALLOC, 32);
  w.Free(0);
  w.Free(1);
  w.End();
  const std::string path = w.Save("doubled");
  auto doubling = std::make_unique<Doubling>();
  TraceCheck check;
  Replay(*doubling, path, check);
  EXPECT_EQ(check.ops, 4u);
  EXPECT_GT(check.bad_tags, 0u);
  EXPECT_NE(check.tags_read, check.tags_written);
  std::remove(path.c_str());
}

// realloc that returns a fresh block without copying.
struct ForgetfulRealloc : Malloc {
  void* Reallocate(void* p, std::size_t, std::size_t bytes) {
    std::free(p);
    return std::calloc(1, bytes);
  }
};

TEST(TraceReplay, AReallocThatLosesTheContentsShows) {
  TraceWriter w;
  w.Alloc(TP_OP_MALLOC, 64);
  w.Realloc(0, 128);
  w.Free(1);
  w.End();
  const std::string path = w.Save("forgetful");
  ForgetfulRealloc alloc;
  TraceCheck check;
  Replay(alloc, path, check);
  EXPECT_GT(check.bad_tags, 0u);
  EXPECT_NE(check.tags_read, check.tags_written);
  std::remove(path.c_str());
}

TEST(TraceReplay, StepSixServesTheMixedTrace) {
  struct Tierpool {
    void* Allocate(std::size_t n) { return tierpool::ConcurrentAlloc(n); }
    void Deallocate(void* p, std::size_t) { tierpool::ConcurrentFree(p); }
    void EndRound() {}
    void* Reallocate(void* p, std::size_t, std::size_t n) { return tierpool_realloc(p, n); }
    void* AllocateAligned(std::size_t n, std::size_t a) {
      return tierpool::ConcurrentAlignedAlloc(n, a);
    }
  } alloc;
  const TraceWriter w = Mixed();
  const std::string path = w.Save("mixed-tierpool");
  TraceCheck check;
  Replay(alloc, path, check);
  EXPECT_EQ(check.ops, w.ops());
  EXPECT_EQ(check.bad_tags, 0u);
  EXPECT_EQ(check.tags_read, check.tags_written);
  std::remove(path.c_str());
}

// A one-thread pool that serves alignments up to 64 bytes, without realloc or calloc: the replay
// copies (malloc + copy + free) and clears for it, and skips what it cannot serve.
struct SmallPool : Malloc {
  static constexpr bool kThreadSafe = false;
  static constexpr std::size_t kMaxAlign = 64;
};

TEST(TraceReplay, WhatAnAllocatorCannotServeIsSkippedWithTheReason) {
  TraceWriter threads;
  threads.Alloc(TP_OP_MALLOC, 8);
  threads.Thread(1);
  threads.Free(0);
  threads.End();
  TraceWriter aligned;
  aligned.Aligned(100, 13);
  aligned.Free(0);
  aligned.End();
  SmallPool pool;
  TraceCheck check;
  const std::string threads_path = threads.Save("threads");
  const std::string aligned_path = aligned.Save("aligned");
  EXPECT_NE(Replay(pool, threads_path, check).skipped.find("not thread-safe"), std::string::npos);
  EXPECT_NE(Replay(pool, aligned_path, check).skipped.find("8192"), std::string::npos);
  // malloc serves both; the free of the other thread's block waits for it.
  Malloc glibc;
  EXPECT_TRUE(Replay(glibc, threads_path, check).skipped.empty());
  EXPECT_EQ(check.ops, 2u);
  EXPECT_EQ(check.bad_tags, 0u);
  std::remove(threads_path.c_str());
  std::remove(aligned_path.c_str());
}

TEST(TraceReplay, ATraceCutShortOrMiscountedIsRefused) {
  TraceWriter cut;
  cut.Alloc(TP_OP_MALLOC, 8);
  TraceWriter miscounted;
  miscounted.Alloc(TP_OP_MALLOC, 8);
  miscounted.End(5);
  Trace trace;
  std::string error;
  const std::string cut_path = cut.Save("cut");
  const std::string bad_path = miscounted.Save("miscounted");
  EXPECT_FALSE(tierpool::bench::LoadTrace(cut_path, 0, trace, error));
  EXPECT_NE(error.find("cut short"), std::string::npos);
  EXPECT_TRUE(tierpool::bench::LoadTrace(cut_path, 1, trace, error));  // a prefix is fine
  EXPECT_FALSE(tierpool::bench::LoadTrace(bad_path, 0, trace, error));
  EXPECT_NE(error.find("counts differ"), std::string::npos);
  std::remove(cut_path.c_str());
  std::remove(bad_path.c_str());
}

}  // namespace
