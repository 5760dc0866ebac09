// The registry's property harness (issue 46): one table with a row per registered primitive (several for ops
// whose parameters change the rule), each a one-equation program, and four checks run on every row:
//   (a) a primitive with a floating result has a JVP rule, and every primitive a batching rule, or says in
//       OpInfo::no_rule why not (the refusals are listed, and the transformation must quote the reason);
//   (b) the JVP program's tangents against central differences of the program, in float64;
//   (c) the adjoint identity <vjp(u), v> = <u, jvp(v)> to 1e-12 relative (vjp_program and jvp_program of the
//       same program, random u and v);
//   (d) batch_program with each subset of the inputs batched (B = 3), run on stacked inputs, equals the
//       per-example runs stacked, bit for bit.
// A registered op without a row fails `EveryRegisteredOpHasARow`, so a new primitive arrives with its row.
// Collectives need a mesh and replicas to run: their rows are built here (so (a) sees their result types)
// and run by the collective family's own tests; session effects are refused by every transformation
// (jvp.cc, batching.cc) and are listed as such; custom_vjp_call's rows need a registered rule program and
// live in the custom_vjp family's tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "program/op_registry.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {

using Dims = std::vector<std::int64_t>;

// One input of a row's program: its dtype and shape, and the range its random values are drawn from
// (integers: uniform in [low, high]; bool: either value).
struct InputSpec {
  DType dtype;
  Dims shape;
  double low = -1.5, high = 1.5;
};
InputSpec F64(Dims shape, double low = -1.5, double high = 1.5) { return {DType::f64, std::move(shape), low, high}; }
InputSpec I32(Dims shape, double low, double high) { return {DType::i32, std::move(shape), low, high}; }
InputSpec Bool(Dims shape) { return {DType::boolean, std::move(shape), 0, 1}; }

// Where a row's properties are checked.
enum class Home {
  here,        // (a) to (d) in this file
  collective,  // needs replicas: (a) here, (b) to (d) in the collective family's tests (coll)
  effect,      // a session effect: every transformation refuses it (the machinery, not a rule)
  custom,      // custom_vjp_call: needs a registered rule program; the custom_vjp family's tests
};
// What the JVP must agree with.
enum class Derivative {
  numeric,  // central differences of the program
  zero,     // a zero tangent by definition (stop_gradient: JAX's rule, not the function's slope)
};

using Body = std::function<std::vector<int>(ProgramBuilder&, const std::vector<int>&)>;

struct Row {
  std::string op;
  std::string variant;  // what this row exercises beyond the default ("" for the plain row)
  std::vector<InputSpec> inputs;
  ProgramParams params{};
  Home home = Home::here;
  Body body = nullptr;  // null: `op[params]` on every input
  Derivative derivative = Derivative::numeric;
  double step = 1e-5;       // central differences' step (along the tangent)
  double jvp_tol = 1e-6;    // relative to the largest tangent
  std::vector<MeshAxis> mesh{};

  std::string name() const { return variant.empty() ? op : op + " (" + variant + ")"; }
};

ProgramParams Axes(Dims axes, bool keepdims = false) { return {{"axes", std::move(axes)}, {"keepdims", keepdims}}; }
ProgramParams Named(std::vector<std::string> axes) { return {{"axes", std::move(axes)}}; }

std::vector<Row> Rows() {
  const std::vector<MeshAxis> line = {{"i", 2}};
  const auto varying = [](Dims shape) { return InputSpec{DType::f64, std::move(shape)}; };
  const ProgramParams effect_shape = {{"shape", Dims{2}}, {"dtype", DType::f32}};
  std::vector<Row> rows = {
      // ---- elementwise
      {"exp", "", {F64({3, 2})}},
      {"log", "", {F64({3, 2}, 0.5, 2)}},
      {"log1p", "", {F64({4}, 0.1, 2)}},
      {"tanh", "", {F64({3, 3})}},
      {"sqrt", "", {F64({4}, 0.5, 2)}},
      {"rsqrt", "", {F64({4}, 0.5, 2)}},
      {"sigmoid", "", {F64({5})}},
      {"gelu_tanh", "", {F64({3, 4})}},
      {"gelu_tanh_derivative", "", {F64({3, 4})}},
      {"abs", "", {F64({5})}},
      {"relu", "", {F64({2, 4})}},
      {"copy", "", {F64({4})}},
      {"stop_gradient", "", {F64({4})}, {}, Home::here, nullptr, Derivative::zero},
      {"negative", "", {F64({2, 3})}},
      {"sign", "", {F64({5})}},
      {"add", "broadcast", {F64({3, 4}), F64({4})}},
      {"add", "scalar", {F64({}), F64({2, 3})}},
      {"subtract", "broadcast", {F64({3, 1}), F64({3, 4})}},
      {"multiply", "", {F64({2, 3}), F64({2, 3})}},
      {"multiply", "by a scalar", {F64({2, 3}), F64({})}},
      {"divide", "", {F64({2, 3}), F64({3}, 0.5, 2)}},
      {"power", "", {F64({5}, 0.5, 2), F64({5}, 0.5, 2)}},
      {"maximum", "", {F64({6}), F64({6})}},
      {"minimum", "broadcast", {F64({2, 3}), F64({3})}},
      {"equal", "", {F64({3, 4}), F64({4})}},
      {"not_equal", "", {F64({3}), F64({3})}},
      {"less", "", {F64({3, 4}), F64({4})}},
      {"less_equal", "", {F64({3}), F64({3})}},
      {"greater", "", {F64({2, 3}), F64({2, 3})}},
      {"greater_equal", "", {F64({4}), F64({})}},
      {"where", "", {Bool({3, 4}), F64({3, 4}), F64({4})}},
      {"bitwise_and", "", {I32({4}, -9, 9), I32({4}, -9, 9)}},
      {"bitwise_or", "", {I32({2, 3}, 0, 20), I32({3}, 0, 20)}},
      {"bitwise_xor", "", {I32({4}, -9, 9), I32({4}, -9, 9)}},
      {"bitwise_not", "", {I32({4}, -9, 9)}},
      {"integer_pow", "3", {F64({4})}, {{"y", std::int64_t{3}}}},
      {"integer_pow", "-2", {F64({4}, 0.5, 2)}, {{"y", std::int64_t{-2}}}},
      {"astype", "to float32", {F64({4})}, {{"dtype", DType::f32}}, Home::here, nullptr, Derivative::numeric, 1e-3, 1e-3},
      {"astype", "to int32", {F64({4}, -5, 5)}, {{"dtype", DType::i32}}},
      {"astype", "int32 to float64", {I32({4}, -5, 5)}, {{"dtype", DType::f64}}},
      // ---- reductions and shapes
      {"sum", "over an axis", {F64({3, 4})}, Axes({1})},
      {"sum", "of all", {F64({3, 4})}, {}},
      {"mean", "keepdims", {F64({3, 4})}, Axes({0}, true)},
      {"max", "", {F64({3, 4})}, Axes({1})},
      {"min", "of all", {F64({3, 4})}, {{"keepdims", false}}},
      {"argmax", "", {F64({3, 4})}, {{"axis", std::int64_t{1}}}},
      {"argmin", "keepdims", {F64({3, 4})}, {{"axis", std::int64_t{0}}, {"keepdims", true}}},
      {"reshape", "", {F64({3, 4})}, {{"shape", Dims{2, 6}}}},
      {"transpose", "perm", {F64({2, 3, 4})}, {{"perm", Dims{2, 0, 1}}}},
      {"transpose", "reversed", {F64({2, 3})}, {}},
      {"broadcast_to", "", {F64({3, 1})}, {{"shape", Dims{2, 3, 4}}}},
      {"matmul", "", {F64({3, 4}), F64({4, 2})}},
      {"matmul", "batched and broadcast", {F64({2, 3, 4}), F64({4, 5})}},
      {"matmul", "vector-matrix", {F64({4}), F64({4, 3})}},
      {"matmul", "matrix-vector", {F64({3, 4}), F64({4})}},
      {"matmul", "transposed operands", {F64({4, 3}), F64({5, 4})}, {{"transpose_a", true}, {"transpose_b", true}}},
      {"softmax", "", {F64({3, 5})}, {{"axis", std::int64_t{-1}}}},
      {"log_softmax", "", {F64({3, 5})}, {{"axis", std::int64_t{0}}}},
      {"logsumexp", "", {F64({3, 5})}, {{"axis", std::int64_t{1}}}},
      {"concatenate", "", {F64({2, 3}), F64({2, 2})}, {{"axis", std::int64_t{1}}}},
      {"slice", "", {F64({4, 5})}, {{"start", Dims{1, 0}}, {"limit", Dims{3, 4}}, {"step", Dims{1, 1}}}},
      {"slice", "strided and reversed", {F64({6, 5})}, {{"start", Dims{5, 3}}, {"limit", Dims{-1, 0}}, {"step", Dims{-2, -1}}}},
      {"take", "axis 0, repeated and negative indices", {F64({5, 3}), I32({4}, -5, 4)}, {{"axis", std::int64_t{0}}}},
      {"take", "axis 1, 2-D indices", {F64({2, 4, 3}), I32({2, 2}, -4, 3)}, {{"axis", std::int64_t{1}}}},
      {"take", "flattened", {F64({3, 4}), I32({5}, -12, 11)}, {}},
      {"one_hot", "", {I32({4}, 0, 4)}, {{"num_classes", std::int64_t{5}}, {"dtype", DType::f64}}},
      {"layer_norm", "", {F64({3, 5}), F64({5}), F64({5})}, {}, Home::here,
       [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("layer_norm", {x[0], x[1], x[2], b.constant(Array::scalar(1e-5, DType::f64))});
       }},
      {"layer_norm_vjp", "", {F64({3, 5}), F64({5}), F64({3, 5})}, {}, Home::here,
       [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("layer_norm_vjp", {x[0], x[1], x[2], b.constant(Array::scalar(1e-5, DType::f64))});
       }},
  };
  // ---- collectives (built over a 2-replica mesh; run by the collective family's tests)
  const ProgramParams over_i = Named({"i"});
  for (const char* op : {"psum", "pmean", "pmax", "pmin", "pprod", "all_reduce_identical_inputs",
                         "all_reduce_identical_grad_inputs", "replicated_reduce_scatter", "replica_sharded_slice",
                         "pvary"}) {
    rows.push_back({op, "", {varying({4})}, over_i, Home::collective});
  }
  ProgramParams gather = over_i;
  gather["shape"] = Dims{2, 2};
  rows.push_back({"gather_shards", "", {varying({2})}, gather, Home::collective});
  ProgramParams along = over_i;
  along["axis"] = std::int64_t{0};
  rows.push_back({"all_gather", "", {varying({3})}, along, Home::collective});
  rows.push_back({"psum_scatter", "", {varying({2, 3})}, along, Home::collective});
  ProgramParams a2a = over_i;
  a2a["split_axis"] = std::int64_t{0};
  a2a["concat_axis"] = std::int64_t{1};
  rows.push_back({"all_to_all", "", {varying({2, 3})}, a2a, Home::collective});
  ProgramParams perm = over_i;
  perm["perm"] = Permutation{{0, 1}, {1, 0}};
  rows.push_back({"ppermute", "", {varying({3})}, perm, Home::collective});
  rows.push_back({"axis_index", "", {}, over_i, Home::collective});
  for (Row& row : rows) {
    if (row.home == Home::collective) row.mesh = line;
  }
  // ---- session effects: built without a session (their names are only looked up when they run)
  ProgramParams stream = {{"stream", std::string("s")}};
  ProgramParams host_load = effect_shape;
  host_load["stream"] = std::string("s");
  ProgramParams buffer = {{"buffer", std::string("b")}};
  ProgramParams remote_load = effect_shape;
  remote_load["buffer"] = std::string("b");
  ProgramParams variable = {{"variable", std::string("v")}};
  ProgramParams variable_read = effect_shape;
  variable_read["variable"] = std::string("v");
  const auto f32 = [](Dims shape) { return InputSpec{DType::f32, std::move(shape)}; };
  rows.push_back({"host_load", "", {}, host_load, Home::effect});
  rows.push_back({"host_store", "", {f32({2})}, stream, Home::effect});
  rows.push_back({"remote_load", "", {}, remote_load, Home::effect});
  rows.push_back({"remote_store", "", {f32({2})}, buffer, Home::effect});
  rows.push_back({"variable_read", "", {}, variable_read, Home::effect});
  rows.push_back({"variable_update", "", {f32({2})}, variable, Home::effect});
  rows.push_back({"custom_vjp_call", "", {}, {}, Home::custom});
  return rows;
}

// ---- values ---------------------------------------------------------------------------------------------------

std::int64_t Count(const Dims& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// A random input of `spec` (with `lead` in front of its shape when given).
Array Draw(const InputSpec& spec, std::mt19937_64& rng, std::optional<std::int64_t> lead = std::nullopt) {
  Dims shape = spec.shape;
  if (lead) shape.insert(shape.begin(), *lead);
  std::vector<double> v(static_cast<std::size_t>(Count(shape)));
  if (is_floating(spec.dtype)) {
    std::uniform_real_distribution<double> dist(spec.low, spec.high);
    for (double& e : v) e = dist(rng);
  } else {
    std::uniform_int_distribution<std::int64_t> dist(static_cast<std::int64_t>(spec.low),
                                                      static_cast<std::int64_t>(spec.high));
    for (double& e : v) e = static_cast<double>(dist(rng));
  }
  return Array::from_doubles(v, shape, spec.dtype);
}

// A random direction (tangent or cotangent) of `type`: multiples of 1/64 in [-1.5, 1.5], exact in every
// floating dtype, so a cast inside a rule loses nothing and the adjoint identity holds to float64's rounding.
// Zeros for an integer or bool type (their tangents and cotangents are zero).
Array Direction(const ValueType& type, std::mt19937_64& rng) {
  std::vector<double> v(static_cast<std::size_t>(Count(type.shape)), 0.0);
  if (is_floating(type.dtype)) {
    std::uniform_int_distribution<int> dist(-96, 96);
    for (double& e : v) e = dist(rng) / 64.0;
  }
  return Array::from_doubles(v, type.shape, type.dtype);
}

double Dot(const Array& a, const Array& b, bool absolute = false) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += absolute ? std::abs(x[i] * y[i]) : x[i] * y[i];
  return s;
}

// Same dtype, shape and bits (nan payloads included; -0 differs from 0).
std::string BitDifference(const Array& got, const Array& want) {
  std::ostringstream why;
  if (got.dtype() != want.dtype()) {
    why << "dtype " << dtype_name(got.dtype()) << ", expected " << dtype_name(want.dtype());
  } else if (got.shape() != want.shape()) {
    why << "shape " << ValueType{got.dtype(), got.shape(), {}}.num_elements() << " elements "
        << got.ndim() << "-D, expected " << want.ndim() << "-D";
  } else {
    const std::vector<double> g = got.to_doubles(), w = want.to_doubles();
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (std::bit_cast<std::uint64_t>(g[i]) != std::bit_cast<std::uint64_t>(w[i])) {
        why.precision(17);
        why << "element " << i << " is " << g[i] << ", the per-example run gives " << w[i];
        break;
      }
    }
  }
  return why.str();
}

bool AnyFloating(const std::vector<ValueType>& types) {
  return std::any_of(types.begin(), types.end(), [](const ValueType& t) { return is_floating(t.dtype); });
}

Program Build(const Row& row) {
  ProgramBuilder b(Mesh(row.mesh));
  std::vector<int> ins;
  for (const InputSpec& spec : row.inputs) {
    std::vector<std::string> axes;
    for (const MeshAxis& a : row.mesh) axes.push_back(a.name);
    ins.push_back(b.input({spec.dtype, spec.shape, axes}));
  }
  b.set_outputs(row.body ? row.body(b, ins) : b.emit(row.op, ins, row.params));
  return b.build();
}

const program::OpInfo& Info(const std::string& op) {
  const program::OpInfo* info = program::find_op(op);
  if (info == nullptr) throw std::runtime_error("the table has a row for '" + op + "', which is not registered");
  return *info;
}

// A transformation the op refuses: it has no rule and says why. The refusal must quote the reason.
bool Refuses(const program::OpInfo& info, bool has_rule) { return !has_rule && !info.no_rule.empty(); }

// Runs `make` and returns its result; a thrown error is a test failure naming the row and what was made,
// unless it is the refusal the op announces (then nullopt, the message checked to quote no_rule).
template <class Make>
auto Transformed(const Row& row, const char* what, bool refuses, Make make) -> std::optional<decltype(make())> {
  try {
    auto made = make();
    if (refuses) ADD_FAILURE() << row.name() << ": " << what << " succeeded although " << row.op << " says it has no rule";
    return made;
  } catch (const std::exception& e) {
    if (refuses) {
      EXPECT_NE(std::string(e.what()).find(Info(row.op).no_rule), std::string::npos)
          << row.name() << ": the " << what << " refusal does not quote no_rule (\"" << Info(row.op).no_rule
          << "\"): " << e.what();
    } else {
      ADD_FAILURE() << row.name() << ": " << what << " failed: " << e.what();
    }
    return std::nullopt;
  }
}

// ---- (coverage) -----------------------------------------------------------------------------------------------

TEST(TransformRules, EveryRegisteredOpHasARow) {
  std::set<std::string> in_table;
  for (const Row& row : Rows()) in_table.insert(row.op);
  for (const std::string& op : program::registered_ops()) {
    EXPECT_TRUE(in_table.count(op) > 0) << "primitive '" << op << "' has no row in transform_rules_test.cc's table: "
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
    // custom_vjp_call's JVP is refused by the machinery (JAX's rule: a custom_vjp function has no forward
    // mode); its batching rule is still needed.
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
    const std::optional<Program> vf =
        Transformed(row, "vjp_program", false, [&] { return vjp_program(f, wrt); });
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
        const Array value = Draw(row.inputs[k], rng, batched[k] ? std::optional<std::int64_t>(B) : std::nullopt);
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
          const std::string diff = BitDifference(got[j], Array::stack(outs));
          EXPECT_TRUE(diff.empty()) << context << ": batched output " << j << ": " << diff;
        } else {
          for (std::int64_t e = 0; e < B; ++e) {
            const std::string diff = BitDifference(got[j], want[e][j]);
            EXPECT_TRUE(diff.empty()) << context << ": output " << j << ", unbatched, against example " << e << ": " << diff;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace weft
