// The collectives' forward-mode and batching rules (src/program/ops/collectives.cc), run on replicas:
// - JVP: for each collective C (and every parameter variant of the JAX cases), the tangent of the JVP program
//   run in pmap equals central differences of C run in pmap (float64), and the JVP agrees with the VJP by the
//   adjoint identity sum_r <vjp(y)_r, t_r> = sum_r <y_r, jvp(t)_r> within 1e-12;
// - vmap with an axis name (JAX's collective batchers): a program traced on a mesh whose axis 'b' has n
//   members, batched along 'b' (batch_program(p, ..., n, "b")) and run on the stacked inputs, equals the same
//   program run in pmap over the n replicas, bit for bit; with another mesh axis 'i' too, the batched program
//   runs in pmap over 'i' (a vmap inside a pmap). The inputs are small dyadic numbers, so every sum is exact
//   in any order and bit-for-bit compares the semantics, not the order of additions;
// - the refusals: pmax / pmin have no JVP or VJP (JAX's rule), groups over vmap's axis, flat collectives'
//   reductions without a linear rule.
// In the inproc tier: the references run the collectives on 8 replica threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace ops_collectives_rules_test {

const auto kAxes = [](std::vector<std::string> a) { return ProgramParam{std::move(a)}; };

Runtime& runtime() {
  static Runtime rt({.device_count = 8, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error"});
  return rt;
}

std::vector<std::string> names(const std::vector<MeshAxis>& mesh) {
  std::vector<std::string> all;
  for (const MeshAxis& a : mesh) all.push_back(a.name);
  return all;
}

// `p` run in pmap over `mesh`, each input stacked over the mesh ([mesh..., shape...]); the outputs stacked so.
std::vector<Array> on_mesh(const Program& p, const std::vector<MeshAxis>& mesh, const std::vector<Array>& stacked) {
  PmapOptions options{.runtime = &runtime()};
  options.mesh = mesh;
  PmapProgram run(
      [&](Replica& r, std::span<Array> in) { return run_program(p, r, std::vector<Array>(in.begin(), in.end())); },
      options);
  std::vector<PmapArg> args(stacked.begin(), stacked.end());
  std::vector<Array> out;
  for (const ShardedArray& s : run(args)) out.push_back(s.to_host());
  return out;
}

Shape stacked_shape(const std::vector<MeshAxis>& mesh, const std::vector<std::int64_t>& shape) {
  Shape s;
  for (const MeshAxis& a : mesh) s.push_back(a.size);
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

std::vector<double> normal_values(std::int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& e : v) e = normal(rng);
  return v;
}

double dot(const Array& a, const Array& b) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  EXPECT_EQ(x.size(), y.size());
  double s = 0;
  for (std::size_t k = 0; k < x.size(); ++k) s += x[k] * y[k];
  return s;
}

// ---- JVP ---------------------------------------------------------------------------------------------------

struct JvpCase {
  std::string name;
  std::vector<MeshAxis> mesh;
  std::vector<std::int64_t> shape;  // per replica
  std::string op;
  ProgramParams params;
  CollectiveRules rules = CollectiveRules::pmap;
  // A value the same on every replica is one value, counted once by the adjoint identity: shard_map's
  // invariant psum / pmean results, Megatron's f's input (its identical inputs) and g's result.
  bool same_input = false, same_output = false;
};

std::vector<JvpCase> JvpCases() {
  const std::vector<MeshAxis> line = {{"i", 8}};
  const std::vector<MeshAxis> grid = {{"rows", 2}, {"cols", 4}};
  const std::vector<std::vector<int>> halves = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  const ProgramParams over_i = {{"axes", kAxes({"i"})}};
  return {
      {"psum", line, {3, 2}, "psum", over_i},
      {"psum groups", line, {5}, "psum", {{"axes", kAxes({"i"})}, {"groups", halves}}},
      {"psum both axes", grid, {2, 2}, "psum", {{"axes", kAxes({"rows", "cols"})}}},
      {"psum shard_map", line, {3}, "psum", over_i, CollectiveRules::shard_map, false, true},
      {"pmean", line, {4}, "pmean", over_i},
      {"pmean cols", grid, {3}, "pmean", {{"axes", kAxes({"cols"})}}},
      {"pmean shard_map", line, {2}, "pmean", over_i, CollectiveRules::shard_map, false, true},
      {"pprod", line, {3}, "pprod", over_i},
      {"pprod groups", line, {2}, "pprod", {{"axes", kAxes({"i"})}, {"groups", halves}}},
      {"all_gather", line, {3}, "all_gather", {{"axes", kAxes({"i"})}, {"axis", std::int64_t{0}}}},
      {"all_gather axis 1 tiled", line, {2, 3}, "all_gather",
       {{"axes", kAxes({"i"})}, {"axis", std::int64_t{1}}, {"tiled", true}}},
      {"all_gather groups", line, {2}, "all_gather", {{"axes", kAxes({"i"})}, {"axis", std::int64_t{0}}, {"groups", halves}}},
      {"psum_scatter", line, {8, 3}, "psum_scatter", {{"axes", kAxes({"i"})}, {"axis", std::int64_t{0}}}},
      {"psum_scatter tiled", line, {16}, "psum_scatter", {{"axes", kAxes({"i"})}, {"axis", std::int64_t{0}}, {"tiled", true}}},
      {"all_to_all", line, {8, 2}, "all_to_all",
       {{"axes", kAxes({"i"})}, {"split_axis", std::int64_t{0}}, {"concat_axis", std::int64_t{1}}}},
      {"all_to_all tiled cols", grid, {2, 4}, "all_to_all",
       {{"axes", kAxes({"cols"})}, {"split_axis", std::int64_t{1}}, {"concat_axis", std::int64_t{0}}, {"tiled", true}}},
      {"ppermute partial", line, {2}, "ppermute", {{"axes", kAxes({"i"})}, {"perm", Permutation{{0, 3}, {5, 1}, {1, 0}}}}},
      {"pbroadcast", line, {3}, "pbroadcast", {{"axes", kAxes({"i"})}, {"source", std::int64_t{5}}}},
      {"pbroadcast both axes", grid, {2}, "pbroadcast", {{"axes", kAxes({"rows", "cols"})}, {"source", std::int64_t{6}}}},
      {"all_reduce_identical_inputs", line, {3}, "all_reduce_identical_inputs", over_i, CollectiveRules::pmap, true},
      {"all_reduce_identical_grad_inputs", line, {3}, "all_reduce_identical_grad_inputs", over_i,
       CollectiveRules::pmap, false, true},
      {"replicated_reduce_scatter mean groups", line, {3, 4}, "replicated_reduce_scatter",
       {{"axes", kAxes({"i"})}, {"groups", halves}, {"op", std::string("mean")}}},
      {"replica_sharded_slice", line, {3, 3}, "replica_sharded_slice", over_i},
      {"gather_shards", line, {2}, "gather_shards", {{"axes", kAxes({"i"})}, {"shape", std::vector<std::int64_t>{3, 5}}}},
  };
}

Program single_collective(const JvpCase& c) {
  ProgramBuilder b(Mesh(c.mesh), c.rules);
  const int x = b.input({DType::f64, c.shape, names(c.mesh)});
  b.set_outputs({b.emit(c.op, {x}, c.params)[0]});
  return b.build();
}

TEST(OpsCollectivesRules, EachJvpMatchesCentralDifferencesInPmap) {
  std::mt19937_64 rng(4646);
  for (const JvpCase& c : JvpCases()) {
    SCOPED_TRACE(c.name);
    const Program f = single_collective(c);
    const Program df = jvp_program(f);
    const Shape s = stacked_shape(c.mesh, c.shape);
    const std::int64_t n = num_elements(s);
    std::vector<double> x = normal_values(n, rng), t = normal_values(n, rng);
    // pprod away from zero, where its others' product is smooth.
    if (c.op == "pprod") {
      for (double& e : x) e = e < 0 ? e - 0.5 : e + 0.5;
    }
    const Array xs = Array::from_doubles(x, s, DType::f64), ts = Array::from_doubles(t, s, DType::f64);
    const std::vector<Array> out = on_mesh(df, c.mesh, {xs, ts});
    ASSERT_EQ(out.size(), 2u);
    const double h = 1e-5;
    std::vector<double> up = x, down = x;
    for (std::size_t k = 0; k < x.size(); ++k) {
      up[k] += h * t[k];
      down[k] -= h * t[k];
    }
    const std::vector<double> fu = on_mesh(f, c.mesh, {Array::from_doubles(up, s, DType::f64)})[0].to_doubles();
    const std::vector<double> fd = on_mesh(f, c.mesh, {Array::from_doubles(down, s, DType::f64)})[0].to_doubles();
    const std::vector<double> tangent = out[1].to_doubles();
    ASSERT_EQ(tangent.size(), fu.size());
    double worst = 0, scale = 1e-30;
    for (std::size_t k = 0; k < fu.size(); ++k) {
      const double numeric = (fu[k] - fd[k]) / (2 * h);
      worst = std::max(worst, std::abs(numeric - tangent[k]));
      scale = std::max(scale, std::abs(numeric));
    }
    EXPECT_LE(worst / scale, 1e-7) << c.op << ": max error " << worst << " against max |tangent| " << scale;
  }
}

// n normal values, or one replica's repeated on every replica (`same`).
std::vector<double> values(std::int64_t n, std::int64_t replicas, bool same, std::mt19937_64& rng) {
  std::vector<double> v = normal_values(n, rng);
  const std::int64_t per = n / replicas;
  if (same) {
    for (std::int64_t k = per; k < n; ++k) v[static_cast<std::size_t>(k)] = v[static_cast<std::size_t>(k % per)];
  }
  return v;
}

TEST(OpsCollectivesRules, EachJvpAgreesWithItsVjpByTheAdjointIdentity) {
  std::mt19937_64 rng(1046);
  for (const JvpCase& c : JvpCases()) {
    SCOPED_TRACE(c.name);
    const Program f = single_collective(c);
    const Program df = jvp_program(f);
    const Program vf = vjp_program(f, {0});
    const Shape s = stacked_shape(c.mesh, c.shape);
    const Shape so = stacked_shape(c.mesh, f.output_types()[0].shape);
    std::vector<double> x = normal_values(num_elements(s), rng);
    if (c.op == "pprod") x[3] = 0;  // one zero in a group: the rules' guarded branch
    const Array xs = Array::from_doubles(x, s, DType::f64);
    const std::int64_t replicas = num_elements(stacked_shape(c.mesh, {}));
    const Array ts = Array::from_doubles(values(num_elements(s), replicas, c.same_input, rng), s, DType::f64);
    const Array ys = Array::from_doubles(values(num_elements(so), replicas, c.same_output, rng), so, DType::f64);
    const Array jvp = on_mesh(df, c.mesh, {xs, ts})[1];
    const Array vjp = on_mesh(vf, c.mesh, {xs, ys})[1];
    const double lhs = dot(ys, jvp) / (c.same_output ? replicas : 1), rhs = dot(vjp, ts) / (c.same_input ? replicas : 1);
    EXPECT_LE(std::abs(lhs - rhs), 1e-12 * (std::abs(lhs) + std::abs(rhs) + 1)) << "<y, jvp t> = " << lhs
                                                                                << ", <vjp y, t> = " << rhs;
  }
}

// JAX defines no derivative of pmax or pmin: both modes refuse, naming the equation and the rule.
TEST(OpsCollectivesRules, PmaxAndPminHaveNoDerivativeInEitherMode) {
  for (const std::string op : {"pmax", "pmin"}) {
    const Program f = single_collective({op, {{"i", 2}}, {3}, op, {{"axes", kAxes({"i"})}}});
    for (const bool forward : {true, false}) {
      SCOPED_TRACE(op + (forward ? " jvp" : " vjp"));
      const std::string text = testing::ErrorOf<InvalidArgument>([&] {
        if (forward) {
          jvp_program(f);
        } else {
          vjp_program(f, {0});
        }
      });
      testing::ExpectContains(text, {"equation 0", std::string(forward ? "no JVP rule for " : "no VJP rule for ") + op,
                                     "differentiating pmax or pmin is an error"});
    }
  }
  // PopXL's reduce-scatter is linear for add and mean only.
  const Program f = single_collective({"max", {{"i", 2}}, {4}, "replicated_reduce_scatter",
                                       {{"axes", kAxes({"i"})}, {"op", std::string("max")}}});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { jvp_program(f); }),
                          {"replicated_reduce_scatter with op 'max' has no JVP rule (add and mean have)"});
}

// pbroadcast's type rule: a source among the members, no axis_index_groups (JAX's pbroadcast has none).
TEST(OpsCollectivesRules, PbroadcastNamesABadSourceOrGroups) {
  ProgramBuilder b(Mesh({{"i", 8}}));
  const int x = b.input({DType::f32, {3}, {"i"}});
  testing::ExpectContains(
      testing::ErrorOf<InvalidArgument>([&] { b.emit("pbroadcast", {x}, {{"axes", kAxes({"i"})}, {"source", std::int64_t{8}}}); }),
      {"pbroadcast", "source 8 is outside 0..7 (the members along axes ('i',))"});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] {
                            b.emit("pbroadcast", {x}, {{"axes", kAxes({"i"})}, {"source", std::int64_t{0}},
                                                       {"groups", std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}}});
                          }),
                          {"pbroadcast has no parameter 'groups'"});
}

// ---- vmap with an axis name ---------------------------------------------------------------------------------

struct VmapCase {
  std::string name;
  std::vector<MeshAxis> mesh;  // the first axis, 'b', is vmap's; an 'i' after it stays a mesh axis
  std::vector<std::int64_t> shape;
  std::string op;
  ProgramParams params;
  bool batched = true;  // x varies over 'b' (else it is every example's: an unbatched operand)
};

std::vector<VmapCase> VmapCases() {
  const std::vector<MeshAxis> b4 = {{"b", 4}};
  const std::vector<MeshAxis> b4i2 = {{"b", 4}, {"i", 2}};
  const std::vector<MeshAxis> b2i4 = {{"b", 2}, {"i", 4}};
  const ProgramParams over_b = {{"axes", kAxes({"b"})}};
  const ProgramParams over_bi = {{"axes", kAxes({"b", "i"})}};
  const ProgramParams over_ib = {{"axes", kAxes({"i", "b"})}};
  const auto gather = [](std::vector<std::string> axes, std::int64_t axis, bool tiled) {
    return ProgramParams{{"axes", kAxes(std::move(axes))}, {"axis", axis}, {"tiled", tiled}};
  };
  const auto a2a = [](std::int64_t split, std::int64_t concat, bool tiled) {
    return ProgramParams{{"axes", kAxes({"b"})}, {"split_axis", split}, {"concat_axis", concat}, {"tiled", tiled}};
  };
  std::vector<VmapCase> cases = {
      // Over vmap's axis alone.
      {"psum", b4, {3, 2}, "psum", over_b},
      {"pmean", b4, {3}, "pmean", over_b},
      {"pmax", b4, {5}, "pmax", over_b},
      {"pmin", b4, {5}, "pmin", over_b},
      {"pprod", b4, {3}, "pprod", over_b},
      {"all_reduce_identical_inputs", b4, {2}, "all_reduce_identical_inputs", over_b},
      {"all_reduce_identical_grad_inputs", b4, {2}, "all_reduce_identical_grad_inputs", over_b},
      {"all_gather", b4, {3}, "all_gather", gather({"b"}, 0, false)},
      {"all_gather axis 1", b4, {2, 3}, "all_gather", gather({"b"}, 1, false)},
      {"all_gather axis -1", b4, {2, 3}, "all_gather", gather({"b"}, -1, false)},
      {"all_gather tiled", b4, {3}, "all_gather", gather({"b"}, 0, true)},
      {"all_gather tiled axis 1", b4, {2, 3}, "all_gather", gather({"b"}, 1, true)},
      {"psum_scatter", b4, {4, 3}, "psum_scatter", gather({"b"}, 0, false)},
      {"psum_scatter axis 1", b4, {2, 4}, "psum_scatter", gather({"b"}, 1, false)},
      {"psum_scatter tiled", b4, {8, 2}, "psum_scatter", gather({"b"}, 0, true)},
      {"psum_scatter tiled axis 1", b4, {3, 8}, "psum_scatter", gather({"b"}, 1, true)},
      {"all_to_all", b4, {4, 3}, "all_to_all", a2a(0, 1, false)},
      {"all_to_all concat first", b4, {3, 4}, "all_to_all", a2a(1, 0, false)},
      {"all_to_all same axis", b4, {4, 2}, "all_to_all", a2a(0, 0, false)},
      {"all_to_all tiled", b4, {8, 3}, "all_to_all", a2a(0, 1, true)},
      {"all_to_all tiled concat first", b4, {3, 8}, "all_to_all", a2a(1, 0, true)},
      {"all_to_all tiled same axis", b4, {8}, "all_to_all", a2a(0, 0, true)},
      {"ppermute cycle", b4, {3}, "ppermute", {{"axes", kAxes({"b"})}, {"perm", Permutation{{0, 1}, {1, 2}, {2, 3}, {3, 0}}}}},
      {"pbroadcast", b4, {3}, "pbroadcast", {{"axes", kAxes({"b"})}, {"source", std::int64_t{2}}}},
      {"axis_index", b4, {1}, "axis_index", over_b},
      {"pvary", b4, {2}, "pvary", over_b},
      {"replicated_reduce_scatter", b4, {5}, "replicated_reduce_scatter", over_b},
      {"replicated_reduce_scatter mean", b4, {2, 3}, "replicated_reduce_scatter",
       {{"axes", kAxes({"b"})}, {"op", std::string("mean")}}},
      {"replicated_reduce_scatter max", b4, {6}, "replicated_reduce_scatter",
       {{"axes", kAxes({"b"})}, {"op", std::string("max")}}},
      {"replica_sharded_slice", b4, {2, 3}, "replica_sharded_slice", over_b},
      {"gather_shards", b4, {2}, "gather_shards", {{"axes", kAxes({"b"})}, {"shape", std::vector<std::int64_t>{7}}}},
      // An unbatched operand (every example's) with a collective over vmap's axis.
      {"psum unbatched", b4, {3}, "psum", over_b, false},
      {"pmean unbatched", b4, {3}, "pmean", over_b, false},
      {"pmax unbatched", b4, {3}, "pmax", over_b, false},
      {"pprod unbatched", b4, {3}, "pprod", over_b, false},
      {"all_gather unbatched tiled", b4, {2}, "all_gather", gather({"b"}, 0, true), false},
      {"psum_scatter unbatched", b4, {4}, "psum_scatter", gather({"b"}, 0, false), false},
      {"all_to_all unbatched", b4, {4, 2}, "all_to_all", a2a(0, 1, false), false},
      {"ppermute cycle unbatched", b4, {2}, "ppermute",
       {{"axes", kAxes({"b"})}, {"perm", Permutation{{0, 1}, {1, 2}, {2, 3}, {3, 0}}}}, false},
      {"replica_sharded_slice unbatched", b4, {5}, "replica_sharded_slice", over_b, false},
      {"gather_shards unbatched", b4, {2}, "gather_shards",
       {{"axes", kAxes({"b"})}, {"shape", std::vector<std::int64_t>{2, 3}}}, false},
      // vmap inside a pmap: collectives over the other axis run on the batched value.
      {"psum over i", b4i2, {3}, "psum", {{"axes", kAxes({"i"})}}},
      {"psum over i groups", b2i4, {2}, "psum", {{"axes", kAxes({"i"})}, {"groups", std::vector<std::vector<int>>{{0, 3}, {2, 1}}}}},
      {"pmax over i", b4i2, {3}, "pmax", {{"axes", kAxes({"i"})}}},
      {"all_gather over i axis 1", b4i2, {2, 3}, "all_gather", gather({"i"}, 1, false)},
      {"all_gather over i tiled groups", b2i4, {3}, "all_gather",
       {{"axes", kAxes({"i"})}, {"axis", std::int64_t{0}}, {"tiled", true}, {"groups", std::vector<std::vector<int>>{{0, 1}, {2, 3}}}}},
      {"psum_scatter over i", b4i2, {3, 2}, "psum_scatter", gather({"i"}, 1, false)},
      {"all_to_all over i", b2i4, {4, 3}, "all_to_all",
       {{"axes", kAxes({"i"})}, {"split_axis", std::int64_t{0}}, {"concat_axis", std::int64_t{1}}}},
      {"ppermute over i", b2i4, {2}, "ppermute", {{"axes", kAxes({"i"})}, {"perm", Permutation{{0, 2}, {2, 1}}}}},
      {"pbroadcast over i", b4i2, {2}, "pbroadcast", {{"axes", kAxes({"i"})}, {"source", std::int64_t{1}}}},
      {"replicated_reduce_scatter over i", b2i4, {5}, "replicated_reduce_scatter",
       {{"axes", kAxes({"i"})}, {"groups", std::vector<std::vector<int>>{{3, 0}, {1, 2}}}}},
      {"replicated_reduce_scatter max over i", b4i2, {3}, "replicated_reduce_scatter",
       {{"axes", kAxes({"i"})}, {"op", std::string("max")}}},
      {"replica_sharded_slice over i groups", b2i4, {3}, "replica_sharded_slice",
       {{"axes", kAxes({"i"})}, {"groups", std::vector<std::vector<int>>{{2, 0}, {1, 3}}}}},
      {"gather_shards over i", b4i2, {2}, "gather_shards", {{"axes", kAxes({"i"})}, {"shape", std::vector<std::int64_t>{3}}}},
      // Over both axes: the examples reduced, then the collective over the other.
      {"psum over b, i", b4i2, {3}, "psum", over_bi},
      {"pmean over i, b", b2i4, {2}, "pmean", over_ib},
      {"pmin over b, i", b4i2, {2}, "pmin", over_bi},
      {"pprod over b, i", b2i4, {2}, "pprod", over_bi},
      {"psum over b, i unbatched", b4i2, {2}, "psum", over_bi, false},
      {"axis_index over b, i", b4i2, {1}, "axis_index", over_bi},
      {"axis_index over i, b", b2i4, {1}, "axis_index", over_ib},
      {"pvary over b, i", b4i2, {2}, "pvary", over_bi},
  };
  return cases;
}

// Small dyadic numbers (k / 8, |k| <= 12): exact sums and products in any order.
Array dyadic(const Shape& shape, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> k(-12, 12);
  std::vector<double> v(static_cast<std::size_t>(num_elements(shape)));
  for (double& e : v) e = k(rng) / 8.0;
  return Array::from_doubles(v, shape, DType::f64);
}

// The program of a case: x (varying over every mesh axis, or every one but 'b' when unbatched) -> C(x).
Program vmap_program(const VmapCase& c, CollectiveRules rules = CollectiveRules::pmap) {
  ProgramBuilder b(Mesh(c.mesh), rules);
  std::vector<std::string> varying = names(c.mesh);
  if (!c.batched) varying.erase(varying.begin());
  const int x = b.input({DType::f64, c.shape, varying});
  b.set_outputs({c.op == "axis_index" ? b.emit("axis_index", {}, c.params)[0] : b.emit(c.op, {x}, c.params)[0]});
  return b.build();
}

// Element [b, i, ...] of `a` (stacked [b, i, rest...] or [b, rest...]) as the flat index range of its `rest`.
std::vector<double> block(const std::vector<double>& all, std::int64_t index, std::int64_t size) {
  return {all.begin() + index * size, all.begin() + (index + 1) * size};
}

void ExpectVmapMatchesPmap(const VmapCase& c, CollectiveRules rules, std::mt19937_64& rng) {
  const Program p = vmap_program(c, rules);
  const std::int64_t n = c.mesh[0].size;
  const std::int64_t m = c.mesh.size() > 1 ? c.mesh[1].size : 1;
  const std::vector<MeshAxis> rest(c.mesh.begin() + 1, c.mesh.end());
  const std::int64_t per = num_elements(Shape(c.shape.begin(), c.shape.end()));
  // x per (i, b): drawn over the rest of the mesh, and over b too when batched.
  Shape drawn_shape = stacked_shape(rest, c.shape);
  if (c.batched) drawn_shape.insert(drawn_shape.begin() + static_cast<std::ptrdiff_t>(rest.size()), n);  // [i?, b?, shape]
  const Array drawn = dyadic(drawn_shape, rng);
  const std::vector<double> d = drawn.to_doubles();
  // The reference: the program in pmap over the whole mesh, x stacked [b, i?, shape].
  std::vector<double> full;
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t i = 0; i < m; ++i) {
      const std::vector<double> x = block(d, c.batched ? i * n + b : i, per);
      full.insert(full.end(), x.begin(), x.end());
    }
  }
  const std::vector<double> want =
      on_mesh(p, c.mesh, {Array::from_doubles(full, stacked_shape(c.mesh, c.shape), DType::f64)})[0].to_doubles();
  const BatchedProgram q = batch_program(p, {c.batched}, n, "b");
  ASSERT_EQ(q.out_batched.size(), 1u);
  const Array got_array = rest.empty() ? run_program(q.program, std::vector<Array>{drawn})[0]
                                       : on_mesh(q.program, rest, {drawn})[0];
  const std::vector<double> got = got_array.to_doubles();
  const std::int64_t out = static_cast<std::int64_t>(want.size()) / (n * m);
  ASSERT_EQ(static_cast<std::int64_t>(got.size()), q.out_batched[0] ? n * m * out : m * out)
      << "batched: " << q.out_batched[0] << "\n" << q.program.text();
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t i = 0; i < m; ++i) {
      // got is [i?, b?, out].
      const std::vector<double> mine = block(got, q.out_batched[0] ? i * n + b : i, out);
      EXPECT_EQ(mine, block(want, b * m + i, out)) << "example " << b << ", member " << i << " of\n" << q.program.text();
    }
  }
}

TEST(OpsCollectivesRules, VmapWithAnAxisNameEqualsPmapBitForBit) {
  std::mt19937_64 rng(46);
  for (const VmapCase& c : VmapCases()) {
    SCOPED_TRACE(c.name);
    ExpectVmapMatchesPmap(c, CollectiveRules::pmap, rng);
  }
}

// shard_map's types (a value varies over the axes it is split along) batch the same way.
TEST(OpsCollectivesRules, VmapUnderShardMapRulesEqualsPmapBitForBit) {
  std::mt19937_64 rng(64);
  for (const VmapCase& c : VmapCases()) {
    // (shard_map has no axis_index_groups.)
    if ((c.op != "psum" && c.op != "all_gather" && c.op != "pvary" && c.op != "psum_scatter") ||
        c.params.contains("groups")) {
      continue;
    }
    SCOPED_TRACE(c.name);
    ExpectVmapMatchesPmap(c, CollectiveRules::shard_map, rng);
  }
}

// Where JAX's batchers refuse, so do these, naming the op, the axis and the reason.
TEST(OpsCollectivesRules, VmapRefusesWhatJaxRefuses) {
  struct Refusal {
    VmapCase c;
    std::string why;
  };
  const std::vector<Refusal> refusals = {
      {{"psum groups over b", {{"b", 4}}, {2}, "psum", {{"axes", kAxes({"b"})}, {"groups", std::vector<std::vector<int>>{{0, 1}, {2, 3}}}}},
       "psum over vmap's axis 'b': axis_index_groups are not supported under vmap"},
      {{"all_gather over b, i", {{"b", 2}, {"i", 2}}, {2}, "all_gather",
        {{"axes", kAxes({"b", "i"})}, {"axis", std::int64_t{0}}}},
       "all_gather over vmap's axis 'b': together with ('i',) it has no batching rule"},
      {{"ppermute over b, i", {{"b", 2}, {"i", 2}}, {2}, "ppermute", {{"axes", kAxes({"b", "i"})}, {"perm", Permutation{{0, 1}}}}},
       "ppermute over vmap's axis 'b': together with ('i',)"},
      // A partial permutation, batched operand or not (JAX's batcher asserts len(perm) == axis size first).
      {{"ppermute partial", {{"b", 4}}, {2}, "ppermute", {{"axes", kAxes({"b"})}, {"perm", Permutation{{0, 3}, {3, 1}}}}},
       "ppermute over vmap's axis 'b': perm has 2 (source, destination) pairs for 4 examples; JAX's batcher takes "
       "a full permutation only (\"Permutation doesn't match the axis size!\")"},
      {{"ppermute partial unbatched", {{"b", 4}}, {2}, "ppermute", {{"axes", kAxes({"b"})}, {"perm", Permutation{{1, 2}}}},
        false},
       "ppermute over vmap's axis 'b': perm has 1 (source, destination) pairs for 4 examples"},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.c.name);
    const Program p = vmap_program(r.c);
    testing::ExpectContains(
        testing::ErrorOf<InvalidArgument>([&] { batch_program(p, {r.c.batched}, r.c.mesh[0].size, "b"); }),
                            {"equation 0", "under vmap", r.why});
  }
}

}  // namespace ops_collectives_rules_test
}  // namespace
}  // namespace weft
