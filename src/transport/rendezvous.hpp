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
#include "transport/reports.hpp"  // seconds_str, for the rendezvous's users too
#include "transport/wait_queue.hpp"

namespace weft::transport {

struct Deadlines {
  double warn_s = 30;     // a stall warning naming who is missing; 0 = never
  double timeout_s = 300; // then a TimeoutError; 0 = never
};

// `start` + `seconds`, where 0 (and anything past ~30 years, which would overflow the clock) means never.
std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point start, double seconds);

// What a participant is doing at a rendezvous, for diagnostics ("psum(float32[3]) at a.cc:10").
using Describe = std::function<std::string()>;

// The round keeping of a rendezvous, whatever its participants post: arrival and finish counts, deadlines,
// abort and departure, and the reports that name who is missing. Rendezvous<Payload, Result> below adds the
// typed payloads and the round's result; this part is compiled once, in rendezvous.cc.
class RendezvousCore {
 public:
  // `participant_name(i)` names participant i in messages ("replica 3 (CpuDevice(id=3, process=0))");
  // `participant_ids[i]`, its id in "arrived: [...]; missing: [...]" lists (the global replica index: in a
  // job of several processes the participants are this process's replicas); default: i.
  RendezvousCore(int participants, Deadlines deadlines, std::string execution_name,
                 std::function<std::string(int)> participant_name, std::vector<int> participant_ids = {});
  virtual ~RendezvousCore() = default;
  RendezvousCore(const RendezvousCore&) = delete;
  RendezvousCore& operator=(const RendezvousCore&) = delete;

  int participants() const { return n_; }

  // Second barrier of a round whose work is split among participants: returns once all have finished
  // their part, so inputs and outputs may be released.
  void finish(int rank, const Describe& what);

  // Participant `rank` failed with `cause`: every pending and future wait raises AbortedError naming it.
  // The first call wins; later ones are ignored. Returns true if this call was the first.
  bool abort(int rank, const std::string& cause);
  // Participant `rank` returned from its function: waits that need it raise PeerLostError naming it.
  void depart(int rank);

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Why participants may be missing besides their own code, asked when a wait times out or warns (the
  // scheduler: a replica that holds the worker thread its partners share). Empty: nothing to add. Set before
  // any round.
  void set_absence_note(std::function<std::string()> note) { absence_note_ = std::move(note); }
  std::uint64_t completed_rounds(int rank) const;
  // The same, without the lock, for participant `rank`'s own thread only (it alone changes its count): the
  // sequence number of the collective it is entering, read by the flight recorder on every collective.
  std::uint64_t own_completed_rounds(int rank) const { return rounds_done_[rank]; }

 protected:
  // The arrival half of a round, for Rendezvous::arrive. `lock` holds mutex_ throughout, except while the last
  // arriver runs the round's completion. Returns the round's generation (its slot is generation % 2).
  std::uint64_t enter_round(std::unique_lock<std::mutex>& lock, int rank);
  bool first_of_round() const { return arrived_ == 1; }
  bool last_of_round() const { return arrived_ == n_; }
  // The last arriver, once the round's result is stored: releases every waiter of `generation`.
  void close_round(std::uint64_t generation);
  // Everyone else: waits until the last arriver closed the round (or a deadline, abort or departure ends the
  // wait with an error, after withdraw() took this participant's payload back).
  void wait_for_round(std::unique_lock<std::mutex>& lock, int rank, std::uint64_t generation, const Describe& what) {
    wait_for(lock, rank, Phase::arrive, generation, what);
  }
  void count_round(int rank) { ++rounds_done_[rank]; }
  // A participant leaving a round early takes its payload back, so a partner completing the round later never
  // reads an input about to be released. Called under the lock.
  virtual void withdraw(std::uint64_t generation, int rank) = 0;

  mutable std::mutex mutex_;
  bool completing_ = false;  // the last arriver is running the completion on everyone's payloads
  // A failed round: every participant throws its own copy (exception objects never cross threads).
  std::optional<ErrorRecord> errors_[2];

 private:
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
  std::function<std::string()> absence_note_;

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
  std::string timeout_note_;  // the absence note at that timeout
  bool warned_ = false;
  std::atomic<bool> aborted_{false};
  int abort_rank_ = -1;
  std::string abort_cause_;
};

// A rendezvous whose participants each post a `Payload` per round and receive the round's `Result`, made once
// by the last participant to arrive from everyone's payloads (in the runtime: the replicas' collective requests
// and the plan that carries out the round).
template <class Payload, class Result>
class Rendezvous final : public RendezvousCore {
 public:
  using RendezvousCore::RendezvousCore;

  // Makes the round's result from every participant's payload (indexed by rank), or throws to fail the round
  // for everyone (e.g. a mismatch).
  using Complete = std::function<std::shared_ptr<const Result>(std::span<const Payload* const> payloads)>;

  // Posts `payload` as participant `rank`'s contribution to its next round and waits until every participant
  // has posted. Returns the result made by `complete`. The payloads stay readable by all until every
  // participant has called finish() for this round (or the next round starts, if finish is unused).
  std::shared_ptr<const Result> arrive(int rank, const Payload& payload, const Complete& complete, const Describe& what) {
    std::unique_lock lock(mutex_, std::defer_lock);
    const std::uint64_t generation = enter_round(lock, rank);
    Slot& slot = slots_[generation % 2];
    if (first_of_round()) {
      // The slot last served round generation-2, which every participant has left (they all arrived at
      // generation-1 since), so it can be reused.
      slot.result.reset();
      errors_[generation % 2].reset();
    }
    slot.payloads[rank] = &payload;
    if (last_of_round()) {
      completing_ = true;
      lock.unlock();
      std::shared_ptr<const Result> result;
      std::optional<ErrorRecord> error;
      try {
        result = complete(std::span<const Payload* const>(slot.payloads));
      } catch (...) {
        error = current_error();
      }
      lock_briefly_spinning(lock);
      slot.result = std::move(result);
      errors_[generation % 2] = std::move(error);
      // Everyone has left the previous round (they all arrived at this one): drop its result now rather than
      // two rounds later, so its outputs and stand-in inputs are not kept alive (or charged to a device).
      slots_[(generation + 1) % 2].result.reset();
      close_round(generation);
    } else {
      wait_for_round(lock, rank, generation, what);
    }
    count_round(rank);
    if (const auto& error = errors_[generation % 2]) throw_error(error->kind, error->message);
    return slot.result;
  }

 private:
  struct Slot {
    std::vector<const Payload*> payloads;
    std::shared_ptr<const Result> result;
  };
  void withdraw(std::uint64_t generation, int rank) override { slots_[generation % 2].payloads[rank] = nullptr; }
  Slot slots_[2] = {Slot{std::vector<const Payload*>(participants(), nullptr), nullptr},
                    Slot{std::vector<const Payload*>(participants(), nullptr), nullptr}};
};

}  // namespace weft::transport
