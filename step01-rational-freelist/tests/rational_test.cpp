#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <set>
#include <vector>

#include "rational.h"

using step01::Rational;

// Failure injection: the free list gets its blocks from `new char[]`. This test binary replaces
// the global array operators so a test can make the N-th allocation fail.
namespace {
int g_array_news_until_failure = -1;  // -1: never fail
}  // namespace

void* operator new[](std::size_t size) {
  if (g_array_news_until_failure == 0) throw std::bad_alloc();
  if (g_array_news_until_failure > 0) --g_array_news_until_failure;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}

namespace {

// valgrind (and any tool that brings its own operator new[]) bypasses the replacement above.
bool FailureInjectionWorks() {
  g_array_news_until_failure = 0;
  bool threw = false;
  try {
    delete[] new char[1];
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  g_array_news_until_failure = -1;
  return threw;
}

#define REQUIRE_FAILURE_INJECTION()                      \
  if (!FailureInjectionWorks())                          \
  GTEST_SKIP() << "operator new[] is replaced by a tool" \
               << " running this test"

// Every test starts and ends with an empty pool, so each one sees exactly its own blocks (and
// valgrind sees nothing left over).
class RationalPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(Rational::deleteMemPool()); }
  void TearDown() override {
    g_array_news_until_failure = -1;
    EXPECT_TRUE(Rational::deleteMemPool()) << "a test left a Rational alive";
    EXPECT_EQ(Rational::freeListLength(), 0u);
  }
};

TEST_F(RationalPoolTest, NewMemPoolPrefillsOneExpansion) {
  Rational::newMemPool();
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE));
}

TEST_F(RationalPoolTest, ObjectsAreDistinctAlignedAndKeepTheirValues) {
  std::vector<Rational*> objects;
  std::set<std::uintptr_t> addresses;
  for (int i = 0; i < 1000; ++i) {
    objects.push_back(new Rational(i, i + 1));
    auto address = reinterpret_cast<std::uintptr_t>(objects.back());
    EXPECT_EQ(address % alignof(Rational), 0u);
    EXPECT_TRUE(addresses.insert(address).second) << "block handed out twice";
  }
  // Blocks never overlap: every pair of addresses is at least one Rational apart.
  std::uintptr_t previous = 0;
  for (std::uintptr_t a : addresses) {
    if (previous != 0) {
      EXPECT_GE(a - previous, sizeof(Rational));
    }
    previous = a;
  }
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(objects[i]->numerator(), i);
    EXPECT_EQ(objects[i]->denominator(), i + 1);
  }
  for (Rational* r : objects)
    delete r;
}

TEST_F(RationalPoolTest, GrowsByExpansionSizeOnlyWhenEmpty) {
  Rational* first = new Rational(1);
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE) - 1);
  std::vector<Rational*> rest;
  for (int i = 1; i < Rational::EXPANSION_SIZE; ++i)
    rest.push_back(new Rational(i));
  EXPECT_EQ(Rational::freeListLength(), 0u);
  Rational* next = new Rational(2);  // the list was empty: one more expansion
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE) - 1);
  delete first;
  delete next;
  for (Rational* r : rest)
    delete r;
  EXPECT_EQ(Rational::freeListLength(), 2u * Rational::EXPANSION_SIZE);
}

TEST_F(RationalPoolTest, ReusesTheMostRecentlyFreedBlock) {
  Rational* a = new Rational(1);
  delete a;
  Rational* b = new Rational(2);
  EXPECT_EQ(static_cast<void*>(a), static_cast<void*>(b));
  EXPECT_EQ(b->numerator(), 2);
  delete b;
}

TEST_F(RationalPoolTest, DeleteNullptrIsANoOp) {
  Rational::newMemPool();
  Rational* none = nullptr;
  delete none;
  Rational::operator delete(nullptr, sizeof(Rational));
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE));
}

// A derived class with more state than a Rational must not be squeezed into a Rational block.
struct TaggedRational : Rational {
  TaggedRational(int n, long long t) : Rational(n), tag(t) {}
  long long tag[4];
};
static_assert(sizeof(TaggedRational) != sizeof(Rational));

TEST_F(RationalPoolTest, DerivedClassOfAnotherSizeUsesTheGlobalOperators) {
  Rational::newMemPool();
  TaggedRational* tagged = new TaggedRational(7, 42);
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE))
      << "a derived object took a pool block";
  tagged->tag[3] = 99;  // ASan/valgrind would flag this if the block were only 8 bytes
  EXPECT_EQ(tagged->numerator(), 7);
  delete tagged;
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE))
      << "a derived object's memory was pushed onto the free list";
}

struct SameSizeRational : Rational {
  using Rational::Rational;
};

TEST_F(RationalPoolTest, DerivedClassOfTheSameSizeSharesThePool) {
  Rational::newMemPool();
  SameSizeRational* same = new SameSizeRational(3);
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE) - 1);
  delete same;
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE));
}

TEST_F(RationalPoolTest, FailedExpansionThrowsAndLeavesThePoolUsable) {
  REQUIRE_FAILURE_INJECTION();
  g_array_news_until_failure = 0;
  EXPECT_THROW(Rational::expandTheFreeList(), std::bad_alloc);
  EXPECT_EQ(Rational::freeListLength(), 0u);
  EXPECT_THROW((void)new Rational(1), std::bad_alloc);

  g_array_news_until_failure = -1;
  Rational* r = new Rational(4);
  EXPECT_EQ(r->numerator(), 4);
  delete r;
}

TEST_F(RationalPoolTest, OneGlobalAllocationPerExpansion) {
  REQUIRE_FAILURE_INJECTION();
  g_array_news_until_failure = 1;  // the first new[] works, the second throws
  std::vector<Rational*> objects;
  for (int i = 0; i < Rational::EXPANSION_SIZE; ++i)
    objects.push_back(new Rational(i));
  EXPECT_THROW((void)new Rational(0), std::bad_alloc);  // the 33rd needs a second expansion
  g_array_news_until_failure = -1;
  for (Rational* r : objects)
    delete r;
}

TEST_F(RationalPoolTest, ExpansionBlocksAreContiguous) {
  Rational* first = new Rational(0);
  Rational* second = new Rational(1);
  EXPECT_EQ(reinterpret_cast<char*>(second) - reinterpret_cast<char*>(first),
            std::ptrdiff_t(sizeof(Rational)));
  delete first;
  delete second;
}

TEST_F(RationalPoolTest, DeleteMemPoolReturnsEveryFreeBlock) {
  std::vector<Rational*> objects;
  for (int i = 0; i < 100; ++i)
    objects.push_back(new Rational(i));
  for (Rational* r : objects)
    delete r;
  EXPECT_EQ(Rational::freeListLength(), 4u * Rational::EXPANSION_SIZE);
  EXPECT_TRUE(Rational::deleteMemPool());
  EXPECT_EQ(Rational::freeListLength(), 0u);
  Rational* again = new Rational(5);  // an empty pool simply expands again
  EXPECT_EQ(again->numerator(), 5);
  delete again;
}

TEST_F(RationalPoolTest, DeleteMemPoolKeepsMemoryWhileARationalLives) {
  Rational* alive = new Rational(6, 7);
  EXPECT_FALSE(Rational::deleteMemPool());
  EXPECT_EQ(alive->numerator(), 6);  // its block was not given back (ASan/valgrind would see it)
  EXPECT_EQ(Rational::freeListLength(), std::size_t(Rational::EXPANSION_SIZE) - 1);
  delete alive;
}

}  // namespace
