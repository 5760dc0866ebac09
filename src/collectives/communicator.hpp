// The communicator of one execution (a pmap call, a session run): it runs every collective of the execution's
// replicas end to end, so that the path of a collective lives in one layer and reads top to bottom:
//
//   local validation  →  meeting (typed rendezvous)  →  agreement  →  plan  →  parts  →  second barrier  →  output
//
// Local validation checks the request against its group before anyone waits (JAX's shape rules, groups that
// cover the execution). The meeting gathers the local replicas' requests; the last to arrive compares them
// (a mismatch is raised right there, naming both sides and their recent collectives), and plans the round:
// in shared memory when every replica lives in this process, otherwise through the hierarchical path, whose
// processes agree on a fingerprint of the request before data moves. Members then do their share of a split
// plan and meet a second time, so no input is released while a partner still reads it.
//
// The runtime above supplies names (who a replica is, for messages), memory accounts (where outputs are
// charged) and counters, as data at construction; it adds its own concerns (fault injection, flight recorder,
// trace) around run(). Nothing here calls back into the runtime.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/request.hpp"
#include "transport/interprocess.hpp"
#include "transport/rendezvous.hpp"

namespace weft::collectives {

// Collective rounds completed and bytes reduced, across executions: the runtime's statistics, and how a
// waiting call tells a busy runtime from a stuck one.
struct RoundCounters {
  std::atomic<std::uint64_t> rounds{0};  // one per round, not per replica
  std::atomic<std::uint64_t> bytes_reduced{0};
  // Rounds that took the larger buffers' algorithms (Thresholds): the members split the work, or some
  // group's all-reduce went around the ring between processes. Tests check with them that a path ran.
  std::atomic<std::uint64_t> split_rounds{0};
  std::atomic<std::uint64_t> ring_rounds{0};
};

// Who takes part in an execution's collectives.
struct Participants {
  std::string execution_name;                    // "pmap(f)": where, in messages
  int num_replicas = 0;                          // global replicas of the execution
  std::vector<int> local_replicas;               // local rank -> global replica (this process's replicas)
  std::vector<int> process_of;                   // global replica -> the process holding it
  std::function<std::string(int replica)> name;  // "replica 3 (CpuDevice(id=3, process=0))"
  std::function<std::shared_ptr<MemoryAccount>(int replica)> account_of;  // where a replica's output is charged
  // Why replicas may be missing besides their own code (the runtime's scheduler: a replica holding the worker
  // its partners share), for timeout and stall reports; may be empty.
  std::function<std::string()> absence_note;
};

// One completed collective of a participant (reliability R12: mismatch reports show the recent ones).
struct CompletedCollective {
  const char* api;
  DType dtype;
  std::int64_t elements;
  const char* file;
  unsigned line;
};

// Groups must partition exactly the replicas of the running execution. Throws InvalidArgument
// "<who>: <what>: the groups [...] are for N replicas but <execution> runs M". Also used by the PopXL-style
// session operations that take a grouping without running a collective.
void check_groups_cover(const ReplicaGroups& groups, int num_replicas, const std::string& who, const std::string& what,
                        const std::string& execution);

class Communicator {
 public:
  // `job` is the transport between processes (null when the execution runs in this process alone); `sizes`
  // says where the algorithms change (the runtime's WEFT_SPLIT_BYTES and WEFT_RING_BYTES).
  // `verify`: the processes agree on each round's fingerprint before data moves (WEFT_VERIFY; a decorator
  // around the cross-process planner).
  Communicator(Participants participants, transport::Deadlines deadlines, transport::Interprocess* job,
               RoundCounters& counters, Thresholds sizes = {}, bool verify = true);

  const Participants& participants() const { return participants_; }
  const std::vector<int>& processes() const { return processes_; }  // sorted processes holding the replicas
  bool spans_processes() const { return processes_.size() > 1; }

  // One collective of local participant `local`, end to end (see the banner); returns its output, on no
  // particular device (the caller places it). Errors name the replica, the op and the rule. `met`, when
  // given, receives the time the meeting completed (the trace's wait span ends there).
  Array run(int local, Request& request, std::chrono::steady_clock::time_point* met = nullptr);

  // Fate sharing: participant `local` failed with `cause`; every pending and future wait of the execution
  // raises an AbortedError naming it. True for the first call.
  bool abort(int local, const std::string& cause) { return rendezvous_.abort(local, cause); }
  // Participant `local` returned from its function: collectives that need it fail naming it.
  void depart(int local) { rendezvous_.depart(local); }
  // This execution was aborted, or another process of the job announced a failure.
  bool aborted() const { return rendezvous_.aborted() || (job_ && job_->peer_failed()); }
  // Collectives participant `local` completed: the sequence number of its next one. own_: from its own
  // thread only, without the lock.
  std::uint64_t completed_rounds(int local) const { return rendezvous_.completed_rounds(local); }
  std::uint64_t own_completed_rounds(int local) const { return rendezvous_.own_completed_rounds(local); }

  // "#3 psum(float32, 12 elements) at a.cc:10; ..." (the last kHistory collectives of participant `local`).
  std::string history_of(int local) const;
  // "after its collective #3: psum at a.cc:10", or "before its first collective". From its own thread only.
  std::string position_of(int local) const;
  static constexpr int kHistory = 8;

 private:
  // Run by the last participant to arrive: agreement, then the plan.
  std::shared_ptr<const Plan> complete(std::span<const Request* const> requests, int local);
  void validate_locally(const Request& request) const;
  transport::PollContext poll_context(const Request& first, std::uint64_t seq) const;

  const Participants participants_;
  const transport::Deadlines deadlines_;
  const Thresholds sizes_;
  transport::Interprocess* const job_;
  RoundCounters& counters_;
  std::vector<int> processes_;
  std::unique_ptr<CrossProcessPlanner> across_;     // rounds spanning processes (null within one process)
  transport::Rendezvous<Request, Plan> rendezvous_;  // among the local participants
  // Written by each participant after its collective, read only while it waits in the next one.
  std::vector<std::array<CompletedCollective, kHistory>> history_;
  std::vector<std::uint64_t> completed_;
};

}  // namespace weft::collectives
