// The MPI transport: the only place that includes <mpi.h>.
// The deprecated MPI C++ bindings are not used; keep <mpi.h> to the C API.
//
// Every MPI call is made under one mutex: the caller serializes collectives (one at a time per process),
// but a failing replica's thread may announce the failure (mark_failed) while another thread polls a
// collective, and MPI_THREAD_SERIALIZED allows no two calls at once.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/launcher_protocol.hpp"
#include "core/record_files.hpp"
#include "core/log.hpp"
#include "transport/interprocess.hpp"
#include "transport/reports.hpp"
#include "transport/wait_queue.hpp"
#include "weft/error.hpp"

namespace weft::transport {
namespace {

using Clock = std::chrono::steady_clock;

// A waiting process tells the others it is there once it has waited this long (cheap: never on a fast path).
constexpr double kAnnounceAfter = 0.1;
// A member that left may still have completed its part (its messages in flight): poll this long more.
constexpr double kDepartureGrace = 1.0;
// A timed-out wait gives the missing processes this long (at most half the timeout) to announce their own
// failure: theirs names the replica that is stuck, ours only the process.
constexpr double kTimeoutGrace = 1.0;
// A departed process that learns another failed waits this long for that one to end the job, then ends it.
constexpr double kAbortGrace = 2.0;

std::string key_of(const std::vector<int>& procs) {
  std::string s;
  for (int p : procs) {
    if (!s.empty()) s += ',';
    s += std::to_string(p);
  }
  return s;
}

long long unix_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// A record for the launcher in $WEFT_JOB_DIR (docs/weftrun.md): instance-<rank><suffix>.
void job_record(int rank, const char* suffix, const std::string& text) {
  const std::string& dir = launcher::launch_environment().job_dir;
  if (dir.empty()) return;
  const std::string path = launcher::record_path(dir, rank, suffix);
  launcher::append_record(path, text);  // O_APPEND|O_NOFOLLOW (core/record_files.hpp)
}

// At static destruction the logger may be gone: one raw write.
void say_error(const std::string& line) {
  const std::string text = std::string(launcher::kErrorPrefix) + line + "\n";
  [[maybe_unused]] ssize_t written = ::write(2, text.data(), text.size());
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
    // Who is who, for messages naming another process: every process's pid and host (start-up is
    // collective anyway: MPI_Init waits for everyone).
    struct Identity {
      int pid;
      char host[64];
    } mine{static_cast<int>(getpid()), {}}, none{};
    std::snprintf(mine.host, sizeof mine.host, "%s", host_.c_str());
    std::vector<Identity> all(static_cast<std::size_t>(size_), none);
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, world_);
    for (const Identity& id : all) identities_.emplace_back(id.pid, std::string(id.host, strnlen(id.host, sizeof id.host)));
    departed_.assign(static_cast<std::size_t>(size_), 0);
    // The side channel (failures, arrivals, departures): a receive from anyone, tested whenever we poll.
    MPI_Comm_dup(world_, &side_comm_);
    MPI_Comm_set_errhandler(side_comm_, MPI_ERRORS_RETURN);
    post_side_receive();
  }

  ~MpiInterprocess() override {
    std::unique_lock lock(mpi_);
    poll_side();
    // MPI_Finalize would wait for instances that may be blocked on us inside a collective.
    if (failed_) {
      let_others_finish(lock);
      MPI_Abort(world_, 1);
      return;
    }
    if (!peer_abort_.empty() || !depart(lock)) {
      MPI_Abort(world_, 1);
      return;
    }
    MPI_Cancel(&side_request_);
    MPI_Wait(&side_request_, MPI_STATUS_IGNORE);
    MPI_Comm_free(&side_comm_);
    // Collective over each window's processes, which all made it and have all ended (depart above).
    for (auto& [procs, window] : windows_) {
      free_window(window);
      if (window.comm != MPI_COMM_NULL) MPI_Comm_free(&window.comm);
    }
    for (auto& [procs, comm] : comms_)
      if (comm != world_) MPI_Comm_free(&comm);
    MPI_Comm_free(&world_);
    MPI_Finalize();
  }

  bool peer_failed() const override {
    std::lock_guard lock(mpi_);
    return !peer_abort_.empty();
  }

  void mark_failed(const std::string& cause) override {
    if (failed_.exchange(true)) return;
    std::lock_guard lock(mpi_);
    const std::string text = cause.substr(0, kSideMessage - 1);
    for (int p = 0; p < size_; ++p)
      if (p != rank_) send_side(p, kAbortTag, text);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string host() const override { return host_; }

  bool can_reduce(DType dtype, ReduceOp op) const override {
    // MPI_MAX / MPI_MIN drop NaNs depending on the operand order; ours propagate them like XLA, so floating
    // max and min take the exchange path and our kernels.
    if (is_floating(dtype) && (op == ReduceOp::max || op == ReduceOp::min)) return false;
    return datatype(dtype) != MPI_DATATYPE_NULL && is_elementwise(op);
  }

  void allreduce(const std::vector<int>& procs, void* data, std::int64_t count, DType dtype, ReduceOp op,
                 const PollContext& poll) override {
    const std::uint64_t n = begin_op(procs, poll);
    MPI_Comm comm = comm_for(procs, poll, n);
    MPI_Request request;
    {
      std::lock_guard lock(mpi_);
      check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), datatype(dtype), mpi_op(op), comm, &request),
            "MPI_Iallreduce", poll);
    }
    wait(request, procs, poll, n);
  }

  void sendrecv(const std::vector<int>& procs, int to, const void* send, std::size_t send_bytes, int from, void* recv,
                std::size_t recv_bytes, const PollContext& poll) override {
    if (send_bytes > static_cast<std::size_t>(INT_MAX) || recv_bytes > static_cast<std::size_t>(INT_MAX))
      throw InvalidArgument("process " + std::to_string(rank_) + ": a message of more than 2 GiB at " +
                            (poll.what ? poll.what() : std::string("a collective")));
    const std::uint64_t n = begin_op(procs, poll);
    MPI_Comm comm = comm_for(procs, poll, n);
    MPI_Request requests[2];
    {
      std::lock_guard lock(mpi_);
      check(MPI_Irecv(recv, static_cast<int>(recv_bytes), MPI_BYTE, from, kRingTag, comm, &requests[0]), "MPI_Irecv", poll);
      check(MPI_Isend(send, static_cast<int>(send_bytes), MPI_BYTE, to, kRingTag, comm, &requests[1]), "MPI_Isend", poll);
    }
    wait(requests[0], procs, poll, n);
    wait(requests[1], procs, poll, n);
  }

  std::vector<std::byte*> shared_regions(const std::vector<int>& procs, std::size_t bytes,
                                         const PollContext& poll) override {
    auto it = windows_.find(procs);
    if (it != windows_.end() && (it->second.regions.empty() || it->second.bytes >= bytes)) return it->second.regions;
    // Every member asks in the same round (the callers run the same plan), so they meet here; a polled
    // handshake first makes sure they all got here, so that an absent member ends in a timeout or abort, not
    // a hang in the blocking calls below.
    const std::uint64_t n = begin_op(procs, poll);
    MPI_Comm comm = comm_for(procs, poll, n);
    handshake(procs, poll, n);
    std::lock_guard lock(mpi_);
    SharedWindow window;
    if (it != windows_.end()) {
      window = std::move(it->second);
      windows_.erase(it);
      free_window(window);  // too small: every member makes a larger one
    } else {
      // Processes on one host (MPI's shared-memory split) share memory; hosts alike in name may not.
      int members = 0;
      MPI_Comm node = MPI_COMM_NULL;
      if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        throw PeerLostError(process_name(rank_) + ": MPI_Comm_split_type failed for processes " + list_str(procs));
      MPI_Comm_size(node, &members);
      if (members != static_cast<int>(procs.size())) {
        MPI_Comm_free(&node);
        windows_.emplace(procs, SharedWindow{});  // not all on one host: never shared
        return {};
      }
      MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
      window.comm = node;
    }
    // One window of `bytes` per member, with its members' segments contiguous (MPI's default); each
    // member's base from MPI_Win_shared_query. A passive epoch stays open for the window's life.
    const std::size_t size = (bytes + 63) / 64 * 64;
    void* base = nullptr;
    if (MPI_Win_allocate_shared(static_cast<MPI_Aint>(size), 1, MPI_INFO_NULL, window.comm, &base, &window.window) !=
        MPI_SUCCESS)
      throw PeerLostError(process_name(rank_) + ": MPI_Win_allocate_shared of " + std::to_string(size) +
                          " bytes failed for processes " + list_str(procs));
    MPI_Win_lock_all(MPI_MODE_NOCHECK, window.window);
    for (int i = 0; i < static_cast<int>(procs.size()); ++i) {
      MPI_Aint got = 0;
      int unit = 0;
      void* region = nullptr;
      MPI_Win_shared_query(window.window, i, &got, &unit, &region);
      window.regions.push_back(static_cast<std::byte*>(region));
    }
    window.bytes = size;
    return windows_.emplace(procs, std::move(window)).first->second.regions;
  }

  void allgatherv(const std::vector<int>& procs, const void* send, const std::vector<std::size_t>& bytes, void* recv,
                  const PollContext& poll) override {
    std::size_t total = 0;
    for (std::size_t b : bytes) total += b;
    if (total > static_cast<std::size_t>(INT_MAX))
      throw InvalidArgument("process " + std::to_string(rank_) + ": exchanging " + std::to_string(total) +
                            " bytes at " + (poll.what ? poll.what() : std::string("a collective")) +
                            " exceeds the 2 GiB an MPI count can address; split the data");
    const std::uint64_t n = begin_op(procs, poll);
    MPI_Comm comm = comm_for(procs, poll, n);
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
    {
      std::lock_guard lock(mpi_);
      check(MPI_Iallgatherv(send, counts[me], MPI_BYTE, recv, counts.data(), displs.data(), MPI_BYTE, comm, &request),
            "MPI_Iallgatherv", poll);
    }
    wait(request, procs, poll, n);
  }

  bool agree(const std::vector<int>& procs, std::uint64_t fingerprint, const PollContext& poll) override {
    // max(f) == -max(-f) exactly when every process passed the same value.
    std::int64_t values[2] = {static_cast<std::int64_t>(fingerprint >> 1), -static_cast<std::int64_t>(fingerprint >> 1)};
    const std::uint64_t n = begin_op(procs, poll);
    MPI_Comm comm = comm_for(procs, poll, n);
    MPI_Request request;
    {
      std::lock_guard lock(mpi_);
      check(MPI_Iallreduce(MPI_IN_PLACE, values, 2, MPI_INT64_T, MPI_MAX, comm, &request), "MPI_Iallreduce", poll);
    }
    wait(request, procs, poll, n);
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
      default: break;
    }
    return MPI_SUM;
  }

  // "process 1 (pid 4242 on vm)"
  std::string process_name(int p) const {
    const auto& [pid, host] = identities_[static_cast<std::size_t>(p)];
    return "process " + std::to_string(p) + " (pid " + std::to_string(pid) + " on " + host + ")";
  }

  // "process 1 (pid 4242 on vm)" or "processes [1, 2]"
  std::string processes_name(const std::vector<int>& procs) const {
    return procs.size() == 1 ? process_name(procs[0]) : "processes " + list_str(procs);
  }

  void check(int code, const char* call, const PollContext& poll) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(code, text, &len);
    throw PeerLostError(process_name(rank_) + ": " + call + " failed during " + what_of(poll) + ": " +
                        std::string(text, len));
  }

  // Every operation on a process set is numbered; the members issue the same operations on it in the same
  // order (the caller's contract), so (set, number) names one collective on every member.
  std::uint64_t begin_op(const std::vector<int>& procs, const PollContext& poll) {
    check_usable(poll);
    return ++ops_[procs];
  }

  // ---- the side channel ----------------------------------------------------------------------------------

  void post_side_receive() {
    MPI_Irecv(side_in_, sizeof side_in_, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG, side_comm_, &side_request_);
  }

  void send_side(int to, int tag, const std::string& text) {
    side_sends_.emplace_back();
    SideSend& s = side_sends_.back();
    s.text = text;
    MPI_Isend(s.text.data(), static_cast<int>(s.text.size()), MPI_CHAR, to, tag, side_comm_, &s.request);
  }

  // Takes in what the others said; completes our own messages. Caller holds mpi_.
  void poll_side() {
    for (;;) {
      int arrived = 0;
      MPI_Status status;
      if (MPI_Test(&side_request_, &arrived, &status) != MPI_SUCCESS || !arrived) break;
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      const std::string text(side_in_, static_cast<std::size_t>(std::max(length, 0)));
      const int from = status.MPI_SOURCE;
      if (status.MPI_TAG == kAbortTag) {
        if (peer_abort_.empty()) peer_abort_ = text.empty() ? "instance " + std::to_string(from) + " failed" : text;
      } else if (status.MPI_TAG == kDepartTag) {
        if (from >= 0 && from < size_) departed_[static_cast<std::size_t>(from)] = 1;
      } else if (status.MPI_TAG == kArriveTag) {
        // "<operation number> <process set>"
        const std::size_t space = text.find(' ');
        if (space != std::string::npos) {
          const std::uint64_t n = std::strtoull(text.c_str(), nullptr, 10);
          std::uint64_t& seen = arrivals_[{from, text.substr(space + 1)}];
          seen = std::max(seen, n);
        }
      }
      post_side_receive();
    }
    while (!side_sends_.empty()) {
      int done = 0;
      MPI_Test(&side_sends_.front().request, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      side_sends_.pop_front();
    }
  }

  // Another instance announced that its program failed: stop waiting for it (and for anyone).
  void check_peer_abort(const PollContext& poll) const {
    if (!peer_abort_.empty())
      throw AbortedError("process " + std::to_string(rank_) + " stopped at " + what_of(poll) + " because " + peer_abort_);
  }

  // ---- reports -------------------------------------------------------------------------------------------

  // Members of `procs` that have not said they wait at (or passed) operation n on it; never this process.
  std::vector<int> missing_at(const std::vector<int>& procs, std::uint64_t n) const {
    const std::string key = key_of(procs);
    std::vector<int> missing;
    for (int p : procs) {
      if (p == rank_) continue;
      const auto it = arrivals_.find({p, key});
      if (it == arrivals_.end() || it->second < n) missing.push_back(p);
    }
    return missing;
  }

  std::string stall_report(const std::vector<int>& procs, const std::vector<int>& missing, const PollContext& poll) const {
    return transport::stall_report(procs, missing, poll, [this](int p) { return process_name(p); });
  }

  std::string replicas_note(int p, const PollContext& poll) const {
    if (!poll.replicas_of) return "";
    const std::vector<int> ids = poll.replicas_of(p);
    return ids.size() == 1 ? ", replica " + std::to_string(ids[0]) + "," : ", replicas " + list_str(ids) + ",";
  }

  // ---- waiting -------------------------------------------------------------------------------------------

  // After a wait was abandoned (timeout, abort), MPI may still complete that operation into memory its
  // caller has released, and the communicator's collectives are out of step: refuse further use.
  void check_usable(const PollContext& poll) const {
    if (broken_)
      throw AbortedError("process " + std::to_string(rank_) + ": the transport is unusable after an abandoned " +
                         "collective; cannot run " + what_of(poll));
  }

  // Communicators per process set, made lazily: MPI_Comm_create_group is collective over the set only.
  void handshake(const std::vector<int>& procs, const PollContext& poll, std::uint64_t n) {
    char out = 0;
    std::vector<char> in(procs.size());
    std::vector<MPI_Request> requests;
    {
      std::lock_guard lock(mpi_);
      for (std::size_t i = 0; i < procs.size(); ++i) {
        if (procs[i] == rank_) continue;
        requests.emplace_back();
        MPI_Irecv(&in[i], 1, MPI_CHAR, procs[i], kHandshakeTag, world_, &requests.back());
        requests.emplace_back();
        MPI_Isend(&out, 1, MPI_CHAR, procs[i], kHandshakeTag, world_, &requests.back());
      }
    }
    for (MPI_Request& r : requests) wait(r, procs, poll, n);
  }

  struct SharedWindow {
    MPI_Comm comm = MPI_COMM_NULL;  // the members, split by MPI_COMM_TYPE_SHARED (null: not on one host)
    MPI_Win window = MPI_WIN_NULL;
    std::vector<std::byte*> regions;  // per member; empty: the members do not share memory
    std::size_t bytes = 0;            // each region's size
  };
  static void free_window(SharedWindow& w) {
    if (w.window != MPI_WIN_NULL) {
      MPI_Win_unlock_all(w.window);
      MPI_Win_free(&w.window);
    }
    w.regions.clear();
  }

  MPI_Comm comm_for(const std::vector<int>& procs, const PollContext& poll, std::uint64_t n) {
    auto it = comms_.find(procs);
    if (it != comms_.end()) return it->second;
    MPI_Comm comm;
    if (static_cast<int>(procs.size()) == size_) {
      comm = world_;
    } else {
      // MPI_Comm_create_group blocks until every member calls it; a polled handshake first makes sure they
      // all got here, so an absent member ends in a timeout or abort, not a hang.
      handshake(procs, poll, n);
      std::lock_guard lock(mpi_);
      MPI_Group world_group, group;
      MPI_Comm_group(world_, &world_group);
      MPI_Group_incl(world_group, static_cast<int>(procs.size()), procs.data(), &group);
      int tag = 0;
      for (int p : procs) tag = (tag * 31 + p + 1) & 0x7fff;
      if (MPI_Comm_create_group(world_, group, tag, &comm) != MPI_SUCCESS)
        throw PeerLostError(process_name(rank_) + ": MPI_Comm_create_group failed for processes " + list_str(procs));
      MPI_Group_free(&group);
      MPI_Group_free(&world_group);
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    }
    comms_.emplace(procs, comm);
    return comm;
  }

  // Polls `request` (operation n on `procs`) until done: yields while the partners are likely close (MPI
  // progresses only inside MPI calls), then sleeps with a growing backoff so a long stall burns no CPU.
  // Honours abort, departure, warning and deadline, each reported naming the processes concerned.
  void wait(MPI_Request& request, const std::vector<int>& procs, const PollContext& poll, std::uint64_t n) {
    const ScopedInterprocessWait counted;
    struct Abandon {  // set unless the wait completes
      bool& broken;
      bool done = false;
      ~Abandon() {
        if (!done) broken = true;
      }
    } abandon{broken_};
    {
      std::lock_guard lock(mpi_);
      exit_timeout_ = poll.timeout_s;
      poll_side();
      check_peer_abort(poll);
    }
    const Clock::time_point start = Clock::now();
    auto sleep_for = std::chrono::microseconds(20);
    bool announced = false, warned = false;
    std::optional<Clock::time_point> departure_seen;
    const double grace = std::min(kTimeoutGrace, poll.timeout_s / 2);
    for (long iteration = 0;; ++iteration) {
      const bool look_around = (iteration & 63) == 0;
      {
        std::lock_guard lock(mpi_);
        int done = 0;
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", poll);
        if (done) {
          abandon.done = true;
          return;
        }
        if (look_around) {
          poll_side();
          check_peer_abort(poll);
        }
      }
      if (!look_around) {
        sched_yield();
        continue;
      }
      if (poll.aborted && poll.aborted())
        throw AbortedError("process " + std::to_string(rank_) + " stopped waiting for " +
                           processes_name(others(procs)) + " at " + what_of(poll) + ": the execution was aborted");
      const Clock::time_point now = Clock::now();
      const double waited = std::chrono::duration<double>(now - start).count();
      {
        std::lock_guard lock(mpi_);
        if (!announced && waited >= kAnnounceAfter) {
          announced = true;
          const std::string text = std::to_string(n) + " " + key_of(procs);
          for (int p : procs)
            if (p != rank_) send_side(p, kArriveTag, text);
        }
        // A member whose program ended will not come: fail once its messages in flight had time to land.
        int gone = -1;
        for (int p : procs)
          if (p != rank_ && departed_[static_cast<std::size_t>(p)]) {
            gone = p;
            break;
          }
        if (gone >= 0) {
          if (!departure_seen) departure_seen = now;
          if (std::chrono::duration<double>(now - *departure_seen).count() >= kDepartureGrace) {
            job_record(rank_, launcher::kBlame, "departed " + std::to_string(gone) + "\n");
            throw PeerLostError(process_name(gone) + replicas_note(gone, poll) +
                                " left the job (its program ended: it returned from main or called exit) while " +
                                process_name(rank_) + " waits for it at " + what_of(poll));
          }
        }
        if (poll.warn_s > 0 && !warned && waited >= poll.warn_s) {
          warned = true;
          const std::vector<int> missing = missing_at(procs, n);
          if (!missing.empty())
            log(LogLevel::warn, process_name(rank_) + " stalled for " + seconds_str(poll.warn_s) +
                                    " (WEFT_COLLECTIVE_WARN) at " + what_of(poll) + " waiting for " +
                                    processes_name(missing) + "; " + stall_report(procs, missing, poll));
        }
        if (poll.timeout_s > 0 && poll.timeout_s <= 1e9 && waited >= poll.timeout_s + grace) {
          std::vector<int> missing = missing_at(procs, n);
          if (missing.empty()) missing = others(procs);  // every one says it is here: the wait itself is stuck
          std::string blame;
          for (int p : missing) blame += "missing " + std::to_string(p) + "\n";
          job_record(rank_, launcher::kBlame, blame);
          throw TimeoutError(process_name(rank_) + " timed out after " + seconds_str(poll.timeout_s) +
                             " (WEFT_COLLECTIVE_TIMEOUT) at " + what_of(poll) + " waiting for " +
                             processes_name(missing) + "; " + stall_report(procs, missing, poll));
        }
      }
      // Large transfers progress only while we call MPI_Test, so keep polling (yielding the core) for a
      // second; only a partner that is really late makes us back off to sleeping.
      if (waited > 1.0) {
        std::this_thread::sleep_for(sleep_for);
        if (sleep_for < std::chrono::milliseconds(1)) sleep_for *= 2;
      } else {
        sched_yield();
      }
    }
  }

  std::vector<int> others(const std::vector<int>& procs) const {
    std::vector<int> out;
    for (int p : procs)
      if (p != rank_) out.push_back(p);
    return out;
  }

  // ---- the end -------------------------------------------------------------------------------------------

  // This process failed and its exit ends the job (MPI_Abort, or mpirun on a non-zero exit), which kills
  // the others wherever they are. They learned of the failure at once (mark_failed) and are ending their
  // own programs, writing what they report on the way (their replicas' errors, WEFT_DUMP's flight
  // records): say that this program ended, and wait for theirs to end too, at most kAbortGrace (a process
  // stuck in user code does not hold the job). Caller holds mpi_ through `lock`.
  void let_others_finish(std::unique_lock<std::mutex>& lock) {
    if (size_ <= 1) return;
    for (int p = 0; p < size_; ++p)
      if (p != rank_) send_side(p, kDepartTag, "");
    const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(kAbortGrace));
    while (Clock::now() < until) {
      poll_side();
      bool all_ended = true;
      for (int p = 0; p < size_; ++p)
        if (p != rank_ && !departed_[static_cast<std::size_t>(p)]) all_ended = false;
      if (all_ended) return;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      lock.lock();
    }
  }

  // This process's program ended: tell the others, so a collective that needs it fails naming it instead
  // of waiting for it, and wait until every other process has ended too: only then is MPI_Finalize (which
  // waits for every process) bounded. False: end the job instead (another process failed, or did not end
  // within the collective timeout). Caller holds mpi_ through `lock`.
  bool depart(std::unique_lock<std::mutex>& lock) {
    if (size_ <= 1) return true;
    job_record(rank_, launcher::kDeparted, std::to_string(unix_ns()) + "\n");
    for (int p = 0; p < size_; ++p)
      if (p != rank_) send_side(p, kDepartTag, "");
    const Clock::time_point start = Clock::now();
    std::optional<Clock::time_point> failure_seen;
    for (;;) {
      poll_side();
      const Clock::time_point now = Clock::now();
      if (!peer_abort_.empty()) {
        // Another process failed (perhaps because we left while it waited for us): its exit aborts the job.
        // Should it linger, we end the job ourselves.
        if (!failure_seen) failure_seen = now;
        if (std::chrono::duration<double>(now - *failure_seen).count() >= kAbortGrace) return false;
      } else {
        std::vector<int> running;
        for (int p = 0; p < size_; ++p)
          if (p != rank_ && !departed_[static_cast<std::size_t>(p)]) running.push_back(p);
        if (running.empty()) break;
        const double waited = std::chrono::duration<double>(now - start).count();
        if (exit_timeout_ > 0 && exit_timeout_ <= 1e9 && waited >= exit_timeout_) {
          std::string blame;
          for (int p : running) blame += "unfinished " + std::to_string(p) + "\n";
          job_record(rank_, launcher::kBlame, blame);
          const std::string line = "instance " + std::to_string(rank_) + ": its program ended, but " +
                                   processes_name(running) + " did not end within " + seconds_str(exit_timeout_) +
                                   " (WEFT_COLLECTIVE_TIMEOUT); ending the job";
          job_record(rank_, launcher::kError, line + "\n");
          say_error(line);
          return false;
        }
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      lock.lock();
    }
    // Everyone has ended and taken in our message (they waited for it): our sends complete at once.
    const Clock::time_point until = Clock::now() + std::chrono::seconds(2);
    while (!side_sends_.empty() && Clock::now() < until) {
      poll_side();
      sched_yield();
    }
    return true;
  }

  static constexpr int kRingTag = 7;
  static constexpr int kAbortTag = 99;
  static constexpr int kDepartTag = 97;
  static constexpr int kArriveTag = 96;
  static constexpr int kHandshakeTag = 98;
  static constexpr std::size_t kSideMessage = 1024;

  struct SideSend {
    std::string text;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  mutable std::mutex mpi_;  // every MPI call, and the state the side channel fills
  MPI_Comm world_;
  MPI_Comm side_comm_;
  MPI_Request side_request_ = MPI_REQUEST_NULL;
  char side_in_[kSideMessage] = {};
  std::deque<SideSend> side_sends_;  // in flight (a deque: their buffers must not move)
  std::string peer_abort_;           // what another instance announced, once it did
  std::vector<char> departed_;       // per process: its program ended
  std::map<std::pair<int, std::string>, std::uint64_t> arrivals_;  // (process, set) -> operation it waits at
  std::vector<std::pair<int, std::string>> identities_;             // per process: pid, host
  std::map<std::vector<int>, std::uint64_t> ops_;                   // operations issued per process set
  double exit_timeout_ = 300;        // the last collective timeout a wait used: also the bound at exit
  bool broken_ = false;              // a wait was abandoned
  std::atomic<bool> failed_{false};
  int rank_ = 0, size_ = 1;
  std::string host_;
  std::map<std::vector<int>, MPI_Comm> comms_;
  std::map<std::vector<int>, SharedWindow> windows_;  // shared_regions, per process set
};

}  // namespace

Interprocess* Interprocess::job() {
  static std::once_flag once;
  static std::unique_ptr<Interprocess> instance;
  static std::string failure;
  std::call_once(once, [] {
    const launcher::LaunchEnvironment& launch = launcher::launch_environment();
    if (!launch.several_instances()) return;
    if (!launch.mpi_launched) {
      failure = std::string(launcher::kNumInstancesVariable) + "=" + launch.num_instances +
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
