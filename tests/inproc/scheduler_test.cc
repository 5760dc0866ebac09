// The two schedulers (WEFT_SCHEDULER; docs/design.md "Schedulers"): where replicas run, and that a replica
// sees the same runtime state whichever runs it. Each case runs under both, named by the parameter.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../support/replica_faults.hpp"
#include "transport/wait_queue.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace scheduler_test {

using namespace weft::testing;

class Scheduler : public ::testing::TestWithParam<std::string> {
 protected:
  RuntimeOptions Options(int devices) const {
    return {.device_count = devices, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error",
            .scheduler = GetParam()};
  }
};

TEST_P(Scheduler, ReplicasRunOnTheThreadsTheSchedulerPromises) {
  Runtime rt(Options(8));
  EXPECT_EQ(rt.options().scheduler, GetParam());
  std::mutex mutex;
  std::vector<std::thread::id> ids(8);
  const std::thread::id caller = std::this_thread::get_id();
  auto f = pmap(
      [&](Replica& r, const Array& x) {
        {
          std::lock_guard lock(mutex);
          ids[r.index()] = std::this_thread::get_id();
        }
        return r.psum(x, "i");
      },
      {.axis = "i", .runtime = &rt});
  EXPECT_EQ(f(Array::arange(8)).to_host().to_doubles(), std::vector<double>(8, 28));
  const std::set<std::thread::id> distinct(ids.begin(), ids.end());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (GetParam() == "fibers") {
    // At most one worker per core, the caller being the first; neighbours share a worker.
    EXPECT_EQ(static_cast<int>(distinct.size()), std::min(8, cores));
    EXPECT_EQ(ids[0], caller);
    EXPECT_EQ(ids[0], ids[1]);
  } else {
    EXPECT_EQ(distinct.size(), 8u);
    EXPECT_EQ(distinct.count(caller), 0u);
  }
}

TEST_P(Scheduler, ReplicaThreadsGiveEachReplicaAnOsThreadUnderEitherScheduler) {
  // PmapOptions::replica_threads (what Python's eager pmaps and sessions ask for): a thread per device, the
  // caller not among them, whichever scheduler the runtime has; programs without it keep the scheduler's.
  Runtime rt(Options(8));
  std::mutex mutex;
  std::vector<std::thread::id> ids(8);
  auto record = [&](Replica& r, const Array& x) {
    {
      std::lock_guard lock(mutex);
      ids[r.index()] = std::this_thread::get_id();
    }
    return r.psum(x, "i");
  };
  auto threaded = pmap(record, {.axis = "i", .runtime = &rt, .replica_threads = true});
  for (int call = 0; call < 3; ++call) {
    EXPECT_EQ(threaded(Array::arange(8)).to_host().to_doubles(), std::vector<double>(8, 28));
    const std::set<std::thread::id> distinct(ids.begin(), ids.end());
    EXPECT_EQ(distinct.size(), 8u);
    EXPECT_EQ(distinct.count(std::this_thread::get_id()), 0u);
  }
  if (GetParam() == "fibers") {
    auto fibers = pmap(record, {.axis = "i", .runtime = &rt});
    EXPECT_EQ(fibers(Array::arange(8)).to_host().to_doubles(), std::vector<double>(8, 28));
    EXPECT_EQ(ids[0], std::this_thread::get_id());  // the caller is the first fiber worker again
  }
}

// The placement tests' common part: 8 replicas as fibers, and the thread each replica last ran on.
RuntimeOptions FibersOn8Devices() {
  return {.device_count = 8, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error",
          .scheduler = "fibers"};
}

struct ThreadsSeen {
  std::mutex mutex;
  std::vector<std::thread::id> ids = std::vector<std::thread::id>(8);
  void record(const Replica& r) {
    std::lock_guard lock(mutex);
    ids[r.index()] = std::this_thread::get_id();
  }
  std::size_t count() const { return std::set<std::thread::id>(ids.begin(), ids.end()).size(); }
};

// Fibers' placement adapts run by run (docs/design.md "Schedulers"; the policy's decisions are unit-tested in
// tests/unit/fiber_placement_test.cc): results are the same whichever placement a run gets, and replicas
// that compute between their collectives stay spread over the workers (on an idle machine or a loaded one:
// either way their workers are busy the whole run).
TEST(FiberPlacement, ResultsHoldInEveryPlacementAndComputingReplicasStaySpread) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Runtime rt(FibersOn8Devices());
  ThreadsSeen seen;
  double compute_ms = 0;  // busy time of each replica between its collectives
  auto f = pmap(
      [&](Replica& r, const Array& x) {
        seen.record(r);
        Array y = x;
        for (int i = 0; i < 10; ++i) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(compute_ms);
          while (std::chrono::steady_clock::now() < until) {
          }
          y = r.psum(y, "i");
        }
        return y;
      },
      {.axis = "i", .runtime = &rt});
  const Array ones = Array::ones({8});
  // 8^10 = 2^30: exact in float32 whatever the order.
  for (int call = 0; call < 6; ++call) EXPECT_EQ(f(ones).to_host().to_doubles(), std::vector<double>(8, 1073741824.0)) << call;
  compute_ms = 2;
  for (int call = 0; call < 3; ++call) f(ones);  // (a compact run measures, and the next spreads)
  for (int call = 0; call < 3; ++call) {
    EXPECT_EQ(f(ones).to_host().to_doubles(), std::vector<double>(8, 1073741824.0)) << call;
    EXPECT_EQ(seen.count(), static_cast<std::size_t>(std::min(8, cores)))
        << "call " << call;
  }
}

// A replica that waits on another process (an MPI partner, polled in place) does no work that more workers
// would share: that wait is not counted as busy, so replicas that otherwise only meet go compact on one
// worker, as in one process. Counted as busy, the 4 ms wait made every slice look long and the run stay
// spread (two instances x 4 devices ran 4 KiB all-reduces 3x slower spread than compact). The first runs are
// spread, so the test needs a few calls; under sanitizers the meetings themselves are slow, so it only checks
// the results there.
TEST(FiberPlacement, WaitingOnAnotherProcessIsNotWorkSoMeetingReplicasGoCompact) {
  Runtime rt(FibersOn8Devices());
  ThreadsSeen seen;
  auto f = pmap(
      [&](Replica& r, const Array& x) {
        seen.record(r);
        Array y = x;
        for (int i = 0; i < 3; ++i) {
          if (r.index() == 0) {  // as the last arriver of a cross-process step polls its partner
            const weft::transport::ScopedInterprocessWait waiting;
            std::this_thread::sleep_for(std::chrono::milliseconds(4));
          }
          y = r.psum(y, "i");
        }
        return y;
      },
      {.axis = "i", .runtime = &rt});
  const Array ones = Array::ones({8});
  std::size_t threads = 0;
  // The placement adapts run by run: at least 12 calls, and on a loaded machine (where a run's timings are
  // noisy; a clean-clone CI run once saw 2 threads after 12) up to 48, until a run goes compact.
  for (int call = 0; call < 48 && (call < 12 || threads != 1); ++call) {
    EXPECT_EQ(f(ones).to_host().to_doubles(), std::vector<double>(8, 512.0)) << call;
    threads = seen.count();
  }
  if (!WEFT_TEST_UNDER_SANITIZER && std::thread::hardware_concurrency() > 1) {
    EXPECT_EQ(threads, 1u);
  }
}

// The memory account is switched with the fiber: what replica r allocates is charged to device r, even when
// the replicas sharing a worker interleave at collectives while holding their arrays.
TEST_P(Scheduler, ArraysAreChargedToTheReplicasOwnDevice) {
  Runtime rt(Options(8));
  std::vector<std::int64_t> seen(8, -1);
  auto f = pmap(
      [&](Replica& r, const Array& x) {
        Array y = r.psum(x, "i");  // the replicas of a worker have all started and interleaved by now
        [[maybe_unused]] const Array held = Array::zeros({(r.index() + 1) * 1024 * 256}, DType::f32);  // (r + 1) MiB
        y = r.psum(y, "i");  // every replica holds its array here
        seen[r.index()] = rt.memory_in_use(rt.devices()[r.index()]);
        return y;
      },
      {.axis = "i", .runtime = &rt});
  f(Array::arange(8));
  for (int r = 0; r < 8; ++r) {
    // Its own array, the input slice and the collectives' results: at least (r + 1) MiB, less than r + 2.
    EXPECT_GE(seen[r], (r + 1) << 20) << "replica " << r;
    EXPECT_LT(seen[r], (r + 2) << 20) << "replica " << r;
  }
}

// A replica's error still names it and where it was, and a pmap from inside a replica is still refused.
TEST_P(Scheduler, ErrorsNameTheReplicaAndNestedPmapIsRefused) {
  Runtime rt(Options(4));
  auto bad = pmap(
      [&](Replica& r, const Array& x) {
        Array y = r.psum(x, "i");
        if (r.index() == 2) (void)(Array::zeros({3}, DType::f32) + Array::zeros({5}, DType::f32));  // a shape error
        return y;
      },
      {.axis = "i", .runtime = &rt});
  const Outcome o = Timed([&] { bad(Array::arange(4)); });
  ASSERT_TRUE(o.threw);
  ExpectContains(o.message, {"replica 2 (CpuDevice(id=2, process=0)) failed", "in the replica's own code",
                             "after its collective #0: psum"});
  auto nested = pmap(
      [&](Replica& r, const Array& x) {
        if (r.index() == 1) pmap([](Replica&, const Array& v) { return v; }, {.runtime = &rt})(Array::arange(4));
        return x;
      },
      {.axis = "i", .runtime = &rt});
  const Outcome n = Timed([&] { nested(Array::arange(4)); });
  ASSERT_TRUE(n.threw);
  ExpectContains(n.message, {"cannot start a program from inside"});
}

// A replica's stack is as deep as a thread's: 2 MiB of locals on each of 8 fibers.
TEST_P(Scheduler, DeepStacks) {
  Runtime rt(Options(8));
  auto f = pmap(
      [&](Replica& r, const Array& x) {
        volatile char big[2 << 20];
        for (std::size_t i = 0; i < sizeof(big); i += 4096) big[i] = static_cast<char>(i);
        Array y = r.psum(x, "i");
        return y + static_cast<double>(big[4096]);
      },
      {.axis = "i", .runtime = &rt});
  EXPECT_EQ(f(Array::arange(8)).to_host().to_doubles(), std::vector<double>(8, 28));
}

// Many executions back to back, more replicas than cores, every collective kind: the values are right and
// nothing is left running.
TEST_P(Scheduler, ManyCallsOfEveryCollective) {
  Runtime rt(Options(16));
  auto f = pmap(
      [&](Replica& r, const Array& x) {
        Array s = r.psum(x, "i");
        Array g = r.all_gather(x, "i");
        Array p = r.ppermute(x, "i", {{0, 15}, {15, 0}});
        return s + g.sum() + p;
      },
      {.axis = "i", .runtime = &rt});
  for (int call = 0; call < 200; ++call) {
    const std::vector<double> out = f(Array::arange(16)).to_host().to_doubles();
    ASSERT_EQ(out.size(), 16u);
    for (int r = 0; r < 16; ++r) {
      const double permuted = r == 0 ? 15 : r == 15 ? 0 : 0;  // ppermute: zeros where nothing arrives
      ASSERT_EQ(out[r], 120 + 120 + permuted) << "call " << call << ", replica " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Both, Scheduler, ::testing::Values("fibers", "threads"),
                         [](const auto& info) { return info.param; });

TEST(SchedulerSetting, AnUnknownSchedulerIsRefusedNamingTheSetting) {
  {
    const Outcome o = Timed([] { Runtime rt({.device_count = 2, .scheduler = "green"}); });
    ASSERT_TRUE(o.threw);
    EXPECT_EQ(o.type, "InvalidArgument");
    ExpectContains(o.message, {"RuntimeOptions::scheduler = green is not a scheduler", "threads", "fibers"});
  }
  {
    ScopedEnv env("WEFT_SCHEDULER", "Fibers");
    const Outcome o = Timed([] { Runtime rt({.device_count = 2}); });
    ASSERT_TRUE(o.threw);
    ExpectContains(o.message, {"WEFT_SCHEDULER=Fibers is not a scheduler"});
  }
  {
    ScopedEnv env("WEFT_SCHEDULER", nullptr);
    Runtime rt({.device_count = 2});
    EXPECT_EQ(rt.options().scheduler, "fibers");  // the default
  }
}

}  // namespace scheduler_test
}  // namespace
}  // namespace weft
