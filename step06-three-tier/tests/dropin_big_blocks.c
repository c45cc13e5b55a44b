/* dropin_big_blocks.c MODE: what a program does with big blocks and freed memory, through plain
 * malloc, so the same binary runs on glibc and preloaded with libtierpool.so
 * (dropin_big_blocks.sh sets the two side by side). Prints one number; exits non-zero when a
 * call fails or a block's contents are wrong.
 *   grow     a buffer realloc'ed from 64 KiB to 64 MiB in 64 KiB steps: how many times it moved
 *   calloc   calloc of 1 GiB, one byte written every 4 MiB: KiB that became resident
 *   release  1 GiB in 1 MiB and in 64 KiB blocks written, freed, then 300 ms of small malloc and
 *            free only: KiB resident above the start
 *   trim     as release, but malloc_trim(0) at once instead of the wait: KiB resident above start
 *   errno    64 successful malloc/calloc/realloc/aligned_alloc calls of big odd sizes, each with
 *            errno set before: how many changed it
 *   aslimit  under an address-space limit of 1 GiB more than now, ~900 MiB of 4000-byte blocks
 *            allocated and freed, then malloc(400 MiB): 1 if it worked, 0 if not
 *   threads  500 threads that each allocate and free 2000 blocks of 16..4111 bytes, then wait:
 *            KiB resident above the start while they wait, and after they exited ("idle,exited")
 *   startup  a short program's life: 200 blocks of 23 sizes from 8 bytes to 16 KiB, freed, stdio
 *            used: KiB of anonymous memory resident at the end (RssAnon: the allocator set up,
 *            the pages of the blocks first touched; not the libraries' pages, whose page faults
 *            depend on what the page cache holds and moved glibc's count by 20 between runs)
 *   idle     a program that never calls malloc: KiB of libtierpool's read-only data resident
 *            (0 on glibc); read with open/read alone, so nothing allocates */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)

static size_t statm_field(int field) {
  FILE* f = fopen("/proc/self/statm", "r");
  unsigned long v[2] = {0, 0};
  if (f == NULL || fscanf(f, "%lu %lu", &v[0], &v[1]) != 2) exit(90);
  fclose(f);
  return v[field] * 4;  // KiB (4 KiB pages)
}
/* A "Name:   N kB" line of /proc/self/status. */
static size_t status_kib(const char* name) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kib = 0;
  const size_t length = strlen(name);
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, name, length) == 0) kib = strtoul(line + length, NULL, 10);
  }
  if (f == NULL || kib == 0) exit(91);
  fclose(f);
  return kib;
}
static size_t resident_kib(void) {
  return statm_field(1);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void* must(void* p) {
  if (p == NULL) exit(91);
  return p;
}

static void small_traffic(double ms) {
  static void* live[1000];
  unsigned s = 1;
  const double end = now_ms() + ms;
  while (now_ms() < end) {
    for (int i = 0; i < 256; ++i) {
      s = s * 1103515245u + 12345u;
      unsigned k = (s >> 8) % 1000;
      free(live[k]);
      live[k] = must(malloc(16 + (s >> 4) % 497));
      *(char*)live[k] = 1;
    }
  }
}

static void fill_and_free(size_t block) {
  size_t n = 1024 * MIB / block;
  void** blocks = must(malloc(n * sizeof(void*)));
  for (size_t i = 0; i < n; ++i) {
    blocks[i] = must(malloc(block));
    memset(blocks[i], 1, block);
  }
  for (size_t i = 0; i < n; ++i)
    free(blocks[i]);
  free(blocks);
}

static pthread_barrier_t threads_done, threads_exit;

static void* thread_work(void* arg) {
  void* blocks[2000];
  unsigned s = (unsigned)(long)arg * 2654435761u + 1;
  for (int i = 0; i < 2000; ++i) {
    s = s * 1103515245u + 12345u;
    const size_t n = 16 + (s >> 8) % 4096;
    blocks[i] = must(malloc(n));
    memset(blocks[i], 1, n);
  }
  for (int i = 0; i < 2000; ++i)
    free(blocks[i]);
  pthread_barrier_wait(&threads_done);
  pthread_barrier_wait(&threads_exit);
  return NULL;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "grow") == 0) {
    unsigned char* buffer = NULL;
    int moves = 0;
    for (size_t size = 64 * KIB; size <= 64 * MIB; size += 64 * KIB) {
      unsigned char* grown = must(realloc(buffer, size));
      if (buffer != NULL && grown != buffer) ++moves;
      buffer = grown;
      for (size_t at = size - 64 * KIB; at < size; at += 4096)
        buffer[at] = (unsigned char)(at >> 12);
    }
    for (size_t at = 0; at < 64 * MIB; at += 4096)
      if (buffer[at] != (unsigned char)(at >> 12)) return 92;
    free(buffer);
    printf("%d\n", moves);
  } else if (strcmp(mode, "calloc") == 0) {
    const size_t before = resident_kib();
    unsigned char* table = must(calloc(1024, MIB));
    for (size_t at = 0; at < 1024 * MIB; at += 4 * MIB) {
      if (table[at] != 0) return 93;
      table[at] = 1;
    }
    printf("%zu\n", resident_kib() - before);
    free(table);
  } else if (strcmp(mode, "release") == 0 || strcmp(mode, "trim") == 0) {
    small_traffic(10);
    const size_t before = resident_kib();
    fill_and_free(MIB);
    fill_and_free(64 * KIB);
    if (strcmp(mode, "trim") == 0) {
      malloc_trim(0);
    } else {
      small_traffic(300);
    }
    const size_t after = resident_kib();
    printf("%zu\n", after > before ? after - before : 0);
  } else if (strcmp(mode, "errno") == 0) {
    int changed = 0;
    for (int i = 0; i < 64; ++i) {
      errno = 4242;
      void* p = must(malloc(64 * MIB + 1000 * (size_t)i + 1));
      void* q = must(calloc(3, 100000 + (size_t)i));
      void* r = must(aligned_alloc(2 * MIB, 4 * MIB));
      p = must(realloc(p, 96 * MIB + 3));
      free(p);
      free(q);
      free(r);
      changed += errno != 4242;
    }
    printf("%d\n", changed);
  } else if (strcmp(mode, "aslimit") == 0) {
    const rlim_t limit = statm_field(0) * KIB + 1024 * MIB;
    const struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 94;
    size_t n = 900 * MIB / 4000;
    void** blocks = must(malloc(n * sizeof(void*)));
    for (size_t i = 0; i < n; ++i) {
      blocks[i] = must(malloc(4000));
      memset(blocks[i], 5, 64);
    }
    for (size_t i = 0; i < n; ++i)
      free(blocks[i]);
    free(blocks);
    void* big = malloc(400 * MIB);
    if (big != NULL) memset(big, 1, 400 * MIB);
    printf("%d\n", big != NULL);
    free(big);
  } else if (strcmp(mode, "threads") == 0) {
    enum { kThreads = 500 };
    pthread_t threads[kThreads];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * KIB);
    pthread_barrier_init(&threads_done, NULL, kThreads + 1);
    pthread_barrier_init(&threads_exit, NULL, kThreads + 1);
    const size_t before = resident_kib();
    for (long i = 0; i < kThreads; ++i)
      if (pthread_create(&threads[i], &attr, thread_work, (void*)i) != 0) return 95;
    pthread_barrier_wait(&threads_done);
    small_traffic(300);
    const size_t idle = resident_kib();
    pthread_barrier_wait(&threads_exit);
    for (int i = 0; i < kThreads; ++i)
      pthread_join(threads[i], NULL);
    small_traffic(300);
    const size_t exited = resident_kib();
    printf("%zu,%zu\n", idle > before ? idle - before : 0, exited > before ? exited - before : 0);
  } else if (strcmp(mode, "startup") == 0) {
    void* blocks[200];
    for (int i = 0; i < 200; ++i) {
      const size_t size = (size_t)8 << (i % 23 / 2) | (size_t)(i % 23 & 1) * 4;
      blocks[i] = malloc(size);
      if (blocks[i] == NULL) return 96;
      memset(blocks[i], i, size);
    }
    for (int i = 0; i < 200; ++i)
      free(blocks[i]);
    printf("%zu\n", status_kib("RssAnon:"));
  } else if (strcmp(mode, "idle") == 0) {
    static char smaps[1 << 18];
    const int fd = open("/proc/self/smaps", O_RDONLY);
    size_t n = 0;
    for (ssize_t got; fd >= 0 && (got = read(fd, smaps + n, sizeof smaps - 1 - n)) > 0;)
      n += (size_t)got;
    smaps[n] = '\0';
    /* Each mapping's header line, then its fields: add the Rss of the library's read-only data
     * mappings (read-only, private, from an offset past the ELF headers). */
    long kib = 0;
    int counting = 0;
    for (char* line = smaps; *line != '\0';) {
      char* end = strchr(line, '\n');
      if (end != NULL) *end = '\0';
      if (strstr(line, "libtierpool") != NULL) {
        unsigned long offset = 0;
        char perms[5] = "";
        counting = sscanf(line, "%*x-%*x %4s %lx", perms, &offset) == 2 &&
                   strcmp(perms, "r--p") == 0 && offset != 0;
      } else if (strncmp(line, "Rss:", 4) == 0 && counting) {
        kib += strtol(line + 4, NULL, 10);
        counting = 0;
      }
      line = end != NULL ? end + 1 : line + strlen(line);
    }
    char out[32];
    const int len = snprintf(out, sizeof out, "%ld\n", kib);
    if (write(STDOUT_FILENO, out, (size_t)len) != len) return 97;
  } else {
    fprintf(stderr, "usage: %s grow|calloc|release|trim|errno|aslimit|threads|startup|idle\n",
            argv[0]);
    return 2;
  }
  return 0;
}
