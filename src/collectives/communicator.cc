// The path of one collective, end to end (communicator.hpp has the picture).
#include "collectives/communicator.hpp"

#include <algorithm>
#include <optional>

#include "core/error_hints.hpp"
#include "weft/error.hpp"

namespace weft::collectives {

Communicator::Communicator(Participants participants, transport::Deadlines deadlines, transport::Interprocess* job,
                           RoundCounters& counters, Thresholds sizes, bool verify)
    : participants_(std::move(participants)),
      deadlines_(deadlines),
      sizes_(sizes),
      job_(job),
      counters_(counters),
      processes_(participants_.process_of),
      rendezvous_(static_cast<int>(participants_.local_replicas.size()), deadlines, participants_.execution_name,
                  [this](int local) { return participants_.name(participants_.local_replicas[local]); },
                  participants_.local_replicas),
      history_(participants_.local_replicas.size()),
      completed_(participants_.local_replicas.size(), 0) {
  if (participants_.absence_note) rendezvous_.set_absence_note(participants_.absence_note);
  std::sort(processes_.begin(), processes_.end());
  processes_.erase(std::unique(processes_.begin(), processes_.end()), processes_.end());
  if (spans_processes()) {
    across_ = hierarchical_planner(participants_.process_of, *job_, participants_.account_of, sizes_);
    if (verify) across_ = verified(std::move(across_), *job_, processes_);
  }
}

void check_groups_cover(const ReplicaGroups& groups, int num_replicas, const std::string& who, const std::string& what,
                        const std::string& execution) {
  if (groups.num_replicas() != num_replicas)
    throw InvalidArgument(who + ": " + what + ": the groups " + groups.to_string() + " are for " +
                          std::to_string(groups.num_replicas()) + " replicas but " + execution + " runs " +
                          std::to_string(num_replicas));
}

void Communicator::validate_locally(const Request& req) const {
  if (req.groups->num_replicas() != participants_.num_replicas)
    check_groups_cover(*req.groups, participants_.num_replicas, participants_.name(req.replica),
                       std::string(req.api_name) + " over " + over(req), participants_.execution_name);
  try {
    validate(req);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(participants_.name(req.replica) + ": " + e.what());
  }
}

Array Communicator::run(int local, Request& req, std::chrono::steady_clock::time_point* met) {
  req.replica = participants_.local_replicas[local];
  validate_locally(req);
  auto describe_it = [&req] { return describe(req); };
  auto plan = rendezvous_.arrive(
      local, req, [this, local](std::span<const Request* const> requests) { return complete(requests, local); },
      describe_it);
  if (met) *met = std::chrono::steady_clock::now();
  if (plan->split_work) {
    // Always reach the second barrier, even if our part failed: partners may be reading our input.
    std::optional<ErrorRecord> error;
    try {
      execute_part(*plan, req.replica);
    } catch (...) {
      error = current_error();
    }
    rendezvous_.finish(local, describe_it);
    if (error) throw_error(error->kind, error->message);
  }
  history_[local][completed_[local] % kHistory] = {req.api_name, req.input->dtype(), req.input->size(),
                                                   req.loc.file_name(), req.loc.line()};
  ++completed_[local];
  return plan->outputs[req.replica];
}

std::shared_ptr<const Plan> Communicator::complete(std::span<const Request* const> payloads, int local) {
  // Agreement: every local replica issued the same collective. The requests are placed at their global indices.
  std::vector<const Request*> requests(participants_.num_replicas, nullptr);
  const Request* first = payloads[0];
  for (std::size_t li = 0; li < payloads.size(); ++li) {
    const Request* r = payloads[li];
    const std::string diff = differences(*first, *r);
    if (!diff.empty()) {
      // Groups named by axes say little about how they partition the replicas: print both partitions.
      const std::string groupings =
          diff.find("group differs") == std::string::npos
              ? std::string()
              : "; replica " + std::to_string(first->replica) + "'s groups " + first->groups->brief() + ", replica " +
                    std::to_string(r->replica) + "'s groups " + r->groups->brief();
      throw MismatchError("collective mismatch in " + participants_.execution_name + ": " +
                          participants_.name(first->replica) + " called " + describe(*first) + " but " +
                          participants_.name(r->replica) + " called " + describe(*r) + ": " + diff + groupings +
                          "\n    recent collectives of " + participants_.name(first->replica) + ": " + history_of(0) +
                          "\n    recent collectives of " + participants_.name(r->replica) + ": " +
                          history_of(static_cast<int>(li)) + hints::kMismatch);
    }
    requests[r->replica] = r;
  }
  std::shared_ptr<const Plan> plan;
  if (spans_processes()) {
    // Every process takes part in every round of an execution spanning processes: the round's number is
    // part of their agreement.
    const std::uint64_t seq = rendezvous_.completed_rounds(local);
    plan = across_->plan(requests, poll_context(*first, seq), seq);
  } else {
    plan = make_plan(requests, participants_.account_of, sizes_);
  }
  counters_.rounds++;
  counters_.bytes_reduced += plan->bytes_reduced;
  if (plan->split_work) counters_.split_rounds++;
  if (plan->ring) counters_.ring_rounds++;
  return plan;
}

transport::PollContext Communicator::poll_context(const Request& first, std::uint64_t seq) const {
  // Reports across processes name global replicas; a process that has not arrived at round seq completed
  // seq - 1.
  return transport::PollContext{
      deadlines_.timeout_s,
      [this] { return rendezvous_.aborted(); },
      [this, &first, seq] {
        return describe(first) + ", seq " + std::to_string(seq) + " of " + participants_.execution_name;
      },
      deadlines_.warn_s,
      [this](int process) {
        std::vector<int> replicas;
        for (int r = 0; r < participants_.num_replicas; ++r)
          if (participants_.process_of[r] == process) replicas.push_back(r);
        return replicas;
      },
      seq == 0 ? std::string("last completed seq=none") : "last completed seq=" + std::to_string(seq - 1)};
}

std::string Communicator::history_of(int local) const {
  const std::uint64_t n = completed_[local];
  if (n == 0) return "none";
  std::string out;
  for (std::uint64_t i = n > kHistory ? n - kHistory : 0; i < n; ++i) {
    const CompletedCollective& c = history_[local][i % kHistory];
    if (!out.empty()) out += "; ";
    out += '#';
    out += std::to_string(i);
    out += ' ';
    out += c.api;
    out += '(';
    out += dtype_name(c.dtype);
    out += ", ";
    out += std::to_string(c.elements);
    out += " elements) at ";
    out += c.file;
    out += ':';
    out += std::to_string(c.line);
  }
  return out;
}

std::string Communicator::position_of(int local) const {
  const std::uint64_t n = completed_[local];
  if (n == 0) return "before its first collective";
  const CompletedCollective& c = history_[local][(n - 1) % kHistory];
  return "after its collective #" + std::to_string(n - 1) + ": " + c.api + " at " + c.file + ":" + std::to_string(c.line);
}

}  // namespace weft::collectives
