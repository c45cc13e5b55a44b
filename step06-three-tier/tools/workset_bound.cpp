// What a heap of size classes holds on the `workset` workload, depending on where it keeps the
// free memory of a class: replays the benchmark's draws (the same seeds, slots and sizes as
// WorkingSetWorkload<WorksetParams>), the threads in lockstep (step i of every thread, then step
// i + 1), without allocating, and prints in MiB per thread count:
//   asked         the most bytes live at once, as asked
//   in use        the same, each block rounded up to its class (this allocator's table)
//   class         each class's most blocks live at once (all threads together), added up over the
//                 classes: what a heap holds whose free blocks of a class wait for that class but
//                 serve any thread at once
//   class/thread  each thread's most blocks live at once per class, added up over threads and
//                 classes: what a heap holds whose free blocks wait for their class and their
//                 thread (a thread cache that never shrinks)
//   no caches     a heap that sends every freed block back to its span and every emptied span to
//                 the page heap at once, whose pages any class then takes: the most spans' pages
//                 live at once (a block goes to its class's oldest span with room; free pages
//                 all alike: no fragmentation of the page heap counted)
// The lockstep is one interleaving of many; the per-thread column does not depend on it.
// Usage: workset_bound
#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "size_class.h"
#include "tierpool_bench/workload_stress.h"

namespace {

using namespace tierpool::internal;
namespace stress = tierpool::bench::stress;
using Params = tierpool::bench::WorksetParams;

constexpr double kMiB = 1024.0 * 1024.0;

// Blocks live per class, and the most there ever were.
struct ClassCounts {
  std::vector<std::size_t> live = std::vector<std::size_t>(kNumClasses, 0);
  std::vector<std::size_t> most = std::vector<std::size_t>(kNumClasses, 0);
  void Add(std::uint32_t cl) { most[cl] = std::max(most[cl], ++live[cl]); }
  double MostBytes() const {
    double bytes = 0;
    for (std::uint32_t cl = 1; cl < kNumClasses; ++cl)
      bytes += double(most[cl]) * double(ClassSize(cl));
    return bytes;
  }
};

// Spans of every class, one heap for all threads, without caches: pages live at once.
struct SpanHeap {
  std::vector<std::map<std::uint32_t, std::uint32_t>> spans{kNumClasses};  // number -> blocks
  std::uint32_t next = 0;
  std::size_t pages = 0, most_pages = 0;
  std::uint32_t Add(std::uint32_t cl) {
    auto& own = spans[cl];
    auto room = own.begin();  // numbers grow: the first span with room is the oldest
    while (room != own.end() && room->second == kClasses[cl].objects)
      ++room;
    if (room == own.end()) {
      room = own.emplace(next++, 0).first;
      pages += kClasses[cl].pages;
      most_pages = std::max(most_pages, pages);
    }
    ++room->second;
    return room->first;
  }
  void Remove(std::uint32_t cl, std::uint32_t span) {
    auto it = spans[cl].find(span);
    if (--it->second == 0) {
      spans[cl].erase(it);
      pages -= kClasses[cl].pages;
    }
  }
};

void Replay(int threads) {
  struct Live {
    std::uint32_t size = 0, cl = 0, span = 0;
  };
  std::vector<std::vector<std::uint32_t>> sizes, picks;
  std::vector<std::vector<Live>> sets(threads, std::vector<Live>(Params::kSlots));
  for (int t = 0; t < threads; ++t) {
    const unsigned seed = Params::kSeed + 100u * unsigned(t);
    sizes.push_back(
        stress::LogUniformDraws(Params::kSteps, Params::kMinSize, Params::kMaxSize, seed));
    picks.push_back(stress::UniformDraws(Params::kSteps, 0, Params::kSlots - 1, seed + 1));
  }
  ClassCounts all;
  std::vector<ClassCounts> own(threads);
  SpanHeap heap;
  std::size_t asked = 0, rounded = 0, most_asked = 0, most_rounded = 0;
  for (std::size_t i = 0; i < Params::kSteps; ++i) {
    for (int t = 0; t < threads; ++t) {
      Live& slot = sets[t][picks[t][i]];
      if (slot.size != 0) {
        asked -= slot.size;
        rounded -= ClassSize(slot.cl);
        --all.live[slot.cl];
        --own[t].live[slot.cl];
        heap.Remove(slot.cl, slot.span);
      }
      slot.size = sizes[t][i];
      slot.cl = static_cast<std::uint32_t>(SizeToClass(slot.size));
      asked += slot.size;
      rounded += ClassSize(slot.cl);
      most_asked = std::max(most_asked, asked);
      most_rounded = std::max(most_rounded, rounded);
      all.Add(slot.cl);
      own[t].Add(slot.cl);
      slot.span = heap.Add(slot.cl);
    }
  }
  double per_thread = 0;
  for (const ClassCounts& counts : own)
    per_thread += counts.MostBytes();
  std::printf("%7d %6.1f %7.1f %6.1f %13.1f %10.1f\n", threads, double(most_asked) / kMiB,
              double(most_rounded) / kMiB, all.MostBytes() / kMiB, per_thread / kMiB,
              double(heap.most_pages * kPageSize) / kMiB);
}

}  // namespace

int main() {
  std::printf("workset: %zu slots a thread, %zu steps, %zu B to %zu KiB (log-uniform); MiB\n",
              Params::kSlots, Params::kSteps, Params::kMinSize, Params::kMaxSize / 1024);
  std::printf("threads  asked  in use  class  class/thread  no caches\n");
  for (int threads : {2, 4})
    Replay(threads);
  return 0;
}
