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
//
// A fiber that holds its worker (runs without suspending: a lock held by a co-tenant fiber, a sleep, a
// blocking call) starves the other fibers of that worker, whose waits cannot even time out. So a watchdog
// thread of the scheduler (asleep unless a run is watched) reports such a hold from outside (holds(), and
// run()'s Watch): a warning at the collective warn time naming the holder and the replicas that have not run
// since, the execution's abort at the timeout (so replicas on other workers end), and, when the holder is
// still asleep in a futex at twice the timeout (a deadlock: nothing will ever wake it), a fatal error and the
// end of the process instead of a hang that prints nothing.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace weft::detail {

// A fiber holding its worker: task `task` has run without suspending for `held_s` seconds while the tasks
// `starved` (not yet returned) share its worker.
struct Hold {
  int worker = 0;
  int task = 0;
  double held_s = 0;
  std::vector<int> starved;
};

// What the watchdog does about a hold during a run. Zero times: never.
struct Watch {
  double warn_s = 0;
  double timeout_s = 0;
  std::function<std::string(int task)> name;           // "replica 3 (CpuDevice(id=3, process=0))"
  std::string execution;                               // "pmap(f)"
  // At the timeout, once per run, from the watchdog: the holder `task` failed with `report`.
  std::function<void(int task, const std::string& report)> abort;
};

// "replica 1 (...) has held fiber worker 0 for 2.0 s without reaching a collective or returning ...; replicas
// 0, 2, 3 share that worker and have not run since"
std::string describe_hold(const Hold& hold, const std::function<std::string(int task)>& name);

class FiberScheduler {
 public:
  // `threads` workers in all: the caller of run() and threads - 1 helpers started here.
  // `stack_bytes`: each fiber's stack (WEFT_FIBER_STACK).
  FiberScheduler(int threads, std::size_t stack_bytes);
  ~FiberScheduler();
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;

  // Runs every task as a fiber, task i on worker i * workers / tasks.size(), and returns once all have
  // returned. Tasks must not throw (they catch their own errors). One run at a time.
  void run(const std::vector<std::function<void()>>& tasks, const Watch& watch = {});
  // The fibers of the current run that have held their worker for at least `min_s` seconds while others of
  // that worker wait (any thread may ask).
  std::vector<Hold> holds(double min_s) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::detail
