// Reliability R22: WEFT_DEBUG (OFF, WARN, INFO, TRACE onto the WEFT_LOG levels), WEFT_DEBUG_SUBSYS (which
// subsystems' info and trace lines are kept), WEFT_DEBUG_FILE (a file per process), and the tags of every
// line (UTC time, [proc P/replica R]). Each level is run on the same program (a replica slowed by WEFT_FAULT
// past the stall warning, so there is a warn line to see) and the known lines of each level are looked for,
// present or absent. Expected texts are written out here, not taken from the runtime.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../support/replica_faults.hpp"
#include "../support/temp_dir.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace debug_log_test {

using namespace weft::testing;

// One run at `level`: replica 1 sleeps 0.4 s before its first psum (warning at 0.1 s). `timeout_s` makes the
// configuration of each run differ from the previous ones (it is printed once per configuration).
std::string RunAt(const char* level, double timeout_s, const char* subsys = nullptr) {
  ScopedEnv debug("WEFT_DEBUG", level);
  ScopedEnv filter("WEFT_DEBUG_SUBSYS", subsys);
  ScopedEnv log("WEFT_LOG", nullptr);
  ScopedEnv gemm("WEFT_GEMM", nullptr);
  ::testing::internal::CaptureStderr();
  {
    Runtime rt({.device_count = 2, .collective_warn_s = 0.1, .collective_timeout_s = timeout_s,
                .fault = "replica=1:at=0:hang=0.4"});
    auto step = PsumSteps(rt, 2);
    step(Array::ones({2}));
  }
  return ::testing::internal::GetCapturedStderr();
}

// Whether `line` starts with the tags of debug mode: "2026-12-01T05:00:01.123456Z [proc 0/replica 1] weft: warn: "
// (the replica where known). Checked by hand: std::regex trips g++ 12's -Wmaybe-uninitialized under ASan.
bool Tagged(const std::string& line) {
  const std::string time = "dddd-dd-ddTdd:dd:dd.ddddddZ ";
  if (line.size() < time.size()) return false;
  for (std::size_t i = 0; i < time.size(); ++i) {
    const bool digit = line[i] >= '0' && line[i] <= '9';
    if (time[i] == 'd' ? !digit : line[i] != time[i]) return false;
  }
  std::string rest = line.substr(time.size());
  if (rest.rfind("[proc 0/replica ", 0) == 0 && rest.size() > 17 && rest[16] >= '0' && rest[16] <= '9' && rest[17] == ']')
    rest = rest.substr(18);
  else if (rest.rfind("[proc 0]", 0) == 0)
    rest = rest.substr(8);
  else
    return false;
  for (const char* level : {" weft: error: ", " weft: warn: ", " weft: info: ", " weft: debug: "})
    if (rest.rfind(level, 0) == 0) return true;
  return false;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

void ExpectEveryLineTagged(const std::string& text) {
  for (const std::string& l : Lines(text)) EXPECT_TRUE(Tagged(l)) << "untagged line: " << l;
}

TEST(R22DebugLevels, TheTagCheckCanFail) {
  EXPECT_TRUE(Tagged("2026-12-01T05:00:01.123456Z [proc 0/replica 1] weft: warn: x"));
  EXPECT_TRUE(Tagged("2026-12-01T05:00:01.123456Z [proc 0] weft: info: x"));
  EXPECT_FALSE(Tagged("weft: warn: x"));
  EXPECT_FALSE(Tagged("2026-12-01T05:00:01.123456Z weft: warn: x"));
  EXPECT_FALSE(Tagged("2026-12-01T05:00:01.12345Z [proc 0] weft: warn: x"));
  EXPECT_FALSE(Tagged("  replica 1 (CpuDevice(id=1, process=0)): last completed seq=none"));
}

TEST(R22DebugLevels, EachLevelShowsItsLinesAndNoMore) {
  const std::string stall = "weft: warn: pmap: stalled for 0.1 s (WEFT_COLLECTIVE_WARN) at psum(";
  const std::string config = "weft: info: [init] config: WEFT_DEBUG=";
  const std::string trace = "weft: debug: [coll] pmap #0: seq 1 psum(float32[], axes (i), op=sum) at ";

  const std::string off = RunAt("OFF", 31);
  EXPECT_EQ(off, "") << "OFF prints nothing but errors";

  const std::string warn = RunAt("warn", 32);  // (any case)
  ExpectContains(warn, {"] weft: warn: WEFT_FAULT \"replica=1:at=0:hang=0.4\": replica 1", stall});
  EXPECT_FALSE(Contains(warn, "weft: info:")) << warn;
  EXPECT_FALSE(Contains(warn, "weft: debug:")) << warn;
  ExpectEveryLineTagged(warn);
  // The fault's line is written by replica 1's thread, and says so.
  EXPECT_TRUE(Contains(warn, "[proc 0/replica 1] weft: warn: WEFT_FAULT")) << warn;

  const std::string info = RunAt("INFO", 33);
  ExpectContains(info, {stall, config + "INFO (environment)", "[init] config: WEFT_LOG=info (from WEFT_DEBUG)",
                        "[init] config: WEFT_DEVICE_COUNT=2 (RuntimeOptions::device_count)",
                        "[init] config: WEFT_COLLECTIVE_TIMEOUT=33 s (RuntimeOptions::collective_timeout_s)",
                        "[init] config: WEFT_FLIGHT_RECORDER=64 collectives (default)",
                        "[init] config: WEFT_DEBUG_FILE=unset (stderr) (default)",
                        "[init] config: WEFT_SCHEDULER=",
                        "[init] config: WEFT_FIBER_STACK=8388608 bytes (default)",
                        "[init] config: WEFT_SPLIT_BYTES=262144 bytes (default)",
                        "[init] config: WEFT_RING_BYTES=4194304 bytes (default)",
                        "[init] config: WEFT_VERIFY=1 (on) (default)",
                        "[init] config: WEFT_SHARED_PRODUCTS=0 (off) (default)",
                        "[init] config: WEFT_SHARED_RUNS=1 (on) (default)",
                        "[init] config: WEFT_FLUSH_DENORMALS=0 (IEEE gradual underflow) (default)",
                        "[init] config: WEFT_GEMM=auto (default)",
                        "[init] config: WEFT_FUSION=auto (default)",
                        "[init] config: WEFT_MALLOC_TUNING=0 (malloc as the process set it) (default)",
                        "[init] config: WEFT_NUM_INSTANCES=unset (not launched by weftrun)",
                        "[proc 0] weft: info: [launch] a single process (no launcher), pid " + std::to_string(::getpid()),
                        "weft: info: [mem] 2 devices of unlimited memory each (WEFT_DEVICE_MEMORY)"});
  EXPECT_EQ(CountOccurrences(info, "weft: info: [init] config: "), 28) << info;  // every setting (core/settings.cc)
  EXPECT_FALSE(Contains(info, "weft: debug:")) << info;
  ExpectEveryLineTagged(info);

  const std::string all = RunAt("TRACE", 34);
  ExpectContains(all, {stall, config + "TRACE (environment)", trace, "weft: debug: [coll] pmap #0: starts on 2 local replicas of 2"});
  // Every collective of every replica: 2 psums x 2 replicas.
  EXPECT_EQ(CountOccurrences(all, "weft: debug: [coll] pmap #0: seq "), 4) << all;
  EXPECT_TRUE(Contains(all, "[proc 0/replica 0] weft: debug: [coll] pmap #0: seq 0 psum(")) << all;
  ExpectEveryLineTagged(all);
}

TEST(R22DebugLevels, TheConfigurationIsPrintedOncePerProcess) {
  ScopedEnv debug("WEFT_DEBUG", "INFO");
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) Runtime rt({.device_count = 1, .collective_timeout_s = 41});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountOccurrences(err, "config: WEFT_DEVICE_COUNT=1"), 1) << err;
}

TEST(R22DebugLevels, SubsystemsFilterInfoAndTraceButNeverWarnings) {
  const std::string coll = RunAt("TRACE", 35, "coll");
  ExpectContains(coll, {"weft: debug: [coll] pmap #0: seq 1 psum(", "weft: warn: pmap: stalled for 0.1 s"});
  EXPECT_FALSE(Contains(coll, "[init]")) << coll;
  EXPECT_FALSE(Contains(coll, "[launch]")) << coll;

  const std::string init = RunAt("TRACE", 36, "init, launch");
  ExpectContains(init, {"[init] config: WEFT_DEBUG_SUBSYS=init, launch (environment)", "[launch] a single process",
                        "weft: warn: WEFT_FAULT"});
  EXPECT_FALSE(Contains(init, "[coll]")) << init;
  EXPECT_FALSE(Contains(init, "[mem]")) << init;
}

// WEFT_DEBUG_FILE: %h, %p and %r (the instance: 0 alone) give one file per process; nothing goes to stderr.
TEST(R22DebugLevels, TheFilePatternNamesOneFilePerProcess) {
  TempDir dir;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string pattern = dir.path() + "/weft.%h.%p.%r.log";
  const std::string expected = std::string("weft.") + host + "." + std::to_string(::getpid()) + ".0.log";
  {
    ScopedEnv debug("WEFT_DEBUG", "INFO");
    ScopedEnv file("WEFT_DEBUG_FILE", pattern.c_str());
    ::testing::internal::CaptureStderr();
    {
      Runtime rt({.device_count = 2, .collective_timeout_s = 42});
      Runtime again({.device_count = 2, .collective_timeout_s = 43});  // the same file, appended to
    }
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{expected});
  std::ifstream in(dir.file(expected));
  std::stringstream text;
  text << in.rdbuf();
  ExpectContains(text.str(), {"config: WEFT_DEBUG_FILE=" + pattern + " (environment)",
                              "config: WEFT_COLLECTIVE_TIMEOUT=42 s", "config: WEFT_COLLECTIVE_TIMEOUT=43 s"});
  ExpectEveryLineTagged(text.str());
  // A runtime without the setting writes to stderr again, untagged.
  ::testing::internal::CaptureStderr();
  {
    Runtime rt({.device_count = 2, .collective_warn_s = 0.1, .collective_timeout_s = 5, .fault = "replica=1:at=0:hang=0.3"});
    PsumSteps(rt, 1)(Array::ones({2}));
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.rfind("weft: warn: WEFT_FAULT", 0), 0u) << err;
}

TEST(R22DebugLevels, SettingsAreValidatedNamingTheVariables) {
  auto error_of = [](std::initializer_list<std::pair<const char*, const char*>> vars) {
    std::vector<std::unique_ptr<ScopedEnv>> set;
    for (auto [name, value] : vars) set.push_back(std::make_unique<ScopedEnv>(name, value));
    return Timed([] { Runtime rt({.device_count = 1}); });
  };
  Outcome o = error_of({{"WEFT_DEBUG", "INFO"}, {"WEFT_LOG", "warn"}});
  EXPECT_EQ(o.type, "InvalidArgument");
  EXPECT_EQ(o.message, "WEFT_DEBUG=INFO and WEFT_LOG=warn disagree: WEFT_DEBUG=INFO means WEFT_LOG=info; set only one of them");
  EXPECT_FALSE(error_of({{"WEFT_DEBUG", "TRACE"}, {"WEFT_LOG", "debug"}}).threw) << "agreeing settings are fine";
  EXPECT_EQ(error_of({{"WEFT_DEBUG", "LOUD"}}).message, "WEFT_DEBUG=LOUD is not a debug level: use OFF, WARN, INFO or TRACE (any case) (docs/settings.md, \"Settings\")");
  EXPECT_EQ(error_of({{"WEFT_DEBUG_SUBSYS", "init,gpu"}}).message,
            "WEFT_DEBUG_SUBSYS=init,gpu: \"gpu\" is not a subsystem; use a comma-separated list of init, coll, mem, launch");
  EXPECT_EQ(error_of({{"WEFT_DEBUG_FILE", "/tmp/w.%q"}}).message,
            "WEFT_DEBUG_FILE=/tmp/w.%q: \"%q\" is not a pattern; use %h (host), %p (pid), %r (instance) or %%");
  o = error_of({{"WEFT_DEBUG_FILE", "/nonexistent-weft-dir/log.%p"}});
  EXPECT_EQ(o.message, "WEFT_DEBUG_FILE: cannot open /nonexistent-weft-dir/log." + std::to_string(::getpid()) +
                           ": No such file or directory");
  // A field wins over a variable; two fields must agree.
  {
    ScopedEnv debug("WEFT_DEBUG", "TRACE");
    Runtime rt({.device_count = 1, .log_level = "error"});
    EXPECT_EQ(rt.options().log_level, "error");
  }
  o = Timed([] { Runtime rt({.device_count = 1, .log_level = "warn", .debug = "TRACE"}); });
  EXPECT_EQ(o.message, "RuntimeOptions::debug = TRACE and RuntimeOptions::log_level = warn disagree: "
                       "RuntimeOptions::debug = TRACE means WEFT_LOG=debug; set only one of them");
}

// WEFT_DEBUG_FILE in a shared directory (issue 21, item 8): a symlink planted at its name is refused, and its
// target left as it was; so is a FIFO (without blocking). Before, the log was appended through the link.
TEST(R22DebugLevels, TheDebugFileRefusesASymlinkOrAFifo) {
  TempDir dir;
  const std::string victim = dir.file("victim"), link = dir.file("weft.log"), fifo = dir.file("fifo.log");
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  {
    ScopedEnv debug("WEFT_DEBUG", "INFO");
    ScopedEnv file("WEFT_DEBUG_FILE", link.c_str());
    const Outcome o = Timed([] { Runtime rt({.device_count = 1}); });
    EXPECT_EQ(o.type, "InvalidArgument");
    EXPECT_EQ(o.message, "WEFT_DEBUG_FILE: cannot open " + link + ": it is a symbolic link (weft does not write through one)");
  }
  {
    ScopedEnv debug("WEFT_DEBUG", "INFO");
    ScopedEnv file("WEFT_DEBUG_FILE", fifo.c_str());
    const Outcome o = Timed([] { Runtime rt({.device_count = 1}); });
    EXPECT_LT(o.seconds, 2.0);
    EXPECT_EQ(o.message, "WEFT_DEBUG_FILE: cannot open " + fifo + ": it is not a regular file");
  }
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "precious");
}

}  // namespace debug_log_test
}  // namespace
}  // namespace weft
