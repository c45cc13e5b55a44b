// The article's program: 10 000 rounds of 5000 `new Rational(i)` then 5000 `delete`, timed with
// steady_clock. Build it twice to see what the free list buys:
//   build/release/step01-rational-freelist/step01-example           (the free list)
//   build/release/step01-rational-freelist/step01-example-global    (global new/delete)
#include <chrono>
#include <cstdlib>
#include <iostream>

#ifdef STEP01_GLOBAL_NEW
struct Rational {
  Rational(int a = 0, int b = 1) : n(a), d(b) {}
  int n;
  int d;
};
#else
#include "rational.h"
using step01::Rational;
#endif

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10000;
  constexpr int kBatch = 5000;
  static Rational* array[kBatch];

#ifndef STEP01_GLOBAL_NEW
  Rational::newMemPool();
#endif
  auto start = std::chrono::steady_clock::now();
  for (int j = 0; j < rounds; ++j) {
    for (int i = 0; i < kBatch; ++i)
      array[i] = new Rational(i);
    for (int i = 0; i < kBatch; ++i)
      delete array[i];
  }
  auto end = std::chrono::steady_clock::now();
#ifndef STEP01_GLOBAL_NEW
  Rational::deleteMemPool();
#endif
  std::cout << "use time: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(end - start).count()
            << " ms\n";
  return 0;
}
