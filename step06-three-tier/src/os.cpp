#include "os.h"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace tierpool::TIERPOOL_INTERNAL_NS {
namespace {

std::atomic<long> map_failure_after{-1};
// Whether OsMovePages ever moved pages: from then on, released ranges are mapped anew.
std::atomic<bool> pages_moved{false};
// Whether a fresh mapping came back resident (see OsMapFresh): then none is made any more.
std::atomic<bool> fresh_maps_locked{false};
std::atomic<void (*)(Move)> between_tiers_hook{nullptr};

bool InjectedFailure() {
  long left = map_failure_after.load(std::memory_order_relaxed);
  while (left >= 0) {
    if (left == 0) return true;
    if (map_failure_after.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) break;
  }
  return false;
}

void WriteAll(const char* text, std::size_t length) {
  while (length > 0) {
    const ssize_t n = write(STDERR_FILENO, text, length);
    if (n <= 0) return;
    text += n;
    length -= static_cast<std::size_t>(n);
  }
}

}  // namespace

void* OsMap(std::size_t bytes, std::size_t alignment) {
  if (InjectedFailure()) return nullptr;
  // Whole OS pages: a trim at an address that is not page-aligned fails (EINVAL) and would leave
  // the bytes up to the next page mapped for good.
  bytes = (bytes + kOsPageSize - 1) & ~(kOsPageSize - 1);
  if (bytes == 0) return nullptr;
  // Over-map by the alignment and trim both ends: mmap itself only promises 4 KiB.
  const std::size_t padded = bytes + alignment;
  if (padded < bytes) return nullptr;
  // A successful call leaves errno alone, and a failed one is reported as ENOMEM by the caller:
  // nothing here may change it.
  const int saved_errno = errno;
  void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    errno = saved_errno;
    return nullptr;
  }
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + alignment - 1) & ~(alignment - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + padded;
  if (end > aligned + bytes)
    munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  errno = saved_errno;
  return reinterpret_cast<void*>(aligned);
}

bool OsRelease(void* start, std::size_t bytes) {
  const int saved_errno = errno;
  const bool released = madvise(start, bytes, MADV_DONTNEED) == 0;
  errno = saved_errno;
  // Its pages are gone already, so a fresh mapping costs only the kernel's bookkeeping; and where
  // blocks were moved into the range, it is what ends their mappings apart.
  if (released && pages_moved.load(std::memory_order_relaxed)) OsMapFresh(start, bytes);
  return released;
}

bool OsMovePages(void* from, void* to, std::size_t bytes) {
#if defined(MREMAP_DONTUNMAP)
  const int saved_errno = errno;
  void* moved = mremap(from, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to);
  errno = saved_errno;
  if (moved != to) return false;
  OsMapFresh(from, bytes);
  pages_moved.store(true, std::memory_order_relaxed);
  return true;
#else
  (void)from, (void)to, (void)bytes;
  return false;
#endif
}

void OsMapFresh(void* start, std::size_t bytes) {
  if (fresh_maps_locked.load(std::memory_order_relaxed)) return;
  const int saved_errno = errno;
  constexpr int kProt = PROT_READ | PROT_WRITE;
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (mmap(start, bytes, kProt, kFlags | MAP_FIXED, -1, 0) == start) {
    unsigned char resident = 0;
    if (mincore(start, kOsPageSize, &resident) == 0 && (resident & 1) != 0) {
      // Filled and locked at once: the program locks its future mappings (mlockall with
      // MCL_FUTURE), and a range mapped anew would hold memory for good. Emptied and unlocked
      // again, as the range was (a move leaves it so); and no range is mapped anew from now on.
      fresh_maps_locked.store(true, std::memory_order_relaxed);
      munlock(start, bytes);
      madvise(start, bytes, MADV_DONTNEED);
    }
  } else {
    // Refused. Out of mappings (the very limit this guards), the kernel refuses before it unmaps
    // anything: the old mapping is there, empty already (both callers' pages are gone), and stays.
    // If it was unmapped first (before Linux 6.12, under strict overcommit), the range is mapped
    // again where nothing else has taken it: heap pages that are not mapped would fault in
    // whoever gets them next.
    void* again = mmap(start, bytes, kProt, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (again == MAP_FAILED && errno != EEXIST)
      Fatal("the OS unmapped heap pages and refused to map them again", start);
    if (again != MAP_FAILED && again != start) munmap(again, bytes);  // an old kernel's hint
  }
  errno = saved_errno;
}

void OsUnmap(void* start, std::size_t bytes) {
  const int saved_errno = errno;
  munmap(start, bytes);
  errno = saved_errno;
}

std::uint64_t NowMs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000 +
         static_cast<std::uint64_t>(now.tv_nsec) / 1000000;
}

void Fatal(const char* what, const void* pointer) {
  char text[256];
  std::size_t n = 0;
  auto append = [&](const char* s) {
    while (*s && n < sizeof(text) - 2)
      text[n++] = *s++;
  };
  append("tierpool (step06-three-tier): ");
  append(what);
  if (pointer != nullptr) {
    append(": pointer 0x");
    char hex[17];
    auto value = reinterpret_cast<std::uintptr_t>(pointer);
    for (int i = 15; i >= 0; --i) {
      hex[i] = "0123456789abcdef"[value & 15];
      value >>= 4;
    }
    hex[16] = '\0';
    append(hex);
  }
  text[n++] = '\n';
  WriteAll(text, n);
  std::abort();
}

void SetMapFailureAfter(long successes) {
  map_failure_after.store(successes, std::memory_order_relaxed);
}

void SetBetweenTiersHook(void (*hook)(Move)) {
  between_tiers_hook.store(hook, std::memory_order_relaxed);
}

void BetweenTiers(Move move) {
  if (void (*hook)(Move) = between_tiers_hook.load(std::memory_order_relaxed)) hook(move);
}

namespace {
__thread int moves_in_progress TIERPOOL_INITIAL_EXEC = 0;
}  // namespace

ThisThreadMoving::ThisThreadMoving() {
  ++moves_in_progress;
}
ThisThreadMoving::~ThisThreadMoving() {
  --moves_in_progress;
}
bool ThisThreadMoving::Now() {
  return moves_in_progress != 0;
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
