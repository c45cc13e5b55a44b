// Step 03's pools as std::pmr::memory_resource, so they drop into std::pmr code:
//
//   step03::ArenaResource arena;
//   std::pmr::vector<std::pmr::string> names(&arena);   // vector buffer and strings in the arena
//
// The resource owns its pool; pool() reaches the pool's own interface (reset(), release()).
// Two resources are equal only if they are the same object: memory from one pool cannot be
// freed by another.
#pragma once

#include <cstddef>
#include <memory_resource>
#include <utility>

#include "byte_memory_pool.h"
#include "size_class_pool.h"

namespace step03 {

template <class Pool>
class PoolResource : public std::pmr::memory_resource {
 public:
  template <class... Args>
  explicit PoolResource(Args&&... args) : pool_(std::forward<Args>(args)...) {}

  Pool& pool() noexcept { return pool_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    return pool_.alloc(bytes, align);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    pool_.free(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  Pool pool_;
};

using ArenaResource = PoolResource<ByteMemoryPool<>>;
using SizeClassResource = PoolResource<SizeClassPool<>>;

}  // namespace step03
