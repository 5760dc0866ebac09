// pmap called from several user threads at once, and from threads that a replica started (issue 8, items 1
// and 7). The first call of a pmapped function prepares its program; several threads making first calls at
// the same moment, with any mix of arities and shapes, must each get their own correct result. A pmap that
// cannot start (the runtime runs one execution at a time, and the one in flight waits for the caller) must
// end with an error within the collective timeout, never hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../support/replica_faults.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace concurrency_test {

using namespace std::chrono_literals;
using namespace weft::testing;

// Releases every waiting thread at once, so that first calls really overlap.
class StartLine {
 public:
  explicit StartLine(int threads) : waiting_(threads) {}
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    if (--waiting_ == 0) cv_.notify_all();
    cv_.wait(lock, [&] { return waiting_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int waiting_;
};

// ---------------------------------------------------------------------------------------------------
// Item 1: concurrent first calls.

TEST(ConcurrentFirstCalls, ManyThreadsFirstCallingOnePmapWithMixedSignatures) {
  Runtime rt({.device_count = 4, .collective_warn_s = 30, .collective_timeout_s = 30, .log_level = "error"});
  constexpr int kThreads = 8;
  // Several rounds, each with a fresh pmapped function: every round races on an empty program cache. Under a
  // sanitizer fewer: ThreadSanitizer reports a race from any one round whose accesses are unordered (it does
  // not need the race to go wrong, which is what the many rounds of a plain build fish for), and 1000 rounds
  // took 105 s there, the longest test of ./test.
  constexpr int kRounds = WEFT_TEST_UNDER_SANITIZER ? 150 : 1000;
  std::atomic<int> wrong{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  for (int round = 0; round < kRounds; ++round) {
    // A generic function: callable with 1, 2 or 3 arguments, so threads also race to create the per-arity
    // engines. Each replica returns the sum over the replicas of its arguments' element sum.
    auto f = pmap([](Replica& r, const auto&... xs) { return r.psum((xs.sum() + ...), "i"); },
                  {.axis = "i", .runtime = &rt});
    StartLine start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        // Thread t: arity 1 + t % 3, per-replica width 1 + t % 2 (two shapes per arity).
        const int arity = 1 + t % 3;
        const std::int64_t width = 1 + t % 2;
        const Array x = Array::full({4, width}, static_cast<double>(t + 1));
        start.arrive_and_wait();
        try {
          ShardedArray out = arity == 1 ? f(x) : arity == 2 ? f(x, x) : f(x, x, x);
          // Closed form: every replica's slice sums to width * (t + 1) per argument; psum over 4 replicas.
          const double expected = 4.0 * arity * static_cast<double>(width) * (t + 1);
          for (double v : out.to_host().to_doubles())
            if (v != expected) ++wrong;
        } catch (const std::exception& e) {
          std::lock_guard lock(failures_mutex);
          failures.push_back("thread " + std::to_string(t) + ": " + e.what());
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(failures.empty()) << failures.size() << " calls failed, the first: " << failures[0];
  // Each round prepares each of its 6 signatures (3 arities x 2 shapes) exactly once.
  EXPECT_EQ(rt.stats().preparations, static_cast<std::uint64_t>(kRounds * 6));
}

TEST(ConcurrentFirstCalls, CopiesOfAPmappedFunctionCalledConcurrently) {
  Runtime rt({.device_count = 2, .collective_warn_s = 30, .collective_timeout_s = 30, .log_level = "error"});
  constexpr int kThreads = 6;
  constexpr int kRounds = WEFT_TEST_UNDER_SANITIZER ? 60 : 200;  // as above
  for (int round = 0; round < kRounds; ++round) {
    auto f = pmap([](Replica& r, const Array& x) { return r.pmax(x, "i"); }, {.axis = "i", .runtime = &rt});
    std::vector<decltype(f)> copies(kThreads, f);  // copies share nothing that is filled without a lock
    StartLine start(kThreads);
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        const std::vector<double> got = copies[t](Array::arange(2) + static_cast<double>(t)).to_host().to_doubles();
        if (got != std::vector<double>{t + 1.0, t + 1.0}) ++wrong;
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(wrong.load(), 0) << "round " << round;
  }
}

// ---------------------------------------------------------------------------------------------------
// Item 7: a pmap called from a thread that a replica started. The runtime runs one execution at a time and
// the one in flight cannot end before its replica (which joins the thread) returns: the call must fail
// within the collective timeout (the wait for the runtime is a blocking wait like any other), and the outer
// execution must then end normally.

// Runs `f` on another thread; if it has not returned after `limit`, the runtime is deadlocked and nothing
// can unblock it: report and end the test binary instead of hanging until ctest's timeout.
void FinishesWithin(std::chrono::seconds limit, const std::function<void()>& f, const char* what) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread worker([f, done] {
    f();
    *done = true;
  });
  const auto start = Clock::now();
  while (!*done && Clock::now() - start < limit) std::this_thread::sleep_for(10ms);
  if (!*done) {
    ADD_FAILURE() << what << " did not return within " << limit.count() << " s: deadlock";
    std::fflush(stdout);
    std::_Exit(1);
  }
  worker.join();
}

TEST(PmapFromAReplicaThread, FailsWithinTheTimeoutInsteadOfDeadlocking) {
  Runtime rt({.device_count = 2, .collective_warn_s = 0.5, .collective_timeout_s = 1, .log_level = "error"});
  auto inner = pmap([](const Array& y) { return y * 2.0; }, {.axis = "j", .runtime = &rt, .name = "inner"});
  std::mutex m;
  std::vector<Outcome> seen(2);
  auto outer = pmap(
      [&](Replica& r, const Array& x) {
        Outcome o;
        std::thread t([&] { o = Timed([&] { inner(Array::arange(2)); }); });
        t.join();
        std::lock_guard lock(m);
        seen[r.index()] = o;
        return x + 1.0;
      },
      {.axis = "i", .runtime = &rt, .name = "outer"});
  Outcome call;
  FinishesWithin(20s, [&] { call = Timed([&] { outer(Array::arange(2)).to_host(); }); }, "the outer pmap");
  EXPECT_FALSE(call.threw) << call.message;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    ASSERT_TRUE(seen[r].threw);
    EXPECT_EQ(seen[r].type, "TimeoutError") << seen[r].message;
    EXPECT_GE(seen[r].seconds, 0.9);
    EXPECT_LT(seen[r].seconds, 2.5);
    ExpectContains(seen[r].message, {"inner: could not start within 1 s (WEFT_COLLECTIVE_TIMEOUT)",
                                     "outer is running", "completed no collective",
                                     "a pmap called from a thread that a replica started"});
  }
  // The runtime is still usable.
  EXPECT_EQ(inner(Array::arange(2)).to_host().to_doubles(), (std::vector<double>{0, 2}));
}

// The same wait is not a timeout while the execution in flight makes progress: a pmap from another user
// thread waits for a long run of collectives (3 s, three times the timeout) and then runs.
TEST(PmapFromAReplicaThread, AWaitBehindAnExecutionThatMakesProgressDoesNotTimeOut) {
  Runtime rt({.device_count = 2, .collective_warn_s = 1, .collective_timeout_s = 1, .log_level = "error"});
  std::atomic<bool> long_started{false};
  auto long_run = pmap(
      [&](Replica& r, const Array& x) {
        long_started = true;
        Array y = x;
        for (int s = 0; s < 30; ++s) {
          std::this_thread::sleep_for(100ms);
          y = r.pmax(y, "i");
        }
        return y;
      },
      {.axis = "i", .runtime = &rt, .name = "long"});
  auto quick = pmap([](Replica& r, const Array& x) { return r.psum(x, "i"); }, {.axis = "i", .runtime = &rt, .name = "quick"});
  Outcome first, second;
  FinishesWithin(20s,
                 [&] {
                   std::thread a([&] { first = Timed([&] { long_run(Array::arange(2)); }); });
                   while (!long_started) std::this_thread::sleep_for(1ms);
                   second = Timed([&] { EXPECT_EQ(quick(Array::arange(2)).to_host().to_doubles(), (std::vector<double>{1, 1})); });
                   a.join();
                 },
                 "the two pmaps");
  EXPECT_FALSE(first.threw) << first.message;
  EXPECT_FALSE(second.threw) << second.message;
  EXPECT_GE(second.seconds, 2.0) << "quick must have waited for long";
}

}  // namespace concurrency_test
}  // namespace
}  // namespace weft
