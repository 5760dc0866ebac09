// Data that leaves the devices (issue 8, item 10): device-to-host streams never hand out data a replica did
// not write, and the WEFT_TRACE timeline is bounded (a ring of the last WEFT_TRACE_EVENTS spans) and reports
// a failed write instead of losing it silently.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../support/replica_faults.hpp"
#include "../support/temp_dir.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace host_io_test {

using namespace weft::testing;

// ---------------------------------------------------------------------------------------------------
// Device-to-host streams.

TEST(HostStreams, AReplicaThatNeverWroteAStreamIsAnErrorNamingBoth) {
  Runtime rt({.device_count = 4, .log_level = "error"});
  Session s({.replicas = 4, .runtime = &rt});
  HostStream y = s.d2h_stream({2}, DType::i32, "y");
  const Outcome o = Timed([&] {
    s.run([&](Replica& r) {
      if (r.index() != 2) r.host_store(y, Array::full({2}, r.index(), DType::i32));
    });
  });
  ASSERT_TRUE(o.threw) << "replica 2's rows came back as zeros";
  EXPECT_EQ(o.type, "InvalidArgument") << o.message;
  ExpectContains(o.message, {"session: run(): ", "replica 2 (CpuDevice(id=2, process=0)) wrote 0 of 1 transfers",
                             "device-to-host stream y"});
}

TEST(HostStreams, TooFewTransfersAreAnError) {
  Runtime rt({.device_count = 2, .log_level = "error"});
  Session s({.replicas = 2, .num_host_transfers = 3, .runtime = &rt});
  HostStream y = s.d2h_stream({}, DType::f32, "loss");
  const Outcome o = Timed([&] {
    s.run([&](Replica& r) {
      for (int t = 0; t < (r.index() == 1 ? 2 : 3); ++t) r.host_store(y, Array::scalar(t));
    });
  });
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.type, "InvalidArgument") << o.message;
  ExpectContains(o.message, {"replica 1 (CpuDevice(id=1, process=0)) wrote 2 of 3 transfers", "stream loss"});
}

TEST(HostStreams, AStreamNoReplicaWroteIsNotReturned) {
  Runtime rt({.device_count = 2, .log_level = "error"});
  Session s({.replicas = 2, .runtime = &rt});
  HostStream written = s.d2h_stream({3}, DType::f32, "written"), unused = s.d2h_stream({3}, DType::f32, "unused");
  auto outs = s.run([&](Replica& r) { r.host_store(written, Array::full({3}, r.index() + 1.0)); });
  EXPECT_EQ(outs.count(unused), 0u) << "an unwritten stream came back (as zeros)";
  ASSERT_EQ(outs.count(written), 1u);
  EXPECT_EQ(outs.at(written).to_doubles(), (std::vector<double>{1, 1, 1, 2, 2, 2}));
}

// ---------------------------------------------------------------------------------------------------
// WEFT_TRACE.

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A program of `steps` psums over 2 replicas, traced into `path`: 4 spans per step (a psum and its wait per
// replica).
void RunTraced(const std::string& path, int steps) {
  Runtime rt({.device_count = 2, .log_level = "error", .trace_path = path});
  auto f = pmap(
      [&](Replica& r, const Array& x) {
        Array y = x;
        for (int s = 0; s < steps; ++s) y = r.psum(y, "i");
        return y;
      },
      {.axis = "i", .runtime = &rt});
  f(Array::ones({2}));
}

TEST(Trace, TheTimelineKeepsTheLastEventsAsARing) {
  const std::string path = "/tmp/weft-trace-ring-" + std::to_string(::getpid()) + ".json";
  {
    ScopedEnv events("WEFT_TRACE_EVENTS", "10");
    RunTraced(path, 20);  // 80 spans
  }
  const std::string text = ReadFile(path);
  std::remove(path.c_str());
  nlohmann::json trace;
  ASSERT_NO_THROW(trace = nlohmann::json::parse(text)) << text.substr(0, 300);
  ASSERT_EQ(trace["traceEvents"].size(), 10u) << text.substr(0, 300);
  EXPECT_EQ(trace["otherData"]["dropped_events"], 70) << text.substr(0, 300);
  // The kept spans are the last ones: 10 spans are the last 2.5 steps, the last of 20 (seq 19, or 20 counted
  // from 1) included.
  std::set<int> seqs;
  for (const auto& e : trace["traceEvents"])
    if (e["name"] == "psum") seqs.insert(e["args"]["seq"].get<int>());
  ASSERT_FALSE(seqs.empty());
  EXPECT_GE(*seqs.begin(), 17) << "older spans were kept";
  EXPECT_GE(*seqs.rbegin(), 19) << "the last spans were dropped";
}

TEST(Trace, WithinTheBoundNothingIsDropped) {
  const std::string path = "/tmp/weft-trace-all-" + std::to_string(::getpid()) + ".json";
  RunTraced(path, 5);
  const std::string text = ReadFile(path);
  std::remove(path.c_str());
  const nlohmann::json trace = nlohmann::json::parse(text);
  EXPECT_EQ(trace["traceEvents"].size(), 20u);
  EXPECT_FALSE(trace.contains("otherData"));
}

// A symlink planted at the trace's name is replaced, never written through; the trace keeps the mode of
// the file it replaces (issue 21, items 8 and 9). Before, fopen(path, "w") wrote into the link's target.
TEST(Trace, APlantedSymlinkIsNotFollowed) {
  TempDir dir;
  const std::string victim = dir.file("victim"), path = dir.file("trace.json");
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  RunTraced(path, 1);
  EXPECT_EQ(ReadFile(victim), "precious\n");
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(nlohmann::json::parse(ReadFile(path))["traceEvents"].size(), 4u);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  RunTraced(path, 1);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST(Trace, AFailedWriteIsReported) {
  ::testing::internal::CaptureStderr();
  RunTraced("/dev/full", 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  // A device is never replaced by the renamed trace (issue 21, item 8): refused, naming it.
  ExpectContains(err, {"weft: error: WEFT_TRACE: cannot write '/dev/full': it is not a regular file (a character device)"});
  // A folder that is not there is known when the runtime is made (issue 45, item 13): refused then, since the
  // runtime may never end (a Python session's), which would leave the mistake unreported.
  try {
    RunTraced("/nonexistent-dir/t.json", 2);
    ADD_FAILURE() << "a trace into a missing folder was accepted";
  } catch (const InvalidArgument& e) {
    ExpectContains(e.what(), {"trace_path = /nonexistent-dir/t.json: its folder /nonexistent-dir is not a directory"});
  }
}

}  // namespace host_io_test
}  // namespace
}  // namespace weft
