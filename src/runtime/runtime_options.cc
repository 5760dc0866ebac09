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
#include "runtime/denormals.hpp"
#include "runtime/fault.hpp"
#include "weft/error.hpp"
#include "weft/runtime.hpp"

namespace weft {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

// The one rule for whitespace in every WEFT_* number: around the number it is ignored (a value pasted with a
// trailing newline is the number), inside it is a mistake. strtod and strtoll skip leading whitespace only,
// so before this rule " 8" was a count and "8 " was not.
std::string trimmed(const char* text) {
  std::string s = text;
  const char* space = " \t\n\r\f\v";
  const std::size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

double parse_seconds(const char* name, const char* given) {
  const std::string text = trimmed(given);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v >= 0) || std::isinf(v))
    throw InvalidArgument(std::string(name) + "=" + given + " is not a number of seconds >= 0");
  return v;
}

// A byte count with an optional binary suffix; whole bytes only, and representable: "1e30" or "inf" must not
// quietly become "unlimited" (0) or wrap.
std::int64_t parse_bytes(const char* name, const char* given, const char* zero = "0 = unlimited",
                         const char* limit = "a device holds at most 2^63 - 1 bytes") {
  const std::string what = std::string(name) + "=" + given;
  const std::string trimmed_text = trimmed(given);
  const char* text = trimmed_text.c_str();
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  const std::string suffix = end;
  double scale = 0;
  if (suffix.empty() || suffix == "B") scale = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB") scale = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  if (end == text || scale == 0 || !std::isfinite(v) || v < 0)
    throw InvalidArgument(what + " is not a byte count (a number >= 0 with an optional K, M or G suffix; " + zero + ")");
  const double bytes = v * scale;
  if (bytes >= 9223372036854775808.0)
    throw InvalidArgument(what + " is too large: " + limit + " (" + zero + ")");
  if (bytes != std::floor(bytes)) throw InvalidArgument(what + " is not a whole number of bytes");
  return static_cast<std::int64_t>(bytes);
}

// A whole number in [low, high], or an InvalidArgument "NAME=text is not <what>".
long long parse_count(const char* name, const char* given, long long low, long long high, const std::string& what) {
  const std::string text = trimmed(given);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || n < low || n > high)
    throw InvalidArgument(std::string(name) + "=" + given + " is not " + what);
  return n;
}

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
  if (const char* v = env("WEFT_NUM_INSTANCES"))
    parse_count("WEFT_NUM_INSTANCES", v, 1, 1 << 20, "a number of instances (a whole number >= 1; weftrun sets it)");
  if (const char* v = env("WEFT_NUM_REPLICAS"))
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
    o.device_count = env("WEFT_DEVICE_COUNT")
                         ? static_cast<int>(parse_count("WEFT_DEVICE_COUNT", env("WEFT_DEVICE_COUNT"), 1, kMaxDevices, devices_rule))
                         : 8;
  if (o.device_memory < -1)
    throw InvalidArgument("RuntimeOptions::device_memory = " + std::to_string(o.device_memory) +
                          " is not a byte count >= 0 (0 = unlimited, -1 takes WEFT_DEVICE_MEMORY)");
  if (o.device_memory < 0) o.device_memory = env("WEFT_DEVICE_MEMORY") ? parse_bytes("WEFT_DEVICE_MEMORY", env("WEFT_DEVICE_MEMORY")) : 0;
}

void resolve_collective_deadlines(RuntimeOptions& o) {
  check_seconds_option("collective_warn_s", o.collective_warn_s);
  check_seconds_option("collective_timeout_s", o.collective_timeout_s);
  const bool warn_given = o.collective_warn_s >= 0 || env("WEFT_COLLECTIVE_WARN");
  if (o.collective_warn_s < 0)
    o.collective_warn_s = env("WEFT_COLLECTIVE_WARN") ? parse_seconds("WEFT_COLLECTIVE_WARN", env("WEFT_COLLECTIVE_WARN")) : 30;
  if (o.collective_timeout_s < 0)
    o.collective_timeout_s =
        env("WEFT_COLLECTIVE_TIMEOUT") ? parse_seconds("WEFT_COLLECTIVE_TIMEOUT", env("WEFT_COLLECTIVE_TIMEOUT")) : 300;
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
  if (!debug_field && env("WEFT_DEBUG")) o.debug = env("WEFT_DEBUG");
  if (!o.debug.empty()) {
    const LogLevel level = parse_debug_level(o.debug);
    const std::string debug_what = debug_field ? "RuntimeOptions::debug = " + o.debug : "WEFT_DEBUG=" + o.debug;
    std::string other;  // the level set in the same place, if any
    if (level_field && debug_field) other = "RuntimeOptions::log_level = " + o.log_level;
    if (!level_field && !debug_field && env("WEFT_LOG")) other = std::string("WEFT_LOG=") + env("WEFT_LOG");
    if (!other.empty() && parse_log_level(level_field ? o.log_level : env("WEFT_LOG")) != level)
      throw InvalidArgument(debug_what + " and " + other + " disagree: " + debug_what + " means WEFT_LOG=" +
                            std::string(log_level_name(level)) + "; set only one of them");
    if (!level_field) o.log_level = std::string(log_level_name(level));
  }
  if (o.log_level.empty()) o.log_level = env("WEFT_LOG") ? env("WEFT_LOG") : "warn";
  parse_log_level(o.log_level);
  if (o.debug_subsys.empty() && env("WEFT_DEBUG_SUBSYS")) o.debug_subsys = env("WEFT_DEBUG_SUBSYS");
  if (!o.debug_subsys.empty()) parse_log_subsystems(o.debug_subsys);
  if (o.debug_file.empty() && env("WEFT_DEBUG_FILE")) o.debug_file = env("WEFT_DEBUG_FILE");
  if (!o.debug_file.empty()) expand_log_file_pattern(o.debug_file, 0);
}

void resolve_trace(RuntimeOptions& o) {
  if (o.trace_path.empty() && env("WEFT_TRACE")) o.trace_path = env("WEFT_TRACE");
  if (o.trace_events < 0)
    throw InvalidArgument("RuntimeOptions::trace_events = " + std::to_string(o.trace_events) +
                          " is not a number of events >= 1 (0 takes WEFT_TRACE_EVENTS)");
  if (o.trace_events == 0)
    o.trace_events = env("WEFT_TRACE_EVENTS")
                         ? parse_count("WEFT_TRACE_EVENTS", env("WEFT_TRACE_EVENTS"), 1, 1'000'000'000,
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
    o.flight_recorder = env("WEFT_FLIGHT_RECORDER")
                            ? static_cast<int>(parse_count("WEFT_FLIGHT_RECORDER", env("WEFT_FLIGHT_RECORDER"), 0,
                                                           kMaxFlightRecords, flight_rule + ")"))
                            : kDefaultFlightRecords;
  const bool dump_given = !o.dump_dir.empty();
  if (o.dump_dir.empty() && env("WEFT_DUMP")) o.dump_dir = env("WEFT_DUMP");
  if (!o.dump_dir.empty()) {
    const std::string what = dump_given ? "RuntimeOptions::dump_dir = " + o.dump_dir : "WEFT_DUMP=" + o.dump_dir;
    struct stat info {};
    if (::stat(o.dump_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
      throw InvalidArgument(what + " is not a directory (flight-recorder dumps are written there)");
    if (o.flight_recorder == 0)
      throw InvalidArgument(what + " asks for flight-recorder dumps but " +
                            (env("WEFT_FLIGHT_RECORDER") && flight_recorder_from_env(given)
                                 ? std::string("WEFT_FLIGHT_RECORDER=0")
                                 : std::string("RuntimeOptions::flight_recorder = 0")) +
                            " records nothing; unset one of them");
  }
}

// Where replicas run (runtime/fiber_scheduler.hpp), and the stack of a fiber: as large as a thread's default.
constexpr std::int64_t kDefaultFiberStack = std::int64_t{8} << 20, kMinFiberStack = 64 << 10;
void resolve_scheduler(RuntimeOptions& o) {
  const bool scheduler_given = !o.scheduler.empty();
  if (o.scheduler.empty()) o.scheduler = env("WEFT_SCHEDULER") ? env("WEFT_SCHEDULER") : "fibers";
  if (o.scheduler != "threads" && o.scheduler != "fibers")
    throw InvalidArgument((scheduler_given ? "RuntimeOptions::scheduler = " : "WEFT_SCHEDULER=") + o.scheduler +
                          " is not a scheduler: use threads (an OS thread per device) or fibers (replicas as fibers on "
                          "one thread per core)");
  if (o.fiber_stack_bytes < -1 || (o.fiber_stack_bytes >= 0 && o.fiber_stack_bytes < kMinFiberStack))
    throw InvalidArgument("RuntimeOptions::fiber_stack_bytes = " + std::to_string(o.fiber_stack_bytes) +
                          " is not a stack size of at least 64 KiB (-1 takes WEFT_FIBER_STACK)");
  if (o.fiber_stack_bytes < 0) {
    o.fiber_stack_bytes = kDefaultFiberStack;
    if (const char* text = env("WEFT_FIBER_STACK")) {
      o.fiber_stack_bytes = parse_bytes("WEFT_FIBER_STACK", text, "a stack of at least 64 KiB", "at most 2^63 - 1 bytes");
      if (o.fiber_stack_bytes < kMinFiberStack)
        throw InvalidArgument(std::string("WEFT_FIBER_STACK=") + text +
                              " is not a stack size of at least 64 KiB (bytes, K/M/G suffixes; default 8M)");
    }
  }
}

// A size at which the collectives change algorithm (collectives::Thresholds): the field, else the variable,
// else the default. 0 is allowed: every buffer takes the larger buffers' algorithm.
void resolve_threshold(std::int64_t& field, const char* name, const char* variable, std::size_t fallback) {
  if (field < -1)
    throw InvalidArgument(std::string("RuntimeOptions::") + name + " = " + std::to_string(field) +
                          " is not a byte count >= 0 (-1 takes " + variable + ")");
  if (field < 0)
    field = env(variable) ? parse_bytes(variable, env(variable), "0 = every buffer", "at most 2^63 - 1 bytes")
                          : static_cast<std::int64_t>(fallback);
}

// The collectives' algorithm sizes and the cross-process agreement (collectives::verified).
void resolve_collective_paths(RuntimeOptions& o) {
  resolve_threshold(o.split_bytes, "split_bytes", "WEFT_SPLIT_BYTES", collectives::Thresholds::kDefaultSplitBytes);
  resolve_threshold(o.ring_bytes, "ring_bytes", "WEFT_RING_BYTES", collectives::Thresholds::kDefaultRingBytes);
  if (o.verify < -1 || o.verify > 1)
    throw InvalidArgument("RuntimeOptions::verify = " + std::to_string(o.verify) +
                          " is not 0 (off) or 1 (on) (-1 takes WEFT_VERIFY)");
  if (o.verify < 0)
    o.verify = env("WEFT_VERIFY") ? static_cast<int>(parse_count("WEFT_VERIFY", env("WEFT_VERIFY"), 0, 1,
                                                                 "0 (off) or 1 (on: processes agree on each collective)"))
                                  : 1;
}

// The executor's shared products (program/shared_products.hpp).
void resolve_shared_products(RuntimeOptions& o) {
  if (o.shared_products < -1 || o.shared_products > 2)
    throw InvalidArgument("RuntimeOptions::shared_products = " + std::to_string(o.shared_products) +
                          " is not 0 (off), 1 (on) or 2 (on, weights checked) (-1 takes WEFT_SHARED_PRODUCTS)");
  if (o.shared_products < 0)
    o.shared_products =
        env("WEFT_SHARED_PRODUCTS")
            ? static_cast<int>(parse_count("WEFT_SHARED_PRODUCTS", env("WEFT_SHARED_PRODUCTS"), 0, 2,
                                           "0 (off), 1 (on) or 2 (on, the shared weights checked bitwise)"))
            : 0;
}

// The executor's shared runs (program/shared_runs.hpp).
void resolve_shared_runs(RuntimeOptions& o) {
  if (o.shared_runs < -1 || o.shared_runs > 2)
    throw InvalidArgument("RuntimeOptions::shared_runs = " + std::to_string(o.shared_runs) +
                          " is not 0 (off), 1 (on) or 2 (on, inputs checked) (-1 takes WEFT_SHARED_RUNS)");
  if (o.shared_runs < 0)
    o.shared_runs = env("WEFT_SHARED_RUNS")
                        ? static_cast<int>(parse_count("WEFT_SHARED_RUNS", env("WEFT_SHARED_RUNS"), 0, 2,
                                                       "0 (off), 1 (on) or 2 (on, the shared inputs checked bitwise)"))
                        : 1;
}

// The FPU's denormal modes inside replicas (runtime/denormals.hpp).
void resolve_flush_denormals(RuntimeOptions& o) {
  if (o.flush_denormals < -1 || o.flush_denormals > 1)
    throw InvalidArgument("RuntimeOptions::flush_denormals = " + std::to_string(o.flush_denormals) +
                          " is not 0 (off) or 1 (on) (-1 takes WEFT_FLUSH_DENORMALS)");
  if (o.flush_denormals < 0)
    o.flush_denormals = env("WEFT_FLUSH_DENORMALS")
                            ? static_cast<int>(parse_count("WEFT_FLUSH_DENORMALS", env("WEFT_FLUSH_DENORMALS"), 0, 1,
                                                           "0 (off: IEEE gradual underflow) or 1 (on: flush to zero)"))
                            : 0;
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
  if (o.fault.empty() && env("WEFT_FAULT")) o.fault = env("WEFT_FAULT");
  detail::FaultPlan::parse(o.fault);
  resolve_flight_recorder(o, *this);
  resolve_scheduler(o);
  resolve_collective_paths(o);
  resolve_shared_products(o);
  resolve_shared_runs(o);
  resolve_flush_denormals(o);
  check_launcher_environment();
  return o;
}

}  // namespace weft
