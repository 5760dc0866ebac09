// The caller's helper thread (why: waiter.hpp).
#include "waiter.hpp"

#include <utility>

namespace weft::python {

Waiter::Waiter() : thread_([this] { loop(); }) {}

Waiter::~Waiter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Waiter::start(std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    work_ = std::move(work);
    done_ = false;
  }
  cv_.notify_all();
}

bool Waiter::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return done_cv_.wait_for(lock, timeout, [&] { return done_; });
}

void Waiter::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || work_; });
    if (stopping_) return;
    std::function<void()> work = std::move(work_);
    work_ = nullptr;
    lock.unlock();
    work();  // catches its own exceptions
    work = nullptr;
    lock.lock();
    done_ = true;
    done_cv_.notify_all();
  }
}

}  // namespace weft::python
