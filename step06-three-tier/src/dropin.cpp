// The parts of the drop-in rules that throw, kept out of malloc_shim.cpp and new_delete.cpp so
// those can be built without exceptions (see dropin.h).
#include "dropin.h"

namespace tierpool::dropin {

void* RetryNew(std::size_t request, std::size_t alignment, bool nothrow) {
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) {
      if (nothrow) return nullptr;
      throw std::bad_alloc();
    }
    if (nothrow) {
      try {
        handler();
      } catch (...) {
        return nullptr;
      }
    } else {
      handler();
    }
    void* block = alignment == 0 ? impl::Allocate(request) : AlignedAllocate(alignment, request);
    if (block != nullptr) return block;
  }
}

void* NewSlow(std::size_t request, bool nothrow) {
  if (void* block = impl::Allocate(request)) return block;
  return RetryNew(request, 0, nothrow);
}

void ThrowBadAlloc() {
  throw std::bad_alloc();
}

}  // namespace tierpool::dropin
