// The fiber scheduler's placement policy (src/runtime/fiber_placement.hpp), fed runs with exact numbers: when
// it goes compact (the workers mostly waited for each other), when it spreads again (the replicas compute
// between collectives), and that it re-measures a compact program now and then.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/fiber_placement.hpp"

namespace weft::detail {
namespace {

constexpr int kFibers = 8;

// A run on `workers` workers: each worker's fibers ran `busy_us` in all and suspended `rounds` times each.
std::vector<WorkerStats> run_stats(int workers, double busy_us_each, int rounds) {
  std::vector<WorkerStats> stats(2);
  for (int w = 0; w < workers; ++w)
    stats[w] = {static_cast<std::int64_t>(busy_us_each * 1000), static_cast<std::int64_t>(rounds) * kFibers / workers};
  return stats;
}

TEST(FiberPlacement, StartsSpreadAndGoesCompactWhenTheWorkFitsOnOneWorker) {
  Placement p(2);
  EXPECT_EQ(p.workers_for_next_run(), 2);
  // 1000 rounds of 4 KiB all-reduces as measured: each worker busy 2 ms of an 11 ms run.
  p.learn(2, kFibers, 11e6, run_stats(2, 2000, 1000));
  EXPECT_EQ(p.workers_for_next_run(), 1);
  // Compact, the same work takes 4.2 ms; spreading would take 4.2/2 + (11 - 4/2) ms: stay compact.
  p.learn(1, kFibers, 4.2e6, run_stats(1, 4100, 1000));
  EXPECT_EQ(p.workers_for_next_run(), 1);
}

TEST(FiberPlacement, BusyWorkersStaySpread) {
  Placement p(2);
  // Training steps: both workers busy 95 % of the run.
  for (int i = 0; i < 10; ++i) {
    p.learn(2, kFibers, 7e6, run_stats(2, 6650, 9));
    EXPECT_EQ(p.workers_for_next_run(), 2);
  }
}

TEST(FiberPlacement, ACompactProgramThatStartsComputingSpreadsAgain) {
  Placement p(2);
  p.learn(2, kFibers, 11e6, run_stats(2, 2000, 1000));
  ASSERT_EQ(p.workers_for_next_run(), 1);
  // Now 20 rounds of 1 ms per replica: 160 ms compact; spread would be ~80 ms plus ~9 us a round.
  p.learn(1, kFibers, 160e6, run_stats(1, 160000, 20));
  EXPECT_EQ(p.workers_for_next_run(), 2);
}

TEST(FiberPlacement, WorkThatDoesNotDivideStaysCompact) {
  Placement p(2);
  // 64 KiB all-reduces, done whole by each round's last arriver: 25 us of 36 us a round on one worker.
  p.learn(2, kFibers, 36e3 * 100, {{static_cast<std::int64_t>(27e3 * 100), 400}, {static_cast<std::int64_t>(2e3 * 100), 400}});
  ASSERT_EQ(p.workers_for_next_run(), 1);
  p.learn(1, kFibers, 28.5e3 * 100, run_stats(1, 28.4e3 * 100, 100));
  EXPECT_EQ(p.workers_for_next_run(), 1);
}

TEST(FiberPlacement, ACompactProgramIsReMeasuredEveryReprobeRuns) {
  Placement p(2);
  p.learn(2, kFibers, 11e6, run_stats(2, 2000, 1000));
  int compact_runs = 0;
  while (p.workers_for_next_run() == 1 && compact_runs < 10 * Placement::kReprobe) {
    p.learn(1, kFibers, 4.2e6, run_stats(1, 4100, 1000));
    ++compact_runs;
  }
  EXPECT_EQ(compact_runs, Placement::kReprobe);
}

TEST(FiberPlacement, OneWorkerOrOneFiberHasNothingToPlace) {
  Placement one(1);
  one.learn(1, kFibers, 11e6, run_stats(1, 100, 1000));
  EXPECT_EQ(one.workers_for_next_run(), 1);
  Placement p(2);
  p.learn(2, 1, 11e6, run_stats(2, 1, 1000));
  EXPECT_EQ(p.workers_for_next_run(), 2);
}

}  // namespace
}  // namespace weft::detail
