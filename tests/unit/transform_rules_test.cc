// The registry's property harness (issue 46): one table with a row per registered primitive (several for ops
// whose parameters change the rule), each a one-equation program, and four checks run on every row:
//   (a) a primitive with a floating result has a JVP rule, and every primitive a batching rule, or says in
//       OpInfo::no_rule why not (the refusals are listed, and the transformation must quote the reason);
//   (b) the JVP program's tangents against central differences of the program, in float64;
//   (c) the adjoint identity <vjp(u), v> = <u, jvp(v)> to 1e-12 relative (vjp_program and jvp_program of the
//       same program, random u and v);
//   (d) batch_program with each subset of the inputs batched (B = 3), run on stacked inputs, equals the
//       per-example runs stacked, bit for bit (matmul's rows: to a dot product's rounding, the table says why).
// The table is tests/support/transform_rows.hpp's. A registered op without a row fails
// `EveryRegisteredOpHasARow`, so a new primitive arrives with its row. The collectives' rows are built here
// (so (a) sees their result types) and run in pmap by tests/inproc/transform_rules_collectives_test.cc;
// session effects are refused by every transformation (jvp.cc, batching.cc) and are listed as such;
// the custom calls' rows need a registered rule program and live in the custom family's tests.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../support/transform_rows.hpp"

namespace weft {
namespace {
namespace transform_rules_test {

using namespace weft::testing;

// ---- (coverage) -----------------------------------------------------------------------------------------------

TEST(TransformRules, EveryRegisteredOpHasARow) {
  std::set<std::string> in_table;
  for (const Row& row : Rows()) in_table.insert(row.op);
  for (const std::string& op : program::registered_ops()) {
    EXPECT_TRUE(in_table.count(op) > 0) << "primitive '" << op << "' has no row in tests/support/transform_rows.hpp's table: "
                                        << "add one (its inputs and params), so that its rules are checked";
  }
  for (const std::string& op : in_table) {
    EXPECT_NE(program::find_op(op), nullptr) << "the table has a row for '" << op << "', which is not registered";
  }
}

// ---- (a) ------------------------------------------------------------------------------------------------------

TEST(TransformRules, EveryPrimitiveHasItsRulesOrSaysWhyNot) {
  std::map<std::string, bool> floating;  // op -> some row has a floating result
  for (const Row& row : Rows()) {
    if (program::find_op(row.op) == nullptr) continue;
    bool& f = floating[row.op];
    // The custom calls' forward mode is the machinery's (custom_vjp_call's refused, as JAX does; custom_jvp_call's
    // registered rule inlined), not a JVP rule's; their batching rules are still needed.
    if (row.home == Home::custom) continue;
    try {
      f = f || AnyFloating(Build(row).output_types());
    } catch (const std::exception& e) {
      ADD_FAILURE() << row.name() << ": the row's program does not build: " << e.what();
    }
  }
  std::vector<std::string> refusals;
  for (const auto& [op, has_floating_result] : floating) {
    const program::OpInfo& info = Info(op);
    if (info.effectful) {
      refusals.push_back(op + ": every transformation (a session effect)");
      continue;
    }
    if (has_floating_result && info.jvp == nullptr) {
      if (info.no_rule.empty()) {
        ADD_FAILURE() << op << ": no JVP rule (OpInfo::jvp is null) and no OpInfo::no_rule saying why; it has a "
                      << "floating result, so jax.jvp / jacfwd / hessian through it fail";
      } else {
        refusals.push_back(op + ": jvp (" + info.no_rule + ")");
      }
    }
    if (info.batch == nullptr) {
      if (info.no_rule.empty()) {
        ADD_FAILURE() << op << ": no batching rule (OpInfo::batch is null) and no OpInfo::no_rule saying why; "
                      << "vmap of a function using it fails";
      } else {
        refusals.push_back(op + ": vmap (" + info.no_rule + ")");
      }
    }
  }
  std::string listed;
  for (const std::string& r : refusals) listed += "\n  " + r;
  std::cout << "Refusals (" << refusals.size() << "):" << listed << "\n";
  RecordProperty("refusals", listed);
}

// ---- (b) and (c) ----------------------------------------------------------------------------------------------

TEST(TransformRules, JvpMatchesCentralDifferencesAndVjpIsItsAdjoint) {
  std::mt19937_64 rng(46);
  for (const Row& row : Rows()) {
    if (row.home != Home::here) continue;
    const Program f = Build(row);
    const program::OpInfo& info = Info(row.op);
    const std::vector<ValueType> in_types = f.input_types(), out_types = f.output_types();
    std::vector<Array> x, v;
    for (const InputSpec& spec : row.inputs) x.push_back(Draw(spec, rng));
    for (const ValueType& t : in_types) v.push_back(Direction(t, rng));
    const bool differentiable = AnyFloating(in_types) && AnyFloating(out_types);
    const std::optional<Program> jf = Transformed(row, "jvp_program", differentiable && Refuses(info, info.jvp),
                                                  [&] { return jvp_program(f); });
    if (!jf) continue;
    std::vector<Array> args = x;
    args.insert(args.end(), v.begin(), v.end());
    const std::vector<Array> jvp_out = run_program(*jf, args);
    if (jvp_out.size() != 2 * out_types.size()) {
      ADD_FAILURE() << row.name() << ": the JVP program has " << jvp_out.size() << " outputs, not 2 x " << out_types.size();
      continue;
    }
    const std::size_t n_out = out_types.size();

    // (b): d/dh f(x + h v) at 0, by central differences along v.
    const auto moved = [&](double h) {
      std::vector<Array> at;
      for (std::size_t k = 0; k < x.size(); ++k) {
        if (!is_floating(in_types[k].dtype)) {
          at.push_back(x[k]);
          continue;
        }
        std::vector<double> xv = x[k].to_doubles();
        const std::vector<double> dv = v[k].to_doubles();
        for (std::size_t i = 0; i < xv.size(); ++i) xv[i] += h * dv[i];
        at.push_back(Array::from_doubles(xv, x[k].shape(), x[k].dtype()));
      }
      return run_program(f, at);
    };
    const std::vector<Array> plus = moved(row.step), minus = moved(-row.step);
    for (std::size_t j = 0; j < n_out; ++j) {
      const Array& tangent = jvp_out[n_out + j];
      EXPECT_EQ(tangent.dtype(), out_types[j].dtype) << row.name() << ": output " << j << "'s tangent dtype";
      EXPECT_EQ(tangent.shape(), out_types[j].shape) << row.name() << ": output " << j << "'s tangent shape";
      if (!is_floating(out_types[j].dtype)) continue;
      const std::vector<double> t = tangent.to_doubles(), p = plus[j].to_doubles(), m = minus[j].to_doubles();
      double worst = 0, scale = 1e-3;
      std::size_t where = 0;
      for (std::size_t i = 0; i < t.size(); ++i) {
        const double numeric = row.derivative == Derivative::zero ? 0.0 : (p[i] - m[i]) / (2 * row.step);
        if (std::abs(numeric - t[i]) > worst || std::isnan(t[i])) {
          worst = std::isnan(t[i]) ? INFINITY : std::abs(numeric - t[i]);
          where = i;
        }
        scale = std::max(scale, std::abs(numeric));
      }
      EXPECT_LE(worst, row.jvp_tol * scale)
          << row.name() << ": output " << j << "'s JVP tangent is off from central differences by " << worst
          << " at element " << where << " (largest tangent " << scale << ")";
    }

    // (c): <vjp(u), v> = <u, jvp(v)>, the cotangents with respect to every floating input.
    if (!differentiable) continue;
    std::vector<int> wrt;
    for (std::size_t k = 0; k < in_types.size(); ++k) {
      if (is_floating(in_types[k].dtype)) wrt.push_back(static_cast<int>(k));
    }
    // A refusal (while_loop's, JAX's) must quote the op's reason.
    const std::optional<Program> vf =
        Transformed(row, "vjp_program", Refuses(info, info.vjp), [&] { return vjp_program(f, wrt); });
    if (!vf) continue;
    std::vector<Array> vjp_args = x;
    std::vector<Array> u;
    for (const ValueType& t : out_types) u.push_back(Direction(t, rng));
    vjp_args.insert(vjp_args.end(), u.begin(), u.end());
    const std::vector<Array> cts = run_program(*vf, vjp_args);
    if (cts.size() != n_out + wrt.size()) {
      ADD_FAILURE() << row.name() << ": the VJP program has " << cts.size() << " outputs, not " << n_out + wrt.size();
      continue;
    }
    double lhs = 0, rhs = 0, scale = 0;
    for (std::size_t k = 0; k < wrt.size(); ++k) {
      lhs += Dot(cts[n_out + k], v[wrt[k]]);
      scale += Dot(cts[n_out + k], v[wrt[k]], true);
    }
    for (std::size_t j = 0; j < n_out; ++j) {
      if (!is_floating(out_types[j].dtype)) continue;
      rhs += Dot(u[j], jvp_out[n_out + j]);
      scale += Dot(u[j], jvp_out[n_out + j], true);
    }
    EXPECT_LE(std::abs(lhs - rhs), 1e-12 * std::max(scale, 1e-300))
        << row.name() << ": <vjp(u), v> = " << lhs << " but <u, jvp(v)> = " << rhs << " (the VJP and JVP rules "
        << "disagree; sum of |terms| " << scale << ")";
  }
}

// ---- (d) ------------------------------------------------------------------------------------------------------

TEST(TransformRules, BatchingEqualsPerExampleRunsBitForBit) {
  constexpr std::int64_t B = 3;
  std::mt19937_64 rng(4646);
  for (const Row& row : Rows()) {
    if (row.home != Home::here) continue;
    const Program f = Build(row);
    const program::OpInfo& info = Info(row.op);
    const std::size_t n = row.inputs.size();
    for (std::uint32_t subset = 1; subset < (1u << n); ++subset) {
      std::vector<bool> batched(n);
      std::string which;
      for (std::size_t k = 0; k < n; ++k) {
        batched[k] = (subset >> k) & 1u;
        if (batched[k]) which += (which.empty() ? "" : ", ") + std::to_string(k);
      }
      const std::string context = row.name() + " with input(s) " + which + " batched";
      const std::optional<BatchedProgram> bf =
          Transformed(row, ("batch_program of inputs " + which).c_str(), Refuses(info, info.batch),
                      [&] { return batch_program(f, batched, B); });
      if (!bf) continue;
      std::vector<Array> stacked;
      std::vector<std::vector<Array>> examples(B);
      for (std::size_t k = 0; k < n; ++k) {
        const Array value = Draw(row.inputs[k], rng, batched[k] ? Dims{B} : Dims{});
        stacked.push_back(value);
        for (std::int64_t e = 0; e < B; ++e) examples[e].push_back(batched[k] ? value[e].copy() : value);
      }
      std::vector<Array> got;
      try {
        got = run_program(bf->program, stacked);
      } catch (const std::exception& e) {
        ADD_FAILURE() << context << ": the batched program fails to run: " << e.what();
        continue;
      }
      std::vector<std::vector<Array>> want(B);
      for (std::int64_t e = 0; e < B; ++e) want[e] = run_program(f, examples[e]);
      if (got.size() != want[0].size() || bf->out_batched.size() != got.size()) {
        ADD_FAILURE() << context << ": the batched program has " << got.size() << " outputs, not " << want[0].size();
        continue;
      }
      for (std::size_t j = 0; j < got.size(); ++j) {
        if (bf->out_batched[j]) {
          std::vector<Array> outs;
          for (std::int64_t e = 0; e < B; ++e) outs.push_back(want[e][j]);
          const std::string diff = Difference(got[j], Array::stack(outs), row.batch_tol);
          EXPECT_TRUE(diff.empty()) << context << ": batched output " << j << ": " << diff;
        } else {
          for (std::int64_t e = 0; e < B; ++e) {
            const std::string diff = Difference(got[j], want[e][j], row.batch_tol);
            EXPECT_TRUE(diff.empty()) << context << ": output " << j << ", unbatched, against example " << e << ": " << diff;
          }
        }
      }
    }
  }
}

}  // namespace transform_rules_test
}  // namespace
}  // namespace weft
