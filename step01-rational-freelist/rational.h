// Step 01: a class that manages its own memory.
//
// `Rational` keeps a static, intrusive free list of memory blocks the size of one Rational. `new`
// pops a block, `delete` pushes it back; only when the list is empty do we go to the global
// allocator, and then for EXPANSION_SIZE blocks at once. The design is the book's (Bulka & Mayhew,
// "Efficient C++", ch. 6); unlike the published code it frees its nodes through the type they were
// allocated with, takes each expansion as one contiguous chunk, leaves nothing behind in
// deleteMemPool(), sends a derived class of another size to the global operators, and treats
// `delete nullptr` as a no-op.
//
// Not thread-safe: one static list, no lock. That is step04's subject.
#pragma once

#include <cstddef>
#include <new>

namespace step01 {

// A free block, seen as a link. Free blocks and live Rationals share the same bytes: while a block
// is on the list its first pointer-sized bytes hold the link, once handed out they hold `n`/`d`.
struct NextOnFreeList {
  NextOnFreeList* next;
};

class Rational {
 public:
  enum { EXPANSION_SIZE = 32 };

  Rational(int numerator = 0, int denominator = 1) : n(numerator), d(denominator) {}

  int numerator() const { return n; }
  int denominator() const { return d; }

  // Defined here, not in rational.cpp, so a `new Rational` is inlined to a pop: the size test
  // folds away at compile time and the fast path is a handful of instructions.
  // [snippet:new-delete]
  static void* operator new(std::size_t size) {
    // A derived class with more members is bigger than our blocks: it must not get one.
    if (size != sizeof(Rational)) return ::operator new(size);
    if (freeList == nullptr) [[unlikely]]
      expandTheFreeList();
    NextOnFreeList* head = freeList;
    freeList = head->next;
    return head;
  }

  static void operator delete(void* doomed, std::size_t size) noexcept {
    if (doomed == nullptr) return;
    if (size != sizeof(Rational)) {
      // Unsized: clang before 19 declares no sized global delete without -fsized-deallocation,
      // and libstdc++'s sized one only calls this one.
      ::operator delete(doomed);
      return;
    }
    NextOnFreeList* head = static_cast<NextOnFreeList*>(doomed);
    head->next = freeList;
    freeList = head;
  }
  // [/snippet]

  // The book's pair: pre-fill the list, and give the memory back to the global allocator.
  // deleteMemPool() releases everything once every Rational is deleted and returns true; while
  // any Rational is alive it releases nothing and returns false.
  static void newMemPool() { expandTheFreeList(); }
  static bool deleteMemPool() noexcept;

  // Adds EXPANSION_SIZE blocks, taken from the global allocator in one piece. Throws
  // std::bad_alloc, leaving the list unchanged.
  static void expandTheFreeList();

  // How many blocks are free right now (walks the list: for tests and the chapter, not hot paths).
  static std::size_t freeListLength() noexcept;

 private:
  static NextOnFreeList* freeList;

  int n;  // numerator
  int d;  // denominator
};

}  // namespace step01
