// The elementwise family's transformation rules (src/program/ops/elementwise.cc, issue 46), from one table of
// its primitives over several shapes (broadcasting included) and dtypes:
// - the JVP against central differences of the same program in float64 (max relative error 1e-7);
// - second derivatives (the JVP of the JVP program) against central differences of the JVP (1e-6): the ops
//   the rules emit are differentiable in turn, gelu_tanh_derivative included;
// - the adjoint identity <vjp(u), v> = <u, jvp(v)> in float64 (1e-12), so the JVP and the VJP are transposes;
// - the JVP in float32 against float64's (the rules' scalars in the result's dtype);
// - vmap: the batched program on stacked inputs against the program run per example, bit for bit, for every
//   mix of batched and unbatched operands (add of a batched [B, 3] and a shared scalar, where with only its
//   condition batched), in float32, float64 and int32 where the op takes integers;
// and, at the points where a formula divides by an input or takes its log (pow at 0, abs at 0, max ties),
// the JVP gives JAX's values: the ones the VJP test (autodiff_test.cc) lists, as the two rules must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../support/singular_points.hpp"
#include "program/op_registry.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace ops_elementwise_rules_test {

using Shape = std::vector<std::int64_t>;
using test::Binary;
using test::Body;
using test::IntegerPow;
using test::Singular;
using test::Unary;

// An operand: of the dtype under test, or of a fixed one (an integer exponent, a bool condition).
struct Operand {
  Shape shape;
  std::optional<DType> fixed{};
};

struct Case {
  const char* name;
  std::vector<Operand> operands;
  Body body;
  double low = -1.5, high = 1.5;  // the float operands' range (positive for log, sqrt, ...)
  // Whether the result is differentiable in the float operands almost everywhere (comparisons and bitwise
  // ops are for the batching check only).
  bool differentiable = true;
  // Whether the op also takes int32 operands (checked under vmap in int32 too).
  bool ints = false;
  // Whether central differences see the derivative the rules define (not so across stop_gradient).
  bool finite_differences = true;
};

Body AsType(DType to) {
  return [to](ProgramBuilder& b, const std::vector<int>& x) { return b.emit("astype", {x[0]}, {{"dtype", to}})[0]; };
}

const Operand kI32{{3}, DType::i32};

std::vector<Case> Cases() {
  std::vector<Case> cases = {
      {"add broadcast", {{{3, 4}}, {{4}}}, Binary("add"), -1.5, 1.5, true, true},
      {"add a scalar", {{{3}}, {{}}}, Binary("add"), -1.5, 1.5, true, true},
      {"subtract broadcast", {{{3, 1}}, {{3, 4}}}, Binary("subtract"), -1.5, 1.5, true, true},
      {"multiply", {{{2, 3}}, {{2, 3}}}, Binary("multiply"), -1.5, 1.5, true, true},
      {"multiply by a scalar", {{{2, 3}}, {{}}}, Binary("multiply"), -1.5, 1.5, true, true},
      {"multiply by int32", {{{2, 3}}, kI32}, Binary("multiply")},
      {"divide", {{{2, 3}}, {{3}}}, Binary("divide"), 0.5, 2.0, true, true},
      {"power", {{{5}}, {{5}}}, Binary("power"), 0.5, 2.0},
      {"power broadcast", {{{2, 3}}, {{}}}, Binary("power"), 0.5, 2.0},
      {"power of negatives to int32 exponents", {{{2, 3}}, kI32}, Binary("power"), -2.0, -0.5},
      {"maximum", {{{6}}, {{6}}}, Binary("maximum"), -1.5, 1.5, true, true},
      {"minimum broadcast", {{{2, 3}}, {{3}}}, Binary("minimum"), -1.5, 1.5, true, true},
      {"negative", {{{4}}}, Unary("negative"), -1.5, 1.5, true, true},
      {"copy", {{{2, 2}}}, Unary("copy"), -1.5, 1.5, true, true},
      {"exp", {{{3, 2}}}, Unary("exp")},
      {"log", {{{3, 2}}}, Unary("log"), 0.5, 2.0},
      {"log1p", {{{4}}}, Unary("log1p"), 0.1, 2.0},
      {"tanh", {{{3, 3}}}, Unary("tanh")},
      {"sqrt", {{{4}}}, Unary("sqrt"), 0.5, 2.0},
      {"rsqrt", {{{4}}}, Unary("rsqrt"), 0.5, 2.0},
      {"sigmoid", {{{5}}}, Unary("sigmoid")},
      {"gelu_tanh", {{{3, 4}}}, Unary("gelu_tanh"), -3.0, 3.0},
      {"gelu_tanh_derivative", {{{3, 4}}}, Unary("gelu_tanh_derivative"), -3.0, 3.0},
      {"abs", {{{5}}}, Unary("abs"), -1.5, 1.5, true, true},
      {"relu", {{{2, 4}}}, Unary("relu")},
      {"integer_pow 3", {{{4}}}, IntegerPow(3), -1.5, 1.5, true, true},
      {"integer_pow 2", {{{2, 2}}}, IntegerPow(2), -1.5, 1.5, true, true},
      {"integer_pow 1", {{{4}}}, IntegerPow(1)},
      {"integer_pow 0", {{{4}}}, IntegerPow(0), -1.5, 1.5, true, true},
      {"integer_pow -2", {{{4}}}, IntegerPow(-2), 0.5, 2.0},
      {"where on a bool operand, broadcast", {{{3, 4}, DType::boolean}, {{3, 4}}, {{4}}},
       [](ProgramBuilder& b, const std::vector<int>& x) { return b.emit("where", {x[0], x[1], x[2]})[0]; },
       -1.5, 1.5, true, true},
      {"where on a comparison", {{{3, 4}}, {{3, 4}}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         const int c = b.emit("greater", {x[0], x[1]})[0];
         return b.emit("where", {c, x[0], b.emit("multiply", {x[1], x[1]})[0]})[0];
       }},
      {"astype to float64", {{{3}}}, AsType(DType::f64)},
      // x * float(int(x)): the round trip through int32 has a zero derivative (its tangent is dropped).
      {"astype through int32", {{{2, 3}}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         const int truncated = b.emit("astype", {x[0]}, {{"dtype", DType::i32}})[0];
         const int back = b.emit("astype", {truncated}, {{"dtype", b.type(x[0]).dtype}})[0];
         return b.emit("multiply", {x[0], back})[0];
       }, -3.0, 3.0},
      {"sign times x", {{{5}}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("multiply", {b.emit("sign", {x[0]})[0], x[0]})[0];
       }, -1.5, 1.5, true, true},
      // x * stop_gradient(x): d/dx is stop_gradient(x), not 2x (which central differences see).
      {"x times stop_gradient(x)", {{{4}}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("multiply", {x[0], b.emit("stop_gradient", {x[0]})[0]})[0];
       }, -1.5, 1.5, true, true, false},
      {"astype from int32", {kI32}, AsType(DType::f32), -1.5, 1.5, false},
      {"exp of int32", {kI32}, Unary("exp"), -1.5, 1.5, false},
      {"divide int32", {kI32, {{1}, DType::i32}}, Binary("divide"), -1.5, 1.5, false},
  };
  for (const char* op : {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}) {
    cases.push_back({op, {{{2, 3}}, {{3}}}, Binary(op), -1.5, 1.5, false, true});
  }
  for (const char* op : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
    cases.push_back({op, {{{2, 3}, DType::i32}, {{3}, DType::i32}}, Binary(op), -1.5, 1.5, false});
  }
  cases.push_back({"bitwise_not", {{{4}, DType::boolean}}, Unary("bitwise_not"), -1.5, 1.5, false});
  return cases;
}

DType DTypeOf(const Operand& o, DType under_test) { return o.fixed.value_or(under_test); }

// Random values of a dtype: floats in [low, high], integers in [-3, 3], bools either way.
Array RandomArray(const Shape& shape, DType dtype, double low, double high, std::mt19937_64& rng) {
  std::vector<double> v(static_cast<std::size_t>(num_elements(shape)));
  std::uniform_real_distribution<double> real(low, high);
  std::uniform_int_distribution<int> integer(-3, 3);
  for (double& e : v) {
    e = is_floating(dtype) ? real(rng) : dtype == DType::boolean ? integer(rng) > 0 : integer(rng);
  }
  return Array::from_doubles(v, shape, dtype);
}

Program Build(const Case& c, DType dtype) {
  ProgramBuilder b;
  std::vector<int> ins;
  for (const Operand& o : c.operands) ins.push_back(b.input({DTypeOf(o, dtype), o.shape, {}}));
  b.set_outputs({c.body(b, ins)});
  return b.build();
}

std::vector<Array> RandomInputs(const Case& c, DType dtype, std::mt19937_64& rng) {
  std::vector<Array> x;
  for (const Operand& o : c.operands) {
    DType d = DTypeOf(o, dtype);
    Array a = RandomArray(o.shape, d, c.low, c.high, rng);
    // power's integer exponents stay non-negative (so that the base's derivative stays finite).
    if (!is_floating(d) && d != DType::boolean && std::string(c.name).find("power") != std::string::npos) {
      std::vector<double> v = a.to_doubles();
      for (double& e : v) e = std::abs(e);
      a = Array::from_doubles(v, o.shape, d);
    }
    x.push_back(a);
  }
  return x;
}

double Dot(const Array& a, const Array& b) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

// The JVP program's tangent output for primal `x` and tangents `v` (one per input, zeros for integer ones).
Array Jvp(const Program& jvp, const std::vector<Array>& x, const std::vector<Array>& v) {
  std::vector<Array> args = x;
  args.insert(args.end(), v.begin(), v.end());
  const std::vector<Array> out = run_program(jvp, args);
  EXPECT_EQ(out.size(), 2u);
  return out[1];
}

std::vector<Array> RandomTangents(const std::vector<Array>& x, std::mt19937_64& rng) {
  std::vector<Array> v;
  for (const Array& a : x) {
    v.push_back(is_floating(a.dtype()) ? RandomArray(a.shape(), a.dtype(), -1, 1, rng)
                                       : Array::zeros(a.shape(), a.dtype()));
  }
  return v;
}

TEST(ElementwiseRules, JvpMatchesCentralDifferencesInFloat64) {
  std::mt19937_64 rng(46);
  for (const Case& c : Cases()) {
    if (!c.differentiable || !c.finite_differences) continue;
    SCOPED_TRACE(c.name);
    const Program f = Build(c, DType::f64);
    const Program jvp = jvp_program(f);
    const std::vector<Array> x = RandomInputs(c, DType::f64, rng);
    const std::vector<Array> v = RandomTangents(x, rng);
    const Array tangent = Jvp(jvp, x, v);
    EXPECT_EQ(tangent.dtype(), f.output_types()[0].dtype);
    EXPECT_EQ(tangent.shape(), f.output_types()[0].shape);
    // (f(x + h v) - f(x - h v)) / 2h, the float operands moved along v.
    const double h = 1e-6;
    const auto at = [&](double s) {
      std::vector<Array> moved;
      for (std::size_t k = 0; k < x.size(); ++k) {
        if (!is_floating(x[k].dtype())) {
          moved.push_back(x[k]);
          continue;
        }
        std::vector<double> e = x[k].to_doubles();
        const std::vector<double> d = v[k].to_doubles();
        for (std::size_t i = 0; i < e.size(); ++i) e[i] += s * d[i];
        moved.push_back(Array::from_doubles(e, x[k].shape(), DType::f64));
      }
      return run_program(f, moved)[0].to_doubles();
    };
    const std::vector<double> plus = at(h), minus = at(-h), got = tangent.to_doubles();
    double worst = 0, scale = 1e-30;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double numeric = (plus[i] - minus[i]) / (2 * h);
      worst = std::max(worst, std::abs(numeric - got[i]));
      scale = std::max(scale, std::abs(numeric));
    }
    EXPECT_LE(worst / std::max(scale, 1.0), 1e-7) << "max error " << worst << " against max |jvp| " << scale;
  }
}

// The rules' own ops are differentiable in turn (what hessian and jacfwd(jacrev) need): the JVP of the JVP
// program, with the second tangent equal to the first, gives f''(x)[v, v], against central differences of
// the JVP program's tangent. Cases whose operands all have one shape (the rules emit elementwise ops only).
TEST(ElementwiseRules, SecondDerivativesMatchCentralDifferencesInFloat64) {
  std::mt19937_64 rng(2);
  for (const Case& c : Cases()) {
    if (!c.differentiable || !c.finite_differences) continue;
    const auto other_shape = [&](const Operand& o) { return o.shape != c.operands[0].shape; };
    if (std::any_of(c.operands.begin(), c.operands.end(), other_shape)) continue;
    SCOPED_TRACE(c.name);
    const Program jvp = jvp_program(Build(c, DType::f64));
    const Program second = jvp_program(jvp);
    const std::vector<Array> x = RandomInputs(c, DType::f64, rng);
    const std::vector<Array> v = RandomTangents(x, rng);
    // second's inputs: (x, v) for jvp's primals, then their tangents (v, 0); its last output is d/ds of
    // jvp's tangent along (x + s v, v).
    std::vector<Array> args = x;
    args.insert(args.end(), v.begin(), v.end());
    args.insert(args.end(), v.begin(), v.end());
    for (const Array& t : v) args.push_back(Array::zeros(t.shape(), t.dtype()));
    const std::vector<double> got = run_program(second, args).back().to_doubles();
    const double h = 1e-5;
    const auto at = [&](double s) {
      std::vector<Array> moved;
      for (std::size_t k = 0; k < x.size(); ++k) {
        std::vector<double> e = x[k].to_doubles();
        const std::vector<double> d = v[k].to_doubles();
        for (std::size_t i = 0; i < e.size(); ++i) e[i] += s * d[i];
        moved.push_back(Array::from_doubles(e, x[k].shape(), x[k].dtype()));
      }
      return Jvp(jvp, moved, v).to_doubles();
    };
    const std::vector<double> plus = at(h), minus = at(-h);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double numeric = (plus[i] - minus[i]) / (2 * h);
      worst = std::max(worst, std::abs(numeric - got[i]));
      scale = std::max(scale, std::abs(numeric));
    }
    EXPECT_LE(worst / std::max(scale, 1.0), 1e-6) << "max error " << worst << " against max |f''| " << scale;
  }
}

TEST(ElementwiseRules, AdjointIdentityHoldsInFloat64) {
  std::mt19937_64 rng(4646);
  for (const Case& c : Cases()) {
    if (!c.differentiable) continue;
    SCOPED_TRACE(c.name);
    const Program f = Build(c, DType::f64);
    std::vector<int> wrt(c.operands.size());
    for (std::size_t k = 0; k < wrt.size(); ++k) wrt[k] = static_cast<int>(k);
    const Program vjp = vjp_program(f, wrt);
    const Program jvp = jvp_program(f);
    for (int trial = 0; trial < 3; ++trial) {
      const std::vector<Array> x = RandomInputs(c, DType::f64, rng);
      const std::vector<Array> v = RandomTangents(x, rng);
      const ValueType out = f.output_types()[0];
      const Array u = RandomArray(out.shape, DType::f64, -1, 1, rng);
      std::vector<Array> vjp_args = x;
      vjp_args.push_back(u);
      const std::vector<Array> cts = run_program(vjp, vjp_args);
      double lhs = 0, magnitude = 0;
      for (std::size_t k = 0; k < x.size(); ++k) {
        if (!is_floating(x[k].dtype())) continue;
        EXPECT_EQ(cts[1 + k].dtype(), x[k].dtype());
        EXPECT_EQ(cts[1 + k].shape(), x[k].shape());
        lhs += Dot(cts[1 + k], v[k]);
        const std::vector<double> a = cts[1 + k].to_doubles(), b = v[k].to_doubles();
        for (std::size_t i = 0; i < a.size(); ++i) magnitude += std::abs(a[i] * b[i]);
      }
      const double rhs = Dot(u, Jvp(jvp, x, v));
      EXPECT_LE(std::abs(lhs - rhs), 1e-12 * std::max(magnitude, 1.0))
          << "<vjp(u), v> = " << lhs << ", <u, jvp(v)> = " << rhs;
    }
  }
}

TEST(ElementwiseRules, Float32JvpAgreesWithFloat64) {
  std::mt19937_64 rng(32);
  for (const Case& c : Cases()) {
    if (!c.differentiable) continue;
    SCOPED_TRACE(c.name);
    const std::vector<Array> x64 = RandomInputs(c, DType::f64, rng);
    const std::vector<Array> v64 = RandomTangents(x64, rng);
    std::vector<Array> x32, v32;
    for (std::size_t k = 0; k < x64.size(); ++k) {
      const DType d = is_floating(x64[k].dtype()) ? DType::f32 : x64[k].dtype();
      x32.push_back(Array::from_doubles(x64[k].to_doubles(), x64[k].shape(), d));
      v32.push_back(Array::from_doubles(v64[k].to_doubles(), v64[k].shape(), d));
    }
    // The float64 reference on the float32-rounded values.
    std::vector<Array> x_ref, v_ref;
    for (std::size_t k = 0; k < x64.size(); ++k) {
      const DType d = is_floating(x64[k].dtype()) ? DType::f64 : x64[k].dtype();
      x_ref.push_back(Array::from_doubles(x32[k].to_doubles(), x64[k].shape(), d));
      v_ref.push_back(Array::from_doubles(v32[k].to_doubles(), v64[k].shape(), d));
    }
    const Program f32 = Build(c, DType::f32);
    const Array got = Jvp(jvp_program(f32), x32, v32);
    EXPECT_EQ(got.dtype(), f32.output_types()[0].dtype);
    const std::vector<double> g = got.to_doubles();
    const std::vector<double> want = Jvp(jvp_program(Build(c, DType::f64)), x_ref, v_ref).to_doubles();
    for (std::size_t i = 0; i < g.size(); ++i) {
      EXPECT_NEAR(g[i], want[i], 2e-5 * std::max(1.0, std::abs(want[i]))) << "element " << i;
    }
  }
}

// Every non-empty subset of the operands batched (the others shared by every example).
std::vector<std::vector<bool>> Masks(std::size_t n) {
  std::vector<std::vector<bool>> masks;
  for (unsigned m = 1; m < (1u << n); ++m) {
    std::vector<bool> mask(n);
    for (std::size_t k = 0; k < n; ++k) mask[k] = ((m >> k) & 1u) != 0;
    masks.push_back(mask);
  }
  return masks;
}

// The bytes of example b of a batched array.
std::vector<std::byte> Example(const Array& a, std::int64_t b, std::int64_t batch) {
  const std::size_t each = a.nbytes() / static_cast<std::size_t>(batch);
  const std::byte* first = a.bytes() + static_cast<std::size_t>(b) * each;
  return {first, first + each};
}

std::vector<std::byte> Bytes(const Array& a) { return {a.bytes(), a.bytes() + a.nbytes()}; }

TEST(ElementwiseRules, VmapEqualsThePerExampleProgramBitForBit) {
  constexpr std::int64_t kBatch = 3;
  std::mt19937_64 rng(7);
  for (const Case& c : Cases()) {
    std::vector<DType> dtypes = {DType::f32, DType::f64};
    if (c.ints) dtypes.push_back(DType::i32);
    for (const DType dtype : dtypes) {
      const Program f = Build(c, dtype);
      for (const std::vector<bool>& mask : Masks(c.operands.size())) {
        std::string mix;
        for (bool m : mask) mix += m ? "B" : "-";
        SCOPED_TRACE(std::string(c.name) + " in " + std::string(dtype_name(dtype)) + ", batched " + mix);
        std::vector<std::vector<Array>> examples(kBatch);
        std::vector<Array> shared = RandomInputs(c, dtype, rng);
        std::vector<Array> stacked;
        for (std::size_t k = 0; k < c.operands.size(); ++k) {
          std::vector<Array> each;
          for (std::int64_t b = 0; b < kBatch; ++b) {
            each.push_back(mask[k] ? RandomInputs(c, dtype, rng)[k] : shared[k]);
            examples[static_cast<std::size_t>(b)].push_back(each.back());
          }
          stacked.push_back(mask[k] ? Array::stack(each) : shared[k]);
        }
        const BatchedProgram batched = batch_program(f, mask, kBatch);
        ASSERT_EQ(batched.out_batched, std::vector<bool>{true});
        const Array out = run_program(batched.program, stacked)[0];
        Shape want_shape = f.output_types()[0].shape;
        want_shape.insert(want_shape.begin(), kBatch);
        ASSERT_EQ(out.shape(), want_shape);
        ASSERT_EQ(out.dtype(), f.output_types()[0].dtype);
        for (std::int64_t b = 0; b < kBatch; ++b) {
          const Array one = run_program(f, examples[static_cast<std::size_t>(b)])[0];
          EXPECT_TRUE(Example(out, b, kBatch) == Bytes(one)) << "example " << b;
        }
      }
    }
  }
}

// ---- JAX's values at the singular points --------------------------------------------------------------------
// The JVP of each operand alone (the others constants, so their tangents are symbolically zero) with a
// tangent of ones: for an elementwise op, d f_i / d x_i, the table the VJP's test reads too
// (support/singular_points.hpp, JAX's lax.py rules); the VJP of ones gives the same, so the two rules agree at
// these points too.
std::vector<Singular> SingularCases() { return test::elementwise_singular_points(); }

bool SameValue(double got, double want, DType dtype) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= (dtype == DType::f32 ? 1e-6 : 1e-13) * std::max(1.0, std::abs(want));
}

TEST(ElementwiseRules, JvpAtSingularPointsGivesJaxsValues) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const Singular& c : SingularCases()) {
      for (std::size_t k = 0; k < c.want.size(); ++k) {
        SCOPED_TRACE(std::string(c.name) + " in " + std::string(dtype_name(dtype)) + ", d/d input " +
                     std::to_string(k));
        ProgramBuilder b;
        const Shape shape{static_cast<std::int64_t>(c.inputs[k].size())};
        std::vector<int> operands;
        for (std::size_t j = 0; j < c.inputs.size(); ++j) {
          const Array value = Array::from_doubles(c.inputs[j], shape, dtype);
          operands.push_back(j == k ? b.input({dtype, shape, {}}) : b.constant(value));
        }
        b.set_outputs({c.body(b, operands)});
        const Program f = b.build();
        const std::vector<Array> args{Array::from_doubles(c.inputs[k], shape, dtype), Array::ones(shape, dtype)};
        // The JVP of a tangent of ones, and (the adjoint identity, element by element) the VJP of ones.
        const std::vector<double> jvp = run_program(jvp_program(f), args)[1].to_doubles();
        const std::vector<double> vjp = run_program(vjp_program(f, {0}), args)[1].to_doubles();
        for (std::size_t i = 0; i < jvp.size(); ++i) {
          EXPECT_TRUE(SameValue(jvp[i], c.want[k][i], dtype))
              << "element " << i << ": the JVP gives " << jvp[i] << ", JAX " << c.want[k][i];
          EXPECT_TRUE(SameValue(vjp[i], c.want[k][i], dtype))
              << "element " << i << ": the VJP gives " << vjp[i] << ", JAX " << c.want[k][i];
        }
      }
    }
  }
}

// stop_gradient and sign carry no tangent and take no cotangent: x * stop_gradient(x) has JVP t * x and VJP
// u * x (central differences would see 2x, which is why the table skips them there).
TEST(ElementwiseRules, StopGradientAndSignPassNothing) {
  ProgramBuilder b;
  const int x = b.input({DType::f64, {3}, {}});
  const int held = b.emit("stop_gradient", {x})[0];
  const int sign = b.emit("sign", {x})[0];
  b.set_outputs({b.emit("add", {b.emit("multiply", {x, held})[0], sign})[0]});
  const Program f = b.build();
  const Array at = Array::from_doubles({-2, 0.5, 3}, {3}, DType::f64);
  const Array t = Array::from_doubles({1, 10, 100}, {3}, DType::f64);
  const std::vector<Array> args{at, t};
  EXPECT_EQ(run_program(jvp_program(f), args)[1].to_doubles(), (std::vector<double>{-2, 5, 300}));
  EXPECT_EQ(run_program(vjp_program(f, {0}), args)[1].to_doubles(), (std::vector<double>{-2, 5, 300}));
  // Only stop_gradient and sign reached: the tangent is symbolically zero, the JVP emits no rule's ops.
  ProgramBuilder z;
  const int y = z.input({DType::f64, {3}, {}});
  z.set_outputs({z.emit("sign", {z.emit("stop_gradient", {y})[0]})[0]});
  EXPECT_EQ(run_program(jvp_program(z.build()), args)[1].to_doubles(), (std::vector<double>{0, 0, 0}));
}

// The table reaches every primitive of the family; each has its batching rule, and each with a floating
// result its VJP and JVP (or says why not: none has to).
TEST(ElementwiseRules, EveryPrimitiveHasItsRulesAndIsInTheTable) {
  std::set<std::string> tested;
  for (const Case& c : Cases()) {
    const Program f = Build(c, DType::f32);
    for (std::size_t i = 0; i < f.num_equations(); ++i) tested.insert(f.equation_op(i));
  }
  for (const std::string& name : program::registered_ops()) {
    if (!program::find_op(name)->elementwise) continue;
    SCOPED_TRACE(name);
    EXPECT_TRUE(tested.count(name) > 0) << "not in the table";
    const program::OpInfo* info = program::find_op(name);
    EXPECT_NE(info->batch, nullptr);
    EXPECT_TRUE(info->no_rule.empty());
    // Float operands (bool for where's condition; bitwise ops take none) give a floating result?
    std::vector<ValueType> ins(static_cast<std::size_t>(info->min_inputs), ValueType{DType::f32, {2}, {}});
    if (name == "where") ins[0].dtype = DType::boolean;
    program::Params params;
    if (name == "integer_pow") params["y"] = program::int_param(2);
    if (name == "astype") params["dtype"] = program::Param{DType::f32};
    bool floating = false;
    try {
      floating = is_floating(info->infer(ins, params, Mesh())[0].dtype);
    } catch (const program::RuleError&) {
      floating = false;  // bitwise ops: integer and bool operands only
    }
    if (floating) {
      EXPECT_NE(info->vjp, nullptr);
      EXPECT_NE(info->jvp, nullptr);
    } else {
      EXPECT_EQ(info->jvp, nullptr) << "an integer or bool result has no derivative to take";
    }
  }
}

}  // namespace ops_elementwise_rules_test
}  // namespace
}  // namespace weft
