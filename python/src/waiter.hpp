// The thread a caller's blocking work runs on while the caller polls for signals (interrupt.cc): made on the
// first call from a thread and kept for the thread's life (a thread per call costs ~50 us). Plain C++: it
// knows nothing of Python.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace weft::python {

class Waiter {
 public:
  Waiter();
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // Runs `work` on the waiter's thread; `work` catches its own exceptions.
  void start(std::function<void()> work);
  // True once the work has ended (waits at most `timeout`).
  bool wait_for(std::chrono::milliseconds timeout);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  std::function<void()> work_;
  bool done_ = true, stopping_ = false;
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace weft::python
