/* A C program run with LD_PRELOAD=libtierpool.so (tests/dropin_needs_libc.sh): it must start, be
 * served by tierpool, and have no C++ runtime in the process. Loading libstdc++ (and with it libm
 * and libgcc_s) into every preloaded C program costs each start-up time and resident memory for
 * code that a C program never calls.
 *
 * Built as C and linked by the C driver, so nothing but the preloaded library could bring a C++
 * runtime in. Exit status 0 when all holds; otherwise it says what did not. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int (*owns)(const void*);
static int failures;

static void Check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "dropin_c_program: FAILED: %s\n", what);
    ++failures;
  }
}

static int FindCxxRuntime(struct dl_phdr_info* info, size_t size, void* found) {
  (void)size;
  if (strstr(info->dlpi_name, "libstdc++") != NULL || strstr(info->dlpi_name, "libgcc_s") != NULL) {
    fprintf(stderr, "dropin_c_program: loaded: %s\n", info->dlpi_name);
    *(int*)found = 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  /* Not linked with tierpool: its API is found in the process, where only the preload put it. */
  owns = (int (*)(const void*))dlsym(RTLD_DEFAULT, "tierpool_owns");
  if (owns == NULL) {
    fprintf(stderr,
            "dropin_c_program: tierpool_owns not found: run with LD_PRELOAD=libtierpool.so\n");
    return 1;
  }

  int cxx_runtime = 0;
  dl_iterate_phdr(FindCxxRuntime, &cxx_runtime);
  Check(!cxx_runtime, "a C++ runtime is loaded in a C program");

  void* blocks[64];
  size_t count = 0;
  for (size_t n = 1; n < 3000000 && count < 60; n = n * 2 + 7) {
    char* p = malloc(n);
    Check(p != NULL && owns(p), "malloc did not come from tierpool");
    if (p == NULL) break;
    memset(p, 0x5a, n);
    blocks[count++] = p;
  }
  char* zeroed = calloc(1000, 8);
  Check(zeroed != NULL && owns(zeroed) && zeroed[7999] == 0, "calloc");
  zeroed = realloc(zeroed, 100000);
  Check(zeroed != NULL && owns(zeroed) && zeroed[7999] == 0, "realloc");
  free(zeroed);
  void* aligned = NULL;
  Check(posix_memalign(&aligned, 4096, 5000) == 0 && owns(aligned) &&
            ((unsigned long)aligned & 4095) == 0,
        "posix_memalign");
  free(aligned);
  for (size_t i = 0; i < count; ++i)
    free(blocks[i]);

  /* A C++ library opened now (tests/dropin_cxx_plugin.cpp) brings its runtime in: its operator
     new, out of memory, must run its new-handler and throw std::bad_alloc it can catch. */
  if (argc > 1) {
    void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    Check(plugin != NULL, "the C++ plugin does not load");
    if (plugin != NULL) {
      int (*out_of_memory)(void) = (int (*)(void))dlsym(plugin, "dropin_plugin_out_of_memory");
      Check(out_of_memory != NULL && out_of_memory() == 1,
            "a dlopened C++ library's operator new did not call its handler and throw bad_alloc");
    }
  }

  if (failures != 0) return 1;
  printf("a C program ran on tierpool (%zu blocks) with no C++ runtime loaded\n", count);
  return 0;
}
