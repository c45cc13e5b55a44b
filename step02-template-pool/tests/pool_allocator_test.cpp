// PoolAllocator<T>: the standard containers behave exactly as with std::allocator, their nodes
// come from the pools, and the allocator traits (rebind, equality, propagation) are right.
#include <gtest/gtest.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "pool_allocator.h"
#include "test_support.h"

using step02::PoolAllocator;

namespace {

using Traits = std::allocator_traits<PoolAllocator<int>>;
static_assert(std::is_same_v<Traits::rebind_alloc<double>, PoolAllocator<double>>);
static_assert(Traits::propagate_on_container_copy_assignment::value);
static_assert(Traits::propagate_on_container_move_assignment::value);
static_assert(Traits::propagate_on_container_swap::value);
static_assert(!Traits::is_always_equal::value);
static_assert(std::is_nothrow_copy_constructible_v<PoolAllocator<int>>);
static_assert(std::is_nothrow_constructible_v<PoolAllocator<int>, const PoolAllocator<long>&>);

template <class T>
using PoolList = std::list<T, PoolAllocator<T>>;
template <class K, class V>
using PoolMap = std::map<K, V, std::less<K>, PoolAllocator<std::pair<const K, V>>>;
template <class K>
using PoolSet = std::set<K, std::less<K>, PoolAllocator<K>>;
template <class K, class V>
using PoolUnorderedMap =
    std::unordered_map<K, V, std::hash<K>, std::equal_to<K>, PoolAllocator<std::pair<const K, V>>>;

// The same random sequence of operations on a container with std::allocator and one with
// PoolAllocator: after every step both hold the same elements in the same order.
TEST(PoolAllocatorTest, ContainersBehaveExactlyAsWithStdAllocator) {
  std::mt19937 rng(11);
  std::list<int> list;
  PoolList<int> pool_list;
  std::map<int, std::string> map;
  PoolMap<int, std::string> pool_map;
  std::set<int> set;
  PoolSet<int> pool_set;
  std::unordered_map<int, int> umap;
  PoolUnorderedMap<int, int> pool_umap;
  const int steps = tierpool_test::Scaled(20000);
  for (int step = 0; step < steps; ++step) {
    const int key = int(rng() % 500);
    switch (rng() % 6) {
      case 0:
        list.push_back(key), pool_list.push_back(key);
        break;
      case 1:
        if (!list.empty()) list.pop_front(), pool_list.pop_front();
        break;
      case 2:
        map[key] = std::to_string(key), pool_map[key] = std::to_string(key);
        set.insert(key), pool_set.insert(key);
        umap[key] = step, pool_umap[key] = step;
        break;
      case 3:
        map.erase(key), pool_map.erase(key);
        set.erase(key), pool_set.erase(key);
        umap.erase(key), pool_umap.erase(key);
        break;
      case 4:
        list.remove(key), pool_list.remove(key);
        break;
      default:
        list.push_front(key), pool_list.push_front(key);
        break;
    }
    if (step % 97 == 0) {
      ASSERT_TRUE(std::equal(list.begin(), list.end(), pool_list.begin(), pool_list.end()));
      ASSERT_TRUE(std::equal(map.begin(), map.end(), pool_map.begin(), pool_map.end()));
      ASSERT_TRUE(std::equal(set.begin(), set.end(), pool_set.begin(), pool_set.end()));
      ASSERT_EQ(umap.size(), pool_umap.size());
      for (auto& [k, v] : umap)
        ASSERT_EQ(pool_umap.at(k), v);
    }
  }
}

TEST(PoolAllocatorTest, NodesComeFromThePools) {
  PoolAllocator<int> alloc;
  PoolMap<int, int> map(alloc);
  PoolList<int> list(alloc);
  for (int i = 0; i < 100; ++i) {
    map.emplace(i, i);
    list.push_back(i);
  }
  EXPECT_EQ(alloc.pools()->pool_count(), 2u) << "one pool for map nodes, one for list nodes";
  // A node starts a few bytes before its value; the pool owns the node's start, so look for a
  // block start just before the value.
  auto comes_from_pool = [&](const void* value) {
    const auto* p = static_cast<const char*>(value);
    for (int back = 0; back <= 64; back += 8) {
      if (alloc.pools()->owns(p - back)) return true;
    }
    return false;
  };
  for (auto& kv : map)
    EXPECT_TRUE(comes_from_pool(&kv));
  for (int& v : list)
    EXPECT_TRUE(comes_from_pool(&v));
}

TEST(PoolAllocatorTest, CopiesAndRebindsCompareEqualFreshAllocatorsDoNot) {
  PoolAllocator<int> a;
  PoolAllocator<int> b;
  PoolAllocator<int> copy(a);
  PoolAllocator<double> rebound(a);
  EXPECT_TRUE(a == copy);
  EXPECT_TRUE(a == rebound);
  EXPECT_TRUE(PoolAllocator<int>(rebound) == a);
  EXPECT_FALSE(a == b);
  EXPECT_TRUE(a != b);
  // Memory from one equal allocator is freed by another.
  int* p = copy.allocate(1);
  PoolAllocator<int>(rebound).deallocate(p, 1);
}

TEST(PoolAllocatorTest, MovedFromContainerAndAllocatorStayUsable) {
  PoolList<int> source;
  source.assign({1, 2, 3});
  PoolList<int> target(std::move(source));
  EXPECT_EQ(target.size(), 3u);
  source.push_back(4);  // its allocator kept its pools (a moved-from allocator is unchanged)
  EXPECT_EQ(source.back(), 4);
  PoolAllocator<int> a;
  PoolAllocator<int> moved(std::move(a));
  EXPECT_TRUE(a == moved);
  int* p = a.allocate(1);
  moved.deallocate(p, 1);
}

TEST(PoolAllocatorTest, SwapAndAssignmentCarryTheAllocators) {
  PoolMap<int, int> x;
  PoolMap<int, int> y;
  for (int i = 0; i < 50; ++i) {
    x.emplace(i, i);
    y.emplace(-i, i);
  }
  const auto x_alloc = x.get_allocator();
  std::swap(x, y);
  EXPECT_TRUE(y.get_allocator() == x_alloc) << "propagate_on_container_swap";
  EXPECT_EQ(y.begin()->first, 0);
  PoolMap<int, int> z;
  z = x;  // propagate_on_container_copy_assignment: z now shares x's pools
  EXPECT_TRUE(z.get_allocator() == x.get_allocator());
  EXPECT_EQ(z, x);
  z = std::move(y);
  EXPECT_TRUE(z.get_allocator() == x_alloc);
  EXPECT_EQ(z.size(), 50u);
}

TEST(PoolAllocatorTest, WorksWithAllocateShared) {
  PoolAllocator<std::string> alloc;
  std::shared_ptr<std::string> s = std::allocate_shared<std::string>(alloc, "pooled");
  EXPECT_EQ(*s, "pooled");
  EXPECT_EQ(alloc.pools()->pool_count(), 1u) << "the control block and string came from a pool";
  std::weak_ptr<std::string> weak = s;
  s.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(PoolAllocatorTest, ArraysGoUpstreamAndStayAligned) {
  struct alignas(64) Wide {
    char c[64];
  };
  std::vector<Wide, PoolAllocator<Wide>> wide(10);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(wide.data()) % 64, 0u);
  std::list<Wide, PoolAllocator<Wide>> list(5);
  for (Wide& w : list)
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&w) % 64, 0u);
  PoolAllocator<int> alloc;
  EXPECT_THROW((void)alloc.allocate(std::size_t(-1) / 2), std::bad_array_new_length);
}

TEST(PoolAllocatorTest, ThePoolsDieWithTheLastAllocator) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  tierpool_test::AllocationCounter counter;
  {
    PoolList<int> list;
    for (int i = 0; i < 1000; ++i)
      list.push_back(i);
  }
  EXPECT_EQ(counter.news(), counter.deletes());
}

}  // namespace
