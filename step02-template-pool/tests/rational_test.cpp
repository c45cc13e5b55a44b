// BookRational (the book's version 2) and Rational (over MemoryPool<Rational>).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "pooled_rational.h"

using step02::BookRational;
using step02::Rational;

namespace {

template <class R>
class PooledRationalTest : public ::testing::Test {};
using Rationals = ::testing::Types<BookRational, Rational>;
TYPED_TEST_SUITE(PooledRationalTest, Rationals);

TYPED_TEST(PooledRationalTest, ObjectsAreDistinctAlignedAndKeepTheirValues) {
  std::vector<TypeParam*> objects;
  std::set<std::uintptr_t> addresses;
  for (int i = 0; i < 1000; ++i) {
    objects.push_back(new TypeParam(i, i + 1));
    const auto address = reinterpret_cast<std::uintptr_t>(objects.back());
    EXPECT_EQ(address % alignof(TypeParam), 0u);
    EXPECT_TRUE(addresses.insert(address).second) << "block handed out twice";
  }
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(objects[i]->numerator(), i);
    EXPECT_EQ(objects[i]->denominator(), i + 1);
  }
  for (TypeParam* r : objects)
    delete r;
}

TYPED_TEST(PooledRationalTest, DeleteNullptrIsANoOp) {
  TypeParam* none = nullptr;
  delete none;
  TypeParam::operator delete(nullptr, sizeof(TypeParam));
}

template <class Base>
struct Tagged : Base {
  Tagged(int n, long long t) : Base(n), tag{t, t, t, t} {}
  long long tag[4];
};

TYPED_TEST(PooledRationalTest, DerivedClassOfAnotherSizeUsesTheGlobalOperators) {
  auto* tagged = new Tagged<TypeParam>(7, 42);
  tagged->tag[3] = 99;  // ASan/valgrind would flag this if the block were a Rational's
  EXPECT_EQ(tagged->numerator(), 7);
  delete tagged;
}

TEST(RationalTest, ThePoolGrowsInChunks) {
  std::vector<Rational*> objects;
  for (int i = 0; i < 5000; ++i)
    objects.push_back(new Rational(i));
  EXPECT_LE(Rational::pool().chunk_count(), 10u) << "5000 objects, a few chunks, not 5000 blocks";
  for (Rational* r : objects)
    delete r;
}

TEST(BookRationalTest, DeleteMemPoolThenNewStartsAgain) {
  BookRational::newMemPool();
  BookRational* r = new BookRational(3);
  delete r;
  BookRational::deleteMemPool();
  BookRational* again = new BookRational(5);  // the first new makes a pool again
  EXPECT_EQ(again->numerator(), 5);
  delete again;
  BookRational::deleteMemPool();  // valgrind: nothing left behind
}

}  // namespace
