// The hierarchical path for rounds whose replicas live in several processes. Per group, in group order
// (the same on every process, so no two processes wait on each other in opposite orders):
//  - all members in this process: computed in shared memory as usual;
//  - all-reduce with a dtype/op the transport reduces natively: the local members are reduced in member
//    order into one buffer, the processes holding the group reduce those partials over the transport
//    (one call on the communicator cached for that process set; two processes on one host with a mid-size
//    buffer reduce in memory both map instead), and every local member shares the result;
//  - everything else: the processes holding the group exchange their members' inputs (one allgatherv),
//    after which each process computes its members' outputs exactly as in one process.
// Before any data moves, the processes check that they all issue the same collective (collectives/fingerprint.hpp):
// the verifying planner, a decorator around the hierarchical one (on unless WEFT_VERIFY=0).
#include <cstring>

#include "collectives/algorithms.hpp"
#include "collectives/fingerprint.hpp"
#include "array/member_reductions.hpp"
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

// Ring all-reduce of `data` (n elements) among `procs`, for large buffers (Thresholds::ring_bytes; smaller
// ones take MPI's own, latency-optimised, all-reduce): a reduce-scatter pass, in which
// each process reduces one segment with our own kernel as the others' segments stream by, then an
// all-gather pass of the reduced segments. Only point-to-point messages cross the transport; MPI's
// non-blocking all-reduce (libnbc) moves large buffers several times slower.
void ring_allreduce(transport::Interprocess& job, const std::vector<int>& procs, std::byte* data, std::int64_t n,
                    DType dtype, ReduceOp op, const transport::PollContext& poll) {
  const int p = static_cast<int>(procs.size());
  const int me = static_cast<int>(std::lower_bound(procs.begin(), procs.end(), job.rank()) - procs.begin());
  const int next = (me + 1) % p, prev = (me + p - 1) % p;
  const std::size_t es = dtype_size(dtype);
  auto segment = [&](int c) { return share_of(n, ((c % p) + p) % p, p); };
  std::int64_t longest = 0;
  for (int c = 0; c < p; ++c) longest = std::max(longest, segment(c).second - segment(c).first);
  // Scratch from the buffer pool: fresh 32 MiB vectors would cost a page fault every 4 KiB, every call.
  Array received_buffer = Array::empty({longest}, dtype, nullptr), reduced_buffer = Array::empty({longest}, dtype, nullptr);
  std::byte* received = received_buffer.mutable_bytes();
  std::byte* reduced = reduced_buffer.mutable_bytes();
  for (int step = 0; step < p - 1; ++step) {
    auto [sb, se] = segment(me - step);
    auto [rb, re] = segment(me - step - 1);
    job.sendrecv(procs, next, data + sb * es, static_cast<std::size_t>(se - sb) * es, prev, received,
                 static_cast<std::size_t>(re - rb) * es, poll);
    const std::byte* inputs[2] = {data + rb * es, received};
    kernels::reduce_in_order(dtype, op, inputs, reduced, re - rb);
    std::memcpy(data + rb * es, reduced, static_cast<std::size_t>(re - rb) * es);
  }
  for (int step = 0; step < p - 1; ++step) {
    auto [sb, se] = segment(me + 1 - step);
    auto [rb, re] = segment(me - step);
    job.sendrecv(procs, next, data + sb * es, static_cast<std::size_t>(se - sb) * es, prev, data + rb * es,
                 static_cast<std::size_t>(re - rb) * es, poll);
  }
}

// Two processes, a mid-size buffer: one exchange of the whole partials, then each reduces both in process
// order (so both get bitwise the same result). One message round trip instead of the ring's two.
void pair_allreduce(transport::Interprocess& job, const std::vector<int>& procs, Array& partial, ReduceOp op,
                    const transport::PollContext& poll) {
  const int me = procs[0] == job.rank() ? 0 : 1;
  Array theirs = Array::empty(partial.shape(), partial.dtype(), nullptr);
  job.sendrecv(procs, 1 - me, partial.bytes(), partial.nbytes(), 1 - me, theirs.mutable_bytes(), theirs.nbytes(), poll);
  Array result = Array::empty(partial.shape(), partial.dtype(), partial.buffer()->account());
  const std::byte* inputs[2] = {me == 0 ? partial.bytes() : theirs.bytes(), me == 0 ? theirs.bytes() : partial.bytes()};
  kernels::reduce_in_order(partial.dtype(), op, inputs, result.mutable_bytes(), partial.size());
  partial = std::move(result);
}

// Clears a partial buffer (or shared region) before the reduction writes it. The buffer pool hands back the
// buffer of an earlier round, and Open MPI's single-copy transport (CMA) had the partner process read it in place,
// so its cache lines sit in the other core's cache: every first store of the reduction kernel then fetched
// its line from there (a 1 MiB local reduction of 4 replicas took ~205 us, against ~70 us without CMA).
// memset's string stores claim whole lines without reading them: 17 us per MiB, and the reduction then
// takes ~75 us (2 instances x 4 devices, 1 MiB all-reduce: 470 -> ~350 us; docs/benchmarks.md). Not for
// the ring's buffers: memset writes those (4 MiB and up) around the caches, and the 64 MiB ring got slower.
void claim_lines(std::byte* buffer, std::size_t bytes) { std::memset(buffer, 0, bytes); }

// Two processes on one host, a mid-size buffer: each reduces its local members straight into its region of
// memory both processes map (the transport's shared_regions), a message each way says both partials are
// there, each reduces the two regions in process order into its own result (bitwise the same on both, and as
// pair_allreduce computes it), and a second message says both are done reading, so a later round may write
// the regions again. No partial is copied: against pair_allreduce over Open MPI's single-copy transport
// (2 instances x 4 devices, 1 MiB) this saves the ~150 us copy and its wait.
// The result is an array like the local inputs, charged to `account`.
Array shared_pair_allreduce(transport::Interprocess& job, const std::vector<int>& procs,
                            const std::vector<std::byte*>& regions, std::span<const std::byte* const> local_inputs,
                            const Array& like, std::shared_ptr<MemoryAccount> account, ReduceOp op,
                            const transport::PollContext& poll) {
  const int me = procs[0] == job.rank() ? 0 : 1;
  const std::int64_t n = like.size();
  claim_lines(regions[me], like.nbytes());  // its lines were last read by the partner
  kernels::reduce_in_order(like.dtype(), op, local_inputs, regions[me], n);
  // The messages order the accesses: a transport's send publishes what was written before it (MPI's
  // shared-memory queues post with a write barrier, the in-process one under a mutex) and its receive sees it.
  job.sendrecv(procs, 1 - me, nullptr, 0, 1 - me, nullptr, 0, poll);  // both partials written
  Array result = Array::empty(like.shape(), like.dtype(), std::move(account));
  const std::byte* inputs[2] = {regions[0], regions[1]};
  kernels::reduce_in_order(like.dtype(), op, inputs, result.mutable_bytes(), n);
  job.sendrecv(procs, 1 - me, nullptr, 0, 1 - me, nullptr, 0, poll);  // both done reading
  return result;
}

}  // namespace

std::shared_ptr<Plan> plan_across_processes(const std::vector<const Request*>& requests,
                                            const std::vector<int>& process_of, transport::Interprocess& job,
                                            const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of,
                                            const transport::PollContext& poll, const Thresholds& sizes) {
  const Request* first = nullptr;
  for (const Request* r : requests)
    if (r) {
      first = r;
      break;
    }
  const int me = job.rank();
  const ReplicaGroups& groups = *first->groups;
  const DType dtype = first->input->dtype();
  // A mean is a sum over the transport, then a division (request.hpp): natively only where the sums and the
  // mean both have the input's dtype (float32, float64).
  const ReduceOp wire_op = reduction_of(*first);
  const bool native_reduce = first->kind == Kind::all_reduce && job.can_reduce(dtype, wire_op) &&
                             sum_dtype(*first) == dtype && output_dtype(*first) == dtype;
  std::vector<const Request*> full = requests;
  std::vector<char> mask(groups.num_groups(), 0);
  std::vector<std::unique_ptr<Request>> remote_requests;
  std::vector<std::unique_ptr<Array>> remote_inputs;
  std::vector<std::pair<int, Array>> reduced;  // (group, result) from the native path
  std::uint64_t bytes_reduced = 0;
  bool ring_ran = false;

  for (int g = 0; g < groups.num_groups(); ++g) {
    const std::vector<int>& members = groups.members(g);
    std::vector<int> procs;
    for (int m : members) procs.push_back(process_of[m]);
    std::sort(procs.begin(), procs.end());
    procs.erase(std::unique(procs.begin(), procs.end()), procs.end());
    if (!std::binary_search(procs.begin(), procs.end(), me)) continue;
    if (procs.size() == 1) {
      mask[g] = 1;
      continue;
    }
    std::vector<int> local;
    for (int m : members)
      if (process_of[m] == me) local.push_back(m);

    if (native_reduce) {
      const std::int64_t n = first->input->size();
      std::vector<const std::byte*> in;
      for (int m : local) in.push_back(requests[m]->input->bytes());
      const std::size_t bytes = first->input->nbytes();
      const bool ring = bytes >= sizes.ring_bytes;
      const bool pair = procs.size() == 2 && bytes >= sizes.split_bytes && !ring;
      // (Asked for the pair path's largest buffer, so the regions are made once.)
      const std::vector<std::byte*> regions =
          pair ? job.shared_regions(procs, sizes.ring_bytes, poll) : std::vector<std::byte*>{};
      Array partial;
      if (!regions.empty()) {
        partial = shared_pair_allreduce(job, procs, regions, in, *first->input, account_of(local[0]), wire_op, poll);
      } else {
        partial = Array::empty(first->input->shape(), dtype, account_of(local[0]));
        if (!ring) claim_lines(partial.mutable_bytes(), bytes);
        kernels::reduce_in_order(dtype, wire_op, in, partial.mutable_bytes(), n);
        if (ring)
          ring_allreduce(job, procs, partial.mutable_bytes(), n, dtype, wire_op, poll);
        else if (pair)
          pair_allreduce(job, procs, partial, wire_op, poll);
        else
          job.allreduce(procs, partial.mutable_bytes(), n, dtype, wire_op, poll);
      }
      if (divides_by_group(*first))
        kernels::divide_sums(dtype, partial.bytes(), dtype, partial.mutable_bytes(), n, static_cast<int>(members.size()));
      bytes_reduced += static_cast<std::uint64_t>(members.size()) * first->input->nbytes();
      ring_ran |= ring;
      reduced.emplace_back(g, std::move(partial));
      continue;
    }

    // Exchange the members' inputs among the processes holding the group.
    const std::size_t item = first->input->nbytes();
    std::vector<std::size_t> bytes(procs.size(), 0);
    for (int m : members) bytes[std::lower_bound(procs.begin(), procs.end(), process_of[m]) - procs.begin()] += item;
    std::vector<std::byte> send;
    send.reserve(local.size() * item);
    for (int m : local) send.insert(send.end(), requests[m]->input->bytes(), requests[m]->input->bytes() + item);
    std::vector<std::byte> recv;
    std::size_t total = 0;
    for (std::size_t b : bytes) total += b;
    recv.resize(total);
    job.allgatherv(procs, send.data(), bytes, recv.data(), poll);
    // Member m's input sits in its process's block, at its position among that process's members.
    std::vector<std::size_t> cursor(procs.size(), 0);
    std::size_t block = 0;
    std::vector<std::size_t> block_start(procs.size(), 0);
    for (std::size_t i = 0; i < procs.size(); ++i) {
      block_start[i] = block;
      block += bytes[i];
    }
    for (int m : members) {
      const std::size_t i = std::lower_bound(procs.begin(), procs.end(), process_of[m]) - procs.begin();
      const std::size_t offset = block_start[i] + cursor[i];
      cursor[i] += item;
      if (process_of[m] == me) continue;
      auto input = std::make_unique<Array>(Array::from_bytes(dtype, first->input->shape(), recv.data() + offset));
      auto request = std::make_unique<Request>(*first);
      request->replica = m;
      request->input = input.get();
      full[m] = request.get();
      remote_inputs.push_back(std::move(input));
      remote_requests.push_back(std::move(request));
    }
    mask[g] = 1;
  }

  std::shared_ptr<Plan> plan = make_plan(full, account_of, sizes, &mask);
  plan->ring = ring_ran;
  for (auto& [g, result] : reduced)
    for (int m : groups.members(g))
      if (process_of[m] == me) plan->outputs[m] = result;
  plan->bytes_reduced += bytes_reduced;
  plan->remote_requests = std::move(remote_requests);
  plan->remote_inputs = std::move(remote_inputs);
  plan->requests = requests;  // stand-ins are only valid inside this call's plan
  return plan;
}

namespace {

// The hierarchical path itself (plan_across_processes), for one execution's processes.
class HierarchicalPlanner final : public CrossProcessPlanner {
 public:
  HierarchicalPlanner(std::vector<int> process_of, transport::Interprocess& job,
                      std::function<std::shared_ptr<MemoryAccount>(int)> account_of, Thresholds sizes)
      : process_of_(std::move(process_of)),
        job_(job),
        account_of_(std::move(account_of)),
        sizes_(sizes) {}
  std::shared_ptr<Plan> plan(const std::vector<const Request*>& requests, const transport::PollContext& poll,
                             std::uint64_t round) override {
    (void)round;  // agreed on by the verifying planner, when there is one
    return plan_across_processes(requests, process_of_, job_, account_of_, poll, sizes_);
  }

 private:
  const std::vector<int> process_of_;
  transport::Interprocess& job_;
  const std::function<std::shared_ptr<MemoryAccount>(int)> account_of_;
  const Thresholds sizes_;
};

// The agreement check around another planner (PyTorch's ProcessGroupWrapper, for our rounds).
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
  const Request* first = nullptr;
  for (const Request* r : requests)
    if (r) {
      first = r;
      break;
    }
  if (!job.agree(processes, fingerprint(*first, round), poll)) report_mismatch(*first, job, processes, poll);
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
