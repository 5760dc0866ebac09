// The collectives' transposes (JAX's pmap rules, src/program/autodiff.cc; issue 23 item 4's second check): for
// each collective C on the meshes and group sets of the JAX cases (8 replicas on one axis, groups of 4, a
// 2x4 mesh over either axis or both), random float64 x and y give the adjoint identity
// sum_r <C(x)_r, y_r> = sum_r <x_r, C^T(y)_r> within 1e-12 relative, C^T being the VJP program run in pmap.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {

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

}  // namespace
}  // namespace weft
