// fork() and runtimes (fork_guard.hpp): a fork counter bumped in every child by a pthread_atfork handler.
#include "runtime/fork_guard.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include "weft/error.hpp"

namespace weft::detail {
namespace {

std::atomic<unsigned> g_forks{0};

void in_child() { g_forks.fetch_add(1, std::memory_order_relaxed); }

// Registered when weft is loaded, before any runtime can exist.
const int g_registered = pthread_atfork(nullptr, nullptr, in_child);

}  // namespace

ProcessStamp this_process() {
  (void)g_registered;
  return {static_cast<int>(getpid()), g_forks.load(std::memory_order_relaxed)};
}

bool forked_since(const ProcessStamp& made_in) { return made_in.forks != g_forks.load(std::memory_order_relaxed); }

void refuse_if_forked(const ProcessStamp& made_in, const std::string& what) {
  if (!forked_since(made_in)) return;
  throw InvalidArgument(what + ": this weft runtime was made by process " + std::to_string(made_in.pid) +
                        "; this is a child (pid " + std::to_string(getpid()) +
                        ") forked from it, and a runtime's worker threads do not survive fork(). Make a new "
                        "runtime in the child (in Python, weft.init() or just weft.pmap: the default runtime "
                        "is made afresh in a child), or start children with multiprocessing's 'spawn' or "
                        "'forkserver' method");
}

}  // namespace weft::detail
