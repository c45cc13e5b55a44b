// libFuzzer target: MemoryPool<T> (grows by chunks) and MemoryPool<T, N> (N blocks inside the
// pool), for several geometries of T, each with the Fast and the Hardened policy. The input is a
// program of alloc / free / release on these pools; common/fuzz/fuzz_model.h checks every block
// (alignment, no overlap, contents kept) and this file what the pools promise besides:
//   - alloc() refuses (throws, or returns nullptr for MemoryPool<T, N>) a request larger than a
//     block, and otherwise only when a fixed pool's N blocks are all in use;
//   - a live block is owned by its pool; a fixed pool's in_use() counts the live blocks.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "fuzz_model.h"
#include "memory_pool.h"

namespace {

using step02::Fast;
using step02::Hardened;
using step02::MemoryPool;
using tierpool_fuzz::FuzzInput;
using tierpool_fuzz::LiveBlock;
using tierpool_fuzz::ShadowHeap;

template <std::size_t Align, std::size_t Size>
struct alignas(Align) Blob {
  unsigned char bytes[Size];
};

// One pool of the target, whatever its type.
class FuzzedPool {
 public:
  virtual ~FuzzedPool() = default;
  // nullptr when the pool refuses the request.
  virtual void* Alloc(std::size_t size) = 0;
  virtual void Free(void* p) = 0;
  // Gives every block back (growing pools); false if the pool has no such operation.
  virtual bool Release() = 0;
  virtual bool Owns(const void* p) const = 0;
  virtual std::size_t BlockSize() const = 0;
  // Whether every block is in use, `live` of them being live (fixed pools only).
  virtual bool Exhausted(std::size_t live) const = 0;
  // The pool's own count of blocks in use, or `live` where it keeps none.
  virtual std::size_t InUse(std::size_t live) const = 0;
  virtual std::size_t Alignment() const = 0;
};

template <class T, class Checks>
class GrowingPool final : public FuzzedPool {
 public:
  explicit GrowingPool(std::size_t first_chunk_blocks) : pool_(first_chunk_blocks) {}
  void* Alloc(std::size_t size) override {
    try {
      return pool_.alloc(size);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  void Free(void* p) override { pool_.free(p); }
  bool Release() override {
    pool_.release();
    return true;
  }
  bool Owns(const void* p) const override { return pool_.owns(p); }
  std::size_t BlockSize() const override { return MemoryPool<T, 0, Checks>::kBlockSize; }
  bool Exhausted(std::size_t) const override { return false; }
  std::size_t InUse(std::size_t live) const override { return live; }
  std::size_t Alignment() const override { return alignof(T); }

 private:
  MemoryPool<T, 0, Checks> pool_;
};

template <class T, std::size_t N, class Checks>
class FixedPool final : public FuzzedPool {
 public:
  void* Alloc(std::size_t size) override { return pool_.alloc(size); }
  void Free(void* p) override { pool_.free(p); }
  bool Release() override { return false; }
  bool Owns(const void* p) const override { return pool_.owns(p); }
  std::size_t BlockSize() const override { return MemoryPool<T, N, Checks>::kBlockSize; }
  bool Exhausted(std::size_t live) const override { return live == N; }
  std::size_t InUse(std::size_t) const override { return pool_.in_use(); }
  std::size_t Alignment() const override { return alignof(T); }

 private:
  MemoryPool<T, N, Checks> pool_;
};

std::size_t LiveBlocksOf(const ShadowHeap& heap, unsigned owner) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < heap.count(); ++i)
    n += heap.at(i).owner == owner;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  ShadowHeap heap("step02 MemoryPool");
  // Small first chunks (1..8 blocks, the input's choice) reach chunk growth within a few calls.
  const std::size_t first_chunk = 1 + in.Byte() % 8;
  std::unique_ptr<FuzzedPool> pools[] = {
      std::make_unique<GrowingPool<char, Fast>>(first_chunk),
      std::make_unique<GrowingPool<Blob<8, 24>, Hardened>>(first_chunk),
      std::make_unique<GrowingPool<Blob<64, 64>, Fast>>(first_chunk),  // over-aligned chunks
      std::make_unique<GrowingPool<Blob<4, 100>, Hardened>>(first_chunk),
      std::make_unique<FixedPool<Blob<16, 48>, 16, Fast>>(),
      std::make_unique<FixedPool<Blob<32, 32>, 5, Hardened>>(),
  };
  constexpr unsigned kPools = sizeof(pools) / sizeof(pools[0]);
  auto free_block = [&](const LiveBlock& block) { pools[block.owner]->Free(block.data); };

  while (!in.done()) {
    const std::uint8_t op = in.Byte();
    const unsigned owner = (op >> 2) % kPools;
    FuzzedPool& pool = *pools[owner];
    switch (op % 4) {
      case 0:
      case 1: {  // allocate (or free, when the model is full)
        if (heap.full()) {
          free_block(heap.Remove(heap.Pick(in)));
          break;
        }
        const std::size_t request = in.Size(pool.BlockSize() + 8);
        const bool fits = request <= pool.BlockSize();
        const std::size_t live = LiveBlocksOf(heap, owner);
        void* p = pool.Alloc(request);
        if (p == nullptr) {
          if (fits && !pool.Exhausted(live)) heap.Fail("refused a request that fits", p, request);
          break;
        }
        if (!fits) heap.Fail("served a request larger than a block", p, request);
        heap.Add(p, request, pool.Alignment(), owner);
        if (!pool.Owns(p)) heap.Fail("a block its pool does not own", p, request);
        if (pool.InUse(live + 1) != live + 1) heap.Fail("in_use() is wrong", p, live + 1);
        break;
      }
      case 2:  // free a live block, of any pool
        if (!heap.empty()) free_block(heap.Remove(heap.Pick(in)));
        break;
      case 3:  // release a growing pool: every block of it is gone
        if (pool.Release()) heap.Forget(owner);
        break;
    }
  }
  heap.RemoveAll(free_block);
  return 0;
}
