// Step 02's Rationals: step 01's class, with its memory management handed to a pool.
//
//   BookRational   the book's version 2: a static pointer to a book::MemoryPool<BookRational>,
//                  operator new/delete defined out of line in pooled_rational.cpp, as the book does
//   Rational       the same class over MemoryPool<Rational> (aligned, chunked): the pool is a
//                  static object, not a pointer, and the operators are inline
//
// Both send a derived class of another size to the global operators and treat `delete nullptr`
// as a no-op, like step 01. Not thread-safe.
#pragma once

#include <cstddef>
#include <new>

#include "book_memory_pool.h"
#include "memory_pool.h"

namespace step02 {

class BookRational {
 public:
  BookRational(int numerator = 0, int denominator = 1) : n(numerator), d(denominator) {}

  int numerator() const { return n; }
  int denominator() const { return d; }

  static void* operator new(std::size_t size);
  static void operator delete(void* doomed, std::size_t size) noexcept;

  // The book's pair. newMemPool() is also called by the first `new` if nobody did; call
  // deleteMemPool() only once every BookRational is deleted.
  static void newMemPool();
  static void deleteMemPool() noexcept;

 private:
  static book::MemoryPool<BookRational>* memPool;

  int n;  // numerator
  int d;  // denominator
};

class Rational {
 public:
  Rational(int numerator = 0, int denominator = 1) : n(numerator), d(denominator) {}

  int numerator() const { return n; }
  int denominator() const { return d; }

  static void* operator new(std::size_t size) {
    if (size != sizeof(Rational)) return ::operator new(size);
    return memPool.alloc(size);
  }
  static void operator delete(void* doomed, std::size_t size) noexcept {
    if (size != sizeof(Rational)) return ::operator delete(doomed);
    memPool.free(doomed);  // free(nullptr) is a no-op
  }

  // The pool, for tests and the chapter. Its chunks go back when the program ends.
  static const MemoryPool<Rational>& pool() noexcept { return memPool; }

 private:
  static MemoryPool<Rational> memPool;

  int n;  // numerator
  int d;  // denominator
};

}  // namespace step02
