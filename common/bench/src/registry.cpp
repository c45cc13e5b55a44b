#include "tierpool_bench/harness.h"

namespace tierpool::bench {

std::vector<Entry>& Registry() {
  static std::vector<Entry> entries;
  return entries;
}

}  // namespace tierpool::bench
