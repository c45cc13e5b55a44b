// Helpers of step 02's tests: counting and failing the global operator new (test_support.cpp
// replaces it in the test binary), and loop counts that shrink under valgrind.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <functional>

namespace tierpool_test {

// How many global operator new / delete calls happened since it was made. Allocate what the
// test itself needs (vectors, strings) before making one.
class AllocationCounter {
 public:
  AllocationCounter();
  std::size_t news() const;
  std::size_t deletes() const;

 private:
  std::size_t news_at_start_;
  std::size_t deletes_at_start_;
};

// Whether this binary's operator new is the one of test_support.cpp (valgrind replaces it with
// its own, and then counting and failure injection do nothing).
bool OperatorNewIsOurs();

#define SKIP_UNLESS_OPERATOR_NEW_IS_OURS() \
  if (!tierpool_test::OperatorNewIsOurs()) \
  GTEST_SKIP() << "operator new is not replaceable here (valgrind has its own)"

// While alive, the next `n` calls of the global operator new throw std::bad_alloc.
class FailNextAllocations {
 public:
  explicit FailNextAllocations(int n);
  ~FailNextAllocations();
};

// Reads a byte and keeps it: a load whose value is never used can be dropped, by the compiler
// and by valgrind's own translator, and then no tool reports it.
void ReadByte(const void* p);

// Under valgrind memcheck: runs `bad` in a forked child (a "fast" death test: valgrind follows
// fork, not exec) and expects memcheck to count exactly `errors` errors there, so the parent's
// own run stays error-free. Skips the test when not under memcheck.
void ExpectMemcheckErrors(const std::function<void()>& bad, unsigned errors);

// `n`, or a tenth of it under valgrind (TIERPOOL_UNDER_VALGRIND is set by the memcheck preset).
inline int Scaled(int n) {
  return std::getenv("TIERPOOL_UNDER_VALGRIND") != nullptr ? (n + 9) / 10 : n;
}

}  // namespace tierpool_test
