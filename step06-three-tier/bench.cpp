// Step 06 on the shared harness: the three-tier allocator on every workload where a general
// malloc is judged (W1 rational, W2 shuffle64, W3 mt512, W4 sizes, W5 xthread, and the
// large-block workload), beside glibc and every preloaded malloc, the in-process peers, and
// step 05's object pool where a fixed-size pool fits (W2, W5).
#include "tierpool/tierpool.h"
#include "tierpool_bench/peers.h"
#include "tierpool_bench/workload_large.h"

#if TIERPOOL_HAVE_STEP05
#include "object_pool.h"
#endif

namespace {

// The workloads know each block's size, so they free with the sized call, as C++ sized delete
// does: no page-map lookup.
struct TierpoolAllocator {
  void* Allocate(std::size_t bytes) { return tierpool::ConcurrentAlloc(bytes); }
  void Deallocate(void* p, std::size_t bytes) { tierpool::ConcurrentFree(p, bytes); }
  void EndRound() {}
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

#if TIERPOOL_HAVE_STEP05
  RegisterThreads<Shuffle64Workload, Step05ObjectPool>("step05-objectpool", {1, 2, 4, 8, 16});
  Register<XthreadWorkload, Step05ObjectPool>("step05-objectpool", 2);
#endif
  return true;
}();

}  // namespace
