// Built with TIERPOOL_HARDENED=1: every pool is hardened without naming the policy.
#include <gtest/gtest.h>

#include <type_traits>

#include "memory_pool.h"
#include "pool_allocator.h"

namespace {

static_assert(std::is_same_v<step02::DefaultChecks, step02::Hardened>);

TEST(HardenedByDefineDeathTest, DefaultPoolsCatchDoubleFree) {
  step02::MemoryPool<long> pool;
  void* p = pool.alloc();
  pool.free(p);
  EXPECT_DEATH(pool.free(p), "double free of 0x");
  step02::PoolAllocator<long> alloc;
  long* q = alloc.allocate(1);
  alloc.deallocate(q, 1);
  EXPECT_DEATH(alloc.deallocate(q, 1), "double free of 0x");
}

}  // namespace
