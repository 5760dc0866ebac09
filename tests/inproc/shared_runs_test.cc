// Shared runs (WEFT_SHARED_RUNS, program/shared_runs.hpp, runtime/shared_runs.hpp): a data-parallel update
// (psum'd gradients, momentum, the parameters' step, a run reading an earlier run's results) that
// the local replicas split, table-driven over meshes, the parameters' varying axes, dtypes, sizes and the
// settings: the runtime's counter says how many segments ran shared (one per group of replicas with equal
// inputs), every replica's results have the bytes of the same program run unshared and match a float64
// closed form, and the replicas of a group hold one buffer. Then the failures: inputs that differ though the
// types say they are equal (mode 2), replicas at different programs, one that returned, one that failed, one
// that never comes, each an error naming the replica, within its deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "../support/errors.hpp"
#include "../support/replica_faults.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace shared_runs_test {

struct Case {
  std::string name;
  std::vector<MeshAxis> mesh;
  std::vector<std::string> param_varying;  // the parameters' declared varying axes
  std::int64_t n1, n2;                     // the two parameters' elements
  DType dtype;
  int mode;                 // RuntimeOptions::shared_runs
  bool pmap_opt_in;         // PmapOptions::shared_products: the replicas run one program
  std::uint64_t segments;   // segments run shared per call: one per group of replicas with equal inputs
};

// p1' = p1 - (0.9 m1 + 0.1 psum(g1)) lr, m1' likewise, p2' = p2 - psum(g2) lr, q1 = p1' / 2 + m1': the two
// psums, then three direct-loop runs, the third reading the first's results (one segment when shared).
Program UpdateProgram(const Case& c) {
  const Mesh mesh(c.mesh);
  std::vector<std::string> all;
  for (const MeshAxis& a : c.mesh) all.push_back(a.name);
  ProgramBuilder b(mesh);
  const int p1 = b.input({c.dtype, {c.n1}, c.param_varying}), m1 = b.input({c.dtype, {c.n1}, c.param_varying});
  const int g1 = b.input({c.dtype, {c.n1}, all});
  const int p2 = b.input({c.dtype, {c.n2}, c.param_varying}), g2 = b.input({c.dtype, {c.n2}, all});
  const int lr = b.input({c.dtype, {}, {}});
  const ProgramParams over_data{{"axes", std::vector<std::string>{"data"}}};
  const auto scalar = [&](double v) { return b.constant(Array::scalar(v, c.dtype)); };
  const int s1 = b.emit("psum", {g1}, over_data)[0];
  const int s2 = b.emit("psum", {g2}, over_data)[0];  // before the segment: it holds local steps only
  const int m1n = b.emit("add", {b.emit("multiply", {m1, scalar(0.9)})[0], b.emit("multiply", {s1, scalar(0.1)})[0]})[0];
  const int p1n = b.emit("subtract", {p1, b.emit("multiply", {m1n, lr})[0]})[0];
  const int p2n = b.emit("subtract", {p2, b.emit("multiply", {s2, lr})[0]})[0];
  // A later run of the segment reading the first one's results (at the elements each replica wrote).
  const int q1 = b.emit("add", {b.emit("multiply", {p1n, scalar(0.5)})[0], m1n})[0];
  b.set_outputs({p1n, m1n, p2n, q1});
  return b.build();
}

// Entry i of replica r's inputs: a parameter equal across the replicas that agree on its varying axes
// (`group`), a gradient of its own. Exact on a 2^-10 grid.
double Param(int group, std::int64_t i) { return static_cast<double>(((group * 13 + i * 7) % 97) - 48) / 64; }
double Grad(int replica, std::int64_t i) { return static_cast<double>(((replica * 5 + i * 3) % 31) - 15) / 1024; }

Array Filled(std::int64_t n, DType dtype, const std::function<double(std::int64_t)>& value) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(static_cast<std::int64_t>(i));
  return Array::from_doubles(v, {n}, dtype);
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SharedRuns : public ::testing::TestWithParam<Case> {};

TEST_P(SharedRuns, SplitWhereTheTypesProveEqualInputsWithTheUnsharedBytes) {
  const Case& c = GetParam();
  const Mesh mesh(c.mesh);
  const int n = mesh.size();
  const Program program = UpdateProgram(c);
  const double lr = 0.125;
  std::vector<std::vector<Array>> inputs(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const int group = c.param_varying.empty() ? 0 : mesh.axis_index(r, c.param_varying);
    inputs[r] = {Filled(c.n1, c.dtype, [&](std::int64_t i) { return Param(group, i); }),
                 Filled(c.n1, c.dtype, [&](std::int64_t i) { return Param(group + 3, i); }),
                 Filled(c.n1, c.dtype, [&](std::int64_t i) { return Grad(r, i); }),
                 Filled(c.n2, c.dtype, [&](std::int64_t i) { return Param(group + 5, i); }),
                 Filled(c.n2, c.dtype, [&](std::int64_t i) { return Grad(r + 2, i); }),
                 Array::scalar(lr, c.dtype)};
  }
  // Each replica's results, run by a pmap over the mesh: shared as the case says, or never (the reference).
  Shape over_mesh;
  for (const MeshAxis& a : c.mesh) over_mesh.push_back(a.size);
  const auto results = [&](int mode, bool opt_in, std::uint64_t* segments) {
    Runtime rt({.device_count = n, .shared_runs = mode});
    std::vector<std::vector<Array>> out(static_cast<std::size_t>(n));
    auto run = pmap(
        [&](Replica& r, const Array& unused) {
          out[r.index()] = run_program(program, r, inputs[r.index()]);
          return unused;
        },
        {.mesh = c.mesh, .runtime = &rt, .shared_products = opt_in});
    for (int call = 0; call < 2; ++call) run(Array::zeros(over_mesh));
    *segments = rt.stats().shared_runs;
    return out;
  };
  std::uint64_t segments = 0, none = 0;
  const auto shared = results(c.mode, c.pmap_opt_in, &segments);
  const auto unshared = results(0, false, &none);
  EXPECT_EQ(segments, 2 * c.segments) << c.name << "\n" << program;
  EXPECT_EQ(none, 0u);
  for (int r = 0; r < n; ++r) {
    for (std::size_t k = 0; k < 4; ++k) {
      ASSERT_TRUE(shared[r][k].identical(unshared[r][k])) << c.name << ": replica " << r << " output " << k;
    }
    // The closed form in float64: psum over 'data' sums the replicas with r's other coordinates (exactly: a
    // few grid values); the rest rounds a few times.
    const auto psum = [&](std::int64_t i, int offset) {
      double s = 0;
      for (int q = 0; q < n; ++q) {
        bool same = true;
        for (const MeshAxis& a : c.mesh)
          if (a.name != "data" && mesh.axis_index(q, a.name) != mesh.axis_index(r, a.name)) same = false;
        if (same) s += Grad(q + offset, i);
      }
      return s;
    };
    const int group = c.param_varying.empty() ? 0 : mesh.axis_index(r, c.param_varying);
    const std::vector<double> p1 = shared[r][0].to_doubles(), m1 = shared[r][1].to_doubles(), p2 = shared[r][2].to_doubles(),
                              q1 = shared[r][3].to_doubles();
    const double tol = c.dtype == DType::f32 ? 1e-6 : 1e-14;
    for (std::int64_t i = 0; i < c.n1; i += 997) {
      const double m = 0.9 * Param(group + 3, i) + 0.1 * psum(i, 0);
      ASSERT_NEAR(m1[i], m, tol) << c.name << ": replica " << r << " m1[" << i << "]";
      ASSERT_NEAR(p1[i], Param(group, i) - m * lr, tol) << c.name << ": replica " << r << " p1[" << i << "]";
      ASSERT_NEAR(q1[i], (Param(group, i) - m * lr) / 2 + m, tol) << c.name << ": replica " << r << " q1[" << i << "]";
    }
    for (std::int64_t i = 0; i < c.n2; i += 997) {
      ASSERT_NEAR(p2[i], Param(group + 5, i) - psum(i, 2) * lr, tol) << c.name << ": replica " << r << " p2[" << i << "]";
    }
  }
  // Shared: the replicas of a group hold one buffer per result (one copy of the update's results).
  if (c.segments > 0) {
    for (int r = 1; r < n; ++r) {
      const bool same_group = c.param_varying.empty() || mesh.axis_index(r, c.param_varying) == mesh.axis_index(0, c.param_varying);
      EXPECT_EQ(shared[r][0].shares_buffer_with(shared[0][0]), same_group) << c.name << ": replica " << r;
    }
  }
}

const std::vector<std::string> kNone{};
const std::vector<std::string> kModel{"model"};
const std::vector<std::string> kData{"data"};

INSTANTIATE_TEST_SUITE_P(
    Table, SharedRuns,
    ::testing::Values(
        Case{"dp8_f32", {{"data", 8}}, kNone, 100000, 70000, DType::f32, 1, true, 1},
        Case{"dp8_f64", {{"data", 8}}, kNone, 100000, 70000, DType::f64, 1, true, 1},
        Case{"dp8_odd_sizes", {{"data", 8}}, kNone, 65537, 4099, DType::f32, 1, true, 1},
        Case{"mode2_checks_and_shares", {{"data", 8}}, kNone, 100000, 70000, DType::f32, 2, true, 1},
        // Parameters varying over 'model' are equal on the replicas of each model coordinate: two groups.
        Case{"dp4_tp2_params_by_model", {{"data", 4}, {"model", 2}}, kModel, 100000, 70000, DType::f32, 1, true, 2},
        // Not shared: too few elements to pay for a meeting; parameters varying on every replica; the setting
        // off; replicas not known to run one program.
        Case{"small", {{"data", 8}}, kNone, 30000, 30000, DType::f32, 1, true, 0},
        Case{"params_vary_like_gradients", {{"data", 8}}, kData, 100000, 70000, DType::f32, 1, true, 0},
        Case{"setting_off", {{"data", 8}}, kNone, 100000, 70000, DType::f32, 0, true, 0},
        Case{"not_opted_in", {{"data", 8}}, kNone, 100000, 70000, DType::f32, 1, false, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Grouped collectives (issue 45, item 1): a reduction or gather in several axis index groups is equal within
// each group only, so the elementwise work after it is shared within each group, never across groups. y = op(x) in groups
// {0,1,2,3}, {4,5,6,7} (or the interleaved {0,2,4,6}, {1,3,5,7}), then z = y * 0.5 + 1 over 70 000 elements (a
// shared-run segment): every replica's z against a float64 reference, under both shared-runs modes (before the
// fix mode 2 raised a MismatchError and mode 1 gave replicas 4-7 group 0's values).
struct GroupedCase {
  std::string op;  // psum, pmean, pmax, pmin, all_gather
  std::vector<std::vector<int>> groups;
};

void PrintTo(const GroupedCase& c, std::ostream* os) { *os << c.op; }

class GroupedCollectivesThenRuns : public ::testing::TestWithParam<std::tuple<GroupedCase, int>> {};

TEST_P(GroupedCollectivesThenRuns, EachGroupGetsItsOwnValues) {
  const auto& [c, mode] = GetParam();
  constexpr int n = 8;
  constexpr std::int64_t elements = 70000;
  const bool gather = c.op == "all_gather";
  const std::int64_t in_elements = gather ? elements / 4 : elements;  // 4 members per group
  ProgramBuilder b(Mesh({{"i", n}}));
  const int x = b.input({DType::f32, {in_elements}, {"i"}});
  ProgramParams params{{"axes", std::vector<std::string>{"i"}}, {"groups", c.groups}};
  if (gather) {
    params["axis"] = std::int64_t{0};
    params["tiled"] = true;
  }
  const int y = b.emit(c.op, {x}, params)[0];
  const int z = b.emit("add", {b.emit("multiply", {y, b.constant(Array::scalar(0.5, DType::f32))})[0],
                               b.constant(Array::scalar(1.0, DType::f32))})[0];
  b.set_outputs({z});
  const Program program = b.build();
  // The result's type keeps 'i': it differs between the groups.
  EXPECT_EQ(program.output_types()[0].varying, std::vector<std::string>{"i"}) << program;

  const auto value = [](int r, std::int64_t k) { return static_cast<double>(((r * 37 + k * 11) % 101) - 50) / 8; };
  Runtime rt({.device_count = n, .shared_runs = mode});
  std::vector<Array> out(n);
  auto run = pmap(
      [&](Replica& r, const Array& unused) {
        std::vector<double> v(static_cast<std::size_t>(in_elements));
        for (std::int64_t k = 0; k < in_elements; ++k) v[k] = value(r.index(), k);
        out[r.index()] = run_program(program, r, {Array::from_doubles(v, {in_elements}, DType::f32)})[0];
        return unused;
      },
      {.axis = "i", .runtime = &rt, .shared_products = true});
  run(Array::zeros({n}));
  // Shared within each group (the replicas of a group hold equal y: mode 2 compares their inputs), one segment
  // a group, never across groups.
  EXPECT_EQ(rt.stats().shared_runs, c.groups.size());
  for (int r = 0; r < n; ++r) {
    const auto& group = *std::find_if(c.groups.begin(), c.groups.end(),
                                      [&](const std::vector<int>& g) { return std::count(g.begin(), g.end(), r) > 0; });
    const std::vector<double> got = out[r].to_doubles();
    ASSERT_EQ(got.size(), static_cast<std::size_t>(elements));
    for (std::int64_t k = 0; k < elements; k += 7) {
      double y_ref = 0;
      if (gather) {
        y_ref = value(group[k / in_elements], k % in_elements);
      } else {
        std::vector<double> members;
        for (int q : group) members.push_back(value(q, k));
        if (c.op == "psum") y_ref = std::accumulate(members.begin(), members.end(), 0.0);
        if (c.op == "pmean") y_ref = std::accumulate(members.begin(), members.end(), 0.0) / members.size();
        if (c.op == "pmax") y_ref = *std::max_element(members.begin(), members.end());
        if (c.op == "pmin") y_ref = *std::min_element(members.begin(), members.end());
      }
      ASSERT_NEAR(got[k], y_ref * 0.5 + 1, 1e-5) << c.op << " mode " << mode << ": replica " << r << " element " << k;
    }
    EXPECT_TRUE(out[r].shares_buffer_with(out[group.front()])) << c.op << ": replica " << r;
    for (const auto& other : c.groups) {
      if (other != group) {
        EXPECT_FALSE(out[r].shares_buffer_with(out[other.front()])) << c.op << ": replica " << r;
      }
    }
  }
}

const std::vector<std::vector<int>> kHalves{{0, 1, 2, 3}, {4, 5, 6, 7}};
const std::vector<std::vector<int>> kInterleaved{{0, 2, 4, 6}, {1, 3, 5, 7}};

INSTANTIATE_TEST_SUITE_P(
    Table, GroupedCollectivesThenRuns,
    ::testing::Combine(::testing::Values(GroupedCase{"psum", kHalves}, GroupedCase{"pmean", kInterleaved},
                                         GroupedCase{"pmax", kHalves}, GroupedCase{"pmin", kInterleaved},
                                         GroupedCase{"all_gather", kHalves}),
                       ::testing::Values(1, 2)),
    [](const ::testing::TestParamInfo<std::tuple<GroupedCase, int>>& info) {
      return std::get<0>(info.param).op + "_mode" + std::to_string(std::get<1>(info.param));
    });

// The failures. One program: p' = p - m lr over 100 000 elements, p and m invariant, over 'data' (4 replicas):
// the segment is the program's first step, so the replicas meet there first.
Program StepProgram(std::int64_t elements = 100000) {
  ProgramBuilder b(Mesh({{"data", 4}}));
  const int p = b.input({DType::f32, {elements}, {}}), m = b.input({DType::f32, {elements}, {}});
  const int lr = b.input({DType::f32, {}, {}});
  b.set_outputs({b.emit("subtract", {p, b.emit("multiply", {m, lr})[0]})[0]});
  return b.build();
}

struct Failing {
  Runtime rt;
  Program program = StepProgram();
  std::vector<Array> params = std::vector<Array>(4, Array::ones({100000}, DType::f32));
  explicit Failing(int mode = 1, double timeout_s = 20)
      : rt({.device_count = 4, .collective_warn_s = 0, .collective_timeout_s = timeout_s, .shared_runs = mode}) {}
  // Every replica runs the program but replica `odd` (none when -1), which runs `instead`, under a pmap whose
  // replicas run one program: the text of the error of type E it ends with, which must come within 10 s.
  template <class E>
  std::string ErrorWhen(int odd, const std::function<void(Replica&)>& instead = {}) {
    auto run = pmap(
        [&](Replica& r, const Array& unused) {
          if (r.index() == odd) {
            instead(r);
          } else {
            run_program(program, r, std::vector<Array>{params[r.index()], params[r.index()], Array::scalar(0.5)});
          }
          return unused;
        },
        {.axis = "data", .runtime = &rt, .shared_products = true});
    const auto start = std::chrono::steady_clock::now();
    std::string text = testing::ErrorOf<E>([&] { run(Array::zeros({4})); });
    EXPECT_LT(testing::SecondsSince(start), 10) << text;
    return text;
  }
};

TEST(SharedRunsFailures, InputsThatDifferAreAMismatchUnderMode2) {
  Failing f(2);
  f.params[2] = Array::full({100000}, 2.0, DType::f32);
  testing::ExpectContains(f.ErrorWhen<MismatchError>(-1),
                          {"WEFT_SHARED_RUNS=2", "replica 2", "differs from", "replica 0",
                           "the program's types say it equals"});
}

TEST(SharedRunsFailures, ReplicasAtDifferentProgramsAreAMismatchNamingThem) {
  Failing f;
  const Program other = StepProgram(80000);
  const std::string text = f.ErrorWhen<MismatchError>(2, [&](Replica& r) {
    const Array x = Array::ones({80000}, DType::f32);
    run_program(other, r, std::vector<Array>{x, x, Array::scalar(0.5)});
  });
  testing::ExpectContains(text, {"shared runs", "replica 2", "of another program", "must run one program"});
}

TEST(SharedRunsFailures, AReplicaThatReturnedIsNamed) {
  Failing f;
  const std::string text = f.ErrorWhen<PeerLostError>(3, [](Replica&) {});
  testing::ExpectContains(text, {"replica 3", "returned from its function", "shared runs of equations"});
}

TEST(SharedRunsFailures, AReplicaThatFailedAbortsTheOthersWithItsCause) {
  Failing f;
  const std::string text =
      f.ErrorWhen<InvalidArgument>(1, [](Replica&) { throw InvalidArgument("replica one's own bad input"); });
  testing::ExpectContains(text, {"replica 1", "replica one's own bad input", "aborted because replica 1"});
}

TEST(SharedRunsFailures, AReplicaThatNeverComesTimesOutNamingIt) {
  Failing f(1, 0.5);
  const std::string text = f.ErrorWhen<TimeoutError>(0, [](Replica&) { std::this_thread::sleep_for(std::chrono::seconds(2)); });
  testing::ExpectContains(text, {"replica 0", "0.5 s"});
}

}  // namespace shared_runs_test
}  // namespace
}  // namespace weft
