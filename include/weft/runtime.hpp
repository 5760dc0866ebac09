// Devices and the runtime that owns them. The embedded default platform is "cpu": N virtual devices in one
// process, each with its own memory accounting. Replicas run as fibers on one worker thread per core
// (WEFT_SCHEDULER=fibers, the default) or on an OS thread per device (WEFT_SCHEDULER=threads).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "weft/memory.hpp"

namespace weft {


struct Device {
  int id = 0;             // global id
  int process_index = 0;  // the process (instance) that owns it
  std::string kind = "cpu";
  bool operator==(const Device& other) const { return id == other.id && process_index == other.process_index; }
};
std::string to_string(const Device& device);  // "CpuDevice(id=3, process=0)"
std::ostream& operator<<(std::ostream& os, const Device& device);
std::ostream& operator<<(std::ostream& os, const std::vector<Device>& devices);

// Every knob has an environment twin (WEFT_*), a unit and a default; see docs/settings.md.
// A field's "unset" value (0 for device_count and trace_events, -1 for the other numbers, empty for strings)
// means: take the environment variable, else the default; any other negative value is refused. Every value
// is validated when a Runtime is made: a bad one is an InvalidArgument naming the setting.
struct RuntimeOptions {
  int device_count = 0;                 // WEFT_DEVICE_COUNT, default 8
  std::int64_t device_memory = -1;      // WEFT_DEVICE_MEMORY bytes (K/M/G), default 0 = unlimited
  double collective_warn_s = -1;        // WEFT_COLLECTIVE_WARN seconds, default 30
  double collective_timeout_s = -1;     // WEFT_COLLECTIVE_TIMEOUT seconds, default 300; 0 disables
  std::string log_level{};              // WEFT_LOG: error|warn|info|debug, default warn
  std::string trace_path{};             // WEFT_TRACE, default off
  std::int64_t trace_events = 0;        // WEFT_TRACE_EVENTS: the timeline keeps the last N spans, default 100000
  std::string fault{};                  // WEFT_FAULT: a fault injection plan for tests (docs/reliability.md), default none
  int flight_recorder = -1;             // WEFT_FLIGHT_RECORDER: collectives kept per device, default 64; 0 = off
  std::string dump_dir{};               // WEFT_DUMP: directory of flight-recorder dumps on failure, default none
  std::string debug{};                  // WEFT_DEBUG: OFF|WARN|INFO|TRACE, sets log_level and tags lines, default unset
  std::string debug_subsys{};           // WEFT_DEBUG_SUBSYS: init,coll,mem,launch (info/trace lines kept), default all
  std::string debug_file{};             // WEFT_DEBUG_FILE: log file pattern (%h host, %p pid, %r instance), default stderr
  std::string scheduler{};              // WEFT_SCHEDULER: fibers (replicas as fibers on one thread per core) |
                                        // threads (an OS thread per device), default fibers; docs/design.md
  std::int64_t split_bytes = -1;        // WEFT_SPLIT_BYTES: collective results this large split the work among a
                                        // group's members, default 256 KiB (K/M/G); docs/settings.md
  std::int64_t ring_bytes = -1;         // WEFT_RING_BYTES: all-reduces across processes this large go around a
                                        // ring, default 4 MiB (K/M/G)
  int verify = -1;                      // WEFT_VERIFY: 1 = the processes of a job agree on every collective before
                                        // data moves (a mismatch names each call), 0 = skip that check; default 1
  std::int64_t fiber_stack_bytes = -1;  // WEFT_FIBER_STACK: each replica's stack under fibers (K/M/G), default
                                        // 8 MiB, at least 64 KiB; an overflow is a fatal error naming the replica
  int shared_products = -1;             // WEFT_SHARED_PRODUCTS: 1 = the local replicas of a traced program run
                                        // their products by a weight the types prove shared as one product
                                        // (PmapOptions::shared_products), 2 = that and a check that the weights
                                        // are bitwise equal, 0 = off; default 0; docs/settings.md
  int shared_runs = -1;                 // WEFT_SHARED_RUNS: 1 = the local replicas of a traced program split the
                                        // fused runs whose inputs the types prove equal on them (a replicated
                                        // optimizer update) and share the results (PmapOptions::shared_products),
                                        // 2 = that and a check that those inputs are bitwise equal, 0 = off;
                                        // default 1; docs/settings.md
  int flush_denormals = -1;             // WEFT_FLUSH_DENORMALS: 1 = replicas compute with denormal floats flushed
                                        // to zero (FTZ and DAZ), as XLA:CPU and so JAX on a CPU do; 0 = IEEE
                                        // gradual underflow, as numpy and PyTorch; default 0; docs/settings.md

  // Fills every unset field from the environment or the default, and validates (throws InvalidArgument).
  RuntimeOptions resolved() const;
};

struct RuntimeStats {
  std::uint64_t preparations = 0;          // pmap cache misses
  std::uint64_t executions = 0;            // pmap / session runs
  std::uint64_t bytes_host_to_device = 0;
  std::uint64_t bytes_device_to_host = 0;
  std::uint64_t collectives = 0;           // collective rounds this process completed: one per collective the
                                           // program issues, however many replicas and groups take part
  std::uint64_t bytes_reduced = 0;         // input bytes entering reductions
  std::uint64_t shared_products = 0;       // products the local replicas ran as one (WEFT_SHARED_PRODUCTS): one
                                           // per group of replicas sharing a weight, per product equation run
  std::uint64_t shared_runs = 0;           // segments of fused runs the local replicas split (WEFT_SHARED_RUNS):
                                           // one per group of replicas with equal inputs, per segment run
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  std::string platform() const;  // "cpu"
  int device_count() const;        // global
  int local_device_count() const;  // this process
  int process_index() const;
  int process_count() const;
  const std::vector<Device>& devices() const;  // global, by id
  std::vector<Device> local_devices() const;
  const Device& device(int id) const;  // throws InvalidArgument for an unknown id
  std::int64_t memory_in_use(const Device& device) const;
  std::shared_ptr<MemoryAccount> memory_account(const Device& device) const;

  RuntimeStats stats() const;
  void reset_stats();
  const RuntimeOptions& options() const;

  // The runtime pmap and device_put use when none is named: the most recently created live one, or a
  // default one (options from the environment) created on first use.
  static Runtime& current();
  // The options that default runtime is made with (unset fields: the environment, else the default). Takes
  // effect only before it is made: an embedder calls it at start-up, as the Python module asks for a thread
  // per device (its replicas run Python frames) without setting WEFT_SCHEDULER in the process's environment.
  static void set_default_options(RuntimeOptions options);

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft
