// The collectives' transposes (JAX's pmap rules, src/program/autodiff.cc; issue 23 item 4's second check): for
// each collective C on the meshes and group sets of the JAX cases (8 replicas on one axis, groups of 4, a
// 2x4 mesh over either axis or both), random float64 x and y give the adjoint identity
// sum_r <C(x)_r, y_r> = sum_r <x_r, C^T(y)_r> within 1e-12 relative, C^T being the VJP program run in pmap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace autodiff_collectives_test {

struct Case {
  std::string name;
  std::vector<MeshAxis> mesh;
  std::vector<std::int64_t> shape;  // per replica
  std::string op;
  ProgramParams params;
};


std::vector<Case> Cases() {
  const std::vector<MeshAxis> line = {{"i", 8}};
  const std::vector<MeshAxis> grid = {{"rows", 2}, {"cols", 4}};
  const std::vector<std::vector<int>> halves = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  const auto axes = [](std::vector<std::string> a) { return ProgramParam{std::move(a)}; };
  std::vector<Case> cases = {
      {"psum", line, {3, 2}, "psum", {{"axes", axes({"i"})}}},
      {"psum groups", line, {5}, "psum", {{"axes", axes({"i"})}, {"groups", halves}}},
      {"pmean", line, {4}, "pmean", {{"axes", axes({"i"})}}},
      {"psum rows", grid, {3}, "psum", {{"axes", axes({"rows"})}}},
      {"psum cols", grid, {3}, "psum", {{"axes", axes({"cols"})}}},
      {"psum both", grid, {2, 2}, "psum", {{"axes", axes({"rows", "cols"})}}},
      {"all_gather", line, {3}, "all_gather", {{"axes", axes({"i"})}, {"axis", std::int64_t{0}}}},
      {"all_gather axis 1 tiled", line, {2, 3}, "all_gather",
       {{"axes", axes({"i"})}, {"axis", std::int64_t{1}}, {"tiled", true}}},
      {"all_gather groups", line, {2}, "all_gather", {{"axes", axes({"i"})}, {"axis", std::int64_t{0}}, {"groups", halves}}},
      {"all_gather cols", grid, {2}, "all_gather", {{"axes", axes({"cols"})}, {"axis", std::int64_t{0}}}},
      {"psum_scatter", line, {8, 3}, "psum_scatter", {{"axes", axes({"i"})}, {"axis", std::int64_t{0}}}},
      {"psum_scatter tiled", line, {16}, "psum_scatter",
       {{"axes", axes({"i"})}, {"axis", std::int64_t{0}}, {"tiled", true}}},
      {"psum_scatter groups", line, {4, 2}, "psum_scatter",
       {{"axes", axes({"i"})}, {"axis", std::int64_t{0}}, {"groups", halves}}},
      {"psum_scatter rows", grid, {2, 3}, "psum_scatter", {{"axes", axes({"rows"})}, {"axis", std::int64_t{0}}}},
      {"ppermute shift", line, {3}, "ppermute",
       {{"axes", axes({"i"})}, {"perm", Permutation{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 0}}}}},
      {"ppermute partial", line, {2}, "ppermute", {{"axes", axes({"i"})}, {"perm", Permutation{{0, 3}, {5, 1}}}}},
      {"ppermute cols", grid, {2}, "ppermute", {{"axes", axes({"cols"})}, {"perm", Permutation{{0, 2}, {2, 0}, {1, 3}, {3, 1}}}}},
      {"all_to_all", line, {8, 2}, "all_to_all",
       {{"axes", axes({"i"})}, {"split_axis", std::int64_t{0}}, {"concat_axis", std::int64_t{1}}}},
      {"all_to_all tiled", line, {8, 3}, "all_to_all",
       {{"axes", axes({"i"})}, {"split_axis", std::int64_t{0}}, {"concat_axis", std::int64_t{1}}, {"tiled", true}}},
      {"all_to_all cols", grid, {2, 4}, "all_to_all",
       {{"axes", axes({"cols"})}, {"split_axis", std::int64_t{1}}, {"concat_axis", std::int64_t{0}}}},
      // PopXL's collectives on flattened tensors (padded where G does not divide the size).
      {"replicated_reduce_scatter", line, {5}, "replicated_reduce_scatter", {{"axes", axes({"i"})}}},
      {"replicated_reduce_scatter mean groups", line, {3, 4}, "replicated_reduce_scatter",
       {{"axes", axes({"i"})}, {"groups", halves}, {"op", std::string("mean")}}},
      {"replica_sharded_slice", line, {3, 3}, "replica_sharded_slice", {{"axes", axes({"i"})}}},
      {"replica_sharded_slice groups", line, {2, 3}, "replica_sharded_slice", {{"axes", axes({"i"})}, {"groups", halves}}},
      {"replica_sharded_slice reordered groups", line, {4}, "replica_sharded_slice",
       {{"axes", axes({"i"})}, {"groups", std::vector<std::vector<int>>{{6, 0, 3, 5}, {1, 7, 2, 4}}}}},
      {"replica_sharded_slice cols", grid, {5}, "replica_sharded_slice", {{"axes", axes({"cols"})}}},
      {"gather_shards", line, {2}, "gather_shards", {{"axes", axes({"i"})}, {"shape", std::vector<std::int64_t>{3, 5}}}},
      {"gather_shards groups", line, {3}, "gather_shards",
       {{"axes", axes({"i"})}, {"groups", halves}, {"shape", std::vector<std::int64_t>{2, 6}}}},
  };
  return cases;
}

TEST(AutodiffCollectives, EachTransposeSatisfiesTheAdjointIdentity) {
  Runtime rt({.device_count = 8, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error"});
  std::mt19937_64 rng(3970);
  std::normal_distribution<double> normal;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const Mesh mesh(c.mesh);
    std::vector<std::string> all;
    for (const MeshAxis& a : c.mesh) all.push_back(a.name);
    ProgramBuilder b(mesh);
    const int x = b.input({DType::f64, c.shape, all});
    b.set_outputs({b.emit(c.op, {x}, c.params)[0]});
    const Program forward = b.build();
    const Program transposed = vjp_program(forward, {0});
    const std::vector<std::int64_t> out_shape = forward.output_types()[0].shape;

    // Inputs stacked over the mesh: [mesh..., shape...].
    auto stacked = [&](const std::vector<std::int64_t>& shape) {
      Shape s = mesh.shape();
      s.insert(s.end(), shape.begin(), shape.end());
      std::vector<double> v(static_cast<std::size_t>(num_elements(s)));
      for (double& e : v) e = normal(rng);
      return Array::from_doubles(v, s, DType::f64);
    };
    const Array xs = stacked(c.shape);
    const Array ys = stacked(out_shape);
    PmapOptions options{.runtime = &rt};
    options.mesh = c.mesh;
    auto run = pmap(
        [&](Replica& r, const Array& xr, const Array& yr) {
          std::vector<Array> out = run_program(transposed, r, std::vector<Array>{xr, yr});
          return std::make_tuple(out[0], out[1]);
        },
        options);
    auto [cx, ct] = run(xs, ys);
    const std::vector<double> lhs_a = cx.to_host().to_doubles(), lhs_b = ys.to_doubles();
    const std::vector<double> rhs_a = xs.to_doubles(), rhs_b = ct.to_host().to_doubles();
    ASSERT_EQ(lhs_a.size(), lhs_b.size());
    ASSERT_EQ(rhs_a.size(), rhs_b.size());
    double lhs = 0, rhs = 0, scale = 0;
    for (std::size_t i = 0; i < lhs_a.size(); ++i) {
      lhs += lhs_a[i] * lhs_b[i];
      scale += std::abs(lhs_a[i] * lhs_b[i]);
    }
    for (std::size_t i = 0; i < rhs_a.size(); ++i) rhs += rhs_a[i] * rhs_b[i];
    EXPECT_LE(std::abs(lhs - rhs), 1e-12 * scale) << c.op << ": <Cx, y> = " << lhs << ", <x, C^T y> = " << rhs;
  }
}

// pprod is not linear, so no adjoint identity: its VJP is psum(g) times the product of the others, here on
// 8 replicas with elements free of zeros, with one zero and with two (where dividing the product by x
// would give nan or inf), against that product computed directly.
TEST(AutodiffCollectives, PprodsVjpIsTheProductOfTheOthersEvenAtZeros) {
  Runtime rt({.device_count = 8, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error"});
  const int n = 8, m = 3;
  ProgramBuilder b(Mesh({{"i", n}}));
  const int x = b.input({DType::f64, {m}, {"i"}});
  b.set_outputs({b.emit("pprod", {x}, {{"axes", std::vector<std::string>{"i"}}})[0]});
  const Program df = vjp_program(b.build(), {0});
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  std::vector<double> xs(n * m), cts(n * m);
  for (double& e : xs) e = dist(rng);
  for (double& e : cts) e = dist(rng) - 1.0;
  xs[2 * m + 1] = 0;  // element 1: one zero (replica 2)
  xs[1 * m + 2] = 0;  // element 2: two zeros (replicas 1 and 6)
  xs[6 * m + 2] = 0;
  PmapOptions options{.runtime = &rt};
  options.mesh = {{"i", n}};
  auto run = pmap([&](Replica& r, const Array& xr, const Array& cr) { return run_program(df, r, std::vector<Array>{xr, cr}); },
                  options);
  const std::vector<ShardedArray> out =
      run(Array::from_doubles(xs, {n, m}, DType::f64), Array::from_doubles(cts, {n, m}, DType::f64));
  const std::vector<double> grad = out[1].to_host().to_doubles();
  for (int e = 0; e < m; ++e) {
    double g = 0;
    for (int s = 0; s < n; ++s) g += cts[s * m + e];
    for (int r = 0; r < n; ++r) {
      double others = 1;
      for (int t = 0; t < n; ++t) others *= t == r ? 1.0 : xs[t * m + e];
      EXPECT_NEAR(grad[r * m + e], g * others, 1e-12 * (1 + std::abs(g * others))) << "element " << e << ", replica " << r;
    }
  }
}

// FSDP: both weight matrices of a two-layer MLP sharded by rows over 4 replicas and all_gather'ed (tiled) where
// used. The VJP with respect to the shards must reduce each weight's gradient with one psum_scatter (the
// all_gather's transpose) and run no other collective: the forward's two all_gathers are the program's only
// others. Its gradients must equal the full-parameter gradient summed over the replicas' data and sliced to
// each replica's rows (central differences of the unsharded loss), float64.
TEST(AutodiffCollectives, FsdpGradientsTakeOnePsumScatterPerParameter) {
  Runtime rt({.device_count = 4, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error"});
  const std::int64_t n = 4, batch = 3, d_in = 8, hidden = 4, d_out = 2;
  // The loss of one replica's data x, y at the full weights w1 [d_in, hidden], w2 [hidden, d_out].
  auto loss = [&](ProgramBuilder& b, int w1, int w2, int x, int y) {
    const int h = b.emit("tanh", {b.emit("matmul", {x, w1})[0]})[0];
    const int err = b.emit("subtract", {b.emit("matmul", {h, w2})[0], y})[0];
    return b.emit("sum", {b.emit("multiply", {err, err})[0]}, {{"keepdims", false}})[0];
  };
  const std::vector<std::string> i = {"i"};
  ProgramBuilder b(Mesh({{"i", static_cast<int>(n)}}));
  const int w1 = b.input({DType::f64, {d_in / n, hidden}, i});
  const int w2 = b.input({DType::f64, {hidden / n, d_out}, i});
  const int x = b.input({DType::f64, {batch, d_in}, i});
  const int y = b.input({DType::f64, {batch, d_out}, i});
  const ProgramParams gather = {{"axes", i}, {"axis", std::int64_t{0}}, {"tiled", true}};
  b.set_outputs({loss(b, b.emit("all_gather", {w1}, gather)[0], b.emit("all_gather", {w2}, gather)[0], x, y)});
  const Program forward = b.build();
  const Program df = vjp_program(forward, {0, 1});

  const std::vector<std::string> collectives = {"psum", "pmean", "pmax", "pmin", "pprod", "all_gather", "psum_scatter",
                                                "all_to_all", "ppermute", "axis_index", "replicated_reduce_scatter",
                                                "replica_sharded_slice", "gather_shards"};
  EXPECT_EQ(forward.count("all_gather"), 2u);
  for (const std::string& op : collectives) {
    const std::size_t expected = op == "all_gather" || op == "psum_scatter" ? 2 : 0;
    EXPECT_EQ(df.count(op), expected) << op << " in\n" << df.text();
  }
  // The psum_scatters come after every all_gather: they are the backward part's.
  std::size_t last_gather = 0, first_scatter = df.num_equations();
  for (std::size_t k = 0; k < df.num_equations(); ++k) {
    if (df.equation_op(k) == "all_gather") last_gather = k;
    if (df.equation_op(k) == "psum_scatter") first_scatter = std::min(first_scatter, k);
  }
  EXPECT_LT(last_gather, first_scatter);

  std::mt19937_64 rng(2323);
  std::normal_distribution<double> normal;
  auto random = [&](std::int64_t size) {
    std::vector<double> v(static_cast<std::size_t>(size));
    for (double& e : v) e = 0.5 * normal(rng);
    return v;
  };
  const std::vector<double> full1 = random(d_in * hidden), full2 = random(hidden * d_out);
  const std::vector<double> xs = random(n * batch * d_in), ys = random(n * batch * d_out);
  // Row-sharded weights stacked over the replicas are the full matrices' rows in order: the same data.
  PmapOptions options{.runtime = &rt};
  options.mesh = {{"i", static_cast<int>(n)}};
  auto run = pmap(
      [&](Replica& r, const Array& a, const Array& c, const Array& xr, const Array& yr, const Array& ct) {
        return run_program(df, r, std::vector<Array>{a, c, xr, yr, ct});
      },
      options);
  const std::vector<ShardedArray> out =
      run(Array::from_doubles(full1, {n, d_in / n, hidden}, DType::f64),
          Array::from_doubles(full2, {n, hidden / n, d_out}, DType::f64),
          Array::from_doubles(xs, {n, batch, d_in}, DType::f64), Array::from_doubles(ys, {n, batch, d_out}, DType::f64),
          Array::from_doubles(std::vector<double>(n, 1.0), {n}, DType::f64));
  ASSERT_EQ(out.size(), 3u);

  // The reference: the unsharded loss on one replica's data, summed over the replicas, differentiated
  // centrally; its gradient rows are the shards' gradients stacked.
  ProgramBuilder one;
  const int f1 = one.input({DType::f64, {d_in, hidden}, {}});
  const int f2 = one.input({DType::f64, {hidden, d_out}, {}});
  const int fx = one.input({DType::f64, {batch, d_in}, {}});
  const int fy = one.input({DType::f64, {batch, d_out}, {}});
  one.set_outputs({loss(one, f1, f2, fx, fy)});
  const Program single = one.build();
  auto total = [&](const std::vector<double>& a, const std::vector<double>& c) {
    double sum = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      const std::vector<double> xr(xs.begin() + r * batch * d_in, xs.begin() + (r + 1) * batch * d_in);
      const std::vector<double> yr(ys.begin() + r * batch * d_out, ys.begin() + (r + 1) * batch * d_out);
      sum += run_program(single, std::vector<Array>{Array::from_doubles(a, {d_in, hidden}, DType::f64),
                                                    Array::from_doubles(c, {hidden, d_out}, DType::f64),
                                                    Array::from_doubles(xr, {batch, d_in}, DType::f64),
                                                    Array::from_doubles(yr, {batch, d_out}, DType::f64)})[0]
                 .to_doubles()[0];
    }
    return sum;
  };
  for (int k = 0; k < 2; ++k) {
    const std::vector<double> grad = out[1 + k].to_host().to_doubles();
    const std::vector<double>& base = k == 0 ? full1 : full2;
    ASSERT_EQ(grad.size(), base.size());
    double worst = 0, scale = 1e-30;
    for (std::size_t e = 0; e < base.size(); ++e) {
      const double h = 1e-6;
      std::vector<double> up = base, down = base;
      up[e] += h;
      down[e] -= h;
      const double numeric = k == 0 ? (total(up, full2) - total(down, full2)) / (2 * h)
                                    : (total(full1, up) - total(full1, down)) / (2 * h);
      worst = std::max(worst, std::abs(numeric - grad[e]));
      scale = std::max(scale, std::abs(numeric));
    }
    EXPECT_LE(worst / scale, 1e-7) << "w" << (k + 1) << ": max error " << worst << " against max |grad| " << scale;
  }
}

}  // namespace autodiff_collectives_test
}  // namespace
}  // namespace weft
