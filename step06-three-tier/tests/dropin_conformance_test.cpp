// The malloc family and operator new/delete as C, C++ and glibc define them, checked on tierpool
// and, where glibc's behaviour is defined, checked to agree with glibc's own functions in the same
// process (reached through libc.so.6 itself, so they are glibc's even while ours replace them).
//
// One source, three binaries (the test's CMake block):
//   dropin_rules_test     DROPIN_MODE_RULES: calls the rules of src/dropin.h by their own names,
//                         so it also runs under ASan, TSan and valgrind, which own malloc there
//   dropin_linked_test    DROPIN_MODE_LINKED: linked with libtierpool.a; calls ::malloc & co.
//   dropin_preload_test   no mode: a plain program, run with LD_PRELOAD=libtierpool.so
#include <dlfcn.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tierpool/tierpool.h"

#if DROPIN_MODE_RULES
#include "dropin.h"
#include "os.h"
#endif

namespace {

// --- The functions under test and glibc's, side by side ------------------------------------------

struct MallocApi {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void* (*reallocarray)(void*, size_t, size_t);
  void* (*memalign)(size_t, size_t);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  size_t (*usable_size)(void*);
};

struct NewApi {
  void* (*plain)(size_t);
  void* (*array)(size_t);
  void* (*nothrow)(size_t, const std::nothrow_t&);
  void* (*array_nothrow)(size_t, const std::nothrow_t&);
  void* (*aligned)(size_t, std::align_val_t);
  void* (*array_aligned)(size_t, std::align_val_t);
  void* (*aligned_nothrow)(size_t, std::align_val_t, const std::nothrow_t&);
  void* (*array_aligned_nothrow)(size_t, std::align_val_t, const std::nothrow_t&);
  void (*del)(void*);
  void (*array_del)(void*);
  void (*del_nothrow)(void*, const std::nothrow_t&);
  void (*array_del_nothrow)(void*, const std::nothrow_t&);
  void (*del_sized)(void*, size_t);
  void (*array_del_sized)(void*, size_t);
  void (*del_aligned)(void*, std::align_val_t);
  void (*array_del_aligned)(void*, std::align_val_t);
  void (*del_aligned_nothrow)(void*, std::align_val_t, const std::nothrow_t&);
  void (*array_del_aligned_nothrow)(void*, std::align_val_t, const std::nothrow_t&);
  void (*del_sized_aligned)(void*, size_t, std::align_val_t);
  void (*array_del_sized_aligned)(void*, size_t, std::align_val_t);
};

#if DROPIN_MODE_RULES
namespace rules = tierpool::dropin;
// The rules have C++ linkage and slightly different shapes; these adapt them to the table.
MallocApi Tested() {
  return MallocApi{
      rules::Malloc,
      rules::Free,
      rules::Calloc,
      rules::Realloc,
      rules::ReallocArray,
      rules::Memalign,
      rules::PosixMemalign,
      rules::AlignedAlloc,
      rules::Valloc,
      rules::Pvalloc,
      [](void* p) { return rules::UsableSize(p); },
  };
}
NewApi TestedNew() {
  using A = std::align_val_t;
  using N = std::nothrow_t;
  return NewApi{
      rules::OperatorNew,
      rules::OperatorNew,
      [](size_t n, const N&) { return rules::OperatorNewNothrow(n); },
      [](size_t n, const N&) { return rules::OperatorNewNothrow(n); },
      [](size_t n, A a) { return rules::OperatorNewAligned(n, size_t(a)); },
      [](size_t n, A a) { return rules::OperatorNewAligned(n, size_t(a)); },
      [](size_t n, A a, const N&) { return rules::OperatorNewAlignedNothrow(n, size_t(a)); },
      [](size_t n, A a, const N&) { return rules::OperatorNewAlignedNothrow(n, size_t(a)); },
      rules::OperatorDelete,
      rules::OperatorDelete,
      [](void* p, const N&) { rules::OperatorDelete(p); },
      [](void* p, const N&) { rules::OperatorDelete(p); },
      rules::OperatorDeleteSized,
      rules::OperatorDeleteSized,
      [](void* p, A) { rules::OperatorDelete(p); },
      [](void* p, A) { rules::OperatorDelete(p); },
      [](void* p, A, const N&) { rules::OperatorDelete(p); },
      [](void* p, A, const N&) { rules::OperatorDelete(p); },
      [](void* p, size_t, A) { rules::OperatorDelete(p); },
      [](void* p, size_t, A) { rules::OperatorDelete(p); },
  };
}
#else
// The process's own functions: tierpool's when linked or preloaded.
MallocApi Tested() {
  return MallocApi{
      ::malloc,         ::free,          ::calloc, ::realloc, ::reallocarray,      ::memalign,
      ::posix_memalign, ::aligned_alloc, ::valloc, ::pvalloc, ::malloc_usable_size};
}
NewApi TestedNew() {
  using std::align_val_t;
  using std::nothrow_t;
  return NewApi{
      static_cast<void* (*)(size_t)>(::operator new),
      static_cast<void* (*)(size_t)>(::operator new[]),
      static_cast<void* (*)(size_t, const nothrow_t&)>(::operator new),
      static_cast<void* (*)(size_t, const nothrow_t&)>(::operator new[]),
      static_cast<void* (*)(size_t, align_val_t)>(::operator new),
      static_cast<void* (*)(size_t, align_val_t)>(::operator new[]),
      static_cast<void* (*)(size_t, align_val_t, const nothrow_t&)>(::operator new),
      static_cast<void* (*)(size_t, align_val_t, const nothrow_t&)>(::operator new[]),
      static_cast<void (*)(void*)>(::operator delete),
      static_cast<void (*)(void*)>(::operator delete[]),
      static_cast<void (*)(void*, const nothrow_t&)>(::operator delete),
      static_cast<void (*)(void*, const nothrow_t&)>(::operator delete[]),
      static_cast<void (*)(void*, size_t)>(::operator delete),
      static_cast<void (*)(void*, size_t)>(::operator delete[]),
      static_cast<void (*)(void*, align_val_t)>(::operator delete),
      static_cast<void (*)(void*, align_val_t)>(::operator delete[]),
      static_cast<void (*)(void*, align_val_t, const nothrow_t&)>(::operator delete),
      static_cast<void (*)(void*, align_val_t, const nothrow_t&)>(::operator delete[]),
      static_cast<void (*)(void*, size_t, align_val_t)>(::operator delete),
      static_cast<void (*)(void*, size_t, align_val_t)>(::operator delete[]),
  };
}
#endif

void* LibrarySymbol(const char* library, const char* name) {
  // RTLD_NOLOAD: the copy already in the process. dlsym on its handle searches that library
  // first, so this is glibc's (or libstdc++'s) own definition even when ours interpose it.
  void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  void* symbol = dlsym(handle, name);
  dlclose(handle);
  return symbol;
}

template <class F>
F Glibc(const char* name) {
  return reinterpret_cast<F>(LibrarySymbol("libc.so.6", name));
}

MallocApi GlibcApi() {
  return MallocApi{
      Glibc<void* (*)(size_t)>("malloc"),
      Glibc<void (*)(void*)>("free"),
      Glibc<void* (*)(size_t, size_t)>("calloc"),
      Glibc<void* (*)(void*, size_t)>("realloc"),
      Glibc<void* (*)(void*, size_t, size_t)>("reallocarray"),
      Glibc<void* (*)(size_t, size_t)>("memalign"),
      Glibc<int (*)(void**, size_t, size_t)>("posix_memalign"),
      Glibc<void* (*)(size_t, size_t)>("aligned_alloc"),
      Glibc<void* (*)(size_t)>("valloc"),
      Glibc<void* (*)(size_t)>("pvalloc"),
      Glibc<size_t (*)(void*)>("malloc_usable_size"),
  };
}

// valgrind replaces glibc's functions too (so "glibc" there is valgrind's malloc, with its own
// corner cases): the comparisons are skipped under it, the checks of tierpool are not.
bool CompareWithGlibc() {
  return std::getenv("TIERPOOL_UNDER_VALGRIND") == nullptr;
}

// tierpool_owns as this binary can reach it: linked in, or looked up in the preloaded library.
int Owns(const void* p) {
#if DROPIN_MODE_RULES || DROPIN_MODE_LINKED
  return tierpool_owns(p);
#else
  static auto owns = reinterpret_cast<int (*)(const void*)>(dlsym(RTLD_DEFAULT, "tierpool_owns"));
  return owns != nullptr && owns(p);
#endif
}

bool AlignedTo(const void* p, size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

const MallocApi ours = Tested();
const MallocApi glibc = GlibcApi();
const NewApi ours_new = TestedNew();

constexpr size_t kHuge = SIZE_MAX / 2;  // no allocator can serve it; all refuse it at once

// --- Is it really tierpool? ----------------------------------------------------------------------

TEST(DropinIdentity, TierpoolServesTheFunctionsUnderTest) {
  ASSERT_NE(glibc.malloc, nullptr) << "glibc's malloc not found in libc.so.6";
  void* p = ours.malloc(16);
  EXPECT_TRUE(Owns(p)) << "malloc is not tierpool's: is LD_PRELOAD set?";
  ours.free(p);
  void* q = ours_new.plain(16);
  EXPECT_TRUE(Owns(q)) << "operator new is not tierpool's";
  ours_new.del(q);
  void* g = glibc.malloc(16);
  EXPECT_FALSE(Owns(g)) << "the glibc reference is not glibc's";
  glibc.free(g);
}

#if !DROPIN_MODE_RULES
// With malloc replaced, everything in the process allocates from tierpool: libc's own calls,
// libstdc++'s containers, and the functions reached through the __libc_ names.
TEST(DropinIdentity, LibcAndLibstdcxxAllocateFromTierpool) {
  char* copy = strdup("a string duplicated by libc");
  EXPECT_TRUE(Owns(copy));
  free(copy);
  std::string text(1000, 'x');
  EXPECT_TRUE(Owns(text.data()));
  std::map<int, std::string> tree{{1, "one"}, {2, std::string(200, 'y')}};
  EXPECT_TRUE(Owns(&*tree.begin()));
  auto libc_malloc = reinterpret_cast<void* (*)(size_t)>(dlsym(RTLD_DEFAULT, "__libc_malloc"));
  ASSERT_NE(libc_malloc, nullptr);
  void* p = libc_malloc(32);
  EXPECT_TRUE(Owns(p));
  free(p);
}

// glibc's statistics describe the heap in use: with malloc replaced, tierpool's (glibc's own
// mallinfo2 would report an untouched heap, every field 0). 8 MiB held show in `uordblks`, and
// leave it when freed; the free memory in the caches and the backed free pages are part of what
// is free (`fordblks`).
TEST(DropinIdentity, MallinfoDescribesTierpoolsHeap) {
  constexpr std::size_t kBlocks = 2048, kSize = 4096;
  const struct mallinfo2 before = mallinfo2();
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < kBlocks; ++i)
    blocks.push_back(malloc(kSize));
  const struct mallinfo2 held = mallinfo2();
  EXPECT_GE(held.uordblks, before.uordblks + kBlocks * kSize);
  EXPECT_GE(held.arena, held.uordblks);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // glibc's old form, still called
  const struct mallinfo narrow = mallinfo();
#pragma GCC diagnostic pop
  EXPECT_GE(static_cast<std::size_t>(narrow.uordblks), kBlocks * kSize);
  for (void* p : blocks)
    free(p);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_LE(after.uordblks + kBlocks * kSize, held.uordblks);
  EXPECT_LE(after.fsmblks + after.keepcost, after.fordblks);
}
#endif

// --- malloc / free -------------------------------------------------------------------------------

TEST(DropinMalloc, ZeroBytesGivesUniqueFreeablePointers) {
  std::set<void*> seen;
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) {
    void* p = ours.malloc(0);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(seen.insert(p).second) << "malloc(0) returned " << p << " twice";
    blocks.push_back(p);
  }
  for (void* p : blocks)
    ours.free(p);
  if (CompareWithGlibc()) {
    void* g = glibc.malloc(0);
    EXPECT_NE(g, nullptr) << "glibc also returns a unique pointer for malloc(0)";
    glibc.free(g);
  }
}

TEST(DropinMalloc, FreeNullDoesNothing) {
  ours.free(nullptr);
  ours_new.del(nullptr);
  ours_new.array_del(nullptr);
  ours_new.del_sized(nullptr, 16);
  ours_new.del_aligned(nullptr, std::align_val_t{64});
  EXPECT_EQ(ours.usable_size(nullptr), 0u);
  if (CompareWithGlibc()) {
    EXPECT_EQ(glibc.usable_size(nullptr), 0u);
  }
}

// glibc promises 16-byte alignment; we give 16 to every block above 8 bytes and 8 to the smaller
// ones (all a type of that size can need; the one intended difference, see src/dropin.h).
TEST(DropinMalloc, AlignmentAndUsableSizeForEverySmallSize) {
  std::vector<void*> blocks;
  for (size_t n = 0; n <= 4096; ++n) {
    void* p = ours.malloc(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_TRUE(AlignedTo(p, n > 8 ? 16 : 8)) << "malloc(" << n << ") = " << p;
    EXPECT_GE(ours.usable_size(p), n);
    memset(p, 0xab, n);
    blocks.push_back(p);
  }
  for (void* p : blocks)
    ours.free(p);
  if (CompareWithGlibc()) {
    for (size_t n : {1u, 24u, 100u}) {
      void* g = glibc.malloc(n);
      EXPECT_TRUE(AlignedTo(g, 16));
      glibc.free(g);
    }
  }
}

TEST(DropinMalloc, LargeBlocksAreUsableAndFreed) {
  for (size_t n : {size_t{256} << 10, (size_t{256} << 10) + 1, size_t{1} << 20, size_t{33} << 20}) {
    auto* p = static_cast<unsigned char*>(ours.malloc(n));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_TRUE(AlignedTo(p, 16));
    EXPECT_GE(ours.usable_size(p), n);
    p[0] = 1;
    p[n - 1] = 2;
    ours.free(p);
  }
}

TEST(DropinMalloc, ImpossibleSizesFailWithEnomemLikeGlibc) {
  for (size_t n : {SIZE_MAX, SIZE_MAX - 7, SIZE_MAX - 16, kHuge, size_t{PTRDIFF_MAX} + 1}) {
    errno = 0;
    EXPECT_EQ(ours.malloc(n), nullptr) << n;
    EXPECT_EQ(errno, ENOMEM) << n;
    if (CompareWithGlibc()) {
      errno = 0;
      EXPECT_EQ(glibc.malloc(n), nullptr) << n;
      EXPECT_EQ(errno, ENOMEM) << n;
    }
  }
}

// --- calloc --------------------------------------------------------------------------------------

TEST(DropinCalloc, ReturnsZeroedMemoryEvenWhenReused) {
  for (size_t n : {size_t{1}, size_t{24}, size_t{200}, size_t{5000}, size_t{300} << 10}) {
    // Dirty a block of this size and free it, so calloc is likely to get it back.
    void* dirty = ours.malloc(n);
    memset(dirty, 0xcd, n);
    ours.free(dirty);
    auto* p = static_cast<unsigned char*>(ours.calloc(n, 1));
    ASSERT_NE(p, nullptr);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(p[i], 0) << "calloc(" << n << ") byte " << i;
    ours.free(p);
  }
  auto* array = static_cast<long*>(ours.calloc(1000, sizeof(long)));
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(array[i], 0);
  ours.free(array);
}

TEST(DropinCalloc, ZeroCountOrSizeGivesUniquePointer) {
  void* a = ours.calloc(0, 16);
  void* b = ours.calloc(16, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  ours.free(a);
  ours.free(b);
}

TEST(DropinCalloc, OverflowingProductFailsWithEnomemLikeGlibc) {
  const std::pair<size_t, size_t> cases[] = {
      {SIZE_MAX, 2}, {size_t{1} << 32, size_t{1} << 32}, {kHuge + 1, 2}, {3, SIZE_MAX / 2}};
  for (auto [count, size] : cases) {
    errno = 0;
    EXPECT_EQ(ours.calloc(count, size), nullptr) << count << " x " << size;
    EXPECT_EQ(errno, ENOMEM);
    if (CompareWithGlibc()) {
      errno = 0;
      EXPECT_EQ(glibc.calloc(count, size), nullptr);
      EXPECT_EQ(errno, ENOMEM);
    }
  }
}

// --- realloc / reallocarray ----------------------------------------------------------------------

void Fill(void* p, size_t n, unsigned seed) {
  auto* bytes = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    bytes[i] = static_cast<unsigned char>(seed + i * 7);
}
bool Holds(const void* p, size_t n, unsigned seed) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] != static_cast<unsigned char>(seed + i * 7)) return false;
  }
  return true;
}

TEST(DropinRealloc, NullPointerActsAsMalloc) {
  void* p = ours.realloc(nullptr, 100);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(ours.usable_size(p), 100u);
  ours.free(p);
  void* zero = ours.realloc(nullptr, 0);  // == malloc(0): a unique pointer
  EXPECT_NE(zero, nullptr);
  ours.free(zero);
  if (CompareWithGlibc()) {
    void* g = glibc.realloc(nullptr, 0);
    EXPECT_NE(g, nullptr);
    glibc.free(g);
  }
}

// glibc: realloc(p, 0) frees p and returns NULL (C23 makes it undefined; programs on Linux
// rely on glibc's answer). Under valgrind and ASan a block not freed here would be reported.
TEST(DropinRealloc, ZeroSizeFreesAndReturnsNullLikeGlibc) {
  for (size_t n : {size_t{1}, size_t{100}, size_t{1} << 20}) {
    void* p = ours.malloc(n);
    EXPECT_EQ(ours.realloc(p, 0), nullptr);
    if (CompareWithGlibc()) {
      void* g = glibc.malloc(n);
      EXPECT_EQ(glibc.realloc(g, 0), nullptr);
    }
  }
}

TEST(DropinRealloc, ShrinkingStaysInPlaceAndKeepsData) {
  for (size_t n : {size_t{64}, size_t{1000}, size_t{6000}, size_t{100} << 10, size_t{2} << 20}) {
    void* p = ours.malloc(n);
    Fill(p, n, 11);
    const size_t smaller = n - n / 4;
    void* q = ours.realloc(p, smaller);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q, p) << "shrinking " << n << " -> " << smaller << " moved the block";
    EXPECT_TRUE(Holds(q, smaller, 11));
    // A much smaller size may move (to give the memory back) but keeps the data.
    void* r = ours.realloc(q, 16);
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(Holds(r, 16, 11));
    ours.free(r);
  }
}

TEST(DropinRealloc, GrowingWithinTheBlockStaysInPlace) {
  for (size_t n : {size_t{1}, size_t{100}, size_t{3000}, size_t{300} << 10}) {
    void* p = ours.malloc(n);
    Fill(p, n, 5);
    const size_t usable = ours.usable_size(p);
    void* q = ours.realloc(p, usable);
    EXPECT_EQ(q, p) << "growing " << n << " to its usable size " << usable << " moved it";
    EXPECT_TRUE(Holds(q, n, 5));
    ours.free(q);
  }
}

TEST(DropinRealloc, GrowingStepByStepKeepsData) {
  size_t size = 1;
  void* p = ours.malloc(size);
  Fill(p, size, 3);
  while (size < (size_t{4} << 20)) {
    const size_t bigger = size * 3 / 2 + 1;
    void* q = ours.realloc(p, bigger);
    ASSERT_NE(q, nullptr) << bigger;
    ASSERT_TRUE(Holds(q, size, 3)) << size << " -> " << bigger;
    Fill(q, bigger, 3);
    p = q;
    size = bigger;
  }
  ours.free(p);
}

TEST(DropinRealloc, FailureLeavesTheBlockUntouched) {
  void* p = ours.malloc(100);
  Fill(p, 100, 9);
  for (size_t n : {SIZE_MAX, kHuge}) {
    errno = 0;
    EXPECT_EQ(ours.realloc(p, n), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_TRUE(Holds(p, 100, 9));
    EXPECT_GE(ours.usable_size(p), 100u);
  }
  ours.free(p);
}

TEST(DropinReallocArray, MultipliesWithOverflowCheckLikeGlibc) {
  void* p = ours.reallocarray(nullptr, 10, 10);
  ASSERT_NE(p, nullptr);
  Fill(p, 100, 1);
  void* q = ours.reallocarray(p, 100, 40);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(Holds(q, 100, 1));
  errno = 0;
  EXPECT_EQ(ours.reallocarray(q, SIZE_MAX / 2, 3), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_TRUE(Holds(q, 100, 1)) << "a failed reallocarray must leave the block alone";
  EXPECT_EQ(ours.reallocarray(q, 0, 8), nullptr) << "a zero product frees, as realloc(p, 0)";
  if (CompareWithGlibc()) {
    void* g = glibc.reallocarray(nullptr, 10, 10);
    errno = 0;
    EXPECT_EQ(glibc.reallocarray(g, SIZE_MAX / 2, 3), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_EQ(glibc.reallocarray(g, 0, 8), nullptr);
  }
}

// --- aligned allocation --------------------------------------------------------------------------

constexpr size_t kSizes[] = {0, 1, 8, 24, 100, 4096, 5000, size_t{300} << 10};

TEST(DropinPosixMemalign, EveryPowerOfTwoAlignment) {
  for (size_t alignment = sizeof(void*); alignment <= (size_t{1} << 21); alignment *= 2) {
    for (size_t n : kSizes) {
      void* p = nullptr;
      ASSERT_EQ(ours.posix_memalign(&p, alignment, n), 0) << alignment << " " << n;
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(AlignedTo(p, alignment)) << alignment << " " << n << " " << p;
      EXPECT_GE(ours.usable_size(p), n);
      EXPECT_TRUE(Owns(p));
      memset(p, 0x5a, n);
      ours.free(p);
    }
  }
}

TEST(DropinPosixMemalign, BadAlignmentIsEinvalAndLeavesEverythingAlone) {
  void* const kUntouched = reinterpret_cast<void*>(0x1234);
  for (size_t alignment : {size_t{0}, size_t{1}, size_t{2}, size_t{4}, size_t{3}, size_t{12},
                           size_t{24}, size_t{48}, SIZE_MAX}) {
    void* p = kUntouched;
    errno = 4242;
    EXPECT_EQ(ours.posix_memalign(&p, alignment, 64), EINVAL) << alignment;
    EXPECT_EQ(p, kUntouched) << "*memptr written on failure";
    EXPECT_EQ(errno, 4242) << "errno changed";
    if (CompareWithGlibc()) {
      void* g = kUntouched;
      EXPECT_EQ(glibc.posix_memalign(&g, alignment, 64), EINVAL) << alignment;
      EXPECT_EQ(g, kUntouched);
    }
  }
}

TEST(DropinPosixMemalign, ImpossibleSizeIsEnomemAndLeavesMemptrAlone) {
  void* const kUntouched = reinterpret_cast<void*>(0x1234);
  for (size_t n : {SIZE_MAX, kHuge}) {
    void* p = kUntouched;
    errno = 4242;
    EXPECT_EQ(ours.posix_memalign(&p, 64, n), ENOMEM);
    EXPECT_EQ(p, kUntouched);
    EXPECT_EQ(errno, 4242);
    if (CompareWithGlibc()) {
      void* g = kUntouched;
      EXPECT_EQ(glibc.posix_memalign(&g, 64, n), ENOMEM);
      EXPECT_EQ(g, kUntouched);
    }
  }
}

// C17 (DR 460) and glibc >= 2.38: any power-of-two alignment, any size (not only multiples of
// the alignment); anything else is NULL + EINVAL. glibc 2.36 still rounds a bad alignment up
// like memalign, so that case is not compared.
TEST(DropinAlignedAlloc, PowerOfTwoAlignmentsAnySize) {
  for (size_t alignment = 1; alignment <= (size_t{1} << 16); alignment *= 2) {
    for (size_t n : kSizes) {
      void* p = ours.aligned_alloc(alignment, n);
      ASSERT_NE(p, nullptr) << alignment << " " << n;
      EXPECT_TRUE(AlignedTo(p, alignment));
      EXPECT_GE(ours.usable_size(p), n);
      ours.free(p);
    }
  }
  if (CompareWithGlibc()) {
    void* g = glibc.aligned_alloc(64, 100);  // size not a multiple of the alignment: fine
    EXPECT_NE(g, nullptr);
    EXPECT_TRUE(AlignedTo(g, 64));
    glibc.free(g);
  }
}

TEST(DropinAlignedAlloc, BadAlignmentIsEinval) {
  for (size_t alignment : {size_t{0}, size_t{3}, size_t{24}, size_t{100}, SIZE_MAX}) {
    errno = 0;
    EXPECT_EQ(ours.aligned_alloc(alignment, 64), nullptr) << alignment;
    EXPECT_EQ(errno, EINVAL);
  }
  errno = 0;
  EXPECT_EQ(ours.aligned_alloc(64, SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

// glibc's memalign rounds an alignment that is no power of two up to the next one.
TEST(DropinMemalign, AlignsAndRoundsOddAlignmentsUpLikeGlibc) {
  const std::pair<size_t, size_t> cases[] = {{1, 1},   {8, 8},     {16, 16},     {24, 32},
                                             {48, 64}, {100, 128}, {4096, 4096}, {5000, 8192}};
  for (auto [asked, expected] : cases) {
    void* p = ours.memalign(asked, 100);
    ASSERT_NE(p, nullptr) << asked;
    EXPECT_TRUE(AlignedTo(p, expected)) << "memalign(" << asked << ") = " << p;
    ours.free(p);
    if (CompareWithGlibc()) {
      void* g = glibc.memalign(asked, 100);
      ASSERT_NE(g, nullptr);
      EXPECT_TRUE(AlignedTo(g, expected));
      glibc.free(g);
    }
  }
  errno = 0;
  EXPECT_EQ(ours.memalign(SIZE_MAX / 2 + 2, 16), nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (CompareWithGlibc()) {
    errno = 0;
    EXPECT_EQ(glibc.memalign(SIZE_MAX / 2 + 2, 16), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
}

TEST(DropinValloc, PageAlignedAndPvallocRoundsToPages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t n : {size_t{0}, size_t{1}, page - 1, page, page + 1, size_t{5} * page + 3}) {
    void* v = ours.valloc(n);
    ASSERT_NE(v, nullptr);
    EXPECT_TRUE(AlignedTo(v, page));
    EXPECT_GE(ours.usable_size(v), n);
    ours.free(v);
    void* p = ours.pvalloc(n);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(AlignedTo(p, page));
    const size_t whole_pages = n == 0 ? page : (n + page - 1) / page * page;
    EXPECT_GE(ours.usable_size(p), whole_pages) << "pvalloc(" << n << ")";
    memset(p, 1, whole_pages);
    ours.free(p);
  }
  errno = 0;
  EXPECT_EQ(ours.pvalloc(SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  if (CompareWithGlibc()) {
    errno = 0;
    EXPECT_EQ(glibc.pvalloc(SIZE_MAX), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
}

// --- operator new / delete -----------------------------------------------------------------------

TEST(DropinNew, EveryFormAllocatesAndEveryDeleteFrees) {
  const auto nt = std::nothrow;
  const auto a64 = std::align_val_t{64};
  const auto a4k = std::align_val_t{4096};
  void* p;
  p = ours_new.plain(0);
  ASSERT_NE(p, nullptr);
  ours_new.del(p);
  // new(n): aligned for an object of size n; new[](n): for any object no larger than n.
  p = ours_new.plain(24);
  EXPECT_TRUE(AlignedTo(p, 8));
  ours_new.del_sized(p, 24);
  p = ours_new.plain(32);
  EXPECT_TRUE(AlignedTo(p, __STDCPP_DEFAULT_NEW_ALIGNMENT__));
  ours_new.del_sized(p, 32);
  p = ours_new.array(24);
  EXPECT_TRUE(AlignedTo(p, __STDCPP_DEFAULT_NEW_ALIGNMENT__));
  ours_new.array_del_sized(p, 24);
  p = ours_new.array(1000);
  ours_new.array_del(p);
  p = ours_new.array(1000);
  ours_new.array_del_sized(p, 1000);
  p = ours_new.nothrow(40, nt);
  ours_new.del_nothrow(p, nt);
  p = ours_new.array_nothrow(40, nt);
  ours_new.array_del_nothrow(p, nt);
  for (auto alignment : {a64, a4k, std::align_val_t{1}, std::align_val_t{16}}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{70000}}) {
      p = ours_new.aligned(n, alignment);
      EXPECT_TRUE(AlignedTo(p, size_t(alignment)));
      ours_new.del_aligned(p, alignment);
      p = ours_new.array_aligned(n, alignment);
      EXPECT_TRUE(AlignedTo(p, size_t(alignment)));
      ours_new.array_del_aligned(p, alignment);
      p = ours_new.aligned_nothrow(n, alignment, nt);
      EXPECT_TRUE(AlignedTo(p, size_t(alignment)));
      ours_new.del_aligned_nothrow(p, alignment, nt);
      p = ours_new.array_aligned_nothrow(n, alignment, nt);
      ours_new.array_del_aligned_nothrow(p, alignment, nt);
      p = ours_new.aligned(n, alignment);
      ours_new.del_sized_aligned(p, n, alignment);
      p = ours_new.array_aligned(n, alignment);
      ours_new.array_del_sized_aligned(p, n, alignment);
    }
  }
}

// Every size, freed with its size: the hardened build (the asan preset) aborts when a sized
// delete names another size class than the block's. Every form aligns as malloc does (16 above
// 8 bytes): compiled code assumes it of `operator new(n)` whatever n is (src/dropin.h), and
// Debian's clang 14 crashed when a 40-byte `new` came back 8-aligned.
TEST(DropinNew, SizedDeleteAndAlignmentOfEverySmallSize) {
  std::vector<std::pair<void*, size_t>> singles, arrays;
  for (size_t n = 0; n <= 2048; ++n) {
    void* single = ours_new.plain(n);
    EXPECT_TRUE(AlignedTo(single, n > 8 ? 16 : 8)) << "new(" << n << ") = " << single;
    singles.emplace_back(single, n);
    void* array = ours_new.array(n);
    EXPECT_TRUE(AlignedTo(array, n > 8 ? 16 : 8)) << "new[](" << n << ") = " << array;
    arrays.emplace_back(array, n);
  }
  for (auto [p, n] : singles)
    ours_new.del_sized(p, n);
  for (auto [p, n] : arrays)
    ours_new.array_del_sized(p, n);
}

// The handler is called again after every failed attempt until it goes away; then bad_alloc.
int handler_calls = 0;
void HandlerThatGivesUpOnThirdCall() {
  if (++handler_calls == 3) std::set_new_handler(nullptr);
}
void HandlerThatThrows() {
  ++handler_calls;
  throw std::bad_alloc();
}

template <class F>
int CallsBeforeBadAlloc(F allocate) {
  handler_calls = 0;
  std::set_new_handler(HandlerThatGivesUpOnThirdCall);
  bool threw = false;
  try {
    allocate();
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  std::set_new_handler(nullptr);
  return threw ? handler_calls : -1;
}

TEST(DropinNew, LoopsOnTheNewHandlerThenThrowsBadAlloc) {
  EXPECT_EQ(CallsBeforeBadAlloc([] { return ours_new.plain(kHuge); }), 3);
  EXPECT_EQ(CallsBeforeBadAlloc([] { return ours_new.array(kHuge); }), 3);
  EXPECT_EQ(CallsBeforeBadAlloc([] { return ours_new.aligned(kHuge, std::align_val_t{64}); }), 3);
  // libstdc++'s own operator new (which allocates with whatever malloc is in the process)
  // behaves the same way. Not where a sanitizer's malloc serves it: those abort on such a size.
#if !TIERPOOL_ASAN && !TIERPOOL_TSAN
  auto libstdcxx_new =
      reinterpret_cast<void* (*)(size_t)>(LibrarySymbol("libstdc++.so.6", "_Znwm"));
  ASSERT_NE(libstdcxx_new, nullptr);
  if (CompareWithGlibc()) {
    EXPECT_EQ(CallsBeforeBadAlloc([&] { return libstdcxx_new(kHuge); }), 3);
  }
#endif
  // Without a handler: bad_alloc at once.
  EXPECT_THROW(ours_new.plain(kHuge), std::bad_alloc);
  EXPECT_THROW(ours_new.plain(SIZE_MAX), std::bad_alloc);
}

TEST(DropinNew, NothrowFormsReturnNullptr) {
  const auto nt = std::nothrow;
  const auto a = std::align_val_t{128};
  EXPECT_EQ(ours_new.nothrow(kHuge, nt), nullptr);
  EXPECT_EQ(ours_new.array_nothrow(SIZE_MAX, nt), nullptr);
  EXPECT_EQ(ours_new.aligned_nothrow(kHuge, a, nt), nullptr);
  EXPECT_EQ(ours_new.array_aligned_nothrow(kHuge, a, nt), nullptr);
  // With a handler: called until it gives up, then nullptr; a handler that throws ends it too.
  handler_calls = 0;
  std::set_new_handler(HandlerThatGivesUpOnThirdCall);
  EXPECT_EQ(ours_new.nothrow(kHuge, nt), nullptr);
  EXPECT_EQ(handler_calls, 3);
  handler_calls = 0;
  std::set_new_handler(HandlerThatThrows);
  EXPECT_EQ(ours_new.array_aligned_nothrow(kHuge, a, nt), nullptr);
  EXPECT_EQ(handler_calls, 1);
  std::set_new_handler(nullptr);
}

#if DROPIN_MODE_RULES
// A request the thread's cache cannot serve leaves operator new's inline path for NewSlow. When
// the OS then refuses memory for an ordinary small size (not an impossible one), the same rules
// hold: the new-handler runs until it gives up, then bad_alloc (nullptr for nothrow), and once
// memory is back the same sizes are served again. The mmap hook makes the OS refuse.
TEST(DropinNew, SmallRequestsOutOfMemoryRunTheNewHandlerThenRecover) {
  constexpr size_t kBlock = 64 * 1024;  // a size class; untouched blocks cost address space only
  std::vector<void*> kept;
  tierpool::internal::SetMapFailureAfter(0);
  // Use up the thread's cache, the central lists and the mapped free spans of this class.
  while (void* p = ours_new.nothrow(kBlock, std::nothrow)) {
    kept.push_back(p);
    ASSERT_LT(kept.size(), size_t{1} << 20) << "the mmap hook never made the allocator fail";
  }
  EXPECT_EQ(CallsBeforeBadAlloc([&] { return ours_new.plain(kBlock); }), 3);
  EXPECT_EQ(CallsBeforeBadAlloc([&] { return ours_new.array(kBlock); }), 3);
  EXPECT_EQ(ours_new.array_nothrow(kBlock, std::nothrow), nullptr);
  tierpool::internal::SetMapFailureAfter(-1);
  void* again = ours_new.plain(kBlock);
  EXPECT_NE(again, nullptr);
  ours_new.del(again);
  for (void* p : kept)
    ours_new.del(p);
}
#endif

TEST(DropinNew, AlignmentThatIsNoPowerOfTwoFailsLikeLibstdcxx) {
  EXPECT_THROW(ours_new.aligned(64, std::align_val_t{48}), std::bad_alloc);
  EXPECT_EQ(ours_new.aligned_nothrow(64, std::align_val_t{48}, std::nothrow), nullptr);
  auto libstdcxx_aligned_new = reinterpret_cast<void* (*)(size_t, std::align_val_t)>(
      LibrarySymbol("libstdc++.so.6", "_ZnwmSt11align_val_t"));
  ASSERT_NE(libstdcxx_aligned_new, nullptr);
  if (CompareWithGlibc()) {  // valgrind's replacement accepts any alignment
    EXPECT_THROW(libstdcxx_aligned_new(64, std::align_val_t{48}), std::bad_alloc);
  }
}

// --- threads -------------------------------------------------------------------------------------

// Blocks cross threads every way the C API allows: allocated here, reallocated there, freed by a
// third thread.
TEST(DropinThreads, BlocksMoveBetweenThreads) {
  constexpr int kThreads = 4;
  const int kBlocks = std::getenv("TIERPOOL_UNDER_VALGRIND") ? 300 : 5000;
  std::vector<std::vector<void*>> made(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kBlocks; ++i) {
        const size_t n = 1 + (i * 37 + t * 101) % 3000;
        void* p = i % 3 == 0 ? ours.calloc(1, n) : ours.malloc(n);
        Fill(p, n, unsigned(n));
        made[t].push_back(p);
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto& theirs = made[(t + 1) % kThreads];
      const int owner = (t + 1) % kThreads;
      for (int i = 0; i < kBlocks; ++i) {
        const size_t n = 1 + (i * 37 + owner * 101) % 3000;
        ASSERT_TRUE(Holds(theirs[i], n, unsigned(n)));
        theirs[i] = ours.realloc(theirs[i], n + 100);
        ASSERT_TRUE(Holds(theirs[i], n, unsigned(n)));
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (void* p : made[(t + 2) % kThreads])
        ours.free(p);
    });
  }
  for (auto& thread : threads)
    thread.join();
}

}  // namespace
