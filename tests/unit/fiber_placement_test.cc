// The fiber scheduler's placement policy (src/runtime/fiber_placement.hpp), fed runs with exact numbers (the
// shapes of runs measured on the 2-core VM): when it probes compact (the fibers' slices are short: they mostly
// meet), when a probe wins or loses, that a program better spread is not made to alternate, and that a
// compact program is re-measured now and then.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/fiber_placement.hpp"

namespace weft::detail {
namespace {
namespace fiber_placement_test {

constexpr int kFibers = 8;

// A run's statistics: every worker used had its fibers run `busy_us` in all, suspending `rounds` times each.
std::vector<WorkerStats> run_stats(int workers, double busy_us_each, int rounds) {
  std::vector<WorkerStats> stats(2);
  for (int w = 0; w < workers; ++w)
    stats[w] = {static_cast<std::int64_t>(busy_us_each * 1000), static_cast<std::int64_t>(rounds) * kFibers / workers};
  return stats;
}

// The runs the tests feed, named by what they model.
struct Run {
  int workers;
  double wall_us;
  double busy_us_each;
  int rounds;
};
// 900 rounds of 4 KiB all-reduces: spread, both workers busy (partly on the rendezvous lock) 14 of 23.6 ms;
// compact, 6.5 ms.
constexpr Run kSmallSpread{2, 23600, 14000, 900}, kSmallCompact{1, 6500, 6400, 900};
// Training steps: both workers busy 95 % of a 7 ms step with 9 collectives.
constexpr Run kTrainingSpread{2, 7000, 6650, 9};
// 20 rounds of 1 ms per replica between collectives, on one worker: 160 ms.
constexpr Run kComputeCompact{1, 160000, 160000, 20};
// Mid-size collectives whose work divides: spread 10 ms (busy 9.5 ms each, short slices); compact 19 ms.
constexpr Run kMidSpread{2, 10000, 9500, 250}, kMidCompact{1, 19000, 19000, 250};

void feed(Placement& p, const Run& r) { p.learn(r.workers, kFibers, r.wall_us * 1000, run_stats(r.workers, r.busy_us_each, r.rounds)); }

TEST(FiberPlacement, StartsSpreadProbesCompactWhenSlicesAreShortAndKeepsAWinningProbe) {
  Placement p(2);
  EXPECT_EQ(p.workers_for_next_run(), 2);
  feed(p, kSmallSpread);
  EXPECT_EQ(p.workers_for_next_run(), 1);
  for (int i = 0; i < 10; ++i) {
    feed(p, kSmallCompact);  // spread would take 3.5 us of shared-out work + 10.6 us of meeting a round
    EXPECT_EQ(p.workers_for_next_run(), 1) << i;
  }
}

TEST(FiberPlacement, BusyWorkersWithLongSlicesStaySpread) {
  Placement p(2);
  for (int i = 0; i < 10; ++i) {
    feed(p, kTrainingSpread);
    EXPECT_EQ(p.workers_for_next_run(), 2) << i;
  }
}

TEST(FiberPlacement, ACompactProgramThatStartsComputingSpreadsAgain) {
  Placement p(2);
  feed(p, kSmallSpread);
  ASSERT_EQ(p.workers_for_next_run(), 1);
  feed(p, kComputeCompact);  // spread: ~80 ms of shared-out work plus ~11 us a round
  EXPECT_EQ(p.workers_for_next_run(), 2);
}

TEST(FiberPlacement, WorkThatDoesNotDivideStaysCompact) {
  Placement p(2);
  // 64 KiB all-reduces, done whole by each round's last arriver: spread, 36 us a round with one worker busy
  // 27 us of it; compact, 28.5 us.
  p.learn(2, kFibers, 36e3 * 100, {{static_cast<std::int64_t>(27e3 * 100), 400}, {static_cast<std::int64_t>(2e3 * 100), 400}});
  ASSERT_EQ(p.workers_for_next_run(), 1);
  p.learn(1, kFibers, 28.5e3 * 100, run_stats(1, 28.4e3 * 100, 100));
  EXPECT_EQ(p.workers_for_next_run(), 1);
}

// A program better spread, whose slices are short nonetheless: each lost probe doubles the spread runs
// before the next one (1, 2, 4, ...), up to kReprobe.
TEST(FiberPlacement, LostProbesBackOff) {
  Placement p(2);
  std::vector<int> spread_runs_between_probes;
  int spread_runs = 0;
  for (int run = 0; run < 600; ++run) {
    if (p.workers_for_next_run() == 1) {
      spread_runs_between_probes.push_back(spread_runs);
      spread_runs = 0;
      feed(p, kMidCompact);
      EXPECT_EQ(p.workers_for_next_run(), 2) << "a probe that lost spreads the next run";
    } else {
      ++spread_runs;
      feed(p, kMidSpread);
    }
  }
  EXPECT_EQ(spread_runs_between_probes, (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
}

TEST(FiberPlacement, ACompactProgramIsReMeasuredEveryReprobeRuns) {
  Placement p(2);
  feed(p, kSmallSpread);
  int compact_runs = 0;
  while (p.workers_for_next_run() == 1 && compact_runs < 10 * Placement::kReprobe) {
    feed(p, kSmallCompact);
    ++compact_runs;
  }
  EXPECT_EQ(compact_runs, Placement::kReprobe);
  feed(p, kSmallSpread);
  EXPECT_EQ(p.workers_for_next_run(), 1) << "and goes compact again at once: its probe had won";
}

TEST(FiberPlacement, OneWorkerOrOneFiberHasNothingToPlace) {
  Placement one(1);
  one.learn(1, kFibers, 11e6, run_stats(1, 100, 1000));
  EXPECT_EQ(one.workers_for_next_run(), 1);
  Placement p(2);
  p.learn(2, 1, 11e6, run_stats(2, 1, 1000));
  EXPECT_EQ(p.workers_for_next_run(), 2);
}

}  // namespace fiber_placement_test
}  // namespace
}  // namespace weft::detail
