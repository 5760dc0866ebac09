// Shape arithmetic at the limits (issue 8, item 2): element counts and byte sizes that do not fit in 64 bits
// are an InvalidArgument naming the shape (numpy: "array is too big"), never a silent wrap-around (a shape
// whose product wraps to 0 used to give an empty array that indexed out of bounds); an allocation the system
// refuses is an OutOfMemoryError, never std::bad_alloc or an abort. As numpy does, a zero dimension does not
// excuse the other dimensions from overflowing.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../support/replica_faults.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace shape_limits_test {

using namespace weft::testing;

constexpr std::int64_t k2to40 = std::int64_t{1} << 40;
constexpr std::int64_t k2to32 = std::int64_t{1} << 32;

struct TooBig {
  const char* what;
  std::function<void()> make;
  std::string shape;  // as the message must print it
};

TEST(ShapeLimits, ElementCountsThatOverflowAreRejectedNamingTheShape) {
  const std::vector<TooBig> cases = {
      {"zeros 2^40 x 2^40", [] { Array::zeros({k2to40, k2to40}); }, "(1099511627776, 1099511627776)"},
      // 2^32 * 2^32 * 3 wraps to 0 in 64-bit arithmetic.
      {"empty, product wraps to 0", [] { Array::empty({k2to32, k2to32, 3}, DType::i8); }, "(4294967296, 4294967296, 3)"},
      {"ones with a zero dimension", [] { Array::ones({k2to40, 0, k2to40}); }, "(1099511627776, 0, 1099511627776)"},
      {"full", [] { Array::full({3, k2to40, k2to40}, 1.0, DType::f64); }, "(3, 1099511627776, 1099511627776)"},
      {"num_elements", [] { num_elements({k2to40, k2to40}); }, "(1099511627776, 1099511627776)"},
      {"reshape of an empty array", [] { Array::zeros({0}).reshape({k2to40, 0, k2to40}); }, "(1099511627776, 0, 1099511627776)"},
      {"reshape with -1", [] { Array::zeros({0}).reshape({k2to40, -1, k2to40}); }, "(1099511627776, -1, 1099511627776)"},
  };
  for (const TooBig& c : cases) {
    SCOPED_TRACE(c.what);
    const Outcome o = Timed(c.make);
    ASSERT_TRUE(o.threw) << "accepted shape " << c.shape;
    EXPECT_EQ(o.type, "InvalidArgument") << o.message;
    ExpectContains(o.message, {"array is too big", c.shape});
  }
}

TEST(ShapeLimits, ByteSizesThatOverflowAreRejectedNamingTheShapeAndDtype) {
  // 2^61 elements fit in int64, but not 8 bytes each (2^64) nor 4 bytes each (2^63 > the largest object).
  const Outcome f64 = Timed([] { Array::empty({std::int64_t{1} << 61}, DType::f64); });
  ASSERT_TRUE(f64.threw);
  EXPECT_EQ(f64.type, "InvalidArgument") << f64.message;
  ExpectContains(f64.message, {"array is too big", "(2305843009213693952,)", "float64", "bytes"});
  const Outcome f32 = Timed([] { Array::zeros({std::int64_t{1} << 31, std::int64_t{1} << 30}); });
  ASSERT_TRUE(f32.threw);
  EXPECT_EQ(f32.type, "InvalidArgument") << f32.message;
  ExpectContains(f32.message, {"array is too big", "(2147483648, 1073741824)", "float32"});
}

TEST(ShapeLimits, AnAllocationTheSystemRefusesIsAnOutOfMemoryError) {
  if (WEFT_TEST_UNDER_SANITIZER) GTEST_SKIP() << "a sanitizer's allocator aborts on impossible sizes";
  // 2^62 bytes (4 EiB) fit the arithmetic but no address space.
  const Outcome o = Timed([] { Array::zeros({std::int64_t{1} << 60}, DType::f32); });
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.type, "OutOfMemoryError") << o.message;
  ExpectContains(o.message, {"cannot allocate 4611686018427387904 bytes"});
}

TEST(ShapeLimits, LargestShapesThatFitStillWork) {
  // Zero-size arrays with huge (non-overflowing) dimensions are fine, as in numpy.
  const Array empty = Array::zeros({k2to40, 0, 1 << 20});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(empty.nbytes(), 0u);
  EXPECT_EQ(num_elements({k2to32, k2to32 / 2 - 1}), k2to32 * (k2to32 / 2 - 1));
  EXPECT_EQ(num_elements({}), 1);
  EXPECT_EQ(Array::zeros({0}).reshape({k2to40, 0}).shape(), (Shape{k2to40, 0}));
}

}  // namespace shape_limits_test
}  // namespace
}  // namespace weft
