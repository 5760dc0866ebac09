// The in-process rendezvous: the place where the N replicas of one execution (a pmap call, a session run)
// meet at every collective, XLA-style. SPMD programs issue the same collectives in the same order on every
// replica, so one execution-wide meeting point per collective sequence number suffices; the groups of a
// collective partition the replicas and the data movement happens within groups.
//
// Guarantees (docs/reliability.md): every wait has a deadline (warn, then fail); the first failure poisons
// the execution and ends every pending wait with the root cause; a replica that returned from its function
// while others wait for it is named; waits block (futex via condition variable) after a short yield phase,
// so more replicas than cores burn no CPU; a replica running as a fiber suspends instead (wait_queue.hpp).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <optional>
#include <vector>

#include "core/error_kind.hpp"
#include "transport/wait_queue.hpp"

namespace weft::transport {

struct Deadlines {
  double warn_s = 30;     // a stall warning naming who is missing; 0 = never
  double timeout_s = 300; // then a TimeoutError; 0 = never
};

// `start` + `seconds`, where 0 (and anything past ~30 years, which would overflow the clock) means never.
std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point start, double seconds);
// "2 s", "0.5 s": a duration as the messages print it.
std::string seconds_str(double seconds);

// What a participant is doing at a rendezvous, for diagnostics ("psum(float32[3]) at a.cc:10").
using Describe = std::function<std::string()>;

class Rendezvous {
 public:
  // `participant_name(i)` names participant i in messages ("replica 3 (CpuDevice(id=3, process=0))");
  // `participant_ids[i]`, its id in "arrived: [...]; missing: [...]" lists (the global replica index: in a
  // job of several processes the participants are this process's replicas); default: i.
  Rendezvous(int participants, Deadlines deadlines, std::string execution_name,
             std::function<std::string(int)> participant_name, std::vector<int> participant_ids = {});

  int participants() const { return n_; }

  // Called once all payloads of a round are posted, by the last participant to arrive. Returns the round's
  // shared result (a plan), or throws to fail the round for everyone (e.g. a mismatch).
  using Complete = std::function<std::shared_ptr<void>(std::span<const void* const> payloads)>;

  // Posts `payload` as participant `rank`'s contribution to its next round and waits until every
  // participant has posted. Returns the plan made by `complete`. The payloads stay readable by all until
  // every participant has called finish() for this round (or the next round starts, if finish is unused).
  std::shared_ptr<void> arrive(int rank, const void* payload, const Complete& complete, const Describe& what);

  // Second barrier of a round whose work is split among participants: returns once all have finished
  // their part, so inputs and outputs may be released.
  void finish(int rank, const Describe& what);

  // Participant `rank` failed with `cause`: every pending and future wait raises AbortedError naming it.
  // The first call wins; later ones are ignored. Returns true if this call was the first.
  bool abort(int rank, const std::string& cause);
  // Participant `rank` returned from its function: waits that need it raise PeerLostError naming it.
  void depart(int rank);

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  std::uint64_t completed_rounds(int rank) const;
  // The same, without the lock, for participant `rank`'s own thread only (it alone changes its count): the
  // sequence number of the collective it is entering, read by the flight recorder on every collective.
  std::uint64_t own_completed_rounds(int rank) const { return rounds_done_[rank]; }

 private:
  struct Slot {
    std::vector<const void*> payloads;
    std::shared_ptr<void> plan;
    // A failed round: every participant throws its own copy (exception objects never cross threads).
    std::optional<ErrorRecord> error;
  };
  enum class Phase { arrive, finish };
  void wait_for(std::unique_lock<std::mutex>& lock, int rank, Phase phase, std::uint64_t generation,
                const Describe& what);
  std::string missing_report(Phase phase) const;
  std::string aborted_message(int rank) const;  // "replica 1 (...) aborted because replica 3 (...) failed: ..."
  [[noreturn]] void throw_aborted(int rank) const;

  const int n_;
  const Deadlines deadlines_;
  const std::string execution_name_;
  const std::function<std::string(int)> participant_name_;
  const std::vector<int> participant_ids_;

  mutable std::mutex mutex_;
  WaitQueue cv_;  // a condition variable that fibers can wait on too (wait_queue.hpp)
  std::atomic<std::uint64_t> arrive_generation_{0};  // rounds fully gathered
  std::atomic<std::uint64_t> finish_generation_{0};  // rounds fully finished
  int arrived_ = 0;
  int finished_ = 0;
  std::vector<char> has_arrived_;   // for the gathering round
  std::vector<char> has_finished_;  // for the finishing round
  std::vector<std::uint64_t> rounds_done_;  // per participant: rounds completed
  std::vector<char> departed_;
  // Per participant: 1 + the round it arrived at and then left early (timed out, aborted, peer lost), else 0.
  // It did arrive: reports of that round must not count it as missing.
  std::vector<std::uint64_t> left_round_;
  // The report of the first timeout of round timeout_round_ - 1, which every later timeout of it repeats.
  std::uint64_t timeout_round_ = 0;
  std::string timeout_report_;
  Slot slots_[2];
  bool warned_ = false;
  bool completing_ = false;  // the last arriver is running `complete` on everyone's payloads
  std::atomic<bool> aborted_{false};
  int abort_rank_ = -1;
  std::string abort_cause_;
};

}  // namespace weft::transport
