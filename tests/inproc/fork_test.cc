// fork() after a runtime has run (reliability: a forked child must never hang; src/runtime/fork_guard.hpp).
// A child has only the thread that forked: a runtime made before the fork has no workers left. Each test
// forks after real pmaps ran (so the runtime's threads or fiber helpers exist), runs the child's part with
// a time bound enforced by the parent, and checks what the child reported through its exit status.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "../support/forked_child.hpp"
#include "weft/weft.hpp"

namespace {
namespace fork_test {

using namespace weft;

using weft::testing::ChildResult;
using weft::testing::RunInForkedChild;

Array Normalized(const ShardedArray& y) { return y.to_host(); }

// The expected psum of arange(4) over 4 replicas: every replica holds 0+1+2+3.
bool AllSixes(const Array& a) {
  const std::vector<float> v = a.astype(DType::f32).to_vector<float>();
  for (float x : v)
    if (x != 6.0f) return false;
  return v.size() == 4;
}

auto Psum() {
  return [](Replica& r, const Array& x) { return r.psum(x, "i"); };
}

TEST(Fork, AChildRefusesTheParentsRuntimeAtOnceNamingTheFork) {
  for (const char* scheduler : {"fibers", "threads"}) {
    SCOPED_TRACE(scheduler);
    Runtime rt({.device_count = 4, .scheduler = scheduler});
    auto f = pmap(Psum(), {.axis = "i", .runtime = &rt});
    ASSERT_TRUE(AllSixes(Normalized(f(Array::arange(4)))));  // the runtime's workers exist and have run
    const auto start = std::chrono::steady_clock::now();
    const int status = RunInForkedChild(
        [&] {
          try {
            f(Array::arange(4));
          } catch (const InvalidArgument& e) {
            const std::string m = e.what();
            const bool named = m.find("this weft runtime was made by process " + std::to_string(getppid())) !=
                                   std::string::npos &&
                               m.find("forked from it") != std::string::npos && m.find("'spawn'") != std::string::npos;
            if (!named) std::fprintf(stderr, "child: message: %s\n", m.c_str());
            return named ? 0 : 2;
          }
          return 1;  // ran on a runtime without workers?
        },
        std::chrono::seconds(30)).status;
    EXPECT_EQ(status, 0) << "(1: no error, 2: the message did not name the fork, -1: the child hung)";
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_TRUE(AllSixes(Normalized(f(Array::arange(4))))) << "the parent's runtime still works";
  }
}

TEST(Fork, TheCurrentRuntimeIsMadeAfreshInAChildWithTheSameOptions) {
  if (!weft::testing::kChildrenMayStartThreads) GTEST_SKIP() << "ThreadSanitizer: no threads after a fork";
  for (const char* scheduler : {"fibers", "threads"}) {
    SCOPED_TRACE(scheduler);
    Runtime rt({.device_count = 4, .scheduler = scheduler});
    auto f = pmap(Psum(), {.axis = "i"});  // no runtime named: Runtime::current()
    ASSERT_TRUE(AllSixes(Normalized(f(Array::arange(4)))));
    const int status = RunInForkedChild(
        [&] {
          if (&Runtime::current() == &rt) return 3;  // the parent's, which has no workers here
          if (Runtime::current().device_count() != 4 || Runtime::current().options().scheduler != scheduler) return 4;
          return AllSixes(Normalized(f(Array::arange(4)))) ? 0 : 5;
        },
        std::chrono::seconds(30)).status;
    EXPECT_EQ(status, 0) << "(3: the inherited runtime, 4: other options, 5: a wrong result, -1: the child hung)";
    EXPECT_EQ(&Runtime::current(), &rt) << "the parent keeps its own";
  }
}

}  // namespace fork_test
}  // namespace
