// Collectives between processes (instances) of one job. The interface has no MPI types: the only file that
// includes <mpi.h> is transport/mpi/mpi_interprocess.cc. Every operation is non-blocking underneath and
// polled, so it honours a deadline and a local abort; calls are serialized by the caller (one collective
// at a time per process), which is all MPI_THREAD_SERIALIZED requires.
//
// Besides the data, the processes talk on a side channel, so that a wait across processes is diagnosed as
// well as one inside a process (docs/reliability.md, "Across processes"):
//  - a process that failed says so at once (mark_failed): the others' waits end with its cause;
//  - a process waiting in a collective for a while says so ("arrived"): a stall report then names exactly
//    the processes that have not arrived, and their replicas, never the waiting process itself;
//  - a process whose program ends says so ("departed"): a collective that needs it fails within about a
//    second naming it, instead of waiting for the timeout while the leaver sits in MPI_Finalize; and the
//    leaver enters MPI_Finalize only once every process has ended, so finalizing never waits unbounded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/dtype.hpp"
#include "weft/reduce_op.hpp"

namespace weft::transport {

// The element-wise reductions a transport may run: sum, prod, max and min (never a mean: see can_reduce).
inline bool is_elementwise(ReduceOp op) {
  return op == ReduceOp::sum || op == ReduceOp::prod || op == ReduceOp::max || op == ReduceOp::min;
}

struct PollContext {
  // A constructor rather than an aggregate: callers that set only the first fields stay warning-free.
  PollContext(double timeout = 300, std::function<bool()> aborted_fn = {}, std::function<std::string()> what_fn = {},
              double warn = 0, std::function<std::vector<int>(int)> replicas_of_fn = {}, std::string progress = {})
      : timeout_s(timeout),
        aborted(std::move(aborted_fn)),
        what(std::move(what_fn)),
        warn_s(warn),
        replicas_of(std::move(replicas_of_fn)),
        missing_progress(std::move(progress)) {}

  double timeout_s;                   // 0 = wait forever
  std::function<bool()> aborted;      // polled: true ends the wait with AbortedError
  std::function<std::string()> what;  // for messages: "psum(...) seq 3"
  double warn_s;                      // a stall warning naming the missing processes after this long; 0 = none
  // For reports: the global replicas process p holds in this collective ("arrived: [0, 1]; missing: [2, 3]").
  // Unset: processes are named without replicas.
  std::function<std::vector<int>(int process)> replicas_of;
  // Where a missing process's replicas stand, said of each ("last completed seq=4"); empty: not said.
  std::string missing_progress;
};

class Interprocess {
 public:
  // The job this process belongs to, initialising MPI on first use; null when the process runs alone
  // (not started by weftrun / mpirun / srun). Throws Error when MPI cannot provide the thread level needed.
  // Destroyed at exit (static destruction): the process announces its departure, waits for the others to
  // end (at most the last collective timeout seen; 0 = no limit), then finalizes MPI, or aborts the job when
  // this process or another failed, or the others did not end in time.
  static Interprocess* job();

  virtual ~Interprocess() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string host() const = 0;

  // Collective over `procs` (sorted process indices including rank()); communicators are cached per set.
  // True when this dtype/op pair reduces natively (else callers gather and reduce themselves). The ops are
  // element-wise (sum, prod, max, min): a mean is lowered above, to a sum and a division
  // (collectives/request.hpp), and no transport reduces one.
  virtual bool can_reduce(DType dtype, ReduceOp op) const = 0;
  virtual void allreduce(const std::vector<int>& procs, void* data, std::int64_t count, DType dtype, ReduceOp op,
                         const PollContext& poll) = 0;
  // Point to point within `procs` (indices into it): sends `send` to procs[to] while receiving from
  // procs[from] into `recv`; both complete before it returns.
  virtual void sendrecv(const std::vector<int>& procs, int to, const void* send, std::size_t send_bytes, int from,
                        void* recv, std::size_t recv_bytes, const PollContext& poll) = 0;
  // Memory the processes of `procs` all read and write, where they share a host: one region of at least
  // `bytes` per process (regions[i] is procs[i]'s, 64-byte aligned), made on the first call for the set and
  // kept for later ones (made again, larger, when a call asks for more). Empty when they do not share memory
  // (other hosts), on every process alike. Collective over `procs`, and only between rounds that use the
  // regions. Callers order their reads after the writers' with a message (sendrecv) between them.
  virtual std::vector<std::byte*> shared_regions(const std::vector<int>& procs, std::size_t bytes,
                                                 const PollContext& poll) = 0;
  // Gathers `bytes[i]` bytes from procs[i] into `recv` (concatenated in procs order).
  virtual void allgatherv(const std::vector<int>& procs, const void* send, const std::vector<std::size_t>& bytes,
                          void* recv, const PollContext& poll) = 0;
  // A program of this process failed: at exit the job is aborted (MPI_Abort) instead of finalised, so the
  // other instances, which may wait for this one inside a collective, end too (fate sharing).
  // It also tells every other instance at once (`cause` names the instance, replica and error): their
  // pending and future waits inside collectives end with an AbortedError carrying it, so no instance keeps
  // waiting for one whose program failed, even if that program catches the error and goes on.
  // Safe to call from any thread, also while another thread waits in a collective.
  virtual void mark_failed(const std::string& cause) = 0;
  // Another instance announced its failure (see mark_failed).
  virtual bool peer_failed() const = 0;
  // Every process of `procs` passes a fingerprint; returns false (on every process) when any differs.
  virtual bool agree(const std::vector<int>& procs, std::uint64_t fingerprint, const PollContext& poll) = 0;
};

}  // namespace weft::transport
