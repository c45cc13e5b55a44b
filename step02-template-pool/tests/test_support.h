// Helpers of step 02's tests: counting and failing the global operator new (test_support.cpp
// replaces it in the test binary), and loop counts that shrink under valgrind.
#pragma once

#include <cstddef>
#include <cstdlib>

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

// While alive, the next `n` calls of the global operator new throw std::bad_alloc.
class FailNextAllocations {
 public:
  explicit FailNextAllocations(int n);
  ~FailNextAllocations();
};

// `n`, or a tenth of it under valgrind (TIERPOOL_UNDER_VALGRIND is set by the memcheck preset).
inline int Scaled(int n) {
  return std::getenv("TIERPOOL_UNDER_VALGRIND") != nullptr ? (n + 9) / 10 : n;
}

}  // namespace tierpool_test
