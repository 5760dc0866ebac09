#include "transport/rendezvous.hpp"

#include <algorithm>
#include <sstream>
#include <thread>

#include "core/error_hints.hpp"
#include "core/log.hpp"
#include "weft/error.hpp"

namespace weft::transport {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

Clock::time_point deadline_after(Clock::time_point start, double seconds) {
  if (seconds <= 0 || seconds > 1e9) return Clock::time_point::max();
  return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

RendezvousCore::RendezvousCore(int participants, Deadlines deadlines, std::string execution_name,
                               std::function<std::string(int)> participant_name, std::vector<int> participant_ids)
    : n_(participants),
      deadlines_(deadlines),
      execution_name_(std::move(execution_name)),
      participant_name_(std::move(participant_name)),
      participant_ids_(std::move(participant_ids)),
      has_arrived_(participants, 0),
      has_finished_(participants, 0),
      rounds_done_(participants, 0),
      departed_(participants, 0),
      left_round_(participants, 0) {}

std::uint64_t RendezvousCore::completed_rounds(int rank) const {
  std::lock_guard lock(mutex_);
  return rounds_done_[rank];
}

std::uint64_t RendezvousCore::enter_round(std::unique_lock<std::mutex>& lock, int rank) {
  lock_briefly_spinning(lock);
  if (aborted_) throw_aborted(rank);
  if (arrived_ == 0) warned_ = false;
  has_arrived_[rank] = 1;
  ++arrived_;
  return arrive_generation_.load(std::memory_order_relaxed);
}

void RendezvousCore::close_round(std::uint64_t generation) {
  completing_ = false;
  arrived_ = 0;
  std::fill(has_arrived_.begin(), has_arrived_.end(), 0);
  arrive_generation_.store(generation + 1, std::memory_order_release);
  cv_.notify_all();
}

void RendezvousCore::finish(int rank, const Describe& what) {
  std::unique_lock lock(mutex_, std::defer_lock);
  lock_briefly_spinning(lock);
  const std::uint64_t generation = finish_generation_.load(std::memory_order_relaxed);
  has_finished_[rank] = 1;
  if (++finished_ == n_) {
    finished_ = 0;
    std::fill(has_finished_.begin(), has_finished_.end(), 0);
    finish_generation_.store(generation + 1, std::memory_order_release);
    cv_.notify_all();
  } else {
    wait_for(lock, rank, Phase::finish, generation, what);
  }
  if (aborted_) throw_aborted(rank);
}

bool RendezvousCore::abort(int rank, const std::string& cause) {
  std::lock_guard lock(mutex_);
  if (aborted_) return false;
  abort_rank_ = rank;
  abort_cause_ = cause;
  aborted_.store(true, std::memory_order_release);
  cv_.notify_all();
  return true;
}

void RendezvousCore::depart(int rank) {
  std::lock_guard lock(mutex_);
  departed_[rank] = 1;
  cv_.notify_all();
}

std::string RendezvousCore::aborted_message(int rank) const {
  return participant_name_(rank) + " aborted because " + participant_name_(abort_rank_) +
         " failed: " + abort_cause_.substr(0, abort_cause_.find('\n'));
}

void RendezvousCore::throw_aborted(int rank) const { throw AbortedError(aborted_message(rank)); }

std::string RendezvousCore::missing_report(Phase phase) const {
  const std::vector<char>& present = phase == Phase::arrive ? has_arrived_ : has_finished_;
  const std::uint64_t round = arrive_generation_.load(std::memory_order_relaxed);
  std::ostringstream arrived, missing;
  bool first_a = true, first_m = true;
  std::ostringstream details;
  for (int p = 0; p < n_; ++p) {
    const int id = participant_ids_.empty() ? p : participant_ids_[p];
    if (present[p] || (phase == Phase::arrive && left_round_[p] == round + 1)) {
      arrived << (first_a ? "" : ", ") << id;
      first_a = false;
    } else {
      missing << (first_m ? "" : ", ") << id;
      first_m = false;
      // rounds_done_ counts completed rounds: the last one completed is seq rounds_done_ - 1.
      details << "\n  " << participant_name_(p) << ": last completed seq=";
      if (rounds_done_[p] == 0)
        details << "none";
      else
        details << rounds_done_[p] - 1;
      if (departed_[p]) details << " (returned from its function)";
    }
  }
  std::string report = "arrived: [" + arrived.str() + "]; missing: [" + missing.str() + "]" + details.str();
  if (first_m && completing_)
    report += " (every replica of this process arrived; the round waits for the other processes of the job)";
  return report;
}

void RendezvousCore::wait_for(std::unique_lock<std::mutex>& lock, int rank, Phase phase, std::uint64_t generation,
                          const Describe& what) {
  const std::atomic<std::uint64_t>& gen = phase == Phase::arrive ? arrive_generation_ : finish_generation_;
  // A short yield phase (128 yields: a few tens of microseconds when others are runnable) catches partners
  // that are a little behind without a futex round trip;
  // after it we block, so oversubscribed replicas burn no CPU.
  // A fiber skips it: its first suspension hands the thread to the partners it is waiting for.
  if (!current_fiber_suspender()) {
    lock.unlock();
    for (int i = 0; i < 128 && gen.load(std::memory_order_acquire) == generation && !aborted_; ++i)
      std::this_thread::yield();
    lock.lock();
  }

  const Clock::time_point start = Clock::now();
  const Clock::time_point warn_at = deadline_after(start, deadlines_.warn_s);
  Clock::time_point fail_at = deadline_after(start, deadlines_.timeout_s);
  auto describe = [&] { return what ? what() : std::string("a collective"); };
  // Leaving the arrive phase early takes our payload back, so a partner completing the round later never
  // reads an input we are about to release.
  auto leave = [&](auto&& error) {
    if (phase == Phase::arrive) {
      has_arrived_[rank] = 0;
      left_round_[rank] = generation + 1;
      withdraw(generation, rank);
      --arrived_;
    }
    throw error;
  };
  while (gen.load(std::memory_order_relaxed) == generation) {
    if (aborted_) {
      // Partners may still be reading our inputs (the last arriver completing the round, or everyone
      // doing their part before finish): leave only once that bounded work is done.
      if (phase == Phase::arrive && !completing_)
        leave(AbortedError(aborted_message(rank)));
    } else if (phase == Phase::arrive) {
      for (int p = 0; p < n_; ++p) {
        if (departed_[p] && !has_arrived_[p])
          leave(PeerLostError(participant_name_(p) + " returned from its function while " +
                              participant_name_(rank) + " waits for it at " + describe() + " (seq " +
                              std::to_string(generation) + " of " + execution_name_ + ")" + hints::kReturnedEarly));
      }
    }
    const Clock::time_point now = Clock::now();
    // Only arrivals time out: in the finish phase every partner has arrived and its remaining work is local
    // and bounded, and leaving early would free an input a partner may still be reading.
    if (phase == Phase::arrive && !aborted_ && !completing_ && now >= fail_at) {
      // Every waiter of the round times out at about the same time, and the first to leave is not always
      // the first to report: all of them report who was missing at the round's first timeout, so the root
      // cause names the same absentees whichever waiter's error wins.
      if (timeout_round_ != generation + 1) {
        timeout_round_ = generation + 1;
        timeout_report_ = missing_report(phase);
        timeout_note_ = absence_note_ ? absence_note_() : std::string();
      }
      const std::string report = timeout_report_;
      leave(TimeoutError(execution_name_ + ": " + participant_name_(rank) + " timed out after " +
                         seconds_str(deadlines_.timeout_s) + " (WEFT_COLLECTIVE_TIMEOUT) at " + describe() +
                         ", seq " + std::to_string(generation) + "; " + report +
                         (timeout_note_.empty() ? std::string(hints::kCollectiveTimeout)
                                                : "; " + timeout_note_ + hints::kWorkerHeld)));
    }
    // While the last arriver completes the round with the other processes, the transport warns (it knows
    // which processes are missing); every local replica is here.
    if (!aborted_ && !completing_ && now >= warn_at && !warned_) {
      warned_ = true;
      const std::string note = absence_note_ ? absence_note_() : std::string();
      log(LogLevel::warn, execution_name_ + ": stalled for " + seconds_str(deadlines_.warn_s) +
                              " (WEFT_COLLECTIVE_WARN) at " + describe() + ", seq " + std::to_string(generation) +
                              "; " + missing_report(phase) + (note.empty() ? "" : "; " + note));
    }
    Clock::time_point next = aborted_ ? now + std::chrono::milliseconds(50) : fail_at;
    if (!warned_ && !aborted_) next = std::min(next, warn_at);
    cv_.wait_until(lock, next);
    // Woken far past the planned time: this process was not running (SIGSTOP, a paused VM or debugger), and
    // neither were its partners, whose deadlines all passed at once. Give them a moment to arrive before
    // blaming them for a delay the whole process had.
    const Clock::time_point woke = Clock::now();
    if (next != Clock::time_point::max() && woke - next > std::chrono::milliseconds(500))
      fail_at = std::max(fail_at, woke + std::chrono::milliseconds(250));
  }
}

}  // namespace weft::transport
