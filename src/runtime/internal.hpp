// Runtime internals shared by runtime.cc, replica.cc, pmap.cc and sharded_array.cc.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.hpp"
#include "core/error_kind.hpp"
#include "runtime/fault.hpp"
#include "runtime/fiber_scheduler.hpp"
#include "runtime/flight_recorder.hpp"
#include "transport/interprocess.hpp"
#include "weft/groups.hpp"
#include "weft/replica.hpp"
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

// WEFT_TRACE: a Chrome-trace (Trace Event Format) timeline of collectives, written when the runtime ends.
// pid = process, tid = replica; one span per collective plus a "wait" sub-span for the rendezvous. The last
// `capacity` spans are kept (a ring: a long run keeps its end, in bounded memory); the file says how many
// were dropped.
class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  Tracer(std::string path, int process, std::int64_t capacity)
      : path_(std::move(path)), process_(process), capacity_(static_cast<std::size_t>(capacity)), start_(Clock::now()) {}
  bool enabled() const { return !path_.empty(); }
  void span(std::string name, int replica, Clock::time_point begin, Clock::time_point end, std::string args_json);
  void write() const;  // errors are logged, never thrown: tracing must not fail a program

 private:
  struct Event {
    std::string name;
    int replica;
    double begin_us, duration_us;
    std::string args_json;
  };
  std::string path_;
  int process_;  // the trace's pid
  std::size_t capacity_;
  Clock::time_point start_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;  // a ring once full: the oldest is at next_
  std::size_t next_ = 0;
  std::uint64_t dropped_ = 0;
};

namespace detail {
struct RuntimeCounters {
  std::atomic<std::uint64_t> preparations{0}, executions{0}, h2d{0}, d2h{0};
  collectives::RoundCounters collectives;  // counted by the communicators
};
}  // namespace detail

struct Runtime::Impl {
  RuntimeOptions options;
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
                                                         // and with WEFT_SCHEDULER=fibers
  std::unique_ptr<detail::FiberScheduler> fibers;        // WEFT_SCHEDULER=fibers; null with threads
  // Executions run one at a time: two executions sharing devices could otherwise each hold a device the
  // other one waits for. A call waits for the one in flight as long as that one makes progress (see
  // Execution::run): the one in flight may itself wait for the caller (a pmap from a thread a replica
  // started), and a wait for it is a blocking wait like any other, with the collective deadlines.
  struct Admission {
    std::mutex mutex;
    std::condition_variable cv;
    bool busy = false;
    std::string running;  // the name of the execution in flight
    std::chrono::steady_clock::time_point since;
  } admission;
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

namespace detail {

// The groups of every (axes, axis_index_groups) a program used, computed once per prepared program.
class GroupCache {
 public:
  GroupCache();
  std::shared_ptr<const ReplicaGroups> along_axes(const Mesh& mesh, const Axes& axes, const AxisIndexGroups& index_groups);

 private:
  const std::uint64_t id_;  // unique for the process's lifetime (an address may be reused, an id is not)
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const ReplicaGroups>> groups_;
};

// One run of a program over its replicas (a pmap call, a session run). Replicas are numbered globally
// (row-major over the mesh); this process runs the ones whose devices it owns, and meets the others'
// processes through the job's transport inside collectives.
class Execution {
 public:
  Execution(Runtime::Impl& runtime, std::string name, Mesh mesh, std::vector<Device> devices, GroupCache& groups);

  // Runs `body` once per local replica, each on its device's worker, and waits for all. Throws the root
  // cause first (the replica that failed first, then what every other local replica saw).
  void run(const std::function<void(Replica&)>& body);

  std::string replica_name(int replica) const;  // "replica 3 (CpuDevice(id=3, process=0))"
  int num_replicas() const { return static_cast<int>(devices.size()); }

  Runtime::Impl& runtime;
  const std::string name;
  const Mesh mesh;
  const std::vector<Device> devices;   // per global replica
  std::vector<int> local_replicas;     // global indices of this process's replicas
  GroupCache& groups;
  // Runs every collective of the execution (collectives/communicator.hpp); local rank = index in local_replicas.
  collectives::Communicator communicator;
  struct SessionState* session = nullptr;  // set when a Session runs the program
  std::uint64_t serial = 0;            // Runtime::Impl::execution_serial when run() started

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  int remaining_ = 0;
  int root_cause_ = -1;
  std::vector<std::optional<ErrorRecord>> errors_;  // per local replica
};

// Set on a replica's thread while an error leaves a collective call: such errors carry the collective's call
// site already; other errors (array ops in the replica's own code) get the replica's position added.
inline thread_local bool t_error_from_collective = false;
// The execution whose replica runs on this thread (or fiber), null elsewhere: a pmap from inside a replica is
// refused with a clear error.
inline thread_local Execution* t_current_execution = nullptr;

struct ReplicaState {
  Execution* execution;
  int index;        // global replica index
  int local;        // index among the execution's local replicas (its rank in the communicator)
  const Device* device;
  FlightRing* flight = nullptr;  // the device's flight recorder ring; null when off
};

}  // namespace detail
}  // namespace weft
