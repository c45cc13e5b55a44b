#include "pooled_rational.h"

namespace step02 {

book::MemoryPool<BookRational>* BookRational::memPool = nullptr;

void* BookRational::operator new(std::size_t size) {
  // A derived class with more members is bigger than the pool's elements: it must not get one.
  if (size != sizeof(BookRational)) return ::operator new(size);
  if (memPool == nullptr) newMemPool();
  return memPool->alloc(size);
}

void BookRational::operator delete(void* doomed, std::size_t size) noexcept {
  if (doomed == nullptr) return;
  if (size != sizeof(BookRational)) return ::operator delete(doomed);
  memPool->free(doomed);
}

void BookRational::newMemPool() {
  if (memPool == nullptr) memPool = new book::MemoryPool<BookRational>(64);
}

void BookRational::deleteMemPool() noexcept {
  delete memPool;
  memPool = nullptr;
}

// Constant-initialized (MemoryPool's constructor is constexpr; the hardened ledger is not, so
// with TIERPOOL_HARDENED=1 it is initialized at start-up like any other static): ready before any
// static constructor of another file can create a Rational.
MemoryPool<Rational> Rational::memPool;

}  // namespace step02
