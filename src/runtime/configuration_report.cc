// The effective configuration, printed at WEFT_DEBUG=INFO (or WEFT_LOG=info) when a Runtime starts
// (reliability R22): every WEFT_* setting with its value and where the value came from (a RuntimeOptions
// field, the environment, or the default), so that "what did this job actually run with?" is answered by
// its log. Printed once per process, and again only by a later Runtime whose configuration differs.
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/settings.hpp"
#include "runtime/internal.hpp"

namespace weft {
namespace {

using settings::Setting;

const char* env(Setting s) { return settings::value(s); }

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// "(RuntimeOptions::field)", "(environment)" or "(default)".
std::string source(bool field_set, Setting variable, const char* field) {
  if (field_set) return std::string("(RuntimeOptions::") + field + ")";
  if (env(variable)) return "(environment)";
  return "(default)";
}

}  // namespace

void log_configuration(const RuntimeOptions& given, const Runtime::Impl& rt) {
  if (!log_enabled(LogLevel::info, LogSubsys::init) && !log_enabled(LogLevel::info, LogSubsys::launch) &&
      !log_enabled(LogLevel::info, LogSubsys::mem))
    return;
  const RuntimeOptions& o = rt.options;
  std::vector<std::string> lines;
  auto add = [&](Setting variable, const std::string& value, const std::string& from) {
    lines.push_back("config: " + std::string(settings::spec(variable).variable) + "=" + value + " " + from);
  };
  add(Setting::device_count, std::to_string(o.device_count), source(given.device_count > 0, Setting::device_count, "device_count"));
  add(Setting::device_memory, o.device_memory == 0 ? "0 (unlimited)" : std::to_string(o.device_memory) + " bytes",
      source(given.device_memory >= 0, Setting::device_memory, "device_memory"));
  add(Setting::collective_warn, number(o.collective_warn_s) + " s",
      source(given.collective_warn_s >= 0, Setting::collective_warn, "collective_warn_s"));
  add(Setting::collective_timeout, number(o.collective_timeout_s) + " s" + (o.collective_timeout_s == 0 ? " (never)" : ""),
      source(given.collective_timeout_s >= 0, Setting::collective_timeout, "collective_timeout_s"));
  add(Setting::log, o.log_level,
      !given.log_level.empty() ? "(RuntimeOptions::log_level)"
      : env(Setting::log)        ? "(environment)"
      : !o.debug.empty()       ? "(from WEFT_DEBUG)"
                               : "(default)");
  add(Setting::debug, o.debug.empty() ? "unset" : o.debug, source(!given.debug.empty(), Setting::debug, "debug"));
  add(Setting::debug_subsys, o.debug_subsys.empty() ? "init,coll,mem,launch (all)" : o.debug_subsys,
      source(!given.debug_subsys.empty(), Setting::debug_subsys, "debug_subsys"));
  add(Setting::debug_file, o.debug_file.empty() ? "unset (stderr)" : o.debug_file,
      source(!given.debug_file.empty(), Setting::debug_file, "debug_file"));
  add(Setting::trace, o.trace_path.empty() ? "off" : o.trace_path, source(!given.trace_path.empty(), Setting::trace, "trace_path"));
  add(Setting::trace_events, std::to_string(o.trace_events), source(given.trace_events > 0, Setting::trace_events, "trace_events"));
  add(Setting::fault, o.fault.empty() ? "none" : o.fault, source(!given.fault.empty(), Setting::fault, "fault"));
  add(Setting::flight_recorder, std::to_string(o.flight_recorder) + (o.flight_recorder == 0 ? " (off)" : " collectives"),
      source(given.flight_recorder >= 0, Setting::flight_recorder, "flight_recorder"));
  add(Setting::dump, o.dump_dir.empty() ? "none" : o.dump_dir, source(!given.dump_dir.empty(), Setting::dump, "dump_dir"));
  add(Setting::scheduler, o.scheduler, source(!given.scheduler.empty(), Setting::scheduler, "scheduler"));
  add(Setting::fiber_stack, std::to_string(o.fiber_stack_bytes) + " bytes",
      source(given.fiber_stack_bytes >= 0, Setting::fiber_stack, "fiber_stack_bytes"));
  add(Setting::split_bytes, std::to_string(o.split_bytes) + " bytes", source(given.split_bytes >= 0, Setting::split_bytes, "split_bytes"));
  add(Setting::ring_bytes, std::to_string(o.ring_bytes) + " bytes", source(given.ring_bytes >= 0, Setting::ring_bytes, "ring_bytes"));
  add(Setting::verify, o.verify ? "1 (on)" : "0 (off)", source(given.verify >= 0, Setting::verify, "verify"));
  add(Setting::shared_products,
      o.shared_products == 0 ? "0 (off)" : o.shared_products == 1 ? "1 (on)" : "2 (on, weights checked)",
      source(given.shared_products >= 0, Setting::shared_products, "shared_products"));
  add(Setting::shared_runs, o.shared_runs == 0 ? "0 (off)" : o.shared_runs == 1 ? "1 (on)" : "2 (on, inputs checked)",
      source(given.shared_runs >= 0, Setting::shared_runs, "shared_runs"));
  add(Setting::flush_denormals, o.flush_denormals ? "1 (denormals flushed to zero, as JAX on a CPU)" : "0 (IEEE gradual underflow)",
      source(given.flush_denormals >= 0, Setting::flush_denormals, "flush_denormals"));
  // matmul's library: read by the array core itself, from the environment only (arrays compute without a
  // Runtime); weft::matmul_backend() says what it chose.
  add(Setting::gemm, env(Setting::gemm) ? env(Setting::gemm) : "auto", env(Setting::gemm) ? "(environment)" : "(default)");
  add(Setting::openblas, env(Setting::openblas) ? env(Setting::openblas) : "unset (Debian's openblas-pthread, then libopenblas.so.0)",
      env(Setting::openblas) ? "(environment)" : "(default)");
  add(Setting::fusion, env(Setting::fusion) ? env(Setting::fusion) : "auto",
      env(Setting::fusion) ? "(environment)" : "(default)");
  add(Setting::malloc_tuning, env(Setting::malloc_tuning) ? env(Setting::malloc_tuning) : "0 (malloc as the process set it)",
      env(Setting::malloc_tuning) ? "(environment)" : "(default)");
  // Set by the launcher (docs/settings.md), read from the environment only.
  for (Setting variable : {Setting::num_instances, Setting::num_replicas, Setting::job_dir})
    add(variable, env(variable) ? env(variable) : "unset", env(variable) ? "(environment, set by weftrun)" : "(not launched by weftrun)");

  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  {
    static std::mutex mutex;
    static std::string printed;
    std::lock_guard lock(mutex);
    if (text == printed) return;
    printed = text;
  }
  for (const std::string& l : lines) log(LogLevel::info, LogSubsys::init, l);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const int first = rt.process_index * rt.local_device_count;
  log(LogLevel::info, LogSubsys::launch,
      (rt.process_count > 1 ? "instance " + std::to_string(rt.process_index) + " of " + std::to_string(rt.process_count)
                            : std::string("a single process (no launcher)")) +
          ", pid " + std::to_string(::getpid()) + " on " + host + ", devices " + std::to_string(first) + ".." +
          std::to_string(first + rt.local_device_count - 1) + " of " +
          std::to_string(rt.process_count * rt.local_device_count));
  log(LogLevel::info, LogSubsys::mem,
      std::to_string(rt.local_device_count) + " devices of " +
          (o.device_memory == 0 ? std::string("unlimited memory") : std::to_string(o.device_memory) + " bytes") +
          " each (WEFT_DEVICE_MEMORY)");
}

}  // namespace weft
