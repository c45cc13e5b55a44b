// Span: a run of contiguous pages, the unit the page heap hands out and takes back.
//
// A span is in exactly one of these states:
//   kFree       in a page-heap free list (backed by memory, or released to the OS)
//   kReleasing  taken out of the free lists while its pages are given back to the OS (no lock is
//               held during madvise, so neighbours must not merge with it meanwhile)
//   kSmall      carved into objects of one size class, owned by the central cache
//   kLarge      one block handed to the user (a request over 256 KiB, or a big alignment)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "config.h"
#include "size_class.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

enum class SpanState : std::uint8_t { kFree, kReleasing, kSmall, kLarge };

struct Span {
  std::uintptr_t first_page = 0;
  std::size_t num_pages = 0;
  Span* next = nullptr;  // page-heap free list, or the central cache's list of spans with objects
  Span* prev = nullptr;

  // Small-object spans only (the central cache's lock guards them):
  void* free_list = nullptr;    // objects that came back, linked through their first word
  void* free_tail = nullptr;    // the list's last object (meaningful while the list is not empty)
  char* carve_next = nullptr;   // objects never handed out start here (carved lazily: a fresh
  char* carve_end = nullptr;    // span's pages are not touched until its objects are needed)
  std::uint32_t allocated = 0;  // objects out of the span (in thread caches or with the user)
  std::uint8_t size_class = 0;
  bool in_central_list = false;

  SpanState state = SpanState::kFree;
  bool released = false;            // kFree only: pages given back to the OS (they read as zero)
  bool zeroed = false;              // kSmall / kLarge: handed out from released pages, so all zero
  std::uint64_t free_since_ms = 0;  // kFree only: when it was last freed (coarse clock)
  // kFree and backed only: the page heap's list of backed free spans, most recently freed first
  // (the oldest, at the back, are the first to go back to the OS).
  Span* lru_next = nullptr;
  Span* lru_prev = nullptr;

#if TIERPOOL_HARDENED
  // One bit per object: set while the user holds it. Catches double free exactly.
  std::atomic<std::uint64_t> live[kMaxObjectsPerSpan / 64] = {};
#endif

  char* start() const {
    return reinterpret_cast<char*>(first_page << kPageShift);
  }
  std::size_t bytes() const {
    return num_pages << kPageShift;
  }
  std::uintptr_t last_page() const {
    return first_page + num_pages - 1;
  }
};

// Intrusive doubly linked list of spans, ended by nullptr at both ends. Its only member is its
// first span, and all-zero bytes are an empty list: the allocator's 524 lists (the page heap's
// and the central cache's) sit in zero-filled static storage and cost no page until they are
// used. (With a sentinel Span each, setting them up wrote 50 KiB: 19 page faults in every
// process the library is preloaded into.)
class SpanList {
 public:
  constexpr SpanList() = default;
  SpanList(const SpanList&) = delete;
  SpanList& operator=(const SpanList&) = delete;

  bool empty() const { return first_ == nullptr; }
  Span* first() const { return first_; }
  void PushFront(Span* span) {
    span->prev = nullptr;
    span->next = first_;
    if (first_ != nullptr) first_->prev = span;
    first_ = span;
  }
  // `span` must be in this list.
  void Remove(Span* span) {
    if (span->prev != nullptr) {
      span->prev->next = span->next;
    } else {
      first_ = span->next;
    }
    if (span->next != nullptr) span->next->prev = span->prev;
    span->next = span->prev = nullptr;
  }
  // Iteration: for (Span* s = list.first(); s != nullptr; s = s->next)

 private:
  Span* first_ = nullptr;
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
