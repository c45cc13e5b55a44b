// The pools this step measures, behind each lock policy, with the allocator interface of the shared
// benchmark: step02's MemoryPool<T> of one block size, and step03's SizeClassPool (any size). Step
// 05's benchmark includes this header too, to set its thread-local pool beside the best of these on
// the same run.
#pragma once

#include <cstddef>

#include "memory_pool.h"  // step02
#include "mt_memory_pool.h"
#include "size_class_pool.h"  // step03

namespace step04 {

template <std::size_t kSize>
struct Bytes {
  alignas(16) unsigned char bytes[kSize];
};

template <std::size_t kSize, class Lock, class Checks = step02::DefaultChecks>
using LockedMemoryPool = MTMemoryPool<step02::MemoryPool<Bytes<kSize>, 0, Checks>, Lock>;

template <std::size_t kSize, class Lock, class Checks = step02::DefaultChecks>
struct LockedPoolAllocator {
  LockedMemoryPool<kSize, Lock, Checks> pool;
  void* Allocate(std::size_t bytes) { return pool.alloc(bytes); }
  void Deallocate(void* p, std::size_t) { pool.free(p); }
  void EndRound() {}
};

template <class Lock>
struct LockedSizeClassAllocator {
  MTMemoryPool<step03::SizeClassPool<>, Lock> pool;
  void* Allocate(std::size_t bytes) { return pool.alloc(bytes); }
  void Deallocate(void* p, std::size_t) { pool.free(p); }
  void EndRound() {}
};

}  // namespace step04
