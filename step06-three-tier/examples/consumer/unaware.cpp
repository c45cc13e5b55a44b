// Knows nothing of tierpool: prints which library serves its malloc (run it with LD_PRELOAD).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main() {
  std::string text(1000, 'x');  // some ordinary allocating work
  Dl_info info{};
  void* symbol = dlsym(RTLD_DEFAULT, "malloc");
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return 1;
  std::printf("malloc served by %s (%zu bytes of text)\n", info.dli_fname, text.size());
  return 0;
}
