// Where replicas run: WEFT_SCHEDULER=threads gives every local device a DeviceWorker (an OS thread that runs
// its replicas one task at a time); WEFT_SCHEDULER=fibers (the default) a FiberScheduler with one worker per
// core (fiber_scheduler.hpp). start_workers makes whichever the runtime's options ask for.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "weft/memory.hpp"
#include "weft/runtime.hpp"

namespace weft {

// One worker thread per device: replicas placed on the device run here, one task at a time.
class DeviceWorker {
 public:
  DeviceWorker(Device device, std::shared_ptr<MemoryAccount> account);
  ~DeviceWorker();
  void submit(std::function<void()> task);

 private:
  void loop();
  Device device_;
  std::shared_ptr<MemoryAccount> account_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

namespace detail {
// Fills rt.fibers (fibers) or rt.workers (threads, one per local device); rt.devices and rt.accounts are
// made already. Throws weft::Error, saying which limit to raise, when the threads cannot start.
void start_workers(Runtime::Impl& rt);
// Makes rt.workers (one thread per local device) if the runtime has none yet: a fiber runtime makes them on
// the first execution that asks for replica threads (PmapOptions::replica_threads). Executions run one at a
// time, but the first ones of two runtimes' callers may race: guarded by rt.workers_mutex.
void ensure_thread_workers(Runtime::Impl& rt);
}  // namespace detail

}  // namespace weft
