// The Runtime: brings up its state in order (options, the job, logging, the devices and their memory
// accounts, the diagnostics, the workers; each concern in its own file, listed in internal.hpp) and answers
// what a program asks of it (its devices, its options, its statistics).
#include <memory>
#include <string>

#include "array/isa.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "runtime/device_workers.hpp"
#include "runtime/internal.hpp"
#include "runtime/job.hpp"
#include "runtime/runtime_registry.hpp"
#include "runtime/tracer.hpp"

namespace weft {

namespace {

// The process index is known now: WEFT_DEBUG's tags and file name use it.
void configure_process_log(const RuntimeOptions& o, int process_index) {
  configure_log({parse_log_level(o.log_level), !o.debug.empty() || !o.debug_subsys.empty() || !o.debug_file.empty(),
                 o.debug_subsys.empty() ? kAllLogSubsystems : parse_log_subsystems(o.debug_subsys),
                 o.debug_file.empty() ? std::string() : expand_log_file_pattern(o.debug_file, process_index),
                 process_index});
}

// Global device p·L + k belongs to process p; each has its own memory account.
void make_devices(Runtime::Impl& rt) {
  const int local = rt.local_device_count;
  for (int p = 0; p < rt.process_count; ++p)
    for (int k = 0; k < local; ++k) {
      Device d{p * local + k, p, "cpu"};
      rt.devices.push_back(d);
      rt.accounts.push_back(std::make_shared<MemoryAccount>(to_string(d), rt.options.device_memory));
    }
}

// WEFT_TRACE (a tracer that records nothing when unset). Every instance writes its own timeline:
// WEFT_TRACE=t.json gives t.json.0, t.json.1, ... in a job.
void start_trace(Runtime::Impl& rt) {
  std::string trace_path = rt.options.trace_path;
  if (!trace_path.empty() && rt.process_count > 1) {
    trace_path += '.';  // (not "." + ...: inlined here, that trips GCC 12's false -Wrestrict)
    trace_path += std::to_string(rt.process_index);
  }
  rt.tracer = std::make_unique<Tracer>(trace_path, rt.process_index, rt.options.trace_events);
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : impl_((isa::check_cpu(), std::make_unique<Impl>())) {
  Impl& rt = *impl_;
  rt.options = options.resolved();
  // A process-wide change, so only on request: WEFT_MALLOC_TUNING=1 (weft::tune_process_malloc).
  if (settings::choice(settings::Setting::malloc_tuning, 0) == 1) tune_process_malloc();
  set_log_level(parse_log_level(rt.options.log_level));
  detail::join_job(rt);
  configure_process_log(rt.options, rt.process_index);
  log_configuration(options, rt);
  if (rt.job) detail::check_job_configuration(rt, options);
  start_trace(rt);
  make_devices(rt);
  const int replicas = static_cast<int>(rt.devices.size());
  if (!rt.options.fault.empty())
    rt.faults = std::make_unique<detail::FaultPlan>(rt.options.fault, rt.process_index, rt.process_count, replicas);
  if (rt.options.flight_recorder > 0)
    rt.flight = std::make_unique<detail::FlightRecorder>(replicas, rt.process_index * rt.local_device_count,
                                                         rt.local_device_count, rt.options.flight_recorder);
  detail::start_workers(rt);
  detail::register_runtime(this);
}

Runtime::~Runtime() {
  detail::unregister_runtime(this);
  if (detail::forked_since(impl_->made_in)) {
    // A child forked since it was made: its threads are not here to be joined, and their locks may be held
    // for good. Free nothing (fork_guard.hpp).
    static_cast<void>(impl_.release());
    return;
  }
  if (impl_->tracer->enabled()) impl_->tracer->write();
}

std::string Runtime::platform() const { return "cpu"; }
int Runtime::device_count() const { return static_cast<int>(impl_->devices.size()); }
int Runtime::local_device_count() const { return impl_->local_device_count; }
int Runtime::process_index() const { return impl_->process_index; }
int Runtime::process_count() const { return impl_->process_count; }
const std::vector<Device>& Runtime::devices() const { return impl_->devices; }
std::vector<Device> Runtime::local_devices() const {
  const int first = impl_->process_index * impl_->local_device_count;
  return {impl_->devices.begin() + first, impl_->devices.begin() + first + impl_->local_device_count};
}
const Device& Runtime::device(int id) const { return impl_->device(id); }
std::int64_t Runtime::memory_in_use(const Device& device) const { return memory_account(device)->in_use(); }
std::shared_ptr<MemoryAccount> Runtime::memory_account(const Device& device) const {
  impl_->device(device, "memory_account");
  return impl_->accounts[device.id];
}
const RuntimeOptions& Runtime::options() const { return impl_->options; }

RuntimeStats Runtime::stats() const {
  auto& s = impl_->stats;
  return {s.preparations.load(), s.executions.load(), s.h2d.load(), s.d2h.load(), s.collectives.rounds.load(),
          s.collectives.bytes_reduced.load(), s.shared_products.load(), s.shared_runs.load()};
}

void Runtime::reset_stats() {
  auto& s = impl_->stats;
  for (auto* c : {&s.preparations, &s.executions, &s.h2d, &s.d2h, &s.collectives.rounds, &s.collectives.bytes_reduced,
                 &s.shared_products, &s.shared_runs})
    c->store(0);
}

}  // namespace weft
