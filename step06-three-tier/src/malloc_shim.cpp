// The C allocation functions under their standard names: linked into libtierpool.so (for
// LD_PRELOAD, or linking it) and libtierpool.a (for linking statically), they replace glibc's
// malloc for the whole process. The rules they follow are in dropin.h; this file only names them,
// and hooks the allocator into the process's life: fork (pthread_atfork) and exit (the stats).
//
// Nothing here may run before the allocator can serve: the dynamic loader, libc and libstdc++ call
// malloc before any constructor of ours has run, and the allocator initializes itself on first use.
#include <errno.h>  // program_invocation_short_name
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dropin.h"

namespace dropin = tierpool::dropin;

#define TIERPOOL_SHIM extern "C" __attribute__((visibility("default")))

TIERPOOL_SHIM void* malloc(size_t size) noexcept {
  return dropin::Malloc(size);
}

TIERPOOL_SHIM void free(void* ptr) noexcept {
  dropin::Free(ptr);
}

TIERPOOL_SHIM void* calloc(size_t count, size_t size) noexcept {
  return dropin::Calloc(count, size);
}

TIERPOOL_SHIM void* realloc(void* ptr, size_t size) noexcept {
  return dropin::Realloc(ptr, size);
}

TIERPOOL_SHIM void* reallocarray(void* ptr, size_t count, size_t size) noexcept {
  return dropin::ReallocArray(ptr, count, size);
}

TIERPOOL_SHIM void* memalign(size_t alignment, size_t size) noexcept {
  return dropin::Memalign(alignment, size);
}

TIERPOOL_SHIM int posix_memalign(void** memptr, size_t alignment, size_t size) noexcept {
  return dropin::PosixMemalign(memptr, alignment, size);
}

TIERPOOL_SHIM void* aligned_alloc(size_t alignment, size_t size) noexcept {
  return dropin::AlignedAlloc(alignment, size);
}

TIERPOOL_SHIM void* valloc(size_t size) noexcept {
  return dropin::Valloc(size);
}

TIERPOOL_SHIM void* pvalloc(size_t size) noexcept {
  return dropin::Pvalloc(size);
}

TIERPOOL_SHIM size_t malloc_usable_size(void* ptr) noexcept {
  return dropin::UsableSize(ptr);
}

// glibc's way to give free memory back now: programs call it after a phase that freed much (and
// glibc's would find nothing of ours). The pad is what glibc keeps at the top of its heap; every
// free byte goes back here, so it is ignored. 1 when something was given back, as glibc says.
TIERPOOL_SHIM int malloc_trim(size_t pad) noexcept {
  (void)pad;
  return tierpool_release_free_memory() > 0 ? 1 : 0;
}

// glibc's statistics, from this allocator's counters: glibc's own would describe the heap the
// program no longer uses (all zero). `arena` is what is mapped for blocks, `uordblks` what the
// program holds, `fordblks` the rest of it (free in the caches, the central lists and the page
// heap, backed or given back), `fsmblks` the part of that waiting in the caches and the central
// lists, `keepcost` the free pages still backed, which malloc_trim gives back. glibc's other
// fields (its chunk counts, its mmapped blocks) have no counterpart here: 0.
TIERPOOL_SHIM struct mallinfo2 mallinfo2() noexcept {
  tierpool_stats stats;
  tierpool_get_stats(&stats);
  struct mallinfo2 info = {};
  info.arena = stats.mapped_bytes;
  info.uordblks = stats.bytes_in_use;
  info.fordblks =
      stats.mapped_bytes > stats.bytes_in_use ? stats.mapped_bytes - stats.bytes_in_use : 0;
  info.fsmblks = stats.thread_cache_bytes + stats.central_cache_bytes;
  info.keepcost = stats.page_heap_free_bytes;
  return info;
}

// The same in glibc's older struct of ints, each figure capped at INT_MAX where it is more.
TIERPOOL_SHIM struct mallinfo mallinfo() noexcept {
  const struct mallinfo2 wide = mallinfo2();
  const auto narrow = [](std::size_t bytes) {
    return bytes > static_cast<std::size_t>(INT_MAX) ? INT_MAX : static_cast<int>(bytes);
  };
  struct mallinfo info = {};
  info.arena = narrow(wide.arena);
  info.uordblks = narrow(wide.uordblks);
  info.fordblks = narrow(wide.fordblks);
  info.fsmblks = narrow(wide.fsmblks);
  info.keepcost = narrow(wide.keepcost);
  return info;
}

// Old names glibc still exports: binaries built long ago call cfree, and code that once hooked
// glibc's malloc calls the __libc_ entry points directly. Left to glibc, they would hand glibc
// blocks to our free (or ours to glibc's).
#if defined(__clang__)
#define TIERPOOL_ALIAS_OF(name) __attribute__((alias(#name)))
#else  // GCC wants the alias to carry the attributes of glibc's declaration (malloc, alloc_size)
#define TIERPOOL_ALIAS_OF(name) __attribute__((alias(#name), copy(name)))
#endif

TIERPOOL_SHIM void cfree(void* ptr) noexcept TIERPOOL_ALIAS_OF(free);
TIERPOOL_SHIM void* __libc_malloc(size_t size) noexcept TIERPOOL_ALIAS_OF(malloc);
TIERPOOL_SHIM void __libc_free(void* ptr) noexcept TIERPOOL_ALIAS_OF(free);
TIERPOOL_SHIM void* __libc_calloc(size_t count, size_t size) noexcept TIERPOOL_ALIAS_OF(calloc);
TIERPOOL_SHIM void* __libc_realloc(void* ptr, size_t size) noexcept TIERPOOL_ALIAS_OF(realloc);
TIERPOOL_SHIM void* __libc_memalign(size_t alignment, size_t size) noexcept
    TIERPOOL_ALIAS_OF(memalign);
TIERPOOL_SHIM void* __libc_valloc(size_t size) noexcept TIERPOOL_ALIAS_OF(valloc);
TIERPOOL_SHIM void* __libc_pvalloc(size_t size) noexcept TIERPOOL_ALIAS_OF(pvalloc);
TIERPOOL_SHIM int __posix_memalign(void** memptr, size_t alignment, size_t size) noexcept
    TIERPOOL_ALIAS_OF(posix_memalign);

namespace {

// TIERPOOL_SHOW_STATS: where the stats go at exit. Unset, empty or 0: nowhere. A path (any value
// with a slash: /tmp/stats, ./stats): appended to that file, which several processes can share.
// Anything else (1): stderr.
//
// Either way the report goes to a descriptor of our own, taken at start-up, not to fd 2 at exit:
// many programs close their standard streams before they exit (coreutils' ls, cat, sort and echo
// close stderr in an atexit handler), and a report written to fd 2 then would be lost, or land in
// whatever the program opened there since. The copy is numbered high, because shells hand fds 3
// to 9 to scripts by number (dup2 would silently replace ours); close-on-exec, so that a program
// started by this one opens its own. It keeps stderr open until exit: a daemon that closes stderr
// so that the pipe of whoever started it sees end-of-file holds that pipe open; write its report
// to a file instead.
constexpr int kStatsFdFloor = 512;
int stats_fd = -1;
bool stats_to_file = false;
// What stats_fd was at start-up: a program that closes every descriptor may reuse the number.
dev_t stats_dev;
ino_t stats_ino;

void WriteText(int fd, const char* text) {
  (void)!write(fd, text, strlen(text));
}

// Opens the report's descriptor at start-up. No malloc, no stdio: this runs inside malloc's
// library, before the program's constructors.
void OpenStatsDescriptor(const char* setting) {
  if (setting == nullptr || setting[0] == '\0' || strcmp(setting, "0") == 0) return;
  stats_to_file = strchr(setting, '/') != nullptr;
  int fd = STDERR_FILENO;
  if (stats_to_file) {
    fd = open(setting, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      WriteText(STDERR_FILENO, "tierpool: TIERPOOL_SHOW_STATS: cannot open ");
      WriteText(STDERR_FILENO, setting);
      WriteText(STDERR_FILENO, " to append to it; no stats at exit\n");
      return;
    }
  }
  // Past the soft limit of open files, F_DUPFD fails: then any number above the standard three.
  int kept = fcntl(fd, F_DUPFD_CLOEXEC, kStatsFdFloor);
  if (kept < 0) kept = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (stats_to_file) close(fd);
  struct stat st;
  if (kept < 0 || fstat(kept, &st) != 0) return;
  stats_fd = kept;
  stats_dev = st.st_dev;
  stats_ino = st.st_ino;
}

// "tierpool pid 1234 (ls)": in a file, reports of many processes follow each other.
void WriteReportHeader(int fd) {
  char line[128];
  std::size_t n = 0;
  auto put = [&](const char* text) {
    while (*text != '\0' && n < sizeof line - 1)
      line[n++] = *text++;
  };
  put("tierpool pid ");
  char digits[16];
  int d = 0;
  for (unsigned long pid = static_cast<unsigned long>(getpid()); d == 0 || pid != 0; pid /= 10)
    digits[d++] = static_cast<char>('0' + pid % 10);
  while (d > 0 && n < sizeof line - 1)
    line[n++] = digits[--d];
  put(" (");
  put(program_invocation_short_name);
  put(")");
  line[n++] = '\n';
  (void)!write(fd, line, n);
}

// Runs when the library is loaded (or, linked statically, before the program's own constructors).
// pthread_atfork handlers run their `prepare` in reverse order of registration: registering this
// early makes ours run last, after every other library's prepare handler has done its allocating,
// and our `child` handler first, before theirs allocate in the child.
// The variable's name is writable data, not a constant: the loader has touched that page anyway,
// while reading one byte of .rodata maps the pages around it (the kernel maps a file's pages
// around a fault), the class tables with them: 68 KiB resident in a program that never calls
// malloc. Preloaded /bin/true peaked at 1220 KiB (glibc 980), now 1092 (medians of 21).
char stats_variable[] = "TIERPOOL_SHOW_STATS";

__attribute__((constructor(101))) void InstallProcessHooks() {
  pthread_atfork(tierpool_fork_prepare, tierpool_fork_parent, tierpool_fork_child);
  // getenv only reads environ: safe this early, and it does not allocate.
  OpenStatsDescriptor(getenv(stats_variable));
}

// Runs after the program's atexit handlers and static destructors (they may still allocate), when
// the loader unloads us at exit. tierpool_print_stats writes with write(2) and never allocates.
__attribute__((destructor(101))) void PrintStatsAtExit() {
  struct stat st;
  if (stats_fd < 0 || fstat(stats_fd, &st) != 0 || st.st_dev != stats_dev ||
      st.st_ino != stats_ino) {
    return;
  }
  if (!stats_to_file) {
    tierpool_print_stats(stats_fd);
    return;
  }
  // One report at a time in a shared file: a record lock belongs to the process, so it also
  // keeps apart a parent and a forked child that share the descriptor.
  struct flock whole_file = {};
  whole_file.l_type = F_WRLCK;
  whole_file.l_whence = SEEK_SET;
  const bool locked = fcntl(stats_fd, F_SETLKW, &whole_file) == 0;
  WriteReportHeader(stats_fd);
  tierpool_print_stats(stats_fd);
  if (locked) {
    whole_file.l_type = F_UNLCK;
    fcntl(stats_fd, F_SETLK, &whole_file);
  }
}

}  // namespace
