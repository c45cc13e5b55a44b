// The parts of the drop-in rules that throw, kept out of malloc_shim.cpp and new_delete.cpp so
// those can be built without exceptions (see dropin.h).
//
// libtierpool.so builds this file with TIERPOOL_DROPIN_WEAK_CXX_RUNTIME, so that the library needs
// libc alone: with libstdc++ (and its libm and libgcc_s) among its needs, every preloaded program
// loaded them, C programs too, and /bin/true took 2.1 ms to run instead of 1.4 and 2.9 MB of
// resident memory instead of 1.6. Every name of the C++ runtime used here is a weak reference
// instead. A C++ program has the runtime loaded, so they resolve, and operator new calls the
// new-handler and throws as it always did; in a C program they stay null, and there no handler
// can have been installed and no code catches. Only a runtime loaded with the program counts: a
// C++ library that a C program dlopens later (a Python extension) is not seen, and its operator
// new, out of memory, aborts with a message instead of throwing.
//
// libtierpool.a keeps strong references: linked statically, a weak reference pulls no member out
// of libstdc++.a, and a program that never names std::bad_alloc itself would have none to throw.
#include <cxxabi.h>
#include <stdlib.h>
#include <unistd.h>

#include "dropin.h"

#if TIERPOOL_DROPIN_WEAK_CXX_RUNTIME
// Declared weak, so the compiler tests their addresses instead of assuming them non-null.
namespace std {
new_handler get_new_handler() noexcept __attribute__((weak));
}
namespace __cxxabiv1 {
extern "C" {
void* __cxa_allocate_exception(std::size_t) noexcept __attribute__((weak));
void __cxa_throw(void*, std::type_info*, void (*)(void*)) __attribute__((weak, noreturn));
}
}  // namespace __cxxabiv1
// The names the compiler itself uses for `throw std::bad_alloc()` and `catch (...)`: not tested,
// only reached once the ones above were found (the runtime that has those has these).
asm(".weak _ZTISt9bad_alloc\n"
    ".weak _ZTVSt9bad_alloc\n"
    ".weak _ZNSt9bad_allocD1Ev\n"
    ".weak __cxa_begin_catch\n"
    ".weak __cxa_end_catch\n"
    ".weak __gxx_personality_v0\n"
    ".weak _Unwind_Resume\n");
#endif

namespace tierpool::dropin {

namespace {

bool CxxRuntimeLoaded() {
#if TIERPOOL_DROPIN_WEAK_CXX_RUNTIME
  return &std::get_new_handler != nullptr && &abi::__cxa_allocate_exception != nullptr &&
         &abi::__cxa_throw != nullptr;
#else
  return true;
#endif
}

std::new_handler NewHandler() {
  return CxxRuntimeLoaded() ? std::get_new_handler() : nullptr;
}

}  // namespace

void* RetryNew(std::size_t request, std::size_t alignment, bool nothrow) {
  for (;;) {
    std::new_handler handler = NewHandler();
    if (handler == nullptr) {
      if (nothrow) return nullptr;
      ThrowBadAlloc();
    }
    if (nothrow) {
      try {
        handler();
      } catch (...) {
        return nullptr;
      }
    } else {
      handler();
    }
    void* block = alignment == 0 ? impl::Allocate(request) : AlignedAllocate(alignment, request);
    if (block != nullptr) return block;
  }
}

void* NewSlow(std::size_t request, bool nothrow) {
  if (void* block = impl::Allocate(request)) return block;
  return RetryNew(request, 0, nothrow);
}

void ThrowBadAlloc() {
  if (!CxxRuntimeLoaded()) {
    // Returning would hand the caller a null pointer it was promised never to see.
    static const char kMessage[] =
        "tierpool: operator new: out of memory, and no C++ runtime loaded to throw "
        "std::bad_alloc\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    abort();
  }
  throw std::bad_alloc();
}

}  // namespace tierpool::dropin
