// WEFT_SCHEDULER=fibers: the replicas of an execution run as stackful fibers (Boost.Context) on at most as
// many OS threads as there are cores, instead of one OS thread per device.
//
// Why: with more devices than cores, one thread per device pays a futex wake and a context switch per replica
// per collective, and a pmap call wakes and joins every device thread. With fibers, replicas that share a
// worker meet by switching stacks (tens of nanoseconds), and the workers meet once per collective.
//
// How: a run splits its tasks into contiguous blocks, one per worker, so neighbouring replicas (the members
// of most groups) share a thread; the calling thread is worker 0, helper threads the others. A worker resumes
// its fibers in turn; a fiber runs until it waits (transport::WaitQueue suspends it) or returns. When a whole
// pass makes no progress the worker waits on the process-wide wake epoch: spinning briefly when the workers
// do not outnumber the cores, then sleeping, so an idle or oversubscribed machine burns no CPU.
//
// What a fiber sees (docs/design.md "Schedulers"): the runtime's own thread-locals (the device's memory
// account, the log's replica tag, the current execution) are switched with the fiber; the user's own
// thread_locals are shared by the replicas of a worker, and a blocking system call or a lock held across a
// collective stalls every replica of its worker.
#pragma once
#include <functional>
#include <memory>
#include <vector>

namespace weft::detail {

class FiberScheduler {
 public:
  // `threads` workers in all: the caller of run() and threads - 1 helpers started here.
  explicit FiberScheduler(int threads);
  ~FiberScheduler();
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;

  // Runs every task as a fiber, task i on worker i * workers / tasks.size(), and returns once all have
  // returned. Tasks must not throw (they catch their own errors). One run at a time.
  void run(const std::vector<std::function<void()>>& tasks);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::detail
