// PoolAllocator<T>: a standard allocator whose single-object allocations come from pools, so
// the nodes of std::list, std::map, std::set, std::unordered_map (and the control block of
// std::allocate_shared) come from pools too.
//
// A container never allocates T: it rebinds the allocator to its node type and allocates one node
// at a time. So the state an allocator carries is a PoolSet, one BlockPool per node geometry (size
// and alignment), shared by every allocator copied or rebound from it; a rebound allocator finds
// its own pool in the set on its first allocation and keeps a pointer to it.
//
//   PoolAllocator<T> a;            a new, empty PoolSet of its own
//   PoolAllocator<U> b(a);         the same PoolSet (b == a)
//   std::map<K, V, std::less<K>, PoolAllocator<std::pair<const K, V>>> m(a);
//
// The set lives as long as any allocator that refers to it (shared ownership), so the memory of a
// container goes back when the container dies. Allocations of n != 1 objects (a vector's buffer,
// an unordered_map's bucket array) go to `operator new`.
//
// Allocator traits: copies compare equal, default-constructed allocators do not
// (is_always_equal is false); the allocator propagates on copy, move and swap, so a container's
// nodes always stay with the pools that made them. A moved-from allocator keeps its pools (moves
// copy), as the allocator requirements ask. Not thread-safe: a PoolSet belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "memory_pool.h"

namespace step02 {

template <class Checks = DefaultChecks>
class PoolSet {
 public:
  PoolSet() = default;
  PoolSet(const PoolSet&) = delete;
  PoolSet& operator=(const PoolSet&) = delete;

  // The pool for objects of this size and alignment, made on first use (may throw bad_alloc).
  BlockPool<Checks>& PoolFor(std::size_t size, std::size_t align) {
    if (BlockPool<Checks>* pool = Find(size, align)) return *pool;
    pools_.reserve(pools_.size() + 1);
    return *pools_.emplace_back(std::make_unique<BlockPool<Checks>>(
        size, align, BlockPool<Checks>::kFirstChunkBlocks, "PoolAllocator"));
  }
  BlockPool<Checks>* Find(std::size_t size, std::size_t align) const noexcept {
    const std::size_t block_size = BlockSizeFor(size, align);
    const std::size_t block_align = BlockAlignFor(align);
    for (const auto& pool : pools_) {
      if (pool->block_size() == block_size && pool->block_align() == block_align) return pool.get();
    }
    return nullptr;
  }
  std::size_t pool_count() const noexcept { return pools_.size(); }
  bool owns(const void* p) const noexcept {
    for (const auto& pool : pools_) {
      if (pool->owns(p)) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<BlockPool<Checks>>> pools_;
};

template <class T, class Checks = DefaultChecks>
class PoolAllocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;
  template <class U>
  struct rebind {
    using other = PoolAllocator<U, Checks>;
  };

  PoolAllocator() : pools_(std::make_shared<PoolSet<Checks>>()) {}
  explicit PoolAllocator(std::shared_ptr<PoolSet<Checks>> pools) noexcept
      : pools_(std::move(pools)) {}
  // Declared, so there is no implicit move constructor: moving copies and the source keeps its
  // pools.
  PoolAllocator(const PoolAllocator&) noexcept = default;
  PoolAllocator& operator=(const PoolAllocator&) noexcept = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U, Checks>& other) noexcept : pools_(other.pools_) {}

  T* allocate(std::size_t n) {
    if (n == 1) [[likely]] {
      if (pool_ == nullptr) [[unlikely]]
        pool_ = &pools_->PoolFor(sizeof(T), alignof(T));
      return static_cast<T*>(pool_->TakeBlock(sizeof(T)));
    }
    return AllocateArray(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1) [[likely]] {
      if (pool_ == nullptr) [[unlikely]]
        pool_ = FindPool(p);
      pool_->ReturnBlock(p);
      return;
    }
    DeallocateArray(p, n);
  }

  const std::shared_ptr<PoolSet<Checks>>& pools() const noexcept { return pools_; }

  template <class U>
  bool operator==(const PoolAllocator<U, Checks>& other) const noexcept {
    return pools_ == other.pools_;
  }

 private:
  template <class, class>
  friend class PoolAllocator;

  static constexpr bool kOverAligned = alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__;

  // Memory allocated by an equal allocator came from this set, so the pool exists.
  BlockPool<Checks>* FindPool(T* p) const noexcept {
    BlockPool<Checks>* pool = pools_->Find(sizeof(T), alignof(T));
    if (pool == nullptr)
      debug::Fail(kStepName, "PoolAllocator", "deallocate of a pointer not from these pools:", p);
    return pool;
  }
  static T* AllocateArray(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    if constexpr (kOverAligned) {
      return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  static void DeallocateArray(T* p, std::size_t) noexcept {
    if constexpr (kOverAligned) {
      ::operator delete (p, std::align_val_t{alignof(T)});
    } else {
      ::operator delete(p);
    }
  }

  std::shared_ptr<PoolSet<Checks>> pools_;
  BlockPool<Checks>* pool_ = nullptr;  // this T's pool in pools_, found on first use
};

}  // namespace step02
