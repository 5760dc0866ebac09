// The table of tests/unit/transform_rules_test.cc and tests/inproc/transform_rules_collectives_test.cc (issue
// 46): one row (several for parameter variants) per registered primitive, a one-equation program each, and
// the random values and comparisons both harnesses use. The unit harness checks every row's rules and runs the
// rows that need no replicas; the in-process one runs the collectives' rows in pmap.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "program/op_registry.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft::testing {

using Dims = std::vector<std::int64_t>;

// One input of a row's program: its dtype and shape, and the range its random values are drawn from
// (integers: uniform in [low, high]; bool: either value).
struct InputSpec {
  DType dtype;
  Dims shape;
  double low = -1.5, high = 1.5;
};
inline InputSpec F64(Dims shape, double low = -1.5, double high = 1.5) { return {DType::f64, std::move(shape), low, high}; }
inline InputSpec I32(Dims shape, double low, double high) { return {DType::i32, std::move(shape), low, high}; }
inline InputSpec Bool(Dims shape) { return {DType::boolean, std::move(shape), 0, 1}; }

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

// What the adjoint identity (c) sums over.
enum class Adjoint {
  per_replica,   // <vjp(u), v> = <u, jvp(v)> summed over the replicas (JAX's pmap rules; one replica off a mesh)
  by_convention, // the transpose is a convention (Megatron's f and g), not the adjoint: (c) does not apply
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
  Adjoint adjoint = Adjoint::per_replica;
  // The inputs are invariant over the mesh (pvary's operand): typed without varying axes, one value for every
  // replica, and counted once in (c)'s inner product.
  bool invariant = false;
  // (d)'s comparison: 0 is bit for bit; else relative to the output's largest value, for the rows whose
  // batching rule deliberately computes in another order (said where it is set).
  double batch_tol = 0;

  std::string name() const { return variant.empty() ? op : op + " (" + variant + ")"; }
};

inline ProgramParams Axes(Dims axes, bool keepdims = false) { return {{"axes", std::move(axes)}, {"keepdims", keepdims}}; }
inline ProgramParams Named(std::vector<std::string> axes) { return {{"axes", std::move(axes)}}; }

inline std::vector<Row> Rows() {
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
      {"cumsum", "", {F64({3, 4})}, {{"axis", std::int64_t{1}}}},
      {"cumsum", "reverse", {F64({4, 2})}, {{"axis", std::int64_t{0}}, {"reverse", true}}},
      {"cumprod", "", {F64({2, 5}, 0.5, 1.5)}, {{"axis", std::int64_t{-1}}}},
      {"cumprod", "reverse, through negatives", {F64({5})}, {{"axis", std::int64_t{0}}, {"reverse", true}}},
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
  // matmul's batching rule makes one product of the examples (a batched matrix times a shared one is one
  // GEMM of B times the rows; a shared matrix times batched vectors a GEMM against their [B, k] transpose,
  // not B GEMVs): the BLAS blocks and rounds it as the shape it is, so the examples agree with their own
  // runs to a dot product's rounding (k * eps relative to the largest value; k <= 5 here), not bit for bit.
  for (Row& row : rows) {
    if (row.op == "matmul") row.batch_tol = 8 * 2.220446049250313e-16;
  }
  // ---- collectives, over 4 replicas (a 2x2 mesh where an axis of several is the point); run in pmap
  const std::vector<MeshAxis> line = {{"i", 4}};
  const std::vector<MeshAxis> grid = {{"rows", 2}, {"cols", 2}};
  const std::vector<std::vector<int>> pairs = {{0, 2}, {1, 3}};
  const auto collective = [&](std::string op, std::string variant, std::vector<InputSpec> inputs, ProgramParams params,
                              std::vector<MeshAxis> mesh, Adjoint adjoint = Adjoint::per_replica) {
    Row row{std::move(op), std::move(variant), std::move(inputs), std::move(params), Home::collective};
    row.mesh = std::move(mesh);
    row.adjoint = adjoint;
    return row;
  };
  const ProgramParams over_i = Named({"i"});
  const auto with = [](ProgramParams params, const std::string& name, ProgramParam value) {
    params[name] = std::move(value);
    return params;
  };
  for (const char* op : {"psum", "pmean", "pmax", "pmin", "pprod"}) rows.push_back(collective(op, "", {F64({3})}, over_i, line));
  rows.push_back(collective("psum", "groups", {F64({2})}, with(over_i, "groups", pairs), line));
  rows.push_back(collective("psum", "over cols of a 2x2 mesh", {F64({2})}, Named({"cols"}), grid));
  rows.push_back(collective("pmean", "over both axes", {F64({2})}, Named({"rows", "cols"}), grid));
  // Megatron's f and g (PopXL's names): their transposes are the pair's convention (f's the sum, g's the
  // identity), not adjoints over the replicas, so (c) does not apply.
  rows.push_back(collective("all_reduce_identical_inputs", "", {F64({3})}, over_i, line, Adjoint::by_convention));
  rows.push_back(collective("all_reduce_identical_grad_inputs", "", {F64({3})}, over_i, line, Adjoint::by_convention));
  rows.push_back(collective("replicated_reduce_scatter", "", {F64({5})}, over_i, line));
  rows.push_back(collective("replicated_reduce_scatter", "mean, groups", {F64({3, 2})},
                            with(with(over_i, "groups", pairs), "op", std::string("mean")), line));
  rows.push_back(collective("replica_sharded_slice", "", {F64({3, 3})}, over_i, line));
  rows.push_back(collective("gather_shards", "", {F64({2})}, with(over_i, "shape", Dims{2, 4}), line));
  const ProgramParams axis0 = with(over_i, "axis", std::int64_t{0});
  rows.push_back(collective("all_gather", "", {F64({3})}, axis0, line));
  rows.push_back(collective("all_gather", "axis 1, tiled", {F64({2, 3})}, with(with(over_i, "axis", std::int64_t{1}),
                                                                                "tiled", true), line));
  rows.push_back(collective("psum_scatter", "", {F64({4, 3})}, axis0, line));
  rows.push_back(collective("psum_scatter", "tiled", {F64({8})}, with(axis0, "tiled", true), line));
  rows.push_back(collective("all_to_all", "", {F64({4, 2})},
                            with(with(over_i, "split_axis", std::int64_t{0}), "concat_axis", std::int64_t{1}), line));
  rows.push_back(collective("ppermute", "", {F64({3})}, with(over_i, "perm", Permutation{{0, 1}, {1, 2}, {2, 3}, {3, 0}}),
                            line));
  rows.push_back(collective("ppermute", "partial", {F64({2})}, with(over_i, "perm", Permutation{{0, 3}, {2, 1}}), line));
  rows.push_back(collective("axis_index", "", {}, over_i, line));
  Row pvary = collective("pvary", "", {F64({3})}, over_i, line);
  pvary.invariant = true;
  rows.push_back(pvary);
  rows.push_back(collective("pbroadcast", "", {F64({3})}, with(over_i, "source", std::int64_t{2}), line));
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
  rows.push_back({"custom_jvp_call", "", {}, {}, Home::custom});
  // ---- control flow: the branches and bodies are programs of their own, built here
  const auto sub = [](std::vector<ValueType> ins, const Body& body) {
    ProgramBuilder b;
    std::vector<int> ids;
    for (ValueType& t : ins) ids.push_back(b.input(std::move(t)));
    b.set_outputs(body(b, ids));
    return std::make_shared<const Program>(b.build());
  };
  const ValueType v3{DType::f64, {3}}, i0{DType::i32, {}};
  const auto one = [](ProgramBuilder& b, const char* op, std::vector<int> ins, ProgramParams params = {}) {
    return b.emit(op, ins, std::move(params))[0];
  };
  SubPrograms branches = {
      sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) { return std::vector{one(b, "multiply", x)}; }),
      sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
        return std::vector{one(b, "add", {x[0], one(b, "tanh", {x[1]})})};
      }),
      sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) { return std::vector{one(b, "exp", {x[0]})}; })};
  // The index drawn from [-1, 3] covers lax.switch's clamping at both ends.
  rows.push_back({"cond", "three branches", {I32({}, -1, 3), F64({3}), F64({3})}, {{"branches", branches}}});
  // while i < n: (i + 1, tanh(x * w))
  const SubPrograms test = {sub({i0, v3, i0}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    return std::vector{one(b, "less", {x[0], x[2]})};
  })};
  const SubPrograms step = {sub({i0, v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    const int next = one(b, "add", {x[0], b.constant(Array::scalar(1, DType::i32))});
    return std::vector{next, one(b, "tanh", {one(b, "multiply", {x[1], x[2]})})};
  })};
  rows.push_back({"while_loop", "", {I32({}, 0, 0), F64({3}), I32({}, 0, 4), F64({3})},
                  {{"cond", test}, {"body", step}, {"cond_nconsts", std::int64_t{1}}, {"body_nconsts", std::int64_t{1}}}});
  // carry' = tanh(carry * w + x), y = carry * x
  const SubPrograms body = {sub({v3, v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    return std::vector{one(b, "tanh", {one(b, "add", {one(b, "multiply", {x[0], x[2]}), x[1]})}),
                       one(b, "multiply", {x[0], x[1]})};
  })};
  const ProgramParams scan = {{"body", body},         {"length", std::int64_t{4}},     {"reverse", false},
                              {"num_carry", std::int64_t{1}}, {"num_consts", std::int64_t{1}}};
  rows.push_back({"scan", "", {F64({3}), F64({4, 3}), F64({3})}, scan});
  rows.push_back({"scan", "reverse", {F64({3}), F64({4, 3}), F64({3})}, with(scan, "reverse", true)});
  const auto f64 = [&](ProgramBuilder& b, double v) { return b.constant(Array::scalar(v, DType::f64)); };
  const ValueType s0{DType::f64, {}};
  // An integer carry (a counter: no tangent, no cotangent) that the floating values read, and an integer y.
  // carry (i, c): i' = i + 1, c' = tanh(c * w + x) + 0.1 i; ys: c * i, i
  const SubPrograms counted = {sub({i0, v3, v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    const int i = one(b, "astype", {x[0]}, {{"dtype", DType::f64}});
    const int next = one(b, "add", {x[0], b.constant(Array::scalar(1, DType::i32))});
    const int c = one(b, "add", {one(b, "tanh", {one(b, "add", {one(b, "multiply", {x[1], x[3]}), x[2]})}),
                                 one(b, "multiply", {i, f64(b, 0.1)})});
    return std::vector{next, c, one(b, "multiply", {x[1], i}), x[0]};
  })};
  rows.push_back({"scan", "an integer carry and an integer y", {I32({}, -2, 3), F64({3}), F64({4, 3}), F64({3})},
                  {{"body", counted}, {"length", std::int64_t{4}}, {"reverse", false},
                   {"num_carry", std::int64_t{2}}, {"num_consts", std::int64_t{1}}}});
  // No xs (lax.scan(f, init, None, length=3)): carry' = tanh(c * w) + c, y = exp(c) * w
  const SubPrograms unfed = {sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    return std::vector{one(b, "add", {one(b, "tanh", {one(b, "multiply", {x[0], x[1]})}), x[0]}),
                       one(b, "multiply", {one(b, "exp", {x[0]}), x[1]})};
  })};
  rows.push_back({"scan", "no xs", {F64({3}), F64({3})},
                  {{"body", unfed}, {"length", std::int64_t{3}}, {"reverse", false},
                   {"num_carry", std::int64_t{1}}, {"num_consts", std::int64_t{1}}}});
  // No carry (lax.map): y = tanh(x) * w
  const SubPrograms mapped = {sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    return std::vector{one(b, "multiply", {one(b, "tanh", {x[0]}), x[1]})};
  })};
  rows.push_back({"scan", "no carry (lax.map)", {F64({4, 3}), F64({3})},
                  {{"body", mapped}, {"length", std::int64_t{4}}, {"reverse", true},
                   {"num_carry", std::int64_t{0}}, {"num_consts", std::int64_t{1}}}});
  // Nesting: a body holding a scan and a cond (their rules run inside the outer one's sub-programs).
  // carry' = scan(c -> tanh(c * x), c, length 2) + cond(i, c * x | exp(x)), y = carry' * x; i a const.
  const SubPrograms twice = {sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    return std::vector{one(b, "tanh", {one(b, "multiply", {x[0], x[1]})})};
  })};
  const SubPrograms pick = {
      sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) { return std::vector{one(b, "multiply", x)}; }),
      sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) { return std::vector{one(b, "exp", {x[1]})}; })};
  const SubPrograms nested = {sub({v3, v3, i0}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    const int inner = b.emit("scan", {x[0], x[1]}, {{"body", twice}, {"length", std::int64_t{2}}, {"reverse", false},
                                                    {"num_carry", std::int64_t{1}}, {"num_consts", std::int64_t{1}}})[0];
    const int chosen = b.emit("cond", {x[2], x[0], x[1]}, {{"branches", pick}})[0];
    const int next = one(b, "add", {inner, chosen});
    return std::vector{next, one(b, "multiply", {next, x[1]})};
  })};
  rows.push_back({"scan", "a body holding a scan and a cond", {F64({3}, -0.5, 0.5), F64({3, 3}, -0.5, 0.5), I32({}, 0, 1)},
                  {{"body", nested}, {"length", std::int64_t{3}}, {"reverse", false},
                   {"num_carry", std::int64_t{1}}, {"num_consts", std::int64_t{1}}}});
  // Branches closing over different values: each reads its own operand (the other's is unused there) and
  // holds its own constant. Operands (x, a, b): x * a + 0.5 | tanh(x) - 2 b.
  const SubPrograms closing = {
      sub({v3, v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
        return std::vector{one(b, "add", {one(b, "multiply", {x[0], x[1]}), f64(b, 0.5)})};
      }),
      sub({v3, v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
        return std::vector{one(b, "subtract", {one(b, "tanh", {x[0]}), one(b, "multiply", {x[2], f64(b, 2)})})};
      })};
  rows.push_back({"cond", "branches closing over different values", {I32({}, 0, 1), F64({3}), F64({3}), F64({3})},
                  {{"branches", closing}}});
  // A predicate read from the floating carry, so batching the carry batches it (each example stops on its
  // own iteration): while sum(c * c) < limit: c = 1.3 c + w.
  const SubPrograms below = {sub({v3, s0}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    return std::vector{one(b, "less", {one(b, "sum", {one(b, "multiply", {x[0], x[0]})}), x[1]})};
  })};
  const SubPrograms grow = {sub({v3, v3}, [&](ProgramBuilder& b, const std::vector<int>& x) {
    return std::vector{one(b, "add", {one(b, "multiply", {x[0], f64(b, 1.3)}), x[1]})};
  })};
  rows.push_back({"while_loop", "a predicate of the floating carry", {F64({3}), F64({}, 4, 30), F64({3}, -0.2, 0.2)},
                  {{"cond", below}, {"body", grow}, {"cond_nconsts", std::int64_t{1}}, {"body_nconsts", std::int64_t{1}}}});
  // A body with collectives, run in pmap over 4 replicas (one input and one output: the collectives' harness
  // batches the first input and pairs the first output alone). c' = tanh(0.25 psum(c) + 0.5 ppermute(c))
  {
    const std::vector<MeshAxis> ring = {{"i", 4}};
    ProgramBuilder b{Mesh(ring)};
    const int c = b.input({DType::f64, {3}, {"i"}});
    const int summed = one(b, "multiply", {one(b, "psum", {c}, Named({"i"})), f64(b, 0.25)});
    const int shifted = one(b, "ppermute", {c}, with(Named({"i"}), "perm", Permutation{{0, 1}, {1, 2}, {2, 3}, {3, 0}}));
    b.set_outputs({one(b, "tanh", {one(b, "add", {summed, one(b, "multiply", {shifted, f64(b, 0.5)})})})});
    const SubPrograms ringed = {std::make_shared<const Program>(b.build())};
    rows.push_back(collective("scan", "a body with psum and ppermute", {F64({3})},
                              {{"body", ringed}, {"length", std::int64_t{3}}, {"reverse", false},
                               {"num_carry", std::int64_t{1}}, {"num_consts", std::int64_t{0}}},
                              ring));
  }
  // pmap (JAX's xla_pmap): a body over 4 replicas of axis 'i', x split along axis 1, w whole to each;
  // per replica tanh(x * w + psum(x)).
  ProgramBuilder per_replica(Mesh({{"i", 4}}));
  {
    const int x = per_replica.input({DType::f64, {3}, {"i"}});
    const int w = per_replica.input({DType::f64, {3}});
    const int total = per_replica.emit("psum", {x}, Named({"i"}))[0];
    const int pre = per_replica.emit("add", {per_replica.emit("multiply", {x, w})[0], total})[0];
    per_replica.set_outputs({per_replica.emit("tanh", {pre})[0]});
  }
  rows.push_back({"pmap", "", {F64({3, 4}), F64({3})},
                  {{"body", SubPrograms{std::make_shared<const Program>(per_replica.build())}},
                   {"in_axes", Dims{1, -1}}, {"out_axes", Dims{0}}}});
  return rows;
}

// ---- values ---------------------------------------------------------------------------------------------------

inline std::int64_t Count(const Dims& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// A random input of `spec`, with `lead` in front of its shape (a batch axis, a mesh's shape).
inline Array Draw(const InputSpec& spec, std::mt19937_64& rng, const Dims& lead = {}) {
  Dims shape = lead;
  shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
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
inline Array Direction(const ValueType& type, std::mt19937_64& rng) {
  std::vector<double> v(static_cast<std::size_t>(Count(type.shape)), 0.0);
  if (is_floating(type.dtype)) {
    std::uniform_int_distribution<int> dist(-96, 96);
    for (double& e : v) e = dist(rng) / 64.0;
  }
  return Array::from_doubles(v, type.shape, type.dtype);
}

inline double Dot(const Array& a, const Array& b, bool absolute = false) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += absolute ? std::abs(x[i] * y[i]) : x[i] * y[i];
  return s;
}

// "" when `got` has `want`'s dtype, shape and bits (nan payloads included; -0 differs from 0), or, with a
// tolerance, values within tolerance * max |want| of each other (nan where want has nan); else what differs.
inline std::string Difference(const Array& got, const Array& want, double tolerance = 0) {
  std::ostringstream why;
  why.precision(17);
  if (got.dtype() != want.dtype()) {
    why << "dtype " << dtype_name(got.dtype()) << ", expected " << dtype_name(want.dtype());
  } else if (got.shape() != want.shape()) {
    why << "shape " << shape_str(got.shape()) << ", expected " << shape_str(want.shape());
  } else {
    const std::vector<double> g = got.to_doubles(), w = want.to_doubles();
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    for (std::size_t i = 0; i < g.size(); ++i) {
      const bool same = tolerance == 0 ? std::bit_cast<std::uint64_t>(g[i]) == std::bit_cast<std::uint64_t>(w[i])
                                       : (std::isnan(g[i]) && std::isnan(w[i])) ||
                                             std::abs(g[i] - w[i]) <= tolerance * scale;
      if (!same) {
        why << "element " << i << " is " << g[i] << ", the per-example run gives " << w[i];
        if (tolerance != 0) why << " (beyond " << tolerance << " x max |value| " << scale << ")";
        break;
      }
    }
  }
  return why.str();
}

inline bool AnyFloating(const std::vector<ValueType>& types) {
  return std::any_of(types.begin(), types.end(), [](const ValueType& t) { return is_floating(t.dtype); });
}

inline Program Build(const Row& row) {
  // An invariant input, one value on every device counted once, is shard_map's notion: such a row is built
  // under shard_map's rules (pvary's transpose is then psum; under pmap's every replica's value is its own).
  ProgramBuilder b(Mesh(row.mesh), row.invariant ? CollectiveRules::shard_map : CollectiveRules::pmap);
  std::vector<int> ins;
  for (const InputSpec& spec : row.inputs) {
    std::vector<std::string> axes;
    if (!row.invariant) {
      for (const MeshAxis& a : row.mesh) axes.push_back(a.name);
    }
    std::sort(axes.begin(), axes.end());  // a type's varying axes are sorted
    ins.push_back(b.input({spec.dtype, spec.shape, axes}));
  }
  b.set_outputs(row.body ? row.body(b, ins) : b.emit(row.op, ins, row.params));
  return b.build();
}

inline const program::OpInfo& Info(const std::string& op) {
  const program::OpInfo* info = program::find_op(op);
  if (info == nullptr) throw std::runtime_error("the table has a row for '" + op + "', which is not registered");
  return *info;
}

// A transformation the op refuses: it has no rule and says why. The refusal must quote the reason.
inline bool Refuses(const program::OpInfo& info, bool has_rule) { return !has_rule && !info.no_rule.empty(); }

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

}  // namespace weft::testing

#pragma GCC diagnostic pop
