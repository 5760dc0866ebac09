// Planning a round: the last replica to arrive lowers the round's requests to a flat collective
// (flat_collective.hpp), allocates the outputs once per group (one buffer a group shares where all its members
// receive the same value) and hands each group's flat buffers to a communicator (flat_communicator.hpp): the
// shared-memory algorithms when the group lives in this process, the hierarchical composition when it spans
// processes. Small rounds are run right there, by the last to arrive (one barrier instead of two); large ones
// in this process are split: member k of a group computes the k-th share of its group's result
// (execute_part) before the second barrier.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "collectives/flat_communicator.hpp"
#include "collectives/request.hpp"

namespace weft::collectives {

struct Plan {
  FlatCollective collective;                     // the round, lowered
  std::shared_ptr<const ReplicaGroups> groups;
  std::vector<GroupBuffers> buffers;             // per group (empty for groups with no member here)
  std::vector<Array> outputs;                    // per global replica (members of a group may share one)
  bool split_work = false;                       // true: each replica runs execute_part then the second barrier
  bool ring = false;                             // some group's all-reduce went around the ring (statistics)
  std::uint64_t bytes_reduced = 0;               // input bytes entering reductions (statistics)
};

// The round of `requests` (one per replica, all in this process). `account_of(replica)` gives the memory
// account the replica's output is charged to.
std::shared_ptr<Plan> make_plan(std::span<const Request* const> requests,
                                const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of,
                                const Thresholds& sizes);

// A round whose replicas live in several processes (the hierarchical path, without the agreement check:
// verify_across_processes first, or a verified planner): groups within this process run in shared memory,
// groups spanning processes through the HierarchicalCommunicator (hierarchical.cc). `requests` holds this
// process's requests at their global indices (null elsewhere); every process of the execution calls this for
// the same round, in the same order; the work is all done when it returns.
std::shared_ptr<Plan> plan_across_processes(const std::vector<const Request*>& requests,
                                            const std::vector<int>& process_of, transport::Interprocess& job,
                                            const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of,
                                            const transport::PollContext& poll, const Thresholds& sizes);

// Replica `replica`'s share of a split plan.
void execute_part(const Plan& plan, int replica);

// The first request of a round given at global indices (null for other processes' replicas).
const Request& first_request(std::span<const Request* const> requests);
// For the two planners: an empty plan for the round of `first`.
std::shared_ptr<Plan> start_plan(const Request& first, int num_replicas);
// Group `group`'s buffers in `plan` for the members whose requests are given (this process's): their inputs,
// and their outputs, freshly allocated, except for a ppermute whose members are all given, whose destinations
// simply take their sources' (immutable) arrays. Returns the bytes of the group's results.
std::size_t plan_group(Plan& plan, std::span<const Request* const> requests, int group,
                       const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of);
// The poll context of work that waits for nobody (shared memory within one process).
const transport::PollContext& no_wait();

// How the communicator plans a round whose replicas span processes. hierarchical_planner runs the
// hierarchical path (plan_across_processes); verified() wraps a planner in the agreement check
// (verify_across_processes before every round), as a decorator (PyTorch's ProcessGroupWrapper): on by
// default, dropped with WEFT_VERIFY=0 to save its all-reduce per round (docs/benchmarks.md gives the cost).
// Both in cross_process_planner.cc.
class CrossProcessPlanner {
 public:
  virtual ~CrossProcessPlanner() = default;
  virtual std::shared_ptr<Plan> plan(const std::vector<const Request*>& requests, const transport::PollContext& poll,
                                     std::uint64_t round) = 0;
};
std::unique_ptr<CrossProcessPlanner> hierarchical_planner(std::vector<int> process_of, transport::Interprocess& job,
                                                          std::function<std::shared_ptr<MemoryAccount>(int)> account_of,
                                                          Thresholds sizes);
std::unique_ptr<CrossProcessPlanner> verified(std::unique_ptr<CrossProcessPlanner> inner, transport::Interprocess& job,
                                              std::vector<int> processes);
// The processes of `processes` check that they all issue the same collective before any data moves: one
// all-reduce of the request's fingerprint with the round (collectives/fingerprint.hpp). On a difference every
// process raises MismatchError naming what each process called.
void verify_across_processes(const std::vector<const Request*>& requests, transport::Interprocess& job,
                             const std::vector<int>& processes, const transport::PollContext& poll, std::uint64_t round);

}  // namespace weft::collectives
