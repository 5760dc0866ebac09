// The one interface under the collectives' semantics: a group's collective on flat buffers
// (flat_collective.hpp), run for the members the caller holds. Three implementations:
//   SharedMemoryCommunicator (shared_memory.hpp): every member's input sits in this process's memory; the
//     caller holds all of them (or, splitting the work, member k computes its share: run_share);
//   ProcessCommunicator (process_communicator.hpp): the members are processes, the caller is one of them and
//     holds its own buffer; the data moves over the transport (MPI, or the in-process test transport);
//   HierarchicalCommunicator (hierarchical.cc): the members are replicas spread over processes, the caller
//     holds this process's; a composition of the other two (combine locally, exchange between processes,
//     hand the results to the local members).
// The caller (the plan, algorithms.hpp) allocates the outputs; the communicators write them.
#pragma once
#include <cstddef>
#include <vector>

#include "collectives/flat_collective.hpp"
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

// One group's buffers, in member order: in[k] is member k's input (FlatCollective::count elements), out[k]
// its output (out_count); null for members the caller does not hold. For the kinds whose members share
// their result (FlatCollective::shared_output) every held member's out[k] is the same buffer.
struct GroupBuffers {
  std::vector<const std::byte*> in;
  std::vector<std::byte*> out;
  // all_gather between processes only: elements each member contributes, when they differ (a process
  // contributes its replicas' inputs); empty: FlatCollective::count each.
  std::vector<std::int64_t> counts;

  int size() const { return static_cast<int>(in.size()); }
  // The output the held members share (FlatCollective::shared_output): the first held one.
  std::byte* shared_out() const;
};

class FlatCommunicator {
 public:
  virtual ~FlatCommunicator() = default;
  // Runs `c` over `buffers` for the held members; every caller of the group calls it for the same round.
  virtual void run(const FlatCollective& c, GroupBuffers& buffers, const transport::PollContext& poll) = 0;
};

}  // namespace weft::collectives
