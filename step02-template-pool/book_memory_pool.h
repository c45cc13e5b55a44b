// The book's version 2 ("Efficient C++", ch. 6; article 001's recipe-02): step 01's free list
// translated into a template. Kept as the book wrote it, names included, so the benchmark can set
// it beside step 01 and beside the pool of memory_pool.h; corrected only where it was wrong:
//   - each expansion links exactly `howMany` blocks (the book made one more) and links each block
//     as soon as it exists, so an allocation failure half-way loses nothing;
//   - a request larger than an element throws instead of getting a short block;
//   - free(nullptr) is a no-op.
// What it still does, on purpose: one `new char[]` per element, no alignment beyond what
// `new char[]` gives, and a destructor that frees only the elements on the free list (delete
// every object before the pool).
#pragma once

#include <algorithm>
#include <cstddef>
#include <new>

namespace step02::book {

template <class T>
class MemoryPool {
 public:
  explicit MemoryPool(std::size_t size = EXPANSION_SIZE) { expandTheFreeList(int(size)); }
  virtual ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  inline void* alloc(std::size_t size);
  inline void free(void* someElement);

 private:
  struct MemoryChunk {
    MemoryChunk* next;
  };
  static constexpr std::size_t kElementSize = std::max(sizeof(T), sizeof(MemoryChunk));
  static_assert(alignof(T) <= alignof(std::max_align_t), "new char[] aligns for max_align_t only");

  MemoryChunk* freeList = nullptr;
  enum { EXPANSION_SIZE = 32 };
  void expandTheFreeList(int howMany = EXPANSION_SIZE);
};

template <class T>
MemoryPool<T>::~MemoryPool() {
  while (freeList != nullptr) {
    MemoryChunk* next = freeList->next;
    delete[] reinterpret_cast<char*>(freeList);
    freeList = next;
  }
}

// [snippet:book-v2]
template <class T>
inline void* MemoryPool<T>::alloc(std::size_t size) {
  if (size > kElementSize) throw std::bad_alloc();
  if (!freeList) {
    expandTheFreeList();
  }
  MemoryChunk* head = freeList;
  freeList = head->next;
  return head;
}

template <class T>
inline void MemoryPool<T>::free(void* doomed) {
  if (doomed == nullptr) return;
  MemoryChunk* head = static_cast<MemoryChunk*>(doomed);
  head->next = freeList;
  freeList = head;
}

template <class T>
void MemoryPool<T>::expandTheFreeList(int howMany) {
  for (int i = 0; i < howMany; ++i) {
    MemoryChunk* element = reinterpret_cast<MemoryChunk*>(new char[kElementSize]);
    element->next = freeList;
    freeList = element;
  }
}

// [/snippet]
}  // namespace step02::book
