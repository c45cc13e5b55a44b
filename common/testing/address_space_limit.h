// Out-of-memory tests on a real refusal: the OS itself says no once this process's address space
// is capped with setrlimit(RLIMIT_AS), as it does on a machine that is out of memory. Each test
// does it in a death-test child, so the cap never reaches the test binary itself.
//
//   TEST_F(AddressSpaceLimitTest, PoolRecovers) { EXPECT_VERDICT_IN_CHILD(RunTheCheck()); }
//
// where RunTheCheck() makes an AddressSpaceCap, exhausts memory, lifts the cap, and returns ""
// when every expectation held or what went wrong (the parent shows it).
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tierpool_testing {

// Why capping the address space cannot work in this build or run, or nullptr when it can.
inline const char* AddressSpaceLimitUnusable() {
#if TIERPOOL_ASAN || TIERPOOL_TSAN || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return "ASan and TSan reserve terabytes of shadow address space: RLIMIT_AS cannot work";
#else
  const char* valgrind = std::getenv("TIERPOOL_UNDER_VALGRIND");
  if (valgrind != nullptr && valgrind[0] == '1') {
    return "valgrind serves memory from its own address space: RLIMIT_AS cannot work";
  }
  return nullptr;
#endif
}

// Bytes of address space this process has mapped now (/proc/self/statm).
inline std::size_t MappedBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long pages = 0;
  if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
  std::fclose(f);
  return pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// While alive (or until Lift()), this process may map only `headroom` bytes more than it has
// mapped now. Only the soft limit is lowered, so an unprivileged process can raise it back.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(std::size_t headroom) {
    active_ = getrlimit(RLIMIT_AS, &saved_) == 0;
    if (!active_) return;
    rlimit capped = saved_;
    capped.rlim_cur = MappedBytes() + headroom;
    active_ = setrlimit(RLIMIT_AS, &capped) == 0;
  }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;
  ~AddressSpaceCap() { Lift(); }

  // False if the limit could not be set: the test must not pass on an uncapped run.
  bool active() const { return active_; }
  void Lift() {
    if (active_) setrlimit(RLIMIT_AS, &saved_);
    active_ = false;
  }

 private:
  rlimit saved_{};
  bool active_ = false;
};

// Ends a death-test child: exit code 0 when `failure` is empty, else 1 with `failure` on stderr.
// _Exit: nothing of the test binary (static destructors, gtest's own state) runs in the child.
[[noreturn]] inline void ExitWithVerdict(const std::string& failure) {
  if (failure.empty()) std::_Exit(0);
  std::fprintf(stderr, "%s\n", failure.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// Skips where the cap cannot work; death tests re-execute the binary, so the child starts with
// the small address space of a fresh process.
class AddressSpaceLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* why = AddressSpaceLimitUnusable()) GTEST_SKIP() << why;
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

}  // namespace tierpool_testing

// Runs `verdict` (a std::string: empty when every expectation held) in a death-test child and
// expects it empty; otherwise the failure shows the child's message.
#define EXPECT_VERDICT_IN_CHILD(verdict) \
  EXPECT_EXIT(tierpool_testing::ExitWithVerdict(verdict), ::testing::ExitedWithCode(0), "")
