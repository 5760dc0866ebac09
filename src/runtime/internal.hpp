// Runtime::Impl: the state behind a Runtime (its devices and their memory accounts, its place in a job, the
// workers that run replicas, the diagnostics it keeps) that the runtime's files share. Each concern's code is
// in its own file: the bring-up and accessors (runtime.cc), options (runtime_options.cc), devices (device.cc),
// workers (device_workers.*), the job (job.*, launcher_records.*), the trace (tracer.*), the registry
// (runtime_registry.*), fork() (fork_guard.*), admission (admission.*), executions (execution.*, group_cache.*).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.hpp"
#include "runtime/admission.hpp"
#include "runtime/device_workers.hpp"
#include "runtime/fault.hpp"
#include "runtime/fiber_scheduler.hpp"
#include "runtime/flight_recorder.hpp"
#include "runtime/fork_guard.hpp"
#include "runtime/tracer.hpp"
#include "transport/interprocess.hpp"
#include "weft/runtime.hpp"

namespace weft {

namespace detail {
struct RuntimeCounters {
  std::atomic<std::uint64_t> preparations{0}, executions{0}, h2d{0}, d2h{0}, shared_products{0}, shared_runs{0};
  collectives::RoundCounters collectives;  // counted by the communicators
};
}  // namespace detail

struct Runtime::Impl {
  RuntimeOptions options;
  // Where it was made: a forked child refuses to run on it (fork_guard.hpp).
  detail::ProcessStamp made_in = detail::this_process();
  // Unique among the runtimes this process makes (an address may be reused): what a cache of per-runtime
  // preparations (a pmap's) is keyed on, so that a program called on a newer runtime prepares for it.
  const std::uint64_t serial = next_serial();
  static std::uint64_t next_serial() {
    static std::atomic<std::uint64_t> counter{0};
    return ++counter;
  }
  std::unique_ptr<Tracer> tracer;
  std::unique_ptr<detail::FaultPlan> faults;  // WEFT_FAULT; null (the usual case) when no plan is set
  std::unique_ptr<detail::FlightRecorder> flight;  // WEFT_FLIGHT_RECORDER; null when 0
  // Executions started over the runtime's life (also those without a replica here, so that the instances of
  // a job number them alike): the flight recorder's execution serial.
  std::atomic<std::uint64_t> execution_serial{0};
  std::vector<Device> devices;
  std::vector<std::shared_ptr<MemoryAccount>> accounts;  // by device id
  std::shared_ptr<MemoryAccount> host_account = std::make_shared<MemoryAccount>("host", 0);
  transport::Interprocess* job = nullptr;  // null when this process runs alone
  int process_index = 0;
  int process_count = 1;
  int local_device_count = 0;
  std::vector<std::unique_ptr<DeviceWorker>> workers;    // by device id; null for other processes' devices
                                                         // and, with WEFT_SCHEDULER=fibers, until an
                                                         // execution asks for replica threads
  std::mutex workers_mutex;                              // guards making `workers` (ensure_thread_workers)
  bool workers_started = false;
  std::unique_ptr<detail::FiberScheduler> fibers;        // WEFT_SCHEDULER=fibers; null with threads
  // Executions run one at a time (admission.hpp says why and how).
  detail::AdmissionState admission;
  // Completed executions; with the collective rounds (liveness()), how a waiting call tells a busy runtime
  // from a stuck one.
  std::atomic<std::uint64_t> progress{0};
  // Shared with the sharded arrays the runtime hands out, which count their reads and may outlive it.
  std::shared_ptr<detail::RuntimeCounters> counters = std::make_shared<detail::RuntimeCounters>();
  detail::RuntimeCounters& stats = *counters;
  std::uint64_t liveness() const { return progress.load() + stats.collectives.rounds.load(); }

  const Device& device(int id) const;
  // `device` itself, checked: its id exists and its process is the one that owns that id. `what` names the
  // caller in the InvalidArgument.
  const Device& device(const Device& device, const std::string& what) const;
};

// At WEFT_DEBUG=INFO: every WEFT_* setting with its value and source, once per process (configuration_report.cc).
void log_configuration(const RuntimeOptions& given, const Runtime::Impl& rt);

}  // namespace weft
