// The allocator's only contact with the OS: map, release and (for tests) fail.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

// The OS's page (mmap's unit), not the allocator's kPageSize.
inline constexpr std::size_t kOsPageSize = 4096;

// Maps `bytes` (rounded up to whole OS pages) of zeroed read-write memory aligned to `alignment` (a
// power of two >= 4 KiB); nullptr when the OS refuses (or the test hook says so).
void* OsMap(std::size_t bytes, std::size_t alignment);
// Gives the pages back (MADV_DONTNEED): the range stays mapped, reads as zero, costs no RSS.
// false when the kernel refused (locked pages): then they still hold their data. Once pages have
// been moved (OsMovePages), the range is also mapped anew (OsMapFresh).
bool OsRelease(void* start, std::size_t bytes);
// Moves the pages of [from, from + bytes) to [to, to + bytes), both inside mappings of ours, by
// remapping them (mremap with MREMAP_DONTUNMAP): no byte is copied, `to`'s old pages are dropped,
// and `from` is mapped anew (OsMapFresh) and reads as zero, costing no memory (unlocked, in a
// program that locks its mappings). false when the
// kernel cannot (before Linux 5.7, or out of mappings): then nothing changed and the caller
// copies. [to, to + bytes) is then a mapping of its own (the kernel keeps the offset its pages had
// where they came from, so it never merges with its neighbours) until its pages are released.
bool OsMovePages(void* from, void* to, std::size_t bytes);
// Maps [start, start + bytes), whose pages are gone already, anew over what was there (mmap with
// MAP_FIXED): the range is an ordinary anonymous mapping again, which the kernel merges with the
// ones beside it. Each move would otherwise leave up to three mappings behind it, for good: a heap
// that moved blocks for hours could reach the kernel's limit on mappings (vm.max_map_count,
// 65 530), where every mmap and mremap fails. In a program that locks its future mappings
// (mlockall with MCL_FUTURE) a fresh mapping would be filled and locked: the first that comes
// back resident is emptied and unlocked again, and from then on nothing is mapped anew.
void OsMapFresh(void* start, std::size_t bytes);
// Unmaps memory: a lost race to install a page-map leaf, or whole free regions given back.
void OsUnmap(void* start, std::size_t bytes);
// Milliseconds of a coarse monotonic clock (a vDSO read, no system call).
std::uint64_t NowMs();
// Writes a message with write(2) and aborts: usable with any lock held and without malloc.
[[noreturn]] void Fatal(const char* what, const void* pointer);

// Test hook: after `successes` more successful maps, every map fails until reset with -1.
void SetMapFailureAfter(long successes);
// Test hook: `hook` (nullptr: none) runs at BetweenTiers, where memory moves from one tier to
// another with no lock held and a fork waits for it, so that a test can fork just then.
enum class Move { kSpanToCentral, kSpansToPageHeap, kCacheApart };
void SetBetweenTiersHook(void (*hook)(Move));
void BetweenTiers(Move move);
// Marks the calling thread, for its scope, as one that may be in such a move. A fork waits for
// the moves of other threads, never for its own thread's: a signal handler that forks after
// interrupting one would wait for ever.
class ThisThreadMoving {
 public:
  ThisThreadMoving();
  ~ThisThreadMoving();
  ThisThreadMoving(const ThisThreadMoving&) = delete;
  ThisThreadMoving& operator=(const ThisThreadMoving&) = delete;
  static bool Now();
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
