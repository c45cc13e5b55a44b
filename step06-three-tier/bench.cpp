// Step 06 on the shared harness: the three-tier allocator on every workload where a general
// malloc is judged (W1 rational, W2 shuffle64, W3 mt512, W4 sizes, W5 xthread, the large-block
// workload, and the big-block patterns: realloc growth, a sparse calloc, memory given back after
// a peak; and the stress patterns of workload_stress.h), beside glibc and every preloaded malloc,
// the in-process peers, and step 05's object pool where a fixed-size pool fits (W2, W5).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "tierpool/tierpool.h"
#include "tierpool_bench/peers.h"
#include "tierpool_bench/workload_bigblock.h"
#include "tierpool_bench/workload_large.h"
#include "tierpool_bench/workload_stress.h"

#if TIERPOOL_HAVE_STEP05
#include "object_pool.h"
#endif

namespace {

// The workloads know each block's size, so they free with the sized call, as C++ sized delete
// does: no page-map lookup. The C++ API has no realloc or calloc: the big-block workloads get them
// from the C API (tierpool_realloc, tierpool_calloc), the same allocator.
struct TierpoolAllocator {
  void* Allocate(std::size_t bytes) { return tierpool::ConcurrentAlloc(bytes); }
  void Deallocate(void* p, std::size_t bytes) { tierpool::ConcurrentFree(p, bytes); }
  void EndRound() {}
  void* Reallocate(void* p, std::size_t, std::size_t new_bytes) {
    return tierpool_realloc(p, new_bytes);
  }
  void* AllocateZeroed(std::size_t bytes) { return tierpool_calloc(1, bytes); }
};

// The same with free(ptr) alone: the size comes from the page map, as for C's free().
struct TierpoolUnsizedAllocator {
  void* Allocate(std::size_t bytes) { return tierpool::ConcurrentAlloc(bytes); }
  void Deallocate(void* p, std::size_t) { tierpool::ConcurrentFree(p); }
  void EndRound() {}
};

// The unsized row in a process whose main thread has allocated and freed one block of W5's size
// class before the run, so that its cache keeps a block of that class (as the main thread of any
// real program will have: preloaded, the benchmark's own allocations do it). The block pins its
// span, and the spans the workload cycles through differ from a process where the class was
// never used outside the measured threads.
struct TierpoolMainBlockAllocator : TierpoolUnsizedAllocator {
  TierpoolMainBlockAllocator() {
    const std::size_t size = tierpool::bench::XthreadWorkload::kBlockSize;
    tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(size));
  }
};

#if defined(TIERPOOL_SHARED_LIBRARY)
// The C++ API of libtierpool.so, called as a program linked with the shared library calls it:
// each call an indirect jump through a table the dynamic loader filled (the PLT), where the rows
// above call the statically linked allocator directly. A preloaded malloc is called that way too,
// so this is the row the preloaded one must match (scripts/preload_vs_linked.py).
// dlopen with RTLD_LOCAL keeps the rest of the process on glibc's malloc, as for the other rows
// (a program linked with libtierpool.so would get it as its malloc too); preloaded, dlopen finds
// the library already loaded, and the row calls the very allocator that serves malloc.
struct SharedLibraryApi {
  void* (*allocate)(std::size_t) = nullptr;
  void (*free)(void*) = nullptr;
  void (*free_sized)(void*, std::size_t) = nullptr;
  void* (*reallocate)(void*, std::size_t) = nullptr;
  void* (*calloc)(std::size_t, std::size_t) = nullptr;
};

// The table the dynamic loader fills for a linked program (its GOT): filled once, by the first
// row's constructor.
SharedLibraryApi shared_api;

// The PLT: a linked program calls a stub of its own, directly, and the stub jumps on through the
// table. Each of these compiles to that one jump (`jmp *shared_api(%rip)`), so the rows call the
// library exactly as the preloaded row's harness calls malloc. noipa keeps GCC from cloning a
// stub per constant argument (a clone would load the argument itself: one instruction more).
#if defined(__clang__)
#define TIERPOOL_PLT_STUB [[gnu::noinline]]
#else
#define TIERPOOL_PLT_STUB [[gnu::noipa]]
#endif
TIERPOOL_PLT_STUB void* SharedAllocate(std::size_t bytes) {
  return shared_api.allocate(bytes);
}
TIERPOOL_PLT_STUB void SharedFree(void* p) {
  shared_api.free(p);
}
TIERPOOL_PLT_STUB void SharedFreeSized(void* p, std::size_t bytes) {
  shared_api.free_sized(p, bytes);
}
TIERPOOL_PLT_STUB void* SharedReallocate(void* p, std::size_t bytes) {
  return shared_api.reallocate(p, bytes);
}
TIERPOOL_PLT_STUB void* SharedCalloc(std::size_t n, std::size_t bytes) {
  return shared_api.calloc(n, bytes);
}

[[noreturn]] void SharedLibraryFailed(const char* error) {
  std::fprintf(stderr, "step06-tierpool-shared: %s\n", error);
  std::exit(1);
}

template <class Function>
Function SharedLibrarySymbol(void* library, const char* name) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) SharedLibraryFailed(dlerror());
  return reinterpret_cast<Function>(symbol);
}

void LoadSharedLibraryApi() {
  if (shared_api.allocate != nullptr) return;
  void* library = dlopen(TIERPOOL_SHARED_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) SharedLibraryFailed(dlerror());
  // The mangled names of tierpool::ConcurrentAlloc(size_t), ConcurrentFree(void*) and
  // ConcurrentFree(void*, size_t): what the dynamic linker binds a linked program's calls to.
  using Allocate = void* (*)(std::size_t);
  using Free = void (*)(void*);
  using FreeSized = void (*)(void*, std::size_t);
  shared_api.allocate = SharedLibrarySymbol<Allocate>(library, "_ZN8tierpool15ConcurrentAllocEm");
  shared_api.free = SharedLibrarySymbol<Free>(library, "_ZN8tierpool14ConcurrentFreeEPv");
  shared_api.free_sized =
      SharedLibrarySymbol<FreeSized>(library, "_ZN8tierpool14ConcurrentFreeEPvm");
  // realloc and calloc: the C API's (tierpool_realloc, tierpool_calloc), C names.
  using Reallocate = void* (*)(void*, std::size_t);
  using Calloc = void* (*)(std::size_t, std::size_t);
  shared_api.reallocate = SharedLibrarySymbol<Reallocate>(library, "tierpool_realloc");
  shared_api.calloc = SharedLibrarySymbol<Calloc>(library, "tierpool_calloc");
}

// Frees the way the program under the preloaded row frees: with the size for W1 (C++ sized
// delete), without it (free) for the other workloads.
template <bool kSized>
struct TierpoolSharedAllocator {
  TierpoolSharedAllocator() { LoadSharedLibraryApi(); }
  void* Allocate(std::size_t bytes) { return SharedAllocate(bytes); }
  void Deallocate(void* p, std::size_t bytes) {
    if constexpr (kSized) {
      SharedFreeSized(p, bytes);
    } else {
      SharedFree(p);
    }
  }
  void EndRound() {}
  void* Reallocate(void* p, std::size_t, std::size_t new_bytes) {
    return SharedReallocate(p, new_bytes);
  }
  void* AllocateZeroed(std::size_t bytes) { return SharedCalloc(1, bytes); }
};
#endif

#if TIERPOOL_HAVE_STEP05
struct Object64 {
  unsigned char bytes[64];
};
struct Step05ObjectPool {
  step05::ObjectPool<Object64> pool;
  void* Allocate(std::size_t) { return pool.Allocate(); }
  void Deallocate(void* p, std::size_t) { pool.Free(p); }
  void EndRound() {}
};
#endif

const bool registered = [] {
  using namespace tierpool::bench;
  constexpr const char* kName = "step06-tierpool";
  constexpr const char* kUnsized = "step06-tierpool-unsized";

  Register<RationalWorkload, AllocatorFactory<TierpoolAllocator>>(kName, 1);
  Register<RationalWorkload, AllocatorFactory<TierpoolUnsizedAllocator>>(kUnsized, 1);
  RegisterPeers<RationalWorkload>({1});

  RegisterThreads<SizesWorkload, TierpoolAllocator>(kName, {1, 2, 16});
  RegisterThreads<SizesWorkload, TierpoolUnsizedAllocator>(kUnsized, {1, 2});
  RegisterPeers<SizesWorkload>({1, 2, 16});

  Register<Mt512Workload, TierpoolAllocator>(kName, 4);
  RegisterPeers<Mt512Workload>({4});

  RegisterThreads<Shuffle64Workload, TierpoolAllocator>(kName, {1, 2, 4, 8, 16});
  RegisterPeers<Shuffle64Workload>({1, 2, 4, 8, 16}, kMallocPeers);

  Register<XthreadWorkload, TierpoolAllocator>(kName, 2);
  Register<XthreadWorkload, TierpoolUnsizedAllocator>(kUnsized, 2);
  Register<XthreadWorkload, TierpoolMainBlockAllocator>("step06-tierpool-main-block", 2);
  RegisterPeers<XthreadWorkload>({2});

  RegisterThreads<LargeWorkload, TierpoolAllocator>(kName, {1, 4});
  RegisterPeers<LargeWorkload>({1, 4}, kMallocPeers);

  // The big-block patterns: one thread, one run in a fresh process each. The malloc rows only:
  // the baseline has no realloc or calloc (RegisterPeers leaves it out).
  Register<GrowWorkload, TierpoolAllocator>(kName, 1);
  RegisterPeers<GrowWorkload>({1}, kMallocPeers);
  Register<CallocSparseWorkload, TierpoolAllocator>(kName, 1);
  RegisterPeers<CallocSparseWorkload>({1}, kMallocPeers);
  Register<Release64kWorkload, TierpoolAllocator>(kName, 1);
  RegisterPeers<Release64kWorkload>({1}, kMallocPeers);
  Register<Release1mWorkload, TierpoolAllocator>(kName, 1);
  RegisterPeers<Release1mWorkload>({1}, kMallocPeers);

  // The stress patterns of real programs (workload_stress.h): the malloc rows and step 06's.
  RegisterStressWorkloads<TierpoolAllocator>(kName);
  RegisterStressPeers();

#if defined(TIERPOOL_SHARED_LIBRARY)
  constexpr const char* kShared = "step06-tierpool-shared";
  using Sized = TierpoolSharedAllocator<true>;
  using Unsized = TierpoolSharedAllocator<false>;
  Register<RationalWorkload, AllocatorFactory<Sized>>(kShared, 1);
  RegisterThreads<SizesWorkload, Unsized>(kShared, {1, 2, 16});
  Register<Mt512Workload, Unsized>(kShared, 4);
  RegisterThreads<Shuffle64Workload, Unsized>(kShared, {1, 2, 4, 8, 16});
  Register<XthreadWorkload, Unsized>(kShared, 2);
  RegisterThreads<LargeWorkload, Unsized>(kShared, {1, 4});
  Register<GrowWorkload, Unsized>(kShared, 1);
  Register<CallocSparseWorkload, Unsized>(kShared, 1);
  Register<Release64kWorkload, Unsized>(kShared, 1);
  Register<Release1mWorkload, Unsized>(kShared, 1);
  RegisterStressWorkloads<Unsized>(kShared);
#endif

#if TIERPOOL_HAVE_STEP05
  RegisterThreads<Shuffle64Workload, Step05ObjectPool>("step05-objectpool", {1, 2, 4, 8, 16});
  Register<XthreadWorkload, Step05ObjectPool>("step05-objectpool", 2);
#endif
  return true;
}();

}  // namespace
