// softmax, log_softmax and logsumexp (ops.hpp) against a naive double-precision reference written here, over
// every axis of 1-d to 3-d arrays and every dtype; their stability for large logits; the special values JAX's
// formulas give (-inf entries, rows of only -inf, +inf, NaN, empty axes); and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../support/arrays.hpp"
#include "../support/errors.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {
namespace softmax_test {

using testing::ErrorOf;
using D = std::vector<double>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Fn { softmax, log_softmax, logsumexp };

// The textbook definitions in double, along `axis` of `shape` (row-major values): max, exp(x - max), sum,
// then softmax = e / sum, log_softmax = (x - max) - log(sum), logsumexp = max + log(sum) with JAX's rule that a
// non-finite max is replaced by 0. The result has x's shape, or the shape without `axis` for logsumexp.
D Reference(Fn fn, const D& x, const Shape& shape, int axis) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t n = shape[axis];
  D out(fn == Fn::logsumexp ? static_cast<std::size_t>(outer * inner) : x.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      auto at = [&](std::int64_t k) { return static_cast<std::size_t>((o * n + k) * inner + j); };
      double m = -kInf;
      bool nan = false;
      for (std::int64_t k = 0; k < n; ++k) {
        const double v = x[at(k)];
        if (std::isnan(v)) nan = true;
        if (v > m) m = v;
      }
      if (nan) m = kNaN;
      if (fn == Fn::logsumexp && !std::isfinite(m)) m = 0;
      double sum = 0;
      for (std::int64_t k = 0; k < n; ++k) sum += std::exp(x[at(k)] - m);
      if (fn == Fn::logsumexp) {
        out[static_cast<std::size_t>(o * inner + j)] = m + std::log(sum);
        continue;
      }
      for (std::int64_t k = 0; k < n; ++k) {
        out[at(k)] = fn == Fn::softmax ? std::exp(x[at(k)] - m) / sum : (x[at(k)] - m) - std::log(sum);
      }
    }
  }
  return out;
}

Array Apply(Fn fn, const Array& x, int axis, bool keepdims = false) {
  switch (fn) {
    case Fn::softmax: return softmax(x, axis);
    case Fn::log_softmax: return log_softmax(x, axis);
    case Fn::logsumexp: return logsumexp(x, axis, keepdims);
  }
  return {};
}

const char* Name(Fn fn) {
  switch (fn) {
    case Fn::softmax: return "softmax";
    case Fn::log_softmax: return "log_softmax";
    case Fn::logsumexp: return "logsumexp";
  }
  return "?";
}

// |got - ref| <= rtol |ref| + atol, NaN for NaN, the same infinity for an infinity.
void ExpectClose(const Array& got, const D& ref, double rtol, double atol, const std::string& what) {
  const D g = got.to_doubles();
  ASSERT_EQ(g.size(), ref.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < g.size() && reported < 5; ++i) {
    const bool ok = std::isnan(ref[i])   ? std::isnan(g[i])
                    : std::isinf(ref[i]) ? g[i] == ref[i]
                                         : std::fabs(g[i] - ref[i]) <= rtol * std::fabs(ref[i]) + atol;
    if (!ok) {
      ++reported;
      ADD_FAILURE() << what << ": element " << i << " got " << g[i] << ", expected " << ref[i];
    }
  }
}

// Tolerances per result dtype: float32 rounds x - max once (like JAX) and its exp is within a few ulp, so
// 2e-6 relative for logits of magnitude <= 8; 16-bit floats one ulp of the format; float64 1e-13.
struct Tol {
  double rtol, atol;
};
Tol TolOf(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-13, 1e-300};
    case DType::f16: return {std::ldexp(1.0, -10), std::ldexp(1.0, -24)};
    case DType::bf16: return {std::ldexp(1.0, -7), 1e-38};
    default: return {2e-6, 1e-44};
  }
}

TEST(SoftmaxFamily, EveryAxisAndDTypeAgainstTheReference) {
  const std::vector<Shape> shapes = {{7}, {4, 5}, {256, 10}, {3, 4, 5}, {2, 1, 3}, {1, 1}, {2, 1100}};
  for (Fn fn : {Fn::softmax, Fn::log_softmax, Fn::logsumexp}) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      for (const Shape& shape : shapes) {
        // Values in [-8, 8): large enough that subtracting the max matters.
        const Array x = testing::SampleReals(shape, DType::f64, 17) * 8.0;
        const Array xd = x.astype(dtype);
        const D seen = xd.to_doubles();
        for (int axis = -static_cast<int>(shape.size()); axis < static_cast<int>(shape.size()); ++axis) {
          const int pos = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
          const Array got = Apply(fn, xd, axis);
          const std::string what = std::string(Name(fn)) + " " + std::string(dtype_name(dtype)) + " " +
                                   shape_str(shape) + " axis " + std::to_string(axis);
          EXPECT_EQ(got.dtype(), dtype) << what;
          Shape expected_shape = shape;
          if (fn == Fn::logsumexp) expected_shape.erase(expected_shape.begin() + pos);
          EXPECT_EQ(got.shape(), expected_shape) << what;
          const D ref = Reference(fn, seen, shape, pos);
          // The reference rounded to the dtype, then the tolerance.
          ExpectClose(got, Array::from_doubles(ref, expected_shape, dtype).to_doubles(), TolOf(dtype).rtol,
                      TolOf(dtype).atol, what);
        }
      }
    }
  }
}

TEST(SoftmaxFamily, IntegerAndBoolInputsGiveFloat32) {
  const Array i = Array::from_list<std::int32_t>({1, 2, 3, 4, 0, -1}).reshape({2, 3});
  const D seen = i.to_doubles();
  for (Fn fn : {Fn::softmax, Fn::log_softmax, Fn::logsumexp}) {
    const Array got = Apply(fn, i, 1);
    EXPECT_EQ(got.dtype(), DType::f32) << Name(fn);
    ExpectClose(got, Reference(fn, seen, {2, 3}, 1), 2e-6, 1e-44, Name(fn));
    const Array b = Apply(fn, Array::from_list<bool>({true, false, true}), 0);
    EXPECT_EQ(b.dtype(), DType::f32) << Name(fn);
    ExpectClose(b, Reference(fn, {1, 0, 1}, {3}, 0), 2e-6, 1e-44, Name(fn));
  }
}

TEST(SoftmaxFamily, SoftmaxRowsSumToOne) {
  const Array x = testing::SampleReals({256, 10}, DType::f32, 3) * 20.0;
  const D p = softmax(x, -1).to_doubles();
  for (int r = 0; r < 256; ++r) {
    double s = 0;
    for (int k = 0; k < 10; ++k) s += p[r * 10 + k];
    EXPECT_NEAR(s, 1.0, 1e-6) << r;
  }
}

TEST(SoftmaxFamily, StableForLargeLogits) {
  // exp(1000) overflows in any precision; the max is subtracted first.
  const Array x = Array::from_doubles({1000, 0, -1000, 1000}, {4}, DType::f32);
  ExpectClose(softmax(x), {0.5, 0, 0, 0.5}, 0, 0, "softmax");
  ExpectClose(log_softmax(x), {-std::log(2.0), -1000 - std::log(2.0), -2000 - std::log(2.0), -std::log(2.0)},
              1e-7, 0, "log_softmax");
  ExpectClose(logsumexp(x), {1000 + std::log(2.0)}, 1e-7, 0, "logsumexp");
  const Array y = Array::from_doubles({-1e30, -1e30 + 1e24}, {2}, DType::f64);
  ExpectClose(logsumexp(y), {-1e30 + 1e24}, 1e-15, 0, "logsumexp of huge negatives");
  ExpectClose(softmax(Array::from_doubles({89, 88}, {2}, DType::f32)),
              {1 / (1 + std::exp(-1.0)), std::exp(-1.0) / (1 + std::exp(-1.0))}, 1e-6, 0,
              "softmax past float32's exp range");
}

TEST(SoftmaxFamily, InfinitiesAndNanAsJaxGivesThem) {
  struct Case {
    D row;
    D softmax, log_softmax;
    double logsumexp;
  };
  const double l2 = std::log(2.0);
  const Case cases[] = {
      // A -inf entry contributes nothing.
      {{-kInf, 0, 0}, {0, 0.5, 0.5}, {-kInf, -l2, -l2}, l2},
      // Only -inf: x - max is -inf - -inf = NaN in JAX's softmax and log_softmax; logsumexp replaces the
      // non-finite max by 0 and gives log(0) = -inf.
      {{-kInf, -kInf}, {kNaN, kNaN}, {kNaN, kNaN}, -kInf},
      // +inf: inf - inf = NaN again; logsumexp is inf.
      {{kInf, 0}, {kNaN, kNaN}, {kNaN, kNaN}, kInf},
      {{kInf, -kInf}, {kNaN, kNaN}, {kNaN, kNaN}, kInf},
      // NaN anywhere makes the row NaN.
      {{kNaN, 0, 1}, {kNaN, kNaN, kNaN}, {kNaN, kNaN, kNaN}, kNaN},
  };
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (const Case& c : cases) {
      const std::int64_t n = static_cast<std::int64_t>(c.row.size());
      // Three rows: the case between two ordinary rows, so neighbours must stay unaffected.
      D values = {0, 1};
      values.resize(static_cast<std::size_t>(n), 0.5);
      D rows = values;
      rows.insert(rows.end(), c.row.begin(), c.row.end());
      rows.insert(rows.end(), values.begin(), values.end());
      const Array x = Array::from_doubles(rows, {3, n}, dtype);
      const std::string what =
          std::string(dtype_name(dtype)) + " row " + repr(Array::from_doubles(c.row, {n}, DType::f64));
      const D ok_soft = Reference(Fn::softmax, x.to_doubles(), {3, n}, 1);
      const D ok_log = Reference(Fn::log_softmax, x.to_doubles(), {3, n}, 1);
      D soft(ok_soft.begin(), ok_soft.begin() + n), log(ok_log.begin(), ok_log.begin() + n);
      soft.insert(soft.end(), c.softmax.begin(), c.softmax.end());
      log.insert(log.end(), c.log_softmax.begin(), c.log_softmax.end());
      soft.insert(soft.end(), ok_soft.begin() + 2 * n, ok_soft.end());
      log.insert(log.end(), ok_log.begin() + 2 * n, ok_log.end());
      ExpectClose(softmax(x, 1), soft, TolOf(dtype).rtol, TolOf(dtype).atol, "softmax " + what);
      ExpectClose(log_softmax(x, 1), log, TolOf(dtype).rtol, TolOf(dtype).atol, "log_softmax " + what);
      const D lse = logsumexp(x, 1).to_doubles();
      if (std::isnan(c.logsumexp)) {
        EXPECT_TRUE(std::isnan(lse[1])) << "logsumexp " << what;
      } else if (std::isinf(c.logsumexp)) {
        EXPECT_EQ(lse[1], c.logsumexp) << "logsumexp " << what;
      } else {
        EXPECT_NEAR(lse[1], c.logsumexp, TolOf(dtype).rtol * std::fabs(c.logsumexp)) << "logsumexp " << what;
      }
      EXPECT_TRUE(std::isfinite(lse[0]) && std::isfinite(lse[2])) << "logsumexp " << what;
    }
  }
}

TEST(SoftmaxFamily, KeepdimsAndEmptyAxes) {
  const Array x = testing::SampleReals({2, 3, 4}, DType::f32, 5);
  EXPECT_EQ(logsumexp(x, 1, true).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(logsumexp(x, 1, true).to_doubles(), logsumexp(x, 1).to_doubles());
  EXPECT_EQ(logsumexp(x, -1, true).shape(), (Shape{2, 3, 1}));
  // An empty axis: softmax keeps the (empty) shape; logsumexp over nothing is log(0) = -inf, as JAX.
  EXPECT_EQ(softmax(Array::zeros({3, 0}), 1).shape(), (Shape{3, 0}));
  EXPECT_EQ(log_softmax(Array::zeros({0, 4}), 1).shape(), (Shape{0, 4}));
  EXPECT_EQ(logsumexp(Array::zeros({3, 0}), 1).to_doubles(), (D{-kInf, -kInf, -kInf}));
  EXPECT_EQ(logsumexp(Array::zeros({0, 3}), 1).shape(), (Shape{0}));
}

TEST(SoftmaxFamily, AxisErrorsNameTheOp) {
  const Array x = Array::zeros({2, 3});
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { softmax(x, 2); }),
            "softmax: axis 2 is out of bounds for array of dimension 2");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { log_softmax(x, -3); }),
            "log_softmax: axis -3 is out of bounds for array of dimension 2");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { logsumexp(Array::scalar(1.0), -1); }),
            "logsumexp: axis -1 is out of bounds for array of dimension 0");
}

}  // namespace softmax_test
}  // namespace
}  // namespace weft
