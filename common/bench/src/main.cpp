// The one main() of every step's benchmark binary.
//
//   <binary>                               Google Benchmark over every registered entry
//   <binary> --tierpool_smoke              every entry once, tiny (a test: it must not crash)
//   <binary> --tierpool_count=NAME --tierpool_rounds=N
//                                          one entry for exactly N rounds, untimed: what the
//                                          runner puts under callgrind to count instructions
//   <binary> --tierpool_malloc_provider    which shared object really serves malloc here
//
// Counters of every entry in the JSON: ns_per_pair, pairs_per_iteration, peak_rss_kib (VmHWM
// after the last repetition), and whatever the workload measured itself (RunResult::counters,
// e.g. end_rss_kib, the resident set at the end of the big-block workloads).
//
// Google Benchmark's own flags (--benchmark_filter, --benchmark_repetitions, ...) pass through.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "tierpool_bench/harness.h"

namespace tierpool::bench {
namespace {

// The file of the object that the dynamic linker binds `malloc` to. With LD_PRELOAD this is the
// preloaded library: the runner checks it, so a row named "jemalloc" can never be glibc.
std::string MallocProvider() {
  void* symbol = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) {
    return "unknown";
  }
  return info.dli_fname;
}

// The process's peak resident set so far (VmHWM), in KiB. Measured here, not by the runner's
// wait4(): the kernel's ru_maxrss of a child includes what its parent (the Python runner) had
// resident when it forked, so every row below the runner's own size read as the runner's size.
double PeakRssKiB() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0.0;
  char line[256];
  double kib = 0.0;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) {
      kib = std::strtod(line + 6, nullptr);
      break;
    }
  }
  std::fclose(status);
  return kib;
}

void RunGoogleBenchmark(int argc, char** argv) {
  for (const Entry& entry : Registry()) {
    benchmark::internal::Benchmark* benchmark =
        benchmark::RegisterBenchmark(entry.Name().c_str(), [&entry](benchmark::State& state) {
          Session session = entry.open();
          std::uint64_t pairs = 0;
          std::uint64_t wall_ns = 0;
          std::vector<std::pair<std::string, double>> counters;
          for (auto _ : state) {
            RunResult result = session(RunOptions{});
            if (!result.skipped.empty()) {
              state.SkipWithError(("skipped: " + result.skipped).c_str());
              break;
            }
            state.SetIterationTime(double(result.wall_ns) * 1e-9);
            pairs += result.pairs;
            wall_ns += result.wall_ns;
            counters = std::move(result.counters);
          }
          state.counters["ns_per_pair"] = pairs ? double(wall_ns) / double(pairs) : 0.0;
          state.counters["pairs_per_iteration"] =
              state.iterations() ? double(pairs) / double(state.iterations()) : 0.0;
          state.counters["peak_rss_kib"] = PeakRssKiB();
          for (const auto& [name, value] : counters)
            state.counters[name] = value;
        });
    benchmark->UseManualTime()->Unit(benchmark::kMillisecond);
    // Overrides --benchmark_repetitions and --benchmark_min_time for this entry only.
    if (entry.one_shot) benchmark->Iterations(1)->Repetitions(1);
  }
  benchmark::AddCustomContext("malloc_provider", MallocProvider());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) std::exit(2);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}

int RunSmoke() {
  for (const Entry& entry : Registry()) {
    RunOptions options;
    options.smoke = true;
    RunResult result = entry.open()(options);
    if (!result.skipped.empty()) {
      std::printf("smoke %-45s skipped: %s\n", entry.Name().c_str(), result.skipped.c_str());
      continue;
    }
    std::printf("smoke %-45s %10llu pairs\n", entry.Name().c_str(),
                static_cast<unsigned long long>(result.pairs));
    if (result.pairs == 0) {
      std::fprintf(stderr, "smoke: %s did no work\n", entry.Name().c_str());
      return 1;
    }
  }
  std::printf("smoke: %zu entries ran\n", Registry().size());
  return Registry().empty() ? 1 : 0;
}

int RunCount(std::string_view name, int rounds) {
  for (const Entry& entry : Registry()) {
    if (entry.Name() != name) continue;
    RunOptions options;
    options.rounds = rounds;
    RunResult result = entry.open()(options);
    if (!result.skipped.empty()) {
      std::printf("skipped: %s\n", result.skipped.c_str());
      return 0;
    }
    std::printf("pairs %llu\n", static_cast<unsigned long long>(result.pairs));
    for (const auto& [counter, value] : result.counters)
      std::printf("%s %.17g\n", counter.c_str(), value);
    return 0;
  }
  std::fprintf(stderr, "no benchmark named %.*s\n", int(name.size()), name.data());
  return 2;
}

}  // namespace
}  // namespace tierpool::bench

int main(int argc, char** argv) {
  using namespace tierpool::bench;
  std::string count_name;
  int rounds = 1;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--tierpool_smoke") return RunSmoke();
    if (arg == "--tierpool_malloc_provider") {
      std::printf("%s\n", MallocProvider().c_str());
      return 0;
    }
    if (arg.starts_with("--tierpool_count=")) {
      count_name = arg.substr(std::strlen("--tierpool_count="));
    } else if (arg.starts_with("--tierpool_rounds=")) {
      rounds = std::atoi(argv[i] + std::strlen("--tierpool_rounds="));
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (!count_name.empty()) return RunCount(count_name, rounds);
  int rest_argc = int(rest.size());
  RunGoogleBenchmark(rest_argc, rest.data());
  return 0;
}
