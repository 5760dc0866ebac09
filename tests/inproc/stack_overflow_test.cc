// A replica that overflows its stack (reliability, issue 21 item 7; runtime/stack_guard.hpp): the process
// still dies of SIGSEGV, as before, but first says which replica overflowed, how large its stack was and
// the setting that raises it, under both schedulers. Before: a bare "Segmentation fault". Each case runs in a
// forked child that makes its own runtime. Not in the sanitizer builds (their runtimes report overflows).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>

#include "../support/errors.hpp"
#include "../support/forked_child.hpp"
#include "../support/replica_faults.hpp"  // ScopedEnv
#include "../support/temp_dir.hpp"
#include "weft/weft.hpp"

namespace {
namespace stack_overflow_test {

using namespace weft;

// Recursion that cannot be turned into a loop: a kilobyte of live stack per level.
int Deep(int n) {
  volatile char pad[1024];
  pad[0] = static_cast<char>(n);
  return n <= 0 ? pad[0] : Deep(n - 1) + pad[0];
}

weft::testing::ChildResult OverflowReplica2(const char* scheduler, std::int64_t fiber_stack, const std::string& log) {
  return weft::testing::RunInForkedChild(
      [=] {
        Runtime rt({.device_count = 4, .scheduler = scheduler, .fiber_stack_bytes = fiber_stack});
        auto f = pmap(
            [](Replica& r, const Array& x) {
              if (r.axis_index("i") == 2) return Array::scalar(Deep(1 << 30));
              return r.psum(x, "i");
            },
            {.axis = "i", .runtime = &rt});
        f(Array::arange(4));
        return 1;
      },
      std::chrono::seconds(60), log);
}

bool Sanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

TEST(StackOverflow, AFiberOverflowNamesTheReplicaItsStackAndTheSetting) {
  if (Sanitized()) GTEST_SKIP() << "the sanitizers report stack overflows themselves";
  weft::testing::TempDir dir;
  const auto child = OverflowReplica2("fibers", 256 << 10, dir.file("stderr"));
  EXPECT_EQ(child.status, 200 + SIGSEGV) << child.stderr_text;
  weft::testing::ExpectContains(child.stderr_text, {"weft: fatal: replica 2 overflowed its stack (256 KiB, a fiber)",
                                                    "WEFT_FIBER_STACK"});
}

TEST(StackOverflow, AThreadOverflowNamesTheReplicaAndUlimit) {
  if (Sanitized()) GTEST_SKIP() << "the sanitizers report stack overflows themselves";
  weft::testing::TempDir dir;
  const auto child = OverflowReplica2("threads", -1, dir.file("stderr"));
  EXPECT_EQ(child.status, 200 + SIGSEGV) << child.stderr_text;
  weft::testing::ExpectContains(child.stderr_text, {"weft: fatal: replica 2 overflowed its stack (",
                                                    "its thread under WEFT_SCHEDULER=threads", "ulimit -s"});
}

TEST(StackOverflow, TheFiberStackSettingIsValidated) {
  weft::testing::ExpectContains(weft::testing::ErrorOf<InvalidArgument>([] { Runtime rt({.fiber_stack_bytes = 1000}); }),
                                {"RuntimeOptions::fiber_stack_bytes = 1000", "at least 64 KiB"});
}

TEST(StackOverflow, TheFiberStackVariableIsValidatedAndUsed) {
  {
    weft::testing::ScopedEnv small("WEFT_FIBER_STACK", "32K");
    weft::testing::ExpectContains(weft::testing::ErrorOf<InvalidArgument>([] { Runtime rt({.device_count = 2}); }),
                                  {"WEFT_FIBER_STACK=32K", "at least 64 KiB"});
  }
  {
    weft::testing::ScopedEnv bad("WEFT_FIBER_STACK", "deep");
    weft::testing::ExpectContains(weft::testing::ErrorOf<InvalidArgument>([] { Runtime rt({.device_count = 2}); }),
                                  {"WEFT_FIBER_STACK=deep"});
  }
  weft::testing::ScopedEnv one_meg("WEFT_FIBER_STACK", "1M");
  Runtime rt({.device_count = 2});
  EXPECT_EQ(rt.options().fiber_stack_bytes, 1 << 20);
}

}  // namespace stack_overflow_test
}  // namespace
