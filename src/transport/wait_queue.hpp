// Waiting inside a replica, whichever scheduler runs it (docs/design.md "Schedulers").
//
// With WEFT_SCHEDULER=threads each replica is an OS thread and a wait is a condition-variable wait. With
// WEFT_SCHEDULER=fibers several replicas share a worker thread as stackful fibers: a replica that waits must
// hand its thread to the others instead of blocking it, and the thread itself may sleep only when none of its
// fibers can run. WaitQueue is the one waiting primitive the rendezvous uses, and it serves both: on a plain
// thread it is a condition variable; on a fiber it suspends the fiber through the FiberSuspender its worker
// installed. Every notify also moves a process-wide wake epoch, which is what a fiber worker sleeps on, so a
// worker whose fibers all wait is woken by any progress anywhere (the waits re-check their conditions).
//
// The scheduler that implements FiberSuspender lives in the runtime (runtime/fiber_scheduler.hpp); this
// layer defines only the interface it needs, so nothing here calls up.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace weft::transport {

using WaitClock = std::chrono::steady_clock;

// Implemented by a fiber worker: suspends the running fiber until the worker resumes it, which it does once
// the wake epoch has moved past `epoch` (read while the caller's condition was last seen false, under the
// lock its notifier holds) or at `deadline`. Spurious resumptions are allowed; callers re-check.
class FiberSuspender {
 public:
  virtual ~FiberSuspender() = default;
  virtual void suspend(WaitClock::time_point deadline, std::uint64_t epoch) = 0;
};

// The suspender of the fiber running on this thread, or null on a plain thread. Set by the fiber worker.
FiberSuspender*& current_fiber_suspender();

// The process-wide wake epoch: every WaitQueue::notify_all moves it. Notifiers change what waiters wait for
// and notify under one lock, so an epoch read under that lock misses no later change.
std::uint64_t wake_epoch();
// Blocks a fiber worker until the epoch moves past `seen` or `deadline` passes. `spin` first polls for up to
// that long (only worth it when the workers do not outnumber the cores).
void wait_for_wake(std::uint64_t seen, WaitClock::time_point deadline, std::chrono::nanoseconds spin);
// Moves the epoch and wakes sleeping fiber workers (also for wakes that do not come through a WaitQueue:
// a new task for a worker).
void signal_wake();

// Locks `lock` (not held). On a fiber, tries for a moment before blocking: the holder is another core's
// worker in a short critical section, and a futex sleep and wake per collective would cost more than the
// wait; on a plain thread (possibly one of more threads than cores) it is lock.lock().
void lock_briefly_spinning(std::unique_lock<std::mutex>& lock);

// Time this thread has spent waiting on other processes in place: the MPI transport's waits, which poll
// without suspending (the fiber holding a cross-process step keeps its thread while the partners answer; MPI
// progresses only inside MPI calls). The fiber scheduler takes it out of a slice's busy time: a wait is not
// work that more workers would share, and counted as work it kept two-instance jobs spread where one worker
// per process is 3x faster (docs/design.md "Schedulers"). A wait through WaitQueue (the in-process
// transport's) suspends the fiber instead, which the scheduler never counts, so it must not count here.
std::int64_t& interprocess_wait_ns();

// Counts the time from its construction to its destruction into interprocess_wait_ns().
class ScopedInterprocessWait {
 public:
  ScopedInterprocessWait() : start_(WaitClock::now()) {}
  ~ScopedInterprocessWait() {
    interprocess_wait_ns() += std::chrono::duration_cast<std::chrono::nanoseconds>(WaitClock::now() - start_).count();
  }
  ScopedInterprocessWait(const ScopedInterprocessWait&) = delete;
  ScopedInterprocessWait& operator=(const ScopedInterprocessWait&) = delete;

 private:
  WaitClock::time_point start_;
};

// Sleeps the calling replica for about `duration`: a fiber suspends (its worker runs the others meanwhile), a
// thread sleeps.
void sleep_replica(std::chrono::nanoseconds duration);

class WaitQueue {
 public:
  // Like condition_variable::wait_until on `lock` (held on entry and on return; spurious returns allowed).
  void wait_until(std::unique_lock<std::mutex>& lock, WaitClock::time_point deadline);
  void notify_all();

 private:
  std::condition_variable cv_;
};

}  // namespace weft::transport
