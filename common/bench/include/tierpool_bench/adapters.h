// The allocators every workload is measured with, whatever the step:
//   - MallocAllocator: the process's malloc/free. The runner re-runs these rows with jemalloc,
//     tcmalloc, mimalloc and tbbmalloc preloaded and names each row after the library that really
//     served malloc (see main.cpp, MallocProvider()).
//   - BaselineAllocator: a per-thread bump pointer that never reuses memory and is reset at the
//     end of every round. It costs almost nothing, so its row is the harness itself (loops, writes,
//     shuffles): subtract it to see what an allocator costs.
//
// The allocator interface the workloads use:
//   void* Allocate(std::size_t bytes);
//   void  Deallocate(void* p, std::size_t bytes);
//   void  EndRound();        // called by each thread after it freed everything of a round
// and, for the big-block workloads only (workload_bigblock.h), what every malloc has beside them:
//   void* Reallocate(void* p, std::size_t old_bytes, std::size_t new_bytes);   // realloc
//   void* AllocateZeroed(std::size_t bytes);                                    // calloc
// An allocator without these two is not registered on those workloads (RegisterPeers).
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace tierpool::bench {

struct MallocAllocator {
  void* Allocate(std::size_t bytes) { return std::malloc(bytes); }
  void Deallocate(void* p, std::size_t) { std::free(p); }
  void EndRound() {}
  void* Reallocate(void* p, std::size_t, std::size_t new_bytes) {
    return std::realloc(p, new_bytes);
  }
  void* AllocateZeroed(std::size_t bytes) { return std::calloc(1, bytes); }
};

class BaselineAllocator {
 public:
  BaselineAllocator() = default;
  BaselineAllocator(const BaselineAllocator&) = delete;
  BaselineAllocator& operator=(const BaselineAllocator&) = delete;
  ~BaselineAllocator() {
    for (char* arena : arenas_)
      munmap(arena, kArenaBytes);
  }

  void* Allocate(std::size_t bytes) {
    Cursor& cursor = cursor_;
    if (cursor.owner_id != id_) [[unlikely]]
      Attach(cursor);
    char* p = cursor.next;
    cursor.next += (bytes + 15) & ~std::size_t{15};
    if (cursor.next > cursor.end) [[unlikely]]
      Overflow();
    return p;
  }
  void Deallocate(void*, std::size_t) {}
  void EndRound() {
    if (cursor_.owner_id == id_) cursor_.next = cursor_.begin;
  }

 private:
  // Reserved, not committed: only the pages a round touches become resident.
  static constexpr std::size_t kArenaBytes = std::size_t{1} << 30;

  // Plain data, so reaching it costs one %fs-relative load: no TLS guard on the fast path.
  struct Cursor {
    std::uint64_t owner_id;
    char* begin;
    char* next;
    char* end;
  };
  static inline thread_local Cursor cursor_{};
  static inline std::atomic<std::uint64_t> next_id_{1};

  void Attach(Cursor& cursor) {
    void* p = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      arenas_.push_back(static_cast<char*>(p));
    }
    cursor = Cursor{id_, static_cast<char*>(p), static_cast<char*>(p),
                    static_cast<char*>(p) + kArenaBytes};
  }
  [[noreturn]] static void Overflow() {
    std::fprintf(stderr, "baseline: one round needs more than %zu bytes\n", kArenaBytes);
    std::abort();
  }

  // An id, not `this`: a new allocator at a dead one's address must not reuse its cursor.
  const std::uint64_t id_ = next_id_.fetch_add(1);
  std::mutex mutex_;
  std::vector<char*> arenas_;  // one per thread that allocated; unmapped when the allocator dies
};

// W1 creates objects, not bytes: a "factory" has
//   Object* New(int i);  void Delete(Object* p);  void EndRound();
// The article's Rational: two ints, 8 bytes.
struct PlainRational {
  explicit PlainRational(int numerator = 0, int denominator = 1) : n(numerator), d(denominator) {}
  int n;
  int d;
};

// `new`/`delete` through the global operators: the article's baseline program, and so malloc.
struct GlobalNewFactory {
  using Object = PlainRational;
  Object* New(int i) { return new PlainRational(i); }
  void Delete(Object* p) { delete p; }
  void EndRound() {}
};

// Any byte allocator used as a W1 factory: placement new into its memory.
template <class Alloc>
struct AllocatorFactory {
  using Object = PlainRational;
  Alloc alloc;
  Object* New(int i) { return ::new (alloc.Allocate(sizeof(Object))) PlainRational(i); }
  void Delete(Object* p) {
    p->~Object();
    alloc.Deallocate(p, sizeof(Object));
  }
  void EndRound() { alloc.EndRound(); }
};

}  // namespace tierpool::bench
