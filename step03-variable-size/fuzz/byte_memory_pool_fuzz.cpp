// libFuzzer target: ByteMemoryPool, the arena, with the Fast policy and (starting in a buffer of
// the caller's) with the Hardened one. The input is a program of alloc(size[, align]), free,
// reset and release; common/fuzz/fuzz_model.h checks every block (alignment, no overlap, contents
// kept until reset/release) and this file what the arena promises besides: an alignment that is
// not a power of two is refused with std::bad_alloc and nothing else is, and every live block
// lies in memory the arena owns.
#include <cstddef>
#include <cstdint>
#include <new>

#include "byte_memory_pool.h"
#include "fuzz_model.h"

namespace {

using step03::ByteMemoryPool;
using tierpool_fuzz::FuzzInput;
using tierpool_fuzz::LiveBlock;
using tierpool_fuzz::ShadowHeap;

constexpr std::size_t kMaxRequest = 20000;  // several first chunks, so "a chunk of its own" too

enum Kind : unsigned { kSized, kUnsized };  // how the block is given back: free(p, size) or free(p)

template <class Arena>
void RunOp(Arena& arena, unsigned owner, std::uint8_t op, FuzzInput& in, ShadowHeap& heap) {
  switch (op % 5) {
    case 0:
    case 1: {  // allocate, with the default or an explicit alignment (sometimes an invalid one)
      if (heap.full()) break;
      const std::size_t size = in.Size(kMaxRequest);
      const bool explicit_align = op % 5 == 1;
      std::size_t align = explicit_align ? in.Alignment(12) : Arena::kDefaultAlign;
      const bool invalid = explicit_align && in.Byte() % 16 == 0;
      if (invalid) align = align == 1 ? 0 : align * 3;  // 0, 6, 12, ...: no power of two
      void* p = nullptr;
      try {
        p = explicit_align ? arena.alloc(size, align) : arena.alloc(size);
      } catch (const std::bad_alloc&) {
        if (!invalid) heap.Fail("refused a valid request", nullptr, size);
        break;
      }
      if (invalid) heap.Fail("served a request with an invalid alignment", p, align);
      heap.Add(p, size, align, owner, size % 2 == 0 ? kSized : kUnsized);
      if (!arena.owns(p)) heap.Fail("a block the arena does not own", p, size);
      break;
    }
    case 2:  // free: a no-op for the arena, but the hardened ledger and the tools see it
      for (std::size_t i = 0; i < heap.count(); ++i) {
        if (heap.at(i).owner != owner) continue;
        const LiveBlock block = heap.Remove(i);
        if (block.kind == kSized) {
          arena.free(block.data, block.size);
        } else {
          arena.free(block.data);
        }
        break;
      }
      break;
    case 3:  // every block of this arena becomes invalid; the largest chunk is kept
      arena.reset();
      heap.Forget(owner);
      break;
    case 4:  // the same, and every chunk goes upstream
      arena.release();
      heap.Forget(owner);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  ShadowHeap heap("step03 ByteMemoryPool");
  // A small first chunk (64 B .. 8 KiB, the input's choice) makes chunk growth frequent.
  const std::size_t first_chunk = std::size_t{64} << in.Byte() % 8;
  alignas(64) unsigned char buffer[1024];
  ByteMemoryPool<step03::Fast> fast(first_chunk);
  ByteMemoryPool<step03::Hardened> hardened(buffer, 1 + in.Byte() * 4, first_chunk);
  tierpool_fuzz::RunOnTwoPools(
      in, fast, hardened,
      [&](auto& pool, unsigned owner, std::uint8_t op) { RunOp(pool, owner, op, in, heap); });
  heap.RemoveAll([&](const LiveBlock& block) {
    if (block.owner == 1) hardened.free(block.data);
  });
  return 0;
}
