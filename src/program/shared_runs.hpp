// Which fused runs the local replicas of one execution may compute once between them (the executor's shared
// runs, docs/settings.md WEFT_SHARED_RUNS; at run time: runtime/shared_runs.hpp). A data-parallel step ends
// with every replica applying the same update to the same parameters: the gradients are psum'd (one value on
// every replica), the parameters and optimizer state are replicated, so AdamW's fused run computes the same
// numbers eight times over (8 replicas on 2 cores: a tenth of the transformer's step). Where the program's
// types prove a run's inputs equal on several local replicas, those replicas may split its elements instead,
// each computing a block-aligned part into one shared result (the same bits as the whole run: fusion.hpp's
// loop_part_range): XLA's automatic cross-replica sharding of the weight update (Xu et al. 2020), inside one
// process, with no reduce-scatter or all-gather to pay for.
//
// The proof is shared_products.hpp's replica classes: a run whose inputs are equal on the replicas of a class
// (those with the same coordinates along the axes its inputs truly vary along, or in the same axis index group
// of a grouped reduction) gives the same result on all of them. Runs are shared in segments, so that the
// replicas meet once for many runs (AdamW is one run per parameter): a segment starts at a shareable run
// (a direct-loop step, fusion.hpp) and goes on over later shareable runs with the same classes and over steps
// that each replica computes for itself as usual (local ones only: no collective, no session effect, so
// that a replica failing inside the segment can still reach its end), as long as none of those reads a
// shared result of the segment (which another replica may still be writing); a shared run may read an earlier one's results, at
// the same elements (a direct loop reads its whole operands elementwise, and the parts of equal shapes are
// equal). A segment whose shared runs have fewer than `min_elements` elements in all is not worth a meeting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fusion.hpp"
#include "program.hpp"

namespace weft::program {

struct SharedSegment {
  std::size_t first = 0, end = 0;  // steps [first, end) of plan_steps's list; first and end - 1 are shared
  std::vector<int> group_of_replica;  // per replica of the mesh: its class among the shared runs' replica classes
                                      // (ReplicaClasses::keys): replicas of one class share the runs
  std::vector<bool> shared;        // per step of the segment: computed in parts, else by each replica
  std::int64_t elements = 0;       // the shared runs' elements, in all
};

// The segments of `program` (verified) over its `steps`, in order. `computes_locally` as for
// find_shared_products.
std::vector<SharedSegment> find_shared_segments(const Program& program, const std::vector<Step>& steps,
                                                const std::vector<bool>& computes_locally, std::int64_t min_elements);

}  // namespace weft::program
