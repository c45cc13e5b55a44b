// Helpers shared by the core's tests.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "address_space_limit.h"  // common/testing
#include "tierpool/tierpool.h"

namespace core_test {

// Frees `blocks` every other one first (0, 2, 4, ..., then 1, 3, ...): no two frees in a row are
// neighbours, so the thread cache parks the batches it gives back in the transfer slots (a batch
// of neighbours the thread allocated itself goes to its spans instead: ReleaseArrayTop).
inline void FreeEveryOtherFirst(const std::vector<void*>& blocks, const auto& free_one) {
  for (std::size_t first : {0, 1}) {
    for (std::size_t i = first; i < blocks.size(); i += 2)
      free_one(blocks[i]);
  }
}

inline bool UnderValgrind() {
  const char* v = std::getenv("TIERPOOL_UNDER_VALGRIND");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// Forks with the allocator's handlers around the fork (as pthread_atfork would call them); the
// child runs `check`, writes its answer on a pipe and leaves. True if it answered true and exited
// normally.
inline bool ChildAnswers(const auto& check) {
  int answer_pipe[2];
  if (pipe(answer_pipe) != 0) return false;
  tierpool_fork_prepare();
  const pid_t pid = fork();
  if (pid == 0) {
    tierpool_fork_child();
    const char answer = check() ? 'y' : 'n';
    if (write(answer_pipe[1], &answer, 1) != 1) _exit(2);
    // Under valgrind the child's exit would run a leak search, and the blocks the parent's
    // other threads held at the fork have no owner here: leave without one.
    if (UnderValgrind()) raise(SIGKILL);
    _exit(0);
  }
  tierpool_fork_parent();
  close(answer_pipe[1]);
  char answer = 0;
  const bool said = pid > 0 && read(answer_pipe[0], &answer, 1) == 1 && answer == 'y';
  close(answer_pipe[0]);
  int status = 0;
  if (pid <= 0 || waitpid(pid, &status, 0) != pid) return false;
  return said && (UnderValgrind() || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

// config.h defines TIERPOOL_ASAN (to 0 outside ASan builds), so its value counts, not whether it
// is defined.
inline bool UnderSanitizer() {
#if (defined(TIERPOOL_ASAN) && TIERPOOL_ASAN) || (defined(TIERPOOL_TSAN) && TIERPOOL_TSAN)
  return true;
#else
  return false;
#endif
}

// Loop counts shrink under valgrind (threads run one at a time, ~30x slower) and the
// sanitizers (`sanitizer`: TSan and ASan, which are some 5-15x slower).
inline int Scaled(int normal, int sanitizer, int valgrind) {
  if (UnderValgrind()) return valgrind;
  if (UnderSanitizer()) return sanitizer;
  return normal;
}

// Resident set size of this process, from /proc/self/statm.
inline std::size_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  if (std::fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

inline std::size_t VirtualBytes() {
  return tierpool_testing::MappedBytes();
}

}  // namespace core_test
