// Shared products (WEFT_SHARED_PRODUCTS, program/shared_products.hpp, runtime/shared_products.hpp): which
// products of a traced program the local replicas run as one, checked by the runtime's counter, table-driven
// over meshes, rule sets, weight layouts and dtypes; every shared result against a naive float64 product of
// the replica's own rows; and the failures: a weight that differs though the types say it is shared (mode
// 2), replicas at different products, one that returned, one that failed, one that never comes, each an
// error naming the replica, within its deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "../support/errors.hpp"
#include "../support/replica_faults.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace shared_products_test {

// Replica r's (rows, weight) entries: distinct per replica (rows) or per group (the weight), exact in bf16.
double RowValue(int replica, std::int64_t i) { return static_cast<double>(((replica * 7 + i * 3) % 11) - 5) / 4; }
double WeightValue(int group, std::int64_t i) { return static_cast<double>(((group * 5 + i * 2) % 9) - 4) / 8; }

Array Filled(const Shape& shape, DType dtype, const std::function<double(std::int64_t)>& value) {
  std::vector<double> v(static_cast<std::size_t>(num_elements(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(static_cast<std::int64_t>(i));
  return Array::from_doubles(v, shape, dtype);
}

struct Case {
  std::string name;
  CollectiveRules rules;
  std::vector<MeshAxis> mesh;
  std::vector<std::string> weight_varying;  // the weight input's declared varying axes
  Shape rows;                               // one replica's rows
  Shape weight;
  bool transpose_b;
  DType dtype;
  int mode;                 // RuntimeOptions::shared_products
  bool pmap_opt_in;         // PmapOptions::shared_products
  std::uint64_t shared;     // products run shared per call: one per group of replicas with one weight
};

// The product a replica computes, naively in float64 from its own rows.
std::vector<double> NaiveProduct(const Array& rows, const Array& weight, bool transpose_b) {
  const std::vector<double> a = rows.astype(DType::f64).to_doubles();
  const std::vector<double> b = weight.astype(DType::f64).to_doubles();
  const std::int64_t k = rows.shape().back();
  const std::int64_t m = num_elements(rows.shape()) / k;
  const std::int64_t n = transpose_b ? weight.shape()[0] : weight.shape()[1];
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t l = 0; l < k; ++l)
        c[i * n + j] += a[i * k + l] * b[transpose_b ? j * k + l : l * n + j];
  return c;
}

class SharedProducts : public ::testing::TestWithParam<Case> {};

TEST_P(SharedProducts, SharesWhereTheTypesProveOneWeightAndMatchesTheNaiveProduct) {
  const Case& c = GetParam();
  Runtime rt({.device_count = 8, .shared_products = c.mode});
  const Mesh mesh(c.mesh);
  std::vector<std::string> all_axes;
  for (const MeshAxis& a : c.mesh) all_axes.push_back(a.name);
  std::sort(all_axes.begin(), all_axes.end());

  ProgramBuilder b(mesh, c.rules);
  const int x = b.input({c.dtype, c.rows, all_axes});
  const int w = b.input({c.dtype, c.weight, c.weight_varying});
  const int y = b.emit("matmul", {x, w}, {{"transpose_a", false}, {"transpose_b", c.transpose_b}})[0];
  b.set_outputs({y});
  const Program program = b.build();

  // Per replica its own rows and its group's weight (the group: its coordinate along the weight's axes).
  const int n = mesh.size();
  std::vector<Array> rows, weights;
  for (int r = 0; r < n; ++r) {
    rows.push_back(Filled(c.rows, c.dtype, [r](std::int64_t i) { return RowValue(r, i); }));
    const int group = c.weight_varying.empty() ? 0 : mesh.axis_index(r, c.weight_varying);
    weights.push_back(Filled(c.weight, c.dtype, [group](std::int64_t i) { return WeightValue(group, i); }));
  }
  // Stacked over the mesh's axes (outermost first), as a nested pmap maps them.
  const auto over_mesh = [&](const std::vector<Array>& parts, Shape shape) {
    for (auto it = c.mesh.rbegin(); it != c.mesh.rend(); ++it) shape.insert(shape.begin(), it->size);
    return Array::stack(parts, 0).reshape(shape);
  };
  const Array all_rows = over_mesh(rows, c.rows), all_weights = over_mesh(weights, c.weight);
  auto run = pmap(
      [&](Replica& r, const Array& xs, const Array& ws) { return run_program(program, r, std::vector<Array>{xs, ws})[0]; },
      {.mesh = c.mesh, .runtime = &rt, .shared_products = c.pmap_opt_in});
  rt.reset_stats();
  for (int call = 0; call < 2; ++call) {
    const ShardedArray out = run(all_rows, all_weights);
    ASSERT_EQ(static_cast<int>(out.shards().size()), n) << c.name;
    for (int r = 0; r < n; ++r) {
      const Array& got = out.shards()[r].data;
      const std::vector<double> want = NaiveProduct(rows[r], weights[r], c.transpose_b);
      const std::vector<double> have = got.astype(DType::f64).to_doubles();
      ASSERT_EQ(have.size(), want.size()) << c.name;
      // Float32 sums of exact products: within k ulps of the result's magnitude; bf16 rounds the result once.
      const double tol = c.dtype == DType::bf16 ? 1.0 / 128 : c.dtype == DType::f32 ? 1e-5 : 1e-12;
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(have[i], want[i], tol * (1 + std::abs(want[i]))) << c.name << " replica " << r << " element " << i;
    }
  }
  EXPECT_EQ(rt.stats().shared_products, 2 * c.shared) << c.name << "\n" << program;
}

const std::vector<std::string> kNone{};
const std::vector<std::string> kModel{"model"};
const std::vector<std::string> kBoth{"data", "model"};

INSTANTIATE_TEST_SUITE_P(
    Table, SharedProducts,
    ::testing::Values(
        // shard_map pvary's the invariant weight: the analysis sees through it.
        Case{"shard_map_dp8", CollectiveRules::shard_map, {{"data", 8}}, kNone, {4, 3}, {3, 5}, false, DType::f32, 1, true, 1},
        Case{"shard_map_dp8_transposed", CollectiveRules::shard_map, {{"data", 8}}, kNone, {4, 3}, {5, 3}, true,
             DType::f32, 1, true, 1},
        Case{"rank3_rows", CollectiveRules::shard_map, {{"data", 8}}, kNone, {2, 4, 3}, {3, 5}, false, DType::f32, 1, true, 1},
        Case{"float64", CollectiveRules::shard_map, {{"data", 8}}, kNone, {4, 3}, {3, 5}, false, DType::f64, 1, true, 1},
        Case{"bfloat16", CollectiveRules::shard_map, {{"data", 8}}, kNone, {4, 3}, {3, 5}, false, DType::bf16, 1, true, 1},
        Case{"large_f32", CollectiveRules::shard_map, {{"data", 8}}, kNone, {32, 96}, {96, 80}, false, DType::f32, 1,
             true, 1},
        // A weight varying over 'model' is shared by the replicas of each model coordinate: two products.
        Case{"dp4_tp2_weight_by_model", CollectiveRules::shard_map, {{"data", 4}, {"model", 2}}, kModel, {4, 3}, {3, 5},
             false, DType::f32, 1, true, 2},
        // pmap's rules insert no pvary: a broadcast (invariant) weight is shared as it is.
        Case{"pmap_broadcast_weight", CollectiveRules::pmap, {{"data", 8}}, kNone, {4, 3}, {3, 5}, false, DType::f32, 1,
             true, 1},
        Case{"mode2_checks_and_shares", CollectiveRules::shard_map, {{"data", 8}}, kNone, {4, 3}, {3, 5}, false,
             DType::f32, 2, true, 1},
        // Not shared: the weight varies as the rows do; the setting is off; the pmap did not opt in; vector rows.
        Case{"weight_varies_like_rows", CollectiveRules::shard_map, {{"data", 4}, {"model", 2}}, kBoth, {4, 3}, {3, 5},
             false, DType::f32, 1, true, 0},
        Case{"setting_off", CollectiveRules::shard_map, {{"data", 8}}, kNone, {4, 3}, {3, 5}, false, DType::f32, 0, true, 0},
        Case{"pmap_not_opted_in", CollectiveRules::shard_map, {{"data", 8}}, kNone, {4, 3}, {3, 5}, false, DType::f32, 1,
             false, 0},
        Case{"vector_rows", CollectiveRules::shard_map, {{"data", 8}}, kNone, {3}, {3, 5}, false, DType::f32, 1, true, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A session whose replicas run one traced program shares as a pmap does (the C++ trainer's differentiated
// backward runs this way), and only when SessionOptions::shared_products says they do.
TEST(SharedProductsInASession, ASessionThatOptsInShares) {
  for (const bool opt_in : {true, false}) {
    Runtime rt({.device_count = 8, .shared_products = 1});
    ProgramBuilder b(Mesh({{"data", 8}}));
    const int x = b.input({DType::f32, {4, 3}, {"data"}});
    const int w = b.input({DType::f32, {3, 5}, {}});
    b.set_outputs({b.emit("matmul", {x, w})[0]});
    const Program program = b.build();
    Session session({.runtime = &rt, .name = "shared", .shared_products = opt_in});
    const Array weight = Filled({3, 5}, DType::f32, [](std::int64_t i) { return WeightValue(0, i); });
    std::vector<Array> got(8);
    session.run([&](Replica& r) {
      const Array rows = Filled({4, 3}, DType::f32, [&](std::int64_t i) { return RowValue(r.index(), i); });
      got[static_cast<std::size_t>(r.index())] = run_program(program, r, std::vector<Array>{rows, weight})[0];
    });
    for (int r = 0; r < 8; ++r) {
      const Array rows = Filled({4, 3}, DType::f32, [&](std::int64_t i) { return RowValue(r, i); });
      const std::vector<double> want = NaiveProduct(rows, weight, false), have = got[r].to_doubles();
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(have[i], want[i], 1e-5) << "replica " << r;
    }
    EXPECT_EQ(rt.stats().shared_products, opt_in ? 1u : 0u);
  }
}

// The failures. One program: y = x @ w with an invariant w, over 'data' (4 replicas).
Program ProductProgram(std::int64_t cols = 5) {
  ProgramBuilder b(Mesh({{"data", 4}}), CollectiveRules::shard_map);
  const int x = b.input({DType::f32, {4, 3}, {"data"}});
  const int w = b.input({DType::f32, {3, cols}, {}});
  b.set_outputs({b.emit("matmul", {x, w})[0]});
  return b.build();
}

struct Failing {
  Runtime rt;
  Program program = ProductProgram();
  Array rows = Array::ones({4, 4, 3}, DType::f32);
  Array weights = Array::ones({4, 3, 5}, DType::f32);
  explicit Failing(int mode = 1, double timeout_s = 20)
      : rt({.device_count = 4, .collective_warn_s = 0, .collective_timeout_s = timeout_s, .shared_products = mode}) {}
  // Every replica runs the program, but replica `odd` (none when -1), which runs `instead`, under a pmap that
  // opted in: the text of the error of type E it ends with, which must come within 10 s.
  template <class E>
  std::string ErrorWhen(int odd, const std::function<Array(Replica&, const Array& x)>& instead = {}) {
    auto run = pmap(
        [&](Replica& r, const Array& x, const Array& w) {
          return r.index() == odd ? instead(r, x) : run_program(program, r, std::vector<Array>{x, w})[0];
        },
        {.axis = "data", .runtime = &rt, .shared_products = true});
    const auto start = std::chrono::steady_clock::now();
    std::string text = testing::ErrorOf<E>([&] { run(rows, weights); });
    EXPECT_LT(testing::SecondsSince(start), 10) << text;
    return text;
  }
};

TEST(SharedProductsFailures, AWeightThatDiffersIsAMismatchUnderMode2) {
  Failing f(2);
  f.weights = Array::ones({4, 3, 5}, DType::f32) * Array::arange(4).astype(DType::f32).reshape({4, 1, 1});
  testing::ExpectContains(f.ErrorWhen<MismatchError>(-1),
                          {"WEFT_SHARED_PRODUCTS=2", "replica 1", "weight differs from", "replica 0",
                           "the program's types say it equals", "matmul"});
}

TEST(SharedProductsFailures, ReplicasAtDifferentProductsAreAMismatchNamingThem) {
  Failing f;
  const Program other = ProductProgram(7);
  const std::string text = f.ErrorWhen<MismatchError>(2, [&](Replica& r, const Array& x) {
    return run_program(other, r, std::vector<Array>{x, Array::ones({3, 7}, DType::f32)})[0];
  });
  testing::ExpectContains(text, {"shared product", "replica 2", "of another program", "must run one program"});
}

TEST(SharedProductsFailures, AReplicaThatReturnedIsNamed) {
  Failing f;
  const std::string text =
      f.ErrorWhen<PeerLostError>(3, [](Replica&, const Array&) { return Array::zeros({4, 5}, DType::f32); });
  testing::ExpectContains(text, {"replica 3", "returned from its function", "a shared matmul((4, 3), (3, 5))"});
}

TEST(SharedProductsFailures, AReplicaThatFailedAbortsTheOthersWithItsCause) {
  Failing f;
  const std::string text = f.ErrorWhen<InvalidArgument>(1, [](Replica&, const Array&) -> Array {
    throw InvalidArgument("replica one's own bad input");
  });
  testing::ExpectContains(text, {"replica 1", "replica one's own bad input", "aborted because replica 1"});
}

TEST(SharedProductsFailures, AReplicaThatNeverComesTimesOutNamingIt) {
  Failing f(1, 0.5);
  const std::string text = f.ErrorWhen<TimeoutError>(0, [](Replica&, const Array&) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return Array::zeros({4, 5}, DType::f32);
  });
  // (Under fibers the watchdog names replica 0 holding its worker; under threads the product's wait names it.)
  testing::ExpectContains(text, {"replica 0", "0.5 s"});
}

}  // namespace shared_products_test
}  // namespace
}  // namespace weft
