// Reliability R23: the most common errors end with a one-line likely cause and the knob (or the code) to
// change. Golden texts, written out here independently of src/core/error_hints.hpp: a change of a hint is a
// deliberate change of this file too. Each error is produced the way users meet it (WEFT_FAULT for a stuck or
// mismatched replica, a replica returning early, bad settings).
#include <gtest/gtest.h>

#include <string>

#include "../support/replica_faults.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace error_hints_test {

using namespace weft::testing;

std::string LastLine(const std::string& text) {
  const std::size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

TEST(R23Hints, ACollectiveTimeoutSaysWhyAndWhichKnob) {
  Runtime rt({.device_count = 2, .collective_warn_s = 1, .collective_timeout_s = 1, .log_level = "error",
              .fault = "replica=1:at=0:hang"});
  const Outcome o = Timed([&] { PsumSteps(rt, 1)(Array::ones({2})); });
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.type, "TimeoutError") << o.message;
  EXPECT_EQ(LastLine(o.message),
            "  hint: the missing replicas are still in their own code (a long computation, a deadlock, a wait on "
            "something outside weft) or took a path without this collective; if they are only slow, raise "
            "WEFT_COLLECTIVE_TIMEOUT (seconds; 0 = never)")
      << o.message;
  EXPECT_EQ(CountOccurrences(o.message, "hint:"), 1) << "the hint is printed once, with the root cause: " << o.message;
}

TEST(R23Hints, AReplicaThatReturnedEarlySaysWhy) {
  Runtime rt({.device_count = 2, .collective_warn_s = 30, .collective_timeout_s = 30});
  auto step = pmap(
      [](Replica& r, const Array& x) {
        if (r.index() == 1) return x;  // skips the psum the other replica issues
        return r.psum(x, "i");
      },
      {.axis = "i", .runtime = &rt});
  const Outcome o = Timed([&] { step(Array::ones({2})); });
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.type, "PeerLostError") << o.message;
  EXPECT_EQ(LastLine(o.message),
            "  hint: the replicas took different paths: every replica must issue the same collectives in the same "
            "order (look for a return or a loop bound that depends on the replica's index or data)")
      << o.message;
}

TEST(R23Hints, AMismatchSaysWhy) {
  Runtime rt({.device_count = 2, .collective_warn_s = 30, .collective_timeout_s = 30, .log_level = "error",
              .fault = "replica=1:at=0:mismatch=dtype"});
  const Outcome o = Timed([&] { PsumSteps(rt, 1)(Array::ones({2})); });
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.type, "MismatchError") << o.message;
  EXPECT_EQ(LastLine(o.message),
            "  hint: the replicas called different collectives at the same point (a branch on the replica's index or "
            "data, a skipped or extra collective, or inputs of different shapes or dtypes); every replica must call "
            "the same collective with the same shape, dtype, reduce op and groups")
      << o.message;
}

// Errors that carried their knob before R23, kept so: each names the setting to change.
TEST(R23Hints, SettingErrorsNameTheirKnob) {
  EXPECT_EQ(Timed([] { Runtime rt({.device_count = 1, .collective_warn_s = 5, .collective_timeout_s = 2}); }).message,
            "the collective timeout (WEFT_COLLECTIVE_TIMEOUT, 2 s) must be >= the stall warning "
            "(WEFT_COLLECTIVE_WARN, 5 s); use 0 to disable the timeout");
  {
    ScopedEnv e("WEFT_DEVICE_COUNT", "abc");
    EXPECT_EQ(Timed([] { Runtime rt; }).message, "WEFT_DEVICE_COUNT=abc is not a device count between 1 and 4096");
  }
  // A nested pmap says what to do instead.
  Runtime rt({.device_count = 2});
  auto outer = pmap(
      [&](Replica& r, const Array& x) {
        auto inner = pmap([](Replica&, const Array& y) { return y; }, {.axis = "j", .runtime = &rt});
        if (r.index() == 0) inner(Array::ones({2}));
        return x;
      },
      {.axis = "i", .runtime = &rt});
  const Outcome o = Timed([&] { outer(Array::ones({2})); });
  EXPECT_TRUE(Contains(o.message, "use one program over a multi-axis mesh instead")) << o.message;
}

}  // namespace error_hints_test
}  // namespace
}  // namespace weft
