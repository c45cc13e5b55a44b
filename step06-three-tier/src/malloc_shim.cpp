// The C allocation functions under their standard names: linked into libtierpool.so (for
// LD_PRELOAD, or linking it) and libtierpool.a (for linking statically), they replace glibc's
// malloc for the whole process. The rules they follow are in dropin.h; this file only names them,
// and hooks the allocator into the process's life: fork (pthread_atfork) and exit (the stats).
//
// Nothing here may run before the allocator can serve: the dynamic loader, libc and libstdc++ call
// malloc before any constructor of ours has run, and the allocator initializes itself on first use.
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
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

bool show_stats_at_exit = false;

// Runs when the library is loaded (or, linked statically, before the program's own constructors).
// pthread_atfork handlers run their `prepare` in reverse order of registration: registering this
// early makes ours run last, after every other library's prepare handler has done its allocating,
// and our `child` handler first, before theirs allocate in the child.
__attribute__((constructor(101))) void InstallProcessHooks() {
  pthread_atfork(tierpool_fork_prepare, tierpool_fork_parent, tierpool_fork_child);
  // getenv only reads environ: safe this early, and it does not allocate.
  const char* show = getenv("TIERPOOL_SHOW_STATS");
  show_stats_at_exit = show != nullptr && show[0] != '\0' && !(show[0] == '0' && show[1] == '\0');
}

// Runs after the program's atexit handlers and static destructors (they may still allocate), when
// the loader unloads us at exit. tierpool_print_stats writes with write(2) and never allocates.
__attribute__((destructor(101))) void PrintStatsAtExit() {
  if (show_stats_at_exit) tierpool_print_stats(STDERR_FILENO);
}

}  // namespace
