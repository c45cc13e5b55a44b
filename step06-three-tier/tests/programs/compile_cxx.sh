#!/usr/bin/env bash
# compile_cxx.sh COMPILER: a C++ compiler (clang++ in the tests) building and linking a small
# threaded program heavy in templates (maps, strings, regex, threads), then the program's output
# and a hash of the object file (a compiler is deterministic: the same bytes on any malloc). Run
# by dropin_same_output.sh, so the compiler's every process is preloaded. Debian's clang 14
# crashed here on its first file when a 40-byte `operator new` came back 8-aligned: its libraries
# store into such blocks with aligned 16-byte moves (movaps; src/dropin.h).
set -euo pipefail
cxx=$1

cat >program.cpp <<'CPP'
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

int main() {
  std::vector<std::size_t> sizes(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&sizes, t] {
      std::map<std::string, std::vector<int>> table;
      for (int i = 0; i < 50000; ++i) {
        table[std::to_string(i * 7919 % 100003 + t)].push_back(i);
        if (table.size() > 5000) table.erase(table.begin());
      }
      sizes[t] = table.size();
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  const std::regex words("([a-z]+)=([0-9]+)");
  const std::string text = "alpha=1 beta=22 gamma=333";
  int matches = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), words);
       it != std::sregex_iterator(); ++it)
    ++matches;
  std::cout << sizes[0] << " " << sizes[3] << " " << matches << "\n";
}
CPP
"$cxx" -std=c++20 -O1 -pthread -c program.cpp -o program.o
echo "object: $(sha256sum <program.o)"
"$cxx" -pthread program.o -o program
./program
