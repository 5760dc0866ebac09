// The flat communicator between processes (flat_communicator.hpp): the members are the processes holding a
// group, the caller is one of them and holds its own buffer, and the data moves over the transport
// (transport::Interprocess: MPI between instances, or the in-process transport of the tests). It runs the
// two collectives the hierarchical path needs between processes:
//  - all_reduce of a dtype and op the transport reduces natively (reduces_natively): MPI's all-reduce for
//    small buffers; across two processes, the pair exchange for mid-size ones (in memory both processes map
//    when they share a host: staging()); around a ring of point-to-point messages for large ones;
//  - all_gather as a plain concatenation, the members' contributions may differ in size (allgatherv).
// Every other collective between processes is composed of an all_gather and the shared-memory algorithms
// (HierarchicalCommunicator, hierarchical.cc).
#pragma once
#include <vector>

#include "collectives/flat_communicator.hpp"

namespace weft::collectives {

class ProcessCommunicator final : public FlatCommunicator {
 public:
  // `procs`: the sorted processes of the group, this one among them.
  ProcessCommunicator(transport::Interprocess& job, std::vector<int> procs, Thresholds sizes);

  int me() const { return me_; }  // this process's member index
  int size() const { return static_cast<int>(procs_.size()); }
  // An all-reduce of `c` between processes needs no help from the layers above (an element-wise op the
  // transport reduces, the sums already in the output dtype).
  bool reduces_natively(const FlatCollective& c) const;
  // Where this process should write its contribution to the all-reduce of `c` whose output is `out`: memory
  // the two processes of a pair share, a scratch buffer for the pair exchange between hosts, or `out`
  // itself (reduced in place). Valid until the next call; its cache lines claimed for writing.
  std::byte* staging(const FlatCollective& c, std::byte* out, const transport::PollContext& poll);
  // The all-reduce of `c` goes around the ring (statistics: RoundCounters::ring_rounds).
  bool rings(const FlatCollective& c) const { return c.in_bytes() >= sizes_.ring_bytes; }

  void run(const FlatCollective& c, GroupBuffers& buffers, const transport::PollContext& poll) override;

 private:
  bool pairs(const FlatCollective& c) const {
    return procs_.size() == 2 && c.in_bytes() >= sizes_.split_bytes && !rings(c);
  }
  void all_reduce(const FlatCollective& c, const std::byte* in, std::byte* out, const transport::PollContext& poll);
  void ring_allreduce(const FlatCollective& c, std::byte* data, const transport::PollContext& poll);
  void pair_allreduce(const FlatCollective& c, const std::byte* mine, std::byte* out, const transport::PollContext& poll);
  void shared_pair_allreduce(const FlatCollective& c, std::byte* out, const transport::PollContext& poll);

  transport::Interprocess& job_;
  const std::vector<int> procs_;
  const Thresholds sizes_;
  const int me_;
  std::vector<std::byte*> regions_;  // staging(): the pair's shared memory, when it was used
  Array scratch_;                    // staging(): the pair exchange's contribution between hosts
};

}  // namespace weft::collectives
