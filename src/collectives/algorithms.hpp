// In-process algorithms: every replica's input is visible in shared memory, so a collective is one plan
// (outputs allocated once per group where all members receive the same value) and a split of the work:
// member k of a group computes the k-th slice of its group's result. Small collectives are done entirely
// by the last replica to arrive (one barrier instead of two).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "collectives/request.hpp"
#include "transport/interprocess.hpp"

namespace weft::collectives {

// The sizes at which the algorithms change, in bytes of a collective's result (all-reduce: of one input).
// Settings (WEFT_SPLIT_BYTES, WEFT_RING_BYTES, docs/settings.md), so that tests and the sanitizer builds run
// every algorithm on small buffers.
struct Thresholds {
  static constexpr std::size_t kDefaultSplitBytes = 256 * 1024;
  static constexpr std::size_t kDefaultRingBytes = std::size_t{4} << 20;
  // Results at least this large split the work among the group's members (smaller ones are done by the last
  // replica to arrive, which saves the second barrier); across exactly two processes, all-reduces this large
  // (and below ring_bytes) take the pair exchange instead of the transport's all-reduce.
  std::size_t split_bytes = kDefaultSplitBytes;
  // All-reduces across processes at least this large go around a ring of point-to-point messages.
  std::size_t ring_bytes = kDefaultRingBytes;
};

struct Plan {
  std::vector<const Request*> requests;  // per global replica (null for replicas of other processes)
  std::vector<Array> outputs;            // per replica (members of a group may share one buffer)
  // Where the members write outputs[r] before it is published: taken with mutable_bytes() while the plan
  // still held the fresh buffer alone, so the arrays handed out stay immutable (null: nothing to write,
  // e.g. a ppermute's destination takes the source's array).
  std::vector<std::byte*> output_data;
  bool split_work = false;               // true: each replica runs execute_part then the second barrier
  bool ring = false;                     // some group's all-reduce went around the ring (statistics)
  std::uint64_t bytes_reduced = 0;       // input bytes entering reductions (statistics)
  // Stand-ins for other processes' replicas (their inputs, received over the transport).
  std::vector<std::unique_ptr<Request>> remote_requests;
  std::vector<std::unique_ptr<Array>> remote_inputs;
};

// Allocates the outputs for one round. When the work is small, does all of it right away.
// `account_of(replica)` gives the memory account the replica's output is charged to.
// With `group_mask`, only the groups marked non-zero are planned, and all their work is done right away.
std::shared_ptr<Plan> make_plan(std::span<const Request* const> requests,
                                const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of,
                                const Thresholds& sizes, const std::vector<char>* group_mask = nullptr);

// A round whose replicas live in several processes (the hierarchical path, without the agreement check:
// verify_across_processes first, or a verified planner): replicas of this process are
// combined in shared memory, one call per group goes over the transport between the processes holding
// the group's members, and the results fan out to the local members. `requests` holds this process's
// requests at their global indices; every process of the execution calls this for the same round, in the
// same order.
std::shared_ptr<Plan> plan_across_processes(const std::vector<const Request*>& requests,
                                            const std::vector<int>& process_of, transport::Interprocess& job,
                                            const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of,
                                            const transport::PollContext& poll, const Thresholds& sizes);
// The processes of `processes` check that they all issue the same collective before any data moves: one
// all-reduce of the request's fingerprint with the round (collectives/fingerprint.hpp). On a difference every
// process raises MismatchError naming what each process called.
void verify_across_processes(const std::vector<const Request*>& requests, transport::Interprocess& job,
                             const std::vector<int>& processes, const transport::PollContext& poll, std::uint64_t round);

// How the communicator plans a round whose replicas span processes. hierarchical_planner runs the
// hierarchical path (plan_across_processes); verified() wraps a planner in the agreement check
// (verify_across_processes before every round), as a decorator (PyTorch's ProcessGroupWrapper): on by
// default, dropped with WEFT_VERIFY=0 to save its all-reduce per round (docs/benchmarks.md gives the cost).
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

// Cache-line aligned share [begin, end) of `count` elements for part k of `parts`.
std::pair<std::int64_t, std::int64_t> share_of(std::int64_t count, int k, int parts);
// Replica `replica`'s share of a split plan.
void execute_part(const Plan& plan, int replica);

}  // namespace weft::collectives
