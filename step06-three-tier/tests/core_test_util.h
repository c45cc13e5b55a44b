// Helpers shared by the core's tests.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "address_space_limit.h"  // common/testing

namespace core_test {

inline bool UnderValgrind() {
  const char* v = std::getenv("TIERPOOL_UNDER_VALGRIND");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// config.h defines TIERPOOL_ASAN (to 0 outside ASan builds), so its value counts, not whether it
// is defined.
inline bool UnderSanitizer() {
#if (defined(TIERPOOL_ASAN) && TIERPOOL_ASAN) || (defined(TIERPOOL_TSAN) && TIERPOOL_TSAN)
  return true;
#else
  return false;
#endif
}

// Loop counts shrink under valgrind (threads run one at a time, ~30x slower) and the
// sanitizers (`sanitizer`: TSan and ASan, which are some 5-15x slower).
inline int Scaled(int normal, int sanitizer, int valgrind) {
  if (UnderValgrind()) return valgrind;
  if (UnderSanitizer()) return sanitizer;
  return normal;
}

// Resident set size of this process, from /proc/self/statm.
inline std::size_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  if (std::fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

inline std::size_t VirtualBytes() {
  return tierpool_testing::MappedBytes();
}

}  // namespace core_test
