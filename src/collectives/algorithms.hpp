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

namespace weft::collectives {

struct Plan {
  std::vector<const Request*> requests;  // per replica, valid until every replica finished the round
  std::vector<Array> outputs;            // per replica (members of a group may share one buffer)
  bool split_work = false;               // true: each replica runs execute_part then the second barrier
  std::uint64_t bytes_reduced = 0;       // input bytes entering reductions (statistics)
};

// Allocates the outputs for one round. When the work is small, does all of it right away.
// `account_of(replica)` gives the memory account the replica's output is charged to.
std::shared_ptr<Plan> make_plan(std::span<const Request* const> requests,
                                const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of);
// Replica `replica`'s share of a split plan.
void execute_part(const Plan& plan, int replica);

}  // namespace weft::collectives
