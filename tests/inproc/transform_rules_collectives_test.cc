// The property harness of tests/unit/transform_rules_test.cc for the collectives' rows (issue 46; the table is
// tests/support/transform_rows.hpp's), run where collectives run: each row's one-equation program in pmap over
// its mesh (4 replicas), float64, per-replica values stacked over the replicas.
//   (b) the JVP program's tangents against central differences of the program;
//   (c) the adjoint identity summed over the replicas, sum_r <vjp(u)_r, v_r> = sum_r <u_r, jvp(v)_r>, to
//       1e-12 relative (JAX's pmap rules; not for Megatron's f and g, whose transposes are a convention);
//   (d) batch_program with the input batched (B = 3, the batch axis not named), run in pmap, equals the
//       per-example pmap runs stacked, bit for bit;
//   (e) vmap over the mesh axis itself (batch_program with axis_name, no replicas left: one program over the
//       stacked values) equals the pmap run, to 1e-14 relative (the reductions' order may differ).
// An op that refuses a transformation must say why (OpInfo::no_rule) and be quoted by the refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "../support/transform_rows.hpp"

namespace weft {
namespace {
namespace transform_rules_collectives_test {

using namespace weft::testing;

// `one` (a value of every replica) repeated for each replica of `mesh`: [mesh shape..., shape...].
Array Tiled(const Array& one, const Mesh& mesh) {
  const std::vector<double> v = one.to_doubles();
  std::vector<double> all;
  for (int r = 0; r < mesh.size(); ++r) all.insert(all.end(), v.begin(), v.end());
  Dims shape = mesh.shape();
  shape.insert(shape.end(), one.shape().begin(), one.shape().end());
  return Array::from_doubles(all, shape, one.dtype());
}

// Values for every replica of `mesh`, stacked as pmap takes them: [mesh shape..., shape...]; `same`: one value
// for every replica (an invariant input's).
Array Stacked(const InputSpec& spec, const Mesh& mesh, std::mt19937_64& rng, bool same) {
  return same ? Tiled(Draw(spec, rng), mesh) : Draw(spec, rng, mesh.shape());
}
Array StackedDirection(const ValueType& type, const Mesh& mesh, std::mt19937_64& rng, bool same) {
  if (same) return Tiled(Direction(type, rng), mesh);
  ValueType stacked = type;
  const Dims lead = mesh.shape();
  stacked.shape.insert(stacked.shape.begin(), lead.begin(), lead.end());
  return Direction(stacked, rng);
}

// `p` run as every replica of `row`'s mesh, each taking its slice of each stacked input; its outputs stacked.
// A program without inputs (axis_index) gets a placeholder argument, as pmap needs one to map.
std::vector<Array> RunInPmap(Runtime& rt, const Row& row, const Program& p, const std::vector<Array>& stacked) {
  PmapOptions options{.runtime = &rt};
  options.mesh = row.mesh;
  const bool placeholder = stacked.empty();
  PmapProgram run(
      [&p, placeholder](Replica& r, std::span<Array> in) {
        return run_program(p, r, placeholder ? std::vector<Array>{} : std::vector<Array>(in.begin(), in.end()));
      },
      options);
  std::vector<PmapArg> args(stacked.begin(), stacked.end());
  if (placeholder) args.emplace_back(Array::zeros(Mesh(row.mesh).shape(), DType::f32));
  std::vector<Array> out;
  for (const ShardedArray& s : run(std::move(args))) out.push_back(s.to_host());
  return out;
}

Runtime& TheRuntime() {
  static Runtime rt({.device_count = 4, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error"});
  return rt;
}

std::vector<Row> CollectiveRows() {
  std::vector<Row> rows;
  for (Row& row : Rows()) {
    if (row.home == Home::collective && program::find_op(row.op) != nullptr) rows.push_back(std::move(row));
  }
  return rows;
}

TEST(TransformRulesCollectives, JvpMatchesCentralDifferencesAndVjpIsItsAdjoint) {
  Runtime& rt = TheRuntime();
  std::mt19937_64 rng(4601);
  for (const Row& row : CollectiveRows()) {
    const Program f = Build(row);
    const Mesh mesh(row.mesh);
    const program::OpInfo& info = Info(row.op);
    const std::vector<ValueType> in_types = f.input_types(), out_types = f.output_types();
    if (!AnyFloating(in_types) || !AnyFloating(out_types)) continue;  // axis_index: nothing to differentiate
    std::vector<Array> x, v;
    for (const InputSpec& spec : row.inputs) x.push_back(Stacked(spec, mesh, rng, row.invariant));
    for (const ValueType& t : in_types) v.push_back(StackedDirection(t, mesh, rng, row.invariant));
    const std::optional<Program> jf =
        Transformed(row, "jvp_program", Refuses(info, info.jvp), [&] { return jvp_program(f); });
    if (!jf) continue;
    std::vector<Array> args = x;
    args.insert(args.end(), v.begin(), v.end());
    const std::vector<Array> jvp_out = RunInPmap(rt, row, *jf, args);
    const std::size_t n_out = out_types.size();
    if (jvp_out.size() != 2 * n_out) {
      ADD_FAILURE() << row.name() << ": the JVP program has " << jvp_out.size() << " outputs, not 2 x " << n_out;
      continue;
    }

    // (b)
    const auto moved = [&](double h) {
      std::vector<Array> at;
      for (std::size_t k = 0; k < x.size(); ++k) {
        std::vector<double> xv = x[k].to_doubles();
        const std::vector<double> dv = v[k].to_doubles();
        for (std::size_t i = 0; i < xv.size(); ++i) xv[i] += h * dv[i];
        at.push_back(Array::from_doubles(xv, x[k].shape(), x[k].dtype()));
      }
      return RunInPmap(rt, row, f, at);
    };
    const std::vector<Array> plus = moved(row.step), minus = moved(-row.step);
    for (std::size_t j = 0; j < n_out; ++j) {
      const std::vector<double> t = jvp_out[n_out + j].to_doubles(), p = plus[j].to_doubles(), m = minus[j].to_doubles();
      ASSERT_EQ(t.size(), p.size()) << row.name();
      double worst = 0, scale = 1e-3;
      for (std::size_t i = 0; i < t.size(); ++i) {
        const double numeric = (p[i] - m[i]) / (2 * row.step);
        worst = std::isnan(t[i]) ? INFINITY : std::max(worst, std::abs(numeric - t[i]));
        scale = std::max(scale, std::abs(numeric));
      }
      EXPECT_LE(worst, row.jvp_tol * scale) << row.name() << ": output " << j << "'s JVP tangent is off from central "
                                            << "differences by " << worst << " (largest tangent " << scale << ")";
    }

    // (c)
    if (row.adjoint == Adjoint::by_convention) continue;
    const std::optional<Program> vf = Transformed(row, "vjp_program", false, [&] { return vjp_program(f, {0}); });
    if (!vf) continue;
    std::vector<Array> u;
    for (const ValueType& t : out_types) u.push_back(StackedDirection(t, mesh, rng, false));  // outputs vary
    std::vector<Array> vjp_args = x;
    vjp_args.insert(vjp_args.end(), u.begin(), u.end());
    const std::vector<Array> cts = RunInPmap(rt, row, *vf, vjp_args);
    // An invariant input is one value: its cotangent (invariant too) counts once, not once per replica.
    const double once = row.invariant ? 1.0 / mesh.size() : 1.0;
    const double lhs = once * Dot(cts[n_out], v[0]), rhs = Dot(u[0], jvp_out[n_out]);
    const double scale = once * Dot(cts[n_out], v[0], true) + Dot(u[0], jvp_out[n_out], true);
    EXPECT_LE(std::abs(lhs - rhs), 1e-12 * std::max(scale, 1e-300))
        << row.name() << ": sum over replicas of <vjp(u), v> = " << lhs << " but of <u, jvp(v)> = " << rhs;
  }
}

TEST(TransformRulesCollectives, BatchingEqualsPerExamplePmapRunsBitForBit) {
  constexpr std::int64_t B = 3;
  Runtime& rt = TheRuntime();
  std::mt19937_64 rng(4602);
  for (const Row& row : CollectiveRows()) {
    if (row.inputs.empty()) continue;  // axis_index: nothing to batch but vmap's own axis, (e)'s case
    const Program f = Build(row);
    const Mesh mesh(row.mesh);
    const program::OpInfo& info = Info(row.op);
    const std::optional<BatchedProgram> bf = Transformed(row, "batch_program", Refuses(info, info.batch),
                                                         [&] { return batch_program(f, {true}, B); });
    if (!bf) continue;
    std::vector<Array> examples;  // per example: every replica's value, [mesh shape..., shape...]
    for (std::int64_t e = 0; e < B; ++e) examples.push_back(Stacked(row.inputs[0], mesh, rng, row.invariant));
    const int example_axis = mesh.num_axes();  // behind the mesh's axes
    const std::vector<Array> got = RunInPmap(rt, row, bf->program, {Array::stack(examples, example_axis)});
    std::vector<std::vector<Array>> want;
    for (std::int64_t e = 0; e < B; ++e) want.push_back(RunInPmap(rt, row, f, {examples[e]}));
    for (std::size_t j = 0; j < got.size(); ++j) {
      std::vector<Array> outs;
      for (std::int64_t e = 0; e < B; ++e) outs.push_back(want[e][j]);
      const Array expected = bf->out_batched[j] ? Array::stack(outs, example_axis) : outs[0];
      const std::string diff = Difference(got[j], expected, row.batch_tol);
      EXPECT_TRUE(diff.empty()) << row.name() << ": batched output " << j << ": " << diff;
    }
  }
}

TEST(TransformRulesCollectives, VmapOverTheMeshAxisEqualsPmap) {
  Runtime& rt = TheRuntime();
  std::mt19937_64 rng(4603);
  for (const Row& row : CollectiveRows()) {
    if (row.mesh.size() != 1) continue;  // one axis, vmap's: the batched program has no mesh left
    const Program f = Build(row);
    const Mesh mesh(row.mesh);
    const program::OpInfo& info = Info(row.op);
    const std::string axis = row.mesh[0].name;
    const std::vector<bool> batched(row.inputs.size(), !row.invariant);  // an invariant input: every example's
    if (row.params.count("groups") > 0) {
      // vmap has no axis_index_groups (JAX's rule): refused, naming them.
      EXPECT_NE(testing::ErrorOf<InvalidArgument>([&] { batch_program(f, batched, mesh.size(), axis); })
                    .find("axis_index_groups"),
                std::string::npos)
          << row.name();
      continue;
    }
    if (row.op == "ppermute" &&
        std::get<Permutation>(row.params.at("perm")).size() != static_cast<std::size_t>(mesh.size())) {
      // A partial permutation over vmap's axis: refused, as JAX's batcher refuses it.
      EXPECT_NE(testing::ErrorOf<InvalidArgument>([&] { batch_program(f, batched, mesh.size(), axis); })
                    .find("Permutation doesn't match the axis size!"),
                std::string::npos)
          << row.name();
      continue;
    }
    const std::optional<BatchedProgram> bf =
        Transformed(row, "batch_program over the mesh axis", Refuses(info, info.batch),
                    [&] { return batch_program(f, batched, mesh.size(), axis); });
    if (!bf) continue;
    std::vector<Array> x, one;
    for (const InputSpec& spec : row.inputs) {
      x.push_back(Stacked(spec, mesh, rng, row.invariant));
      if (row.invariant) one.push_back(x.back()[0]);
    }
    std::vector<Array> got;
    try {
      got = run_program(bf->program, row.invariant ? one : x);
    } catch (const std::exception& e) {
      ADD_FAILURE() << row.name() << ": the program batched over '" << axis << "' fails to run: " << e.what();
      continue;
    }
    const std::vector<Array> want = RunInPmap(rt, row, f, x);
    for (std::size_t j = 0; j < got.size(); ++j) {
      const std::vector<double> w = want[j].to_doubles();
      std::vector<double> g = got[j].to_doubles();
      if (!bf->out_batched[j]) {  // the same on every replica: compare with each
        std::vector<double> tiled;
        for (int r = 0; r < mesh.size(); ++r) tiled.insert(tiled.end(), g.begin(), g.end());
        g = tiled;
      }
      ASSERT_EQ(g.size(), w.size()) << row.name() << ": output " << j;
      for (std::size_t i = 0; i < g.size(); ++i) {
        EXPECT_NEAR(g[i], w[i], 1e-14 * std::max(1.0, std::abs(w[i])))
            << row.name() << ": output " << j << " element " << i << " under vmap over '" << axis
            << "' against pmap";
      }
    }
  }
}

}  // namespace transform_rules_collectives_test
}  // namespace
}  // namespace weft
