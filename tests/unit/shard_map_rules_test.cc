// shard_map's rule set in the program layer (CollectiveRules::shard_map, weft/program.hpp): what the builder
// inserts (pvary on the less varying operand, on a collective's operand lacking its axes, never on
// constants), all_gather's result staying varying, groups refused, and the transposes (psum -> pvary,
// pvary -> psum, pmean -> pvary / n), checked on the programs' text and on their values against closed forms.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace shard_map_rules_test {

const ProgramParams kOverI{{"axes", std::vector<std::string>{"i"}}};

TEST(ShardMapRules, MixingAnInvariantValueWithAVaryingOneInsertsPvary) {
  ProgramBuilder b(Mesh({{"i", 4}}), CollectiveRules::shard_map);
  const int w = b.input({DType::f32, {3}, {}});
  const int x = b.input({DType::f32, {3}, {"i"}});
  const int y = b.emit("multiply", {w, x})[0];
  const int z = b.emit("add", {y, b.constant(Array::scalar(1.0, DType::f32))})[0];
  b.set_outputs({z, b.emit("psum", {w}, kOverI)[0]});
  const Program p = b.build();
  EXPECT_EQ(p.text(),
            "{ lambda a:f32[] ; b:f32[3] c:f32[3] . let\n"
            "    d:f32[3] = pvary[axes=('i',)] b\n"
            "    e:f32[3] = multiply d c\n"
            "    f:f32[3] = add e a\n"
            "    g:f32[3] = pvary[axes=('i',)] b\n"
            "    h:f32[3] = psum[axes=('i',)] g\n"
            "  in (f, h) }");
  EXPECT_EQ(p.output_types()[0].varying, std::vector<std::string>{"i"});
  EXPECT_TRUE(p.output_types()[1].varying.empty());
  EXPECT_EQ(p.collective_rules(), CollectiveRules::shard_map);

  // Under pmap's rules nothing is inserted.
  ProgramBuilder q(Mesh({{"i", 4}}));
  q.set_outputs({q.emit("multiply", {q.input({DType::f32, {3}, {}}), q.input({DType::f32, {3}, {"i"}})})[0]});
  EXPECT_EQ(q.build().count("pvary"), 0u);
}

TEST(ShardMapRules, AllGatherStaysVaryingAndGroupsAreRefused) {
  ProgramBuilder b(Mesh({{"i", 4}}), CollectiveRules::shard_map);
  const int x = b.input({DType::f32, {2}, {"i"}});
  ProgramParams gather = kOverI;
  gather["axis"] = std::int64_t{0};
  gather["tiled"] = true;
  const int g = b.emit("all_gather", {x}, gather)[0];
  EXPECT_EQ(b.type(g).varying, std::vector<std::string>{"i"});
  ProgramParams grouped = kOverI;
  grouped["groups"] = std::vector<std::vector<int>>{{0, 1}, {2, 3}};
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { b.emit("psum", {x}, grouped); }),
                          {"psum with axis_index_groups under shard_map: shard_map has no groups"});
}

// The VJP of sum_r psum(w * x_r) with respect to the invariant w: the true gradient sum_r x_r, by one psum (the
// transpose of the inserted pvary); psum's own transpose is a pvary, not a second psum.
TEST(ShardMapRules, PsumTransposesToPvaryAndPvaryToPsum) {
  const Mesh mesh({{"i", 4}});
  ProgramBuilder b(mesh, CollectiveRules::shard_map);
  const int w = b.input({DType::f64, {2}, {}});
  const int x = b.input({DType::f64, {2}, {"i"}});
  b.set_outputs({b.emit("psum", {b.emit("multiply", {w, x})[0]}, kOverI)[0]});
  const Program grad = vjp_program(b.build(), {0});
  EXPECT_EQ(grad.count("psum"), 2u) << grad;   // the forward one and the gradient's one
  EXPECT_EQ(grad.collective_rules(), CollectiveRules::shard_map);

  Runtime rt({.device_count = 4});
  auto run = pmap(
      [&](Replica& r, const Array& xs) {
        return run_program(grad, r,
                           std::vector<Array>{Array::from_doubles({2, 3}, {2}, DType::f64), xs,
                                              Array::from_doubles({1, 1}, {2}, DType::f64)})[1];
      },
      {.axis = "i", .runtime = &rt});
  // x_r = (r+1, 10 (r+1)): the gradient is (1+2+3+4, 10 (1+2+3+4)) on every replica.
  std::vector<double> xs;
  for (int r = 0; r < 4; ++r) {
    xs.push_back(r + 1);
    xs.push_back(10.0 * (r + 1));
  }
  const Array got = run(Array::from_doubles(xs, {4, 2}, DType::f64)).to_host();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(got.to_doubles()[2 * r], 10.0);
    EXPECT_EQ(got.to_doubles()[2 * r + 1], 100.0);
  }
}

TEST(ShardMapRules, PmaxStillHasNoTransposeAndSaysWhichRules) {
  ProgramBuilder b(Mesh({{"i", 2}}), CollectiveRules::shard_map);
  b.set_outputs({b.emit("pmax", {b.input({DType::f32, {2}, {"i"}})}, kOverI)[0]});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { vjp_program(b.build(), {0}); }),
                          {"no VJP rule for pmax", "under pmap and shard_map"});
}

}  // namespace shard_map_rules_test
}  // namespace
}  // namespace weft
