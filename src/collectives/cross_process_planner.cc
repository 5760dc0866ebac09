// How the communicator plans rounds that span processes (algorithms.hpp): the hierarchical path itself, and
// the agreement check as a decorator around it (PyTorch's ProcessGroupWrapper, for our rounds): before any
// data moves, the processes agree on a fingerprint of the round's request (collectives/fingerprint.hpp), so
// that two processes issuing different collectives fail with a message naming both instead of exchanging
// mismatched data. On unless WEFT_VERIFY=0.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.hpp"
#include "collectives/fingerprint.hpp"
#include "weft/error.hpp"

namespace weft::collectives {
namespace {

[[noreturn]] void report_mismatch(const Request& first, transport::Interprocess& job, const std::vector<int>& processes,
                                  const transport::PollContext& poll) {
  // Every process learned of the disagreement at once; exchange descriptions so each names both sides.
  constexpr std::size_t kWidth = 480;
  std::string mine = describe(first);
  mine.resize(kWidth - 1);  // always NUL-terminated within its slot
  mine.resize(kWidth, '\0');
  std::vector<char> all(kWidth * processes.size());
  job.allgatherv(processes, mine.data(), std::vector<std::size_t>(processes.size(), kWidth), all.data(), poll);
  std::string message = "collective mismatch across processes at " + (poll.what ? poll.what() : std::string("a collective")) + ":";
  for (std::size_t i = 0; i < processes.size(); ++i)
    message += "\n  process " + std::to_string(processes[i]) + " called " +
               std::string(all.data() + i * kWidth, strnlen(all.data() + i * kWidth, kWidth));
  throw MismatchError(message);
}

// The hierarchical path itself (plan_across_processes), for one execution's processes. The round number is
// not used: only the verifying planner agrees on it.
class HierarchicalPlanner final : public CrossProcessPlanner {
 public:
  HierarchicalPlanner(std::vector<int> process_of, transport::Interprocess& job,
                      std::function<std::shared_ptr<MemoryAccount>(int)> account_of, Thresholds sizes)
      : process_of_(std::move(process_of)),
        job_(job),
        account_of_(std::move(account_of)),
        sizes_(sizes) {}
  std::shared_ptr<Plan> plan(const std::vector<const Request*>& requests, const transport::PollContext& poll,
                             std::uint64_t /*round*/) override {
    return plan_across_processes(requests, process_of_, job_, account_of_, poll, sizes_);
  }

 private:
  const std::vector<int> process_of_;
  transport::Interprocess& job_;
  const std::function<std::shared_ptr<MemoryAccount>(int)> account_of_;
  const Thresholds sizes_;
};

// The agreement check around another planner.
class VerifyingPlanner final : public CrossProcessPlanner {
 public:
  VerifyingPlanner(std::unique_ptr<CrossProcessPlanner> inner, transport::Interprocess& job, std::vector<int> processes)
      : inner_(std::move(inner)), job_(job), processes_(std::move(processes)) {}
  std::shared_ptr<Plan> plan(const std::vector<const Request*>& requests, const transport::PollContext& poll,
                             std::uint64_t round) override {
    verify_across_processes(requests, job_, processes_, poll, round);
    return inner_->plan(requests, poll, round);
  }

 private:
  const std::unique_ptr<CrossProcessPlanner> inner_;
  transport::Interprocess& job_;
  const std::vector<int> processes_;
};

}  // namespace

void verify_across_processes(const std::vector<const Request*>& requests, transport::Interprocess& job,
                             const std::vector<int>& processes, const transport::PollContext& poll, std::uint64_t round) {
  const Request& first = first_request(requests);
  if (!job.agree(processes, fingerprint(first, round), poll)) report_mismatch(first, job, processes, poll);
}

std::unique_ptr<CrossProcessPlanner> hierarchical_planner(std::vector<int> process_of, transport::Interprocess& job,
                                                          std::function<std::shared_ptr<MemoryAccount>(int)> account_of,
                                                          Thresholds sizes) {
  return std::make_unique<HierarchicalPlanner>(std::move(process_of), job, std::move(account_of), sizes);
}

std::unique_ptr<CrossProcessPlanner> verified(std::unique_ptr<CrossProcessPlanner> inner, transport::Interprocess& job,
                                              std::vector<int> processes) {
  return std::make_unique<VerifyingPlanner>(std::move(inner), job, std::move(processes));
}

}  // namespace weft::collectives
