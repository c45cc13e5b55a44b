// Every global operator new and delete of C++20 (plain, array, nothrow, aligned, sized, and their
// combinations), forwarded to the allocator with the rules of dropin.h. Linked into libtierpool.so
// and libtierpool.a beside malloc_shim.cpp, so `new` and `malloc` share one heap.
#include <cstddef>
#include <new>

#include "dropin.h"

namespace dropin = tierpool::dropin;

#define TIERPOOL_OPERATOR __attribute__((visibility("default")))

using std::align_val_t;
using std::nothrow_t;
using std::size_t;

TIERPOOL_OPERATOR void* operator new(size_t size) {
  return dropin::OperatorNew(size);
}
TIERPOOL_OPERATOR void* operator new[](size_t size) {
  return dropin::OperatorNew(size);
}
TIERPOOL_OPERATOR void* operator new(size_t size, const nothrow_t&) noexcept {
  return dropin::OperatorNewNothrow(size);
}
TIERPOOL_OPERATOR void* operator new[](size_t size, const nothrow_t&) noexcept {
  return dropin::OperatorNewNothrow(size);
}
TIERPOOL_OPERATOR void* operator new(size_t size, align_val_t alignment) {
  return dropin::OperatorNewAligned(size, static_cast<size_t>(alignment));
}
TIERPOOL_OPERATOR void* operator new[](size_t size, align_val_t alignment) {
  return dropin::OperatorNewAligned(size, static_cast<size_t>(alignment));
}
TIERPOOL_OPERATOR void* operator new(size_t size, align_val_t alignment,
                                     const nothrow_t&) noexcept {
  return dropin::OperatorNewAlignedNothrow(size, static_cast<size_t>(alignment));
}
TIERPOOL_OPERATOR void* operator new[](size_t size, align_val_t alignment,
                                       const nothrow_t&) noexcept {
  return dropin::OperatorNewAlignedNothrow(size, static_cast<size_t>(alignment));
}

TIERPOOL_OPERATOR void operator delete(void* ptr) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete[](void* ptr) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete(void* ptr, const nothrow_t&) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete[](void* ptr, const nothrow_t&) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete(void* ptr, size_t size) noexcept {
  dropin::OperatorDeleteSized(ptr, size);
}
TIERPOOL_OPERATOR void operator delete[](void* ptr, size_t size) noexcept {
  dropin::OperatorDeleteSized(ptr, size);
}
// Aligned blocks are freed without the size: their class depends on the alignment too, and the
// page map finds it either way.
TIERPOOL_OPERATOR void operator delete(void* ptr, align_val_t) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete[](void* ptr, align_val_t) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete(void* ptr, align_val_t, const nothrow_t&) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete[](void* ptr, align_val_t, const nothrow_t&) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete(void* ptr, size_t, align_val_t) noexcept {
  dropin::OperatorDelete(ptr);
}
TIERPOOL_OPERATOR void operator delete[](void* ptr, size_t, align_val_t) noexcept {
  dropin::OperatorDelete(ptr);
}
