// The in-process transport: P simulated processes of one job inside one process, each an endpoint that
// implements transport::Interprocess. Why: the hierarchical algorithms (collectives/hierarchical.cc: the
// fingerprint agreement, the transport all-reduce, the pair exchange, the ring, the allgatherv exchange)
// otherwise run only over MPI, so only whole programs under mpirun test them; over this transport a test
// runs them with one thread per simulated process, in the in-process tier and under the sanitizers.
//
// Semantics follow the MPI transport's, so a test passing here says something about the real one:
//  - operations on a process set are matched by their order on that set, as MPI's collectives on a cached
//    communicator are; point-to-point messages are matched in order per (set, sender, receiver), as MPI's
//    with one tag are (sends are buffered: a sendrecv never waits for the receiver to post);
//  - can_reduce answers as the MPI transport does (sum, prod, max, min of f32, f64, i8, u8, i32, i64; no
//    floating max/min, whose NaN rules differ), so both transports take the same paths;
//  - every wait blocks on a transport::WaitQueue (a condition variable on a thread, a suspension on a
//    fiber), honours the PollContext's deadline (TimeoutError naming the processes that have not arrived),
//    its abort flag (AbortedError; polled every few milliseconds, nothing notifies it) and its stall warning;
//  - mark_failed is fate sharing: every other endpoint's pending and later waits end with an AbortedError
//    carrying the cause.
#pragma once
#include <memory>
#include <string>

#include "transport/interprocess.hpp"

namespace weft::transport {

class InprocJob {
 public:
  // A job of `processes` simulated processes (at least 1); `host` is what every endpoint's host() says.
  explicit InprocJob(int processes, std::string host = "inproc");
  ~InprocJob();
  InprocJob(const InprocJob&) = delete;
  InprocJob& operator=(const InprocJob&) = delete;

  int size() const;
  // Process p's endpoint (rank() == p), owned by the job. Calls on one endpoint are serialized by its user
  // (one thread per simulated process), as the Interprocess contract says; mark_failed and peer_failed may
  // be called from any thread.
  Interprocess& endpoint(int process);

  struct State;  // the mailboxes and meeting slots every endpoint shares (inproc_interprocess.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace weft::transport
