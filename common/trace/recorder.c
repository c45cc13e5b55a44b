/* libtierpool_trace.so: records every allocation of a process into a trace file.
 *
 *   TIERPOOL_TRACE_DIR=dir LD_PRELOAD=libtierpool_trace.so program ...
 *
 * writes dir/<pid>.tptrace for the program and for every program it starts (LD_PRELOAD is
 * inherited): malloc, free, calloc, realloc, reallocarray, memalign, posix_memalign,
 * aligned_alloc, valloc, pvalloc and every operator new and delete, with the thread, the size, the
 * alignment, the block's id and a coarse clock (trace_format.h). `make trace PROG="..."` runs it
 * (scripts/trace.sh). It is not an allocator: every call is served by glibc's own malloc, through
 * the __libc_* names glibc exports for exactly this.
 *
 * One lock is held across each call and its record, so the order of the records is an order in
 * which the calls really happened: a block freed by one thread and handed to another by malloc is
 * freed first in the trace too. A hash table (mmap'd, never malloc'd) maps each live address to its
 * block id. Uncontended, a call costs the lock, a clock read from the vDSO, a table probe and a few
 * bytes appended to a 1 MiB buffer, written out with write(2) when full.
 *
 * What is not recorded: a forked child that does not exec (its heap is its parent's; after exec
 * the program is recorded afresh), calls after the process's destructors have begun (blocks still
 * live then count as never freed), and calls of a program that defines its own malloc.
 * Plain C and libc alone: it must load into any program. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "trace_format.h"

#define TP_EXPORT __attribute__((visibility("default")))
#define TP_TLS __thread __attribute__((tls_model("initial-exec")))

/* glibc's own allocator, under the names it exports for allocators that wrap it. */
extern void* __libc_malloc(size_t size);
extern void __libc_free(void* p);
extern void* __libc_calloc(size_t n, size_t size);
extern void* __libc_realloc(void* p, size_t size);
extern void* __libc_memalign(size_t align, size_t size);
extern void* __libc_valloc(size_t size);
extern void* __libc_pvalloc(size_t size);

/* ---- the lock ---------------------------------------------------------------------------------*/
static int tp_lock_word;

static void tp_lock(void) {
  while (__atomic_exchange_n(&tp_lock_word, 1, __ATOMIC_ACQUIRE) != 0) {
    while (__atomic_load_n(&tp_lock_word, __ATOMIC_RELAXED) != 0)
      sched_yield();
  }
}
static void tp_unlock(void) {
  __atomic_store_n(&tp_lock_word, 0, __ATOMIC_RELEASE);
}

/* ---- state (all under the lock) ---------------------------------------------------------------*/
enum { TP_UNINIT, TP_ON, TP_OFF };
static int tp_state = TP_UNINIT;
static int tp_fd = -1;
static unsigned char tp_buf[1 << 20];
static size_t tp_len;
static uint64_t tp_next_id, tp_ops, tp_unmatched, tp_failed;
static unsigned tp_threads;
static unsigned tp_last_thread = ~0u;
static uint64_t tp_last_ms;
static pid_t tp_pid;              /* the recorded process: a vfork child shares this memory */
static TP_TLS unsigned tp_thread; /* 1 + the thread's index; 0 before its first call */

/* Live address -> block id: linear probing, deletion by backward shift. */
static uintptr_t* tp_keys;
static uint64_t* tp_ids;
static size_t tp_cap, tp_count;

static void tp_flush(void) {
  size_t done = 0;
  while (done < tp_len && tp_fd >= 0) {
    ssize_t n = write(tp_fd, tp_buf + done, tp_len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { /* disk full: stop recording, the trace has no end and will be refused */
      tp_state = TP_OFF;
      break;
    }
    done += (size_t)n;
  }
  tp_len = 0;
}

static void tp_byte(unsigned v) {
  tp_buf[tp_len++] = (unsigned char)v;
}
static void tp_varint(uint64_t v) {
  while (v >= 0x80) {
    tp_byte((unsigned)(v & 0x7f) | 0x80);
    v >>= 7;
  }
  tp_byte((unsigned)v);
}

static size_t tp_slot(uintptr_t key) {
  return (size_t)(((uint64_t)key >> 4) * 0x9E3779B97F4A7C15ull) & (tp_cap - 1);
}

static int tp_table_grow(void) {
  size_t cap = tp_cap ? tp_cap * 2 : (size_t)1 << 16;
  uintptr_t* keys =
      mmap(NULL, cap * sizeof *keys, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint64_t* ids =
      mmap(NULL, cap * sizeof *ids, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (keys == MAP_FAILED || ids == MAP_FAILED) return 0;
  uintptr_t* old_keys = tp_keys;
  uint64_t* old_ids = tp_ids;
  size_t old_cap = tp_cap;
  tp_keys = keys;
  tp_ids = ids;
  tp_cap = cap;
  for (size_t i = 0; i < old_cap; ++i) {
    if (old_keys[i] == 0) continue;
    size_t s = tp_slot(old_keys[i]);
    while (tp_keys[s] != 0)
      s = (s + 1) & (tp_cap - 1);
    tp_keys[s] = old_keys[i];
    tp_ids[s] = old_ids[i];
  }
  if (old_cap) {
    munmap(old_keys, old_cap * sizeof *old_keys);
    munmap(old_ids, old_cap * sizeof *old_ids);
  }
  return 1;
}

static void tp_table_put(uintptr_t key, uint64_t id) {
  if ((tp_count + 1) * 2 > tp_cap && !tp_table_grow()) {
    tp_state = TP_OFF;
    return;
  }
  size_t s = tp_slot(key);
  while (tp_keys[s] != 0 && tp_keys[s] != key)
    s = (s + 1) & (tp_cap - 1);
  if (tp_keys[s] == 0) ++tp_count;
  tp_keys[s] = key; /* a key still live would be a missed free: the newer block wins */
  tp_ids[s] = id;
}

/* Removes `key`; returns its id + 1, or 0 when it is not there. */
static uint64_t tp_table_take(uintptr_t key) {
  if (tp_cap == 0) return 0;
  size_t s = tp_slot(key);
  while (tp_keys[s] != key) {
    if (tp_keys[s] == 0) return 0;
    s = (s + 1) & (tp_cap - 1);
  }
  uint64_t id = tp_ids[s];
  tp_keys[s] = 0;
  --tp_count;
  /* Backward shift: move up every entry of the run that the hole would hide from its slot. */
  for (size_t next = (s + 1) & (tp_cap - 1); tp_keys[next] != 0; next = (next + 1) & (tp_cap - 1)) {
    size_t home = tp_slot(tp_keys[next]);
    if (((next - home) & (tp_cap - 1)) >= ((next - s) & (tp_cap - 1))) {
      tp_keys[s] = tp_keys[next];
      tp_ids[s] = tp_ids[next];
      tp_keys[next] = 0;
      s = next;
    }
  }
  return id + 1;
}

static uint64_t tp_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void tp_write_end(void) {
  tp_byte(TP_OP_END);
  tp_varint(tp_ops);
  tp_varint(tp_next_id);
  tp_varint(tp_threads);
  tp_varint(tp_unmatched);
  tp_varint(tp_failed);
  tp_flush();
}

static void tp_fork_prepare(void) {
  tp_lock();
  if (tp_state == TP_ON) tp_flush(); /* else the child would write the parent's records again */
}
static void tp_fork_parent(void) {
  tp_unlock();
}
static void tp_fork_child(void) {
  if (tp_fd >= 0) close(tp_fd);
  tp_fd = -1;
  tp_state = TP_OFF;
  tp_unlock();
}

/* Under the lock: opens dir/<pid>.tptrace and writes the header. */
static void tp_start(void) {
  tp_state = TP_OFF;
  const char* dir = getenv("TIERPOOL_TRACE_DIR");
  char path[4096];
  int n = snprintf(path, sizeof path, "%s/%ld.tptrace", dir && *dir ? dir : ".", (long)getpid());
  if (n <= 0 || (size_t)n >= sizeof path) return;
  tp_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (tp_fd < 0) return;
  char cmdline[256];
  ssize_t len = 0;
  int cfd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (cfd >= 0) {
    len = read(cfd, cmdline, sizeof cmdline - 1);
    close(cfd);
  }
  if (len < 0) len = 0;
  while (len > 0 && cmdline[len - 1] == '\0')
    --len;
  for (ssize_t i = 0; i < len; ++i)
    if (cmdline[i] == '\0') cmdline[i] = ' ';
  memcpy(tp_buf, TP_TRACE_MAGIC, TP_TRACE_MAGIC_BYTES);
  tp_len = TP_TRACE_MAGIC_BYTES;
  tp_varint((uint64_t)len);
  memcpy(tp_buf + tp_len, cmdline, (size_t)len);
  tp_len += (size_t)len;
  tp_pid = getpid();
  tp_last_ms = tp_now_ms();
  pthread_atfork(tp_fork_prepare, tp_fork_parent, tp_fork_child);
  tp_state = TP_ON;
}

/* Under the lock: the thread and clock records a call needs before its own. False when the
 * recorder is off. */
static int tp_begin(void) {
  if (tp_state == TP_UNINIT) tp_start();
  if (tp_state != TP_ON) return 0;
  if (tp_len > sizeof tp_buf - 64) tp_flush();
  if (tp_thread == 0) tp_thread = ++tp_threads;
  if (tp_thread - 1 != tp_last_thread) {
    tp_last_thread = tp_thread - 1;
    tp_byte(TP_OP_THREAD);
    tp_varint(tp_last_thread);
  }
  uint64_t ms = tp_now_ms();
  if (ms > tp_last_ms) {
    tp_byte(TP_OP_TIME);
    tp_varint(ms - tp_last_ms);
    tp_last_ms = ms;
  }
  return 1;
}

static unsigned tp_log2(size_t align) {
  unsigned k = 0;
  while (((size_t)1 << k) < align)
    ++k;
  return k;
}

/* Under the lock, after the call: a new block (p == NULL: a failed call, counted). */
static void tp_alloc_record(int op, void* p, size_t size, size_t align) {
  if (p == NULL) {
    ++tp_failed;
    return;
  }
  if (!tp_begin()) return;
  tp_byte((unsigned)op);
  tp_varint(size);
  if (op >= TP_OP_MEMALIGN && op <= TP_OP_NEW_ALIGNED_ARRAY) tp_byte(tp_log2(align));
  tp_table_put((uintptr_t)p, tp_next_id++);
  ++tp_ops;
}

/* Under the lock, before the call: the block that p names, as `next id - id`, or 0. */
static uint64_t tp_back(void* p) {
  uint64_t id1 = tp_table_take((uintptr_t)p);
  if (id1 == 0) ++tp_unmatched;
  return id1 == 0 ? 0 : tp_next_id - (id1 - 1);
}

static void tp_free_record(int op, void* p) {
  if (p == NULL || !tp_begin()) return;
  uint64_t back = tp_back(p);
  if (back == 0) return;
  tp_byte((unsigned)op);
  tp_varint(back);
  ++tp_ops;
}

static void* tp_alloc(int op, size_t size, size_t align) {
  tp_lock();
  void* p;
  switch (op) {
    case TP_OP_CALLOC:
      p = __libc_calloc(1, size);
      break;
    case TP_OP_VALLOC:
      p = __libc_valloc(size);
      break;
    case TP_OP_PVALLOC:
      p = __libc_pvalloc(size);
      break;
    default:
      p = align ? __libc_memalign(align, size) : __libc_malloc(size);
      break;
  }
  if (tp_state != TP_OFF) tp_alloc_record(op, p, size, align);
  tp_unlock();
  return p;
}

static void tp_free(int op, void* p) {
  tp_lock();
  if (tp_state != TP_OFF) tp_free_record(op, p);
  __libc_free(p);
  tp_unlock();
}

/* ---- malloc and friends -----------------------------------------------------------------------*/
TP_EXPORT void* malloc(size_t size) {
  return tp_alloc(TP_OP_MALLOC, size, 0);
}
TP_EXPORT void free(void* p) {
  tp_free(TP_OP_FREE, p);
}
TP_EXPORT void* calloc(size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return tp_alloc(TP_OP_CALLOC, bytes, 0);
}
TP_EXPORT void* realloc(void* p, size_t size) {
  tp_lock();
  void* q = __libc_realloc(p, size);
  if (tp_state != TP_OFF && tp_begin()) {
    if (p != NULL && size == 0 && q == NULL) { /* glibc frees p */
      uint64_t back = tp_back(p);
      if (back != 0) {
        tp_byte(TP_OP_FREE);
        tp_varint(back);
        ++tp_ops;
      }
    } else if (q == NULL) {
      ++tp_failed; /* p is untouched */
    } else {
      uint64_t back = p ? tp_back(p) : 0;
      tp_byte(TP_OP_REALLOC);
      tp_varint(back);
      tp_varint(size);
      tp_table_put((uintptr_t)q, tp_next_id++);
      ++tp_ops;
    }
  }
  tp_unlock();
  return q;
}
TP_EXPORT void* reallocarray(void* p, size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, bytes);
}
static int tp_bad_align(size_t align) {
  return align == 0 || (align & (align - 1)) != 0;
}
TP_EXPORT void* memalign(size_t align, size_t size) {
  if (tp_bad_align(align)) {
    errno = EINVAL;
    return NULL;
  }
  return tp_alloc(TP_OP_MEMALIGN, size, align);
}
TP_EXPORT int posix_memalign(void** out, size_t align, size_t size) {
  if (tp_bad_align(align) || align % sizeof(void*) != 0) return EINVAL;
  void* p = tp_alloc(TP_OP_POSIX_MEMALIGN, size, align);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
TP_EXPORT void* aligned_alloc(size_t align, size_t size) {
  if (tp_bad_align(align)) {
    errno = EINVAL;
    return NULL;
  }
  return tp_alloc(TP_OP_ALIGNED_ALLOC, size, align);
}
TP_EXPORT void* valloc(size_t size) {
  return tp_alloc(TP_OP_VALLOC, size, 4096);
}
TP_EXPORT void* pvalloc(size_t size) {
  return tp_alloc(TP_OP_PVALLOC, size, 4096);
}

/* ---- operator new and delete (the Itanium C++ ABI's names) ------------------------------------
 * A failed new must call the new-handler and throw std::bad_alloc, which C cannot do: that rare
 * path is handed to the next definition (libstdc++'s), which retries with malloc (recorded as one)
 * and throws. This file is built with -fexceptions, so the exception can pass through it. */
static void* tp_next(const char* name) {
  return dlsym(RTLD_NEXT, name);
}
typedef void* (*tp_new_fn)(size_t);
typedef void* (*tp_new_nothrow_fn)(size_t, const void*);
typedef void* (*tp_new_aligned_fn)(size_t, size_t);
typedef void* (*tp_new_aligned_nothrow_fn)(size_t, size_t, const void*);

#define TP_NEW(name, op)                                                           \
  TP_EXPORT void* name(size_t size) {                                              \
    void* p = tp_alloc(op, size, 0);                                               \
    return p ? p : ((tp_new_fn)tp_next(#name))(size);                              \
  }                                                                                \
  TP_EXPORT void* name##RKSt9nothrow_t(size_t size, const void* nt) {              \
    void* p = tp_alloc(op, size, 0);                                               \
    return p ? p : ((tp_new_nothrow_fn)tp_next(#name "RKSt9nothrow_t"))(size, nt); \
  }
TP_NEW(_Znwm, TP_OP_NEW)
TP_NEW(_Znam, TP_OP_NEW_ARRAY)

#define TP_NEW_ALIGNED(name, op)                                                                  \
  TP_EXPORT void* name(size_t size, size_t align) {                                               \
    void* p = tp_bad_align(align) ? NULL : tp_alloc(op, size, align);                             \
    return p ? p : ((tp_new_aligned_fn)tp_next(#name))(size, align);                              \
  }                                                                                               \
  TP_EXPORT void* name##RKSt9nothrow_t(size_t size, size_t align, const void* nt) {               \
    void* p = tp_bad_align(align) ? NULL : tp_alloc(op, size, align);                             \
    return p ? p : ((tp_new_aligned_nothrow_fn)tp_next(#name "RKSt9nothrow_t"))(size, align, nt); \
  }
TP_NEW_ALIGNED(_ZnwmSt11align_val_t, TP_OP_NEW_ALIGNED)
TP_NEW_ALIGNED(_ZnamSt11align_val_t, TP_OP_NEW_ALIGNED_ARRAY)

/* Every delete: plain, sized, nothrow, aligned; the extra arguments change nothing here. */
#define TP_UNUSED __attribute__((unused))
#define TP_DELETE(name, op, ...)              \
  TP_EXPORT void name(void* p, __VA_ARGS__) { \
    tp_free(op, p);                           \
  }
TP_EXPORT void _ZdlPv(void* p) {
  tp_free(TP_OP_DELETE, p);
}
TP_EXPORT void _ZdaPv(void* p) {
  tp_free(TP_OP_DELETE_ARRAY, p);
}
TP_DELETE(_ZdlPvm, TP_OP_DELETE, TP_UNUSED size_t a)
TP_DELETE(_ZdaPvm, TP_OP_DELETE_ARRAY, TP_UNUSED size_t a)
TP_DELETE(_ZdlPvRKSt9nothrow_t, TP_OP_DELETE, TP_UNUSED const void* a)
TP_DELETE(_ZdaPvRKSt9nothrow_t, TP_OP_DELETE_ARRAY, TP_UNUSED const void* a)
TP_DELETE(_ZdlPvSt11align_val_t, TP_OP_DELETE, TP_UNUSED size_t a)
TP_DELETE(_ZdaPvSt11align_val_t, TP_OP_DELETE_ARRAY, TP_UNUSED size_t a)
TP_DELETE(_ZdlPvmSt11align_val_t, TP_OP_DELETE, TP_UNUSED size_t a, TP_UNUSED size_t b)
TP_DELETE(_ZdaPvmSt11align_val_t, TP_OP_DELETE_ARRAY, TP_UNUSED size_t a, TP_UNUSED size_t b)
TP_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, TP_OP_DELETE, TP_UNUSED size_t a,
          TP_UNUSED const void* b)
TP_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, TP_OP_DELETE_ARRAY, TP_UNUSED size_t a,
          TP_UNUSED const void* b)

/* ---- start and end ----------------------------------------------------------------------------*/
static void tp_finish(void) {
  tp_lock();
  if (tp_state == TP_ON && getpid() == tp_pid) {
    tp_write_end();
    close(tp_fd);
    tp_fd = -1;
  }
  if (getpid() == tp_pid) tp_state = TP_OFF;
  tp_unlock();
}

__attribute__((constructor)) static void tp_constructor(void) {
  tp_lock();
  if (tp_state == TP_UNINIT) tp_start();
  tp_unlock();
}
__attribute__((destructor)) static void tp_destructor(void) {
  tp_finish();
}

/* A program that ends with _exit skips the destructors: end its trace first. */
TP_EXPORT void _exit(int status) {
  tp_finish();
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}
TP_EXPORT void _Exit(int status) {
  _exit(status);
}
