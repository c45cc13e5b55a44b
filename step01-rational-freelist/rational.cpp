#include "rational.h"

#include <algorithm>

namespace step01 {

NextOnFreeList* Rational::freeList = nullptr;

namespace {
// A block must hold a Rational while in use and a link while free.
constexpr std::size_t kBlockSize = std::max(sizeof(Rational), sizeof(NextOnFreeList));
static_assert(alignof(Rational) <= alignof(std::max_align_t), "new char[] aligns for max_align_t");

// One expansion is one `new char[]`: a header that links the chunks (so deleteMemPool can find
// them) followed by EXPANSION_SIZE blocks side by side. The book took one `new char[]` per block;
// on glibc each of those is a 32-byte chunk, so 5000 Rationals were spread over 160 KiB instead of
// 40 KiB, and `new` - a chain of dependent loads through the list - waited on L2 instead of L1.
struct Chunk {
  alignas(std::max_align_t) Chunk* next;
};
constexpr std::size_t kChunkBytes = sizeof(Chunk) + Rational::EXPANSION_SIZE * kBlockSize;

Chunk* chunks = nullptr;  // every chunk ever taken, newest first
std::size_t chunkCount = 0;

char* blocksOf(Chunk* chunk) {
  return reinterpret_cast<char*>(chunk) + sizeof(Chunk);
}
}  // namespace

// [snippet:expand]
void Rational::expandTheFreeList() {
  // `new` throws std::bad_alloc before anything changed, so a failed expansion leaves the pool as
  // it was.
  Chunk* chunk = reinterpret_cast<Chunk*>(new char[kChunkBytes]);
  chunk->next = chunks;
  chunks = chunk;
  ++chunkCount;
  // Thread the new blocks in address order, so a run of `new` walks memory forwards.
  char* blocks = blocksOf(chunk);
  for (int i = EXPANSION_SIZE - 1; i >= 0; --i) {
    NextOnFreeList* block = reinterpret_cast<NextOnFreeList*>(blocks + i * kBlockSize);
    block->next = freeList;
    freeList = block;
  }
}
// [/snippet]

bool Rational::deleteMemPool() noexcept {
  // A chunk can only go back whole. If a Rational is still alive its chunk is in use: give
  // nothing back rather than leave it dangling (the memory is released by a later call).
  if (freeListLength() != chunkCount * EXPANSION_SIZE) return false;
  while (chunks != nullptr) {
    Chunk* next = chunks->next;
    // Allocated as char[], so freed as char[]: the published code deleted its blocks through
    // the wrong type, which is undefined behaviour.
    delete[] reinterpret_cast<char*>(chunks);
    chunks = next;
  }
  chunkCount = 0;
  freeList = nullptr;
  return true;
}

std::size_t Rational::freeListLength() noexcept {
  std::size_t length = 0;
  for (NextOnFreeList* block = freeList; block != nullptr; block = block->next)
    ++length;
  return length;
}

}  // namespace step01
