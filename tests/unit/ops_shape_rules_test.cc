// The transformation rules of the reduction, shape, linalg, nn and indexing families (src/program/ops/
// reductions.cc, shape.cc, linalg.cc, nn.cc, indexing.cc; issue 46), one table of primitives and parameter
// variants, each row checked three ways in float64:
// - the JVP (weft::jvp_program) against central differences of the program along a random direction;
// - the adjoint identity <vjp(u), v> = <u, jvp(v)> between the VJP and the JVP (to 1e-12);
// - the batched program (weft::batch_program) against the per-example runs stacked, bit for bit, for every
//   mix of batched and shared inputs.
// Then cumsum / cumprod against a naive sequential reference (numpy's cumsum order), in their dtypes, and the
// rules' refusals by their text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../support/errors.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace ops_shape_rules_test {

using Shape = std::vector<std::int64_t>;
using Body = std::function<std::vector<int>(ProgramBuilder&, const std::vector<int>&)>;

// One input of a case: float64 values in [low, high), or integers in [low, high) of an integer dtype.
struct In {
  Shape shape;
  DType dtype = DType::f64;
  double low = -1.5, high = 1.5;
};

struct Case {
  std::string name;
  std::vector<In> ins;
  Body body;
  // Flat positions of input 0 set to exactly 0 (cumprod's zeros).
  std::vector<std::int64_t> zeros = {};
  // Values k / 8 (small dyadic numbers: every sum and product exact, so any order of a product's terms gives
  // the same bits): for matmul, whose kernels (and the executor's shared products, which merge products
  // sharing an operand into one GEMM) block a product by its shape, so the same row can be summed in another
  // order in a batch of examples than alone ([B, k] @ w is one product; so are [B, 2, 3, 4] @ w's rows).
  bool exact_data = false;
  // Inputs the rules read as constants (layer_norm's eps: no cotangent, no tangent), held still.
  std::vector<std::size_t> still = {};
};

ProgramParams Axes(std::vector<std::int64_t> axes, bool keepdims = false) {
  return {{"axes", std::move(axes)}, {"keepdims", keepdims}};
}

Body Op(const std::string& op, ProgramParams params = {}) {
  return [=](ProgramBuilder& b, const std::vector<int>& x) { return b.emit(op, x, params); };
}

// The op on input 0 only, the other inputs being constants the body makes (a scalar eps).
Body LayerNorm() {
  return [](ProgramBuilder& b, const std::vector<int>& x) {
    return b.emit("layer_norm", {x[0], x[1], x[2], b.constant(Array::scalar(1e-5, DType::f64))});
  };
}

Body Slice(Shape start, Shape limit, Shape step) {
  return Op("slice", {{"start", start}, {"limit", limit}, {"step", step}});
}

ProgramParams Axis(std::int64_t axis) { return {{"axis", axis}}; }

// take with constant indices (the operand alone an input).
Body TakeConst(Array indices, std::optional<std::int64_t> axis) {
  return [=](ProgramBuilder& b, const std::vector<int>& x) {
    ProgramParams params;
    if (axis) params["axis"] = *axis;
    return b.emit("take", {x[0], b.constant(indices)}, params);
  };
}

ProgramParams TakeAxis(std::optional<std::int64_t> axis) {
  ProgramParams params;
  if (axis) params["axis"] = *axis;
  return params;
}

In Ints(Shape shape, double low, double high, DType dtype = DType::i32) { return {std::move(shape), dtype, low, high}; }

std::vector<Case> Cases() {
  const ProgramParams ta{{"transpose_a", true}}, tb{{"transpose_b", true}}, tab{{"transpose_a", true}, {"transpose_b", true}};
  return {
      // ---- reductions
      {"sum axis 1", {{{3, 4}}}, Op("sum", Axes({1}))},
      {"sum of all", {{{3, 4}}}, Op("sum")},
      {"sum of all keepdims", {{{2, 3, 2}}}, Op("sum", {{"keepdims", true}})},
      {"sum axes -1 and 0", {{{2, 3, 4}}}, Op("sum", Axes({-1, 0}))},
      {"sum of a scalar", {{{}}}, Op("sum")},
      {"mean axis 0 keepdims", {{{3, 4}}}, Op("mean", Axes({0}, true))},
      {"mean of all", {{{2, 5}}}, Op("mean")},
      {"max axis 1", {{{3, 4}}}, Op("max", Axes({1}))},
      {"max of all keepdims", {{{3, 4}}}, Op("max", {{"keepdims", true}})},
      {"min axes 0 and 2", {{{2, 3, 4}}}, Op("min", Axes({0, 2}))},
      {"min with ties: of x and x side by side", {{{2, 3}}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         // Every minimum twice: the derivative shared half and half, summed back to x whole.
         const int twice = b.emit("concatenate", {x[0], x[0]}, Axis(1))[0];
         return b.emit("min", {twice}, Axes({1}));
       }},
      {"argmax axis 1", {{{3, 4}}}, Op("argmax", Axis(1))},
      {"argmax of all", {{{3, 4}}}, Op("argmax")},
      {"argmin of all keepdims", {{{2, 3}}}, Op("argmin", {{"keepdims", true}})},
      {"argmin axis -1 keepdims", {{{2, 3, 4}}}, Op("argmin", {{"axis", std::int64_t{-1}}, {"keepdims", true}})},
      {"logsumexp axis 1", {{{3, 5}}}, Op("logsumexp", Axis(1))},
      {"logsumexp axis 0 keepdims", {{{3, 5}}}, Op("logsumexp", {{"axis", std::int64_t{0}}, {"keepdims", true}})},
      {"logsumexp axis -1 of 3-D", {{{2, 3, 4}}}, Op("logsumexp", Axis(-1))},
      {"cumsum axis 0", {{{4, 3}}}, Op("cumsum", Axis(0))},
      {"cumsum axis -1 reverse", {{{2, 3, 4}}}, Op("cumsum", {{"axis", std::int64_t{-1}}, {"reverse", true}})},
      {"cumprod axis 1", {{{3, 5}}}, Op("cumprod", Axis(1))},
      {"cumprod axis 0 reverse", {{{5, 2}}}, Op("cumprod", {{"axis", std::int64_t{0}}, {"reverse", true}})},
      // Zeros: row 0 one zero in the middle, row 1 two, row 2 a zero first and last, row 3 none.
      {"cumprod with zeros", {{{4, 5}}}, Op("cumprod", Axis(1)), {2, 6, 8, 10, 14}},
      {"cumprod reverse with zeros", {{{4, 5}}}, Op("cumprod", {{"axis", std::int64_t{1}}, {"reverse", true}}),
       {2, 6, 8, 10, 14}},
      // ---- shapes
      {"reshape with -1", {{{3, 4}}}, Op("reshape", {{"shape", Shape{2, -1}}})},
      {"reshape to a scalar", {{{1, 1}}}, Op("reshape", {{"shape", Shape{}}})},
      {"transpose perm", {{{2, 3, 4}}}, Op("transpose", {{"perm", Shape{2, 0, 1}}})},
      {"transpose default", {{{2, 3, 4}}}, Op("transpose")},
      {"broadcast_to new and unit axes", {{{3, 1}}}, Op("broadcast_to", {{"shape", Shape{2, 3, 4}}})},
      {"broadcast_to of a scalar", {{{}}}, Op("broadcast_to", {{"shape", Shape{2, 3}}})},
      {"concatenate axis 1", {{{2, 3}}, {{2, 2}}}, Op("concatenate", Axis(1))},
      {"concatenate axis -1 of three", {{{2, 1}}, {{2, 3}}, {{2, 2}}}, Op("concatenate", Axis(-1))},
      {"concatenate axis 0", {{{1, 3}}, {{2, 3}}}, Op("concatenate", Axis(0))},
      {"slice", {{{4, 5}}}, Slice({1, 0}, {3, 4}, {1, 1})},
      {"slice steps 2 and 3", {{{5, 7}}}, Slice({0, 1}, {5, 7}, {2, 3})},
      {"slice negative steps", {{{6, 5}}}, Slice({5, 3}, {-1, 0}, {-2, -1})},
      {"slice 3-D mixed steps", {{{3, 4, 5}}}, Slice({0, 3, 1}, {3, -1, 5}, {2, -2, 2})},
      // ---- matmul
      {"matmul", {{{3, 4}}, {{4, 2}}}, Op("matmul"), {}, true},
      {"matmul batched and broadcast", {{{2, 3, 4}}, {{4, 5}}}, Op("matmul"), {}, true},
      {"matmul batch axes broadcast both ways", {{{2, 1, 3, 4}}, {{5, 4, 2}}}, Op("matmul"), {}, true},
      {"matmul vector-matrix", {{{4}}, {{4, 3}}}, Op("matmul"), {}, true},
      {"matmul matrix-vector", {{{3, 4}}, {{4}}}, Op("matmul"), {}, true},
      {"matmul vector-vector", {{{4}}, {{4}}}, Op("matmul"), {}, true},
      {"matmul vector-batch", {{{4}}, {{2, 4, 3}}}, Op("matmul"), {}, true},
      {"matmul batch-vector", {{{2, 3, 4}}, {{4}}}, Op("matmul"), {}, true},
      {"matmul transposed operands", {{{4, 3}}, {{5, 4}}}, Op("matmul", tab), {}, true},
      {"matmul transpose_a 3-D", {{{2, 4, 3}}, {{4, 2}}}, Op("matmul", ta), {}, true},
      {"matmul transpose_b with a vector", {{{4}}, {{3, 4}}}, Op("matmul", tb), {}, true},
      // ---- nn
      {"softmax axis -1", {{{3, 5}}}, Op("softmax", Axis(-1))},
      {"softmax axis 0", {{{3, 5}}}, Op("softmax", Axis(0))},
      {"softmax default axis", {{{2, 3, 4}}}, Op("softmax")},
      {"log_softmax axis 0", {{{3, 5}}}, Op("log_softmax", Axis(0))},
      {"log_softmax axis 1 of 3-D", {{{2, 3, 4}}}, Op("log_softmax", Axis(1))},
      {"layer_norm", {{{3, 5}}, {{5}}, {{5}}}, LayerNorm()},
      {"layer_norm 3-D", {{{2, 3, 4}}, {{4}}, {{4}}}, LayerNorm()},
      {"layer_norm eps an input", {{{2, 4}}, {{4}}, {{4}}, {{}, DType::f64, 1e-3, 1e-2}}, Op("layer_norm"), {}, false, {3}},
      // layer_norm_vjp's own derivatives (second derivatives of layer_norm), eps held still; 3-D rows too.
      {"layer_norm_vjp", {{{2, 4}}, {{4}}, {{2, 4}}, {{}, DType::f64, 1e-3, 1e-2}}, Op("layer_norm_vjp"), {}, false, {3}},
      {"layer_norm_vjp 3-D", {{{2, 3, 4}}, {{4}}, {{2, 3, 4}}, {{}, DType::f64, 1e-3, 1e-2}}, Op("layer_norm_vjp"), {},
       false, {3}},
      {"layer_norm_vjp of a vector", {{{5}}, {{5}}, {{5}}, {{}, DType::f64, 1e-3, 1e-2}}, Op("layer_norm_vjp"), {}, false,
       {3}},
      // ---- indexing
      {"take constant indices axis 0", {{{5, 3}}}, TakeConst(Array::from_vector<std::int32_t>({3, 0, 3, 1, 3}), 0)},
      {"take constant indices flattened", {{{3, 4}}}, TakeConst(Array::from_vector<std::int32_t>({11, 0, 11, 5, -1}), std::nullopt)},
      {"take axis 0", {{{5, 3}}, Ints({4}, -5, 5)}, Op("take", TakeAxis(0))},
      {"take axis 1 with 2-D indices", {{{2, 4, 3}}, Ints({2, 2}, -4, 4)}, Op("take", TakeAxis(1))},
      {"take axis -1 int8 indices", {{{3, 4}}, Ints({5}, -4, 4, DType::i8)}, Op("take", TakeAxis(-1))},
      {"take flattened", {{{3, 4}}, Ints({2, 3}, -12, 12)}, Op("take", TakeAxis(std::nullopt))},
      {"take int64 scalar index", {{{4, 2}}, Ints({}, -4, 4, DType::i64)}, Op("take", TakeAxis(0))},
      {"one_hot", {Ints({4}, -1, 6)}, Op("one_hot", {{"num_classes", std::int64_t{5}}, {"dtype", DType::f64}})},
      {"one_hot of 2-D labels @ x", {Ints({2, 3}, 0, 4), {{4}}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         const int hot = b.emit("one_hot", {x[0]}, {{"num_classes", std::int64_t{4}}, {"dtype", DType::f64}})[0];
         return b.emit("matmul", {hot, x[1]});
       }, {}, true},
  };
}

// ---- helpers ----------------------------------------------------------------------------------------------

Array Random(const In& in, std::mt19937_64& rng, bool exact) {
  std::vector<double> v(static_cast<std::size_t>(num_elements(in.shape)));
  if (!is_floating(in.dtype)) {
    std::uniform_int_distribution<std::int64_t> d(static_cast<std::int64_t>(in.low), static_cast<std::int64_t>(in.high) - 1);
    for (double& e : v) e = static_cast<double>(d(rng));
  } else if (exact) {
    std::uniform_int_distribution<int> d(-12, 12);
    for (double& e : v) e = d(rng) / 8.0;
  } else {
    std::uniform_real_distribution<double> d(in.low, in.high);
    for (double& e : v) e = d(rng);
  }
  return Array::from_doubles(v, in.shape, in.dtype);
}

Array Plus(const Array& x, const Array& v, double h) {
  std::vector<double> a = x.to_doubles();
  const std::vector<double> b = v.to_doubles();
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += h * b[i];
  return Array::from_doubles(a, x.shape(), x.dtype());
}

double Dot(const Array& a, const Array& b) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

bool Floating(const Program& f, std::size_t k, bool output) {
  return is_floating((output ? f.output_types() : f.input_types())[k].dtype);
}

struct Built {
  Program f;
  std::vector<Array> x;
};

Built Build(const Case& c, std::mt19937_64& rng) {
  ProgramBuilder b;
  std::vector<int> ins;
  for (const In& in : c.ins) ins.push_back(b.input({in.dtype, in.shape, {}}));
  b.set_outputs(c.body(b, ins));
  Built built{b.build(), {}};
  for (const In& in : c.ins) built.x.push_back(Random(in, rng, c.exact_data));
  if (!c.zeros.empty()) {
    std::vector<double> v = built.x[0].to_doubles();
    for (std::int64_t i : c.zeros) v[static_cast<std::size_t>(i)] = 0;
    built.x[0] = Array::from_doubles(v, built.x[0].shape(), built.x[0].dtype());
  }
  return built;
}

// A random direction for the float inputs, zeros for the integer ones and those held still.
std::vector<Array> Direction(const Case& c, const Program& f, std::mt19937_64& rng) {
  std::vector<Array> v;
  for (const ValueType& t : f.input_types()) {
    const bool still = std::count(c.still.begin(), c.still.end(), v.size()) > 0;
    v.push_back(is_floating(t.dtype) && !still ? Random({t.shape, t.dtype}, rng, false) : Array::zeros(t.shape, t.dtype));
  }
  return v;
}

// ---- the checks -------------------------------------------------------------------------------------------

TEST(OpsShapeRules, JvpMatchesCentralDifferencesInFloat64) {
  std::mt19937_64 rng(46);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    if (c.name.find("batching only") != std::string::npos) continue;
    const Built built = Build(c, rng);
    const Program jf = jvp_program(built.f);
    const std::vector<Array> v = Direction(c, built.f, rng);
    std::vector<Array> args = built.x;
    args.insert(args.end(), v.begin(), v.end());
    const std::vector<Array> got = run_program(jf, args);
    const std::size_t n = built.f.output_types().size();
    ASSERT_EQ(got.size(), 2 * n);
    const double h = 1e-6;
    std::vector<Array> up, down;
    for (std::size_t k = 0; k < built.x.size(); ++k) {
      up.push_back(Floating(built.f, k, false) ? Plus(built.x[k], v[k], h) : built.x[k]);
      down.push_back(Floating(built.f, k, false) ? Plus(built.x[k], v[k], -h) : built.x[k]);
    }
    const std::vector<Array> fu = run_program(built.f, up), fd = run_program(built.f, down);
    for (std::size_t k = 0; k < n; ++k) {
      const std::vector<double> tangent = got[n + k].to_doubles(), a = fu[k].to_doubles(), b = fd[k].to_doubles();
      if (!Floating(built.f, k, true)) {
        for (double t : tangent) EXPECT_EQ(t, 0) << "an integer output's tangent is zero";
        continue;
      }
      double worst = 0, scale = 1e-30;
      for (std::size_t i = 0; i < tangent.size(); ++i) {
        const double numeric = (a[i] - b[i]) / (2 * h);
        worst = std::max(worst, std::abs(numeric - tangent[i]));
        scale = std::max(scale, std::abs(numeric));
      }
      EXPECT_LE(worst / std::max(scale, 1.0), 1e-7) << "output " << k << ": max error " << worst;
    }
  }
}

TEST(OpsShapeRules, VjpIsTheAdjointOfTheJvp) {
  std::mt19937_64 rng(4646);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    if (c.name.find("batching only") != std::string::npos) continue;
    const Built built = Build(c, rng);
    std::vector<int> wrt;
    for (std::size_t k = 0; k < built.x.size(); ++k) {
      if (Floating(built.f, k, false) && std::count(c.still.begin(), c.still.end(), k) == 0) wrt.push_back(static_cast<int>(k));
    }
    bool any_float_out = false;
    for (std::size_t k = 0; k < built.f.output_types().size(); ++k) any_float_out |= Floating(built.f, k, true);
    if (wrt.empty() || !any_float_out) continue;
    const std::vector<Array> v = Direction(c, built.f, rng);
    std::vector<Array> jvp_args = built.x;
    jvp_args.insert(jvp_args.end(), v.begin(), v.end());
    const std::vector<Array> jv = run_program(jvp_program(built.f), jvp_args);
    const std::size_t n = built.f.output_types().size();
    std::vector<Array> u;
    for (const ValueType& t : built.f.output_types()) {
      u.push_back(is_floating(t.dtype) ? Random({t.shape, t.dtype}, rng, false) : Array::zeros(t.shape, t.dtype));
    }
    std::vector<Array> vjp_args = built.x;
    vjp_args.insert(vjp_args.end(), u.begin(), u.end());
    const std::vector<Array> ct = run_program(vjp_program(built.f, wrt), vjp_args);
    double left = 0, right = 0, scale = 1;
    for (std::size_t j = 0; j < wrt.size(); ++j) {
      const double d = Dot(ct[n + j], v[static_cast<std::size_t>(wrt[j])]);
      left += d;
      scale += std::abs(d);
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (!Floating(built.f, k, true)) continue;
      const double d = Dot(u[k], jv[n + k]);
      right += d;
      scale += std::abs(d);
    }
    EXPECT_LE(std::abs(left - right), 1e-12 * scale) << "<vjp(u), v> = " << left << ", <u, jvp(v)> = " << right;
  }
}

// Example i of a batched array (its leading axis).
Array Example(const Array& batched, std::int64_t i) {
  const Shape shape(batched.shape().begin() + 1, batched.shape().end());
  const std::int64_t n = num_elements(shape);
  const std::vector<double> all = batched.to_doubles();
  return Array::from_doubles({all.begin() + i * n, all.begin() + (i + 1) * n}, shape, batched.dtype());
}

Array Stack(const std::vector<Array>& xs, const ValueType& type) {
  std::vector<double> all;
  for (const Array& x : xs) {
    const std::vector<double> v = x.to_doubles();
    all.insert(all.end(), v.begin(), v.end());
  }
  Shape shape = type.shape;
  shape.insert(shape.begin(), static_cast<std::int64_t>(xs.size()));
  return Array::from_doubles(all, shape, type.dtype);
}

bool SameBits(const Array& a, const Array& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

TEST(OpsShapeRules, BatchedProgramIsThePerExampleRunsStackedBitForBit) {
  std::mt19937_64 rng(460);
  constexpr std::int64_t kBatch = 3;
  for (const Case& c : Cases()) {
    const Built built = Build(c, rng);
    const std::size_t k_in = built.x.size();
    // Every mix of batched and shared inputs with at least one batched.
    for (unsigned mask = 1; mask < (1u << k_in); ++mask) {
      std::vector<bool> batched(k_in);
      std::string mix;
      for (std::size_t k = 0; k < k_in; ++k) {
        batched[k] = (mask >> k) & 1;
        mix += batched[k] ? "B" : "-";
      }
      SCOPED_TRACE(c.name + " batched " + mix);
      // Each batched input's examples: fresh draws (with the case's zeros in each).
      std::vector<std::vector<Array>> examples(k_in);
      std::vector<Array> args;
      for (std::size_t k = 0; k < k_in; ++k) {
        if (!batched[k]) {
          args.push_back(built.x[k]);
          continue;
        }
        for (std::int64_t i = 0; i < kBatch; ++i) examples[k].push_back(i == 0 ? built.x[k] : Build(c, rng).x[k]);
        args.push_back(Stack(examples[k], built.f.input_types()[k]));
      }
      const BatchedProgram bp = batch_program(built.f, batched, kBatch);
      const std::vector<Array> got = run_program(bp.program, args);
      const std::vector<ValueType> outs = built.f.output_types();
      ASSERT_EQ(got.size(), outs.size());
      for (std::int64_t i = 0; i < kBatch; ++i) {
        std::vector<Array> one;
        for (std::size_t k = 0; k < k_in; ++k) one.push_back(batched[k] ? examples[k][static_cast<std::size_t>(i)] : built.x[k]);
        const std::vector<Array> want = run_program(built.f, one);
        for (std::size_t k = 0; k < outs.size(); ++k) {
          const Array have = bp.out_batched[k] ? Example(got[k], i) : got[k];
          EXPECT_TRUE(SameBits(have, want[k])) << "output " << k << " of example " << i;
        }
      }
    }
  }
}

// layer_norm with per-example scale or bias (vmap over a layer's affine parameters): one normalisation of every
// example's rows, not one layer_norm per example, and still each example's own result bit for bit, in every
// float dtype (bfloat16 and float16 compute in float32, as the kernel does).
TEST(OpsShapeRules, LayerNormWithBatchedScaleOrBiasIsOneNormalisationBitForBit) {
  std::mt19937_64 rng(2046);
  std::normal_distribution<double> normal(0.0, 1.0);
  constexpr std::int64_t kBatch = 5;
  const Shape x_shape{2, 3, 4}, vec{4};
  for (const DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    // x, scale, bias batched or shared; scale or bias batched in each.
    for (const std::vector<bool>& batched : std::vector<std::vector<bool>>{
             {false, true, false}, {false, false, true}, {false, true, true}, {true, true, false},
             {true, false, true}, {true, true, true}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " batched " + (batched[0] ? "B" : "-") + (batched[1] ? "B" : "-") +
                   (batched[2] ? "B" : "-"));
      ProgramBuilder b;
      const int x = b.input({dt, x_shape, {}}), scale = b.input({dt, vec, {}}), bias = b.input({dt, vec, {}});
      b.set_outputs({b.emit("layer_norm", {x, scale, bias, b.constant(Array::scalar(1e-5, DType::f64))})[0]});
      const Program f = b.build();
      const BatchedProgram bp = batch_program(f, batched, kBatch);
      const std::string text = bp.program.text();
      std::size_t norms = 0;
      for (std::size_t at = text.find(" layer_norm "); at != std::string::npos; at = text.find(" layer_norm ", at + 1)) ++norms;
      EXPECT_EQ(norms, 1u) << text;
      EXPECT_EQ(text.find(" slice"), std::string::npos) << text;
      std::vector<std::vector<Array>> examples(3);
      std::vector<Array> args;
      for (std::size_t k = 0; k < 3; ++k) {
        const Shape& shape = k == 0 ? x_shape : vec;
        for (std::int64_t i = 0; i < (batched[k] ? kBatch : 1); ++i) {
          std::vector<double> v(static_cast<std::size_t>(num_elements(shape)));
          for (double& e : v) e = (k == 1 ? 1.0 : 0.0) + normal(rng);
          examples[k].push_back(Array::from_doubles(v, shape, dt));
        }
        args.push_back(batched[k] ? Stack(examples[k], {dt, shape, {}}) : examples[k][0]);
      }
      const std::vector<Array> got = run_program(bp.program, args);
      ASSERT_TRUE(bp.out_batched[0]);
      for (std::int64_t i = 0; i < kBatch; ++i) {
        std::vector<Array> one;
        for (std::size_t k = 0; k < 3; ++k) one.push_back(examples[k][batched[k] ? static_cast<std::size_t>(i) : 0]);
        EXPECT_TRUE(SameBits(Example(got[0], i), run_program(f, one)[0])) << "example " << i;
      }
    }
  }
}

// A batch of one matmul equation for a batched vector and a shared matrix or vector, no copy of the shared
// operand (no broadcast_to of it): [B, k] @ w is one product.
TEST(OpsShapeRules, MatmulOfBatchedRowsAndASharedMatrixIsOneProduct) {
  for (const auto& [a, b, batched] : std::vector<std::tuple<Shape, Shape, std::vector<bool>>>{
           {{4}, {4, 3}, {true, false}}, {{5, 4}, {4, 3}, {true, false}}, {{3, 4}, {4}, {false, true}},
           {{2, 5, 4}, {4, 3}, {true, false}}, {{4}, {4}, {true, false}}}) {
    ProgramBuilder pb;
    const int x = pb.input({DType::f32, a, {}}), w = pb.input({DType::f32, b, {}});
    pb.set_outputs({pb.emit("matmul", {x, w})[0]});
    const Program p = batch_program(pb.build(), batched, 8).program;
    SCOPED_TRACE(p.text());
    EXPECT_EQ(p.count("matmul"), 1u);
    EXPECT_EQ(p.count("broadcast_to"), 0u);
  }
}

// ---- cumsum, cumprod against a naive sequential reference ----------------------------------------------------

// The running total along `axis` of x (row-major `shape`), from the end when `reverse`.
std::vector<double> NaiveCumulative(const std::vector<double>& x, const Shape& shape, std::size_t axis, bool product,
                                    bool reverse) {
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= shape[d];
  for (std::size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t n = shape[axis];
  std::vector<double> y(x.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      double acc = product ? 1 : 0;
      for (std::int64_t s = 0; s < n; ++s) {
        const std::size_t at = static_cast<std::size_t>((o * n + (reverse ? n - 1 - s : s)) * inner + i);
        acc = product ? acc * x[at] : acc + x[at];
        y[at] = acc;
      }
    }
  }
  return y;
}

TEST(OpsShapeRules, CumsumAndCumprodMatchASequentialReference) {
  std::mt19937_64 rng(7);
  struct Row {
    DType in, out;
    double low, high;
  };
  for (const Row& row : std::vector<Row>{{DType::f64, DType::f64, -2, 2}, {DType::i32, DType::i32, -3, 4},
                                         {DType::i8, DType::i32, -3, 4}, {DType::u8, DType::i32, 0, 4},
                                         {DType::boolean, DType::i32, 0, 2}}) {
    for (const Shape& shape : std::vector<Shape>{{7}, {3, 4}, {2, 3, 4}, {0, 3}}) {
      for (std::size_t axis = 0; axis < shape.size(); ++axis) {
        for (const char* op : {"cumsum", "cumprod"}) {
          for (const bool reverse : {false, true}) {
            SCOPED_TRACE(std::string(op) + " of " + std::string(dtype_name(row.in)) + " axis " +
                         std::to_string(axis) + (reverse ? " reverse" : ""));
            ProgramBuilder b;
            const int x = b.input({row.in, shape, {}});
            b.set_outputs({b.emit(op, {x}, {{"axis", static_cast<std::int64_t>(axis)}, {"reverse", reverse}})[0]});
            const Program p = b.build();
            ASSERT_EQ(p.output_types()[0].dtype, row.out);
            const Array in = Random({shape, row.in, row.low, row.high}, rng, false);
            const std::vector<double> want =
                NaiveCumulative(in.to_doubles(), shape, axis, std::string(op) == "cumprod", reverse);
            EXPECT_EQ(run_program(p, std::vector<Array>{in})[0].to_doubles(), want);
          }
        }
      }
    }
  }
  // int32 wraps as JAX's: 2^30 + 2^30 is -2^31.
  ProgramBuilder b;
  const int x = b.input({DType::i32, {2}, {}});
  b.set_outputs({b.emit("cumsum", {x}, {{"axis", std::int64_t{0}}})[0]});
  const Array big = Array::from_vector<std::int32_t>({1 << 30, 1 << 30});
  EXPECT_EQ(run_program(b.build(), std::vector<Array>{big})[0].to_doubles(), (std::vector<double>{1 << 30, -2147483648.0}));
}

// ---- refusals -------------------------------------------------------------------------------------------------

TEST(OpsShapeRules, RefusalsNameTheOpAndTheRule) {
  const auto refusal = [](const std::function<void()>& f) { return testing::ErrorOf<InvalidArgument>(f); };
  {
    ProgramBuilder b;
    const int s = b.input({DType::f32, {}, {}});
    testing::ExpectContains(refusal([&] { b.emit("cumsum", {s}, {{"axis", std::int64_t{0}}}); }),
                            {"cumsum", "the operand must have at least one dimension"});
    const int v = b.input({DType::f32, {3}, {}});
    testing::ExpectContains(refusal([&] { b.emit("cumprod", {v}, {{"axis", std::int64_t{1}}}); }),
                            {"cumprod", "axis 1 is out of range for rank 1"});
    testing::ExpectContains(refusal([&] { b.emit("cumsum", {v}); }), {"cumsum needs parameter 'axis'"});
  }
  {
    // take of batched x at batched indices: an index past its example's row is refused as a per-example run
    // refuses it, not read from the next example's row (where the stacked gather would find it), and named
    // by its example and its own value (not its position in the stack of the examples' rows).
    struct OutOfRange {
      const char* what;
      Shape x;  // one example's
      std::optional<std::int64_t> axis;
      Shape indices;  // one example's
      std::vector<std::int32_t> stacked;  // every example's indices, stacked
      std::string text;
    };
    const std::vector<OutOfRange> cases{
        {"past the end in example 0", {3}, 0, {2}, {3, 0, 1, 2}, "take: index 3 of example 0 (under vmap) is out of "
                                                                 "bounds for its axis of size 3"},
        {"too negative in example 2", {3}, 0, {2}, {0, 1, -3, 2, -4, 0}, "take: index -4 of example 2 (under vmap)"},
        {"axis 1 of a matrix", {2, 4}, 1, {1}, {3, 4}, "take: index 4 of example 1 (under vmap) is out of bounds for "
                                                       "its axis of size 4"},
        {"2-D indices", {5}, 0, {2, 2}, {0, 1, 2, 3, 4, 4, 5, 0}, "take: index 5 of example 1 (under vmap)"},
        {"the flattened array", {2, 2}, std::nullopt, {1}, {3, -5}, "take: index -5 of example 1 (under vmap) is out "
                                                                     "of bounds for its axis of size 4"},
    };
    for (const OutOfRange& c : cases) {
      SCOPED_TRACE(c.what);
      ProgramBuilder b;
      const int x = b.input({DType::f64, c.x, {}}), i = b.input({DType::i32, c.indices, {}});
      ProgramParams params;
      if (c.axis) params["axis"] = *c.axis;
      b.set_outputs({b.emit("take", {x, i}, params)[0]});
      const std::int64_t examples = static_cast<std::int64_t>(c.stacked.size()) / num_elements(c.indices);
      const Program p = batch_program(b.build(), {true, true}, examples).program;
      Shape xs = c.x, is = c.indices;
      xs.insert(xs.begin(), examples);
      is.insert(is.begin(), examples);
      std::vector<double> values(static_cast<std::size_t>(num_elements(xs)));
      for (std::size_t k = 0; k < values.size(); ++k) values[k] = static_cast<double>(k);
      const std::vector<Array> args{Array::from_doubles(values, xs, DType::f64),
                                    Array::from_vector<std::int32_t>(c.stacked).reshape(is)};
      testing::ExpectContains(refusal([&] { run_program(p, args); }), {c.text});
    }
  }
}

}  // namespace ops_shape_rules_test
}  // namespace
}  // namespace weft
