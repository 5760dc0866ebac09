// The program layer's rewrite of a weight gradient's reduce-scatter into gathers of its factors
// (src/program/scattered_products.hpp): where it applies (the counts of the built program), where it must not
// (a product read twice, a rewrite that would move more, untiled or along another axis), and the values: run
// on 8 replicas, each replica's rows equal the eager psum_scatter of the eager product (float64, 1e-12), with
// groups of 4 as well.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "weft/ops.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace scattered_products_test {

struct Shapes {
  std::int64_t b, n, m;
};

// x [b, n] and d [b, m] varying over i; outputs psum_scatter(matmul(x, d, transpose_a)) (and the product too
// when `product_out`).
Program ScatteredProduct(Shapes s, bool tiled = true, std::int64_t axis = 0, bool product_out = false,
                         std::vector<std::vector<int>> groups = {}) {
  ProgramBuilder b(Mesh({{"i", 8}}));
  const int x = b.input({DType::f64, {s.b, s.n}, {"i"}});
  const int d = b.input({DType::f64, {s.b, s.m}, {"i"}});
  const int y = b.emit("matmul", {x, d}, {{"transpose_a", true}})[0];
  ProgramParams p{{"axes", std::vector<std::string>{"i"}}, {"axis", axis}, {"tiled", tiled}};
  if (!groups.empty()) p["groups"] = groups;
  const int z = b.emit("psum_scatter", {y}, p)[0];
  b.set_outputs(product_out ? std::vector<int>{z, y} : std::vector<int>{z});
  return b.build();
}

TEST(ScatteredProducts, AWeightGradientsReduceScatterBecomesGathers) {
  const Program p = ScatteredProduct({4, 64, 48});
  EXPECT_EQ(p.count("psum_scatter"), 0u) << p;
  EXPECT_EQ(p.count("all_to_all"), 1u);
  EXPECT_EQ(p.count("all_gather"), 1u);
  EXPECT_EQ(p.count("matmul"), 1u);
  EXPECT_EQ(p.output_types()[0].shape, (std::vector<std::int64_t>{8, 48}));
}

TEST(ScatteredProducts, LeftAloneWhereItWouldNotPayOrNotBeTheSame) {
  EXPECT_EQ(ScatteredProduct({64, 64, 48}).count("psum_scatter"), 1u);                   // moves more
  EXPECT_EQ(ScatteredProduct({4, 64, 48}, true, 0, true).count("psum_scatter"), 1u);     // the product read twice
  EXPECT_EQ(ScatteredProduct({4, 64, 48}, true, 1).count("psum_scatter"), 1u);           // along its columns
  EXPECT_EQ(ScatteredProduct({4, 8, 48}, false).count("psum_scatter"), 1u);              // untiled
}

std::vector<double> Values(std::int64_t count, double seed) {
  std::vector<double> v(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.37 * static_cast<double>(i));
  return v;
}

void ExpectRowsOfTheReducedGradient(const Program& rewritten, Shapes s, const AxisIndexGroups& groups) {
  ASSERT_EQ(rewritten.count("psum_scatter"), 0u) << rewritten;
  Runtime rt({.device_count = 8});
  auto run = pmap(
      [&](Replica& r, const Array& x, const Array& d) {
        const Array got = run_program(rewritten, r, std::vector<Array>{x, d})[0];
        const Array want = r.psum_scatter(matmul(x, d, {.transpose_a = true}), "i", 0, true, groups);
        return (weft::abs(got - want).max() / weft::abs(want).max()).reshape({1});
      },
      {.axis = "i", .runtime = &rt});
  const Array x = Array::from_doubles(Values(8 * s.b * s.n, 1.0), {8, s.b, s.n}, DType::f64);
  const Array d = Array::from_doubles(Values(8 * s.b * s.m, 2.0), {8, s.b, s.m}, DType::f64);
  const std::vector<double> errors = run(x, d).to_host().to_doubles();
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_LE(errors[r], 1e-12) << "replica " << r;
}

TEST(ScatteredProducts, EachReplicaGetsItsRowsOfTheReducedGradient) {
  ExpectRowsOfTheReducedGradient(ScatteredProduct({4, 64, 48}), {4, 64, 48}, {});
  const std::vector<std::vector<int>> halves{{0, 2, 4, 6}, {1, 3, 5, 7}};
  ExpectRowsOfTheReducedGradient(ScatteredProduct({4, 64, 48}, true, 0, false, halves), {4, 64, 48}, halves);
}

}  // namespace scattered_products_test
}  // namespace
}  // namespace weft
