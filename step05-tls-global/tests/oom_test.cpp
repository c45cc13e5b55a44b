// Out of memory for real: with the address space capped (setrlimit(RLIMIT_AS), in a child
// process), the pool's mmap of a new chunk fails, and so may the small allocations around it
// (a thread's LocalPool, the hardened mode's live bits, the GlobalPool's vectors). Allocate()
// must return nullptr and New() throw std::bad_alloc, cleanly; objects already handed out stay
// intact, freed objects are served again, and the pool grows again once the cap is lifted.
// (object_pool_test.cpp injects the same failure through the traits' MapChunk; this is the OS.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "address_space_limit.h"
#include "pool_under_test.h"

namespace {

using tierpool_testing::AddressSpaceCap;

constexpr std::size_t kHeadroom = std::size_t{48} << 20;  // what the capped child may still map

struct Object64 {
  std::uintptr_t self;  // the object's own address: an overlap or a scribble shows
  unsigned char rest[56];
};

struct HardenedTraits : PoolTraits {
  static constexpr bool kHardened = true;
};

template <class Traits>
std::string RunOutOfMemoryAndRecover() {
  step05::ObjectPool<Object64, Traits> pool;
  std::vector<Object64*> objects;
  objects.reserve(std::size_t{1} << 21);  // before the cap: the test's own vector must not fail
  pool.Free(pool.Allocate());             // this thread's LocalPool exists before the cap
  AddressSpaceCap cap(kHeadroom);
  if (!cap.active()) return "setrlimit(RLIMIT_AS) failed";

  while (objects.size() < objects.capacity()) {
    auto* p = static_cast<Object64*>(pool.Allocate());
    if (p == nullptr) break;
    p->self = reinterpret_cast<std::uintptr_t>(p);
    objects.push_back(p);
  }
  if (objects.size() == objects.capacity()) return "the address-space cap never made it fail";
  if (objects.empty()) return "no object at all was served under the cap";
  if (pool.Allocate() != nullptr) return "an allocation succeeded with no memory left";
  try {
    (void)pool.New();
    return "New() did not throw std::bad_alloc with no memory left";
  } catch (const std::bad_alloc&) {
  }
  // A freed object is served again while memory is still short.
  Object64* last = objects.back();
  objects.pop_back();
  pool.Free(last);
  auto* again = static_cast<Object64*>(pool.Allocate());
  if (again != last) return "the freed object was not served again while memory was short";
  again->self = reinterpret_cast<std::uintptr_t>(again);
  objects.push_back(again);

  cap.Lift();
  // Memory is back: the pool maps new chunks again, for this thread and for a new one (whose
  // objects this thread frees).
  for (int i = 0; i < 100000; ++i) {
    auto* p = static_cast<Object64*>(pool.Allocate());
    if (p == nullptr) return "the pool did not grow again after the cap was lifted";
    p->self = reinterpret_cast<std::uintptr_t>(p);
    objects.push_back(p);
  }
  std::thread([&] {
    for (int i = 0; i < 1000; ++i) {
      auto* p = static_cast<Object64*>(pool.Allocate());
      if (p == nullptr) return;
      p->self = reinterpret_cast<std::uintptr_t>(p);
      objects.push_back(p);
    }
  }).join();
  for (Object64* p : objects) {
    if (p->self != reinterpret_cast<std::uintptr_t>(p)) return "an object changed under the cap";
  }
  for (Object64* p : objects)
    pool.Free(p);
  return "";
}

using OutOfMemoryTest = tierpool_testing::AddressSpaceLimitTest;

TEST_F(OutOfMemoryTest, AllocateReturnsNullNewThrowsAndThePoolRecovers) {
  EXPECT_VERDICT_IN_CHILD(RunOutOfMemoryAndRecover<PoolTraits>());
}

TEST_F(OutOfMemoryTest, TheHardenedPoolToo) {
  EXPECT_VERDICT_IN_CHILD(RunOutOfMemoryAndRecover<HardenedTraits>());
}

}  // namespace
