// libFuzzer target: MTMemoryPool, the book's lock around a pool, over step 02's MemoryPool (mutex,
// and spinlock with the Hardened policy) and step 03's SizeClassPool (spinlock, and mutex with the
// Hardened policy). The input is a program of alloc and free, and it chooses the thread that makes
// each call (this one or one of two helpers), so blocks are freed by threads that did not
// allocate them and a std::bad_alloc thrown under the lock is followed by a call from another
// thread (a lock left held would hang it: libFuzzer reports the timeout). common/fuzz/fuzz_model.h
// checks every block.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>

#include "fuzz_model.h"
#include "locked_pools.h"

namespace {

using tierpool_fuzz::FuzzInput;
using tierpool_fuzz::HelperThread;
using tierpool_fuzz::LiveBlock;
using tierpool_fuzz::ShadowHeap;

// One locked pool of the target, whatever its type.
class FuzzedPool {
 public:
  virtual ~FuzzedPool() = default;
  // nullptr when the wrapped pool throws std::bad_alloc.
  virtual void* Alloc(std::size_t size) = 0;
  virtual void Free(void* p) = 0;
  // The largest request served (anything larger must be refused), and the alignment promised.
  virtual std::size_t MaxSize() const = 0;
  virtual std::size_t AlignmentFor(std::size_t size) const = 0;
};

// The wrapper's alloc(), with the wrapped pool's std::bad_alloc turned into nullptr.
template <class Locked>
void* AllocOrNull(Locked& pool, std::size_t size) {
  try {
    return pool.alloc(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

template <std::size_t kSize, class Lock, class Checks>
class LockedBlocks final : public FuzzedPool {
 public:
  void* Alloc(std::size_t size) override { return AllocOrNull(pool_, size); }
  void Free(void* p) override { pool_.free(p); }
  std::size_t MaxSize() const override {
    return step02::MemoryPool<step04::Bytes<kSize>>::kBlockSize;
  }
  std::size_t AlignmentFor(std::size_t) const override { return alignof(step04::Bytes<kSize>); }

 private:
  step04::LockedMemoryPool<kSize, Lock, Checks> pool_;
};

template <class Lock, class Checks>
class LockedSizeClasses final : public FuzzedPool {
 public:
  void* Alloc(std::size_t size) override { return AllocOrNull(pool_, size); }
  void Free(void* p) override { pool_.free(p); }
  std::size_t MaxSize() const override { return SIZE_MAX; }
  std::size_t AlignmentFor(std::size_t size) const override {
    return tierpool_fuzz::FundamentalAlignmentFor(size);
  }

 private:
  step04::MTMemoryPool<step03::SizeClassPool<Checks>, Lock> pool_;
};

constexpr std::size_t kMaxRequest = 6000;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Kept across inputs: a thread start per input would cost more than the input's calls.
  static HelperThread helpers[2];
  FuzzInput in(data, size);
  ShadowHeap heap("step04 MTMemoryPool");
  std::unique_ptr<FuzzedPool> pools[] = {
      std::make_unique<LockedBlocks<64, step04::MutexLock, step02::Fast>>(),
      std::make_unique<LockedBlocks<512, step04::SpinLock, step02::Hardened>>(),
      std::make_unique<LockedSizeClasses<step04::SpinLock, step02::Fast>>(),
      std::make_unique<LockedSizeClasses<step04::MutexLock, step02::Hardened>>(),
  };
  constexpr unsigned kPools = sizeof(pools) / sizeof(pools[0]);

  while (!in.done()) {
    const std::uint8_t op = in.Byte();
    const unsigned owner = (op >> 1) % kPools;
    const unsigned thread = (op >> 3) % 3;  // 0: this one
    std::function<void()> call;
    if (op % 2 == 0 && !heap.full()) {
      const std::size_t request = in.Size(kMaxRequest);
      call = [&, owner, request] {
        FuzzedPool& pool = *pools[owner];
        void* p = pool.Alloc(request);
        if (p == nullptr) {
          if (request <= pool.MaxSize()) heap.Fail("refused a request that fits", p, request);
          return;
        }
        if (request > pool.MaxSize()) heap.Fail("served a request larger than a block", p, request);
        heap.Add(p, request, pool.AlignmentFor(request), owner);
      };
    } else if (!heap.empty()) {
      const std::size_t index = heap.Pick(in);
      call = [&, index] {
        const LiveBlock block = heap.Remove(index);
        pools[block.owner]->Free(block.data);
      };
    } else {
      continue;
    }
    if (thread == 0) {
      call();
    } else {
      helpers[thread - 1].Run(call);
    }
  }
  heap.RemoveAll([&](const LiveBlock& block) { pools[block.owner]->Free(block.data); });
  return 0;
}
