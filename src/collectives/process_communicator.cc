// The flat communicator between processes (process_communicator.hpp): its all-reduce algorithms and the
// concatenating all-gather, over transport::Interprocess.
#include "collectives/process_communicator.hpp"

#include <algorithm>
#include <cstring>

#include "array/member_reductions.hpp"
#include "collectives/shared_memory.hpp"
#include "weft/error.hpp"

namespace weft::collectives {
namespace {

// Clears a buffer (or shared region) before a reduction writes it. The buffer pool hands back the buffer of
// an earlier round, and Open MPI's single-copy transport (CMA) had the partner process read it in place, so
// its cache lines sit in the other core's cache: every first store of the reduction kernel then fetched its
// line from there (a 1 MiB local reduction of 4 replicas took ~205 us, against ~70 us without CMA).
// memset's string stores claim whole lines without reading them: 17 us per MiB, and the reduction then
// takes ~75 us (2 instances x 4 devices, 1 MiB all-reduce: 470 -> ~350 us; docs/benchmarks.md). Not for
// the ring's buffers: memset writes those (4 MiB and up) around the caches, and the 64 MiB ring got slower.
void claim_lines(std::byte* buffer, std::size_t bytes) { std::memset(buffer, 0, bytes); }

}  // namespace

ProcessCommunicator::ProcessCommunicator(transport::Interprocess& job, std::vector<int> procs, Thresholds sizes)
    : job_(job),
      procs_(std::move(procs)),
      sizes_(sizes),
      me_(static_cast<int>(std::lower_bound(procs_.begin(), procs_.end(), job.rank()) - procs_.begin())) {}

bool ProcessCommunicator::reduces_natively(const FlatCollective& c) const {
  return c.kind == Kind::all_reduce && job_.can_reduce(c.dtype, c.op) && c.sum_dtype == c.dtype &&
         c.out_dtype == c.dtype;
}

std::byte* ProcessCommunicator::staging(const FlatCollective& c, std::byte* out, const transport::PollContext& poll) {
  const std::size_t bytes = c.in_bytes();
  regions_.clear();
  std::byte* where = out;
  if (pairs(c)) {
    // (Asked for the pair path's largest buffer, so the regions are made once.)
    regions_ = job_.shared_regions(procs_, sizes_.ring_bytes, poll);
    if (!regions_.empty()) {
      where = regions_[me_];
    } else {
      scratch_ = Array::empty({c.count}, c.dtype, nullptr);
      where = scratch_.mutable_bytes();
    }
  }
  if (!rings(c)) claim_lines(where, bytes);  // its lines were last read by the partner
  return where;
}

void ProcessCommunicator::run(const FlatCollective& c, GroupBuffers& b, const transport::PollContext& poll) {
  switch (c.kind) {
    case Kind::all_reduce:
      if (!reduces_natively(c))
        throw Error(std::string("internal: the process communicator cannot reduce ") + std::string(dtype_name(c.dtype)) +
                    " with " + reduce_op_name(c.op) + " (the hierarchical path exchanges the inputs instead)");
      return all_reduce(c, b.in[me_], b.out[me_], poll);
    case Kind::all_gather: {
      if (c.out.outer != 1) throw Error("internal: the process communicator's all_gather only concatenates");
      std::vector<std::size_t> bytes(procs_.size(), c.in_bytes());
      for (std::size_t i = 0; i < b.counts.size(); ++i)
        bytes[i] = static_cast<std::size_t>(b.counts[i]) * dtype_size(c.dtype);
      return job_.allgatherv(procs_, b.in[me_], bytes, b.out[me_], poll);
    }
    case Kind::reduce_scatter:
    case Kind::all_to_all:
    case Kind::ppermute:
      break;
  }
  throw Error(std::string("internal: the process communicator runs all_reduce and all_gather, not ") + kind_name(c.kind));
}

void ProcessCommunicator::all_reduce(const FlatCollective& c, const std::byte* in, std::byte* out,
                                     const transport::PollContext& poll) {
  if (!regions_.empty() && in == regions_[me_]) return shared_pair_allreduce(c, out, poll);
  if (pairs(c)) return pair_allreduce(c, in, out, poll);
  if (in != out) std::memcpy(out, in, c.in_bytes());
  if (rings(c)) return ring_allreduce(c, out, poll);
  job_.allreduce(procs_, out, c.count, c.dtype, c.op, poll);
}

// Ring all-reduce of `data` among the processes, for large buffers (Thresholds::ring_bytes; smaller ones
// take MPI's own, latency-optimised, all-reduce): a reduce-scatter pass, in which each process reduces one
// segment with our own kernel as the others' segments stream by, then an all-gather pass of the reduced
// segments. Only point-to-point messages cross the transport; MPI's non-blocking all-reduce (libnbc) moves
// large buffers several times slower.
void ProcessCommunicator::ring_allreduce(const FlatCollective& c, std::byte* data, const transport::PollContext& poll) {
  const int p = size();
  const int next = (me_ + 1) % p, prev = (me_ + p - 1) % p;
  const std::size_t es = dtype_size(c.dtype);
  auto segment = [&](int s) { return share_of(c.count, ((s % p) + p) % p, p); };
  std::int64_t longest = 0;
  for (int s = 0; s < p; ++s) longest = std::max(longest, segment(s).second - segment(s).first);
  // Scratch from the buffer pool: fresh 32 MiB vectors would cost a page fault every 4 KiB, every call.
  Array received_buffer = Array::empty({longest}, c.dtype, nullptr), reduced_buffer = Array::empty({longest}, c.dtype, nullptr);
  std::byte* received = received_buffer.mutable_bytes();
  std::byte* reduced = reduced_buffer.mutable_bytes();
  for (int step = 0; step < p - 1; ++step) {
    auto [sb, se] = segment(me_ - step);
    auto [rb, re] = segment(me_ - step - 1);
    job_.sendrecv(procs_, next, data + sb * es, static_cast<std::size_t>(se - sb) * es, prev, received,
                  static_cast<std::size_t>(re - rb) * es, poll);
    const std::byte* inputs[2] = {data + rb * es, received};
    kernels::reduce_in_order(c.dtype, c.op, inputs, reduced, re - rb);
    std::memcpy(data + rb * es, reduced, static_cast<std::size_t>(re - rb) * es);
  }
  for (int step = 0; step < p - 1; ++step) {
    auto [sb, se] = segment(me_ + 1 - step);
    auto [rb, re] = segment(me_ - step);
    job_.sendrecv(procs_, next, data + sb * es, static_cast<std::size_t>(se - sb) * es, prev, data + rb * es,
                  static_cast<std::size_t>(re - rb) * es, poll);
  }
}

// Two processes, a mid-size buffer: one exchange of the whole contributions, then each reduces both in process
// order (so both get bitwise the same result). One message round trip instead of the ring's two.
void ProcessCommunicator::pair_allreduce(const FlatCollective& c, const std::byte* mine, std::byte* out,
                                         const transport::PollContext& poll) {
  Array theirs = Array::empty({c.count}, c.dtype, nullptr);
  job_.sendrecv(procs_, 1 - me_, mine, c.in_bytes(), 1 - me_, theirs.mutable_bytes(), theirs.nbytes(), poll);
  const std::byte* inputs[2] = {me_ == 0 ? mine : theirs.bytes(), me_ == 0 ? theirs.bytes() : mine};
  kernels::reduce_in_order(c.dtype, c.op, inputs, out, c.count);
}

// Two processes on one host, a mid-size buffer: each wrote its contribution straight into its region of
// memory both processes map (staging), a message each way says both are there, each reduces the two regions
// in process order into its own output (bitwise the same on both, and as pair_allreduce computes it), and a
// second message says both are done reading, so a later round may write the regions again. No contribution
// is copied: against pair_allreduce over Open MPI's single-copy transport (2 instances x 4 devices, 1 MiB)
// this saves the ~150 us copy and its wait.
void ProcessCommunicator::shared_pair_allreduce(const FlatCollective& c, std::byte* out, const transport::PollContext& poll) {
  // The messages order the accesses: a transport's send publishes what was written before it (MPI's
  // shared-memory queues post with a write barrier, the in-process one under a mutex) and its receive sees it.
  job_.sendrecv(procs_, 1 - me_, nullptr, 0, 1 - me_, nullptr, 0, poll);  // both contributions written
  const std::byte* inputs[2] = {regions_[0], regions_[1]};
  kernels::reduce_in_order(c.dtype, c.op, inputs, out, c.count);
  job_.sendrecv(procs_, 1 - me_, nullptr, 0, 1 - me_, nullptr, 0, poll);  // both done reading
}

}  // namespace weft::collectives
