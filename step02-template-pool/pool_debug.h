// What a pool tells the memory tools, and what it checks itself in hardened mode.
//
// A pool hands out pieces of bigger blocks it got from `operator new`. To ASan and valgrind those
// big blocks are live the whole time, so a use-after-free inside the pool, or a double free, is
// invisible to them unless the pool says which pieces are in use:
//   - ASan (builds with TIERPOOL_ASAN=1): free and not-yet-handed-out memory is poisoned
//     (ASAN_POISON_MEMORY_REGION); a block is unpoisoned, exactly its requested size, when handed
//     out.
//   - valgrind memcheck: every pool is a valgrind "mempool" (VALGRIND_CREATE_MEMPOOL), each block
//     handed out is VALGRIND_MEMPOOL_ALLOC'd and each block freed VALGRIND_MEMPOOL_FREE'd. The pool
//     asks once whether it runs under memcheck, so anywhere else this costs one predictable
//     branch.
//   - Hardened mode (the `Hardened` policy, or every pool when TIERPOOL_HARDENED=1): a ledger of
//     live blocks catches double free, a pointer that is not from this pool and (for pools that get
//     a size back) a free with the wrong size; freed blocks are filled with kFreedByte and checked
//     when they are handed out again; free-list links are stored encoded with a per-list secret
//     key (common/include/tierpool_common/encoded_link.h) and checked when decoded. Any of these
//     aborts with a message naming the step, the pool and the pointer.
//
// Step 03's pools use this header too.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <unordered_map>

#include "tierpool_common/encoded_link.h"

#if TIERPOOL_ASAN
#include <sanitizer/asan_interface.h>
#endif

#ifndef TIERPOOL_VALGRIND
#if __has_include(<valgrind/memcheck.h>)
#define TIERPOOL_VALGRIND 1
#else
#define TIERPOOL_VALGRIND 0
#endif
#endif
#if TIERPOOL_VALGRIND
#include <valgrind/memcheck.h>
#endif

namespace step02 {

// Check policies: a pool's last template parameter.
struct Fast {
  static constexpr bool kHardened = false;
};
struct Hardened {
  static constexpr bool kHardened = true;
};
#if TIERPOOL_HARDENED
using DefaultChecks = Hardened;
#else
using DefaultChecks = Fast;
#endif

namespace debug {

#if TIERPOOL_ASAN
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif

// The byte a hardened pool fills freed blocks with (after the link).
inline constexpr unsigned char kFreedByte = 0xDD;

// Whether [p, p + n) still holds kFreedByte everywhere: memcmp against a filled line, so a
// 4 KiB block costs a few vector compares, not 4096 byte tests.
inline bool StillFilled(const unsigned char* p, std::size_t n) noexcept {
  static constexpr std::array<unsigned char, 256> kLine = [] {
    std::array<unsigned char, 256> line{};
    line.fill(kFreedByte);
    return line;
  }();
  while (n > 0) {
    const std::size_t k = n < kLine.size() ? n : kLine.size();
    if (std::memcmp(p, kLine.data(), k) != 0) return false;
    p += k;
    n -= k;
  }
  return true;
}

[[noreturn]] inline void Fail(const char* step, const char* pool, const char* what, const void* p) {
  std::fprintf(stderr, "tierpool %s: %s: %s %p\n", step, pool, what, p);
  std::fflush(stderr);
  std::abort();
}

// The bookkeeping one pool shares with the tools. `Checks` decides whether the hardened ledger
// exists at all. A Fast pool outside ASan builds and outside memcheck never calls into it but to
// ask watched().
template <class Checks>
class BlockTracker {
 public:
  constexpr BlockTracker(const char* step, const char* pool) noexcept : step_(step), pool_(pool) {}
  BlockTracker(const BlockTracker&) = delete;
  BlockTracker& operator=(const BlockTracker&) = delete;
  ~BlockTracker() { Stop(); }

  // Called when the pool gets its first memory (not in a constructor, so pools can be
  // constant-initialized statics). `id` names the pool to valgrind.
  void Start(const void* id) noexcept {
    if (started_) return;
    started_ = true;
    id_ = id;
#if TIERPOOL_VALGRIND
    // Only memcheck understands these requests; under callgrind they would be pure cost (and
    // distort its instruction counts). Memcheck answers a MAKE_MEM request with -1, other tools
    // with the default 0.
    char probe = 0;
    on_memcheck_ = RUNNING_ON_VALGRIND != 0 && long(VALGRIND_MAKE_MEM_DEFINED(&probe, 1)) == -1;
    if (on_memcheck_) VALGRIND_CREATE_MEMPOOL(id_, 0, 0);
#endif
  }
  // Whether blocks must go through HandOut/TakeBack and the free list's watched operations. A
  // pool tests this once per call and otherwise runs the book's code untouched.
  bool watched() const noexcept {
    return Checks::kHardened || kAsan || on_memcheck_;
  }

  // Forgets every block: the pool is about to give its memory back in bulk (then Disown it).
  void Stop() noexcept {
    if (!started_) return;
    started_ = false;
#if TIERPOOL_VALGRIND
    if (on_memcheck_) VALGRIND_DESTROY_MEMPOOL(id_);
#endif
    if constexpr (Checks::kHardened) live_.clear();
  }

  // Memory nobody may touch (free, or not handed out yet): ASan-poisoned, valgrind no-access.
  void Seal(const void* p, std::size_t n) const noexcept {
    SetAccess(p, n, Access::kNone);
  }
  // Memory the pool itself is about to read or write (a link, the fill pattern).
  void Open(const void* p, std::size_t n) const noexcept {
    SetAccess(p, n, Access::kDefined);
  }
  // `p` (size `n`) leaves the pool: to `operator delete`, or back to a caller's buffer, which
  // must find it neither poisoned nor marked no-access.
  void Disown(const void* p, std::size_t n) const noexcept {
    SetAccess(p, n, Access::kUndefined);
  }

  // A block of `block` bytes at `p` is handed out for a request of `bytes`.
  void HandOut(void* p, std::size_t bytes, std::size_t block) {
    if constexpr (Checks::kHardened) {
      if (!live_.emplace(p, bytes).second) Fail("block handed out twice:", p);
    }
#if TIERPOOL_ASAN
    ASAN_POISON_MEMORY_REGION(p, block);
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#endif
#if TIERPOOL_VALGRIND
    if (on_memcheck_) [[unlikely]] {
      VALGRIND_MAKE_MEM_NOACCESS(p, block);
      VALGRIND_MEMPOOL_ALLOC(id_, p, bytes);
    }
#endif
    (void)p, (void)bytes, (void)block;
  }

  // The caller gives back `p`. Hardened: returns the size it was allocated with, or 0 if `p` is
  // not a live block (the pool then decides between "double free" and "not from this pool").
  std::size_t TakeBack(void* p) noexcept {
    std::size_t bytes = 1;
    if constexpr (Checks::kHardened) {
      auto it = live_.find(p);
      if (it == live_.end()) return 0;
      bytes = it->second == 0 ? 1 : it->second;
      live_.erase(it);
    }
#if TIERPOOL_VALGRIND
    if (on_memcheck_) [[unlikely]]
      VALGRIND_MEMPOOL_FREE(id_, p);
#endif
    (void)p;
    return bytes;
  }

  // Hardened only: the size `p` was allocated with (0 if it is not live).
  std::size_t LiveSize(const void* p) const noexcept {
    if constexpr (Checks::kHardened) {
      auto it = live_.find(p);
      return it == live_.end() ? 0 : (it->second == 0 ? 1 : it->second);
    }
    return 1;
  }
  std::size_t live_blocks() const noexcept {
    if constexpr (Checks::kHardened) return live_.size();
    return 0;
  }

  [[noreturn]] void Fail(const char* what, const void* p) const {
    debug::Fail(step_, pool_, what, p);
  }
  // A free of something that is not a live block: `owned` says whether it lies in the pool.
  [[noreturn]] void Misfree(const void* p, bool owned) const {
    Fail(owned ? "double free of" : "free of a pointer not from this pool:", p);
  }

 private:
  enum class Access { kNone, kDefined, kUndefined };
  void SetAccess(const void* p, std::size_t n, Access access) const noexcept {
#if TIERPOOL_ASAN
    if (access == Access::kNone) {
      ASAN_POISON_MEMORY_REGION(p, n);
    } else {
      ASAN_UNPOISON_MEMORY_REGION(p, n);
    }
#endif
#if TIERPOOL_VALGRIND
    if (on_memcheck_) [[unlikely]] {
      if (access == Access::kNone) {
        VALGRIND_MAKE_MEM_NOACCESS(p, n);
      } else if (access == Access::kDefined) {
        VALGRIND_MAKE_MEM_DEFINED(p, n);
      } else {
        VALGRIND_MAKE_MEM_UNDEFINED(p, n);
      }
    }
#endif
    (void)p, (void)n, (void)access;
  }

  struct NoLedger {};
  using Ledger =
      std::conditional_t<Checks::kHardened, std::unordered_map<const void*, std::size_t>, NoLedger>;

  bool on_memcheck_ = false;  // first: a pool puts its tracker next to its free list's head
  bool started_ = false;
  const char* step_;
  const char* pool_;
  const void* id_ = nullptr;
  [[no_unique_address]] Ledger live_{};
};

// An intrusive LIFO list of free blocks of one size: the book's free list, made honest to the
// tools. A free block's first bytes hold the link. In hardened mode the link is stored encoded
// with this list's secret key and the rest of the block holds kFreedByte; a link that decodes to
// an address this list never held means the freed block was written to, and aborts before the
// pool follows it.
template <class Checks>
class FreeList {
 public:
  struct Node {
    Node* next;
  };

  bool empty() const noexcept { return head_ == nullptr; }

  // The book's two operations, for a pool nobody watches: nothing else happens on the fast path.
  void* Pop() noexcept {
    Node* node = head_;
    if (node != nullptr) head_ = node->next;
    return node;
  }
  void Push(void* p) noexcept {
    Node* node = static_cast<Node*>(p);
    node->next = head_;
    head_ = node;
  }

  // The same for a watched pool (BlockTracker::watched()): a free block is sealed, so it is opened
  // to read or write its link. Hardened: the link is encoded, the rest of a free block holds
  // kFreedByte, and a block written to while it was free aborts when it is popped.
  void* PopWatched(std::size_t block, const BlockTracker<Checks>& tracker) noexcept {
    Node* node = head_;
    if (node == nullptr) return nullptr;
    if constexpr (Checks::kHardened) {
      tracker.Open(node, block);
      const auto* rest = reinterpret_cast<const unsigned char*>(node) + sizeof(Node);
      if (!StillFilled(rest, block - sizeof(Node))) {
        tracker.Fail("block written after it was freed:", node);
      }
      Node* next = Decode(node->next);
      if (!bounds_.MayHold(next)) tracker.Fail("free-list link overwritten in freed block", node);
      head_ = next;
    } else {
      tracker.Open(node, sizeof(Node));
      head_ = node->next;
    }
    return node;
  }
  void PushWatched(void* p, std::size_t block, const BlockTracker<Checks>& tracker) noexcept {
    tracker.Open(p, block);
    Node* node = static_cast<Node*>(p);
    if constexpr (Checks::kHardened) {
      std::memset(p, kFreedByte, block);
      bounds_.Include(node);
      node->next = Encode(head_);
    } else {
      node->next = head_;
    }
    head_ = node;
    tracker.Seal(p, block);
  }

  // Drops every block without touching them (their memory is being given back).
  void Clear() noexcept {
    head_ = nullptr;
    bounds_ = {};
  }

 private:
  // Hardened only: the lowest and highest block ever pushed. A genuine link always decodes to one
  // of those blocks (or nullptr); a stray write decodes to an address far outside. One compare
  // pair per pop, where an exact answer (walking the pool's chunks) would cost a walk.
  struct Bounds {
    std::uintptr_t lowest = UINTPTR_MAX;
    std::uintptr_t highest = 0;
    void Include(const Node* node) noexcept {
      const auto a = reinterpret_cast<std::uintptr_t>(node);
      lowest = a < lowest ? a : lowest;
      highest = a > highest ? a : highest;
    }
    bool MayHold(const Node* node) const noexcept {
      const auto a = reinterpret_cast<std::uintptr_t>(node);
      return node == nullptr || (a >= lowest && a <= highest && a % alignof(Node) == 0);
    }
  };
  struct NoBounds {};

  Node* Encode(Node* p) const noexcept {
    return reinterpret_cast<Node*>(tierpool_common::EncodeLink(p, Key()));
  }
  Node* Decode(Node* p) const noexcept {
    return static_cast<Node*>(
        tierpool_common::DecodeLink(reinterpret_cast<std::uintptr_t>(p), Key()));
  }
  // Different for every list and every run; recomputed on each use (a few multiplications) so
  // that the list stays one pointer and constant-initializable.
  tierpool_common::LinkKey Key() const noexcept {
    return tierpool_common::LinkKeyFor(this, tierpool_common::ProcessLinkKey());
  }

  Node* head_ = nullptr;
  [[no_unique_address]] std::conditional_t<Checks::kHardened, Bounds, NoBounds> bounds_{};
};

}  // namespace debug
}  // namespace step02
