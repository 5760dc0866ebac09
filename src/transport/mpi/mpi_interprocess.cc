// The MPI transport: the only place that includes <mpi.h>.
// The deprecated MPI C++ bindings are not used; keep <mpi.h> to the C API.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "core/log.hpp"
#include "transport/interprocess.hpp"
#include "weft/error.hpp"

namespace weft::transport {
namespace {

using Clock = std::chrono::steady_clock;

bool env_int_above_one(const char* name) {
  const char* v = std::getenv(name);
  return v && std::atoi(v) > 1;
}

std::string procs_str(const std::vector<int>& procs) {
  std::string s = "[";
  for (std::size_t i = 0; i < procs.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(procs[i]);
  }
  return s + "]";
}

class MpiInterprocess final : public Interprocess {
 public:
  MpiInterprocess() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      throw Error("MPI provides thread level " + std::to_string(provided) +
                  " but weft needs MPI_THREAD_SERIALIZED (" + std::to_string(MPI_THREAD_SERIALIZED) +
                  "): collectives are issued by whichever replica thread completes a rendezvous; use an MPI "
                  "library built with thread support (Debian's Open MPI has it)");
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &world_);
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    host_.assign(name, static_cast<std::size_t>(len));
    // MPI errors come back as codes, which we turn into weft errors naming the operation.
    MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN);
    // A side channel for fate sharing: a receive from anyone, tested whenever we poll.
    MPI_Comm_dup(world_, &abort_comm_);
    MPI_Comm_set_errhandler(abort_comm_, MPI_ERRORS_RETURN);
    MPI_Irecv(abort_in_, sizeof abort_in_ - 1, MPI_CHAR, MPI_ANY_SOURCE, kAbortTag, abort_comm_, &abort_request_);
  }

  ~MpiInterprocess() override {
    if (failed_ || !peer_abort_.empty()) {
      // MPI_Finalize would wait for instances that may be blocked on us inside a collective.
      MPI_Abort(world_, 1);
      return;
    }
    MPI_Cancel(&abort_request_);
    MPI_Request_free(&abort_request_);
    MPI_Comm_free(&abort_comm_);
    for (auto& [procs, comm] : comms_)
      if (comm != world_) MPI_Comm_free(&comm);
    MPI_Comm_free(&world_);
    MPI_Finalize();
  }

  bool peer_failed() const override { return !peer_abort_.empty(); }

  void mark_failed(const std::string& cause) override {
    if (failed_.exchange(true)) return;
    abort_out_ = cause.substr(0, sizeof abort_in_ - 1);
    abort_sends_.resize(size_);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Isend(abort_out_.data(), static_cast<int>(abort_out_.size()), MPI_CHAR, p, kAbortTag, abort_comm_,
                &abort_sends_[p]);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string host() const override { return host_; }

  bool can_reduce(DType dtype, ReduceOp op) const override {
    // MPI_MAX / MPI_MIN drop NaNs depending on the operand order; ours propagate them like XLA, so floating
    // max and min take the exchange path and our kernels.
    if (is_floating(dtype) && (op == ReduceOp::max || op == ReduceOp::min)) return false;
    return datatype(dtype) != MPI_DATATYPE_NULL && op != ReduceOp::mean;
  }

  void allreduce(const std::vector<int>& procs, void* data, std::int64_t count, DType dtype, ReduceOp op,
                 const PollContext& poll) override {
    check_usable(poll);
    MPI_Comm comm = comm_for(procs, poll);
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), datatype(dtype), mpi_op(op), comm, &request),
          "MPI_Iallreduce", poll);
    wait(request, procs, poll);
  }

  void sendrecv(const std::vector<int>& procs, int to, const void* send, std::size_t send_bytes, int from, void* recv,
                std::size_t recv_bytes, const PollContext& poll) override {
    check_usable(poll);
    if (send_bytes > static_cast<std::size_t>(INT_MAX) || recv_bytes > static_cast<std::size_t>(INT_MAX))
      throw InvalidArgument("process " + std::to_string(rank_) + ": a message of more than 2 GiB at " +
                            (poll.what ? poll.what() : std::string("a collective")));
    MPI_Comm comm = comm_for(procs, poll);
    MPI_Request requests[2];
    check(MPI_Irecv(recv, static_cast<int>(recv_bytes), MPI_BYTE, from, kRingTag, comm, &requests[0]), "MPI_Irecv", poll);
    check(MPI_Isend(send, static_cast<int>(send_bytes), MPI_BYTE, to, kRingTag, comm, &requests[1]), "MPI_Isend", poll);
    wait(requests[0], procs, poll);
    wait(requests[1], procs, poll);
  }

  void allgatherv(const std::vector<int>& procs, const void* send, const std::vector<std::size_t>& bytes, void* recv,
                  const PollContext& poll) override {
    check_usable(poll);
    std::size_t total = 0;
    for (std::size_t b : bytes) total += b;
    if (total > static_cast<std::size_t>(INT_MAX))
      throw InvalidArgument("process " + std::to_string(rank_) + ": exchanging " + std::to_string(total) +
                            " bytes at " + (poll.what ? poll.what() : std::string("a collective")) +
                            " exceeds the 2 GiB an MPI count can address; split the data");
    MPI_Comm comm = comm_for(procs, poll);
    std::vector<int> counts(procs.size()), displs(procs.size());
    std::size_t offset = 0;
    int me = -1;
    for (std::size_t i = 0; i < procs.size(); ++i) {
      counts[i] = static_cast<int>(bytes[i]);
      displs[i] = static_cast<int>(offset);
      offset += bytes[i];
      if (procs[i] == rank_) me = static_cast<int>(i);
    }
    MPI_Request request;
    check(MPI_Iallgatherv(send, counts[me], MPI_BYTE, recv, counts.data(), displs.data(), MPI_BYTE, comm, &request),
          "MPI_Iallgatherv", poll);
    wait(request, procs, poll);
  }

  bool agree(const std::vector<int>& procs, std::uint64_t fingerprint, const PollContext& poll) override {
    check_usable(poll);
    // max(f) == -max(-f) exactly when every process passed the same value.
    std::int64_t values[2] = {static_cast<std::int64_t>(fingerprint >> 1), -static_cast<std::int64_t>(fingerprint >> 1)};
    MPI_Comm comm = comm_for(procs, poll);
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, values, 2, MPI_INT64_T, MPI_MAX, comm, &request), "MPI_Iallreduce", poll);
    wait(request, procs, poll);
    return values[0] == -values[1];
  }

 private:
  static MPI_Datatype datatype(DType dtype) {
    switch (dtype) {
      case DType::f32: return MPI_FLOAT;
      case DType::f64: return MPI_DOUBLE;
      case DType::i8: return MPI_INT8_T;
      case DType::u8: return MPI_UINT8_T;
      case DType::i32: return MPI_INT32_T;
      case DType::i64: return MPI_INT64_T;
      default: return MPI_DATATYPE_NULL;
    }
  }

  static MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
      case ReduceOp::sum: return MPI_SUM;
      case ReduceOp::prod: return MPI_PROD;
      case ReduceOp::max: return MPI_MAX;
      case ReduceOp::min: return MPI_MIN;
      case ReduceOp::mean: break;
    }
    return MPI_SUM;
  }

  void check(int code, const char* call, const PollContext& poll) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(code, text, &len);
    throw PeerLostError("process " + std::to_string(rank_) + ": " + call + " failed during " +
                        (poll.what ? poll.what() : std::string("a collective")) + ": " + std::string(text, len));
  }

  // Communicators per process set, made lazily: MPI_Comm_create_group is collective over the set only.
  void handshake(const std::vector<int>& procs, const PollContext& poll) {
    char out = 0;
    std::vector<char> in(procs.size());
    std::vector<MPI_Request> requests;
    for (std::size_t i = 0; i < procs.size(); ++i) {
      if (procs[i] == rank_) continue;
      requests.emplace_back();
      MPI_Irecv(&in[i], 1, MPI_CHAR, procs[i], kHandshakeTag, world_, &requests.back());
      requests.emplace_back();
      MPI_Isend(&out, 1, MPI_CHAR, procs[i], kHandshakeTag, world_, &requests.back());
    }
    for (MPI_Request& r : requests) wait(r, procs, poll);
  }

  MPI_Comm comm_for(const std::vector<int>& procs, const PollContext& poll) {
    auto it = comms_.find(procs);
    if (it != comms_.end()) return it->second;
    MPI_Comm comm;
    if (static_cast<int>(procs.size()) == size_) {
      comm = world_;
    } else {
      // MPI_Comm_create_group blocks until every member calls it; a polled handshake first makes sure they
      // all got here, so an absent member ends in a timeout or abort, not a hang.
      handshake(procs, poll);
      MPI_Group world_group, group;
      MPI_Comm_group(world_, &world_group);
      MPI_Group_incl(world_group, static_cast<int>(procs.size()), procs.data(), &group);
      int tag = 0;
      for (int p : procs) tag = (tag * 31 + p + 1) & 0x7fff;
      if (MPI_Comm_create_group(world_, group, tag, &comm) != MPI_SUCCESS)
        throw PeerLostError("process " + std::to_string(rank_) + ": MPI_Comm_create_group failed for processes " +
                            procs_str(procs));
      MPI_Group_free(&group);
      MPI_Group_free(&world_group);
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    }
    comms_.emplace(procs, comm);
    return comm;
  }

  // Polls `request` until done: yields while the partners are likely close (MPI progresses only inside MPI
  // calls), then sleeps with a growing backoff so a long stall burns no CPU; honours abort and deadline.
  // Another instance announced that its program failed: stop waiting for it (and for anyone).
  void check_peer_abort(const PollContext& poll) {
    if (peer_abort_.empty() && abort_request_ != MPI_REQUEST_NULL) {
      int arrived = 0;
      MPI_Status status;
      MPI_Test(&abort_request_, &arrived, &status);
      if (arrived) {
        int length = 0;
        MPI_Get_count(&status, MPI_CHAR, &length);
        peer_abort_.assign(abort_in_, static_cast<std::size_t>(std::max(length, 0)));
        if (peer_abort_.empty()) peer_abort_ = "instance " + std::to_string(status.MPI_SOURCE) + " failed";
      }
    }
    if (!peer_abort_.empty())
      throw AbortedError("process " + std::to_string(rank_) + " stopped at " +
                         (poll.what ? poll.what() : std::string("a collective")) + " because " + peer_abort_);
  }

  // After a wait was abandoned (timeout, abort), MPI may still complete that operation into memory its
  // caller has released, and the communicator's collectives are out of step: refuse further use.
  void check_usable(const PollContext& poll) const {
    if (broken_)
      throw AbortedError("process " + std::to_string(rank_) + ": the transport is unusable after an abandoned " +
                         "collective; cannot run " + (poll.what ? poll.what() : std::string("a collective")));
  }

  void wait(MPI_Request& request, const std::vector<int>& procs, const PollContext& poll) {
    struct Abandon {  // set unless the wait completes
      bool& broken;
      bool done = false;
      ~Abandon() {
        if (!done) broken = true;
      }
    } abandon{broken_};
    check_peer_abort(poll);
    const Clock::time_point start = Clock::now();
    auto sleep_for = std::chrono::microseconds(20);
    for (long iteration = 0;; ++iteration) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", poll);
      if (done) {
        abandon.done = true;
        return;
      }
      if ((iteration & 63) == 0) {
        check_peer_abort(poll);
        if (poll.aborted && poll.aborted())
          throw AbortedError("process " + std::to_string(rank_) + " stopped waiting for processes " + procs_str(procs) +
                             " at " + (poll.what ? poll.what() : std::string("a collective")) + ": the execution was aborted");
        const double waited = std::chrono::duration<double>(Clock::now() - start).count();
        if (poll.timeout_s > 0 && waited >= poll.timeout_s)
          throw TimeoutError("process " + std::to_string(rank_) + " (" + host_ + ", pid " + std::to_string(getpid()) +
                             ") timed out after " + std::to_string(poll.timeout_s) +
                             " s (WEFT_COLLECTIVE_TIMEOUT) waiting for processes " + procs_str(procs) + " at " +
                             (poll.what ? poll.what() : std::string("a collective")));
        // Large transfers progress only while we call MPI_Test, so keep polling (yielding the core) for a
        // second; only a partner that is really late makes us back off to sleeping.
        if (waited > 1.0) {
          std::this_thread::sleep_for(sleep_for);
          if (sleep_for < std::chrono::milliseconds(1)) sleep_for *= 2;
          continue;
        }
      }
      sched_yield();
    }
  }

  static constexpr int kRingTag = 7;
  static constexpr int kAbortTag = 99;
  static constexpr int kHandshakeTag = 98;
  MPI_Comm world_;
  MPI_Comm abort_comm_;
  MPI_Request abort_request_ = MPI_REQUEST_NULL;
  char abort_in_[1024] = {};
  std::string abort_out_;
  std::vector<MPI_Request> abort_sends_;
  std::string peer_abort_;  // what another instance announced, once it did
  bool broken_ = false;     // a wait was abandoned
  std::atomic<bool> failed_{false};
  int rank_ = 0, size_ = 1;
  std::string host_;
  std::map<std::vector<int>, MPI_Comm> comms_;
};

}  // namespace

Interprocess* Interprocess::job() {
  static std::once_flag once;
  static std::unique_ptr<Interprocess> instance;
  static std::string failure;
  std::call_once(once, [] {
    const bool launched = env_int_above_one("WEFT_NUM_INSTANCES") || env_int_above_one("OMPI_COMM_WORLD_SIZE") ||
                          env_int_above_one("PMI_SIZE") || env_int_above_one("PMIX_SIZE");
    if (!launched) return;
    if (env_int_above_one("WEFT_NUM_INSTANCES") && !std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMI_SIZE") &&
        !std::getenv("PMIX_RANK")) {
      failure = std::string("WEFT_NUM_INSTANCES=") + std::getenv("WEFT_NUM_INSTANCES") +
                " but this process was not started by weftrun or mpirun: start it with weftrun --num-instances N";
      return;
    }
    try {
      instance = std::make_unique<MpiInterprocess>();
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw InvalidArgument(failure);
  return instance.get();
}

}  // namespace weft::transport
