// libFuzzer target: ObjectPool, the thread-local pool, with tunables so small (8-slot Blocks,
// 4-object lists) that a few calls cross every boundary: a list full or empty, a Block or chunk
// used up, lists exchanged with the GlobalPools. Three pools: 8-byte objects (a list node is one
// link), 24-byte objects, and over-aligned 64-byte objects in hardened mode. The input is a
// program of Allocate and Free, run on the thread it chooses (this one or one of three helpers),
// with two more operations: a helper thread exits (its lists and Block go back to the pools) and
// a pool dies with objects still live (threads keep an orphaned LocalPool). common/fuzz/
// fuzz_model.h checks every object (alignment, no overlap, contents kept).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "fuzz_model.h"
#include "object_pool.h"

namespace {

using tierpool_fuzz::FuzzInput;
using tierpool_fuzz::HelperThread;
using tierpool_fuzz::LiveBlock;
using tierpool_fuzz::ShadowHeap;

struct TinyTraits : step05::DefaultPoolTraits {
  static constexpr std::size_t kBlockSize = 8;
  static constexpr std::size_t kBlockChunkSize = 2;
  static constexpr std::size_t kFreeSlotsSize = 4;
  static constexpr std::size_t kRecentSize = 2;
  static constexpr std::size_t kGlobalPoolNum = 3;
};
struct TinyHardenedTraits : TinyTraits {
  static constexpr bool kHardened = true;
};

struct Object8 {
  std::uint64_t word;
};
struct Object24 {
  std::uint64_t words[3];
};
struct alignas(64) Object64 {
  unsigned char bytes[64];
};

// One pool of the target, whatever its type; made anew when the input kills it.
class FuzzedPool {
 public:
  virtual ~FuzzedPool() = default;
  virtual void* Allocate() = 0;
  virtual void Free(void* p) = 0;
  virtual std::size_t ObjectSize() const = 0;
  virtual std::size_t Alignment() const = 0;
};

template <class T, class Traits>
class Adapter final : public FuzzedPool {
 public:
  void* Allocate() override { return pool_.Allocate(); }
  void Free(void* p) override { pool_.Free(p); }
  std::size_t ObjectSize() const override { return sizeof(T); }
  std::size_t Alignment() const override { return alignof(T); }

 private:
  step05::ObjectPool<T, Traits> pool_;
};

std::unique_ptr<FuzzedPool> MakePool(unsigned which) {
  switch (which) {
    case 0:
      return std::make_unique<Adapter<Object8, TinyTraits>>();
    case 1:
      return std::make_unique<Adapter<Object24, TinyTraits>>();
    default:
      return std::make_unique<Adapter<Object64, TinyHardenedTraits>>();
  }
}

constexpr unsigned kPools = 3;
constexpr unsigned kHelpers = 3;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Kept across inputs (the input may end one and start another): a pool's LocalPools outlive
  // the pool in threads that stay, as they do in a program.
  static std::unique_ptr<HelperThread> helpers[kHelpers];
  for (auto& helper : helpers) {
    if (helper == nullptr) helper = std::make_unique<HelperThread>();
  }
  FuzzInput in(data, size);
  ShadowHeap heap("step05 ObjectPool");
  std::unique_ptr<FuzzedPool> pools[kPools];
  for (unsigned i = 0; i < kPools; ++i)
    pools[i] = MakePool(i);

  while (!in.done()) {
    const std::uint8_t op = in.Byte();
    const unsigned thread = (op >> 2) % (kHelpers + 1);  // 0: this one
    std::function<void()> call;
    switch (op % 8) {
      case 0:
      case 1:
      case 2: {  // allocate
        if (heap.full()) break;
        const unsigned owner = (op >> 4) % kPools;
        call = [&, owner] {
          FuzzedPool& pool = *pools[owner];
          void* p = pool.Allocate();
          if (p == nullptr) heap.Fail("Allocate() returned nullptr", p, pool.ObjectSize());
          heap.Add(p, pool.ObjectSize(), pool.Alignment(), owner);
        };
        break;
      }
      case 3:
      case 4:
      case 5:  // free a live object, on whichever thread
        if (heap.empty()) break;
        call = [&, index = heap.Pick(in)] {
          const LiveBlock block = heap.Remove(index);
          pools[block.owner]->Free(block.data);
        };
        break;
      case 6:  // a helper thread exits; a new one takes its place
        if (thread != 0) {
          helpers[thread - 1].reset();
          helpers[thread - 1] = std::make_unique<HelperThread>();
        }
        break;
      case 7: {  // rarely, a pool dies with its objects live, and a new one is made
        if (in.Byte() % 4 != 0) break;
        const unsigned owner = (op >> 4) % kPools;
        heap.Forget(owner);
        pools[owner] = MakePool(owner);
        break;
      }
    }
    if (!call) continue;
    if (thread == 0) {
      call();
    } else {
      helpers[thread - 1]->Run(call);
    }
  }
  heap.RemoveAll([&](const LiveBlock& block) { pools[block.owner]->Free(block.data); });
  return 0;
}
