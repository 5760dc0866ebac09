// Settings (docs/settings.md; issue 8, items 2 and 9): every WEFT_* variable and RuntimeOptions field is
// validated once, when a Runtime is made, and a bad value is an InvalidArgument naming the setting and the
// value, never an abort, a silent default or "unlimited". A timeout below the default stall warning lowers
// the warning with it; only an explicit warning above an explicit timeout is rejected (R5). Resources the
// system refuses (threads for the devices) are a weft::Error naming what was asked.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "../support/replica_faults.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace settings_test {

using namespace std::chrono_literals;
using namespace weft::testing;

// Every variable this test sets, unset around each case so that the caller's environment cannot leak in.
struct CleanEnvironment {
  ScopedEnv a{"WEFT_DEVICE_COUNT", nullptr}, b{"WEFT_DEVICE_MEMORY", nullptr}, c{"WEFT_COLLECTIVE_WARN", nullptr},
      d{"WEFT_COLLECTIVE_TIMEOUT", nullptr}, e{"WEFT_LOG", nullptr}, f{"WEFT_TRACE", nullptr},
      g{"WEFT_TRACE_EVENTS", nullptr}, h{"WEFT_NUM_INSTANCES", nullptr}, i{"WEFT_NUM_REPLICAS", nullptr},
      j{"WEFT_SPLIT_BYTES", nullptr}, k{"WEFT_RING_BYTES", nullptr}, l{"WEFT_VERIFY", nullptr},
      m{"WEFT_SHARED_PRODUCTS", nullptr}, n{"WEFT_FLUSH_DENORMALS", nullptr};
};

Outcome MakeRuntime(RuntimeOptions options) {
  return Timed([&] { Runtime rt(options); });
}

// ---------------------------------------------------------------------------------------------------
// Bad values of each variable: an InvalidArgument naming it and the value.

struct BadValue {
  const char* variable;
  const char* value;
  std::vector<std::string> expected;  // in the message, besides "VARIABLE=value"
};

TEST(Settings, EveryBadEnvironmentValueIsRejectedNamingTheVariable) {
  const std::vector<BadValue> cases = {
      {"WEFT_DEVICE_COUNT", "abc", {"not a device count between 1 and 4096"}},
      {"WEFT_DEVICE_COUNT", "0", {"between 1 and 4096"}},
      {"WEFT_DEVICE_COUNT", "100000", {"between 1 and 4096"}},
      {"WEFT_DEVICE_MEMORY", "inf", {"byte count"}},
      {"WEFT_DEVICE_MEMORY", "1e30", {"at most"}},
      {"WEFT_DEVICE_MEMORY", "nan", {"byte count"}},
      {"WEFT_DEVICE_MEMORY", "-1", {"byte count"}},
      {"WEFT_DEVICE_MEMORY", "0.5", {"whole number of bytes"}},
      {"WEFT_DEVICE_MEMORY", "12X", {"byte count"}},
      {"WEFT_DEVICE_MEMORY", "9E", {"byte count"}},
      {"WEFT_COLLECTIVE_TIMEOUT", "soon", {"number of seconds"}},
      {"WEFT_COLLECTIVE_TIMEOUT", "inf", {"number of seconds"}},
      {"WEFT_COLLECTIVE_TIMEOUT", "-3", {"number of seconds"}},
      {"WEFT_COLLECTIVE_WARN", "nan", {"number of seconds"}},
      {"WEFT_LOG", "loud", {"error, warn, info or debug"}},
      {"WEFT_TRACE_EVENTS", "abc", {"number of events"}},
      {"WEFT_TRACE_EVENTS", "0", {"number of events"}},
      {"WEFT_NUM_INSTANCES", "abc", {"number of instances"}},
      {"WEFT_NUM_INSTANCES", "0", {"number of instances"}},
      {"WEFT_NUM_INSTANCES", "2.5", {"number of instances"}},
      {"WEFT_NUM_REPLICAS", "many", {"number of replicas"}},
      {"WEFT_SPLIT_BYTES", "big", {"byte count", "0 = every buffer"}},
      {"WEFT_SPLIT_BYTES", "-1", {"byte count"}},
      {"WEFT_SPLIT_BYTES", "0.5", {"whole number of bytes"}},
      {"WEFT_RING_BYTES", "1e30", {"at most 2^63 - 1 bytes"}},
      {"WEFT_RING_BYTES", "4X", {"byte count"}},
      {"WEFT_VERIFY", "yes", {"0 (off) or 1 (on"}},
      {"WEFT_VERIFY", "2", {"0 (off) or 1 (on"}},
      {"WEFT_SHARED_PRODUCTS", "3", {"0 (off), 1 (on) or 2"}},
      {"WEFT_SHARED_PRODUCTS", "on", {"0 (off), 1 (on) or 2"}},
      {"WEFT_FLUSH_DENORMALS", "2", {"0 (off: IEEE gradual underflow) or 1 (on: flush to zero)"}},
      {"WEFT_FLUSH_DENORMALS", "ftz", {"0 (off: IEEE gradual underflow) or 1"}},
  };
  for (const BadValue& c : cases) {
    SCOPED_TRACE(std::string(c.variable) + "=" + c.value);
    CleanEnvironment clean;
    ScopedEnv set(c.variable, c.value);
    const Outcome o = MakeRuntime({.device_count = 0});
    ASSERT_TRUE(o.threw) << "accepted";
    EXPECT_EQ(o.type, "InvalidArgument") << o.message;
    ExpectContains(o.message, {std::string(c.variable) + "=" + c.value});
    ExpectContains(o.message, c.expected);
  }
}

// Each RuntimeOptions of `cases` is refused with an InvalidArgument whose message holds its text.
void ExpectEachRefused(const std::vector<std::pair<RuntimeOptions, std::string>>& cases) {
  for (const auto& [options, expected] : cases) {
    SCOPED_TRACE(expected);
    const Outcome o = MakeRuntime(options);
    ASSERT_TRUE(o.threw) << "accepted";
    EXPECT_EQ(o.type, "InvalidArgument") << o.message;
    ExpectContains(o.message, {expected});
  }
}

TEST(Settings, EveryBadOptionIsRejectedNamingTheField) {
  CleanEnvironment clean;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<RuntimeOptions, std::string>> cases = {
      {{.device_count = 100000}, "RuntimeOptions::device_count = 100000"},
      {{.device_count = 2, .collective_timeout_s = nan}, "RuntimeOptions::collective_timeout_s = nan"},
      {{.device_count = 2, .collective_timeout_s = inf}, "RuntimeOptions::collective_timeout_s = inf"},
      {{.device_count = 2, .collective_warn_s = nan}, "RuntimeOptions::collective_warn_s = nan"},
      {{.device_count = 2, .log_level = "loud"}, "loud"},
      {{.device_count = 2, .split_bytes = -2}, "RuntimeOptions::split_bytes = -2 is not a byte count"},
      {{.device_count = 2, .ring_bytes = -5}, "RuntimeOptions::ring_bytes = -5 is not a byte count"},
      {{.device_count = 2, .verify = 3}, "RuntimeOptions::verify = 3 is not 0 (off) or 1 (on)"},
      {{.device_count = 2, .shared_products = 5}, "RuntimeOptions::shared_products = 5 is not 0 (off), 1 (on) or 2"},
      {{.device_count = 2, .flush_denormals = 2}, "RuntimeOptions::flush_denormals = 2 is not 0 (off) or 1 (on)"},
  };
  ExpectEachRefused(cases);
}

TEST(Settings, GoodValuesAreReadExactly) {
  CleanEnvironment clean;
  struct Memory {
    const char* value;
    std::int64_t bytes;
  };
  for (const Memory& m : std::vector<Memory>{{"0", 0}, {"4096", 4096}, {"1.5K", 1536}, {"2M", 2 << 20},
                                             {"3G", std::int64_t{3} << 30}, {"64KiB", 64 << 10}, {"100B", 100}}) {
    SCOPED_TRACE(m.value);
    ScopedEnv set("WEFT_DEVICE_MEMORY", m.value);
    Runtime rt({.device_count = 1});
    EXPECT_EQ(rt.options().device_memory, m.bytes);
  }
  {
    Runtime rt({.device_count = 1});
    EXPECT_EQ(rt.options().split_bytes, 256 << 10);  // the defaults
    EXPECT_EQ(rt.options().ring_bytes, 4 << 20);
    EXPECT_EQ(rt.options().verify, 1);
  }
  {
    ScopedEnv off("WEFT_VERIFY", "0");
    Runtime rt({.device_count = 1});
    EXPECT_EQ(rt.options().verify, 0);
  }
  {
    ScopedEnv split("WEFT_SPLIT_BYTES", "1K"), ring("WEFT_RING_BYTES", "8KiB");
    Runtime rt({.device_count = 1});
    EXPECT_EQ(rt.options().split_bytes, 1024);
    EXPECT_EQ(rt.options().ring_bytes, 8192);
    Runtime fields({.device_count = 1, .split_bytes = 0, .ring_bytes = 100});  // a field wins over the variable
    EXPECT_EQ(fields.options().split_bytes, 0);
    EXPECT_EQ(fields.options().ring_bytes, 100);
  }
  ScopedEnv instances("WEFT_NUM_INSTANCES", "1");
  ScopedEnv count("WEFT_DEVICE_COUNT", "3");
  Runtime rt;
  EXPECT_EQ(rt.device_count(), 3);
}

// Issue 21, item 14: one rule for negative fields. Each field's "unset" is 0 (device_count, trace_events) or
// -1 (the others, documented in runtime.hpp); every other negative value is refused naming the field, where
// before some fields took any negative as unset and others refused it.
TEST(Settings, NegativeFieldsOtherThanTheUnsetValueAreRefused) {
  CleanEnvironment clean;
  const std::vector<std::pair<RuntimeOptions, std::string>> cases = {
      {{.device_count = -1}, "RuntimeOptions::device_count = -1 is not a device count between 1 and 4096"},
      {{.device_count = 2, .device_memory = -2}, "RuntimeOptions::device_memory = -2 is not a byte count"},
      {{.device_count = 2, .collective_warn_s = -2}, "RuntimeOptions::collective_warn_s = -2 is not a number of seconds"},
      {{.device_count = 2, .collective_timeout_s = -0.5},
       "RuntimeOptions::collective_timeout_s = -0.5 is not a number of seconds"},
      {{.device_count = 2, .trace_events = -1}, "RuntimeOptions::trace_events = -1"},
      {{.device_count = 2, .flight_recorder = -2}, "RuntimeOptions::flight_recorder = -2"},
  };
  ExpectEachRefused(cases);
  // The unset values still take the environment.
  ScopedEnv memory("WEFT_DEVICE_MEMORY", "1K"), warn("WEFT_COLLECTIVE_WARN", "7"), timeout("WEFT_COLLECTIVE_TIMEOUT", "9");
  Runtime rt({.device_count = 1, .device_memory = -1, .collective_warn_s = -1, .collective_timeout_s = -1});
  EXPECT_EQ(rt.options().device_memory, 1024);
  EXPECT_EQ(rt.options().collective_warn_s, 7);
  EXPECT_EQ(rt.options().collective_timeout_s, 9);
}

// Issue 21, item 14: surrounding whitespace around a number is ignored in every WEFT_* variable (before, a
// leading space was skipped and a trailing one refused).
TEST(Settings, SurroundingWhitespaceIsIgnoredInEveryNumber) {
  CleanEnvironment clean;
  ScopedEnv flight_clean("WEFT_FLIGHT_RECORDER", nullptr);
  for (const std::string& pad : {std::string(" %s"), std::string("%s "), std::string(" \t%s\n ")}) {
    auto padded = [&](const char* v) {
      std::string out = pad;
      out.replace(out.find("%s"), 2, v);
      return out;
    };
    SCOPED_TRACE("'" + padded("N") + "'");
    const std::string count = padded("3"), memory = padded("2K"), warn = padded("20"), timeout = padded("40"),
                      events = padded("10"), split = padded("1K"), ring = padded("8K"), verify = padded("0"),
                      flight = padded("5"), instances = padded("1"), replicas = padded("3");
    ScopedEnv a("WEFT_DEVICE_COUNT", count.c_str()), b("WEFT_DEVICE_MEMORY", memory.c_str()),
        c("WEFT_COLLECTIVE_WARN", warn.c_str()), d("WEFT_COLLECTIVE_TIMEOUT", timeout.c_str()),
        e("WEFT_TRACE_EVENTS", events.c_str()), f("WEFT_SPLIT_BYTES", split.c_str()),
        g("WEFT_RING_BYTES", ring.c_str()), h("WEFT_VERIFY", verify.c_str()), i("WEFT_FLIGHT_RECORDER", flight.c_str()),
        j("WEFT_NUM_INSTANCES", instances.c_str()), k("WEFT_NUM_REPLICAS", replicas.c_str());
    const RuntimeOptions o = RuntimeOptions{}.resolved();
    EXPECT_EQ(o.device_count, 3);
    EXPECT_EQ(o.device_memory, 2048);
    EXPECT_EQ(o.collective_warn_s, 20);
    EXPECT_EQ(o.collective_timeout_s, 40);
    EXPECT_EQ(o.trace_events, 10);
    EXPECT_EQ(o.split_bytes, 1024);
    EXPECT_EQ(o.ring_bytes, 8192);
    EXPECT_EQ(o.verify, 0);
    EXPECT_EQ(o.flight_recorder, 5);
  }
  // Whitespace inside a number is still a mistake.
  ScopedEnv inside("WEFT_DEVICE_MEMORY", "2 K");
  const Outcome o = MakeRuntime({.device_count = 1});
  ASSERT_TRUE(o.threw) << "accepted";
  ExpectContains(o.message, {"WEFT_DEVICE_MEMORY=2 K is not a byte count"});
}

// ---------------------------------------------------------------------------------------------------
// The timeout and the warning.

TEST(Settings, ATimeoutBelowTheDefaultWarningLowersTheWarning) {
  CleanEnvironment clean;
  {
    ScopedEnv timeout("WEFT_COLLECTIVE_TIMEOUT", "5");
    Runtime rt({.device_count = 1});
    EXPECT_EQ(rt.options().collective_timeout_s, 5);
    EXPECT_EQ(rt.options().collective_warn_s, 5);
  }
  {
    Runtime rt({.device_count = 1, .collective_timeout_s = 0.5});
    EXPECT_EQ(rt.options().collective_timeout_s, 0.5);
    EXPECT_EQ(rt.options().collective_warn_s, 0.5);
  }
  {
    Runtime rt({.device_count = 1, .collective_timeout_s = 60});  // above the default warning: unchanged
    EXPECT_EQ(rt.options().collective_warn_s, 30);
  }
  // An explicit warning above an explicit timeout is still a mistake (R5), from either source.
  {
    ScopedEnv warn("WEFT_COLLECTIVE_WARN", "10");
    const Outcome o = MakeRuntime({.device_count = 1, .collective_timeout_s = 5});
    EXPECT_EQ(o.type, "InvalidArgument") << o.message;
    ExpectContains(o.message, {"WEFT_COLLECTIVE_TIMEOUT, 5 s", "WEFT_COLLECTIVE_WARN, 10 s"});
  }
}

TEST(Settings, ZeroDisablesTheStallWarning) {
  CleanEnvironment clean;
  ScopedEnv warn("WEFT_COLLECTIVE_WARN", "0");
  Runtime rt({.device_count = 2, .collective_timeout_s = 5, .log_level = "warn"});
  EXPECT_EQ(rt.options().collective_warn_s, 0);
  auto step = pmap(
      [](Replica& r, const Array& x) {
        if (r.index() == 1) std::this_thread::sleep_for(300ms);
        return r.psum(x, "i");
      },
      {.axis = "i", .runtime = &rt});
  ::testing::internal::CaptureStderr();
  const Outcome o = Timed([&] { step(Array::arange(2)); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(o.threw) << o.message;
  EXPECT_FALSE(Contains(err, "stalled")) << err;
}

// ---------------------------------------------------------------------------------------------------
// Threads the system refuses.

// Virtual memory of this process, in bytes.
std::int64_t AddressSpaceInUse() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0;
  statm >> pages;
  return pages * ::sysconf(_SC_PAGESIZE);
}

// In a child process: an address-space limit leaves room for a few dozen thread stacks, not 4096. Exits 3
// on a weft::Error, 4 on another exception, 5 and 6 when the check could not run.
[[noreturn]] void StartMoreDevicesThanTheLimitAllows() {
  const rlim_t limit = static_cast<rlim_t>(AddressSpaceInUse() + (std::int64_t{512} << 20));
  const rlimit rl{limit, limit};
  if (::setrlimit(RLIMIT_AS, &rl) != 0) std::_Exit(5);
  try {
    Runtime rt({.device_count = 4096, .log_level = "error", .scheduler = "threads"});  // a thread per device
    std::_Exit(6);
  } catch (const Error& e) {
    std::fprintf(stderr, "weft::Error: %s\n", e.what());
    std::_Exit(3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "other exception: %s\n", e.what());
    std::_Exit(4);
  }
}

TEST(Settings, ThreadsTheSystemRefusesAreAClearError) {
  if (WEFT_TEST_UNDER_SANITIZER) GTEST_SKIP() << "a sanitizer reserves more address space than the limit";
  EXPECT_EXIT(StartMoreDevicesThanTheLimitAllows(), ::testing::ExitedWithCode(3),
              "weft::Error: cannot start the worker thread of CpuDevice\\(id=[0-9]+, process=0\\).*of 4096 devices");
}

}  // namespace settings_test
}  // namespace
}  // namespace weft
