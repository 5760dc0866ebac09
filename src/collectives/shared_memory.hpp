// The collectives' algorithms in shared memory: every member's input is readable, so member k's output (or,
// for the kinds whose members share one result, the k-th slice of it) is computed straight from the inputs,
// with the one reduction kernel set (array/member_reductions.hpp), in member order: every path computes
// bitwise the same result. Small rounds are run whole by one thread (run); large ones are split so that
// each member's thread computes its share (run_share) between two barriers.
#pragma once
#include <cstdint>
#include <utility>

#include "collectives/flat_communicator.hpp"

namespace weft::collectives {

class SharedMemoryCommunicator final : public FlatCommunicator {
 public:
  // Every output buffer the caller holds, all shares. `buffers.in` must hold every member's input.
  void run(const FlatCollective& c, GroupBuffers& buffers, const transport::PollContext& poll) override;
  // Member k's share only: its output, or the k-th slice of a shared one.
  static void run_share(const FlatCollective& c, const GroupBuffers& buffers, int k);
};

// Cache-line aligned share [begin, end) of `count` elements for part k of `parts`.
std::pair<std::int64_t, std::int64_t> share_of(std::int64_t count, int k, int parts);

}  // namespace weft::collectives
