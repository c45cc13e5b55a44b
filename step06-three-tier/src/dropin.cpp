// The parts of the drop-in rules that throw, kept out of malloc_shim.cpp and new_delete.cpp so
// those can be built without exceptions (see dropin.h).
//
// libtierpool.so builds this file with TIERPOOL_DROPIN_WEAK_CXX_RUNTIME, so that the library needs
// libc alone: with libstdc++ (and its libm and libgcc_s) among its needs, every preloaded program
// loaded them, C programs too, and paid for it in start-up time and resident memory (the chapter
// says how to measure it). Every name of the C++ runtime used here is a weak reference
// instead. A C++ program has the runtime loaded, so they resolve, and operator new calls the
// new-handler and throws as it always did; in a C program they stay null, and there no handler
// can have been installed and no code catches. A C++ runtime loaded later, with a C++ library
// that a C program dlopens (a Python extension), is not bound to weak references: it is looked up
// by name (LateRuntime), so that library's operator new still calls its new-handler and throws
// std::bad_alloc, which the extension catches (Python turns it into MemoryError).
//
// libtierpool.a keeps strong references: linked statically, a weak reference pulls no member out
// of libstdc++.a, and a program that never names std::bad_alloc itself would have none to throw.
#include <cxxabi.h>
#include <dlfcn.h>
#include <pthread.h>
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

// The pieces of a C++ runtime that was dlopened after start-up, found by their names, once, the
// first time operator new runs out of memory without a runtime bound to the weak references.
struct LateRuntime {
  std::new_handler (*get_new_handler)() = nullptr;
  void* (*allocate_exception)(std::size_t) = nullptr;
  void (*throw_exception)(void*, std::type_info*, void (*)(void*)) = nullptr;
  std::type_info* bad_alloc_type = nullptr;
  const char* bad_alloc_vtable = nullptr;
  void (*bad_alloc_destructor)(void*) = nullptr;

  bool complete() const {
    return get_new_handler && allocate_exception && throw_exception && bad_alloc_type &&
           bad_alloc_vtable && bad_alloc_destructor;
  }
};

LateRuntime late_runtime;
pthread_once_t late_runtime_once = PTHREAD_ONCE_INIT;

template <class T>
void Find(void* library, const char* name, T& into) {
  into = reinterpret_cast<T>(dlsym(library, name));
}

void FindLateRuntime() {
  // RTLD_NOLOAD: only a runtime already in the process, never one loaded for this.
  void* library = dlopen("libstdc++.so.6", RTLD_NOLOAD | RTLD_LAZY);
  if (library == nullptr) return;
  Find(library, "_ZSt15get_new_handlerv", late_runtime.get_new_handler);
  Find(library, "__cxa_allocate_exception", late_runtime.allocate_exception);
  Find(library, "__cxa_throw", late_runtime.throw_exception);
  Find(library, "_ZTISt9bad_alloc", late_runtime.bad_alloc_type);
  Find(library, "_ZTVSt9bad_alloc", late_runtime.bad_alloc_vtable);
  Find(library, "_ZNSt9bad_allocD1Ev", late_runtime.bad_alloc_destructor);
  dlclose(library);  // the process holds it still: the pointers stay valid
}

const LateRuntime* FoundLateRuntime() {
  if (CxxRuntimeLoaded()) return nullptr;
  pthread_once(&late_runtime_once, FindLateRuntime);
  return late_runtime.complete() ? &late_runtime : nullptr;
}

std::new_handler NewHandler() {
  if (CxxRuntimeLoaded()) return std::get_new_handler();
  const LateRuntime* late = FoundLateRuntime();
  return late != nullptr ? late->get_new_handler() : nullptr;
}

// `throw std::bad_alloc()` spelled out for a runtime found by name: a std::bad_alloc is one
// pointer, to its vtable's functions (two words into the vtable, past the offset to the top and
// the type), thrown with its type and destructor (the Itanium C++ ABI, which libstdc++ follows).
[[noreturn]] void ThrowWithLateRuntime(const LateRuntime& late) {
  void* exception = late.allocate_exception(sizeof(std::bad_alloc));
  *static_cast<const void**>(exception) = late.bad_alloc_vtable + 2 * sizeof(void*);
  late.throw_exception(exception, late.bad_alloc_type, late.bad_alloc_destructor);
  abort();  // __cxa_throw does not return
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
    if (const LateRuntime* late = FoundLateRuntime()) ThrowWithLateRuntime(*late);
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
