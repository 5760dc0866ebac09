// JAX's derivative values at the elementwise primitives' singular points (issue 45 item 2, issue 46), one
// table for both rules: autodiff_test.cc checks the VJP against it, ops_elementwise_rules_test.cc the JVP.
// Where a derivative's formula divides by an input or takes its log, the rule gives JAX's value (its lax.py
// JVP rules): pow's d/dx = y x^(y-1), which an integer y of 0 makes 0, and d/dy = log(x, read as 1 where x is
// 0) * x^y; integer_pow's 0 for y = 0; abs's +g where x >= 0 (-0 included); max / min ties shared equally;
// sqrt, rsqrt, log and divide by their formulas (inf, or nan where JAX's is nan too). Each row: the op's
// float64 inputs, the op (a one-equation body), d f_i / d x_i per input (f elementwise, so the VJP of ones
// and the JVP of ones agree).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "weft/weft.hpp"

namespace weft::test {

// Builds the op under test on the given program inputs; returns its result.
using Body = std::function<int(ProgramBuilder&, const std::vector<int>&)>;

inline Body Unary(const char* op) {
  return [op](ProgramBuilder& b, const std::vector<int>& x) { return b.emit(op, {x[0]})[0]; };
}
inline Body Binary(const char* op) {
  return [op](ProgramBuilder& b, const std::vector<int>& x) { return b.emit(op, {x[0], x[1]})[0]; };
}
inline Body IntegerPow(std::int64_t y) {
  return [y](ProgramBuilder& b, const std::vector<int>& x) { return b.emit("integer_pow", {x[0]}, {{"y", y}})[0]; };
}

struct Singular {
  const char* name;
  std::vector<std::vector<double>> inputs;
  Body body;
  std::vector<std::vector<double>> want;
};

inline std::vector<Singular> elementwise_singular_points() {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  return {
      {"power: x ** y at x = 0 for y = 2, 0.5, 0, -1, 3, and 2 ** 3",
       {{0, 0, 0, 0, 0, 2}, {2, 0.5, 0, -1, 3, 3}},
       Binary("power"),
       {{0, kInf, kNan, -kInf, 0, 12}, {0, 0, 0, kNan, 0, std::log(2.0) * 8}}},
      {"power to integer exponents 0, 1, 2 at 0 and 0 at 2",
       {{0, 0, 0, 2}},
       [](ProgramBuilder& b, const std::vector<int>& x) {
         return b.emit("power", {x[0], b.constant(Array::from_vector<std::int32_t>({0, 1, 2, 0}))})[0];
       },
       {{0, 1, 0, 0}}},
      {"integer_pow 0", {{0, 2}}, IntegerPow(0), {{0, 0}}},
      {"integer_pow 1", {{0, 2}}, IntegerPow(1), {{1, 1}}},
      {"integer_pow 2", {{0, 2}}, IntegerPow(2), {{0, 4}}},
      {"integer_pow -1", {{0, 2}}, IntegerPow(-1), {{-kInf, -0.25}}},
      {"sqrt", {{0, 4}}, Unary("sqrt"), {{kInf, 0.25}}},
      {"rsqrt", {{0, 4}}, Unary("rsqrt"), {{-kInf, -0.0625}}},
      {"log", {{0, 4}}, Unary("log"), {{kInf, 0.25}}},
      {"divide by 0", {{1, 0, 0}, {0, 0, 2}}, Binary("divide"), {{kInf, kInf, 0.5}, {-kInf, kNan, 0}}},
      {"abs at 0 and -0", {{0, -0.0, -2, 3}}, Unary("abs"), {{1, 1, -1, 1}}},
      {"relu at 0", {{0, 1, -1}}, Unary("relu"), {{0, 1, 0}}},
      {"maximum ties", {{1, 2, 0}, {1, 1, 3}}, Binary("maximum"), {{0.5, 1, 0}, {0.5, 0, 1}}},
      {"minimum ties", {{1, 2, 0}, {1, 1, 3}}, Binary("minimum"), {{0.5, 0, 1}, {0.5, 1, 0}}},
  };
}

}  // namespace weft::test
