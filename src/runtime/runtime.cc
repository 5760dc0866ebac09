#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <sstream>
#include <system_error>

#include <sys/stat.h>
#include <unistd.h>

#include "collectives/host_exchange.hpp"
#include "core/isa.hpp"
#include "core/launcher_protocol.hpp"
#include "core/log.hpp"
#include "transport/interprocess.hpp"
#include "runtime/fiber_scheduler.hpp"
#include "runtime/internal.hpp"
#include "weft/error.hpp"

namespace weft {

// ---- devices ---------------------------------------------------------------------------------------------

std::string to_string(const Device& device) {
  return "CpuDevice(id=" + std::to_string(device.id) + ", process=" + std::to_string(device.process_index) + ")";
}
std::ostream& operator<<(std::ostream& os, const Device& device) { return os << to_string(device); }
std::ostream& operator<<(std::ostream& os, const std::vector<Device>& devices) {
  os << "[";
  for (std::size_t i = 0; i < devices.size(); ++i) os << (i ? ",\n " : "") << devices[i];
  return os << "]";
}


// ---- options ---------------------------------------------------------------------------------------------
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

double parse_seconds(const char* name, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= 0) || std::isinf(v))
    throw InvalidArgument(std::string(name) + "=" + text + " is not a number of seconds >= 0");
  return v;
}

// A byte count with an optional binary suffix; whole bytes only, and representable: "1e30" or "inf" must not
// quietly become "unlimited" (0) or wrap.
std::int64_t parse_bytes(const char* name, const char* text, const char* zero = "0 = unlimited",
                         const char* limit = "a device holds at most 2^63 - 1 bytes") {
  const std::string what = std::string(name) + "=" + text;
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
long long parse_count(const char* name, const char* text, long long low, long long high, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || n < low || n > high)
    throw InvalidArgument(std::string(name) + "=" + text + " is not " + what);
  return n;
}

std::string number_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A RuntimeOptions field in seconds: negative means unset; NaN and infinity are mistakes (0 means never).
void check_seconds_option(const char* field, double v) {
  if (std::isnan(v) || std::isinf(v))
    throw InvalidArgument(std::string("RuntimeOptions::") + field + " = " + number_str(v) +
                          " is not a number of seconds >= 0 (0 disables it, a negative value takes the environment)");
}

constexpr int kMaxDevices = 4096;  // per process: one worker thread each
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

}  // namespace

RuntimeOptions RuntimeOptions::resolved() const {
  RuntimeOptions o = *this;
  const std::string devices_rule = "a device count between 1 and " + std::to_string(kMaxDevices);
  if (o.device_count > kMaxDevices)
    throw InvalidArgument("RuntimeOptions::device_count = " + std::to_string(o.device_count) + " is not " + devices_rule +
                          " (0 takes WEFT_DEVICE_COUNT)");
  if (o.device_count <= 0)
    o.device_count = env("WEFT_DEVICE_COUNT")
                         ? static_cast<int>(parse_count("WEFT_DEVICE_COUNT", env("WEFT_DEVICE_COUNT"), 1, kMaxDevices, devices_rule))
                         : 8;
  if (o.device_memory < 0) o.device_memory = env("WEFT_DEVICE_MEMORY") ? parse_bytes("WEFT_DEVICE_MEMORY", env("WEFT_DEVICE_MEMORY")) : 0;
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
  if (o.trace_path.empty() && env("WEFT_TRACE")) o.trace_path = env("WEFT_TRACE");
  if (o.trace_events < 0)
    throw InvalidArgument("RuntimeOptions::trace_events = " + std::to_string(o.trace_events) +
                          " is not a number of events >= 1 (0 takes WEFT_TRACE_EVENTS)");
  if (o.trace_events == 0)
    o.trace_events = env("WEFT_TRACE_EVENTS")
                         ? parse_count("WEFT_TRACE_EVENTS", env("WEFT_TRACE_EVENTS"), 1, 1'000'000'000,
                                       "a number of events between 1 and 1000000000")
                         : kDefaultTraceEvents;
  // Validated here with the rest; bound to the job (do its targets exist?) when the Runtime starts.
  if (o.fault.empty() && env("WEFT_FAULT")) o.fault = env("WEFT_FAULT");
  detail::FaultPlan::parse(o.fault);
  // R21: the flight recorder's depth, and where its dumps go (an existing directory, checked now rather than
  // when a failure finds out).
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
                            (env("WEFT_FLIGHT_RECORDER") && flight_recorder_from_env(*this)
                                 ? std::string("WEFT_FLIGHT_RECORDER=0")
                                 : std::string("RuntimeOptions::flight_recorder = 0")) +
                            " records nothing; unset one of them");
  }
  // Where replicas run (runtime/fiber_scheduler.hpp).
  const bool scheduler_given = !o.scheduler.empty();
  if (o.scheduler.empty()) o.scheduler = env("WEFT_SCHEDULER") ? env("WEFT_SCHEDULER") : "fibers";
  if (o.scheduler != "threads" && o.scheduler != "fibers")
    throw InvalidArgument((scheduler_given ? "RuntimeOptions::scheduler = " : "WEFT_SCHEDULER=") + o.scheduler +
                          " is not a scheduler: use threads (an OS thread per device) or fibers (replicas as fibers on "
                          "one thread per core)");
  resolve_threshold(o.split_bytes, "split_bytes", "WEFT_SPLIT_BYTES", collectives::Thresholds::kDefaultSplitBytes);
  resolve_threshold(o.ring_bytes, "ring_bytes", "WEFT_RING_BYTES", collectives::Thresholds::kDefaultRingBytes);
  if (o.verify < -1 || o.verify > 1)
    throw InvalidArgument("RuntimeOptions::verify = " + std::to_string(o.verify) +
                          " is not 0 (off) or 1 (on) (-1 takes WEFT_VERIFY)");
  if (o.verify < 0)
    o.verify = env("WEFT_VERIFY") ? static_cast<int>(parse_count("WEFT_VERIFY", env("WEFT_VERIFY"), 0, 1,
                                                                 "0 (off) or 1 (on: processes agree on each collective)"))
                                  : 1;
  check_launcher_environment();
  return o;
}

// ---- device workers --------------------------------------------------------------------------------------

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
  // Arrays computed on this thread are charged to this device.
  ScopedMemoryAccount on_device(account_);
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

const Device& Runtime::Impl::device(int id) const {
  if (id < 0 || id >= static_cast<int>(devices.size()))
    throw InvalidArgument("no device with id " + std::to_string(id) + "; this runtime has " +
                          std::to_string(devices.size()) + " devices (ids 0.." + std::to_string(devices.size() - 1) + ")");
  return devices[id];
}

const Device& Runtime::Impl::device(const Device& d, const std::string& what) const {
  const Device& known = device(d.id);
  if (!(known == d))
    throw InvalidArgument(what + ": " + to_string(d) + " is not a device of this runtime: device " +
                          std::to_string(d.id) + " is " + to_string(known) + " (this job has " +
                          std::to_string(process_count) + (process_count == 1 ? " process" : " processes") + ")");
  return known;
}

// ---- runtime ---------------------------------------------------------------------------------------------
namespace {
std::mutex g_runtimes_mutex;
std::vector<Runtime*> g_runtimes;  // live runtimes, most recent last

// Where this process's device count came from, for the job checks below. A count hard-coded in the program
// (RuntimeOptions::device_count) overrides the WEFT_DEVICE_COUNT weftrun gives each instance: blaming that
// variable then sent users looking for a setting they never made (issue 10).
std::string device_count_source(const RuntimeOptions& given, int count) {
  if (given.device_count > 0) return "RuntimeOptions::device_count = " + std::to_string(count) + " in the program";
  if (const char* v = std::getenv("WEFT_DEVICE_COUNT")) return std::string("WEFT_DEVICE_COUNT=") + v;
  return "the default of " + std::to_string(count) + " (WEFT_DEVICE_COUNT unset)";
}

// Every instance must see the same configuration (reliability R27): devices per process, and the replica
// count weftrun announced.
void check_job_configuration(Runtime::Impl& rt, const std::string& count_source, bool hard_coded) {
  // What to do when the program's own count is what breaks the job: weftrun sets the count for it.
  const std::string fix = hard_coded ? "; under weftrun leave RuntimeOptions::device_count at 0 (its default) so "
                                       "that each instance takes the WEFT_DEVICE_COUNT weftrun sets "
                                       "(--num-replicas / --num-instances)"
                                     : "";
  collectives::HostExchange exchange(*rt.job, rt.options.collective_timeout_s);
  const int processes = exchange.processes();
  std::vector<int> counts(processes);
  const std::vector<std::byte> all =
      exchange.all_gather("start-up", std::as_bytes(std::span<const int>(&rt.local_device_count, 1)));
  std::memcpy(counts.data(), all.data(), all.size());
  for (int p = 0; p < processes; ++p)
    if (counts[p] != counts[0]) {
      std::string list;
      for (int q = 0; q < processes; ++q) {
        if (q) list += ", ";
        list += "instance " + std::to_string(q) + ": " + std::to_string(counts[q]);
      }
      throw InvalidArgument("the instances of this job disagree on their device count: " + list + " (this instance's " +
                            std::to_string(rt.local_device_count) + " is " + count_source + ")" + fix);
    }
  if (const std::string& r = launcher::launch_environment().num_replicas; !r.empty()) {
    if (std::atoi(r.c_str()) != processes * rt.local_device_count)
      throw InvalidArgument(std::string(launcher::kNumReplicasVariable) + "=" + r + " (weftrun --num-replicas) but this job has " +
                            std::to_string(processes) + " instances x " + std::to_string(rt.local_device_count) +
                            " devices (" + count_source + ")" + fix);
  }
}

// Tells the launcher this instance started (reliability R26): $WEFT_JOB_DIR/instance-<i>.registered, with
// the rank from the MPI launcher's environment (known before MPI starts, which waits for every instance).
void register_instance() {
  const launcher::LaunchEnvironment& launch = launcher::launch_environment();
  if (launch.job_dir.empty() || launch.rank.empty()) return;
  const std::string path = launcher::record_path(launch.job_dir, launch.rank, launcher::kRegistered);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%d %s\n", static_cast<int>(getpid()), host);
    std::fclose(f);
  }
}
}  // namespace


Runtime::Runtime(RuntimeOptions options) : impl_((isa::check_cpu(), std::make_unique<Impl>())) {
  impl_->options = options.resolved();
  set_log_level(parse_log_level(impl_->options.log_level));
  // Under weftrun / mpirun this process is one instance of a job; its devices are a slice of the global ones.
  // It registers with the launcher first: starting MPI waits for every other instance.
  register_instance();
  impl_->job = transport::Interprocess::job();
  const int local = impl_->options.device_count;
  const int processes = impl_->job ? impl_->job->size() : 1;
  impl_->process_index = impl_->job ? impl_->job->rank() : 0;
  impl_->process_count = processes;
  impl_->local_device_count = local;
  // The process index is known now: WEFT_DEBUG's tags and file name use it.
  configure_log({parse_log_level(impl_->options.log_level),
                 !impl_->options.debug.empty() || !impl_->options.debug_subsys.empty() ||
                     !impl_->options.debug_file.empty(),
                 impl_->options.debug_subsys.empty() ? kAllLogSubsystems : parse_log_subsystems(impl_->options.debug_subsys),
                 impl_->options.debug_file.empty() ? std::string()
                                                   : expand_log_file_pattern(impl_->options.debug_file, impl_->process_index),
                 impl_->process_index});
  log_configuration(options, *impl_);
  if (impl_->job) check_job_configuration(*impl_, device_count_source(options, local), options.device_count > 0);
  // Every instance writes its own timeline: WEFT_TRACE=t.json gives t.json.0, t.json.1, ... in a job.
  std::string trace_path = impl_->options.trace_path;
  if (!trace_path.empty() && processes > 1) trace_path += "." + std::to_string(impl_->process_index);
  impl_->tracer = std::make_unique<Tracer>(trace_path, impl_->process_index, impl_->options.trace_events);
  for (int p = 0; p < processes; ++p)
    for (int k = 0; k < local; ++k) {
      Device d{p * local + k, p, "cpu"};
      impl_->devices.push_back(d);
      impl_->accounts.push_back(std::make_shared<MemoryAccount>(to_string(d), impl_->options.device_memory));
    }
  if (!impl_->options.fault.empty())
    impl_->faults = std::make_unique<detail::FaultPlan>(impl_->options.fault, impl_->process_index, processes,
                                                        static_cast<int>(impl_->devices.size()));
  if (impl_->options.flight_recorder > 0)
    impl_->flight = std::make_unique<detail::FlightRecorder>(static_cast<int>(impl_->devices.size()),
                                                             impl_->process_index * local, local,
                                                             impl_->options.flight_recorder);
  if (impl_->options.scheduler == "fibers") {
    // One worker per core at most (the caller of a run is one of them); a device needs no thread of its own.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    try {
      impl_->fibers = std::make_unique<detail::FiberScheduler>(std::min(local, cores));
    } catch (const std::system_error& e) {
      throw Error(std::string("cannot start the fiber scheduler's worker threads: ") + e.what() +
                  " (raise the process's thread limit, or WEFT_SCHEDULER=threads)");
    }
  }
  impl_->workers.resize(impl_->devices.size());
  for (int k = 0; k < local && !impl_->fibers; ++k) {
    const int id = impl_->process_index * local + k;
    try {
      impl_->workers[id] = std::make_unique<DeviceWorker>(impl_->devices[id], impl_->accounts[id]);
    } catch (const std::system_error& e) {
      // Out of threads (or of memory for their stacks): the workers made so far are joined as impl_ unwinds.
      throw Error("cannot start the worker thread of " + to_string(impl_->devices[id]) + ": " + e.what() + " (" +
                  std::to_string(k) + " of " + std::to_string(local) + " devices started; lower WEFT_DEVICE_COUNT " +
                  "or RuntimeOptions::device_count, or raise the process's thread limit)");
    }
  }
  std::lock_guard lock(g_runtimes_mutex);
  g_runtimes.push_back(this);
}

Runtime::~Runtime() {
  {
    std::lock_guard lock(g_runtimes_mutex);
    g_runtimes.erase(std::remove(g_runtimes.begin(), g_runtimes.end(), this), g_runtimes.end());
  }
  if (impl_->tracer->enabled()) impl_->tracer->write();
}

// ---- trace -----------------------------------------------------------------------------------------------

void Tracer::span(std::string name, int replica, Clock::time_point begin, Clock::time_point end, std::string args_json) {
  auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - start_).count(); };
  Event e{std::move(name), replica, us(begin), us(end) - us(begin), std::move(args_json)};
  std::lock_guard lock(mutex_);
  if (events_.size() < capacity_) {
    events_.push_back(std::move(e));
  } else {
    events_[next_] = std::move(e);
    next_ = (next_ + 1) % capacity_;
    ++dropped_;
  }
}

void Tracer::write() const {
  std::lock_guard lock(mutex_);
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (!f) {
    log(LogLevel::error, "WEFT_TRACE: cannot open " + path_ + ": " + std::strerror(errno));
    return;
  }
  std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
  for (std::size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[(next_ + i) % events_.size()];  // oldest first
    std::fprintf(f, "%s{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": %s}",
                 i ? ",\n" : "", e.name.c_str(), process_, e.replica, e.begin_us, e.duration_us,
                 e.args_json.empty() ? "{}" : e.args_json.c_str());
  }
  if (dropped_ > 0)
    std::fprintf(f, "\n], \"otherData\": {\"dropped_events\": %llu, \"kept_events\": %zu}}\n",
                 static_cast<unsigned long long>(dropped_), events_.size());
  else
    std::fputs("\n]}\n", f);
  // Written through a buffer: a full disk (or /dev/full) shows only at the flush in fclose.
  const bool failed = std::ferror(f) != 0;
  const int write_errno = errno;
  const bool close_failed = std::fclose(f) != 0;
  if (failed || close_failed)
    log(LogLevel::error, "WEFT_TRACE: writing " + path_ + " failed: " + std::strerror(close_failed ? errno : write_errno) +
                             " (the timeline is incomplete)");
}

Runtime& Runtime::current() {
  {
    std::lock_guard lock(g_runtimes_mutex);
    if (!g_runtimes.empty()) return *g_runtimes.back();
  }
  // A default runtime (options from the environment) for programs that never make one; it lives until exit.
  static Runtime* fallback = new Runtime();
  return *fallback;
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
          s.collectives.bytes_reduced.load()};
}

void Runtime::reset_stats() {
  auto& s = impl_->stats;
  for (auto* c : {&s.preparations, &s.executions, &s.h2d, &s.d2h, &s.collectives.rounds, &s.collectives.bytes_reduced})
    c->store(0);
}

// ---- executions ------------------------------------------------------------------------------------------
namespace detail {

GroupCache::GroupCache() : id_([] {
  static std::atomic<std::uint64_t> next{1};
  return next++;
}()) {}

std::shared_ptr<const ReplicaGroups> GroupCache::along_axes(const Mesh& mesh, const Axes& axes,
                                                            const AxisIndexGroups& index_groups) {
  // A replica usually repeats the collective it just issued: remember its last lookup, no key, no lock.
  struct LastLookup {
    std::uint64_t cache = 0;
    std::vector<std::string> names;
    AxisIndexGroups index_groups;
    std::shared_ptr<const ReplicaGroups> groups;
  };
  thread_local LastLookup last;
  if (last.cache == id_ && last.names == axes.names && last.index_groups == index_groups) return last.groups;
  auto remember = [&](std::shared_ptr<const ReplicaGroups> groups) {
    last = {id_, axes.names, index_groups, groups};
    return groups;
  };
  std::string key;
  for (const std::string& a : axes.names) key += a + '\x1f';
  key += '\x1e';
  for (const auto& g : index_groups) {
    for (int i : g) key += std::to_string(i) + ',';
    key += ';';
  }
  std::lock_guard lock(mutex_);
  auto it = groups_.find(key);
  if (it != groups_.end()) return remember(it->second);
  ReplicaGroups groups = ReplicaGroups::along_axes(mesh, axes.names);
  if (!index_groups.empty()) {
    if (axes.names.size() != 1)
      throw InvalidArgument("axis_index_groups only apply to a single named axis, got " + std::to_string(axes.names.size()) + " axes");
    groups = groups.subdivide(index_groups);
  }
  auto shared = std::make_shared<const ReplicaGroups>(std::move(groups));
  groups_.emplace(key, shared);
  return remember(shared);
}

namespace {
std::vector<int> local_replicas_of(const Runtime::Impl& rt, const std::vector<Device>& devices) {
  std::vector<int> local;
  for (std::size_t r = 0; r < devices.size(); ++r)
    if (devices[r].process_index == rt.process_index) local.push_back(static_cast<int>(r));
  return local;
}
}  // namespace

namespace {
collectives::Participants participants_of(const Execution& ex, const Runtime::Impl& rt) {
  collectives::Participants p;
  p.execution_name = ex.name;
  p.num_replicas = ex.num_replicas();
  p.local_replicas = ex.local_replicas;
  p.process_of.reserve(ex.devices.size());
  for (const Device& d : ex.devices) p.process_of.push_back(d.process_index);
  p.name = [&ex](int replica) { return ex.replica_name(replica); };
  p.account_of = [&rt, &ex](int replica) { return rt.accounts[ex.devices[replica].id]; };
  return p;
}
}  // namespace

Execution::Execution(Runtime::Impl& rt, std::string execution_name, Mesh m, std::vector<Device> devs,
                     GroupCache& group_cache)
    : runtime(rt),
      name(std::move(execution_name)),
      mesh(std::move(m)),
      devices(std::move(devs)),
      local_replicas(local_replicas_of(rt, devices)),
      groups(group_cache),
      communicator(participants_of(*this, rt),
                   transport::Deadlines{rt.options.collective_warn_s, rt.options.collective_timeout_s}, rt.job,
                   rt.stats.collectives,
                   collectives::Thresholds{static_cast<std::size_t>(rt.options.split_bytes),
                                           static_cast<std::size_t>(rt.options.ring_bytes)},
                   rt.options.verify != 0) {}

std::string Execution::replica_name(int replica) const {
  return "replica " + std::to_string(replica) + " (" + to_string(devices[replica]) + ")";
}

namespace {
// In a job of several instances, the launcher shows the root cause first: announce it on stderr and in
// $WEFT_JOB_DIR/instance-<i>.error before the error travels up this process's stack.
// A failure that only follows another instance's (it announced itself first) is reported as "aborted", so
// the launcher, which takes the earliest "weft: error:" line as the root cause, cannot mistake it for one
// when its output happens to arrive first.
void report_to_launcher(const Runtime::Impl& rt, const std::string& message) {
  if (rt.process_count <= 1) return;
  const std::string line = "instance " + std::to_string(rt.process_index) + ": " + message;
  const bool consequence = rt.job->peer_failed();
  rt.job->mark_failed(line.substr(0, line.find('\n')));
  if (consequence) {
    const std::string text = std::string(launcher::kAbortedPrefix) + line + "\n";
    [[maybe_unused]] ssize_t written = ::write(2, text.data(), text.size());
  } else {
    log(LogLevel::error, line);
  }
  if (const std::string& dir = launcher::launch_environment().job_dir; !dir.empty()) {
    const std::string path =
        launcher::record_path(dir, rt.process_index, consequence ? launcher::kAborted : launcher::kError);
    if (std::FILE* f = std::fopen(path.c_str(), "a")) {
      std::fprintf(f, "%s\n", line.c_str());
      std::fclose(f);
    }
  }
}
}  // namespace

namespace {
// The runtime's turn for one execution: waits while another one runs and makes progress; fails when the
// one in flight completes no collective for the collective timeout (it may be waiting for this caller).
class Admitted {
 public:
  Admitted(Runtime::Impl& rt, const std::string& name) : rt_(rt) {
    using Clock = std::chrono::steady_clock;
    auto& a = rt.admission;
    std::unique_lock lock(a.mutex);
    if (a.busy) {
      const double warn_s = rt.options.collective_warn_s, timeout_s = rt.options.collective_timeout_s;
      Clock::time_point start = Clock::now();
      std::uint64_t seen = rt.liveness();
      bool warned = false;
      while (a.busy) {
        const Clock::time_point fail_at = transport::deadline_after(start, timeout_s);
        const Clock::time_point warn_at = warned ? Clock::time_point::max() : transport::deadline_after(start, warn_s);
        a.cv.wait_until(lock, std::min(fail_at, warn_at));
        if (!a.busy) break;
        const Clock::time_point now = Clock::now();
        if (rt.liveness() != seen) {  // the execution in flight is alive: wait afresh
          seen = rt.liveness();
          start = now;
          warned = false;
          continue;
        }
        const double running_s = std::chrono::duration<double>(now - a.since).count();
        const std::string why = a.running + " is running on this runtime (for " + transport::seconds_str(running_s) +
                                ") and completed no collective meanwhile; executions run one at a time, so a pmap "
                                "called from a thread that a replica started cannot start before that replica "
                                "returns (use one program over a multi-axis mesh instead)";
        if (now >= fail_at)
          throw TimeoutError(name + ": could not start within " + transport::seconds_str(timeout_s) +
                             " (WEFT_COLLECTIVE_TIMEOUT): " + why);
        if (now >= warn_at) {
          warned = true;
          log(LogLevel::warn, name + ": waiting " + transport::seconds_str(warn_s) + " (WEFT_COLLECTIVE_WARN) to start: " + why);
        }
      }
    }
    a.busy = true;
    a.running = name;
    a.since = Clock::now();
  }
  ~Admitted() {
    {
      std::lock_guard lock(rt_.admission.mutex);
      rt_.admission.busy = false;
    }
    rt_.progress++;
    rt_.admission.cv.notify_all();
  }
  Admitted(const Admitted&) = delete;
  Admitted& operator=(const Admitted&) = delete;

 private:
  Runtime::Impl& rt_;
};
}  // namespace

void Execution::run(const std::function<void(Replica&)>& body) {
  if (t_current_execution)
    throw InvalidArgument(name + ": cannot start a program from inside " + t_current_execution->name +
                          " (a replica's function); use one program over a multi-axis mesh instead");
  // Numbered before the early return below, so that every instance of a job numbers its executions alike.
  serial = runtime.execution_serial.fetch_add(1);
  const int n = static_cast<int>(local_replicas.size());
  if (n == 0) return;  // none of this program's devices belongs to this process
  Admitted admitted(runtime, name);
  if (log_enabled(LogLevel::debug, LogSubsys::coll))
    log(LogLevel::debug, LogSubsys::coll,
        name + " #" + std::to_string(serial) + ": starts on " + std::to_string(n) + " local replica" + (n == 1 ? "" : "s") +
            " of " + std::to_string(num_replicas()));
  remaining_ = n;
  errors_.assign(n, std::nullopt);
  runtime.stats.executions++;
  std::vector<std::function<void()>> tasks;
  tasks.reserve(n);
  for (int li = 0; li < n; ++li) {
    const int r = local_replicas[li];
    tasks.emplace_back([this, r, li, &body] {
      // Arrays the replica computes are charged to its device (a device thread has this already; a fiber
      // worker serves several devices).
      ScopedMemoryAccount on_device(runtime.accounts[devices[r].id]);
      FlightRing* flight = runtime.flight ? runtime.flight->rings[devices[r].id].get() : nullptr;
      ReplicaState state{this, r, li, &devices[r], flight};
      Replica replica(&state);
      t_current_execution = this;
      t_error_from_collective = false;
      set_log_replica(r);  // WEFT_DEBUG lines of this thread name the replica
      std::optional<ErrorRecord> error;
      try {
        body(replica);
        communicator.depart(li);
      } catch (...) {
        error = current_error();
        // An array op's error (a shape mismatch) has no call site: say which replica and where it was. (The
        // op functions cannot take a std::source_location: operators have fixed arity.)
        if (!t_error_from_collective &&
            (error->kind == ErrorKind::invalid_argument || error->kind == ErrorKind::out_of_memory)) {
          const std::size_t eol = error->message.find('\n');
          error->message.insert(eol == std::string::npos ? error->message.size() : eol,
                                " (in the replica's own code, " + communicator.position_of(li) + ")");
        }
      }
      t_current_execution = nullptr;
      set_log_replica(-1);
      if (error) {
        // The first failure poisons the execution; the others' pending waits end with its cause.
        const bool first = communicator.abort(li, error->message);
        // Other instances may wait for this one in a collective: tell them now, not once every local
        // replica has returned (one stuck in user code would hold the news until it returns).
        if (first && runtime.process_count > 1)
          report_to_launcher(runtime, name + ": " + replica_name(r) + " failed: " + error->message);
        // R21: the replica's last collectives, written by its own thread (the ring's only writer) after the
        // others were released by the abort above; a failed write is logged, never thrown.
        if (flight && !runtime.options.dump_dir.empty())
          flight->dump(runtime.options.dump_dir, {runtime.process_index, runtime.process_count, r, devices[r].id,
                                                  serial, name, num_replicas(), error->message});
        std::lock_guard lock(mutex_);
        errors_[li] = std::move(error);
        if (first) root_cause_ = li;
      }
      std::lock_guard lock(mutex_);
      if (--remaining_ == 0) done_cv_.notify_all();
    });
  }
  if (runtime.fibers) {
    runtime.fibers->run(tasks);  // returns once every replica has
  } else {
    for (int li = 0; li < n; ++li) runtime.workers[devices[local_replicas[li]].id]->submit(tasks[li]);
  }
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return remaining_ == 0; });
  if (root_cause_ < 0) return;
  const int root = local_replicas[root_cause_];
  std::string message = name + ": " + replica_name(root) + " failed: " + errors_[root_cause_]->message;
  // The root cause's hint (R23, core/error_hints.hpp) goes last, after the other replicas' lines: the advice
  // ends the report.
  std::string hint;
  if (const std::size_t at = message.find("\n  hint: "); at != std::string::npos) {
    const std::size_t end = std::min(message.find('\n', at + 1), message.size());
    hint = message.substr(at, end - at);
    message.erase(at, end - at);
  }
  const std::string& root_error = errors_[root_cause_]->message;
  const std::string root_text = root_error.substr(0, root_error.find('\n'));
  // (reported to the launcher when it happened, above)
  for (int li = 0; li < n; ++li) {
    if (li == root_cause_ || !errors_[li]) continue;
    // Errors raised by the runtime already start with the replica's name.
    const std::string who = replica_name(local_replicas[li]);
    // Only the first line: details (reports, histories) belong to the root cause above.
    std::string text = errors_[li]->message.substr(0, errors_[li]->message.find('\n'));
    // The root cause is printed once: an abort it caused, or the same error seen by another replica (every
    // replica of a mismatched round raises it), is listed without repeating it.
    const std::string aborted = who + " aborted because " + replica_name(root) + " failed";
    if (text.rfind(aborted, 0) == 0) text = aborted;
    // (A timeout every waiter saw differs from the root cause's only in the replica it names.)
    std::string as_root = text;
    const std::string root_who = replica_name(root);
    for (std::size_t at = as_root.find(who); at != std::string::npos; at = as_root.find(who, at + root_who.size()))
      as_root.replace(at, who.size(), root_who);
    if (text == root_text || as_root == root_text) text = "the same error";
    message += "\n  " + (text.rfind(who, 0) == 0 ? text : who + ": " + text);
  }
  message += hint;
  throw_error(errors_[root_cause_]->kind, message);
}

}  // namespace detail
}  // namespace weft
