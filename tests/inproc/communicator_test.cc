// The collectives layer on its own (src/collectives/communicator.hpp): a Communicator driven by plain threads,
// with no runtime above it, runs a collective end to end (validation, meeting, agreement, plan, parts, second
// barrier) and reports misuse naming the replica and the rule. Values are checked against naive sums; the
// fingerprint that processes agree on is checked to change with every field of a request.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.hpp"
#include "collectives/fingerprint.hpp"
#include "collectives/host_exchange.hpp"
#include "transport/inproc/inproc_interprocess.hpp"
#include "../support/errors.hpp"
#include "../support/hierarchical_cases.hpp"
#include "weft/error.hpp"

namespace weft::collectives {
namespace {
namespace communicator_test {

using testing::ErrorOf;
using testing::ExpectContains;
using Clock = std::chrono::steady_clock;

Participants local_participants(int n) {
  Participants p;
  p.execution_name = "communicator test";
  p.num_replicas = n;
  for (int r = 0; r < n; ++r) {
    p.local_replicas.push_back(r);
    p.process_of.push_back(0);
  }
  p.name = [](int r) { return "replica " + std::to_string(r); };
  p.account_of = [](int) { return std::shared_ptr<MemoryAccount>(); };
  return p;
}

// Runs body(local) on n threads at once; collects what each throws (empty when nothing).
std::vector<std::string> on_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

Request all_reduce(const Array& x, std::shared_ptr<const ReplicaGroups> groups, ReduceOp op = ReduceOp::sum) {
  Request r;
  r.kind = Kind::all_reduce;
  r.api_name = "all_reduce";
  r.reduce = op;
  r.groups = std::move(groups);
  r.input = &x;
  return r;
}

// Participant i's input at a round: distinct small integers, exact in float32 whatever the summation order.
std::vector<float> input_of(int i, int round, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) v[k] = static_cast<float>((i + 1) * 3 + round * 7 + k % 13);
  return v;
}

// Runs `rounds` all-reduces of n floats on the kN participants of `comm`, alternating between every
// participant and pairs {0, 2}, {1, 3}, and checks each result against the naive sum of its group's inputs.
void ExpectAllReduceRounds(Communicator& comm, int kN, int rounds, std::int64_t n) {
  auto everyone = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(kN));
  auto pairs = std::make_shared<const ReplicaGroups>(ReplicaGroups::strided(kN, 2, 2));  // {0, 2}, {1, 3}
  std::vector<std::string> wrong(kN);
  const auto errors = on_threads(kN, [&](int i) {
    for (int round = 0; round < rounds; ++round) {
      const auto& groups = round % 2 ? pairs : everyone;
      const Array x = Array::from_vector(input_of(i, round, n), {n});
      Request req = all_reduce(x, groups);
      const Array out = comm.run(i, req);
      std::vector<float> expected(static_cast<std::size_t>(n), 0.0f);
      for (int m : groups->members(groups->group_of(i))) {
        const std::vector<float> theirs = input_of(m, round, n);
        for (std::int64_t k = 0; k < n; ++k) expected[k] += theirs[k];
      }
      for (std::int64_t k = 0; k < n && wrong[i].empty(); ++k)
        if (out.data<float>()[k] != expected[k])
          wrong[i] = "round " + std::to_string(round) + " [" + std::to_string(k) + "]: got " +
                     std::to_string(out.data<float>()[k]) + ", expected " + std::to_string(expected[k]);
    }
  });
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(errors[i], "") << "participant " << i;
    EXPECT_EQ(wrong[i], "") << "participant " << i << ", " << n << " elements";
  }
}

TEST(Communicator, RunsRoundsOfAllReduceOverGroupsOnItsOwn) {
  constexpr int kN = 4, kRounds = 12;
  RoundCounters counters;
  Communicator comm(local_participants(kN), transport::Deadlines{0, 30}, nullptr, counters);
  // Small (done by the last arriver) and large (work split among the members, then a second barrier).
  // 5 elements; and 64K + 16 (just over 256 KiB of result, the smallest split plan: quick under TSan too).
  for (std::int64_t n : {std::int64_t{5}, (std::int64_t{1} << 16) + 16}) ExpectAllReduceRounds(comm, kN, kRounds, n);
  EXPECT_EQ(counters.rounds.load(), 2u * kRounds);
  EXPECT_EQ(comm.completed_rounds(0), 2u * kRounds);
  ExpectContains(comm.position_of(3), {"after its collective #23: all_reduce at "});
}

// With a small split threshold (WEFT_SPLIT_BYTES=1K) the split-work path runs on small buffers: every round
// at or above it splits (the counter proves it), every round below it does not, and all match naive sums.
TEST(Communicator, ASmallSplitThresholdSplitsTheWorkOnSmallBuffers) {
  constexpr int kN = 4, kRounds = 6;
  RoundCounters counters;
  Communicator comm(local_participants(kN), transport::Deadlines{0, 30}, nullptr, counters,
                    Thresholds{1024, 8 * 1024});
  std::string ran;
  // 255 floats stay below 1 KiB; 256 reach it; 1001 split into uneven shares (one per member).
  for (std::int64_t n : {std::int64_t{255}, std::int64_t{256}, std::int64_t{1001}}) {
    const std::uint64_t split_before = counters.split_rounds.load();
    ExpectAllReduceRounds(comm, kN, kRounds, n);
    const std::uint64_t split = counters.split_rounds.load() - split_before;
    EXPECT_EQ(split, n * 4 >= 1024 ? std::uint64_t{kRounds} : 0u) << n << " elements";
    if (split) ran += (ran.empty() ? "" : ", ") + std::to_string(n * 4);
  }
  std::cout << "[ split threshold 1024 bytes ] split path ran for sizes " << ran << " bytes\n";
  RecordProperty("split_sizes", ran);
}

TEST(Communicator, AMismatchIsRaisedWhereTheRequestsAreComparedNamingBothSides) {
  constexpr int kN = 3;
  RoundCounters counters;
  Communicator comm(local_participants(kN), transport::Deadlines{0, 30}, nullptr, counters);
  auto everyone = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(kN));
  const auto errors = on_threads(kN, [&](int i) {
    const Array x = Array::zeros({4}, i == 2 ? DType::i32 : DType::f32);
    Request req = all_reduce(x, everyone);
    comm.run(i, req);
  });
  for (int i = 0; i < kN; ++i)
    ExpectContains(errors[i], {"collective mismatch in communicator test: replica 0 called all_reduce(float32[4]",
                               "but replica 2 called all_reduce(int32[4]", "dtype differs",
                               "recent collectives of replica 2: none"});
  EXPECT_EQ(counters.rounds.load(), 0u);
}

TEST(Communicator, LocalValidationNamesTheReplicaBeforeAnyWait) {
  constexpr int kN = 2;
  RoundCounters counters;
  Communicator comm(local_participants(kN), transport::Deadlines{0, 30}, nullptr, counters);
  const Array x = Array::zeros({4});
  auto for_three = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(3));
  Request wrong_groups = all_reduce(x, for_three);
  ExpectContains(ErrorOf<InvalidArgument>([&] { comm.run(1, wrong_groups); }),
                 {"replica 1: all_reduce over groups", "are for 3 replicas but communicator test runs 2"});
  auto everyone = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(kN));
  Request scatter = all_reduce(x, everyone);
  scatter.kind = Kind::reduce_scatter;
  scatter.api_name = "psum_scatter";
  const Array odd = Array::zeros({3});
  scatter.input = &odd;
  ExpectContains(ErrorOf<InvalidArgument>([&] { comm.run(0, scatter); }), {"replica 0: psum_scatter"});
  EXPECT_EQ(comm.completed_rounds(0), 0u);
}

TEST(Communicator, AWaitForAnAbsentParticipantTimesOutWithinItsBoundNamingIt) {
  constexpr int kN = 3;
  RoundCounters counters;
  Communicator comm(local_participants(kN), transport::Deadlines{0, 0.3}, nullptr, counters);
  auto everyone = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(kN));
  const auto start = Clock::now();
  const auto errors = on_threads(kN - 1, [&](int i) {
    const Array x = Array::zeros({4});
    Request req = all_reduce(x, everyone);
    comm.run(i, req);
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
  for (int i = 0; i < kN - 1; ++i)
    ExpectContains(errors[i], {"replica " + std::to_string(i) + " timed out after 0.3 s", "missing: [2]"});
}

TEST(Communicator, AnAbortEndsThePendingWaitsWithItsCause) {
  constexpr int kN = 3;
  RoundCounters counters;
  Communicator comm(local_participants(kN), transport::Deadlines{0, 30}, nullptr, counters);
  auto everyone = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(kN));
  const auto start = Clock::now();
  const auto errors = on_threads(kN, [&](int i) {
    if (i == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm.abort(1, "its own code threw");
      return;
    }
    const Array x = Array::zeros({4});
    Request req = all_reduce(x, everyone);
    comm.run(i, req);
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_TRUE(comm.aborted());
  for (int i : {0, 2})
    EXPECT_EQ(errors[i], "replica " + std::to_string(i) + " aborted because replica 1 failed: its own code threw");
}

// Replicas 2p and 2p+1 live in simulated process p (transport/inproc): a communicator per process, its
// participants that process's replicas, and the rounds cross the transport (the hierarchical path).
// Each endpoint is wrapped in a CountingInterprocess (tests/support), so a test can see the agreement calls.
struct TwoPerProcess {
  explicit TwoPerProcess(int processes, bool verify = true) : job(processes) {
    const int n = 2 * processes;
    for (int p = 0; p < processes; ++p) {
      Participants parts = local_participants(n);
      parts.execution_name = "communicator test";
      parts.local_replicas = {2 * p, 2 * p + 1};
      for (int r = 0; r < n; ++r) parts.process_of[r] = r / 2;
      counted.push_back(std::make_unique<testing::CountingInterprocess>(job.endpoint(p)));
      comms.push_back(std::make_unique<Communicator>(parts, transport::Deadlines{0, 30}, counted.back().get(), counters,
                                                     Thresholds{}, verify));
    }
  }
  Communicator& of(int replica) { return *comms[replica / 2]; }
  transport::InprocJob job;
  RoundCounters counters;
  std::vector<std::unique_ptr<testing::CountingInterprocess>> counted;
  std::vector<std::unique_ptr<Communicator>> comms;
};

// With verification on (the default, WEFT_VERIFY=1) every round first agrees across the processes; off, the
// rounds move data without that all-reduce, with the same results.
class CommunicatorAcrossProcesses : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Verify, CommunicatorAcrossProcesses, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "on" : "off"; });

TEST_P(CommunicatorAcrossProcesses, ACommunicatorPerProcessRunsRoundsAcrossTheTransport) {
  constexpr int kProcesses = 2, kN = 4, kRounds = 6;
  TwoPerProcess job(kProcesses, GetParam());
  EXPECT_TRUE(job.of(0).spans_processes());
  auto everyone = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(kN));
  auto across = std::make_shared<const ReplicaGroups>(ReplicaGroups::strided(kN, 1, 2));  // {0,1}, {2,3}: local
  auto spanning = std::make_shared<const ReplicaGroups>(ReplicaGroups::strided(kN, 2, 2));  // {0,2}, {1,3}
  std::vector<std::string> wrong(kN);
  const auto errors = on_threads(kN, [&](int r) {
    for (int round = 0; round < kRounds; ++round) {
      const auto& groups = round % 3 == 0 ? everyone : round % 3 == 1 ? across : spanning;
      const std::int64_t n = 7;
      const Array x = Array::from_vector(input_of(r, round, n), {n});
      Request req = all_reduce(x, groups);
      const Array out = job.of(r).run(r % 2, req);
      for (std::int64_t k = 0; k < n; ++k) {
        float expected = 0;
        for (int m : groups->members(groups->group_of(r))) expected += input_of(m, round, n)[k];
        if (out.data<float>()[k] != expected && wrong[r].empty())
          wrong[r] = "round " + std::to_string(round) + ": got " + std::to_string(out.data<float>()[k]) +
                     ", expected " + std::to_string(expected);
      }
    }
  });
  for (int r = 0; r < kN; ++r) {
    EXPECT_EQ(errors[r], "") << "replica " << r;
    EXPECT_EQ(wrong[r], "") << "replica " << r;
  }
  EXPECT_EQ(job.counters.rounds.load(), static_cast<std::uint64_t>(kProcesses * kRounds));  // per process
  for (const auto& endpoint : job.counted) EXPECT_EQ(endpoint->agreements, GetParam() ? kRounds : 0);
}

TEST(Communicator, ProcessesThatDisagreeFailBeforeDataMovesNamingBothCalls) {
  TwoPerProcess job(2);
  auto everyone = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(4));
  const auto errors = on_threads(4, [&](int r) {
    const Array x = Array::zeros({r < 2 ? 4 : 5});  // process 1's replicas pass another shape
    Request req = all_reduce(x, everyone);
    job.of(r).run(r % 2, req);
  });
  for (int r = 0; r < 4; ++r)
    ExpectContains(errors[r], {"collective mismatch across processes", "process 0 called all_reduce(float32[4]",
                               "process 1 called all_reduce(float32[5]"});
}

TEST(HostExchange, AgreesAndGathersOverEveryProcessAndFailsTheJobOnDisagreement) {
  constexpr int kProcesses = 3;
  transport::InprocJob job(kProcesses);
  std::vector<std::vector<std::byte>> gathered(kProcesses);
  std::vector<int> same(kProcesses, -1), differ(kProcesses, -1);
  const auto errors = on_threads(kProcesses, [&](int p) {
    HostExchange exchange(job.endpoint(p), 30);
    same[p] = exchange.agree("reading w", Fingerprint().add("read back").add("w"));
    const std::vector<std::byte> mine(3, std::byte(10 + p));
    gathered[p] = exchange.all_gather("reading w", mine);
    differ[p] = exchange.agree("reading v", Fingerprint().add(p == 2 ? "x" : "v"));
  });
  std::vector<std::byte> expected;
  for (int p = 0; p < kProcesses; ++p) expected.insert(expected.end(), 3, std::byte(10 + p));
  for (int p = 0; p < kProcesses; ++p) {
    EXPECT_EQ(errors[p], "");
    EXPECT_EQ(same[p], 1);
    EXPECT_EQ(differ[p], 0);
    EXPECT_EQ(gathered[p], expected) << "process " << p;
  }
  // fail() announces the failure to every process of the job (fate sharing) and throws.
  HostExchange exchange(job.endpoint(1), 30);
  ExpectContains(ErrorOf<MismatchError>([&] { exchange.fail(MismatchError("the instances disagree")); }),
                 {"the instances disagree"});
  EXPECT_TRUE(job.endpoint(0).peer_failed());
}

// Every field the agreement between processes compares moves the fingerprint.
TEST(Fingerprint, EveryFieldOfARequestAndTheRoundChangeIt) {
  const Array f32 = Array::zeros({2, 3});
  const Array i32 = Array::zeros({2, 3}, DType::i32);
  const Array other_shape = Array::zeros({3, 2});
  const Permutation shift = {{0, 1}, {1, 0}}, none = {{0, 0}, {1, 1}};
  auto all2 = std::make_shared<const ReplicaGroups>(ReplicaGroups::all(2));
  auto single = std::make_shared<const ReplicaGroups>(ReplicaGroups::strided(2, 1, 1));
  const Request base = all_reduce(f32, all2);
  const std::uint64_t reference = fingerprint(base, 7);
  EXPECT_EQ(fingerprint(base, 7), reference);  // a function of its inputs only
  const std::vector<std::pair<std::string, std::function<void(Request&)>>> changes = {
      {"kind", [](Request& r) { r.kind = Kind::all_gather; }},
      {"api name", [](Request& r) { r.api_name = "psum"; }},
      {"reduction", [](Request& r) { r.reduce = ReduceOp::max; }},
      {"dtype", [&](Request& r) { r.input = &i32; }},
      {"shape", [&](Request& r) { r.input = &other_shape; }},
      {"groups", [&](Request& r) { r.groups = single; }},
      {"axis", [](Request& r) { r.axis = 1; }},
      {"concat axis", [](Request& r) { r.concat_axis = 1; }},
      {"tiled", [](Request& r) { r.tiled = true; }},
      {"permutation", [&](Request& r) { r.perm = &shift; }},
  };
  for (const auto& [field, change] : changes) {
    Request r = base;
    change(r);
    EXPECT_NE(fingerprint(r, 7), reference) << field;
  }
  EXPECT_NE(fingerprint(base, 8), reference) << "round";
  Request a = base, b = base;
  a.perm = &shift;
  b.perm = &none;
  EXPECT_NE(fingerprint(a, 7), fingerprint(b, 7)) << "permutation pairs";
  // Text fields are length-delimited: "ab" + "c" and "a" + "bc" differ.
  EXPECT_NE(Fingerprint().add("ab").add("c").value(), Fingerprint().add("a").add("bc").value());
}

}  // namespace communicator_test
}  // namespace
}  // namespace weft::collectives
