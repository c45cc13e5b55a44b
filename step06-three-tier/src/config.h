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

#define TIERPOOL_LIKELY(x) __builtin_expect(!!(x), 1)
#define TIERPOOL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TIERPOOL_ALWAYS_INLINE inline __attribute__((always_inline))
#define TIERPOOL_NOINLINE __attribute__((noinline))
// The thread-cache pointer is read with one %fs-relative load: no __tls_get_addr, no TLS guard.
#define TIERPOOL_INITIAL_EXEC __attribute__((tls_model("initial-exec")))

namespace tierpool::TIERPOOL_INTERNAL_NS {

inline constexpr bool kHardened = TIERPOOL_HARDENED != 0;

// Pages are the unit of the page heap and the page map (not the OS page size).
inline constexpr int kPageShift = 13;
inline constexpr std::size_t kPageSize = std::size_t{1} << kPageShift;  // 8 KiB

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
// 16 MiB each; 16 threads: 4 MiB each; 1000 threads: 1 MiB each).
inline constexpr std::size_t kOverallThreadCacheBudget = 64 * std::size_t{1} << 20;
inline constexpr std::size_t kMinThreadCacheBudget = 1 * std::size_t{1} << 20;
inline constexpr std::size_t kMaxThreadCacheBudget = 16 * std::size_t{1} << 20;
// Longest a single thread-cache list may grow. The byte budget is the real bound; this only
// keeps lengths far from overflow (16 MiB of 8-byte objects is 2 M objects).
inline constexpr std::uint32_t kMaxListLength = std::uint32_t{1} << 22;

// When the page heap gives free pages back to the OS (madvise): a free span that nobody reused
// for kReleaseDelayMs goes back (so a program that allocates in waves keeps its memory warm
// between waves, and one whose peak is over gives its memory back a second later). And at
// once, whatever would make the backed memory (in use + free) exceed the peak in use of the
// last one or two delays by more than kMaxBackedFreeSlack: a heap that keeps growing without
// reusing its free spans (sizes that never fit) cannot pile up free memory.
inline constexpr std::uint64_t kReleaseDelayMs = 1000;
inline constexpr std::size_t kMaxBackedFreeSlack = 64 * std::size_t{1} << 20;

// Largest request we try to serve; anything bigger is ENOMEM without asking the OS.
inline constexpr std::size_t kMaxRequest = std::size_t{1} << 46;

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
