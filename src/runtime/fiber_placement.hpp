// Where the fiber scheduler puts a run's replicas: spread over every worker or compact on the calling
// thread, decided from what the previous run measured (docs/design.md "Schedulers"). A pure policy, apart
// from the scheduler, so that its decisions are tested with exact numbers (tests/unit/fiber_placement_test.cc).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace weft::detail {

// What a worker did in one run: the time its fibers ran (not counting its own waits) and how often they
// suspended (about once per collective each).
struct WorkerStats {
  std::int64_t busy_ns = 0;
  std::int64_t suspensions = 0;
};

// Spread (the start) deals a run's fibers over every worker, which pays when replicas compute between
// collectives: the workers run in parallel. But the workers then meet at every collective, across cores
// (~5-10 us here), and when the replicas do little between collectives that meeting is most of the time:
// 8 replicas of 4 KiB all-reduces run 2.5x faster on one worker than on two. So the scheduler decides, run
// by run, from what the previous run measured:
//  - after a spread run whose fibers ran short slices between suspensions (under kShortSliceNs on average:
//    they mostly meet), the next run is a compact probe (every fiber on the calling thread, the helpers
//    asleep). A probe that lost (below) doubles the number of spread runs before the next one (up to
//    kReprobe), so a program that is better spread is not made to alternate;
//  - after a compact run: spread again if this run's work shared out over the workers, plus the overhead per
//    collective the last spread run showed beyond its shared-out work, beats the compact run's time by 10 %
//    (the replicas compute between collectives), and every kReprobe compact runs in any case, so a program
//    whose phases change is re-measured.
// Runs of one program usually resemble each other (training steps, benchmark repetitions), so the last one
// is a good guess; a wrong one costs one run. A slice's time includes waiting for the rendezvous lock held by
// the other worker, which is why the busy fraction alone cannot tell spread from compact.
class Placement {
 public:
  static constexpr int kReprobe = 256;              // a compact run in this many spreads again, to re-measure
  static constexpr double kShortSliceNs = 20'000;  // a mean slice below this: the fibers mostly meet

  explicit Placement(int workers) : workers_(workers) {}
  int workers_for_next_run() const { return compact_ ? 1 : workers_; }

  void learn(int workers_used, int fibers, double wall_ns, const std::vector<WorkerStats>& stats) {
    if (workers_ <= 1 || fibers <= 1) return;
    double busy = 0, suspensions = 0;
    for (int w = 0; w < workers_used; ++w) {
      busy += static_cast<double>(stats[w].busy_ns);
      suspensions += static_cast<double>(stats[w].suspensions);
    }
    // Meetings per fiber: collectives, plus the run's own start and end.
    const double rounds = suspensions / fibers + 1;
    if (workers_used > 1) {
      // What spreading cost beyond the work shared out evenly: the workers' meetings, and work that did not
      // divide (a small collective is done whole by its last arriver).
      spread_overhead_per_round_ = std::max(0.0, (wall_ns - busy / workers_used) / rounds);
      const double mean_slice = busy / std::max(1.0, suspensions + fibers);
      if (mean_slice < kShortSliceNs && ++spread_runs_ >= probe_after_) {
        compact_ = true;
        compact_runs_ = 0;
      }
      return;
    }
    // Compact: this run's work shared out over the workers, plus the overhead the last spread run showed.
    const double predicted = busy / rounds / workers_ + spread_overhead_per_round_;
    const bool lost = predicted < 0.9 * (wall_ns / rounds);
    if (++compact_runs_ == 1) probe_after_ = lost ? std::min(2 * probe_after_, kReprobe) : 1;
    if (lost || compact_runs_ >= kReprobe) {
      compact_ = false;
      spread_runs_ = 0;
    }
  }

 private:
  const int workers_;
  bool compact_ = false;
  int compact_runs_ = 0;   // in a row, the current one included
  int spread_runs_ = 0;    // with short slices, since the last compact run
  int probe_after_ = 1;    // spread runs with short slices before the next compact probe
  double spread_overhead_per_round_ = 0;
};

}  // namespace weft::detail
