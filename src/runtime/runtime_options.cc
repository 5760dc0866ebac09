// RuntimeOptions::resolved(): every setting from its RuntimeOptions field, else its WEFT_* variable, else its
// default, validated at once so that a mistake is an InvalidArgument naming the setting when a Runtime is
// made, not a surprise later (docs/settings.md).
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include <sys/stat.h>

#include "collectives/algorithms.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "runtime/denormals.hpp"
#include "runtime/fault.hpp"
#include "weft/error.hpp"
#include "weft/runtime.hpp"

namespace weft {

namespace {

using settings::parse_bytes;
using settings::parse_count;
using settings::parse_seconds;
using settings::Setting;

std::string number_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A RuntimeOptions field in seconds: -1 means unset; NaN, infinity and other negatives are mistakes (0 means
// never).
void check_seconds_option(const char* field, double v) {
  if (std::isnan(v) || std::isinf(v) || (v < 0 && v != -1))
    throw InvalidArgument(std::string("RuntimeOptions::") + field + " = " + number_str(v) +
                          " is not a number of seconds >= 0 (0 disables it, -1 takes the environment)");
}

constexpr int kMaxDevices = 4096;  // per process (WEFT_SCHEDULER=threads starts a thread for each)
constexpr std::int64_t kDefaultTraceEvents = 100000;
constexpr int kDefaultFlightRecords = 64;
constexpr int kMaxFlightRecords = 1'000'000;

// Whether the flight recorder's depth came from the environment (the field was left unset).
bool flight_recorder_from_env(const RuntimeOptions& given) { return given.flight_recorder < 0; }

// Set by weftrun for every instance (docs/settings.md); checked here so that a mistyped value is an error at
// start-up rather than a silent single-process run.
void check_launcher_environment() {
  if (const char* dir = settings::value(Setting::job_dir)) {
    struct stat info {};
    if (::stat(dir, &info) != 0 || !S_ISDIR(info.st_mode))
      throw InvalidArgument(std::string("WEFT_JOB_DIR=") + dir + " is not " +
                            std::string(settings::spec(Setting::job_dir).accepted) +
                            " (an existing directory; weftrun sets it)");
  }
  if (const char* v = settings::value(Setting::num_instances))
    parse_count("WEFT_NUM_INSTANCES", v, 1, 1 << 20, "a number of instances (a whole number >= 1; weftrun sets it)");
  if (const char* v = settings::value(Setting::num_replicas))
    parse_count("WEFT_NUM_REPLICAS", v, 1, 1 << 30, "a number of replicas (a whole number >= 1; weftrun sets it)");
}

}  // namespace

namespace {

void resolve_devices(RuntimeOptions& o) {
  const std::string devices_rule = "a device count between 1 and " + std::to_string(kMaxDevices);
  if (o.device_count > kMaxDevices || o.device_count < 0)
    throw InvalidArgument("RuntimeOptions::device_count = " + std::to_string(o.device_count) + " is not " + devices_rule +
                          " (0 takes WEFT_DEVICE_COUNT)");
  if (o.device_count == 0)
    o.device_count = settings::value(Setting::device_count)
                         ? static_cast<int>(parse_count("WEFT_DEVICE_COUNT", settings::value(Setting::device_count), 1, kMaxDevices, devices_rule))
                         : 8;
  if (o.device_memory < -1)
    throw InvalidArgument("RuntimeOptions::device_memory = " + std::to_string(o.device_memory) +
                          " is not a byte count >= 0 (0 = unlimited, -1 takes WEFT_DEVICE_MEMORY)");
  if (o.device_memory < 0) o.device_memory = settings::value(Setting::device_memory) ? parse_bytes("WEFT_DEVICE_MEMORY", settings::value(Setting::device_memory)) : 0;
}

void resolve_collective_deadlines(RuntimeOptions& o) {
  check_seconds_option("collective_warn_s", o.collective_warn_s);
  check_seconds_option("collective_timeout_s", o.collective_timeout_s);
  const bool warn_given = o.collective_warn_s >= 0 || settings::value(Setting::collective_warn);
  if (o.collective_warn_s < 0)
    o.collective_warn_s = settings::value(Setting::collective_warn) ? parse_seconds("WEFT_COLLECTIVE_WARN", settings::value(Setting::collective_warn)) : 30;
  if (o.collective_timeout_s < 0)
    o.collective_timeout_s =
        settings::value(Setting::collective_timeout) ? parse_seconds("WEFT_COLLECTIVE_TIMEOUT", settings::value(Setting::collective_timeout)) : 300;
  // A timeout below the default warning lowers the warning with it (the warning would never fire); a warning
  // the user chose above the timeout is a mistake (reliability R5).
  if (!warn_given && o.collective_timeout_s > 0 && o.collective_timeout_s < o.collective_warn_s)
    o.collective_warn_s = o.collective_timeout_s;
  if (o.collective_timeout_s > 0 && o.collective_timeout_s < o.collective_warn_s) {
    std::ostringstream os;
    os << "the collective timeout (WEFT_COLLECTIVE_TIMEOUT, " << o.collective_timeout_s
       << " s) must be >= the stall warning (WEFT_COLLECTIVE_WARN, " << o.collective_warn_s
       << " s); use 0 to disable the timeout";
    throw InvalidArgument(os.str());
  }
}

void resolve_logging(RuntimeOptions& o) {
  // R22: WEFT_DEBUG is another spelling of the level (OFF, WARN, INFO, TRACE = error, warn, info, debug) that
  // also tags every line. Set in the same place (both variables, or both fields) they must agree; a field
  // wins over a variable, as everywhere.
  const bool level_field = !o.log_level.empty(), debug_field = !o.debug.empty();
  if (!debug_field && settings::value(Setting::debug)) o.debug = settings::value(Setting::debug);
  if (!o.debug.empty()) {
    const LogLevel level = parse_debug_level(o.debug);
    const std::string debug_what = debug_field ? "RuntimeOptions::debug = " + o.debug : "WEFT_DEBUG=" + o.debug;
    std::string other;  // the level set in the same place, if any
    if (level_field && debug_field) other = "RuntimeOptions::log_level = " + o.log_level;
    if (!level_field && !debug_field && settings::value(Setting::log)) other = std::string("WEFT_LOG=") + settings::value(Setting::log);
    if (!other.empty() && parse_log_level(level_field ? o.log_level : settings::value(Setting::log)) != level)
      throw InvalidArgument(debug_what + " and " + other + " disagree: " + debug_what + " means WEFT_LOG=" +
                            std::string(log_level_name(level)) + "; set only one of them");
    if (!level_field) o.log_level = std::string(log_level_name(level));
  }
  if (o.log_level.empty()) o.log_level = settings::value(Setting::log) ? settings::value(Setting::log) : "warn";
  parse_log_level(o.log_level);
  if (o.debug_subsys.empty() && settings::value(Setting::debug_subsys)) o.debug_subsys = settings::value(Setting::debug_subsys);
  if (!o.debug_subsys.empty()) parse_log_subsystems(o.debug_subsys);
  if (o.debug_file.empty() && settings::value(Setting::debug_file)) o.debug_file = settings::value(Setting::debug_file);
  if (!o.debug_file.empty()) expand_log_file_pattern(o.debug_file, 0);
}

void resolve_trace(RuntimeOptions& o) {
  const bool trace_given = !o.trace_path.empty();
  if (o.trace_path.empty() && settings::value(Setting::trace)) o.trace_path = settings::value(Setting::trace);
  if (!o.trace_path.empty()) {
    // The file is written when the runtime ends (a Python session's may never): a folder that is not there
    // is a mistake to name now, not a line at exit or nothing at all.
    const std::size_t slash = o.trace_path.rfind('/');
    const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : o.trace_path.substr(0, slash);
    struct stat info {};
    if (::stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
      throw InvalidArgument((trace_given ? "RuntimeOptions::trace_path = " : "WEFT_TRACE=") + o.trace_path +
                            ": its folder " + folder + " is not a directory (the timeline is written there)");
  }
  if (o.trace_events < 0)
    throw InvalidArgument("RuntimeOptions::trace_events = " + std::to_string(o.trace_events) +
                          " is not a number of events >= 1 (0 takes WEFT_TRACE_EVENTS)");
  if (o.trace_events == 0)
    o.trace_events = settings::value(Setting::trace_events)
                         ? parse_count("WEFT_TRACE_EVENTS", settings::value(Setting::trace_events), 1, 1'000'000'000,
                                       "a number of events between 1 and 1000000000")
                         : kDefaultTraceEvents;
}

// R21: the flight recorder's depth, and where its dumps go (an existing directory, checked now rather than
// when a failure finds out). `given` is the options as the program passed them.
void resolve_flight_recorder(RuntimeOptions& o, const RuntimeOptions& given) {
  const std::string flight_rule = "a number of collectives between 0 and " + std::to_string(kMaxFlightRecords) +
                                  " (0 turns the flight recorder off";
  if (o.flight_recorder > kMaxFlightRecords || o.flight_recorder < -1)
    throw InvalidArgument("RuntimeOptions::flight_recorder = " + std::to_string(o.flight_recorder) + " is not " +
                          flight_rule + ", -1 takes WEFT_FLIGHT_RECORDER)");
  if (o.flight_recorder < 0)
    o.flight_recorder = settings::value(Setting::flight_recorder)
                            ? static_cast<int>(parse_count("WEFT_FLIGHT_RECORDER", settings::value(Setting::flight_recorder), 0,
                                                           kMaxFlightRecords, flight_rule + ")"))
                            : kDefaultFlightRecords;
  const bool dump_given = !o.dump_dir.empty();
  if (o.dump_dir.empty() && settings::value(Setting::dump)) o.dump_dir = settings::value(Setting::dump);
  if (!o.dump_dir.empty()) {
    const std::string what = dump_given ? "RuntimeOptions::dump_dir = " + o.dump_dir : "WEFT_DUMP=" + o.dump_dir;
    struct stat info {};
    if (::stat(o.dump_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
      throw InvalidArgument(what + " is not a directory (flight-recorder dumps are written there)");
    if (o.flight_recorder == 0)
      throw InvalidArgument(what + " asks for flight-recorder dumps but " +
                            (settings::value(Setting::flight_recorder) && flight_recorder_from_env(given)
                                 ? std::string("WEFT_FLIGHT_RECORDER=0")
                                 : std::string("RuntimeOptions::flight_recorder = 0")) +
                            " records nothing; unset one of them");
  }
}

// Where replicas run (runtime/fiber_scheduler.hpp), and the stack of a fiber: as large as a thread's default.
constexpr std::int64_t kDefaultFiberStack = std::int64_t{8} << 20, kMinFiberStack = 64 << 10;
void resolve_scheduler(RuntimeOptions& o) {
  if (o.scheduler.empty())
    o.scheduler = settings::spec(Setting::scheduler).choices[settings::choice(Setting::scheduler, 0)];
  else if (o.scheduler != "threads" && o.scheduler != "fibers")
    throw InvalidArgument("RuntimeOptions::scheduler = " + o.scheduler +
                          " is not a scheduler: use threads (an OS thread per device) or fibers (replicas as fibers on "
                          "one thread per core)");
  if (o.fiber_stack_bytes < -1 || (o.fiber_stack_bytes >= 0 && o.fiber_stack_bytes < kMinFiberStack))
    throw InvalidArgument("RuntimeOptions::fiber_stack_bytes = " + std::to_string(o.fiber_stack_bytes) +
                          " is not a stack size of at least 64 KiB (-1 takes WEFT_FIBER_STACK)");
  if (o.fiber_stack_bytes < 0) {
    o.fiber_stack_bytes = kDefaultFiberStack;
    if (const char* text = settings::value(Setting::fiber_stack)) {
      o.fiber_stack_bytes = parse_bytes("WEFT_FIBER_STACK", text, "a stack of at least 64 KiB", "at most 2^63 - 1 bytes");
      if (o.fiber_stack_bytes < kMinFiberStack)
        throw InvalidArgument(std::string("WEFT_FIBER_STACK=") + text +
                              " is not a stack size of at least 64 KiB (bytes, K/M/G suffixes; default 8M)");
    }
  }
}

// A size at which the collectives change algorithm (collectives::Thresholds): the field, else the variable,
// else the default. 0 is allowed: every buffer takes the larger buffers' algorithm.
void resolve_threshold(std::int64_t& field, const char* name, Setting variable, std::size_t fallback) {
  const std::string_view var = settings::spec(variable).variable;
  if (field < -1)
    throw InvalidArgument(std::string("RuntimeOptions::") + name + " = " + std::to_string(field) +
                          " is not a byte count >= 0 (-1 takes " + std::string(var) + ")");
  if (field < 0)
    field = settings::value(variable)
                ? parse_bytes(var, settings::value(variable), "0 = every buffer", "at most 2^63 - 1 bytes")
                : static_cast<std::int64_t>(fallback);
}

// The collectives' algorithm sizes and the cross-process agreement (collectives::verified).
void resolve_collective_paths(RuntimeOptions& o) {
  resolve_threshold(o.split_bytes, "split_bytes", Setting::split_bytes, collectives::Thresholds::kDefaultSplitBytes);
  resolve_threshold(o.ring_bytes, "ring_bytes", Setting::ring_bytes, collectives::Thresholds::kDefaultRingBytes);
  if (o.verify < -1 || o.verify > 1)
    throw InvalidArgument("RuntimeOptions::verify = " + std::to_string(o.verify) +
                          " is not 0 (off) or 1 (on) (-1 takes WEFT_VERIFY)");
  if (o.verify < 0) o.verify = static_cast<int>(settings::choice(Setting::verify, 1));
}

// The executor's shared products (program/shared_products.hpp).
void resolve_shared_products(RuntimeOptions& o) {
  if (o.shared_products < -1 || o.shared_products > 2)
    throw InvalidArgument("RuntimeOptions::shared_products = " + std::to_string(o.shared_products) +
                          " is not 0 (off), 1 (on) or 2 (on, weights checked) (-1 takes WEFT_SHARED_PRODUCTS)");
  if (o.shared_products < 0) o.shared_products = static_cast<int>(settings::choice(Setting::shared_products, 0));
}

// The executor's shared runs (program/shared_runs.hpp).
void resolve_shared_runs(RuntimeOptions& o) {
  if (o.shared_runs < -1 || o.shared_runs > 2)
    throw InvalidArgument("RuntimeOptions::shared_runs = " + std::to_string(o.shared_runs) +
                          " is not 0 (off), 1 (on) or 2 (on, inputs checked) (-1 takes WEFT_SHARED_RUNS)");
  if (o.shared_runs < 0) o.shared_runs = static_cast<int>(settings::choice(Setting::shared_runs, 1));
}

// The FPU's denormal modes inside replicas (runtime/denormals.hpp).
void resolve_flush_denormals(RuntimeOptions& o) {
  if (o.flush_denormals < -1 || o.flush_denormals > 1)
    throw InvalidArgument("RuntimeOptions::flush_denormals = " + std::to_string(o.flush_denormals) +
                          " is not 0 (off) or 1 (on) (-1 takes WEFT_FLUSH_DENORMALS)");
  if (o.flush_denormals < 0) o.flush_denormals = static_cast<int>(settings::choice(Setting::flush_denormals, 0));
  if (o.flush_denormals && !detail::kCanFlushDenormals)
    throw InvalidArgument("flush_denormals = 1: this build's CPU architecture has no flush-to-zero mode weft can set "
                          "(x86 SSE or AArch64)");
}

}  // namespace

RuntimeOptions RuntimeOptions::resolved() const {
  RuntimeOptions o = *this;
  resolve_devices(o);
  resolve_collective_deadlines(o);
  resolve_logging(o);
  resolve_trace(o);
  // Validated here with the rest; bound to the job (do its targets exist?) when the Runtime starts.
  if (o.fault.empty() && settings::value(Setting::fault)) o.fault = settings::value(Setting::fault);
  detail::FaultPlan::parse(o.fault);
  resolve_flight_recorder(o, *this);
  resolve_scheduler(o);
  resolve_collective_paths(o);
  resolve_shared_products(o);
  resolve_shared_runs(o);
  resolve_flush_denormals(o);
  check_launcher_environment();
  settings::choice(Setting::malloc_tuning, 0);  // validated here, acted on by the Runtime (runtime.cc)
  return o;
}

}  // namespace weft
