// libFuzzer target: SizeClassPool, Fast and Hardened. The input is a program of alloc(size),
// alloc(size, align) (sometimes an invalid alignment), the three frees (free(p), free(p, size),
// free(p, size, align), each as the block allows) and release. common/fuzz/fuzz_model.h checks
// every block (alignment, no overlap, contents kept); this file checks that only an alignment
// that is not a power of two or above kMaxAlign is refused, and that every live block is owned.
#include <cstddef>
#include <cstdint>
#include <new>

#include "fuzz_model.h"
#include "size_class_pool.h"

namespace {

using step03::SizeClassPool;
using tierpool_fuzz::FuzzInput;
using tierpool_fuzz::LiveBlock;
using tierpool_fuzz::ShadowHeap;

constexpr std::size_t kMaxRequest = 10000;  // small classes and large blocks (above 4096)

// How a block was allocated, so that it is freed with arguments the pool accepts.
enum Kind : unsigned { kBySize, kBySizeAndAlign };

template <class Pool>
void Free(Pool& pool, const LiveBlock& block, std::uint8_t how) {
  if (how % 2 == 0) return pool.free(block.data);
  if (block.kind == kBySize) return pool.free(block.data, block.size);
  pool.free(block.data, block.size, block.align);
}

template <class Pool>
void RunOp(Pool& pool, unsigned owner, std::uint8_t op, FuzzInput& in, ShadowHeap& heap) {
  switch (op % 4) {
    case 0: {  // alloc(size): aligned for any object of that size
      if (heap.full()) break;
      const std::size_t size = in.Size(kMaxRequest);
      void* p = pool.alloc(size);  // may only throw when out of memory
      heap.Add(p, size, tierpool_fuzz::FundamentalAlignmentFor(size), owner, kBySize);
      if (!pool.owns(p)) heap.Fail("a block the pool does not own", p, size);
      break;
    }
    case 1: {  // alloc(size, align), align up to 8192 or not a power of two
      if (heap.full()) break;
      const std::size_t size = in.Size(kMaxRequest);
      std::size_t align = in.Alignment(13);
      if (in.Byte() % 16 == 0)
        align = align == 1 ? 0 : align * 3;  // 0, 6, 12, ...: no power of two
      const bool valid = step03::IsPowerOfTwo(align) && align <= Pool::kMaxAlign;
      void* p = nullptr;
      try {
        p = pool.alloc(size, align);
      } catch (const std::bad_alloc&) {
        if (valid) heap.Fail("refused a valid request", nullptr, size);
        break;
      }
      if (!valid) heap.Fail("served a request with an invalid alignment", p, align);
      heap.Add(p, size, align, owner, kBySizeAndAlign);
      if (!pool.owns(p)) heap.Fail("a block the pool does not own", p, size);
      break;
    }
    case 2:  // free a block of this pool
      for (std::size_t i = 0; i < heap.count(); ++i) {
        if (heap.at(i).owner == owner) {
          Free(pool, heap.Remove(i), in.Byte());
          break;
        }
      }
      break;
    case 3:
      if (in.Byte() % 8 == 0) {  // rarely: release drops every block
        pool.release();
        heap.Forget(owner);
      }
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  ShadowHeap heap("step03 SizeClassPool");
  SizeClassPool<step03::Fast> fast;
  SizeClassPool<step03::Hardened> hardened;
  tierpool_fuzz::RunOnTwoPools(
      in, fast, hardened,
      [&](auto& pool, unsigned owner, std::uint8_t op) { RunOp(pool, owner, op, in, heap); });
  std::uint8_t how = 0;
  heap.RemoveAll([&](const LiveBlock& block) {
    if (block.owner == 1) {
      Free(hardened, block, ++how);
    } else {
      Free(fast, block, ++how);
    }
  });
  return 0;
}
