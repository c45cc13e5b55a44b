// Does the direction a heap hands out a class's blocks in matter to the program that uses them?
// A model of the `teardown` workload's blocks, without any allocator: BLOCKS blocks of 16 to 128
// bytes (uniform, the same draws as tests/programs/teardown.c), each size rounded up to a class
// of 16 bytes, each class's blocks side by side in a region of its own (what a heap of spans
// carves). The blocks are made in the program's order and placed either at rising addresses
// within their class (as a fresh span, or mimalloc's rebuilt page, hands them out) or at falling
// ones (as a thread cache hands back blocks that were freed in the order they were made). Per
// round and per direction, after a 64 MiB write that evicts the blocks:
//   build  each block stamped at both ends, in the order made;
//   read   each block's two stamps read back, in the same order.
// Rounds alternate the two directions; medians in ms, and the median of falling over rising.
// Usage: stream_order [ROUNDS [BLOCKS]]   (defaults: 21, 500000)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {
constexpr std::size_t kClasses = 8;  // 16 to 128 bytes
constexpr std::size_t kEvictBytes = std::size_t{64} << 20;

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 21;
  const long blocks = argc > 2 ? std::atol(argv[2]) : 500000;
  if (rounds < 1 || blocks < 1) {
    std::fprintf(stderr, "usage: stream_order [ROUNDS [BLOCKS]]\n");
    return 2;
  }
  std::vector<unsigned> sizes(static_cast<std::size_t>(blocks));
  std::vector<long> per_class(kClasses + 1, 0);
  std::srand(2100);  // teardown.c's seed and draws
  for (auto& size : sizes) {
    size = 16 + static_cast<unsigned>(std::rand()) % 113;
    ++per_class[(size + 15) / 16];
  }
  std::vector<std::vector<unsigned char>> regions(kClasses + 1);
  for (std::size_t c = 1; c <= kClasses; ++c)
    regions[c].assign(static_cast<std::size_t>(per_class[c]) * 16 * c, 1);  // resident
  std::vector<unsigned char> evict(kEvictBytes);
  std::vector<unsigned char*> where(sizes.size());
  std::vector<double> build[2], read[2], build_ratio, read_ratio;
  std::uint64_t sum = 0;
  for (int r = 0; r < 2 * rounds; ++r) {
    const int falling = r % 2;
    std::vector<long> next(kClasses + 1);
    for (std::size_t c = 1; c <= kClasses; ++c)
      next[c] = falling ? per_class[c] - 1 : 0;
    std::memset(evict.data(), r, evict.size());
    const double t0 = NowMs();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::size_t c = (sizes[i] + 15) / 16;
      const long k = falling ? next[c]-- : next[c]++;
      unsigned char* const p = regions[c].data() + static_cast<std::size_t>(k) * 16 * c;
      const std::uint64_t tag = i;
      std::memcpy(p, &tag, 8);
      std::memcpy(p + sizes[i] - 8, &tag, 8);
      where[i] = p;
    }
    const double t1 = NowMs();
    std::memset(evict.data(), r + 1, evict.size());
    const double t2 = NowMs();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::uint64_t head, tail;
      std::memcpy(&head, where[i], 8);
      std::memcpy(&tail, where[i] + sizes[i] - 8, 8);
      sum += head + tail;
    }
    const double t3 = NowMs();
    build[falling].push_back(t1 - t0);
    read[falling].push_back(t3 - t2);
    if (falling) {  // this round against the rising one just before it
      build_ratio.push_back(build[1].back() / build[0].back());
      read_ratio.push_back(read[1].back() / read[0].back());
    }
  }
  std::printf("%ld blocks, %d rounds each way; ms, medians\n", blocks, rounds);
  std::printf("direction  build   read\n");
  std::printf("rising    %6.2f %6.2f\n", Median(build[0]), Median(read[0]));
  std::printf("falling   %6.2f %6.2f\n", Median(build[1]), Median(read[1]));
  std::printf("ratio     %6.2f %6.2f  (falling over rising, pair by pair)\n", Median(build_ratio),
              Median(read_ratio));
  return sum == 1 ? 1 : 0;  // (keeps the reads)
}
