// pmap called from several user threads at once, and from threads that a replica started (issue 8, items 1
// and 7). The first call of a pmapped function prepares its program; several threads making first calls at
// the same moment, with any mix of arities and shapes, must each get their own correct result. A pmap that
// cannot start (the runtime runs one execution at a time, and the one in flight waits for the caller) must
// end with an error within the collective timeout, never hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../support/replica_faults.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {

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
  // Several rounds, each with a fresh pmapped function: every round races on an empty program cache.
  constexpr int kRounds = 1000;
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
  for (int round = 0; round < 200; ++round) {
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

}  // namespace
}  // namespace weft
