// The hierarchical path, for rounds whose replicas live in several processes. Groups within this process run
// in shared memory as usual; a group spanning processes runs through the HierarchicalCommunicator, a
// composition of the two flat communicators (flat_communicator.hpp), per group in group order (the same on
// every process, so no two processes wait on each other in opposite orders):
//  - an all-reduce the transport reduces natively: the local members are reduced in member order (the
//    shared-memory kernels) into one contribution, the processes holding the group all-reduce those
//    (ProcessCommunicator: MPI's all-reduce, the pair exchange or the ring), and every local member shares
//    the result;
//  - everything else: the processes holding the group exchange their members' inputs (the
//    ProcessCommunicator's all_gather), after which the shared-memory algorithms compute this process's
//    members' outputs exactly as in one process, from flat pointers into what was received.
// Before any data moves, the processes check that they all issue the same collective (a decorator around this
// planner: cross_process_planner.cc).
#include <algorithm>

#include "array/member_reductions.hpp"
#include "collectives/algorithms.hpp"
#include "collectives/process_communicator.hpp"
#include "collectives/shared_memory.hpp"
#include "weft/error.hpp"

namespace weft::collectives {
namespace {

class HierarchicalCommunicator final : public FlatCommunicator {
 public:
  // `member_process[k]`: the process holding member k of the group.
  HierarchicalCommunicator(transport::Interprocess& job, std::vector<int> member_process, Thresholds sizes)
      : member_process_(std::move(member_process)),
        procs_(processes_of(member_process_)),
        me_(job.rank()),
        across_(job, procs_, sizes) {}

  bool ring_ran() const { return ring_ran_; }

  void run(const FlatCollective& c, GroupBuffers& b, const transport::PollContext& poll) override {
    if (across_.reduces_natively(c)) return reduce_natively(c, b, poll);
    exchange_then_compute(c, b, poll);
  }

 private:
  static std::vector<int> processes_of(std::vector<int> member_process) {
    std::sort(member_process.begin(), member_process.end());
    member_process.erase(std::unique(member_process.begin(), member_process.end()), member_process.end());
    return member_process;
  }

  void reduce_natively(const FlatCollective& c, GroupBuffers& b, const transport::PollContext& poll) {
    std::byte* out = b.shared_out();
    std::vector<const std::byte*> local;
    for (const std::byte* in : b.in)
      if (in) local.push_back(in);
    std::byte* contribution = across_.staging(c, out, poll);
    kernels::reduce_in_order(c.dtype, c.op, local, contribution, c.count);
    GroupBuffers between;
    between.in.assign(static_cast<std::size_t>(across_.size()), nullptr);
    between.out.assign(static_cast<std::size_t>(across_.size()), nullptr);
    between.in[across_.me()] = contribution;
    between.out[across_.me()] = out;
    across_.run(c, between, poll);
    if (c.mean) kernels::divide_sums(c.dtype, out, c.dtype, out, c.count, b.size());
    ring_ran_ |= across_.rings(c);
  }

  void exchange_then_compute(const FlatCollective& c, GroupBuffers& b, const transport::PollContext& poll) {
    // Each process contributes its members' inputs, in member order; member k's input then sits in its
    // process's block, at its position among that process's members.
    const std::vector<int>& procs = procs_;
    auto index_of = [&](int process) { return std::lower_bound(procs.begin(), procs.end(), process) - procs.begin(); };
    FlatCollective gather;
    gather.kind = Kind::all_gather;
    gather.dtype = gather.out_dtype = c.dtype;
    gather.count = c.count;
    gather.out = {1, c.count};
    GroupBuffers between;
    between.counts.assign(procs.size(), 0);
    for (int p : member_process_) between.counts[index_of(p)] += c.count;
    std::vector<std::int64_t> block_start(procs.size(), 0);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < procs.size(); ++i) {
      block_start[i] = total;
      total += between.counts[i];
    }
    const std::size_t item = c.in_bytes(), es = dtype_size(c.dtype);
    std::vector<std::byte> send, received(static_cast<std::size_t>(total) * es);
    send.reserve(static_cast<std::size_t>(between.counts[index_of(me_)]) * es);
    for (int k = 0; k < b.size(); ++k)
      if (member_process_[k] == me_) send.insert(send.end(), b.in[k], b.in[k] + item);
    between.in.assign(procs.size(), nullptr);
    between.out.assign(procs.size(), nullptr);
    between.in[across_.me()] = send.data();
    between.out[across_.me()] = received.data();
    across_.run(gather, between, poll);

    GroupBuffers all = b;
    std::vector<std::int64_t> cursor = block_start;
    for (int k = 0; k < b.size(); ++k) {
      const auto i = index_of(member_process_[k]);
      all.in[k] = received.data() + static_cast<std::size_t>(cursor[i]) * es;
      cursor[i] += c.count;
    }
    SharedMemoryCommunicator().run(c, all, poll);
  }

  const std::vector<int> member_process_;
  const std::vector<int> procs_;  // the group's processes, sorted
  const int me_;
  ProcessCommunicator across_;
  bool ring_ran_ = false;
};

}  // namespace

std::shared_ptr<Plan> plan_across_processes(const std::vector<const Request*>& requests,
                                            const std::vector<int>& process_of, transport::Interprocess& job,
                                            const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of,
                                            const transport::PollContext& poll, const Thresholds& sizes) {
  std::shared_ptr<Plan> plan = start_plan(first_request(requests), static_cast<int>(requests.size()));
  const int me = job.rank();
  for (int gi = 0; gi < plan->groups->num_groups(); ++gi) {
    const std::vector<int>& members = plan->groups->members(gi);
    std::vector<int> member_process;
    for (int m : members) member_process.push_back(process_of[m]);
    if (std::find(member_process.begin(), member_process.end(), me) == member_process.end()) continue;
    plan_group(*plan, requests, gi, account_of);
    GroupBuffers& b = plan->buffers[static_cast<std::size_t>(gi)];
    if (std::all_of(member_process.begin(), member_process.end(), [me](int p) { return p == me; })) {
      if (plan->collective.kind != Kind::ppermute) SharedMemoryCommunicator().run(plan->collective, b, no_wait());
      continue;
    }
    HierarchicalCommunicator group(job, std::move(member_process), sizes);
    group.run(plan->collective, b, poll);
    plan->ring |= group.ring_ran();
  }
  return plan;
}

}  // namespace weft::collectives
