// One run of a program over its replicas (a pmap call, a session run), and what a replica's thread (or
// fiber) knows about the run it belongs to.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.hpp"
#include "core/error_kind.hpp"
#include "runtime/flight_recorder.hpp"
#include "runtime/group_cache.hpp"
#include "weft/groups.hpp"
#include "weft/replica.hpp"
#include "weft/runtime.hpp"

namespace weft {
class ProgramTrace;
}

namespace weft::detail {

struct SessionState;
class ProductSharing;
class RunSharing;

// Replicas are numbered globally (row-major over the mesh); this process runs the ones whose devices it
// owns, and meets the others' processes through the job's transport inside collectives.
class Execution {
 public:
  Execution(Runtime::Impl& runtime, std::string name, Mesh mesh, std::vector<Device> devices, GroupCache& groups);
  ~Execution();

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
  // The session whose run this is (null for a pmap): the context that the session's replica operations
  // (session_replica.cc) find their variables, buffers and streams in. The execution itself never reads it.
  SessionState* session = nullptr;
  // Run the replicas on one OS thread per device even under the fiber scheduler (PmapOptions::replica_threads).
  bool on_threads = false;
  // Where the local replicas run their shared products (shared_products.hpp) and shared runs
  // (shared_runs.hpp); null when they run each their own. Set by the pmap or the session before run(), for
  // replicas that all run the same traced programs (share(): the modes of WEFT_SHARED_PRODUCTS and
  // WEFT_SHARED_RUNS).
  std::unique_ptr<ProductSharing> products;
  std::unique_ptr<RunSharing> runs;
  void share(int product_mode, int run_mode);
  std::uint64_t serial = 0;            // Runtime::Impl::execution_serial when run() started

 private:
  void run_replica(int local, const std::function<void(Replica&)>& body);  // one replica's task
  // A replica's failure: aborts the execution (the first one is the root cause), tells the launcher and dumps
  // the flight recorder's ring (`flight`, null when off).
  void record_failure(int local, FlightRing* flight, ErrorRecord error);
  // Local replica `local` failed, as seen from outside it (the fiber watchdog: it holds its worker past the
  // timeout): the execution is aborted with `error` as the root cause, which the replica's own later error
  // (an AbortedError once it runs again) does not replace.
  void fail_from_outside(int local, ErrorRecord error);
  // The error run() throws: the root cause's, naming its replica, then one line per other failed replica.
  [[noreturn]] void throw_root_cause() const;

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

// What a Replica handle points at: its place in the execution.
struct ReplicaState {
  Execution* execution;
  int index;        // global replica index
  int local;        // index among the execution's local replicas (its rank in the communicator)
  const Device* device;
  FlightRing* flight = nullptr;  // the device's flight recorder ring; null when off
  // Set on the replica a traced pmap traces with (runtime/jit.cc): it has no execution, index or device,
  // and its collectives record equations in this trace.
  ProgramTrace* trace = nullptr;
};

}  // namespace weft::detail
