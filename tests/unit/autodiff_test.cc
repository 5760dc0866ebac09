// Reverse mode on programs (weft::vjp_program, src/program/autodiff.cc; issue 23 item 4's first check): for
// a table of ops over float64 inputs of several shapes (broadcasting included), the VJP's cotangents against
// central differences of the same program, max relative error <= 1e-7; at the points where a rule's formula
// divides by an input or takes its log, JAX's values (issue 45 item 2); integer inputs get no cotangent
// (zeros); and ops without a rule are errors naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "../support/singular_points.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace autodiff_test {

using Shape = std::vector<std::int64_t>;

using test::Binary;
using test::Body;
using test::IntegerPow;
using test::Singular;
using test::Unary;

struct Case {
  const char* name;
  std::vector<Shape> shapes;
  Body body;
  double low = -1.5, high = 1.5;  // input range (positive for log, sqrt, ...)
};

ProgramParams Axes(std::vector<std::int64_t> axes, bool keepdims = false) {
  return {{"axes", std::move(axes)}, {"keepdims", keepdims}};
}

Body Slice(std::vector<std::int64_t> start, std::vector<std::int64_t> limit, std::vector<std::int64_t> step) {
  return [=](ProgramBuilder& b, const std::vector<int>& x) {
    return b.emit("slice", {x[0]}, {{"start", start}, {"limit", limit}, {"step", step}})[0];
  };
}

// take with constant indices (integers: they get no cotangent, so they are not an input the check moves).
Body Take(Array indices, std::optional<std::int64_t> axis) {
  return [=](ProgramBuilder& b, const std::vector<int>& x) {
    ProgramParams params;
    if (axis) params["axis"] = *axis;
    return b.emit("take", {x[0], b.constant(indices)}, params)[0];
  };
}

std::vector<Case> Cases() {
  return {
      {"add broadcast", {{3, 4}, {4}}, Binary("add")},
      {"subtract broadcast", {{3, 1}, {3, 4}}, Binary("subtract")},
      {"multiply", {{2, 3}, {2, 3}}, Binary("multiply")},
      {"multiply by a scalar", {{2, 3}, {}}, Binary("multiply")},
      {"divide", {{2, 3}, {3}}, Binary("divide"), 0.5, 2.0},
      {"power", {{5}, {5}}, Binary("power"), 0.5, 2.0},
      {"maximum", {{6}, {6}}, Binary("maximum")},
      {"minimum", {{2, 3}, {3}}, Binary("minimum")},
      {"negative", {{4}}, Unary("negative")},
      {"exp", {{3, 2}}, Unary("exp")},
      {"log", {{3, 2}}, Unary("log"), 0.5, 2.0},
      {"log1p", {{4}}, Unary("log1p"), 0.1, 2.0},
      {"tanh", {{3, 3}}, Unary("tanh")},
      {"sqrt", {{4}}, Unary("sqrt"), 0.5, 2.0},
      {"rsqrt", {{4}}, Unary("rsqrt"), 0.5, 2.0},
      {"sigmoid", {{5}}, Unary("sigmoid")},
      {"gelu_tanh", {{3, 4}}, Unary("gelu_tanh")},
      {"layer_norm", {{3, 5}, {5}, {5}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("layer_norm", {x[0], x[1], x[2], b.constant(Array::scalar(1e-5, DType::f64))})[0];
       }},
      {"abs", {{5}}, Unary("abs")},
      {"relu", {{2, 4}}, Unary("relu")},
      {"integer_pow 3", {{4}}, IntegerPow(3)},
      {"integer_pow 0", {{4}}, IntegerPow(0)},
      {"integer_pow -2", {{4}}, IntegerPow(-2), 0.5, 2.0},
      {"power of a negative base to a constant integer exponent", {{2, 3}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("power", {x[0], b.constant(Array::from_vector<std::int32_t>({0, 1, 2}))})[0];
       }, -2.0, -0.5},
      {"power to constant float exponents", {{2, 3}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("power", {x[0], b.constant(Array::from_doubles({2.0, 0.5, -1.5}, {3}, DType::f64))})[0];
       }, 0.5, 2.0},
      {"where", {{3, 4}, {3, 4}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         const int c = b.emit("greater", {x[0], x[1]})[0];
         return b.emit("where", {c, x[0], b.emit("multiply", {x[1], x[1]})[0]})[0];
       }},
      {"sum over an axis", {{3, 4}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("sum", {x[0]}, Axes({1}))[0];
       }},
      {"mean keepdims", {{3, 4}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("mean", {x[0]}, Axes({0}, true))[0];
       }},
      {"max", {{3, 4}}, [](ProgramBuilder& b, const std::vector<int>& x) { return b.emit("max", {x[0]}, Axes({1}))[0]; }},
      {"min of all", {{3, 4}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("min", {x[0]}, {{"keepdims", false}})[0];
       }},
      {"reshape", {{3, 4}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("reshape", {x[0]}, {{"shape", std::vector<std::int64_t>{2, 6}}})[0];
       }},
      {"transpose", {{2, 3, 4}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("transpose", {x[0]}, {{"perm", std::vector<std::int64_t>{2, 0, 1}}})[0];
       }},
      {"broadcast_to", {{3, 1}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("broadcast_to", {x[0]}, {{"shape", std::vector<std::int64_t>{2, 3, 4}}})[0];
       }},
      {"matmul", {{3, 4}, {4, 2}}, Binary("matmul")},
      {"matmul batched and broadcast", {{2, 3, 4}, {4, 5}}, Binary("matmul")},
      {"matmul vector-matrix", {{4}, {4, 3}}, Binary("matmul")},
      {"matmul transposed operands", {{4, 3}, {5, 4}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("matmul", {x[0], x[1]}, {{"transpose_a", true}, {"transpose_b", true}})[0];
       }},
      {"matmul matrix-vector", {{3, 4}, {4}}, Binary("matmul")},
      {"softmax", {{3, 5}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("softmax", {x[0]}, {{"axis", std::int64_t{-1}}})[0];
       }},
      {"log_softmax", {{3, 5}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("log_softmax", {x[0]}, {{"axis", std::int64_t{0}}})[0];
       }},
      {"logsumexp", {{3, 5}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("logsumexp", {x[0]}, {{"axis", std::int64_t{1}}, {"keepdims", false}})[0];
       }},
      {"slice", {{4, 5}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("slice", {x[0]}, {{"start", std::vector<std::int64_t>{1, 0}},
                                         {"limit", std::vector<std::int64_t>{3, 4}},
                                         {"step", std::vector<std::int64_t>{1, 1}}})[0];
       }},
      // Strided slices: steps that do not divide the length, a last element short of the end (the spread
      // cotangent cut back), negative steps (read in reverse), several axes at once.
      {"slice step 2 and 3", {{5, 7}}, Slice({0, 1}, {5, 7}, {2, 3})},
      {"slice step 3 not dividing 8", {{8}}, Slice({1}, {8}, {3})},
      {"slice step 4 ending early", {{3, 9}}, Slice({0, 2}, {3, 7}, {1, 4})},
      {"slice negative steps", {{6, 5}}, Slice({5, 3}, {-1, 0}, {-2, -1})},
      {"slice negative step 3", {{7}}, Slice({5}, {0}, {-3})},
      {"slice 3-D mixed steps", {{3, 4, 5}}, Slice({0, 3, 1}, {3, -1, 5}, {2, -2, 2})},
      // take: repeated and out-of-order indices (their cotangents summed), negative ones, 2-D indices, the
      // flattened form, narrow index dtypes.
      {"take axis 0 repeated", {{5, 3}}, Take(Array::from_vector<std::int32_t>({3, 0, 3, 1, 3}), 0)},
      {"take axis 1 out of order", {{2, 4, 3}}, Take(Array::from_vector<std::int32_t>({2, 0, 2, -1}).reshape({2, 2}), 1)},
      {"take axis -1 int8", {{3, 4}}, Take(Array::from_vector<std::int8_t>({1, 1, -4, 3, 0}), -1)},
      {"take int64 scalar index", {{4, 2}}, Take(Array::scalar(2, DType::i64), 0)},
      {"take flattened", {{3, 4}}, Take(Array::from_vector<std::int32_t>({11, 0, 11, 5, -1}), std::nullopt)},
      {"concatenate", {{2, 3}, {2, 2}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("concatenate", {x[0], x[1]}, {{"axis", std::int64_t{1}}})[0];
       }},
      {"a chain: tanh(x @ w + b) summed", {{4, 3}, {3, 2}, {2}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         const int h = b.emit("add", {b.emit("matmul", {x[0], x[1]})[0], x[2]})[0];
         return b.emit("sum", {b.emit("tanh", {h})[0]}, Axes({0}))[0];
       }},
  };
}

double Dot(const Array& a, const Array& b) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

TEST(Autodiff, EveryOpsVjpMatchesCentralDifferencesInFloat64) {
  std::mt19937_64 rng(23);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::uniform_real_distribution<double> dist(c.low, c.high);
    ProgramBuilder b;
    std::vector<int> ins;
    for (const Shape& s : c.shapes) ins.push_back(b.input({DType::f64, s, {}}));
    b.set_outputs({c.body(b, ins)});
    const Program f = b.build();
    const Program df = vjp_program(f, [&] {
      std::vector<int> all(c.shapes.size());
      for (std::size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int>(k);
      return all;
    }());

    std::vector<Array> x;
    for (const Shape& s : c.shapes) {
      std::vector<double> v(static_cast<std::size_t>(num_elements(s)));
      for (double& e : v) e = dist(rng);
      x.push_back(Array::from_doubles(v, s, DType::f64));
    }
    const Shape out_shape = f.output_types()[0].shape;
    std::vector<double> w(static_cast<std::size_t>(num_elements(out_shape)));
    for (double& e : w) e = dist(rng);
    const Array ct = Array::from_doubles(w, out_shape, DType::f64);

    // The loss is <f(x), ct>; its gradient is the VJP of ct.
    std::vector<Array> vjp_in = x;
    vjp_in.push_back(ct);
    const std::vector<Array> out = run_program(df, vjp_in);
    ASSERT_EQ(out.size(), 1 + x.size());
    for (std::size_t k = 0; k < x.size(); ++k) {
      const std::vector<double> grad = out[1 + k].to_doubles();
      std::vector<double> base = x[k].to_doubles();
      double worst = 0, scale = 1e-30;
      for (std::size_t i = 0; i < base.size(); ++i) {
        const double h = 1e-6 * std::max(1.0, std::abs(base[i]));
        auto loss_at = [&](double v) {
          std::vector<double> moved = base;
          moved[i] = v;
          std::vector<Array> args = x;
          args[k] = Array::from_doubles(moved, x[k].shape(), DType::f64);
          return Dot(run_program(f, args)[0], ct);
        };
        const double numeric = (loss_at(base[i] + h) - loss_at(base[i] - h)) / (2 * h);
        worst = std::max(worst, std::abs(numeric - grad[i]));
        scale = std::max(scale, std::abs(numeric));
      }
      EXPECT_LE(worst / scale, 1e-7) << "input " << k << ": max error " << worst << " against max |grad| " << scale;
    }
  }
}

// ---- JAX's values at the singular points (issue 45 item 2) -----------------------------------------------------
// Where a derivative's formula divides by an input or takes its log, the rule gives JAX's value (its lax.py
// JVP rules): pow's d/dx = y x^(y-1), which an integer y of 0 makes 0, and d/dy = log(x, read as 1 where x is
// 0) * x^y; integer_pow's 0 for y = 0; abs's +g where x >= 0 (-0 included); max / min ties shared equally;
// sqrt, rsqrt, log, divide and logsumexp by their formulas (inf, or nan where JAX's is nan too: the norm
// sqrt(sum(x * x)) at 0, a logsumexp over -inf only). These once gave nan at x = 0 for x ** 2.0, x ** 0 and
// d/dy 0 ** y. Each row: f's float inputs, f (summed by the seed of ones), d sum(f) / d input.
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// The elementwise rows (support/singular_points.hpp, which the JVP's test reads too), then the reductions'.
std::vector<Singular> SingularCases() {
  const auto reduce = [](const char* op) {
    return [op](ProgramBuilder& b, const std::vector<int>& x) { return b.emit(op, {x[0]}, Axes({0}))[0]; };
  };
  std::vector<Singular> cases = test::elementwise_singular_points();
  const std::vector<Singular> reductions = {
      {"max over ties", {{1, 3, 3}}, reduce("max"), {{0, 0.5, 0.5}}},
      {"min over ties", {{2, 2, 5}}, reduce("min"), {{0.5, 0.5, 0}}},
      {"logsumexp with -inf", {{-kInf, 0, 0}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("logsumexp", {x[0]}, {{"axis", std::int64_t{0}}})[0];
       }, {{0, 0.5, 0.5}}},
      {"logsumexp over -inf only", {{-kInf, -kInf}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("logsumexp", {x[0]}, {{"axis", std::int64_t{0}}})[0];
       }, {{kNan, kNan}}},
      {"the norm sqrt(sum(x * x)) at 0", {{0, 0}}, [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("sqrt", {b.emit("sum", {b.emit("multiply", {x[0], x[0]})[0]})[0]})[0];
       }, {{kNan, kNan}}},
  };
  cases.insert(cases.end(), reductions.begin(), reductions.end());
  return cases;
}

// nan matches nan, infinities match exactly, finite values to the dtype's precision.
bool SameValue(double got, double want, DType dtype) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= (dtype == DType::f32 ? 1e-6 : 1e-13) * std::max(1.0, std::abs(want));
}

TEST(Autodiff, SingularPointsGiveJaxsValues) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const Singular& c : SingularCases()) {
      SCOPED_TRACE(std::string(c.name) + " in " + std::string(dtype_name(dtype)));
      ProgramBuilder b;
      std::vector<int> ins;
      std::vector<Array> args;
      for (const std::vector<double>& v : c.inputs) {
        const Shape shape{static_cast<std::int64_t>(v.size())};
        ins.push_back(b.input({dtype, shape, {}}));
        args.push_back(Array::from_doubles(v, shape, dtype));
      }
      b.set_outputs({c.body(b, ins)});
      const Program f = b.build();
      std::vector<int> wrt(ins.size());
      for (std::size_t k = 0; k < wrt.size(); ++k) wrt[k] = static_cast<int>(k);
      const ValueType out = f.output_types()[0];
      args.push_back(Array::ones(out.shape, out.dtype));
      const std::vector<Array> got = run_program(vjp_program(f, wrt), args);
      for (std::size_t k = 0; k < c.want.size(); ++k) {
        const std::vector<double> g = got[1 + k].to_doubles();
        ASSERT_EQ(g.size(), c.want[k].size());
        for (std::size_t i = 0; i < g.size(); ++i) {
          EXPECT_TRUE(SameValue(g[i], c.want[k][i], dtype))
              << "d/d input " << k << " at element " << i << ": got " << g[i] << ", JAX gives " << c.want[k][i];
        }
      }
    }
  }
}

// The same rules reached through weft::grad of C++ code (a ** 2.0 and a ** 0.5 at 0).
TEST(Autodiff, GradOfPowerAtZeroThroughTheCppApi) {
  const Array a = Array::from_doubles({0, 3}, {2}, DType::f32);
  const std::vector<double> square = grad([](const Array& x) { return power(x, 2.0).sum(); })(a).to_doubles();
  EXPECT_EQ(square, (std::vector<double>{0, 6}));
  const std::vector<double> root = grad([](const Array& x) { return power(x, 0.5).sum(); })(a).to_doubles();
  EXPECT_EQ(root[0], kInf);
  EXPECT_NEAR(root[1], 0.5 / std::sqrt(3.0), 1e-6);
}

TEST(Autodiff, IntegerInputsGetZerosAndOpsWithoutARuleAreNamed) {
  ProgramBuilder b;
  const int x = b.input({DType::f64, {3}, {}});
  const int n = b.input({DType::i32, {3}, {}});
  b.set_outputs({b.emit("multiply", {x, b.emit("astype", {n}, {{"dtype", DType::f64}})[0]})[0]});
  const Program f = b.build();
  const std::vector<Array> out = run_program(
      vjp_program(f, {0, 1}), std::vector<Array>{Array::from_doubles({1, 2, 3}, {3}, DType::f64),
                                                 Array::from_vector<std::int32_t>({4, 5, 6}),
                                                 Array::from_doubles({1, 1, 1}, {3}, DType::f64)});
  EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{4, 5, 6}));  // d/dx x*n = n
  EXPECT_EQ(out[2].dtype(), DType::i32);
  EXPECT_EQ(out[2].to_doubles(), (std::vector<double>{0, 0, 0}));  // no cotangent for an integer input

  ProgramBuilder p(Mesh({{"i", 2}}));
  const int y = p.input({DType::f32, {2}, {"i"}});
  p.set_outputs({p.emit("pmax", {y}, {{"axes", std::vector<std::string>{"i"}}})[0]});
  const std::string text = testing::ErrorOf<InvalidArgument>([&] { vjp_program(p.build(), {0}); });
  testing::ExpectContains(text, {"equation 0 `b:f32[2] = pmax[axes=('i',)] a`",
                                 "no VJP rule for pmax: JAX defines none: differentiating pmax or pmin is an error"});

  // PopXL's reduce-scatter has a rule for its linear reductions only; the others are named.
  ProgramBuilder q(Mesh({{"i", 2}}));
  const int z = q.input({DType::f32, {4}, {"i"}});
  q.set_outputs({q.emit("replicated_reduce_scatter", {z}, {{"axes", std::vector<std::string>{"i"}}, {"op", std::string("max")}})[0]});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { vjp_program(q.build(), {0}); }),
                          {"replicated_reduce_scatter", "with op 'max' has no VJP rule (add and mean have)"});
}

}  // namespace autodiff_test
}  // namespace
}  // namespace weft
