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
#include "runtime/internal.hpp"

namespace weft {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// "(RuntimeOptions::field)", "(environment)" or "(default)".
std::string source(bool field_set, const char* variable, const char* field) {
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
  auto add = [&](const char* variable, const std::string& value, const std::string& from) {
    lines.push_back(std::string("config: ") + variable + "=" + value + " " + from);
  };
  add("WEFT_DEVICE_COUNT", std::to_string(o.device_count), source(given.device_count > 0, "WEFT_DEVICE_COUNT", "device_count"));
  add("WEFT_DEVICE_MEMORY", o.device_memory == 0 ? "0 (unlimited)" : std::to_string(o.device_memory) + " bytes",
      source(given.device_memory >= 0, "WEFT_DEVICE_MEMORY", "device_memory"));
  add("WEFT_COLLECTIVE_WARN", number(o.collective_warn_s) + " s",
      source(given.collective_warn_s >= 0, "WEFT_COLLECTIVE_WARN", "collective_warn_s"));
  add("WEFT_COLLECTIVE_TIMEOUT", number(o.collective_timeout_s) + " s" + (o.collective_timeout_s == 0 ? " (never)" : ""),
      source(given.collective_timeout_s >= 0, "WEFT_COLLECTIVE_TIMEOUT", "collective_timeout_s"));
  add("WEFT_LOG", o.log_level,
      !given.log_level.empty() ? "(RuntimeOptions::log_level)"
      : env("WEFT_LOG")        ? "(environment)"
      : !o.debug.empty()       ? "(from WEFT_DEBUG)"
                               : "(default)");
  add("WEFT_DEBUG", o.debug.empty() ? "unset" : o.debug, source(!given.debug.empty(), "WEFT_DEBUG", "debug"));
  add("WEFT_DEBUG_SUBSYS", o.debug_subsys.empty() ? "init,coll,mem,launch (all)" : o.debug_subsys,
      source(!given.debug_subsys.empty(), "WEFT_DEBUG_SUBSYS", "debug_subsys"));
  add("WEFT_DEBUG_FILE", o.debug_file.empty() ? "unset (stderr)" : o.debug_file,
      source(!given.debug_file.empty(), "WEFT_DEBUG_FILE", "debug_file"));
  add("WEFT_TRACE", o.trace_path.empty() ? "off" : o.trace_path, source(!given.trace_path.empty(), "WEFT_TRACE", "trace_path"));
  add("WEFT_TRACE_EVENTS", std::to_string(o.trace_events), source(given.trace_events > 0, "WEFT_TRACE_EVENTS", "trace_events"));
  add("WEFT_FAULT", o.fault.empty() ? "none" : o.fault, source(!given.fault.empty(), "WEFT_FAULT", "fault"));
  add("WEFT_FLIGHT_RECORDER", std::to_string(o.flight_recorder) + (o.flight_recorder == 0 ? " (off)" : " collectives"),
      source(given.flight_recorder >= 0, "WEFT_FLIGHT_RECORDER", "flight_recorder"));
  add("WEFT_DUMP", o.dump_dir.empty() ? "none" : o.dump_dir, source(!given.dump_dir.empty(), "WEFT_DUMP", "dump_dir"));
  add("WEFT_SCHEDULER", o.scheduler, source(!given.scheduler.empty(), "WEFT_SCHEDULER", "scheduler"));
  add("WEFT_FIBER_STACK", std::to_string(o.fiber_stack_bytes) + " bytes",
      source(given.fiber_stack_bytes >= 0, "WEFT_FIBER_STACK", "fiber_stack_bytes"));
  add("WEFT_SPLIT_BYTES", std::to_string(o.split_bytes) + " bytes", source(given.split_bytes >= 0, "WEFT_SPLIT_BYTES", "split_bytes"));
  add("WEFT_RING_BYTES", std::to_string(o.ring_bytes) + " bytes", source(given.ring_bytes >= 0, "WEFT_RING_BYTES", "ring_bytes"));
  add("WEFT_VERIFY", o.verify ? "1 (on)" : "0 (off)", source(given.verify >= 0, "WEFT_VERIFY", "verify"));
  add("WEFT_SHARED_PRODUCTS",
      o.shared_products == 0 ? "0 (off)" : o.shared_products == 1 ? "1 (on)" : "2 (on, weights checked)",
      source(given.shared_products >= 0, "WEFT_SHARED_PRODUCTS", "shared_products"));
  add("WEFT_SHARED_RUNS", o.shared_runs == 0 ? "0 (off)" : o.shared_runs == 1 ? "1 (on)" : "2 (on, inputs checked)",
      source(given.shared_runs >= 0, "WEFT_SHARED_RUNS", "shared_runs"));
  add("WEFT_FLUSH_DENORMALS", o.flush_denormals ? "1 (denormals flushed to zero, as JAX on a CPU)" : "0 (IEEE gradual underflow)",
      source(given.flush_denormals >= 0, "WEFT_FLUSH_DENORMALS", "flush_denormals"));
  // matmul's library: read by the array core itself, from the environment only (arrays compute without a
  // Runtime); weft::matmul_backend() says what it chose.
  add("WEFT_GEMM", env("WEFT_GEMM") ? env("WEFT_GEMM") : "auto", env("WEFT_GEMM") ? "(environment)" : "(default)");
  add("WEFT_OPENBLAS", env("WEFT_OPENBLAS") ? env("WEFT_OPENBLAS") : "unset (Debian's openblas-pthread, then libopenblas.so.0)",
      env("WEFT_OPENBLAS") ? "(environment)" : "(default)");
  // Set by the launcher (docs/settings.md), read from the environment only.
  for (const char* variable : {"WEFT_NUM_INSTANCES", "WEFT_NUM_REPLICAS", "WEFT_JOB_DIR"})
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
