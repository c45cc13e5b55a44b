// A deliberate bug for memcheck: run under valgrind (ctest does, in the memcheck build), it must
// be reported. "uaf": read after free; "leak": a block never freed.
#include <cstdio>
#include <cstring>

#include "tierpool/tierpool.h"

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "uaf";
  if (std::strcmp(what, "leak") == 0) {
    // 768 is a class size, so memcheck reports exactly the bytes asked for.
    void* leaked = tierpool::ConcurrentAlloc(768);
    std::memset(leaked, 0, 768);
    leaked = nullptr;
    return 0;
  }
  auto* p = static_cast<volatile char*>(tierpool::ConcurrentAlloc(48));
  p[0] = 1;
  tierpool::ConcurrentFree(const_cast<char*>(p));
  std::printf("read after free: %d\n", p[7]);  // the bug
  return 0;
}
