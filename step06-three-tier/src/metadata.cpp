#include "metadata.h"

#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

namespace {
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
// Constant-initialized (constexpr constructors only): usable before any constructor has run.
constinit MetadataArena arena;
}  // namespace

MetadataArena& Metadata() {
  return arena;
}

void* MetadataArena::Allocate(std::size_t bytes) {
  bytes = (bytes + 63) & ~std::size_t{63};
  SpinLockHolder hold(lock_);
  if (static_cast<std::size_t>(end_ - next_) < bytes) {
    // The tail of the old chunk is abandoned: it is smaller than one object.
    const std::size_t chunk =
        bytes > kChunkBytes ? (bytes + kChunkBytes - 1) & ~(kChunkBytes - 1) : kChunkBytes;
    void* memory = OsMap(chunk, 4096);
    if (memory == nullptr) return nullptr;
    next_ = static_cast<char*>(memory);
    end_ = next_ + chunk;
    mapped_.fetch_add(chunk, std::memory_order_relaxed);
  }
  void* result = next_;
  next_ += bytes;
  return result;
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
