// The size-class table: every size maps to the smallest class that fits, the table's steps are
// eight a doubling, and the waste stays within the bounds the chapter quotes.
#include <gtest/gtest.h>

#include "central_cache.h"
#include "config.h"
#include "size_class.h"
#include "thread_cache.h"

namespace {

using namespace tierpool::internal;

TEST(SizeClass, EverySizeMapsToTheSmallestClassThatFits) {
  for (std::size_t size = 0; size <= kMaxSmallSize; ++size) {
    const std::uint32_t cl = SizeToClass(size);
    ASSERT_GE(cl, 1u) << size;
    ASSERT_LT(cl, static_cast<std::uint32_t>(kNumClasses)) << size;
    ASSERT_GE(ClassSize(cl), size) << size;
    if (cl > 1) {
      ASSERT_LT(ClassSize(cl - 1), size) << size;
    }
  }
}

// malloc's table: the class of the size rounded up to 16, so that every block above 8 bytes is
// 16-byte aligned (a class whose size is a multiple of 16 only has such objects).
TEST(SizeClass, MallocsTableIsTheClassOfTheSizeRoundedTo16) {
  for (std::size_t size = 0; size <= kMaxSmallSize; ++size) {
    const std::size_t rounded = size <= 8 ? size : (size + 15) / 16 * 16;
    const std::uint32_t cl = MallocSizeToClass(size);
    ASSERT_EQ(cl, SizeToClass(rounded)) << size;
    if (size > 8) {
      ASSERT_EQ(ClassSize(cl) % 16, 0u) << size;
    }
  }
  EXPECT_EQ(ClassSize(MallocSizeToClass(8)), 8u);
  EXPECT_EQ(ClassSize(MallocSizeToClass(24)), 32u);
  EXPECT_EQ(ClassSize(SizeToClass(24)), 24u);
}

// 8-byte steps to 128 B, then eight equal steps a doubling up to 8 KiB and four above: 84
// classes, where article 003's table (a fixed step over whole ranges) had 208.
TEST(SizeClass, SizesIncreaseInEightStepsADoublingThenFour) {
  int cl = 1;
  for (std::size_t size = 8; size <= 128; size += 8, ++cl)
    EXPECT_EQ(kClasses[cl].size, size) << "class " << cl;
  for (std::size_t half = 128; half < kMaxSmallSize; half *= 2) {
    const std::size_t steps = half < 8192 ? 8 : 4;
    for (std::size_t step = 1; step <= steps; ++step, ++cl)
      EXPECT_EQ(kClasses[cl].size, half + step * half / steps) << "class " << cl;
  }
  EXPECT_EQ(cl, kNumClasses);
  EXPECT_EQ(kNumClasses - 1, 84);
  EXPECT_EQ(ClassSize(SizeToClass(1025)), 1152u);
  EXPECT_EQ(ClassSize(SizeToClass(8 * 1024 + 1)), 10u * 1024);
}

// The waste bounds the chapter quotes: 1/9 of a block above 64 B up to 8 KiB, 1/5 above.
TEST(SizeClass, RoundingWastesAtMostANinthTo8KiBAndAFifthAbove) {
  for (std::size_t size = 65; size <= kMaxSmallSize; ++size) {
    const std::size_t rounded = ClassSize(SizeToClass(size));
    if (size <= 8192) {
      ASSERT_LT((rounded - size) * 9, rounded) << size;
    } else {
      ASSERT_LT((rounded - size) * 5, rounded) << size;
    }
  }
}

TEST(SizeClass, SpanTailWastesAtMostAnEighth) {
  for (int cl = 1; cl < kNumClasses; ++cl) {
    const SizeClassInfo& c = kClasses[cl];
    const std::size_t span = std::size_t{c.pages} * kPageSize;
    EXPECT_EQ(c.objects, span / c.size) << cl;
    EXPECT_LE((span - std::size_t{c.objects} * c.size) * 8, span) << cl;
  }
}

TEST(SizeClass, BatchesAreBoundedAndFitInASpan) {
  for (int cl = 1; cl < kNumClasses; ++cl) {
    const SizeClassInfo& c = kClasses[cl];
    EXPECT_GE(c.batch, 2) << cl;
    EXPECT_LE(c.batch, 128) << cl;
    EXPECT_GE(c.objects, c.batch) << cl;
    EXPECT_LE(c.transfer_slots, CentralFreeList::kMaxTransferSlots) << cl;
    EXPECT_LE(std::size_t{c.transfer_slots} * c.batch * c.size,
              c.size < kPageSize ? kMaxParkedBytes / 4 : std::size_t{1} << 20)
        << cl;
    if (c.size <= kMaxCachedSize) {
      EXPECT_GE(c.transfer_slots, 2) << cl;
    } else {
      EXPECT_EQ(c.transfer_slots, 0) << cl << ": no batch of a class past the thread cache";
    }
    if (cl > 1) {
      EXPECT_LE(c.batch, kClasses[cl - 1].batch) << "batches shrink as sizes grow";
    }
  }
}

TEST(SizeClass, PowerOfTwoSizesAreClassesSoAlignedRequestsStayCheap) {
  for (std::size_t size = 8; size <= kMaxSmallSize; size *= 2)
    EXPECT_EQ(ClassSize(SizeToClass(size)), size);
}

}  // namespace
