// A library the process test loads with dlopen: it allocates when it is loaded (a static
// constructor), in its functions, in a thread_local (whose storage the dynamic loader allocates
// with malloc for a library loaded late), and when it is unloaded.
#include <stdlib.h>
#include <string.h>

#include <map>
#include <string>
#include <vector>

namespace {

std::map<int, std::string>* loaded_with = nullptr;

__attribute__((constructor)) void OnLoad() {
  loaded_with = new std::map<int, std::string>{{1, std::string(100, 'a')}, {2, "b"}};
}
__attribute__((destructor)) void OnUnload() {
  delete loaded_with;
  loaded_with = nullptr;
}

thread_local std::vector<std::string> per_thread;

}  // namespace

extern "C" __attribute__((visibility("default"))) char* dropin_plugin_make(size_t n) {
  char* text = static_cast<char*>(malloc(n));
  memset(text, 'p', n - 1);
  text[n - 1] = '\0';
  return text;
}

extern "C" __attribute__((visibility("default"))) void dropin_plugin_release(void* p) {
  free(p);
}

// Builds `n` strings in this thread's thread_local vector, then drops them; returns how many.
extern "C" __attribute__((visibility("default"))) int dropin_plugin_work(int n) {
  for (int i = 0; i < n; ++i)
    per_thread.emplace_back(static_cast<size_t>(20 + i % 200), 'w');
  const int made = static_cast<int>(per_thread.size());
  per_thread.clear();
  per_thread.shrink_to_fit();
  (*loaded_with)[3 + n] = std::to_string(n);
  return made;
}
