// Reliability R21: the flight recorder. Every replica keeps its last WEFT_FLIGHT_RECORDER collectives; when
// its function fails and WEFT_DUMP names a directory it writes them as JSON, and scripts/flight_analyze.py
// lines the dumps up and names the replica that never reached the stuck collective. The stuck replica is
// injected with WEFT_FAULT (R3's scenario); the expected texts are written out here, independently of the
// runtime and the analyzer.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../support/replica_faults.hpp"
#include "../support/temp_dir.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace flight_recorder_test {

using namespace weft::testing;
using namespace std::chrono_literals;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Analysis {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs the bundled analyzer (Debian's python3, standard library only) on `args`.
Analysis Analyze(const std::string& args) {
  const std::string script = std::string(WEFT_TEST_DATA) + "/../../scripts/flight_analyze.py";
  Analysis a;
  std::FILE* p = ::popen(("/usr/bin/python3 " + script + " " + args + " 2>&1").c_str(), "r");
  if (!p) return a;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) a.output.append(buf, n);
  const int raw = ::pclose(p);
  a.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return a;
}

std::vector<std::string> Dumps(const TempDir& dir) {
  std::vector<std::string> out;
  for (const std::string& e : dir.entries())
    if (e.rfind("weft-flight.", 0) == 0) out.push_back(e);
  return out;
}

std::vector<std::string> DumpNames(std::initializer_list<int> replicas) {
  std::vector<std::string> out;
  for (int r : replicas) out.push_back("weft-flight.0." + std::to_string(r) + ".json");
  return out;
}

// R3's scenario: replica 2 hangs before its collective #5 (of 8 psums) until the others' 1 s timeout aborts
// the run; every replica that failed dumps, and the analyzer names replica 2.
TEST(R21FlightRecorder, StuckReplicaIsNamedByTheAnalyzerOfTheDumps) {
  TempDir dir;
  Runtime rt({.device_count = 4, .collective_warn_s = 1, .collective_timeout_s = 1, .log_level = "error",
              .fault = "replica=2:at=5:hang", .dump_dir = dir.path()});
  auto step = PsumSteps(rt, 8);
  const Outcome o = Timed([&] { step(Array::ones({4, 3})); });
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.type, "TimeoutError") << o.message;
  EXPECT_LT(o.seconds, 4.0) << "the dumps are written within the abort, not after it";
  // Replicas 0, 1, 3 timed out; replica 2 came late, was aborted at once, and dumped as well.
  EXPECT_EQ(Dumps(dir), DumpNames({0, 1, 2, 3}));

  const std::string d0 = ReadFile(dir.file("weft-flight.0.0.json"));
  ExpectContains(d0, {"\"weft_flight_recorder\": 1", "\"instance\": 0", "\"replica\": 0", "\"replicas\": 4",
                      "\"capacity\": 64", "\"recorded\": 6",
                      "{\"execution\": 0, \"execution_name\": \"pmap\", \"seq\": 0, \"op\": \"psum\", \"group\": [0, 1, 2, 3]",
                      "\"dtype\": \"float32\", \"count\": 3, \"state\": \"completed\"",
                      "\"seq\": 5, \"op\": \"psum\"", "\"state\": \"failed\", \"entered_after_abort\": false",
                      "timed out after 1 s (WEFT_COLLECTIVE_TIMEOUT)", "replica_faults.hpp:183"});
  // The first waiter to time out aborts the others: each waiter failed with one or the other.
  EXPECT_TRUE(Contains(d0, "\"error_type\": \"TimeoutError\"") || Contains(d0, "\"error_type\": \"AbortedError\""))
      << d0;
  EXPECT_EQ(CountOccurrences(d0, "\"state\": \"completed\""), 5) << d0;
  const std::string d2 = ReadFile(dir.file("weft-flight.0.2.json"));
  ExpectContains(d2, {"\"seq\": 5, \"op\": \"psum\"", "\"entered_after_abort\": true", "\"error_type\": \"AbortedError\""});

  const Analysis a = Analyze(dir.path());
  EXPECT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(FirstLine(a.output), "stuck at seq=5 in group [0, 1, 2, 3]: missing: [2]") << a.output;
  ExpectContains(a.output, {"arrived: [0, 1, 3]", "replica 2: last completed seq=4, came to seq=5 only after the "
                                                  "execution was aborted",
                            "TimeoutError on ["});
}

// The analyzer tolerates lost and broken dumps: the missing replica's own dump gone, a truncated file.
TEST(R21FlightRecorder, AnalyzerToleratesMissingAndBrokenDumps) {
  TempDir dir;
  Runtime rt({.device_count = 4, .collective_warn_s = 1, .collective_timeout_s = 1, .log_level = "error",
              .fault = "replica=2:at=3:hang", .dump_dir = dir.path()});
  auto step = PsumSteps(rt, 6);
  ASSERT_TRUE(Timed([&] { step(Array::ones({4})); }).threw);
  ASSERT_EQ(Dumps(dir), DumpNames({0, 1, 2, 3}));
  std::filesystem::remove(dir.file("weft-flight.0.2.json"));
  {
    std::ofstream broken(dir.file("weft-flight.0.9.json"));
    broken << "{\"weft_flight_recorder\": 1, \"rec";
  }
  const Analysis a = Analyze(dir.path());
  EXPECT_EQ(a.status, 0) << a.output;
  ExpectContains(a.output, {"stuck at seq=3 in group [0, 1, 2, 3]: missing: [2]\n",
                            "replica 2: no dump (its process ended, or the dump was lost): counted as missing",
                            "no dump from replicas [2]", "weft-flight.0.9.json: unreadable"});
  // Nothing to analyze is an error, not an empty report.
  TempDir empty;
  const Analysis none = Analyze(empty.path());
  EXPECT_EQ(none.status, 2) << none.output;
  ExpectContains(none.output, {"no flight-recorder dump found in " + empty.path()});
}

// The ring keeps the last N collectives over the runtime's life; a replica that threw in its own code (here,
// injected before its collective #9) is the one the others' dumps show missing.
TEST(R21FlightRecorder, RingKeepsTheLastNAndAThrowingReplicaIsMissing) {
  TempDir dir;
  Runtime rt({.device_count = 4, .log_level = "error", .fault = "replica=1:at=9:throw", .flight_recorder = 4,
              .dump_dir = dir.path()});
  auto step = PsumSteps(rt, 4);
  step(Array::ones({4}));  // execution 0: collectives 0..3
  step(Array::ones({4}));  // execution 1: collectives 4..7
  const Outcome o = Timed([&] { step(Array::ones({4})); });  // execution 2: replica 1 throws before #9 (seq 1)
  ASSERT_TRUE(o.threw);
  EXPECT_LT(o.seconds, 5.0);
  EXPECT_EQ(Dumps(dir), DumpNames({0, 1, 2, 3}));
  const std::string d0 = ReadFile(dir.file("weft-flight.0.0.json"));
  ExpectContains(d0, {"\"capacity\": 4", "\"recorded\": 10", "\"execution\": 2,",
                      "{\"execution\": 1, \"execution_name\": \"pmap\", \"seq\": 2", "\"seq\": 2, \"op\": \"psum\"",
                      "\"error_type\": \"AbortedError\""});
  EXPECT_EQ(CountOccurrences(d0, "{\"execution\": "), 4) << "only the last 4 records: " << d0;
  EXPECT_EQ(CountOccurrences(d0, "{\"execution\": 1,"), 2) << d0;
  const std::string d1 = ReadFile(dir.file("weft-flight.0.1.json"));
  ExpectContains(d1, {"\"recorded\": 9", "\"error\": \"", "throws before its collective #9"});
  EXPECT_EQ(CountOccurrences(d1, "\"state\": \"failed\""), 0) << "replica 1 failed outside collectives: " << d1;

  const Analysis a = Analyze(dir.path());
  EXPECT_EQ(FirstLine(a.output), "stuck at seq=1 in group [0, 1, 2, 3]: missing: [1]") << a.output;
  ExpectContains(a.output, {"replica 1: last completed seq=0", "AbortedError on [0, 2, 3]",
                            "its error: std::runtime_error: WEFT_FAULT \"replica=1:at=9:throw\""});
}

// A mismatch fails the collective with everyone there: nobody is missing, and the analyzer says so.
TEST(R21FlightRecorder, AMismatchHasNobodyMissing) {
  TempDir dir;
  Runtime rt({.device_count = 2, .log_level = "error", .fault = "replica=1:at=1:mismatch", .dump_dir = dir.path()});
  ASSERT_EQ(Timed([&] { PsumSteps(rt, 3)(Array::ones({2})); }).type, "MismatchError");
  EXPECT_EQ(Dumps(dir), DumpNames({0, 1}));
  const Analysis a = Analyze(dir.path());
  EXPECT_EQ(FirstLine(a.output), "failed at seq=1 in group [0, 1]: every replica arrived") << a.output;
  ExpectContains(a.output, {"arrived: [0, 1]", "MismatchError on [0, 1]"});
  EXPECT_FALSE(Contains(a.output, "missing")) << a.output;
}

// A dump that cannot be written is reported on stderr, naming the file and the reason, and changes nothing
// else: the program's error is the root cause, within the same bound.
TEST(R21FlightRecorder, AFailedDumpIsReportedAndDoesNotMaskTheError) {
  auto dir = std::make_unique<TempDir>();
  const std::string path = dir->path();
  Runtime rt({.device_count = 2, .collective_warn_s = 1, .collective_timeout_s = 1, .log_level = "error",
              .fault = "replica=1:at=1:hang", .dump_dir = path});
  dir.reset();  // the directory is gone by the time the dumps are written
  auto step = PsumSteps(rt, 3);
  ::testing::internal::CaptureStderr();
  const Outcome o = Timed([&] { step(Array::ones({2})); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.type, "TimeoutError") << o.message;
  EXPECT_LT(o.seconds, 4.0);
  ExpectContains(err, {"weft: error: WEFT_DUMP: cannot create a temporary file in '" + path + "' to write '" + path +
                       "/weft-flight.0.0.json': No such file or directory (this replica's flight recorder is not dumped)"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A name planted in WEFT_DUMP (a shared directory) cannot redirect a dump (issue 21, item 8): before, the dump
// went to the fixed name weft-flight.<instance>.<replica>.json.tmp with O_CREAT|O_TRUNC, following a symlink
// there to its target. Now the temporary file has an unpredictable name and is created O_EXCL|O_NOFOLLOW.
TEST(R21FlightRecorder, ADumpNeverFollowsAPlantedSymlink) {
  TempDir dir, elsewhere;
  const std::string victim = elsewhere.file("victim");
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::symlink(victim.c_str(), dir.file("weft-flight.0.0.json.tmp").c_str()), 0);
  Runtime rt({.device_count = 2, .collective_warn_s = 1, .collective_timeout_s = 1, .log_level = "error",
              .fault = "replica=1:at=1:throw", .dump_dir = dir.path()});
  auto step = PsumSteps(rt, 3);
  ASSERT_TRUE(Timed([&] { step(Array::ones({2})); }).threw);
  EXPECT_EQ(ReadFile(victim), "precious\n");
  ExpectContains(ReadFile(dir.file("weft-flight.0.0.json")), {"\"weft_flight_recorder\": 1", "\"replica\": 0"});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"weft-flight.0.0.json", "weft-flight.0.0.json.tmp", "weft-flight.0.1.json"}));
}

std::int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// The rings grow as collectives are recorded, up to WEFT_FLIGHT_RECORDER (issue 21, item 11): before, a
// runtime allocated and filled every ring's records up front (about 170 bytes each: 1.4 GB for 10^6 records
// on 8 devices, 340 MB on the 2 here).
TEST(R21FlightRecorder, RingsGrowAsTheyFill) {
  const std::int64_t before = ResidentBytes();
  Runtime rt({.device_count = 2, .flight_recorder = 1000000});
  const std::int64_t grown = ResidentBytes() - before;
  EXPECT_LT(grown, 32 << 20) << "a runtime of 2 devices with WEFT_FLIGHT_RECORDER=1000000 took " << grown << " bytes";
  auto step = PsumSteps(rt, 5);
  step(Array::ones({2}));
}

// The child of the test below: fills a ring under an address-space limit and says how it ended.
void ExhaustAFlightRing() {
  Runtime rt({.device_count = 1, .log_level = "error", .flight_recorder = 1000000});
  auto step = PsumSteps(rt, 1);
  step(Array::ones({1}));
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0;
  statm >> pages;
  const rlimit limit{pages * ::sysconf(_SC_PAGESIZE) + (48 << 20), RLIM_INFINITY};
  ::setrlimit(RLIMIT_AS, &limit);
  try {
    auto many = PsumSteps(rt, 400000);
    many(Array::ones({1}));
    std::fprintf(stderr, "no error\n");
  } catch (const OutOfMemoryError& e) {
    std::fprintf(stderr, "OutOfMemoryError: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "other: %s\n", e.what());
  }
  std::fflush(stderr);
  std::_Exit(0);
}

// Running out of memory while a ring grows is an OutOfMemoryError naming the setting, not std::bad_alloc.
// In a child re-executed by gtest (a clean process) under an address-space limit a few tens of MB above
// what it uses; 400k recorded collectives need more than that.
TEST(R21FlightRecorder, OutOfMemoryWhileARingGrowsNamesTheSetting) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "an address-space limit does not work under the sanitizers' shadow memory";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExhaustAFlightRing(), ::testing::ExitedWithCode(0), "OutOfMemoryError: .*WEFT_FLIGHT_RECORDER");
}

// Settings: validated at construction naming the variable; a successful run writes nothing; 0 turns it off.
TEST(R21FlightRecorder, SettingsAreValidated) {
  for (const char* bad : {"abc", "-1", "1.5", "1000001"}) {
    ScopedEnv e("WEFT_FLIGHT_RECORDER", bad);
    const Outcome o = Timed([] { Runtime rt({.device_count = 1}); });
    EXPECT_EQ(o.type, "InvalidArgument") << bad;
    EXPECT_EQ(o.message, std::string("WEFT_FLIGHT_RECORDER=") + bad +
                             " is not a number of collectives between 0 and 1000000 (0 turns the flight recorder off)");
  }
  EXPECT_EQ(Timed([] { Runtime rt({.device_count = 1, .flight_recorder = 2000000}); }).message,
            "RuntimeOptions::flight_recorder = 2000000 is not a number of collectives between 0 and 1000000 "
            "(0 turns the flight recorder off, -1 takes WEFT_FLIGHT_RECORDER)");
  {
    ScopedEnv e("WEFT_DUMP", "/nonexistent-weft-dump-dir");
    const Outcome o = Timed([] { Runtime rt({.device_count = 1}); });
    EXPECT_EQ(o.type, "InvalidArgument");
    EXPECT_EQ(o.message, "WEFT_DUMP=/nonexistent-weft-dump-dir is not a directory (flight-recorder dumps are written there)");
  }
  TempDir dir;
  {
    ScopedEnv e("WEFT_DUMP", dir.path().c_str());
    ScopedEnv off("WEFT_FLIGHT_RECORDER", "0");
    const Outcome o = Timed([] { Runtime rt({.device_count = 1}); });
    EXPECT_EQ(o.message, "WEFT_DUMP=" + dir.path() +
                             " asks for flight-recorder dumps but WEFT_FLIGHT_RECORDER=0 records nothing; unset one of them");
  }
  {
    ScopedEnv e("WEFT_DUMP", dir.path().c_str());
    ScopedEnv n("WEFT_FLIGHT_RECORDER", "7");
    Runtime rt({.device_count = 2});
    EXPECT_EQ(rt.options().flight_recorder, 7);
    EXPECT_EQ(rt.options().dump_dir, dir.path());
    auto step = PsumSteps(rt, 2);
    step(Array::ones({2}));
    EXPECT_TRUE(dir.entries().empty()) << "a run that does not fail dumps nothing";
  }
  Runtime defaults({.device_count = 1});
  EXPECT_EQ(defaults.options().flight_recorder, 64);
  EXPECT_EQ(defaults.options().dump_dir, "");
}

}  // namespace flight_recorder_test
}  // namespace
}  // namespace weft
