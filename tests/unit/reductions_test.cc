// Reductions over several axes with keepdims (sum, mean, max, min as methods and free functions) and
// argmax / argmin, against a naive reference written here that visits every element by its multi-index;
// plus numpy's exact float32 summation order, pinned by known-answer bit patterns that numpy 1.24.2 computed
// (sums that a plain sequential loop, or pairwise summation without numpy's 8192-element blocks, gets wrong).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "../support/arrays.hpp"
#include "../support/errors.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {
namespace reductions_test {

using testing::ErrorOf;
using testing::Ravel;
using testing::SampleIntegers;
using testing::Unravel;
using testing::WrapTo;

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                       DType::i32, DType::i64, DType::u8,  DType::boolean};

enum class Op { sum, mean, max, min };
const char* op_name(Op op) { return op == Op::sum ? "sum" : op == Op::mean ? "mean" : op == Op::max ? "max" : "min"; }

Array call(Op op, const Array& x, const ReduceAxes& axes, bool keepdims) {
  switch (op) {
    case Op::sum: return sum(x, axes, keepdims);
    case Op::mean: return mean(x, axes, keepdims);
    case Op::max: return max(x, axes, keepdims);
    case Op::min: return min(x, axes, keepdims);
  }
  return {};
}

// JAX's dtype rules (x64 off; jax.numpy.sum's accumulation dtype): sum of bool, int8 and uint8 in int32 (JAX's
// uint32 for uint8, which weft lacks), mean of integers and bool is float32.
DType result_dtype(Op op, DType in) {
  if (op == Op::sum && (in == DType::boolean || in == DType::i8 || in == DType::u8)) return DType::i32;
  if (op == Op::mean && !is_floating(in)) return DType::f32;
  return in;
}

// The reduction by definition: every input element goes to the output element that has its kept indices.
// The inputs are small integers, so every sum is exact in every accumulation order; means divide the exact
// sum once in the compute type (float32 for 16-bit floats, then rounded once to the dtype; float64 for
// integers, then rounded to float32).
Array naive_reduce(Op op, const Array& x, const std::set<int>& axes, bool keepdims) {
  const Shape& shape = x.shape();
  Shape out_shape;
  for (int i = 0; i < x.ndim(); ++i) {
    if (!axes.count(i)) {
      out_shape.push_back(shape[i]);
    } else if (keepdims) {
      out_shape.push_back(1);
    }
  }
  const std::int64_t n_out = num_elements(out_shape);
  std::vector<std::int64_t> total(n_out, 0);
  std::vector<double> best(n_out, op == Op::max ? -INFINITY : INFINITY);
  std::vector<bool> nan(n_out, false);
  std::int64_t count = 1;
  for (int a : axes) count *= shape[a];
  const std::vector<double> v = x.to_doubles();
  for (std::int64_t f = 0; f < x.size(); ++f) {
    const std::vector<std::int64_t> idx = Unravel(f, shape);
    std::vector<std::int64_t> oidx;
    for (int i = 0; i < x.ndim(); ++i) {
      if (!axes.count(i)) {
        oidx.push_back(idx[i]);
      } else if (keepdims) {
        oidx.push_back(0);
      }
    }
    const std::int64_t o = Ravel(oidx, out_shape);
    total[o] += static_cast<std::int64_t>(v[f]);
    if (std::isnan(v[f])) nan[o] = true;
    best[o] = op == Op::max ? std::max(best[o], v[f]) : std::min(best[o], v[f]);
  }
  const DType dtype = result_dtype(op, x.dtype());
  std::vector<double> out(n_out);
  for (std::int64_t o = 0; o < n_out; ++o) {
    switch (op) {
      case Op::sum: out[o] = WrapTo(total[o], dtype); break;
      case Op::max:
      case Op::min: out[o] = nan[o] ? NAN : best[o]; break;
      case Op::mean:
        if (x.dtype() == DType::f64 || !is_floating(x.dtype())) {
          out[o] = static_cast<double>(total[o]) / static_cast<double>(count);
        } else {
          out[o] = static_cast<float>(total[o]) / static_cast<float>(count);
        }
        break;
    }
  }
  return Array::from_doubles(out, out_shape, dtype);
}

struct AxesCase {
  Shape shape;
  ReduceAxes axes;
  std::set<int> normalized;  // the axes reduced, written out by hand
};

const std::vector<AxesCase> kAxesCases = {
    {{2, 3, 4}, {}, {0, 1, 2}},
    {{2, 3, 4}, {0}, {0}},
    {{2, 3, 4}, {1}, {1}},
    {{2, 3, 4}, {2}, {2}},
    {{2, 3, 4}, {-1}, {2}},
    {{2, 3, 4}, {0, 1}, {0, 1}},
    {{2, 3, 4}, {0, 2}, {0, 2}},
    {{2, 3, 4}, {1, 2}, {1, 2}},
    {{2, 3, 4}, {2, 0}, {0, 2}},
    {{2, 3, 4}, {-1, -3}, {0, 2}},
    {{2, 3, 4}, {0, 1, 2}, {0, 1, 2}},
    {{2, 3, 4}, std::vector<int>{}, {}},  // no axis: the identity (with the dtype rule)
    {{1, 4, 1, 3}, {0, 2}, {0, 2}},      // size-1 axes
    {{1, 4, 1, 3}, {1, 3}, {1, 3}},
    {{1, 4, 1, 3}, {1}, {1}},
    {{4, 1, 3}, {0, 2}, {0, 2}},  // reduced axes that become neighbours once the size-1 axis is gone
    {{3, 2, 5, 2}, {1, 3}, {1, 3}},
    {{3, 2, 5, 2}, {0, 2}, {0, 2}},
    {{256, 10}, {-1}, {1}},  // the loss: over the classes
    {{64, 512}, {0}, {0}},   // the bias gradient
    {{5}, {0}, {0}},
    {{}, {}, {}},
    {{}, std::vector<int>{}, {}},
};

TEST(Reductions, EveryAxesKeepdimsDTypeAndOp) {
  std::uint32_t seed = 1;
  for (const AxesCase& c : kAxesCases) {
    for (DType dtype : kAllDTypes) {
      const Array x = SampleIntegers(c.shape, dtype, seed++);
      for (Op op : {Op::sum, Op::mean, Op::max, Op::min}) {
        for (bool keepdims : {false, true}) {
          SCOPED_TRACE(std::string(op_name(op)) + " " + shape_str(c.shape) + " " + std::string(dtype_name(dtype)) +
                       (keepdims ? " keepdims" : ""));
          const Array expected = naive_reduce(op, x, c.normalized, keepdims);
          const Array got = call(op, x, c.axes, keepdims);
          EXPECT_EQ(got.dtype(), expected.dtype());
          EXPECT_EQ(got.shape(), expected.shape());
          if (got.shape() == expected.shape()) {
            EXPECT_EQ(got.to_doubles(), expected.to_doubles());
          }
        }
      }
    }
  }
}

TEST(Reductions, MethodsAreTheFreeFunctions) {
  const Array x = SampleIntegers({3, 4, 5}, DType::f32, 7);
  EXPECT_TRUE(x.sum({0, 2}, true).identical(sum(x, {0, 2}, true)));
  EXPECT_TRUE(x.mean({1}).identical(mean(x, 1)));
  EXPECT_TRUE(x.max().identical(max(x)));
  EXPECT_TRUE(x.min(std::optional<int>(2)).identical(min(x, 2)));
  EXPECT_TRUE(x.sum(std::nullopt).identical(sum(x)));
}

TEST(Reductions, KeepdimsBroadcastsBack) {
  // The softmax idiom: x - max(x, -1, keepdims) has x's shape and a zero at each row's maximum.
  const Array x = Array::from_list<float>({1, 5, 2, 7, 3, 0}).reshape({2, 3});
  const Array m = max(x, -1, true);
  EXPECT_EQ(m.shape(), (Shape{2, 1}));
  EXPECT_EQ((x - m).to_doubles(), (std::vector<double>{-4, 0, -3, 0, -4, -7}));
  EXPECT_EQ(sum(x, {0, 1}, true).shape(), (Shape{1, 1}));
}

TEST(Reductions, NanPropagatesThroughMaxMinSumAlongEveryPath) {
  // NaN in a reduced trailing run (row path) and in a kept trailing axis (column path), in every float dtype.
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Array x = Array::from_doubles({1, NAN, 3, 4, 5, 6}, {2, 3}, dtype);
    for (Op op : {Op::sum, Op::mean, Op::max, Op::min}) {
      SCOPED_TRACE(std::string(op_name(op)) + " " + std::string(dtype_name(dtype)));
      const std::vector<double> rows = call(op, x, 1, false).to_doubles();
      EXPECT_TRUE(std::isnan(rows[0]));
      EXPECT_FALSE(std::isnan(rows[1]));
      const std::vector<double> cols = call(op, x, 0, false).to_doubles();
      EXPECT_FALSE(std::isnan(cols[0]));
      EXPECT_TRUE(std::isnan(cols[1]));
      EXPECT_FALSE(std::isnan(cols[2]));
    }
  }
  // A NaN after larger values, and -inf / +inf as ordinary extremes.
  const Array y = Array::from_list<float>({INFINITY, NAN, -INFINITY});
  EXPECT_TRUE(std::isnan(max(y).item<double>()));
  EXPECT_TRUE(std::isnan(min(y).item<double>()));
  EXPECT_EQ(max(Array::from_list<float>({-INFINITY, -INFINITY})).item<double>(), -INFINITY);
}

TEST(Reductions, SmallIntegersSumInInt32AndWideOnesWrapAndMeansRoundOnce) {
  // JAX: jnp.sum(jnp.full(100, 100, jnp.int8)) is int32 10000 (issue 45, item 4: it was int8 16), the same
  // along an axis, with keepdims and in a traced program (the rule's dtype).
  struct Small { DType dtype; double value; std::int64_t count; double total; };
  for (const Small& c : {Small{DType::i8, 100, 100, 10000}, Small{DType::i8, -128, 300, -38400},
                         Small{DType::u8, 200, 100, 20000}, Small{DType::u8, 255, 70000, 17850000},
                         Small{DType::boolean, 1, 1000, 1000}}) {
    const Array x = Array::full({c.count}, c.value, c.dtype);
    const Array total = sum(x);
    EXPECT_EQ(total.dtype(), DType::i32) << dtype_name(c.dtype);
    EXPECT_EQ(total.item<double>(), c.total) << dtype_name(c.dtype);
    const Array rows = sum(x.reshape({c.count / 10, 10}), 0, true);
    EXPECT_EQ(rows.dtype(), DType::i32) << dtype_name(c.dtype);
    EXPECT_EQ(rows.shape(), (Shape{1, 10}));
    EXPECT_EQ(rows.to_doubles(), std::vector<double>(10, c.total / 10)) << dtype_name(c.dtype);
  }
  // int32 keeps its dtype and wraps, as JAX's with 64-bit types off; int64 likewise.
  EXPECT_EQ(sum(Array::from_list<std::int32_t>({std::numeric_limits<std::int32_t>::max(), 1})).to_vector<std::int32_t>()[0],
            std::numeric_limits<std::int32_t>::min());
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(sum(Array::from_list<std::int64_t>({big, 1})).to_vector<std::int64_t>()[0],
            std::numeric_limits<std::int64_t>::min());
  // The mean of integers is taken in float64 and rounded once to float32: (2 (2^24 + 1) + 2) / 3 = 11184812
  // exactly, where converting the elements to float32 first would give 11184811.
  const Array m = mean(Array::from_list<std::int32_t>({16777217, 16777217, 2}));
  EXPECT_EQ(m.dtype(), DType::f32);
  EXPECT_EQ(m.item<double>(), 11184812.0);
}

TEST(Reductions, EmptyInputs) {
  EXPECT_EQ(sum(Array::zeros({3, 0, 2}), 1).to_doubles(), std::vector<double>(6, 0.0));
  const std::vector<double> means = mean(Array::zeros({2, 0}), 1).to_doubles();
  ASSERT_EQ(means.size(), 2u);
  EXPECT_TRUE(std::isnan(means[0]));
  EXPECT_EQ(sum(Array::zeros({0}, DType::boolean)).dtype(), DType::i32);
  EXPECT_EQ(max(Array::zeros({0, 3}), 1, true).shape(), (Shape{0, 1}));  // nothing to reduce into
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { max(Array::zeros({2, 0}), {0, 1}); }),
            "max: zero-size array to reduction operation maximum which has no identity");
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { min(Array::zeros({2, 0}), 1); }),
            "min: zero-size array to reduction operation minimum which has no identity");
}

TEST(Reductions, AxisErrors) {
  const Array x = Array::zeros({2, 3});
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { sum(x, {0, 2}); }), "sum: axis 2 is out of bounds for array of dimension 2");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { x.mean(-3); }), "mean: axis -3 is out of bounds for array of dimension 2");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { max(x, {0, 0}); }),
            "max: duplicate value in 'axis': 0 and 0 both name axis 0 of an array of dimension 2");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { x.min({1, -1}); }),
            "min: duplicate value in 'axis': 1 and -1 both name axis 1 of an array of dimension 2");
}

// ---- numpy's summation order, bit for bit ------------------------------------------------------------------

// Inputs both numpy and this test compute exactly in float32: uint32 LCG draws scaled by powers of two, so
// sums depend on the order of additions. The generator in numpy:
//   x = (x * 1664525 + 1013904223) & 0xffffffff
//   v = (np.float32(x >> 8) * np.float32(2**-24) - np.float32(0.5)) * np.float32(2 ** ((i % 7) * 3))
Array numpy_sample(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(num_elements(shape)));
  std::uint32_t x = 12345;
  for (std::size_t i = 0; i < v.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = (static_cast<float>(x >> 8) * 0x1p-24f - 0.5f) * std::ldexp(1.0f, static_cast<int>(i % 7) * 3);
  }
  return Array::from_vector(v, shape);
}

TEST(Reductions, Float32SumsMatchNumpyBitForBit) {
  struct Case {
    Shape shape;
    std::vector<int> axes;
    Op op;
    std::vector<std::uint32_t> numpy_bits;  // np.sum / np.mean (numpy 1.24.2), as float32 bit patterns
  };
  const std::vector<Case> cases = {
      // 20000 contiguous elements: pairwise in 8192-element blocks (unblocked pairwise gives 0x4a0afae7).
      {{20000}, {0}, Op::sum, {0x4a0afae3}},
      // Rows of 9000 (unblocked: 0x48a9b976, 0x497af276, 0x4982ae6e).
      {{3, 9000}, {1}, Op::sum, {0x48a9b97a, 0x497af274, 0x4982ae6f}},
      // Axes 0 and 2 of (5, 1, 300) are one contiguous run of 1500 once the size-1 axis is dropped.
      {{5, 1, 300}, {0, 2}, Op::sum, {0xc7f24ba4}},
      // Rows of 6 summed pairwise, the 4 rows of each output element added in order.
      {{4, 5, 6}, {0, 2}, Op::sum, {0x47d17b7b, 0x468c4492, 0xc74b2c64, 0x48a41834, 0xc810a96e}},
      // Along axis 0: row after row, no pairwise summation.
      {{300, 7}, {0}, Op::sum, {0x40e6db42, 0xc24a6ebe, 0x41eadc52, 0x449bc210, 0x453a029a, 0xc7a00a9d, 0xc9289d89}},
      {{3, 40, 50}, {1, 2}, Op::mean, {0xc364e24d, 0xc3993fdb, 0xc363273b}},
      {{2, 3, 4, 5}, {1, 3}, Op::sum,
       {0x481a8998, 0xc7c283f9, 0xc7a53ba3, 0xc7763136, 0x4876b805, 0xc7a6c706, 0x47f949d4, 0x4757ad0c}},
  };
  for (const Case& c : cases) {
    const Array got = call(c.op, numpy_sample(c.shape), c.axes, false);
    std::vector<std::uint32_t> bits;
    for (float f : got.to_vector<float>()) bits.push_back(std::bit_cast<std::uint32_t>(f));
    EXPECT_EQ(bits, c.numpy_bits) << op_name(c.op) << " " << shape_str(c.shape);
  }
}

// ---- argmax / argmin -------------------------------------------------------------------------------------------

// The first index of the extreme along the axis, NaN counting as the extreme (its first occurrence).
Array naive_arg(bool is_max, const Array& x, std::optional<int> axis, bool keepdims) {
  const Array flat = axis ? x : x.reshape({x.size()});
  const int ax = axis ? (*axis < 0 ? *axis + x.ndim() : *axis) : 0;
  const Shape& shape = flat.shape();
  Shape reduced = shape;
  reduced[ax] = 1;
  const std::vector<double> v = flat.to_doubles();
  std::vector<double> out(static_cast<std::size_t>(num_elements(reduced)));
  for (std::int64_t o = 0; o < num_elements(reduced); ++o) {
    std::vector<std::int64_t> idx = Unravel(o, reduced);
    std::int64_t best_k = -1;
    for (std::int64_t k = 0; k < shape[ax] && best_k < 0; ++k) {  // the first NaN wins outright
      idx[ax] = k;
      if (std::isnan(v[Ravel(idx, shape)])) best_k = k;
    }
    if (best_k < 0) {
      best_k = 0;
      for (std::int64_t k = 1; k < shape[ax]; ++k) {
        idx[ax] = k;
        const double cand = v[Ravel(idx, shape)];
        idx[ax] = best_k;
        const double cur = v[Ravel(idx, shape)];
        if (is_max ? cand > cur : cand < cur) best_k = k;
      }
    }
    out[o] = static_cast<double>(best_k);
  }
  Shape out_shape;
  if (axis) {
    out_shape = keepdims ? reduced : Shape();
    if (!keepdims) {
      for (int i = 0; i < x.ndim(); ++i) {
        if (i != ax) out_shape.push_back(x.shape()[i]);
      }
    }
  } else if (keepdims) {
    out_shape.assign(x.ndim(), 1);
  }
  return Array::from_doubles(out, out_shape, DType::i32);
}

TEST(ArgMaxMin, EveryAxisDTypeAndKeepdims) {
  struct Case {
    Shape shape;
    std::optional<int> axis;
  };
  const std::vector<Case> cases = {{{5}, 0},       {{5}, std::nullopt}, {{3, 4}, 1},          {{3, 4}, 0},
                                   {{3, 4}, -1},   {{3, 4}, std::nullopt}, {{5, 4, 1}, 2},     {{4, 5, 3}, 1},
                                   {{256, 10}, -1}, {{2, 3, 4}, 0},     {{}, std::nullopt}};
  std::uint32_t seed = 50;
  for (const Case& c : cases) {
    for (DType dtype : kAllDTypes) {
      // Few distinct values, so ties are everywhere and "first occurrence" is exercised.
      const Array x = SampleIntegers(c.shape, dtype, seed++, -2, 2);
      for (bool is_max : {true, false}) {
        for (bool keepdims : {false, true}) {
          SCOPED_TRACE(std::string(is_max ? "argmax " : "argmin ") + shape_str(c.shape) + " axis " +
                       (c.axis ? std::to_string(*c.axis) : "none") + " " + std::string(dtype_name(dtype)) +
                       (keepdims ? " keepdims" : ""));
          const Array got = is_max ? argmax(x, c.axis, keepdims) : argmin(x, c.axis, keepdims);
          const Array expected = naive_arg(is_max, x, c.axis, keepdims);
          EXPECT_EQ(got.dtype(), DType::i32);
          EXPECT_EQ(got.shape(), expected.shape());
          EXPECT_EQ(got.to_doubles(), expected.to_doubles());
        }
      }
    }
  }
}

TEST(ArgMaxMin, NanAndTiesFollowNumpy) {
  // np.argmax([1, nan, 5, nan]) == 1 == np.argmin(...); ties give the first index.
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Array x = Array::from_doubles({1, NAN, 5, NAN}, {4}, dtype);
    EXPECT_EQ(argmax(x).item<int>(), 1) << dtype_name(dtype);
    EXPECT_EQ(argmin(x).item<int>(), 1) << dtype_name(dtype);
    const Array ties = Array::from_doubles({2, 7, 7, -1, -1}, {5}, dtype);
    EXPECT_EQ(argmax(ties).item<int>(), 1);
    EXPECT_EQ(argmin(ties).item<int>(), 3);
  }
  // -inf and inf are ordinary values; a NaN in one column does not affect the others.
  const Array y = Array::from_list<float>({-INFINITY, 0, 3, NAN, INFINITY, 1}).reshape({2, 3});
  EXPECT_EQ(argmax(y, 0).to_doubles(), (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(argmin(y, 0).to_doubles(), (std::vector<double>{1, 0, 1}));  // the NaN wins for argmin too
  EXPECT_EQ(argmax(y).item<int>(), 3);  // flattened
}

TEST(ArgMaxMin, Errors) {
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { argmax(Array::zeros({0})); }),
            "argmax: attempt to get argmax of an empty sequence (shape (0,))");
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { argmin(Array::zeros({3, 0}), 1); }),
            "argmin: attempt to get argmin of an empty sequence (shape (3, 0), axis 1)");
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { argmax(Array::zeros({3, 2}), 2); }),
            "argmax: axis 2 is out of bounds for array of dimension 2");
}

}  // namespace reductions_test
}  // namespace
}  // namespace weft
