// Shared runs at run time (shared_runs.hpp): the round's completion, run by the last replica to arrive, and
// each replica's walk through the segment.
#include "runtime/shared_runs.hpp"

#include <map>

#include "runtime/execution.hpp"
#include "runtime/internal.hpp"
#include "weft/error.hpp"

namespace weft::detail {

RunSharing::RunSharing(Execution& execution, int mode)
    : execution_(execution),
      mode_(mode),
      rendezvous_(static_cast<int>(execution.local_replicas.size()),
                  transport::Deadlines{execution.runtime.options.collective_warn_s,
                                       execution.runtime.options.collective_timeout_s},
                  execution.name, [&execution](int local) { return execution.replica_name(execution.local_replicas[local]); },
                  execution.local_replicas) {}

std::shared_ptr<const RunSharing::Outcome> RunSharing::complete(std::span<const Request* const> requests) const {
  const int n = static_cast<int>(requests.size());
  const auto who = [this](int local) { return execution_.replica_name(execution_.local_replicas[local]); };
  const Request& first = *requests[0];
  const auto at = [](const Request& r) {
    return "shared segment " + std::to_string(r.segment_index) + " (steps from equation " +
           std::to_string((*r.steps)[r.segment->first].first) + ")";
  };
  for (int li = 1; li < n; ++li) {
    const Request& r = *requests[li];
    if (r.program_id != first.program_id || r.segment_index != first.segment_index) {
      throw MismatchError("shared runs: " + who(li) + " is at " + at(r) +
                          (r.program_id != first.program_id ? " of another program" : "") + " while " + who(0) +
                          " is at " + at(first) + " (the replicas must run one program when their runs are shared: "
                          "PmapOptions::shared_products, SessionOptions::shared_products; WEFT_SHARED_RUNS=0 turns "
                          "sharing off)");
    }
  }
  const program::Program& prog = *first.program;
  const program::SharedSegment& seg = *first.segment;
  const std::vector<program::Step>& steps = *first.steps;
  auto outcome = std::make_shared<Outcome>();
  outcome->group_of.resize(n);
  outcome->rank.resize(n);
  outcome->size.resize(n);
  std::map<int, std::vector<int>> groups;
  for (int li = 0; li < n; ++li) groups[requests[li]->group].push_back(li);
  for (const auto& [key, members] : groups) {
    const int g = static_cast<int>(outcome->groups.size());
    Group& group = outcome->groups.emplace_back();
    for (std::size_t k = 0; k < members.size(); ++k) {
      outcome->group_of[members[k]] = g;
      outcome->rank[members[k]] = static_cast<int>(k);
      outcome->size[members[k]] = static_cast<int>(members.size());
    }
    std::size_t shared = 0;
    for (std::size_t s = seg.first; s < seg.end; ++s) {
      if (!seg.shared[s - seg.first]) continue;
      ++shared;
      if (mode_ != 2) continue;
      const program::Step& step = steps[s];
      // The inputs the run reads from outside it (the others are its own results, or those of earlier shared
      // runs, written into one buffer) must be bitwise equal across the group, as the types say.
      for (std::size_t i = step.first; i < step.first + step.count; ++i) {
        for (program::ValueId id : prog.equations[i].inputs) {
          const auto& mine = (*requests[members[0]]->values)[id];
          if (!mine) continue;  // made inside the segment
          for (std::size_t k = 1; k < members.size(); ++k) {
            const auto& theirs = (*requests[members[k]]->values)[id];
            if (theirs && !theirs->identical(*mine)) {
              throw MismatchError("shared runs (WEFT_SHARED_RUNS=2): " + who(members[k]) + "'s input %" +
                                  std::to_string(id) + " of equation " + std::to_string(i) + " differs from " +
                                  who(members[0]) + "'s, which the program's types say it equals");
            }
          }
        }
      }
    }
    group.results = std::make_unique<Results[]>(shared);
  }
  execution_.runtime.stats.shared_runs += outcome->groups.size();
  return outcome;
}

void RunSharing::run_segment(int local, const void* program_id, std::size_t segment_index,
                             const program::Program& program, const std::vector<program::Step>& steps,
                             const program::SharedSegment& segment, std::vector<std::optional<Array>>& values,
                             const std::function<void(std::size_t)>& run_step,
                             const std::function<void(std::size_t)>& release, const transport::Describe& what) {
  const int replica = execution_.local_replicas[local];
  const Request request{program_id, segment_index,
                        segment.group_of_replica[static_cast<std::size_t>(replica)],
                        &program, &steps, &segment, &values};
  const std::shared_ptr<const Outcome> outcome = rendezvous_.arrive(
      local, request, [this](std::span<const Request* const> requests) { return complete(requests); }, what);
  const Group& group = outcome->groups[static_cast<std::size_t>(outcome->group_of[local])];
  // Between the meeting and the finish every step is local (program/shared_runs.hpp), so a replica whose
  // step fails (an allocation, a kernel) still reaches the finish, and its partners, whose work there is local
  // and bounded too, are not left waiting for it; its error then goes on to abort the execution.
  try {
    std::size_t shared = 0;
    for (std::size_t s = segment.first; s < segment.end; ++s) {
      if (!segment.shared[s - segment.first]) {
        run_step(s);
        continue;
      }
      const program::Step& step = steps[s];
      const auto [begin, end] =
          program::loop_part_range(program::loop_elements(program, step), outcome->rank[local], outcome->size[local]);
      Results& results = group.results[shared];
      std::call_once(results.made, [&] {  // no suspension inside: a fiber never waits here for one of its worker
        std::vector<Array> arrays = program::allocate_materialized(program, step);
        std::vector<std::byte*> data;
        for (Array& a : arrays) data.push_back(a.mutable_bytes());  // the only reference yet
        results.arrays = std::move(arrays);  // both whole or neither: a throw above leaves them for the next try
        results.data = std::move(data);
      });
      program::run_loop_part(program, step, values, results.data, begin, end);
      // In `values` at once: a later shared run of the segment may read them, at the elements this replica
      // wrote (the same shape, so the same part); nothing else in the segment reads them (shared_runs.hpp).
      for (std::size_t k = 0; k < step.materialize.size(); ++k) values[step.materialize[k]] = results.arrays[k];
      release(s);
      ++shared;
    }
  } catch (...) {
    rendezvous_.finish(local, what);
    throw;
  }
  rendezvous_.finish(local, what);  // every part written: the results are whole
}

}  // namespace weft::detail
