// Prints the size-class table the allocator is compiled with, and what each class wastes:
//   rounding  worst case of (class size - request) / class size, over the requests of the class
//   tail      bytes left over at the end of a span, as a share of the span
// Usage: size_class_table [--markdown]
#include <cstdio>
#include <cstring>

#include "size_class.h"

int main(int argc, char** argv) {
  using namespace tierpool::internal;
  const bool markdown = argc > 1 && std::strcmp(argv[1], "--markdown") == 0;
  const char* header =
      markdown ? "| class | size | pages | objects | batch | slots | rounding | tail |\n"
                 "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
               : "class     size  pages  objects  batch  slots  rounding    tail\n";
  std::fputs(header, stdout);
  double worst_rounding_above_64 = 0;
  double worst_tail = 0;
  std::size_t previous = 0;
  for (int cl = 1; cl < kNumClasses; ++cl) {
    const SizeClassInfo& c = kClasses[cl];
    const double rounding = double(c.size - (previous + 1)) / double(c.size);
    const std::size_t span = std::size_t{c.pages} * kPageSize;
    const double tail = double(span - std::size_t{c.objects} * c.size) / double(span);
    if (previous >= 64 && rounding > worst_rounding_above_64) worst_rounding_above_64 = rounding;
    if (tail > worst_tail) worst_tail = tail;
    std::printf(markdown ? "| %d | %u | %u | %u | %u | %u | %.1f %% | %.1f %% |\n"
                         : "%5d %8u %6u %8u %6u %6u %8.1f %% %6.1f %%\n",
                cl, c.size, c.pages, c.objects, c.batch, c.transfer_slots, rounding * 100,
                tail * 100);
    previous = c.size;
  }
  std::printf(
      "\n%d classes; worst rounding waste for requests over 64 B: %.1f %%; "
      "worst span tail: %.1f %%\n",
      kNumClasses - 1, worst_rounding_above_64 * 100, worst_tail * 100);
  return 0;
}
