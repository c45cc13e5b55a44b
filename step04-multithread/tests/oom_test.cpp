// Out of memory under the lock: with the address space capped (setrlimit(RLIMIT_AS), in a child
// process), the wrapped pool's upstream allocation fails for real. The wrapper must pass the
// std::bad_alloc on with its lock released, keep every block it handed out intact, serve freed
// blocks again while memory is still short, and grow again once the cap is lifted.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "address_space_limit.h"
#include "locked_pools.h"

namespace {

using tierpool_testing::AddressSpaceCap;

constexpr std::size_t kHeadroom = std::size_t{48} << 20;  // what the capped child may still map

// Every block starts with its own address, so a block that overlaps another, or that the pool
// scribbled on, shows.
void Stamp(void* p) {
  const auto self = reinterpret_cast<std::uintptr_t>(p);
  std::memcpy(p, &self, sizeof(self));
}
bool StampIntact(const void* p) {
  std::uintptr_t stored = 0;
  std::memcpy(&stored, p, sizeof(stored));
  return stored == reinterpret_cast<std::uintptr_t>(p);
}

// Allocates `size`-byte blocks until the pool throws std::bad_alloc; "" if it did, cleanly.
template <class Pool>
std::string ExhaustMemory(Pool& pool, std::size_t size, std::vector<void*>& blocks) {
  for (std::size_t i = 0; i < blocks.capacity(); ++i) {
    void* p = nullptr;
    try {
      p = pool.alloc(size);
    } catch (const std::bad_alloc&) {
      return blocks.empty() ? "bad_alloc before any block was served" : "";
    }
    if (p == nullptr) return "alloc returned nullptr instead of throwing std::bad_alloc";
    Stamp(p);
    blocks.push_back(p);
  }
  return "the address-space cap never made the pool fail";
}

// `keeps_freed_blocks`: whether a freed block stays in the pool (small blocks) rather than going
// back upstream at once (SizeClassPool's large blocks).
template <class Pool>
std::string RunOutOfMemoryAndRecover(std::size_t size, bool keeps_freed_blocks = true) {
  Pool pool;
  std::vector<void*> blocks;
  blocks.reserve(std::size_t{1} << 20);  // before the cap: the test's own vector must not fail
  AddressSpaceCap cap(kHeadroom);
  if (!cap.active()) return "setrlimit(RLIMIT_AS) failed";
  if (std::string failure = ExhaustMemory(pool, size, blocks); !failure.empty()) return failure;

  // Still short of memory: the lock was released on the way out (another call gets in and
  // fails the same way, not a deadlock), and a freed block is served again.
  try {
    (void)pool.alloc(size);
    return "a second allocation succeeded with no memory left";
  } catch (const std::bad_alloc&) {
  }
  void* last = blocks.back();
  blocks.pop_back();
  pool.free(last);
  void* again = pool.alloc(size);
  if (keeps_freed_blocks && again != last) {
    return "the freed block was not served again while memory was short";
  }
  Stamp(again);
  blocks.push_back(again);

  cap.Lift();
  // Memory is back: the pool grows again, from another thread too.
  void* grown = pool.alloc(size);
  Stamp(grown);
  blocks.push_back(grown);
  std::thread([&] {
    void* p = pool.alloc(size);
    pool.free(p);
  }).join();
  for (void* p : blocks) {
    if (!StampIntact(p)) return "a block changed while memory ran out";
  }
  for (void* p : blocks)
    pool.free(p);
  return "";
}

using OutOfMemoryTest = tierpool_testing::AddressSpaceLimitTest;

TEST_F(OutOfMemoryTest, MemoryPoolBehindAMutexThrowsAndRecovers) {
  using Pool = step04::LockedMemoryPool<512, step04::MutexLock>;
  EXPECT_VERDICT_IN_CHILD(RunOutOfMemoryAndRecover<Pool>(512));
}

TEST_F(OutOfMemoryTest, HardenedMemoryPoolBehindASpinLockThrowsAndRecovers) {
  using Pool = step04::LockedMemoryPool<512, step04::SpinLock, step02::Hardened>;
  EXPECT_VERDICT_IN_CHILD(RunOutOfMemoryAndRecover<Pool>(512));
}

TEST_F(OutOfMemoryTest, SizeClassPoolBehindASpinLockThrowsAndRecovers) {
  using Pool = step04::MTMemoryPool<step03::SizeClassPool<>, step04::SpinLock>;
  EXPECT_VERDICT_IN_CHILD(RunOutOfMemoryAndRecover<Pool>(3000));
  // Large blocks go upstream one by one.
  EXPECT_VERDICT_IN_CHILD(RunOutOfMemoryAndRecover<Pool>(200000, false));
}

}  // namespace
