// The in-process transport (what and why: inproc_interprocess.hpp). One mutex guards everything the
// endpoints share: the meeting slots of collectives (keyed by process set and operation number), the
// mailboxes of point-to-point messages (keyed by process set, sender and receiver) and the failures
// announced. Every change is made under it and notified on one WaitQueue, so a waiter re-checks its
// condition on each change and otherwise sleeps: waits never spin.
#include "transport/inproc/inproc_interprocess.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/log.hpp"
#include "array/member_reductions.hpp"
#include "transport/reports.hpp"
#include "transport/wait_queue.hpp"
#include "weft/error.hpp"

namespace weft::transport {

namespace {

// "process 1" or "processes [1, 2]"
std::string processes_name(const std::vector<int>& procs) {
  return procs.size() == 1 ? "process " + std::to_string(procs[0]) : "processes " + list_str(procs);
}

// One collective operation on a process set: every member leaves its contribution, and each reads all of
// them once every member has; the last reader removes the slot.
struct Meeting {
  std::vector<std::vector<std::byte>> parts;  // per position in the set
  std::vector<char> arrived;
  int count = 0;
  int readers_left = 0;
};

}  // namespace

class InprocEndpoint;

struct InprocJob::State {
  State(int n, std::string host_name) : size(n), host(std::move(host_name)) {}

  const int size;
  const std::string host;
  std::mutex mutex;
  WaitQueue changed;  // every deposit, message and failure
  std::map<std::pair<std::vector<int>, std::uint64_t>, Meeting> meetings;
  std::map<std::tuple<std::vector<int>, int, int>, std::deque<std::vector<std::byte>>> mailboxes;
  // shared_regions: per process set, one region per member (threads share memory, so every set does).
  std::map<std::vector<int>, std::vector<std::vector<std::byte>>> regions;
  std::vector<std::pair<int, std::string>> failures;  // (process, cause), in the order announced
  std::vector<std::unique_ptr<InprocEndpoint>> endpoints;
};

class InprocEndpoint final : public Interprocess {
 public:
  InprocEndpoint(InprocJob::State& state, int rank) : state_(state), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return state_.size; }
  std::string host() const override { return state_.host; }

  bool can_reduce(DType dtype, ReduceOp op) const override {
    // As the MPI transport answers, so that both take the same paths through the hierarchical algorithms.
    if (is_floating(dtype) && (op == ReduceOp::max || op == ReduceOp::min)) return false;
    switch (dtype) {
      case DType::f32:
      case DType::f64:
      case DType::i8:
      case DType::u8:
      case DType::i32:
      case DType::i64: return is_elementwise(op);
      default: return false;
    }
  }

  void allreduce(const std::vector<int>& procs, void* data, std::int64_t count, DType dtype, ReduceOp op,
                 const PollContext& poll) override {
    check_set(procs, "allreduce", poll);
    if (!can_reduce(dtype, op))
      throw InvalidArgument(name() + ": allreduce at " + what_of(poll) + ": the in-process transport does not reduce " +
                            std::string(dtype_name(dtype)) + " " + reduce_op_name(op) +
                            " (can_reduce is false: gather and reduce instead)");
    const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
    const std::vector<std::vector<std::byte>> parts = meet(procs, data, bytes, poll);
    for (std::size_t i = 0; i < parts.size(); ++i)
      if (parts[i].size() != bytes)
        throw InvalidArgument(name() + ": allreduce at " + what_of(poll) + ": process " + std::to_string(procs[i]) +
                              " reduces " + std::to_string(parts[i].size()) + " bytes, this one " +
                              std::to_string(bytes));
    // In process order on every member, so all get bitwise the same result.
    // The collectives' own kernels (array/member_reductions.hpp), as the MPI transport uses MPI's.
    std::vector<const std::byte*> inputs;
    for (const std::vector<std::byte>& part : parts) inputs.push_back(part.data());
    kernels::reduce_in_order(dtype, op, inputs, static_cast<std::byte*>(data), count);
  }

  void sendrecv(const std::vector<int>& procs, int to, const void* send, std::size_t send_bytes, int from, void* recv,
                std::size_t recv_bytes, const PollContext& poll) override {
    check_set(procs, "sendrecv", poll);
    const int n = static_cast<int>(procs.size());
    if (to < 0 || to >= n || from < 0 || from >= n)
      throw InvalidArgument(name() + ": sendrecv at " + what_of(poll) + ": peer index to=" + std::to_string(to) +
                            ", from=" + std::to_string(from) + " outside processes " + list_str(procs));
    const int source = procs[static_cast<std::size_t>(from)];
    std::unique_lock lock(state_.mutex);
    check_usable(poll);
    // Sends are buffered (MPI's eager protocol, for every size): the message waits in its mailbox.
    const auto* s = static_cast<const std::byte*>(send);
    state_.mailboxes[{procs, rank_, procs[static_cast<std::size_t>(to)]}].emplace_back(s, s + send_bytes);
    state_.changed.notify_all();
    auto& inbox = state_.mailboxes[{procs, source, rank_}];
    wait(lock, procs, [&] { return !inbox.empty(); }, [&] { return std::vector<int>{source}; }, poll);
    std::vector<std::byte> message = std::move(inbox.front());
    inbox.pop_front();
    lock.unlock();
    if (message.size() != recv_bytes)
      throw InvalidArgument(name() + ": sendrecv at " + what_of(poll) + ": process " + std::to_string(source) + " sent " +
                            std::to_string(message.size()) + " bytes where " + std::to_string(recv_bytes) +
                            " were expected (the processes disagree about the message sizes)");
    if (recv_bytes) std::memcpy(recv, message.data(), recv_bytes);
  }

  std::vector<std::byte*> shared_regions(const std::vector<int>& procs, std::size_t bytes,
                                         const PollContext& poll) override {
    check_set(procs, "shared_regions", poll);
    std::lock_guard lock(state_.mutex);
    check_usable(poll);
    // The first member to ask makes them (and makes them again, larger, for a larger size: the contract
    // allows that only between the rounds that use them). Each is over-allocated to align it to 64 bytes.
    std::vector<std::vector<std::byte>>& mine = state_.regions[procs];
    if (mine.empty() || mine[0].size() < bytes + 64) mine.assign(procs.size(), std::vector<std::byte>(bytes + 64));
    std::vector<std::byte*> out;
    for (std::vector<std::byte>& region : mine) {
      const auto at = reinterpret_cast<std::uintptr_t>(region.data());
      out.push_back(region.data() + ((64 - at % 64) % 64));
    }
    return out;
  }

  void allgatherv(const std::vector<int>& procs, const void* send, const std::vector<std::size_t>& bytes, void* recv,
                  const PollContext& poll) override {
    check_set(procs, "allgatherv", poll);
    if (bytes.size() != procs.size())
      throw InvalidArgument(name() + ": allgatherv at " + what_of(poll) + ": " + std::to_string(bytes.size()) +
                            " byte counts for " + std::to_string(procs.size()) + " processes");
    const std::size_t mine = bytes[position(procs)];
    const std::vector<std::vector<std::byte>> parts = meet(procs, send, mine, poll);
    auto* out = static_cast<std::byte*>(recv);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].size() != bytes[i])
        throw InvalidArgument(name() + ": allgatherv at " + what_of(poll) + ": process " + std::to_string(procs[i]) +
                              " sent " + std::to_string(parts[i].size()) + " bytes where " + std::to_string(bytes[i]) +
                              " were expected");
      if (!parts[i].empty()) std::memcpy(out, parts[i].data(), parts[i].size());
      out += parts[i].size();
    }
  }

  bool agree(const std::vector<int>& procs, std::uint64_t fingerprint, const PollContext& poll) override {
    check_set(procs, "agree", poll);
    const std::vector<std::vector<std::byte>> parts = meet(procs, &fingerprint, sizeof fingerprint, poll);
    for (const auto& part : parts)
      if (part.size() != sizeof fingerprint || std::memcmp(part.data(), &fingerprint, sizeof fingerprint) != 0)
        return false;
    return true;
  }

  void mark_failed(const std::string& cause) override {
    std::lock_guard lock(state_.mutex);
    for (const auto& [p, c] : state_.failures)
      if (p == rank_) return;  // the first cause stands
    state_.failures.emplace_back(rank_, cause.empty() ? "instance " + std::to_string(rank_) + " failed" : cause);
    state_.changed.notify_all();
  }

  bool peer_failed() const override {
    std::lock_guard lock(state_.mutex);
    return peer_failure() != nullptr;
  }

 private:
  std::string name() const { return "process " + std::to_string(rank_); }

  std::size_t position(const std::vector<int>& procs) const {
    return static_cast<std::size_t>(std::lower_bound(procs.begin(), procs.end(), rank_) - procs.begin());
  }

  // The caller's contract: a sorted set of this job's processes that includes this one.
  void check_set(const std::vector<int>& procs, const char* op, const PollContext& poll) const {
    const bool sorted = std::is_sorted(procs.begin(), procs.end()) &&
                        std::adjacent_find(procs.begin(), procs.end()) == procs.end();
    const bool in_range = !procs.empty() && procs.front() >= 0 && procs.back() < state_.size;
    if (!sorted || !in_range || !std::binary_search(procs.begin(), procs.end(), rank_))
      throw InvalidArgument(name() + ": " + op + " at " + what_of(poll) + " over processes " + list_str(procs) +
                            ": the set must be sorted, distinct, within [0, " + std::to_string(state_.size) +
                            ") and include this process");
  }

  // The first failure another process announced; caller holds the mutex.
  const std::string* peer_failure() const {
    for (const auto& [p, cause] : state_.failures)
      if (p != rank_) return &cause;
    return nullptr;
  }

  // After a wait was abandoned (timeout, abort) the operation counts of the sets are out of step with the
  // other members': refuse further use, as the MPI transport does. Caller holds the mutex.
  void check_usable(const PollContext& poll) const {
    if (broken_)
      throw AbortedError(name() + ": the transport is unusable after an abandoned collective; cannot run " +
                         what_of(poll));
  }

  // Leaves `bytes` of `data` as this process's part of the next operation on `procs` and returns every
  // member's part, in set order, once all have arrived.
  std::vector<std::vector<std::byte>> meet(const std::vector<int>& procs, const void* data, std::size_t bytes,
                                           const PollContext& poll) {
    std::unique_lock lock(state_.mutex);
    check_usable(poll);
    const std::uint64_t n = ++ops_[procs];
    const auto key = std::make_pair(procs, n);
    const std::size_t me = position(procs);
    Meeting& m = state_.meetings[key];  // map nodes are stable: other members' insertions keep it valid
    if (m.parts.empty()) {
      m.parts.resize(procs.size());
      m.arrived.assign(procs.size(), 0);
      m.readers_left = static_cast<int>(procs.size());
    }
    const auto* d = static_cast<const std::byte*>(data);
    m.parts[me].assign(d, d + bytes);
    m.arrived[me] = 1;
    ++m.count;
    state_.changed.notify_all();
    wait(lock, procs, [&] { return m.count == static_cast<int>(procs.size()); },
         [&] {
           std::vector<int> missing;
           for (std::size_t i = 0; i < procs.size(); ++i)
             if (!m.arrived[i]) missing.push_back(procs[i]);
           return missing;
         },
         poll);
    std::vector<std::vector<std::byte>> parts = m.parts;
    if (--m.readers_left == 0) state_.meetings.erase(key);
    return parts;
  }

  // Blocks (lock held on entry and return) until ready(); ends with AbortedError when another process
  // failed or poll.aborted() says so, with TimeoutError at the deadline naming missing(), and warns once at
  // poll.warn_s. An abandoned wait leaves this endpoint unusable.
  template <class Ready, class Missing>
  void wait(std::unique_lock<std::mutex>& lock, const std::vector<int>& procs, Ready ready, Missing missing,
            const PollContext& poll) {
    using std::chrono::duration;
    using std::chrono::duration_cast;
    const WaitClock::time_point start = WaitClock::now();
    auto after = [&](double s) {
      return s > 0 && s <= 1e9 ? start + duration_cast<WaitClock::duration>(duration<double>(s))
                               : WaitClock::time_point::max();
    };
    const WaitClock::time_point deadline = after(poll.timeout_s);
    WaitClock::time_point warn_at = after(poll.warn_s);
    // Nothing notifies a change of poll.aborted(): poll it, first often (an abort usually comes soon after
    // the failure that causes it), then every 20 ms.
    auto slice = std::chrono::milliseconds(1);
    for (;;) {
      if (const std::string* cause = peer_failure()) {
        broken_ = true;
        throw AbortedError(name() + " stopped at " + what_of(poll) + " because " + *cause);
      }
      if (ready()) return;
      const WaitClock::time_point now = WaitClock::now();
      if (now >= deadline) {
        broken_ = true;
        const std::vector<int> absent = missing();
        throw TimeoutError(name() + " timed out after " + seconds_str(poll.timeout_s) +
                           " (WEFT_COLLECTIVE_TIMEOUT) at " + what_of(poll) + " waiting for " +
                           processes_name(absent) + "; " + stall_report(procs, absent, poll));
      }
      if (now >= warn_at) {
        warn_at = WaitClock::time_point::max();
        const std::vector<int> absent = missing();
        log(LogLevel::warn, name() + " stalled for " + seconds_str(poll.warn_s) + " (WEFT_COLLECTIVE_WARN) at " +
                                what_of(poll) + " waiting for " + processes_name(absent) + "; " +
                                stall_report(procs, absent, poll));
      }
      WaitClock::time_point until = std::min(deadline, warn_at);
      if (poll.aborted) {
        // Called without our lock: it may take the caller's own locks.
        lock.unlock();
        const bool aborted = poll.aborted();
        lock.lock();
        if (aborted) {
          broken_ = true;
          std::vector<int> others;
          for (int p : procs)
            if (p != rank_) others.push_back(p);
          throw AbortedError(name() + " stopped waiting for " + processes_name(others) + " at " + what_of(poll) +
                             ": the execution was aborted");
        }
        if (ready() || peer_failure()) continue;
        until = std::min(until, WaitClock::now() + slice);
        slice = std::min(slice * 2, std::chrono::milliseconds(20));
      }
      state_.changed.wait_until(lock, until);
    }
  }

  std::string stall_report(const std::vector<int>& procs, const std::vector<int>& missing, const PollContext& poll) const {
    return transport::stall_report(procs, missing, poll, [](int p) { return "process " + std::to_string(p); });
  }

  InprocJob::State& state_;
  const int rank_;
  // Collectives issued per process set by this endpoint (its user serializes its calls): the members number
  // the same operations alike, which is how they meet in the same slot, as MPI matches collectives on a
  // communicator by their order.
  std::map<std::vector<int>, std::uint64_t> ops_;
  bool broken_ = false;  // under the job's mutex
};

InprocJob::InprocJob(int processes, std::string host) {
  if (processes < 1)
    throw InvalidArgument("InprocJob: a job needs at least 1 process, not " + std::to_string(processes));
  state_ = std::make_shared<State>(processes, std::move(host));
  for (int p = 0; p < processes; ++p) state_->endpoints.push_back(std::make_unique<InprocEndpoint>(*state_, p));
}

InprocJob::~InprocJob() = default;

int InprocJob::size() const { return state_->size; }

Interprocess& InprocJob::endpoint(int process) {
  if (process < 0 || process >= state_->size)
    throw InvalidArgument("InprocJob: no process " + std::to_string(process) + " in a job of " +
                          std::to_string(state_->size));
  return *state_->endpoints[static_cast<std::size_t>(process)];
}

}  // namespace weft::transport
