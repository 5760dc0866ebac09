// The device worker pool: where replicas run. WEFT_SCHEDULER=threads: a DeviceWorker (an OS thread) per local
// device; fibers (the default): one FiberScheduler with a worker per core (fiber_scheduler.hpp).
#include <algorithm>
#include <string>
#include <system_error>
#include <thread>

#include "runtime/device_workers.hpp"
#include "runtime/internal.hpp"
#include "runtime/stack_guard.hpp"
#include "weft/error.hpp"

namespace weft {

DeviceWorker::DeviceWorker(Device device, std::shared_ptr<MemoryAccount> account)
    : device_(std::move(device)), account_(std::move(account)), thread_([this] { loop(); }) {}

DeviceWorker::~DeviceWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void DeviceWorker::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void DeviceWorker::loop() {
  // Arrays computed on this thread are charged to this device; an overflow of its stack names the replica.
  ScopedMemoryAccount on_device(account_);
  const detail::ReplicaSignalStack signal_stack;  // a device thread is weft's: it keeps one for good
  detail::enter_own_thread_stack();
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // tasks catch their own exceptions
  }
}

namespace detail {

void start_workers(Runtime::Impl& rt) {
  const int local = rt.local_device_count;
  if (rt.options.scheduler == "fibers") {
    // One worker per core at most (the caller of a run is one of them); a device needs no thread of its own.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    try {
      rt.fibers = std::make_unique<FiberScheduler>(std::min(local, cores), static_cast<std::size_t>(rt.options.fiber_stack_bytes));
    } catch (const std::system_error& e) {
      throw Error(std::string("cannot start the fiber scheduler's worker threads: ") + e.what() +
                  " (raise the process's thread limit, or WEFT_SCHEDULER=threads)");
    }
  }
  rt.workers.resize(rt.devices.size());
  if (!rt.fibers) ensure_thread_workers(rt);
}

void ensure_thread_workers(Runtime::Impl& rt) {
  std::lock_guard lock(rt.workers_mutex);
  if (rt.workers_started) return;
  const int local = rt.local_device_count;
  for (int k = 0; k < local; ++k) {
    const int id = rt.process_index * local + k;
    try {
      rt.workers[id] = std::make_unique<DeviceWorker>(rt.devices[id], rt.accounts[id]);
    } catch (const std::system_error& e) {
      // Out of threads (or of memory for their stacks): the workers made so far are joined as the runtime's
      // state unwinds.
      throw Error("cannot start the worker thread of " + to_string(rt.devices[id]) + ": " + e.what() + " (" +
                  std::to_string(k) + " of " + std::to_string(local) + " devices started; lower WEFT_DEVICE_COUNT " +
                  "or RuntimeOptions::device_count, or raise the process's thread limit)");
    }
  }
  rt.workers_started = true;
}

}  // namespace detail
}  // namespace weft
