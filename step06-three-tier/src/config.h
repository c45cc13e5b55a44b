// Build-wide constants and switches of the three-tier allocator.
//
// Two build options change the code (never the API):
//   TIERPOOL_HARDENED=1   double free, foreign pointers and wrong sizes abort with a message naming
//                         the pointer; freed blocks are filled with a pattern that is checked on
//                         reuse; free-list links are stored encoded with a per-process secret
//                         key and checked before they are followed.
//   TIERPOOL_VALGRIND=1   memcheck client requests: blocks are a valgrind mempool, free and
//                         not-yet-handed-out memory is NOACCESS.
// An ASan build (TIERPOOL_ASAN) poisons free and not-yet-handed-out memory as well.
//
// TIERPOOL_INTERNAL_NS names the namespace of everything internal, so a second variant of the
// allocator (the hardened one, for the benchmark table) can live in the same binary.
#pragma once

#include <cstddef>
#include <cstdint>

#ifndef TIERPOOL_HARDENED
#define TIERPOOL_HARDENED 0
#endif
#ifndef TIERPOOL_VALGRIND
#define TIERPOOL_VALGRIND 0
#endif
#ifndef TIERPOOL_ASAN
#define TIERPOOL_ASAN 0
#endif
#ifndef TIERPOOL_INTERNAL_NS
#define TIERPOOL_INTERNAL_NS internal
#endif

// The ladder (the chapter's "From the plain design to this one"): the tricks beyond article
// 003's three tiers, each a switch that is on in the library. The benchmark builds the core with
// some of them off, one rung at a time, to measure what each one buys; nothing else does.
//   TIERPOOL_BYTE_BUDGET       each thread cache holds at most its share of an overall budget
//   TIERPOOL_TRANSFER_SLOTS    the central cache keeps whole batches, moved in O(1)
//   TIERPOOL_TWO_AHEAD         a list's link names the node two down, not the next one, and the
//                              cache keeps the first two nodes: a pop reads the link of the node
//                              it hands out and prefetches the node it will hand out a node's
//                              worth of pops later (thread_cache.h); off, a plain chain
//   TIERPOOL_NODE_ITEMS        a free object on a thread-cache list carries the addresses of up
//                              to 7 others (unrolled lists, thread_cache.h); off, every node
//                              carries none and the lists are chains of free objects
//   TIERPOOL_SLOT_ARRAYS       a thread cache keeps each class's free objects as an array of
//                              their addresses (thread_cache.h), and lists only between the
//                              tiers: a pop or push is one load or store, no freed block is
//                              read or written, and there is no node to guess about
// Two more pay only in libtierpool.so, so the chapter measures them there (a library built with
// -DTIERPOOL_...=0 in CMAKE_CXX_FLAGS, preloaded under the malloc rows, counted by callgrind):
//   TIERPOOL_MALLOC_CLASS_TABLE  malloc finds its class in a table of its own (size_class.h)
//   TIERPOOL_INITIAL_EXEC_TLS    the thread-cache pointer is read with one %fs-relative load
// And one pays only where threads come and go, which no workload of the ladder does (the
// measurement notes, "Caches kept for the next thread"):
//   TIERPOOL_KEPT_CACHES         how many caches of exited threads wait whole for the next
//                                threads (kMaxKeptCaches below; 0: each exit takes its cache apart)
#ifndef TIERPOOL_TRANSFER_SLOTS
#define TIERPOOL_TRANSFER_SLOTS 1
#endif
#ifndef TIERPOOL_BYTE_BUDGET
#define TIERPOOL_BYTE_BUDGET 1
#endif
#ifndef TIERPOOL_TWO_AHEAD
#define TIERPOOL_TWO_AHEAD 1
#endif
#ifndef TIERPOOL_NODE_ITEMS
#define TIERPOOL_NODE_ITEMS 1
#endif
#ifndef TIERPOOL_SLOT_ARRAYS
#define TIERPOOL_SLOT_ARRAYS 1
#endif
#ifndef TIERPOOL_MALLOC_CLASS_TABLE
#define TIERPOOL_MALLOC_CLASS_TABLE 1
#endif
#ifndef TIERPOOL_INITIAL_EXEC_TLS
#define TIERPOOL_INITIAL_EXEC_TLS 1
#endif

#define TIERPOOL_LIKELY(x) __builtin_expect(!!(x), 1)
#define TIERPOOL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TIERPOOL_ALWAYS_INLINE inline __attribute__((always_inline))
#define TIERPOOL_NOINLINE __attribute__((noinline))
// The thread-cache pointer is read with one %fs-relative load: no __tls_get_addr, no TLS guard.
// Without it, a shared library's thread-local variables are reached through a call to
// __tls_get_addr (the general-dynamic model), on every fast path.
#if TIERPOOL_INITIAL_EXEC_TLS
#define TIERPOOL_INITIAL_EXEC __attribute__((tls_model("initial-exec")))
#else
#define TIERPOOL_INITIAL_EXEC
#endif

namespace tierpool::TIERPOOL_INTERNAL_NS {

inline constexpr bool kHardened = TIERPOOL_HARDENED != 0;
inline constexpr bool kTransferSlots = TIERPOOL_TRANSFER_SLOTS != 0;
inline constexpr bool kByteBudget = TIERPOOL_BYTE_BUDGET != 0;
inline constexpr bool kNodeItems = TIERPOOL_NODE_ITEMS != 0;
inline constexpr bool kSlotArrays = TIERPOOL_SLOT_ARRAYS != 0;
// How many nodes down a list's link points (TIERPOOL_TWO_AHEAD): 2, or 1 for a plain chain.
inline constexpr std::size_t kAhead = TIERPOOL_TWO_AHEAD != 0 ? 2 : 1;
inline constexpr bool kMallocClassTable = TIERPOOL_MALLOC_CLASS_TABLE != 0;

// Pages are the unit of the page heap and the page map (not the OS page size).
inline constexpr int kPageShift = 13;
inline constexpr std::size_t kPageSize = std::size_t{1} << kPageShift;  // 8 KiB

// Unit of the CPU's caches: two threads writing one line take it from each other on every write.
inline constexpr std::size_t kCacheLineSize = 64;

// Largest size served from a size class; larger requests are whole spans.
inline constexpr std::size_t kMaxSmallSize = 256 * 1024;

// User addresses on x86-64 Linux (4-level paging) fit in 47 bits; the page map covers 48.
inline constexpr int kAddressBits = 48;
inline constexpr int kPageNumberBits = kAddressBits - kPageShift;  // 35

// The OS hands out memory in regions of this alignment and granularity (a huge page).
inline constexpr int kRegionShift = 21;
inline constexpr std::size_t kRegionSize = std::size_t{1} << kRegionShift;  // 2 MiB
// Each growth of the heap maps at least this much address space (virtual, not resident).
inline constexpr std::size_t kMinGrowBytes = 32 * std::size_t{1} << 20;

// Byte budget of the thread caches: all of them together may hold kOverallThreadCacheBudget,
// shared equally among the live threads, each between the minimum and the maximum (2 threads:
// 16 MiB each; 16 threads: 4 MiB each; 1000 threads: 256 KiB each).
inline constexpr std::size_t kOverallThreadCacheBudget = 64 * std::size_t{1} << 20;
inline constexpr std::size_t kMinThreadCacheBudget = 256 * std::size_t{1} << 10;
inline constexpr std::size_t kMaxThreadCacheBudget = 16 * std::size_t{1} << 20;
// A thread that exits leaves its cache, objects and arrays and all, to the next thread that
// starts, instead of taking it apart object by object into the central lists (where the next
// thread would take the same objects out again, their spans carved anew if the old ones went
// back to the page heap meanwhile). Up to kMaxKeptCaches wait, as long as the kept caches and the
// live ones stay within kOverallThreadCacheBudget together: a kept cache is a thread cache still,
// and a cache that does not fit is taken apart. Each is given back whole at the second look of
// the clock that finds it unclaimed, or by tierpool_release_free_memory; while they hold
// kReleaseThreadMinBytes or more, the release thread comes for those looks even if the program
// stops calling. A thread that started and ended between two looks (a task, a request, a worker
// that built a structure and dropped it) costs the allocator no refill at its start and no flush
// at its end.
#ifndef TIERPOOL_KEPT_CACHES
#define TIERPOOL_KEPT_CACHES 8
#endif
inline constexpr int kMaxKeptCaches = TIERPOOL_KEPT_CACHES;
// Longest a single thread-cache list may grow. The byte budgets are the real bounds; this only
// keeps lengths far from overflow (16 MiB of 8-byte objects is 2 M objects).
inline constexpr std::uint32_t kMaxListLength = std::uint32_t{1} << 22;
// Bytes a single list of page-sized objects (8 to 32 KiB; above, kMaxCachedSize, no list) may
// hold, or one batch where that is more. A thread that freed a thousand 16 KiB buffers keeps
// sixteen of them for its next ones, not its whole budget's worth, which no fast path would
// ever give back to the OS. With 1 MiB here, a
// program of random sizes up to 32 KiB (`workset`) peaked 8 % higher at 4 threads, in no less
// time (docs/step06-measurement-notes.md). Lists of smaller objects are bounded by the budget
// alone: a thread that churns 100 000 objects of 64 bytes (W2) needs all of them in its list, or
// every round goes through the central lists.
inline constexpr std::size_t kMaxListBytes = 256 * std::size_t{1} << 10;

// A thread whose refills took this many bytes of pages the OS had to supply (the resident set
// grew) gives back what its idle lists hold (ThreadCache::ReleaseIdleLists): a program that
// freed thousands of objects of one size and now grows in another (sqlite3 running the
// sqlite-index trace's script, a Lua program done with its trees and on to its strings) reuses
// the first size's spans instead of faulting in new pages. Small enough that the look comes early
// in a growth of a few MiB; each look reads every class's list once, so not per span.
inline constexpr std::size_t kIdleLookGrowth = 256 * std::size_t{1} << 10;

// Bytes the central cache's transfer slots may hold, all classes together: as much as the thread
// caches together, a class a quarter of it at most (TransferSlotsFor). The slots are where the
// thread caches' overflow waits for the next thread that needs it: with more threads than the
// budget has room for (W2 at 16 threads: 6.4 MB of 64-byte objects a thread, a 4 MiB share),
// every round sends megabytes of batches to the central list and takes them back. Past this
// bound a batch goes back to its spans, one object at a time, and comes out of them again in
// random order. What nobody takes does not stay: a batch left untouched from one look of the
// clock to the next goes back to its spans (DrainIfIdle), so a program that freed 64 MiB of
// small objects and went quiet holds them a few looks, as it holds free spans.
inline constexpr std::size_t kMaxParkedBytes = 64 * std::size_t{1} << 20;

// When the page heap gives free pages back to the OS (madvise): a free span that nobody reused
// for kReleaseDelayMs goes back. The delay is short next to a human's patience and long next to
// a program's waves: a loop that frees its buffers and allocates them again a few milliseconds
// later keeps them warm (no page faults), and a program whose peak is over has its memory back
// within a tenth of a second. At once, whatever would make the backed memory (in use + free)
// exceed the peak in use of the last one or two delays by more than kMaxBackedFreeSlack: a heap
// that keeps growing without reusing its free spans (sizes that never fit) cannot pile up free
// memory even between two looks of the clock. And at once, whatever is free beyond what is in
// use plus kMaxBackedFreeSlack (and beyond what the program reused lately): a program past its
// peak has its memory back as fast as the kernel takes it, at the next look of any thread.
inline constexpr std::uint64_t kReleaseDelayMs = 10;
inline constexpr std::size_t kMaxBackedFreeSlack = 64 * std::size_t{1} << 20;
// Who looks at the clock: every slow path (a thread cache's refill or overflow, a large block),
// and, while more than kReleaseThreadMinBytes of free memory waits for its delay, the release
// thread: a thread of the allocator's own, started on first need, asleep otherwise, that gives
// the memory back even when the program stops calling the allocator or calls only its fast
// paths. TIERPOOL_RELEASE_THREAD=0 in the environment turns it off (a program that must stay
// single-threaded, to call unshare(CLONE_NEWUSER) for instance).
inline constexpr std::size_t kReleaseThreadMinBytes = 2 * std::size_t{1} << 20;
// A large block that moves (realloc to a size its neighbours have no room for) moves by
// remapping its pages, not by copying, from this size on.
inline constexpr std::size_t kMovePagesMinBytes = 1 * std::size_t{1} << 20;

// Largest request we try to serve; anything bigger is ENOMEM without asking the OS.
inline constexpr std::size_t kMaxRequest = std::size_t{1} << 46;

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
