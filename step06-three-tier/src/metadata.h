// Where the allocator's own objects live: spans, thread caches. Never malloc (the allocator will
// be malloc), never the user heap (a user overflow must not reach the bookkeeping): a bump
// arena over chunks mapped from the OS, with one free list per object type for reuse.
#pragma once

#include <atomic>
#include <cstddef>
#include <new>

#include "config.h"
#include "spinlock.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

// The raw arena. Chunks are 1 MiB at least and never unmapped (metadata is tiny next to the
// memory it describes); the arena's lock is taken after any other allocator lock.
class MetadataArena {
 public:
  // `bytes` rounded to 64 (a cache line, so objects of different threads never share one);
  // nullptr when the OS refuses.
  void* Allocate(std::size_t bytes);
  std::size_t MappedBytes() const { return mapped_.load(std::memory_order_relaxed); }
  SpinLock& lock() { return lock_; }

 private:
  SpinLock lock_;
  char* next_ = nullptr;
  char* end_ = nullptr;
  std::atomic<std::size_t> mapped_{0};
};

MetadataArena& Metadata();

// A free list of fixed-size T over the arena. T is constructed with placement new and
// destroyed before its memory is reused; Delete never returns memory to the OS.
template <class T>
class FixedPool {
 public:
  template <class... Args>
  T* New(Args&&... args) {
    void* memory = nullptr;
    {
      SpinLockHolder hold(lock_);
      if (free_ != nullptr) {
        memory = free_;
        free_ = free_->next;
      }
    }
    if (memory == nullptr) memory = Metadata().Allocate(sizeof(T));
    if (memory == nullptr) return nullptr;
    live_.fetch_add(1, std::memory_order_relaxed);
    return ::new (memory) T(static_cast<Args&&>(args)...);
  }
  void Delete(T* object) {
    object->~T();
    auto* node = reinterpret_cast<FreeNode*>(object);
    live_.fetch_sub(1, std::memory_order_relaxed);
    SpinLockHolder hold(lock_);
    node->next = free_;
    free_ = node;
  }
  std::size_t Live() const { return live_.load(std::memory_order_relaxed); }
  SpinLock& lock() { return lock_; }

 private:
  struct FreeNode {
    FreeNode* next;
  };
  static_assert(sizeof(T) >= sizeof(FreeNode));
  SpinLock lock_;
  FreeNode* free_ = nullptr;
  std::atomic<std::size_t> live_{0};
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
