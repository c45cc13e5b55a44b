#include "test_support.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define TIERPOOL_TEST_HAS_VALGRIND 1
#endif

namespace {
std::size_t g_news = 0;
std::size_t g_deletes = 0;
int g_failures_left = 0;

void* Allocate(std::size_t size, std::size_t align) {
  if (g_failures_left > 0) {
    --g_failures_left;
    throw std::bad_alloc();
  }
  ++g_news;
  if (size == 0) size = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else if (posix_memalign(&p, align, size) != 0) {
    p = nullptr;
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void Free(void* p) noexcept {
  if (p == nullptr) return;
  ++g_deletes;
  std::free(p);
}
}  // namespace

// Never inlined: valgrind replaces these functions by their symbols, and an inlined copy in this
// file would allocate with malloc behind its back.
[[gnu::noinline]] void* operator new(std::size_t size) {
  return Allocate(size, alignof(std::max_align_t));
}
[[gnu::noinline]] void* operator new(std::size_t size, std::align_val_t align) {
  return Allocate(size, std::size_t(align));
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  Free(p);
}
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept {
  Free(p);
}
[[gnu::noinline]] void operator delete(void* p, std::align_val_t) noexcept {
  Free(p);
}
[[gnu::noinline]] void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  Free(p);
}

namespace tierpool_test {

AllocationCounter::AllocationCounter() : news_at_start_(g_news), deletes_at_start_(g_deletes) {}
std::size_t AllocationCounter::news() const {
  return g_news - news_at_start_;
}
std::size_t AllocationCounter::deletes() const {
  return g_deletes - deletes_at_start_;
}

bool OperatorNewIsOurs() {
  // Called through a pointer, as the pools call it: a direct call from this file could be
  // inlined into Allocate() above, which valgrind cannot redirect.
  void* (*volatile global_new)(std::size_t) = &::operator new;
  void (*volatile global_delete)(void*) noexcept = &::operator delete;
  const std::size_t before = g_news;
  global_delete(global_new(1));
  return g_news != before;
}

volatile char g_sink;
void ReadByte(const void* p) {
  g_sink = *static_cast<const volatile char*>(p);
}

void ExpectMemcheckErrors(const std::function<void()>& bad, unsigned errors) {
#if TIERPOOL_TEST_HAS_VALGRIND
  if (!RUNNING_ON_VALGRIND) GTEST_SKIP() << "run under valgrind (the memcheck preset)";
  GTEST_FLAG_SET(death_test_style, "fast");
  const std::string expected = "memcheck errors: " + std::to_string(errors) + "\n";
  EXPECT_EXIT(
      {
        const unsigned before = VALGRIND_COUNT_ERRORS;
        bad();
        std::fprintf(stderr, "memcheck errors: %u\n", VALGRIND_COUNT_ERRORS - before);
        std::fflush(stderr);
        std::_Exit(0);
      },
      [](int) { return true; }, expected);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
#else
  (void)bad, (void)errors;
  GTEST_SKIP() << "built without <valgrind/memcheck.h>";
#endif
}

FailNextAllocations::FailNextAllocations(int n) {
  g_failures_left = n;
}
FailNextAllocations::~FailNextAllocations() {
  g_failures_left = 0;
}

}  // namespace tierpool_test
