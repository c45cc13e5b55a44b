// What the allocator tells ASan and valgrind, and how it reads and writes the free-list link that
// lives in the first word of every free object.
//
// Without this, a use-after-free inside the allocator is invisible to both tools: to them a free
// object is ordinary, addressable memory. With it:
//   - ASan (TIERPOOL_ASAN): free and never-handed-out memory is poisoned; the allocator's own
//     link reads and writes are exempt from instrumentation.
//   - valgrind (TIERPOOL_VALGRIND): every block is a mempool chunk (MEMPOOL_ALLOC/FREE), so
//     memcheck reports invalid accesses and leaks of pool blocks; free memory is NOACCESS and the
//     link is made accessible just for the allocator's read or write.
// In a plain release build every function here is a single load or store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "config.h"
#include "os.h"
#include "page_map.h"
#include "tierpool_common/encoded_link.h"

#if TIERPOOL_ASAN
#include <sanitizer/asan_interface.h>
#endif
#if TIERPOOL_VALGRIND
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#endif

namespace tierpool::TIERPOOL_INTERNAL_NS {

// The allocator's own reads and writes of free memory. Under ASan they must not be instrumented,
// and an always-inline function would be instrumented as part of its caller: so there they are
// real calls.
#if TIERPOOL_ASAN
#define TIERPOOL_RAW_ACCESS inline __attribute__((noinline, no_sanitize("address")))
#else
#define TIERPOOL_RAW_ACCESS TIERPOOL_ALWAYS_INLINE
#endif

// Hardened builds store links encoded with a per-process secret key (the encoding of
// common/include/tierpool_common/encoded_link.h, mimalloc's), so a stray write of a plausible
// pointer into a free object decodes to an address nobody chose; LoadLinkOfClass() checks it
// before the allocator follows it.
extern tierpool_common::LinkKey free_list_key;

TIERPOOL_ALWAYS_INLINE std::uintptr_t EncodeLink(void* next) {
  if constexpr (kHardened) return tierpool_common::EncodeLink(next, free_list_key);
  return reinterpret_cast<std::uintptr_t>(next);
}
TIERPOOL_ALWAYS_INLINE void* DecodeLink(std::uintptr_t stored) {
  if constexpr (kHardened) return tierpool_common::DecodeLink(stored, free_list_key);
  return reinterpret_cast<void*>(stored);
}

// Word i of a free object, stored encoded: its link to the next free object (word 0), or in a
// node of the thread caches' unrolled lists (thread_cache.h) the address of a free object it
// holds (words 1..7, its items).
TIERPOOL_RAW_ACCESS void* LoadItem(void* node, std::size_t i) {
  auto* word = static_cast<std::uintptr_t*>(node) + i;
#if TIERPOOL_VALGRIND
  VALGRIND_MAKE_MEM_DEFINED(word, sizeof(void*));
#endif
  void* item = DecodeLink(*word);
#if TIERPOOL_VALGRIND
  VALGRIND_MAKE_MEM_NOACCESS(word, sizeof(void*));
#endif
  return item;
}

TIERPOOL_RAW_ACCESS void StoreItem(void* node, std::size_t i, void* item) {
  auto* word = static_cast<std::uintptr_t*>(node) + i;
#if TIERPOOL_VALGRIND
  VALGRIND_MAKE_MEM_UNDEFINED(word, sizeof(void*));
#endif
  *word = EncodeLink(item);
#if TIERPOOL_VALGRIND
  VALGRIND_MAKE_MEM_NOACCESS(word, sizeof(void*));
#endif
}

TIERPOOL_ALWAYS_INLINE void* LoadNext(void* object) {
  return LoadItem(object, 0);
}
TIERPOOL_ALWAYS_INLINE void StoreNext(void* object, void* next) {
  StoreItem(object, 0, next);
}

// Items a node of `size` bytes holds: the words after its link, at most 7 (a 64-byte node is one
// line), so that an item count fits in the 3 low bits of an 8-byte-aligned address.
inline constexpr std::uintptr_t kMaxItemsPerNode = 7;
constexpr std::uintptr_t ItemsPerNode(std::size_t size) {
  const std::size_t words = size / sizeof(void*);
  if (!kNodeItems || words <= 1) return 0;
  return words - 1 < kMaxItemsPerNode ? words - 1 : kMaxItemsPerNode;
}

// Links between nodes are *tagged*: a node holding k items is named by the address of its word
// k (its last item's, or its link's when k = 0) with k in the low 3 bits, node + 9k. So the word
// a pop takes is `tagged & ~7`, one mask away, and one item fewer or more is 9 less or more.
// The end of a list is the null node tagged with the class's ItemsPerNode (ListEnd, below 64,
// which no node's name is): a list that runs into it is empty, and an empty list looks like one
// whose first node is full, so a push makes a new node without testing for null. Chains of plain
// objects (the spans' carving) are the case of nodes without items.
inline constexpr std::uintptr_t kItemStep = sizeof(void*) + 1;
inline constexpr std::uintptr_t kListEndLimit = 64;
TIERPOOL_ALWAYS_INLINE void* TagNode(void* node, std::uintptr_t items) {
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(node) + kItemStep * items);
}
TIERPOOL_ALWAYS_INLINE std::uintptr_t ItemsOf(void* tagged) {
  return reinterpret_cast<std::uintptr_t>(tagged) & kMaxItemsPerNode;
}
TIERPOOL_ALWAYS_INLINE void* NodeOf(void* tagged) {
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(tagged) -
                                 kItemStep * ItemsOf(tagged));
}
// The word holding the node's last item (its link when it has none).
TIERPOOL_ALWAYS_INLINE void* LastWordOf(void* tagged) {
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(tagged) & ~kMaxItemsPerNode);
}
TIERPOOL_ALWAYS_INLINE void* ListEnd(std::uintptr_t items_per_node) {
  return TagNode(nullptr, items_per_node);
}
TIERPOOL_ALWAYS_INLINE bool IsListEnd(void* tagged) {
  return reinterpret_cast<std::uintptr_t>(tagged) < kListEndLimit;
}

// The link of `node`, a free block of class `cl`, that the allocator is about to follow: tagged
// in an unrolled list (at most `cap` items), plain in a span's list (cap 0, null at the end).
// Hardened: it must name a block of class `cl` (or the end), or the block was written to after
// it was freed; the allocator stops there, naming the block, instead of handing out whatever the
// write pointed at. Other builds: LoadNext().
TIERPOOL_ALWAYS_INLINE void* LoadLinkOfClass(void* node, const PageMap& map, std::uint32_t cl,
                                             std::uintptr_t cap) {
  void* next = LoadNext(node);
  if constexpr (kHardened) {
    void* next_node = NodeOf(next);
    if (TIERPOOL_UNLIKELY(ItemsOf(next) > cap ||
                          (next_node != nullptr && map.ClassOf(next_node) != cl))) {
      Fatal("free-list link overwritten in a freed block", node);
    }
  }
  (void)map;
  (void)cl;
  (void)cap;
  return next;
}

// Address space given back to the OS (munmap): whoever maps it next (another library, this
// allocator's own metadata) owns it, so no mark of ours may stay on it. Valgrind forgets the marks
// of an unmapped range itself; ASan keeps its shadow, and would report their first write.
TIERPOOL_ALWAYS_INLINE void MarkUnmapped(void* start, std::size_t bytes) {
#if TIERPOOL_ASAN
  ASAN_UNPOISON_MEMORY_REGION(start, bytes);
#endif
  (void)start;
  (void)bytes;
}

// Memory that belongs to the allocator (a fresh span, a freed block): users must not touch it.
TIERPOOL_ALWAYS_INLINE void MarkUnusable(void* start, std::size_t bytes) {
#if TIERPOOL_ASAN
  ASAN_POISON_MEMORY_REGION(start, bytes);
#endif
#if TIERPOOL_VALGRIND
  VALGRIND_MAKE_MEM_NOACCESS(start, bytes);
#endif
  (void)start;
  (void)bytes;
}

// The valgrind mempool every user block belongs to (its handle is this variable's address).
extern char valgrind_pool_anchor;
// memcheck skips its leak search when no malloc'd block is live at exit, and pool blocks alone
// do not count: this one never-freed, always-reachable block keeps the search on.
extern char valgrind_leak_search_anchor[16];

TIERPOOL_ALWAYS_INLINE void ToolsCreatePool() {
#if TIERPOOL_VALGRIND
  VALGRIND_CREATE_MEMPOOL(&valgrind_pool_anchor, 0, 0);
  VALGRIND_MALLOCLIKE_BLOCK(valgrind_leak_search_anchor, sizeof(valgrind_leak_search_anchor), 0, 1);
#endif
}

// A block goes to the user: its `bytes` become addressable (contents undefined to memcheck).
TIERPOOL_ALWAYS_INLINE void ToolsOnAllocate(void* block, std::size_t bytes) {
#if TIERPOOL_ASAN
  ASAN_UNPOISON_MEMORY_REGION(block, bytes);
#endif
#if TIERPOOL_VALGRIND
  VALGRIND_MEMPOOL_ALLOC(&valgrind_pool_anchor, block, bytes);
#endif
  (void)block;
  (void)bytes;
}

// A block comes back from the user: all of it becomes unaddressable until handed out again.
TIERPOOL_ALWAYS_INLINE void ToolsOnFree(void* block, std::size_t bytes) {
#if TIERPOOL_VALGRIND
  VALGRIND_MEMPOOL_FREE(&valgrind_pool_anchor, block);
#endif
  MarkUnusable(block, bytes);
  (void)block;
  (void)bytes;
}

// A large block grew or shrank in place from `old_bytes` to `new_bytes`: its contents stay what
// they were (defined where they were defined), the bytes past its new end become unaddressable.
TIERPOOL_ALWAYS_INLINE void ToolsOnResize(void* block, std::size_t old_bytes,
                                          std::size_t new_bytes) {
#if TIERPOOL_VALGRIND
  // The chunk's record changes size; what may be touched is separate: the new bytes become
  // addressable (undefined), the bytes cut off unaddressable.
  VALGRIND_MEMPOOL_CHANGE(&valgrind_pool_anchor, block, block, new_bytes);
  if (new_bytes > old_bytes) {
    VALGRIND_MAKE_MEM_UNDEFINED(static_cast<char*>(block) + old_bytes, new_bytes - old_bytes);
  } else {
    VALGRIND_MAKE_MEM_NOACCESS(static_cast<char*>(block) + new_bytes, old_bytes - new_bytes);
  }
#endif
#if TIERPOOL_ASAN
  if (new_bytes > old_bytes) {
    ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(block) + old_bytes, new_bytes - old_bytes);
  } else {
    ASAN_POISON_MEMORY_REGION(static_cast<char*>(block) + new_bytes, old_bytes - new_bytes);
  }
#endif
  (void)block;
  (void)old_bytes;
  (void)new_bytes;
}

// Whether a tool keeps its own account of which bytes are defined or addressable, so that the
// allocator must not skip work whose effect only shows in memory (clearing known-zero pages,
// moving pages instead of copying them).
inline constexpr bool kToolsWatchMemory = TIERPOOL_VALGRIND || TIERPOOL_ASAN;
// Whether memcheck searches memory for leaks: every word of ours it can read that holds a block's
// address keeps that block "reachable", so a thread cache's array clears the slots it gives up
// (a popped block the program then leaks must be reported lost).
inline constexpr bool kToolsSearchLeaks = TIERPOOL_VALGRIND != 0;

// Hardened builds fill freed blocks with this pattern (after the link) and check it on reuse,
// so a write after free is caught the next time the block is handed out.
inline constexpr std::uint64_t kFreePattern = 0xfdfdfdfdfdfdfdfdull;
// Only the first words are filled and checked: enough to catch the common stray write (a field
// set through a dangling pointer) without making a debug build touch every byte of a 256 KiB
// block twice.
inline constexpr std::size_t kPatternBytes = 256;

// The words of the pattern in a block of `bytes`: [1, PatternWords(bytes)].
constexpr std::size_t PatternWords(std::size_t bytes) {
  const std::size_t n = bytes < kPatternBytes ? bytes : kPatternBytes;
  return n / sizeof(std::uint64_t);
}

// Word by word through a volatile pointer: no memset/memcmp call that a sanitizer would check
// against the poison this memory carries.
TIERPOOL_RAW_ACCESS void FillFreePattern(void* block, std::size_t bytes) {
  if constexpr (kHardened) {
    const std::size_t words = PatternWords(bytes);
    if (words <= 1) return;
    auto* p = static_cast<volatile std::uint64_t*>(block);
#if TIERPOOL_VALGRIND
    VALGRIND_MAKE_MEM_UNDEFINED(static_cast<char*>(block) + 8, (words - 1) * 8);
#endif
    for (std::size_t i = 1; i < words; ++i)
      p[i] = kFreePattern;
#if TIERPOOL_VALGRIND
    VALGRIND_MAKE_MEM_NOACCESS(static_cast<char*>(block) + 8, (words - 1) * 8);
#endif
  }
  (void)block;
  (void)bytes;
}

// True when the pattern written by FillFreePattern is intact.
TIERPOOL_RAW_ACCESS bool FreePatternIntact(void* block, std::size_t bytes) {
  if constexpr (kHardened) {
    const std::size_t words = PatternWords(bytes);
    if (words <= 1) return true;
    const auto* p = static_cast<const volatile std::uint64_t*>(block);
#if TIERPOOL_VALGRIND
    VALGRIND_MAKE_MEM_DEFINED(static_cast<char*>(block) + 8, (words - 1) * 8);
#endif
    std::uint64_t diff = 0;
    for (std::size_t i = 1; i < words; ++i)
      diff |= p[i] ^ kFreePattern;
#if TIERPOOL_VALGRIND
    VALGRIND_MAKE_MEM_NOACCESS(static_cast<char*>(block) + 8, (words - 1) * 8);
#endif
    return diff == 0;
  }
  (void)block;
  (void)bytes;
  return true;
}

// Word `i` of a free block gets the free pattern back (hardened builds: a node's item taken out).
TIERPOOL_RAW_ACCESS void RestoreFreePatternWord(void* block, std::size_t i) {
  auto* word = static_cast<std::uint64_t*>(block) + i;
#if TIERPOOL_VALGRIND
  VALGRIND_MAKE_MEM_UNDEFINED(word, sizeof(*word));
#endif
  *word = kFreePattern;
#if TIERPOOL_VALGRIND
  VALGRIND_MAKE_MEM_NOACCESS(word, sizeof(*word));
#endif
}

// Item `i` of `node`, a free block of class `cl`, taken out of it. Hardened: it must be a block of
// class `cl` whose first word is intact, and word i of the node gets the free pattern back
// (FillFreePattern's, checked on hand-out).
TIERPOOL_ALWAYS_INLINE void* TakeItemOfClass(void* node, std::size_t i, const PageMap& map,
                                             std::uint32_t cl) {
  void* item = LoadItem(node, i);
  if constexpr (kHardened) {
    if (TIERPOOL_UNLIKELY(item == nullptr || map.ClassOf(item) != cl)) {
      Fatal("free-list item overwritten in a freed block", node);
    }
    // An item's own first word holds an encoded null (ListPush): anything else is a write after
    // free, as for a node's link.
    if (TIERPOOL_UNLIKELY(LoadNext(item) != nullptr)) {
      Fatal("free-list link overwritten in a freed block", item);
    }
    RestoreFreePatternWord(node, i);
  }
  (void)map;
  (void)cl;
  return item;
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
