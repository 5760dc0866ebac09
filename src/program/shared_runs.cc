// Shared runs (shared_runs.hpp): the segments.
#include "shared_runs.hpp"

#include <algorithm>
#include <set>

#include "op_registry.hpp"
#include "shared_products.hpp"

namespace weft::program {
namespace {

bool all_local(const Step& step, const std::vector<bool>& computes_locally) {
  for (std::size_t i = step.first; i < step.first + step.count; ++i)
    if (i >= computes_locally.size() || !computes_locally[i]) return false;
  return true;
}

// The replica classes of a direct-loop step's results (the meet over its equations' outputs: replicas in one
// class compute the same run), or nothing when the step is not a direct loop of at least one block.
std::optional<ReplicaClasses> run_classes(const Program& p, const Step& step, const std::vector<ReplicaClasses>& classes,
                                          const std::vector<bool>& computes_locally) {
  if (!step.loop || step.materialize.empty() || !all_local(step, computes_locally)) return std::nullopt;
  if (loop_elements(p, step) < 2048) return std::nullopt;  // not one block of the direct loops
  ReplicaClasses out;
  for (const MeshAxis& a : p.mesh.axes()) out.per_axis.emplace_back(static_cast<std::size_t>(a.size), 0);
  for (std::size_t i = step.first; i < step.first + step.count; ++i) {
    for (ValueId id : p.equations[i].outputs) out = meet(out, classes[id]);
  }
  // A class per replica: the run differs on every replica, nobody to share it with (a data-parallel step's
  // backward runs over its own batch).
  const std::vector<int> keys = out.keys(p.mesh);
  if (static_cast<int>(std::set<int>(keys.begin(), keys.end()).size()) == p.mesh.size()) return std::nullopt;
  return out;
}

// A step whose equations act on the session (variables, host and remote buffers): its order against the
// other replicas' work is the user's, so a segment ends before it.
bool effectful(const Program& p, const Step& step) {
  for (std::size_t i = step.first; i < step.first + step.count; ++i) {
    if (p.equations[i].info().effectful) return true;
  }
  return false;
}

bool reads_any(const Program& p, const Step& step, const std::vector<bool>& shared_value) {
  for (std::size_t i = step.first; i < step.first + step.count; ++i)
    for (ValueId id : p.equations[i].inputs)
      if (shared_value[id]) return true;
  return false;
}

}  // namespace

std::vector<SharedSegment> find_shared_segments(const Program& p, const std::vector<Step>& steps,
                                                const std::vector<bool>& computes_locally, std::int64_t min_elements) {
  const std::vector<ReplicaClasses> classes = replica_classes(p, computes_locally);
  std::vector<SharedSegment> segments;
  std::size_t s = 0;
  while (s < steps.size()) {
    const auto first_classes = run_classes(p, steps[s], classes, computes_locally);
    if (!first_classes) {
      ++s;
      continue;
    }
    SharedSegment seg;
    seg.first = s;
    seg.group_of_replica = first_classes->keys(p.mesh);
    std::vector<bool> shared_value(p.types.size(), false);  // results of the segment's shared runs
    std::size_t t = s;
    for (; t < steps.size(); ++t) {
      const Step& step = steps[t];
      const auto step_classes = run_classes(p, step, classes, computes_locally);
      if (step_classes && *step_classes == *first_classes) {
        seg.shared.push_back(true);
        seg.elements += loop_elements(p, step);
        for (ValueId id : step.materialize) shared_value[id] = true;
        continue;
      }
      // Each replica computes it, as outside a segment. Only local steps: between the meeting and the
      // segment's finish every replica's work must be its own and bounded, so that a replica that fails there
      // can still reach the finish (runtime/shared_runs.cc) and nobody waits for it; a collective inside would
      // leave its partners waiting at the finish for one that waits at the collective for them.
      if (!all_local(step, computes_locally) || effectful(p, step) || reads_any(p, step, shared_value)) break;
      seg.shared.push_back(false);
    }
    while (!seg.shared.empty() && !seg.shared.back()) seg.shared.pop_back();  // end at a shared run
    seg.end = seg.first + seg.shared.size();
    if (seg.elements >= min_elements) {
      segments.push_back(std::move(seg));
      s = segments.back().end;
    } else {
      ++s;
    }
  }
  return segments;
}

}  // namespace weft::program
