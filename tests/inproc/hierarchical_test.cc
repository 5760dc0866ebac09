// The hierarchical algorithms (collectives/hierarchical.cc: agreement, transport all-reduce, pair exchange,
// ring, allgatherv exchange, mismatch report) over the in-process transport: each simulated process is a
// thread holding some replicas, so these paths run in the in-process tier and under the sanitizers. The
// case table and its naive reference are tests/support/hierarchical_cases.hpp, which
// tests/mpi/hierarchical_program.cc runs over the MPI transport too. Then the failure paths: a mismatch
// names both calls, an absent process times out within its bound naming it, a failed process or an
// aborted execution ends the others' waits with the cause.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "../support/errors.hpp"
#include "../support/hierarchical_cases.hpp"
#include "transport/inproc/inproc_interprocess.hpp"
#include "weft/error.hpp"

namespace weft::testing {
namespace {
namespace hierarchical_test {

using Clock = std::chrono::steady_clock;
using transport::InprocJob;
using transport::Interprocess;
using transport::PollContext;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Runs body(endpoint) on one thread per simulated process and joins them.
void OnEveryProcess(InprocJob& job, const std::function<void(Interprocess&)>& body) {
  std::vector<std::thread> threads;
  for (int p = 0; p < job.size(); ++p) threads.emplace_back([&job, &body, p] { body(job.endpoint(p)); });
  for (std::thread& t : threads) t.join();
}

// A poll context as the runtime makes it: replicas named globally in reports.
PollContext PollFor(const HierarchicalCase& c, const CaseData& d, double timeout_s,
                    std::function<bool()> aborted = {}) {
  return PollContext(timeout_s, std::move(aborted), [name = CaseName(c)] { return name; }, 0,
                     [process_of = d.process_of](int process) {
                       std::vector<int> replicas;
                       for (std::size_t r = 0; r < process_of.size(); ++r)
                         if (process_of[r] == process) replicas.push_back(static_cast<int>(r));
                       return replicas;
                     },
                     "last completed seq=6");
}

// Processes that went around the ring, over every case run so far (RunCase).
std::atomic<int> rings{0};

// Runs case c on every process of `job` as round `round`; each replica's output goes to outputs[r], every
// process's errors and wrong results to failures[p].
void RunCase(const HierarchicalCase& c, const CaseData& d, InprocJob& job, std::uint64_t round,
             std::vector<Array>& outputs, std::vector<std::string>& failures, bool share_memory = true) {
  OnEveryProcess(job, [&](Interprocess& endpoint) {
    const int p = endpoint.rank();
    try {
      CountingInterprocess counted(endpoint, share_memory);
      bool ring_ran = false;
      std::vector<Array> mine = RunOnProcess(c, d, counted, round, PollFor(c, d, 60), &ring_ran);
      if (ring_ran) ++rings;
      const std::string path = CheckPath(c, d, p, counted, ring_ran);
      if (!path.empty()) failures[static_cast<std::size_t>(p)] += path + "\n";
      References references(c, d);
      for (int r = 0; r < d.num_replicas; ++r) {
        if (d.process_of[static_cast<std::size_t>(r)] != p) continue;
        const std::string wrong = Compare(c, d, r, mine[static_cast<std::size_t>(r)], references);
        if (!wrong.empty()) failures[static_cast<std::size_t>(p)] += wrong + "\n";
        outputs[static_cast<std::size_t>(r)] = std::move(mine[static_cast<std::size_t>(r)]);
      }
    } catch (const std::exception& e) {
      failures[static_cast<std::size_t>(p)] += std::string("process ") + std::to_string(p) + " threw: " + e.what();
    }
  });
}

// Runs case c on a fresh job: every replica gets the reference, and all members of a group hold bitwise the
// same all-reduce result, whichever process holds them (the noisy cases are where a path summing in a
// process-dependent order would break this). With `share_memory` false the transport declines shared
// regions, as for processes on different hosts.
void CheckCase(const HierarchicalCase& c, bool share_memory) {
  const CaseData d = PrepareCase(c);
  InprocJob job(static_cast<int>(c.split.size()));
  std::vector<Array> outputs(static_cast<std::size_t>(d.num_replicas));
  std::vector<std::string> failures(c.split.size());
  RunCase(c, d, job, 7, outputs, failures, share_memory);
  for (const std::string& f : failures) EXPECT_EQ(f, "");
  if (c.kind != collectives::Kind::all_reduce) return;
  for (const auto& members : d.groups->groups())
    for (int m : members) {
      const Array& a = outputs[static_cast<std::size_t>(members[0])];
      const Array& b = outputs[static_cast<std::size_t>(m)];
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.nbytes()), 0)
          << "replicas " << members[0] << " and " << m << " of one group differ";
    }
}

class Hierarchical : public ::testing::TestWithParam<HierarchicalCase> {};
TEST_P(Hierarchical, EveryReplicaGetsTheReference) { CheckCase(GetParam(), true); }

// The pair exchange runs through memory both processes map when the transport offers it (threads here,
// processes on one host under MPI); processes on different hosts copy the partials instead.
class PairWithoutSharedMemory : public ::testing::TestWithParam<HierarchicalCase> {};
TEST_P(PairWithoutSharedMemory, EveryReplicaGetsTheReference) { CheckCase(GetParam(), false); }

// The table, less its heavy cases in the sanitizer builds (GCC's and Clang's spellings).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

std::vector<HierarchicalCase> TableCases() {
  std::vector<HierarchicalCase> cases = HierarchicalCases();
  if (kSanitized) std::erase_if(cases, [](const HierarchicalCase& c) { return c.heavy; });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Table, Hierarchical, ::testing::ValuesIn(TableCases()),
                         [](const ::testing::TestParamInfo<HierarchicalCase>& info) { return CaseName(info.param); });

std::vector<HierarchicalCase> PairCases() {
  std::vector<HierarchicalCase> cases = TableCases();
  std::erase_if(cases, [](const HierarchicalCase& c) { return c.path != "pair"; });
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Table, PairWithoutSharedMemory, ::testing::ValuesIn(PairCases()),
                         [](const ::testing::TestParamInfo<HierarchicalCase>& info) { return CaseName(info.param); });

// With small thresholds (WEFT_SPLIT_BYTES=1K, WEFT_RING_BYTES=8K) every path runs on buffers of a few KiB,
// in every build: the ring must actually have run, and the test says at which sizes each path ran.
TEST(HierarchicalInproc, SmallThresholdsRunThePairExchangeAndTheRingOnSmallBuffers) {
  std::map<std::string, std::set<std::size_t>> sizes_of_path;
  const int rings_before = rings.load();
  for (const HierarchicalCase& c : SmallThresholdCases()) {
    CheckCase(c, true);
    if (c.path == "pair") CheckCase(c, false);
    sizes_of_path[c.path].insert(static_cast<std::size_t>(num_elements(c.shape)) * dtype_size(c.dtype));
  }
  const int ring_processes = rings.load() - rings_before;
  std::string report;
  for (const auto& [path, sizes] : sizes_of_path) {
    std::string list;
    for (std::size_t bytes : sizes) list += (list.empty() ? "" : ", ") + std::to_string(bytes);
    report += path + " path ran for sizes " + list + " bytes; ";
    RecordProperty(path + "_sizes", list);
  }
  std::cout << "[ small thresholds: split " << kSmallThresholds.split_bytes << ", ring " << kSmallThresholds.ring_bytes
            << " bytes ] " << report << "the ring ran on " << ring_processes << " processes\n";
  RecordProperty("ring_processes", ring_processes);
  EXPECT_GT(ring_processes, 0) << "the ring path did not run";
  EXPECT_EQ(sizes_of_path.count("pair"), 1u);
}

// A job runs many collectives in a row: operations keep matching by their order on each process set,
// across sets (groups spanning different processes) and paths.
TEST(HierarchicalInproc, SuccessiveRoundsOnOneJob) {
  InprocJob job(3);
  std::uint64_t round = 0;
  for (const HierarchicalCase& c : HierarchicalCases()) {
    if (c.split != std::vector<int>{1, 2, 1} || c.shape != Shape{24, 12}) continue;  // the small ones: quick
    const CaseData d = PrepareCase(c);
    std::vector<Array> outputs(static_cast<std::size_t>(d.num_replicas));
    std::vector<std::string> failures(3);
    RunCase(c, d, job, round++, outputs, failures);
    for (const std::string& f : failures) ASSERT_EQ(f, "") << "round " << round - 1;
  }
  EXPECT_GT(round, 20u);
}

HierarchicalCase SmallSum(std::vector<int> split, Shape shape = {24, 12}) {
  HierarchicalCase c;
  c.split = std::move(split);
  c.shape = std::move(shape);
  return c;
}

TEST(HierarchicalInproc, AMismatchAcrossProcessesNamesBothCalls) {
  const HierarchicalCase ours = SmallSum({2, 2}), theirs = SmallSum({2, 2}, {12, 24});
  const CaseData our_data = PrepareCase(ours), their_data = PrepareCase(theirs);
  InprocJob job(2);
  std::vector<std::string> errors(2);
  OnEveryProcess(job, [&](Interprocess& endpoint) {
    const bool second = endpoint.rank() == 1;
    const HierarchicalCase& c = second ? theirs : ours;
    const CaseData& d = second ? their_data : our_data;
    errors[static_cast<std::size_t>(endpoint.rank())] =
        ErrorOf<MismatchError>([&] { RunOnProcess(c, d, endpoint, 3, PollFor(c, d, 60)); });
  });
  for (const std::string& e : errors)
    ExpectContains(e, {"collective mismatch across processes at ", "process 0 called all_reduce(float32[24,12]",
                       "process 1 called all_reduce(float32[12,24]"});
}

TEST(HierarchicalInproc, AProcessThatNeverArrivesTimesOutNamingIt) {
  const HierarchicalCase c = SmallSum({1, 2, 1});
  const CaseData d = PrepareCase(c);
  InprocJob job(3);
  std::vector<std::string> errors(2);
  std::vector<double> seconds(2);
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p)
    threads.emplace_back([&, p] {
      const Clock::time_point start = Clock::now();
      errors[static_cast<std::size_t>(p)] =
          ErrorOf<TimeoutError>([&] { RunOnProcess(c, d, job.endpoint(p), 0, PollFor(c, d, 0.3)); });
      seconds[static_cast<std::size_t>(p)] = SecondsSince(start);
      // A wait was abandoned: the endpoint refuses further use instead of matching out of step.
      ExpectContains(ErrorOf<AbortedError>([&] { RunOnProcess(c, d, job.endpoint(p), 1, PollFor(c, d, 0.3)); }),
                     {"unusable after an abandoned collective"});
    });
  for (std::thread& t : threads) t.join();
  for (int p = 0; p < 2; ++p) {
    ExpectContains(errors[static_cast<std::size_t>(p)],
                   {"process " + std::to_string(p) + " timed out after 0.3 s", "waiting for process 2",
                    "arrived: [0, 1, 2]; missing: [3]", "process 2, replica 3: last completed seq=6"});
    EXPECT_GE(seconds[static_cast<std::size_t>(p)], 0.29);
    EXPECT_LT(seconds[static_cast<std::size_t>(p)], 2.0);
  }
}

TEST(HierarchicalInproc, AFailedProcessEndsTheOthersWaitsWithItsCause) {
  const HierarchicalCase c = SmallSum({1, 2, 1});
  const CaseData d = PrepareCase(c);
  InprocJob job(3);
  const std::string cause = "instance 2: replica 3 (CpuDevice(id=3, process=2)) failed: boom";
  std::vector<std::string> errors(2);
  std::vector<double> seconds(2);
  OnEveryProcess(job, [&](Interprocess& endpoint) {
    const int p = endpoint.rank();
    if (p == 2) {  // never reaches the collective; its program failed
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      endpoint.mark_failed(cause);
      EXPECT_FALSE(endpoint.peer_failed());  // its own failure is not a peer's
      return;
    }
    const Clock::time_point start = Clock::now();
    errors[static_cast<std::size_t>(p)] =
        ErrorOf<AbortedError>([&] { RunOnProcess(c, d, endpoint, 0, PollFor(c, d, 60)); });
    seconds[static_cast<std::size_t>(p)] = SecondsSince(start);
    EXPECT_TRUE(endpoint.peer_failed());
  });
  for (int p = 0; p < 2; ++p) {
    ExpectContains(errors[static_cast<std::size_t>(p)], {"process " + std::to_string(p) + " stopped at ", " because " + cause});
    EXPECT_LT(seconds[static_cast<std::size_t>(p)], 2.0);
  }
}

TEST(HierarchicalInproc, AnAbortedExecutionEndsTheWait) {
  const HierarchicalCase c = SmallSum({2, 2});
  const CaseData d = PrepareCase(c);
  InprocJob job(2);
  std::atomic<bool> aborted{false};
  std::string error;
  const Clock::time_point start = Clock::now();
  std::thread waiter([&] {
    error = ErrorOf<AbortedError>(
        [&] { RunOnProcess(c, d, job.endpoint(0), 0, PollFor(c, d, 60, [&aborted] { return aborted.load(); })); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  aborted = true;
  waiter.join();
  ExpectContains(error, {"process 0 stopped waiting for process 1 at ", ": the execution was aborted"});
  EXPECT_LT(SecondsSince(start), 2.0);
}

// The transport itself: messages between two processes match in the order sent, also when one side sends
// before the other posts its receive, and separately per process set.
TEST(InprocTransport, SendrecvMatchesMessagesInOrderPerProcessSet) {
  InprocJob job(3);
  const std::vector<int> pair = {0, 1}, all = {0, 1, 2};
  std::vector<std::vector<int>> received(2);
  OnEveryProcess(job, [&](Interprocess& endpoint) {
    const int p = endpoint.rank();
    if (p == 2) return;
    if (p == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // process 0's sends wait for it
    const PollContext poll(10);
    for (int k = 0; k < 3; ++k) {
      int out = 100 * p + k, in = -1;
      // Alternate sets: a message on one set never satisfies a receive on the other.
      const std::vector<int>& set = k == 1 ? all : pair;
      endpoint.sendrecv(set, 1 - p, &out, sizeof out, 1 - p, &in, sizeof in, poll);
      received[static_cast<std::size_t>(p)].push_back(in);
    }
  });
  EXPECT_EQ(received[0], (std::vector<int>{100, 101, 102}));
  EXPECT_EQ(received[1], (std::vector<int>{0, 1, 2}));
}

TEST(InprocTransport, CollectivesAgreeGatherAndReduceInProcessOrder) {
  InprocJob job(3);
  OnEveryProcess(job, [&](Interprocess& endpoint) {
    const int p = endpoint.rank();
    const std::vector<int> all = {0, 1, 2};
    const PollContext poll(10);
    EXPECT_TRUE(endpoint.agree(all, 42, poll));
    EXPECT_FALSE(endpoint.agree(all, p == 1 ? 43 : 42, poll));
    std::int32_t values[2] = {p + 1, -p};
    endpoint.allreduce(all, values, 2, DType::i32, ReduceOp::sum, poll);
    EXPECT_EQ(values[0], 6);
    EXPECT_EQ(values[1], -3);
    // Uneven parts: process p sends p + 1 bytes, each its rank.
    std::vector<char> send(static_cast<std::size_t>(p + 1), static_cast<char>('a' + p)), recv(6);
    endpoint.allgatherv(all, send.data(), {1, 2, 3}, recv.data(), poll);
    EXPECT_EQ(std::string(recv.begin(), recv.end()), "abbccc");
    EXPECT_FALSE(endpoint.can_reduce(DType::f32, ReduceOp::max));  // as the MPI transport: NaN rules differ
    EXPECT_TRUE(endpoint.can_reduce(DType::i32, ReduceOp::max));
    EXPECT_FALSE(endpoint.can_reduce(DType::f32, ReduceOp::mean));
  });
}

}  // namespace hierarchical_test
}  // namespace
}  // namespace weft::testing
