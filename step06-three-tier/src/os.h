// The allocator's only contact with the OS: map, release and (for tests) fail.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

// Maps `bytes` of zeroed read-write memory aligned to `alignment` (a power of two >= 4 KiB);
// nullptr when the OS refuses (or the test hook says so).
void* OsMap(std::size_t bytes, std::size_t alignment);
// Gives the pages back (MADV_DONTNEED): the range stays mapped, reads as zero, costs no RSS.
void OsRelease(void* start, std::size_t bytes);
// Unmaps memory no other thread has seen (a lost race to install a page-map leaf).
void OsUnmap(void* start, std::size_t bytes);
// Milliseconds of a coarse monotonic clock (a vDSO read, no system call).
std::uint64_t NowMs();
// Writes a message with write(2) and aborts: usable with any lock held and without malloc.
[[noreturn]] void Fatal(const char* what, const void* pointer);

// Test hook: after `successes` more successful maps, every map fails until reset with -1.
void SetMapFailureAfter(long successes);

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
