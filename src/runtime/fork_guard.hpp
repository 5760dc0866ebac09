// fork() and runtimes. A forked child has only the thread that called fork(): a runtime made before it has
// lost its workers (device threads, fiber helpers) and may hold locks they held, so a pmap on it would wait
// forever for replicas nobody runs (Python 3.11's multiprocessing forks by default). So every runtime
// remembers the process it was made in; in a forked child:
//  - an execution on a runtime made before the fork is refused at once (refuse_if_forked), naming both
//    processes and what to do instead;
//  - Runtime::current() (what pmap uses when no runtime is named, and the Python module's runtime) makes a
//    fresh runtime with the same options, so that code which never names a runtime simply works;
//  - destroying a runtime made before the fork frees nothing (its threads are not there to be joined).
#pragma once
#include <string>

namespace weft::detail {

// The process a runtime is made in: its pid and how many forks deep it is (0 in a process that was not
// forked since weft was loaded).
struct ProcessStamp {
  int pid = 0;
  unsigned forks = 0;
};
ProcessStamp this_process();
// True when `made_in` is not this process: this is a child forked since.
bool forked_since(const ProcessStamp& made_in);
// Throws InvalidArgument "<what>: this weft runtime was made by process P; this is a child (pid C) forked from
// it, ..." when forked_since(made_in).
void refuse_if_forked(const ProcessStamp& made_in, const std::string& what);

}  // namespace weft::detail
