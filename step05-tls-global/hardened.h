// Step 05's hardened mode: the checks of a pool whose Traits say kHardened (object_pool.h).
//
//   - double free, free of a pointer that is not from the pool or not the start of an object:
//     one "live" bit per slot, found through a directory of the pool's chunks (SlotDirectory);
//   - a write into a freed object: the freed slot is filled with kFreedByte, checked when it is
//     handed out again (a node of the list holds links instead: its fill is not checked);
//   - an address overwritten in a free slot: every address kept there is stored encoded with the
//     pool's secret key (LinkKey), and a decoded address that is no slot of the pool stops
//     FollowLink() (see below).
// A pool that is not hardened keeps an empty LinkKey and never calls the directory: it pays
// nothing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "memory_tools.h"
#include "tierpool_common/encoded_link.h"

namespace step05 {
namespace detail {

[[noreturn]] inline void Die(const char* what, const void* p, std::size_t object_size) {
  std::fprintf(stderr, "tierpool step05-tls-global: %s %p (ObjectPool of %zu-byte objects)\n", what,
               p, object_size);
  std::abort();
}

// --- The addresses kept in free slots, stored encoded ---------------------------------------
// A free slot holds the links and item addresses of its free list. A stray write into a freed
// object (a dangling pointer) that put a plausible address there would make the pool hand that
// address out. Encoded with this pool's secret key (the lists travel between threads, so the key
// is the pool's, not a list's), such a write decodes to an address that is no slot of this pool,
// and FollowLink() stops there.
template <bool kHardened>
struct LinkKey {  // a pool that is not hardened: every address stored as it is
  explicit LinkKey(const void*) noexcept {}
  template <class Slot>
  Slot* Encode(Slot* slot) const noexcept {
    return slot;
  }
  template <class Slot>
  Slot* Decode(Slot* stored) const noexcept {
    return stored;
  }
};

template <>
struct LinkKey<true> {
  explicit LinkKey(const void* pool) noexcept
      : key(tierpool_common::LinkKeyFor(pool, tierpool_common::ProcessLinkKey())) {}
  template <class Slot>
  Slot* Encode(Slot* slot) const noexcept {
    return reinterpret_cast<Slot*>(tierpool_common::EncodeLink(slot, key));
  }
  template <class Slot>
  Slot* Decode(Slot* stored) const noexcept {
    return static_cast<Slot*>(
        tierpool_common::DecodeLink(reinterpret_cast<std::uintptr_t>(stored), key));
  }

  tierpool_common::LinkKey key;
};

// --- The fill pattern of freed objects -------------------------------------------------------
// The hardened mode writes this over a freed object and checks it on reuse.
inline constexpr unsigned char kFreedByte = 0xDD;

// A free slot that held links and may become a mere item, which must carry the fill pattern.
template <class Slot>
void FillFreed(Slot* slot) noexcept {
  tools::OpenSlot(slot, sizeof(Slot));
  std::memset(static_cast<void*>(slot), kFreedByte, sizeof(Slot));
  tools::CloseSlot(slot, sizeof(Slot));
}

// --- One "live" bit per slot, found through a directory of chunks ---------------------------
template <std::size_t kObjectSize, std::size_t kSlotSize, std::size_t kChunkBytes>
class SlotDirectory {
 public:
  // A new chunk of the pool. False when out of memory.
  bool Remember(void* chunk) noexcept {
    constexpr std::size_t kWords = (kChunkBytes / kSlotSize + 63) / 64;
    try {
      ChunkRecord record{reinterpret_cast<std::uintptr_t>(chunk),
                         std::make_unique<std::atomic<std::uint64_t>[]>(kWords)};
      std::unique_lock<std::shared_mutex> lock(mutex_);
      records_.insert(
          std::upper_bound(records_.begin(), records_.end(), record.begin,
                           [](std::uintptr_t a, const ChunkRecord& r) { return a < r.begin; }),
          std::move(record));
      return true;
    } catch (const std::bad_alloc&) {
      return false;
    }
  }

  // A slot about to be handed out; filled: it was freed and holds the fill pattern (a free slot
  // that was only an item of a node must still hold it, every byte), not links or fresh memory.
  void HandingOut(void* slot, bool filled) noexcept {
    if (filled) {
      tools::OpenSlot(slot, kSlotSize);
      const unsigned char* bytes = static_cast<const unsigned char*>(slot);
      for (std::size_t i = 0; i < kSlotSize; ++i) {
        if (bytes[i] != kFreedByte) Die("use after free: written after free:", slot, kObjectSize);
      }
    }
    MarkLive(slot);
  }

  // A slot given back by the caller.
  void TakingBack(void* slot) noexcept {
    MarkFree(slot);
    std::memset(slot, kFreedByte, kSlotSize);
  }

  // An address read from the free slot `holder`, about to be followed.
  void CheckLink(const void* holder, const void* slot) const noexcept {
    if (slot != nullptr && !IsSlot(slot)) {
      Die("free list corrupted: an address overwritten in freed slot", holder, kObjectSize);
    }
  }

  void MarkLive(const void* slot) noexcept {
    auto [word, bit] = LiveBit(slot);
    if (word->fetch_or(bit, std::memory_order_relaxed) & bit) {
      Die("free list corrupted: handed out twice:", slot, kObjectSize);
    }
  }

 private:
  struct ChunkRecord {
    std::uintptr_t begin;
    std::unique_ptr<std::atomic<std::uint64_t>[]> live;  // one bit per slot of the chunk
  };

  void MarkFree(const void* slot) noexcept {
    auto [word, bit] = LiveBit(slot);
    if (!(word->fetch_and(~bit, std::memory_order_relaxed) & bit)) {
      Die("double free (or free of a never allocated slot) of", slot, kObjectSize);
    }
  }

  bool IsSlot(const void* slot) const noexcept {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const auto [chunk, offset] = ChunkOfLocked(slot);
    return chunk != nullptr && offset % kSlotSize == 0;
  }

  // Where `slot` lies: the chunk that holds it (nullptr if none) and its offset there. Caller
  // holds mutex_.
  std::pair<const ChunkRecord*, std::uintptr_t> ChunkOfLocked(const void* slot) const noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(slot);
    auto it = std::upper_bound(records_.begin(), records_.end(), address,
                               [](std::uintptr_t a, const ChunkRecord& r) { return a < r.begin; });
    if (it == records_.begin()) return {nullptr, 0};
    --it;
    const std::uintptr_t offset = address - it->begin;
    if (offset >= kChunkBytes) return {nullptr, 0};
    return {&*it, offset};
  }

  // The live bit of `slot`, or death if the pointer is not one this pool could have handed out.
  std::pair<std::atomic<std::uint64_t>*, std::uint64_t> LiveBit(const void* slot) noexcept {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const auto [chunk, offset] = ChunkOfLocked(slot);
    if (chunk == nullptr) Die("free of a pointer not from this pool:", slot, kObjectSize);
    if (offset % kSlotSize != 0) {
      Die("free of a pointer inside an object, not its start:", slot, kObjectSize);
    }
    const std::size_t index = offset / kSlotSize;
    return {&chunk->live[index / 64], std::uint64_t{1} << (index % 64)};
  }

  mutable std::shared_mutex mutex_;
  std::vector<ChunkRecord> records_;  // hardened mode only, sorted by begin
};

// A base of the ObjectPool (Pool, which derives from it; Traits its Traits): where the hardened
// mode and the memory tools look. Every address a free list keeps in a free slot is stored through
// EncodeLink() and read back through DecodeLink() (a prefetch) or FollowLink() (an address the
// pool is about to use, read from the free slot `holder`: checked in the hardened mode); every
// slot handed out goes through HandOut(), every one given back through TakeBack(), every chunk
// through MapChunk() and UnmapChunk(). It holds the pool's secret key (link_key_), and is the
// pool's valgrind mempool from the pool's birth to its death; the pool's directory_ is the pool's.
template <class Pool, class Traits>
class PoolChecks {
 public:
  template <class Slot>
  Slot* EncodeLink(Slot* slot) const noexcept {
    return link_key_.Encode(slot);
  }
  template <class Slot>
  Slot* DecodeLink(Slot* stored) const noexcept {
    return link_key_.Decode(stored);
  }
  template <class Slot>
  Slot* FollowLink([[maybe_unused]] const Slot* holder, Slot* stored) const noexcept {
    Slot* slot = DecodeLink(stored);
    if constexpr (Traits::kHardened) Self().directory_.CheckLink(holder, slot);
    return slot;
  }

 protected:
  PoolChecks() : link_key_(this) { tools::PoolCreated(this); }
  ~PoolChecks() { tools::PoolDestroyed(this); }

  // A slot becomes the caller's. filled: it was freed and holds the fill pattern (a node of a
  // list holds links instead, a slot carved from a Block holds nothing yet).
  template <class Slot>
  void* HandOut(Slot* slot, [[maybe_unused]] bool filled) noexcept {
    if constexpr (Traits::kHardened) Self().directory_.HandingOut(slot, filled);
    tools::OpenSlot(slot, sizeof(Slot));
    tools::HandOut(this, slot, sizeof(typename Pool::value_type));
    return slot;
  }

  // The caller gives a slot back.
  template <class Slot>
  void TakeBack(Slot* slot) noexcept {
    if constexpr (Traits::kHardened) Self().directory_.TakingBack(slot);
    tools::TakeBack(this, slot);
  }

  // A new chunk from Traits::MapChunk(), known to the hardened mode's directory and to the memory
  // tools; nullptr when out of memory (the OS's, or the directory's: the chunk goes back then).
  void* MapChunk() noexcept {
    constexpr std::size_t kBytes = sizeof(typename Pool::BlockChunk);
    void* chunk = Traits::MapChunk(kBytes);
    if (__builtin_expect(chunk == nullptr, 0)) return nullptr;
    if constexpr (Traits::kHardened) {
      if (!Self().directory_.Remember(chunk)) {
        Traits::UnmapChunk(chunk, kBytes);
        return nullptr;
      }
    }
    tools::ChunkMapped(chunk, kBytes);
    return chunk;
  }

  // A chunk goes back to the OS.
  void UnmapChunk(void* chunk) noexcept {
    tools::ChunkUnmapping(chunk, sizeof(typename Pool::BlockChunk));
    Traits::UnmapChunk(chunk, sizeof(typename Pool::BlockChunk));
  }

 private:
  const Pool& Self() const noexcept { return static_cast<const Pool&>(*this); }
  Pool& Self() noexcept { return static_cast<Pool&>(*this); }

  [[no_unique_address]] const LinkKey<Traits::kHardened> link_key_;
};

}  // namespace detail

// Hardened by default when built with -DTIERPOOL_HARDENED=1 (as step02's pools); any pool can
// also ask for it with a Traits whose kHardened is true.
#if TIERPOOL_HARDENED
inline constexpr bool kHardenedByDefault = true;
#else
inline constexpr bool kHardenedByDefault = false;
#endif

}  // namespace step05
