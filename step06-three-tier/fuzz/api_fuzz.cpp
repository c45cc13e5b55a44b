// libFuzzer target: the allocator's public API (include/tierpool/tierpool.h): ConcurrentAlloc and
// tierpool_malloc, tierpool_calloc, ConcurrentAlignedAlloc, tierpool_realloc, ConcurrentFree /
// tierpool_free, the sized frees, and tierpool_thread_flush, each on the thread the input chooses
// (this one or one of two helpers), so blocks are freed by other threads and thread caches fill,
// overflow into the central cache and come back. Requests that must fail (sizes beyond the
// address space, n * size overflowing, alignments that are not powers of two) are mixed in.
// common/fuzz/fuzz_model.h checks every block (alignment, no overlap, contents kept, realloc
// keeping the prefix); this file checks the contract of the API besides: calloc's zeros,
// usable size >= size, tierpool_owns, and NULL with the right errno exactly where SPEC §6 says.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "fuzz_model.h"
#include "tierpool/tierpool.h"

namespace {

using tierpool_fuzz::FuzzInput;
using tierpool_fuzz::HelperThread;
using tierpool_fuzz::LiveBlock;
using tierpool_fuzz::ShadowHeap;

// Large enough for whole-span blocks (above 256 KiB), small enough to fill every byte.
constexpr std::size_t kMaxRequest = std::size_t{600} << 10;
constexpr std::size_t kImpossible = std::size_t{1} << 62;  // beyond any address space

// How a block may be freed: ConcurrentFree(p, size) needs the size's own class, which a block
// of ConcurrentAlignedAlloc (with an alignment above 8) may not have.
enum Kind : unsigned { kSizedFreeOk, kUnsizedFreeOnly };

void Check(ShadowHeap& heap, bool ok, const char* what, const void* p, std::size_t n) {
  if (!ok) heap.Fail(what, p, n);
}

// A fresh block of `size` bytes, promised aligned to `align`: the API's own checks, then the model.
void Record(ShadowHeap& heap, void* p, std::size_t size, std::size_t align, Kind kind) {
  Check(heap, p != nullptr, "a serviceable request returned NULL", p, size);
  Check(heap, tierpool_owns(p) == 1, "a block tierpool_owns() denies", p, size);
  Check(heap, tierpool_usable_size(p) >= size, "usable size below the size asked", p, size);
  heap.Add(p, size, align, 0, kind);
}

void FreeBlock(const LiveBlock& block, std::uint8_t how) {
  switch (how % 4) {
    case 0:
      return tierpool::ConcurrentFree(block.data);
    case 1:
      return tierpool_free(block.data);
    default:
      if (block.kind != kSizedFreeOk) return tierpool::ConcurrentFree(block.data);
      if (how % 4 == 2) return tierpool::ConcurrentFree(block.data, block.size);
      return tierpool_free_sized(block.data, block.size);
  }
}

void RunOp(std::uint8_t op, FuzzInput& in, ShadowHeap& heap) {
  using tierpool_fuzz::FundamentalAlignmentFor;
  switch (op % 8) {
    case 0: {  // malloc
      if (heap.full()) break;
      const std::size_t size = in.Size(kMaxRequest);
      void* p = op & 0x80 ? tierpool_malloc(size) : tierpool::ConcurrentAlloc(size);
      Record(heap, p, size, FundamentalAlignmentFor(size), kSizedFreeOk);
      break;
    }
    case 1: {  // calloc: zeroed, and n * size checked for overflow
      if (heap.full()) break;
      const std::size_t n = in.Byte() % 17;
      const std::size_t each = in.Size(kMaxRequest / 16);
      void* p = tierpool_calloc(n, each);
      const auto* bytes = static_cast<const unsigned char*>(p);
      for (std::size_t k = 0; p != nullptr && k < n * each; ++k)
        Check(heap, bytes[k] == 0, "calloc memory not zeroed", bytes + k, k);
      Record(heap, p, n * each, FundamentalAlignmentFor(n * each), kSizedFreeOk);
      break;
    }
    case 2: {  // aligned: any power of two up to 1 MiB
      if (heap.full()) break;
      const std::size_t size = in.Size(kMaxRequest);
      const std::size_t align = in.Alignment(20);
      void* p = tierpool::ConcurrentAlignedAlloc(size, align);
      Record(heap, p, size, align, align <= 8 ? kSizedFreeOk : kUnsizedFreeOnly);
      break;
    }
    case 3: {  // realloc of a live block (to 0 bytes too), or of NULL
      const std::size_t size = in.Size(kMaxRequest);
      if (heap.empty()) {
        if (heap.full()) break;
        Record(heap, tierpool_realloc(nullptr, size), size, FundamentalAlignmentFor(size),
               kSizedFreeOk);
        break;
      }
      const std::size_t index = heap.Pick(in);
      void* p = tierpool_realloc(heap.at(index).data, size);
      Check(heap, p != nullptr, "realloc of a live block returned NULL", p, size);
      Check(heap, tierpool_usable_size(p) >= size, "usable size below the size asked", p, size);
      heap.Reallocated(index, p, size, FundamentalAlignmentFor(size));
      break;
    }
    case 4:
    case 5:  // free
      if (!heap.empty()) FreeBlock(heap.Remove(heap.Pick(in)), in.Byte());
      break;
    case 6: {  // requests that must fail, and leave everything as it was
      const std::uint8_t which = in.Byte() % 4;
      errno = 0;
      void* p = nullptr;
      int expected = ENOMEM;
      if (which == 0) {
        p = tierpool::ConcurrentAlloc(kImpossible + in.Size(kMaxRequest));
      } else if (which == 1) {
        p = tierpool_calloc(kImpossible, 4 + in.Byte());
      } else if (which == 2) {
        p = tierpool::ConcurrentAlignedAlloc(in.Size(kMaxRequest), 3 << in.Byte() % 20);
        expected = EINVAL;
      } else if (!heap.empty()) {
        p = tierpool_realloc(heap.at(heap.Pick(in)).data, kImpossible);  // the block stays
      } else {
        errno = ENOMEM;
      }
      Check(heap, p == nullptr, "an impossible request was served", p, which);
      Check(heap, errno == expected, "wrong errno for an impossible request", p, errno);
      break;
    }
    case 7:  // this thread's cache goes back to the central cache
      tierpool_thread_flush();
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Kept across inputs: their thread caches keep what earlier inputs freed, as a program's would.
  static HelperThread helpers[2];
  FuzzInput in(data, size);
  ShadowHeap heap("step06 tierpool API");
  while (!in.done()) {
    const std::uint8_t op = in.Byte();
    const unsigned thread = (op >> 3) % 3;  // 0: this one
    if (thread == 0) {
      RunOp(op, in, heap);
    } else {
      // The helper reads the input too: the calling thread waits, so the reads stay in order.
      helpers[thread - 1].Run([&] { RunOp(op, in, heap); });
    }
  }
  std::uint8_t how = 0;
  heap.RemoveAll([&](const LiveBlock& block) { FreeBlock(block, ++how); });
  return 0;
}
