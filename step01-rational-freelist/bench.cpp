// Step 01 on the shared harness: W1 "rational" with the free list beside global new/delete
// (glibc, and every preloaded peer), Boost.Pool, std::pmr, libstdc++'s pools and the baseline.
#include "rational.h"
#include "tierpool_bench/peers.h"

namespace {

struct FreeListFactory {
  using Object = step01::Rational;
  Object* New(int i) { return new step01::Rational(i); }
  void Delete(Object* p) { delete p; }
  void EndRound() {}
};

const bool registered = [] {
  using namespace tierpool::bench;
  Register<RationalWorkload, FreeListFactory>("step01-freelist", 1);
  RegisterPeers<RationalWorkload>({1});
  return true;
}();

}  // namespace
