// Runs a piece of a test in a forked child, for what may hang or end the process (fork after a runtime ran,
// a deadlock the runtime ends the process for): the parent bounds its time and reads its exit status and
// what it wrote to stderr.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace weft::testing {

// ThreadSanitizer cannot start threads in a child forked from a multi-threaded process (its own background
// thread counts), so a child that makes a runtime dies: such tests skip under it.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kChildrenMayStartThreads = false;
#else
inline constexpr bool kChildrenMayStartThreads = true;
#endif

struct ChildResult {
  static constexpr int kTimedOut = -1;
  int status = kTimedOut;  // the exit status; kTimedOut when killed at the bound; 200 + N for signal N
  double seconds = 0;      // from fork to exit
  std::string stderr_text; // when a stderr file was given
};

// Forks; the child runs `child` (its return value is the exit status; an exception: 100) and exits without
// running the parent's atexit handlers. With `stderr_file`, the child's stderr goes there and comes back in
// the result. The parent waits at most `bound`, then kills the child.
inline ChildResult RunInForkedChild(const std::function<int()>& child, std::chrono::seconds bound,
                                    const std::string& stderr_file = "") {
  std::fflush(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) return {-2, 0, "fork failed"};
  if (pid == 0) {
    if (!stderr_file.empty() && !std::freopen(stderr_file.c_str(), "w", stderr)) ::_exit(101);
    int code = 100;
    try {
      code = child();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: unexpected %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  ChildResult result;
  const auto until = start + bound;
  int status = 0;
  bool killed = false;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      killed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!killed) result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
  if (!stderr_file.empty()) {
    std::ifstream in(stderr_file);
    std::stringstream text;
    text << in.rdbuf();
    result.stderr_text = text.str();
  }
  return result;
}

}  // namespace weft::testing
