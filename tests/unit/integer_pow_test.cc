// detail::integer_pow (src/array/integer_pow.hpp), the program layer's integer_pow kernel: against std::pow in
// float64, against repeated multiplication with wrap-around for int32 (JAX's integer_pow on integers), and
// x ** 2 bit for bit x * x in float32 (square and multiply, as JAX).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "array/integer_pow.hpp"
#include "weft/array.hpp"

namespace weft {
namespace {
namespace integer_pow_test {

TEST(IntegerPow, Float64AgreesWithStdPow) {
  const std::vector<double> xs = {-3.5, -1.0, -0.5, 0.0, 0.25, 1.0, 1.5, 2.0, 7.0};
  for (std::int64_t y : {0, 1, 2, 3, 4, 5, 7, 8, 13, -1, -2, -3, -6}) {
    const std::vector<double> got =
        detail::integer_pow(Array::from_vector(xs), y).to_doubles();
    ASSERT_EQ(got.size(), xs.size());
    for (std::size_t k = 0; k < xs.size(); ++k) {
      const double want = std::pow(xs[k], static_cast<double>(y));
      if (std::isinf(want)) {
        EXPECT_EQ(got[k], want) << xs[k] << " ** " << y;
      } else {
        EXPECT_NEAR(got[k], want, 1e-14 * std::abs(want)) << xs[k] << " ** " << y;
      }
    }
  }
}

TEST(IntegerPow, Int32WrapsAsRepeatedMultiplication) {
  const std::vector<std::int32_t> xs = {-7, -2, -1, 0, 1, 3, 10, 46341};
  for (std::int64_t y : {0, 1, 2, 3, 5, 9, 31}) {
    const Array got = detail::integer_pow(Array::from_vector(xs), y);
    EXPECT_EQ(got.dtype(), DType::i32);
    const std::vector<double> values = got.to_doubles();
    for (std::size_t k = 0; k < xs.size(); ++k) {
      std::uint32_t want = 1;  // unsigned: the wrap-around is defined
      for (std::int64_t i = 0; i < y; ++i) want *= static_cast<std::uint32_t>(xs[k]);
      EXPECT_EQ(static_cast<std::int32_t>(values[k]), static_cast<std::int32_t>(want)) << xs[k] << " ** " << y;
    }
  }
}

TEST(IntegerPow, SquareIsTheProductBitForBit) {
  const Array x = Array::from_vector(std::vector<float>{1.1f, -3.3f, 1e-20f, 3e19f, 0.7f});
  const Array square = detail::integer_pow(x, 2);
  const Array product = x * x;
  EXPECT_EQ(square.dtype(), DType::f32);
  for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(square.data<float>()[k], product.data<float>()[k]);
}

// The most negative exponent: |y| does not overflow (1 ** y is 1, 2 ** y underflows to 0).
TEST(IntegerPow, MostNegativeExponent) {
  const std::vector<double> got =
      detail::integer_pow(Array::from_vector(std::vector<double>{1.0, 2.0, -1.0}), std::numeric_limits<std::int64_t>::min())
          .to_doubles();
  EXPECT_EQ(got, (std::vector<double>{1.0, 0.0, 1.0}));
}

}  // namespace integer_pow_test
}  // namespace
}  // namespace weft
