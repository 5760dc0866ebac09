// Printing must match numpy 1.24 exactly: str() / repr() of arrays, element formats (shortest round-trip
// float digits, common padding, exponential notation), line wrapping at 75 columns, and summarisation.
// Expected strings are numpy's output (several copied from the JAX pmap notebook).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "weft/array.hpp"

namespace weft {
namespace {
namespace array_format_test {

Array f32(const std::vector<float>& values, Shape shape = {}) { return Array::from_vector(values, std::move(shape)); }
Array f64(const std::vector<double>& values, Shape shape = {}) { return Array::from_vector(values, std::move(shape)); }
Array i32(const std::vector<std::int32_t>& values, Shape shape = {}) {
  return Array::from_vector(values, std::move(shape));
}
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- the notebook's outputs ----------------------------------------------------------------------------

TEST(Format, NotebookStr) {
  Array x = Array::arange(12).reshape({4, 3});
  EXPECT_EQ(to_string(x), "[[ 0.  1.  2.]\n [ 3.  4.  5.]\n [ 6.  7.  8.]\n [ 9. 10. 11.]]");
  EXPECT_EQ(to_string(power(x, 2)), "[[  0.   1.   4.]\n [  9.  16.  25.]\n [ 36.  49.  64.]\n [ 81. 100. 121.]]");
  EXPECT_EQ(to_string(power(x, 4)),
            "[[0.0000e+00 1.0000e+00 1.6000e+01]\n [8.1000e+01 2.5600e+02 6.2500e+02]\n"
            " [1.2960e+03 2.4010e+03 4.0960e+03]\n [6.5610e+03 1.0000e+04 1.4641e+04]]");
}

TEST(Format, NotebookRepr) {
  EXPECT_EQ(repr(f32({0, 0.2f, 0.2857143f, 1, 0.8f, 0.71428573f}, {2, 3}), "ShardedDeviceArray"),
            "ShardedDeviceArray([[0.        , 0.2       , 0.2857143 ],\n"
            "                    [1.        , 0.8       , 0.71428573]], dtype=float32)");
  EXPECT_EQ(repr(f32({0, 0.25f, 1, 0.75f}, {2, 2}), "ShardedDeviceArray"),
            "ShardedDeviceArray([[0.  , 0.25],\n                    [1.  , 0.75]], dtype=float32)");
  EXPECT_EQ(repr(f32({0, 1, 0.4f, 0.6f}, {2, 2}), "ShardedDeviceArray"),
            "ShardedDeviceArray([[0. , 1. ],\n                    [0.4, 0.6]], dtype=float32)");
  EXPECT_EQ(repr(f32({0, 1.0f / 6, 1.0f / 3, 0.5f}, {2, 2}), "ShardedDeviceArray"),
            "ShardedDeviceArray([[0.        , 0.16666667],\n                    [0.33333334, 0.5       ]], "
            "dtype=float32)");
  EXPECT_EQ(repr(f32({81, 256, 625}), "DeviceArray"), "DeviceArray([ 81., 256., 625.], dtype=float32)");
  EXPECT_EQ(repr(f32({0, 1, 16}, {1, 3}), "DeviceArray"), "DeviceArray([[ 0.,  1., 16.]], dtype=float32)");
  EXPECT_EQ(repr(Array::ones({3}), "array"), "array([1., 1., 1.], dtype=float32)");
  EXPECT_EQ(repr(Array::ones({3})), "array([1., 1., 1.], dtype=float32)");
  const std::string r = repr(f32({0.8f, 0.8235294f, 0.84210527f, 1.2f, 1.1764706f, 1.1578947f}, {2, 3}),
                             "ShardedDeviceArray");
  EXPECT_EQ(r,
            "ShardedDeviceArray([[0.8       , 0.8235294 , 0.84210527],\n"
            "                    [1.2       , 1.1764706 , 1.1578947 ]], dtype=float32)");
}

TEST(Format, DivisionResultsUseFloat32ShortestDigits) {
  // x / sum(x): the digits are float32's shortest round-trip strings, not float64's.
  Array x = Array::arange(3);
  Array y = x / Array::scalar(7);
  EXPECT_EQ(to_string(y), "[0.         0.14285715 0.2857143 ]");
}

// ---- floats -------------------------------------------------------------------------------------------

TEST(Format, FloatsPadToACommonWidth) {
  EXPECT_EQ(to_string(f64({0.1, -0.25})), "[ 0.1  -0.25]");
  EXPECT_EQ(to_string(f64({-1, 2.5, 100})), "[ -1.    2.5 100. ]");
  EXPECT_EQ(to_string(f64({0.1 + 0.2, 1.0 / 3.0})), "[0.3        0.33333333]");  // cut to 8 digits
  EXPECT_EQ(to_string(f64({-0.0, 1})), "[-0.  1.]");
  EXPECT_EQ(repr(f64({1, 2}), "array", false), "array([1., 2.])");
  EXPECT_EQ(repr(f64({1, 2})), "array([1., 2.], dtype=float64)");
  EXPECT_EQ(to_string(f64({123456.789, 0.5})), "[1.23456789e+05 5.00000000e-01]");
  EXPECT_EQ(to_string(f64({99999999, 1})), "[9.9999999e+07 1.0000000e+00]");
  EXPECT_EQ(to_string(f64({12345678, 99999.5})), "[12345678.     99999.5]");
}

TEST(Format, ExponentialNotation) {
  EXPECT_EQ(to_string(f64({1e-5, 1})), "[1.e-05 1.e+00]");
  EXPECT_EQ(to_string(f64({1e8, 1})), "[1.e+08 1.e+00]");
  EXPECT_EQ(to_string(f64({-1e-5, 2.5, -300})), "[-1.0e-05  2.5e+00 -3.0e+02]");
  EXPECT_EQ(to_string(f64({-1.5, 2e5, 3e-3})), "[-1.5e+00  2.0e+05  3.0e-03]");
  EXPECT_EQ(repr(f64({1e-100, 1}), "array", false), "array([1.e-100, 1.e+000])");
  EXPECT_EQ(to_string(f64({1000, 1})), "[1000.    1.]");  // a ratio of exactly 1000 stays positional
  EXPECT_EQ(to_string(f64({1001, 1})), "[1.001e+03 1.000e+00]");
}

TEST(Format, NanAndInf) {
  EXPECT_EQ(repr(f64({kNan, 1}), "array", false), "array([nan,  1.])");
  EXPECT_EQ(to_string(f64({kInf, -kInf, 0.5})), "[ inf -inf  0.5]");
  EXPECT_EQ(to_string(f64({kNan, kInf})), "[nan inf]");
  EXPECT_EQ(to_string(f64({1e-5, -3.5, 1e10, kNan, -kInf})), "[ 1.0e-05 -3.5e+00  1.0e+10      nan     -inf]");
}

TEST(Format, SixteenBitFloats) {
  EXPECT_EQ(repr(Array::from_doubles({0.5, 1.0 / 3.0}, {2}, DType::f16)), "array([0.5   , 0.3333], dtype=float16)");
  EXPECT_EQ(to_string(Array::from_doubles({0.1, 2}, {2}, DType::f16)), "[0.1 2. ]");
  EXPECT_EQ(to_string(Array::from_doubles({1.0 / 3.0, 100}, {2}, DType::bf16)), "[  0.334 100.   ]");
  EXPECT_EQ(repr(Array::ones({2}, DType::bf16)), "array([1., 1.], dtype=bfloat16)");
}

// ---- integers, bools, shapes ----------------------------------------------------------------------------

TEST(Format, IntegersAlignRight) {
  EXPECT_EQ(repr(i32({1, -20, 300})), "array([  1, -20, 300], dtype=int32)");
  EXPECT_EQ(to_string(i32({1, -20, 300})), "[  1 -20 300]");
  EXPECT_EQ(repr(Array::arange(3, DType::i64), "array", false), "array([0, 1, 2])");
  EXPECT_EQ(repr(Array::arange(3, DType::u8)), "array([0, 1, 2], dtype=uint8)");
  EXPECT_EQ(to_string(Array::from_list<std::int64_t>({-9223372036854775807LL - 1, 1})),
            "[-9223372036854775808                    1]");
}

TEST(Format, Bools) {
  Array b = Array::from_list<bool>({true, false, true});
  EXPECT_EQ(to_string(b), "[ True False  True]");
  EXPECT_EQ(repr(b, "array", false), "array([ True, False,  True])");
  EXPECT_EQ(repr(b), "array([ True, False,  True], dtype=bool)");
}

TEST(Format, ThreeDimensionsSeparateBlocksWithABlankLine) {
  EXPECT_EQ(to_string(Array::arange(24, DType::i64).reshape({2, 3, 4})),
            "[[[ 0  1  2  3]\n  [ 4  5  6  7]\n  [ 8  9 10 11]]\n\n [[12 13 14 15]\n  [16 17 18 19]\n  [20 21 22 23]]]");
  EXPECT_EQ(repr(Array::arange(24, DType::f64).reshape({2, 3, 4}) - 5.0, "array", false),
            "array([[[-5., -4., -3., -2.],\n        [-1.,  0.,  1.,  2.],\n        [ 3.,  4.,  5.,  6.]],\n\n"
            "       [[ 7.,  8.,  9., 10.],\n        [11., 12., 13., 14.],\n        [15., 16., 17., 18.]]])");
}

TEST(Format, ZeroDimensionalAndEmpty) {
  EXPECT_EQ(to_string(Array::scalar(1.5)), "1.5");
  EXPECT_EQ(to_string(Array::scalar(2)), "2.0");
  EXPECT_EQ(to_string(Array::scalar(0.1)), "0.1");
  EXPECT_EQ(to_string(Array::scalar(1e20)), "1e+20");
  EXPECT_EQ(to_string(Array::scalar(1.5e-5)), "1.5e-05");
  EXPECT_EQ(to_string(Array::scalar(7, DType::i32)), "7");
  EXPECT_EQ(to_string(Array::scalar(1, DType::boolean)), "True");
  EXPECT_EQ(repr(Array::scalar(1.5)), "array(1.5, dtype=float32)");
  EXPECT_EQ(repr(Array::scalar(2)), "array(2., dtype=float32)");
  EXPECT_EQ(repr(Array::scalar(3, DType::i64), "array", false), "array(3)");
  EXPECT_EQ(repr(Array::scalar(1, DType::boolean), "array", false), "array(True)");
  EXPECT_EQ(to_string(Array::zeros({0})), "[]");
  EXPECT_EQ(repr(Array::zeros({0})), "array([], dtype=float32)");
  EXPECT_EQ(repr(Array::zeros({0}, DType::f64), "array", false), "array([], dtype=float64)");
  EXPECT_EQ(repr(Array::zeros({0, 3})), "array([], shape=(0, 3), dtype=float32)");
  EXPECT_EQ(to_string(Array::zeros({0, 3})), "[]");
}

// ---- wrapping and summarisation -------------------------------------------------------------------------

TEST(Format, LongRowsWrapAt75Columns) {
  EXPECT_EQ(repr(Array::arange(30)),
            "array([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12.,\n"
            "       13., 14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25.,\n"
            "       26., 27., 28., 29.], dtype=float32)");
  EXPECT_EQ(to_string(Array::arange(30, DType::i64)),
            "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n 24 25 26 27 28 29]");
  // The dtype moves to its own line when it would not fit after the last row.
  EXPECT_EQ(repr(Array::arange(17, DType::i32)),
            "array([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16],\n      dtype=int32)");
  EXPECT_EQ(repr(Array::arange(16, DType::i32)),
            "array([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15],\n      dtype=int32)");
  EXPECT_EQ(repr(Array::arange(12, DType::i32)),
            "array([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11], dtype=int32)");
}

TEST(Format, NestedRowsWrapWithAHangingIndent) {
  Array x = (Array::arange(20, DType::i64) * 1000.0).reshape({2, 10});
  EXPECT_EQ(to_string(x),
            "[[    0  1000  2000  3000  4000  5000  6000  7000  8000  9000]\n"
            " [10000 11000 12000 13000 14000 15000 16000 17000 18000 19000]]");
  Array y = Array::arange(26, DType::i64).reshape({1, 26}) * 1000.0;
  EXPECT_EQ(to_string(y),
            "[[    0  1000  2000  3000  4000  5000  6000  7000  8000  9000 10000 11000\n"
            "  12000 13000 14000 15000 16000 17000 18000 19000 20000 21000 22000 23000\n"
            "  24000 25000]]");
}

TEST(Format, SummarisesLargeArrays) {
  EXPECT_EQ(repr(Array::arange(10000, DType::i64), "array", false), "array([   0,    1,    2, ..., 9997, 9998, 9999])");
  EXPECT_EQ(to_string(Array::arange(2000, DType::i64).reshape({2, 1000})),
            "[[   0    1    2 ...  997  998  999]\n [1000 1001 1002 ... 1997 1998 1999]]");
  EXPECT_EQ(to_string(Array::arange(2000, DType::f64)),
            "[0.000e+00 1.000e+00 2.000e+00 ... 1.997e+03 1.998e+03 1.999e+03]");
  EXPECT_EQ(to_string(Array::arange(1001, DType::i64).reshape({1001, 1})),
            "[[   0]\n [   1]\n [   2]\n ...\n [ 998]\n [ 999]\n [1000]]");
  // 1000 elements is not over the threshold: printed in full.
  EXPECT_EQ(to_string(Array::arange(1000, DType::i64)).find("..."), std::string::npos);
}

TEST(Format, StreamOperatorPrintsStr) {
  std::ostringstream os;
  os << Array::arange(3);
  EXPECT_EQ(os.str(), "[0. 1. 2.]");
}

}  // namespace array_format_test
}  // namespace
}  // namespace weft
