// WaitQueue and the wake epoch fiber workers sleep on (why: wait_queue.hpp).
#include "transport/wait_queue.hpp"

#include <atomic>
#include <thread>

namespace weft::transport {
namespace {

struct Wake {
  std::atomic<std::uint64_t> epoch{0};
  std::atomic<int> sleepers{0};
  std::mutex mutex;
  std::condition_variable cv;
};

Wake& wake() {
  static Wake* w = new Wake();  // never destroyed: workers may outlive static destruction order
  return *w;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

FiberSuspender*& current_fiber_suspender() {
  thread_local FiberSuspender* suspender = nullptr;
  return suspender;
}

std::int64_t& interprocess_wait_ns() {
  thread_local std::int64_t waited = 0;
  return waited;
}

std::uint64_t wake_epoch() { return wake().epoch.load(std::memory_order_seq_cst); }

void signal_wake() {
  Wake& w = wake();
  w.epoch.fetch_add(1, std::memory_order_seq_cst);
  // A sleeper counts itself before it checks the epoch under the mutex, and we move the epoch before we read
  // the count (both sequentially consistent): either it sees the new epoch or we see it and notify under the
  // mutex, after its check.
  if (w.sleepers.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard lock(w.mutex);
    w.cv.notify_all();
  }
}

void wait_for_wake(std::uint64_t seen, WaitClock::time_point deadline, std::chrono::nanoseconds spin) {
  Wake& w = wake();
  // Adaptive: a spin that ends in sleep anyway (the partner was not running: another process holds its core)
  // halves this thread's next spin; one that succeeds doubles it again, up to `spin`. So a loaded machine
  // soon stops paying for spinning, and an idle one keeps the fast path.
  thread_local std::chrono::nanoseconds budget{std::chrono::microseconds(8)};
  budget = std::min(budget, spin);
  if (budget.count() >= 500) {
    const WaitClock::time_point spin_until = std::min(deadline, WaitClock::now() + budget);
    for (int i = 0;; ++i) {
      if (w.epoch.load(std::memory_order_acquire) != seen) {
        budget = std::min(budget * 2, spin);
        return;
      }
      for (int k = 0; k < 32; ++k) cpu_relax();
      if ((i & 15) == 15 && WaitClock::now() >= spin_until) break;
    }
    budget /= 2;
  } else if (spin.count() > 0) {
    budget = std::chrono::nanoseconds(budget.count() + 100);  // creep back after a loaded spell
  }
  w.sleepers.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock lock(w.mutex);
    while (w.epoch.load(std::memory_order_seq_cst) == seen && WaitClock::now() < deadline) {
      if (deadline == WaitClock::time_point::max())
        w.cv.wait(lock);
      else
        w.cv.wait_until(lock, deadline);
    }
  }
  w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void lock_briefly_spinning(std::unique_lock<std::mutex>& lock) {
  if (current_fiber_suspender()) {
    for (int i = 0; i < 100; ++i) {
      if (lock.try_lock()) return;
      for (int k = 0; k < 8; ++k) cpu_relax();
    }
  }
  lock.lock();
}

void sleep_replica(std::chrono::nanoseconds duration) {
  const WaitClock::time_point until = WaitClock::now() + duration;
  if (FiberSuspender* fiber = current_fiber_suspender()) {
    while (WaitClock::now() < until) fiber->suspend(until, wake_epoch());
    return;
  }
  std::this_thread::sleep_until(until);
}

void WaitQueue::wait_until(std::unique_lock<std::mutex>& lock, WaitClock::time_point deadline) {
  if (FiberSuspender* fiber = current_fiber_suspender()) {
    const std::uint64_t epoch = wake_epoch();  // under the lock: a later notify moves it
    lock.unlock();
    fiber->suspend(deadline, epoch);
    lock_briefly_spinning(lock);
    return;
  }
  if (deadline == WaitClock::time_point::max())
    cv_.wait(lock);
  else
    cv_.wait_until(lock, deadline);
}

void WaitQueue::notify_all() {
  cv_.notify_all();
  signal_wake();
}

}  // namespace weft::transport
