// A replica that holds its fiber worker (reliability, issue 21 items 6 and 13; runtime/fiber_scheduler.hpp).
// Under WEFT_SCHEDULER=fibers the replicas of a worker take turns, so one blocked in its own code (a sleep, a
// lock) starves the others of its worker, whose own deadlines cannot fire. The scheduler's watchdog must
// still warn and time the execution out, naming the holder and saying that its co-tenants have not run
// since (instead of blaming them as "still in their own code"); and a true deadlock (a std::mutex held
// across a collective, wanted by a replica of the same worker) must end the process with that report rather
// than hang without a word. These tests ask for fibers whatever WEFT_SCHEDULER says.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "../support/errors.hpp"
#include "../support/forked_child.hpp"
#include "../support/temp_dir.hpp"
#include "weft/weft.hpp"

namespace {
namespace fiber_hold_test {

using namespace weft;
using weft::testing::RunInForkedChild;

const std::string kHolder = "replica 1 (CpuDevice(id=1, process=0)) has held fiber worker ";
const std::string kStarved = "replica 0 (CpuDevice(id=0, process=0))";

TEST(FiberHold, ASleepingReplicaTimesTheExecutionOutNamingItAndItsCoTenants) {
  // Replica 1 sleeps past the timeout while replica 0, on its worker, waits for it in a psum. Before, the
  // call succeeded after the sleep (one worker: nobody could time out) or blamed replicas 0 and 1 alike.
  Runtime rt({.device_count = 4, .collective_warn_s = 0.3, .collective_timeout_s = 1.0, .scheduler = "fibers"});
  auto f = pmap(
      [](Replica& r, const Array& x) {
        if (r.axis_index("i") == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        return r.psum(x, "i");
      },
      {.axis = "i", .runtime = &rt});
  ::testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    f(Array::arange(4));
    ::testing::internal::GetCapturedStderr();
    FAIL() << "no error: the sleep outlasted the 1 s timeout";
  } catch (const TimeoutError& e) {
    message = e.what();
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  weft::testing::ExpectContains(message, {kHolder, kStarved, "not run since", "WEFT_SCHEDULER=threads"});
  EXPECT_EQ(message.find("still in their own code"), std::string::npos) << message;
  // The warning came from the watchdog while the worker was blocked, at the warn time.
  weft::testing::ExpectContains(log, {"weft: warn: pmap", kHolder, "(WEFT_COLLECTIVE_WARN)"});
  EXPECT_LT(seconds, 6.0) << "the call returns once the sleeper does";
  // The runtime stays usable.
  auto g = pmap([](Replica& r, const Array& x) { return r.psum(x, "i"); }, {.axis = "i", .runtime = &rt});
  EXPECT_EQ(g(Array::arange(4)).to_host().astype(DType::f32).to_vector<float>(), std::vector<float>(4, 6.0f));
}

TEST(FiberHold, ALockHeldAcrossACollectiveEndsTheProcessWithTheReportInsteadOfHanging) {
  // Replica 0 holds a std::mutex across a psum; replica 1, on the same worker, blocks on it: the worker can
  // never run replica 0 again. Before, this hung forever without a word (the child is killed at 60 s).
  if (!weft::testing::kChildrenMayStartThreads) GTEST_SKIP() << "ThreadSanitizer: no threads after a fork";
  weft::testing::TempDir dir;
  const weft::testing::ChildResult child = RunInForkedChild(
      [] {
        Runtime rt({.device_count = 4, .collective_warn_s = 0.3, .collective_timeout_s = 1.0, .scheduler = "fibers"});
        std::mutex m;
        auto f = pmap(
            [&m](Replica& r, const Array& x) {
              const int i = r.axis_index("i");
              if (i == 0) {
                std::lock_guard hold(m);
                return r.psum(x, "i");
              }
              if (i == 1) {
                std::lock_guard wait(m);  // replica 0 is suspended in psum, holding m
              }
              return r.psum(x, "i");
            },
            {.axis = "i", .runtime = &rt});
        try {
          f(Array::arange(4));
        } catch (const std::exception& e) {
          std::fprintf(stderr, "child: pmap returned an error: %s\n", e.what());
          return 2;
        }
        return 1;
      },
      std::chrono::seconds(60), dir.file("stderr"));
  EXPECT_EQ(child.status, 70) << child.stderr_text;
  weft::testing::ExpectContains(child.stderr_text, {"weft: warn: pmap", kHolder, "past the collective timeout",
                                                    "a deadlock", "Ending the process"});
  EXPECT_LT(child.seconds, 10.0) << "twice the 1 s timeout and a watchdog tick";
}

TEST(FiberHold, EveryRunIsWatchedNotOnlyTheFirst) {
  // The watchdog must tell one run from the next (their Watch lives at the same address): a second hold on
  // the same runtime times out too, naming its holder.
  Runtime rt({.device_count = 4, .collective_warn_s = 0.3, .collective_timeout_s = 1.0, .scheduler = "fibers"});
  auto f = pmap(
      [](Replica& r, const Array& x) {
        if (r.axis_index("i") == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1800));
        return r.psum(x, "i");
      },
      {.axis = "i", .runtime = &rt});
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    ::testing::internal::CaptureStderr();
    const std::string message = weft::testing::ErrorOf<TimeoutError>([&] { f(Array::arange(4)); });
    ::testing::internal::GetCapturedStderr();
    weft::testing::ExpectContains(message, {kHolder, kStarved, "not run since"});
  }
}

}  // namespace fiber_hold_test
}  // namespace
