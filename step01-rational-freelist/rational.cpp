#include "rational.h"

#include <algorithm>

namespace step01 {

NextOnFreeList* Rational::freeList = nullptr;

namespace {
// A block must hold a Rational while in use and a link while free.
constexpr std::size_t kBlockSize = std::max(sizeof(Rational), sizeof(NextOnFreeList));
static_assert(alignof(Rational) <= alignof(std::max_align_t), "new char[] aligns for max_align_t");

NextOnFreeList* newBlock() {
  return reinterpret_cast<NextOnFreeList*>(new char[kBlockSize]);
}

// Blocks come from `new char[]`, so they go back through `delete[]` as char: the published code
// deleted them as NextOnFreeList, which is undefined behaviour.
void deleteBlock(NextOnFreeList* block) noexcept {
  delete[] reinterpret_cast<char*>(block);
}
}  // namespace

void Rational::expandTheFreeList() {
  // Build the new blocks into a private chain first: if the global allocator throws half-way,
  // the blocks already taken go back and the list is as it was.
  NextOnFreeList* chain = nullptr;
  try {
    for (int i = 0; i < EXPANSION_SIZE; ++i) {
      NextOnFreeList* block = newBlock();
      block->next = chain;
      chain = block;
    }
  } catch (...) {
    while (chain != nullptr) {
      NextOnFreeList* next = chain->next;
      deleteBlock(chain);
      chain = next;
    }
    throw;
  }
  NextOnFreeList* tail = chain;
  while (tail->next != nullptr)
    tail = tail->next;
  tail->next = freeList;
  freeList = chain;
}

void Rational::deleteMemPool() noexcept {
  while (freeList != nullptr) {
    NextOnFreeList* next = freeList->next;
    deleteBlock(freeList);
    freeList = next;
  }
}

std::size_t Rational::freeListLength() noexcept {
  std::size_t length = 0;
  for (NextOnFreeList* block = freeList; block != nullptr; block = block->next)
    ++length;
  return length;
}

}  // namespace step01
