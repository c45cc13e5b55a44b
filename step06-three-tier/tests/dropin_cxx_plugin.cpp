// A C++ library that a C program opens with dlopen (tests/dropin_c_program.c), as Python opens a
// C++ extension: it brings the C++ runtime into a process whose preloaded libtierpool.so started
// without one. Out of memory, its operator new must still call its new-handler and then throw
// std::bad_alloc for it to catch.
#include <cstddef>
#include <cstdint>
#include <new>

namespace {
int handler_calls = 0;
void CountingHandler() {
  if (++handler_calls == 3) std::set_new_handler(nullptr);  // then operator new gives up
}
}  // namespace

// 1 when `new char[huge]` threw std::bad_alloc after the handler ran three times.
extern "C" __attribute__((visibility("default"))) int dropin_plugin_out_of_memory() {
  volatile std::size_t huge = SIZE_MAX / 2;
  handler_calls = 0;
  std::set_new_handler(CountingHandler);
  try {
    char* p = new char[huge];
    delete[] p;
    return 0;
  } catch (const std::bad_alloc&) {
    return handler_calls == 3 ? 1 : 0;
  }
}
