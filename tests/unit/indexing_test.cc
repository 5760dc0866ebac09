// one_hot and take (weft/ops.hpp) against naive references written here (numpy.take's index formula, one_hot's
// definition label == class), for every label / index / element dtype, negative indices, the flattened case,
// out-of-range labels (zero rows, as JAX) and out-of-range indices (errors naming index, axis and size).
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../support/arrays.hpp"
#include "../support/errors.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {
namespace indexing_test {

using testing::ErrorOf;
using testing::Ravel;
using testing::SampleIntegers;
using testing::Unravel;

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                       DType::i32, DType::i64, DType::u8,  DType::boolean};
const std::vector<DType> kIntegerDTypes = {DType::i8, DType::i32, DType::i64, DType::u8};

// ---- one_hot -------------------------------------------------------------------------------------------------

TEST(OneHot, EveryLabelDTypeAndOutputDType) {
  for (DType label_dtype : kIntegerDTypes) {
    // Labels below 0 and at or above num_classes give zero rows; uint8 cannot hold -1.
    const std::vector<double> values =
        label_dtype == DType::u8 ? std::vector<double>{0, 3, 1, 4, 2, 9} : std::vector<double>{0, 3, -1, 4, 2, -5};
    const Array labels = Array::from_doubles(values, {2, 3}, label_dtype);
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(std::string(dtype_name(label_dtype)) + " -> " + std::string(dtype_name(dtype)));
      const Array got = one_hot(labels, 4, dtype);
      EXPECT_EQ(got.dtype(), dtype);
      EXPECT_EQ(got.shape(), (Shape{2, 3, 4}));
      std::vector<double> expected;
      for (double label : values) {
        for (int c = 0; c < 4; ++c) expected.push_back(label == c ? 1 : 0);
      }
      EXPECT_EQ(got.to_doubles(), expected);
    }
  }
}

TEST(OneHot, DefaultsAndEdgeShapes) {
  const Array got = one_hot(Array::from_list<std::int32_t>({2, 0}), 3);
  EXPECT_EQ(got.dtype(), DType::f32);
  EXPECT_EQ(got.to_doubles(), (std::vector<double>{0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(one_hot(Array::scalar(1, DType::i32), 2).to_doubles(), (std::vector<double>{0, 1}));  // () -> (2,)
  EXPECT_EQ(one_hot(Array::zeros({0}, DType::i64), 5).shape(), (Shape{0, 5}));
  EXPECT_EQ(one_hot(Array::zeros({3}, DType::i32), 0).shape(), (Shape{3, 0}));
}

TEST(OneHot, Errors) {
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { one_hot(Array::zeros({2}), 3); }),
            "one_hot: labels must have an integer dtype (int8, uint8, int32, int64), got float32");
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { one_hot(Array::zeros({2}, DType::boolean), 3); }),
            "one_hot: labels must have an integer dtype (int8, uint8, int32, int64), got bool");
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { one_hot(Array::zeros({2}, DType::i32), -1); }),
            "one_hot: num_classes must be non-negative, got -1");
}

// ---- take ----------------------------------------------------------------------------------------------------

// numpy.take by its definition: out[i..., j..., k...] = x[i..., indices[j...], k...] (x flattened when no axis).
Array naive_take(const Array& x, const std::vector<std::int64_t>& indices, const Shape& indices_shape,
                 std::optional<int> axis) {
  const Array src = axis ? x : x.reshape({x.size()});
  const int ax = axis ? (*axis < 0 ? *axis + x.ndim() : *axis) : 0;
  const Shape& s = src.shape();
  Shape out_shape(s.begin(), s.begin() + ax);
  out_shape.insert(out_shape.end(), indices_shape.begin(), indices_shape.end());
  out_shape.insert(out_shape.end(), s.begin() + ax + 1, s.end());
  const std::vector<double> v = src.to_doubles();
  std::vector<double> out(static_cast<std::size_t>(num_elements(out_shape)));
  const int ni = static_cast<int>(indices_shape.size());
  for (std::int64_t f = 0; f < static_cast<std::int64_t>(out.size()); ++f) {
    const std::vector<std::int64_t> o = Unravel(f, out_shape);
    std::vector<std::int64_t> j(o.begin() + ax, o.begin() + ax + ni);
    std::int64_t index = indices[Ravel(j, indices_shape)];
    if (index < 0) index += s[ax];
    std::vector<std::int64_t> i(o.begin(), o.begin() + ax);
    i.push_back(index);
    i.insert(i.end(), o.begin() + ax + ni, o.end());
    out[f] = v[Ravel(i, s)];
  }
  return Array::from_doubles(out, out_shape, x.dtype());
}

TEST(Take, EveryAxisIndexShapeAndDType) {
  struct Case {
    Shape x;
    std::vector<std::int64_t> indices;
    Shape indices_shape;
    std::optional<int> axis;
  };
  const std::vector<Case> cases = {
      {{5}, {4, 0, -1, 2, 2}, {5}, 0},
      {{5}, {1}, {}, 0},                               // a scalar index removes the axis
      {{3, 4}, {2, 0}, {2}, 0},                        // rows: a batch of examples
      {{3, 4}, {3, -4, 1}, {3}, 1},
      {{3, 4}, {3, -4, 1}, {3}, -1},
      {{2, 3, 4}, {0, 2, 1, 1}, {2, 2}, 1},            // 2-d indices
      {{2, 3, 4}, {5, 23, -1, 0}, {2, 2}, std::nullopt},  // flattened
      {{2, 3}, {}, {0}, 1},                            // no indices
      {{0, 3}, {1, 2}, {2}, 1},                        // empty outer axis
  };
  std::uint32_t seed = 20;
  for (const Case& c : cases) {
    for (DType dtype : kAllDTypes) {
      for (DType index_dtype : kIntegerDTypes) {
        bool negative = false;
        for (std::int64_t i : c.indices) negative = negative || i < 0;
        if (negative && index_dtype == DType::u8) continue;
        const Array x = SampleIntegers(c.x, dtype, seed++, -50, 50);
        std::vector<double> iv(c.indices.begin(), c.indices.end());
        const Array indices = Array::from_doubles(iv, c.indices_shape, index_dtype);
        SCOPED_TRACE(shape_str(c.x) + " axis " + (c.axis ? std::to_string(*c.axis) : "none") + " " +
                     std::string(dtype_name(dtype)) + " indices " + std::string(dtype_name(index_dtype)));
        const Array got = take(x, indices, c.axis);
        const Array expected = naive_take(x, c.indices, c.indices_shape, c.axis);
        EXPECT_EQ(got.dtype(), dtype);
        EXPECT_EQ(got.shape(), expected.shape());
        EXPECT_EQ(got.to_doubles(), expected.to_doubles());
      }
    }
  }
}

TEST(Take, Errors) {
  const Array x = Array::zeros({3, 4});
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { take(x, Array::from_list<std::int32_t>({0, 4}), 1); }),
            "take: index 4 is out of bounds for axis 1 with size 4");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { take(x, Array::from_list<std::int64_t>({-4}), 0); }),
            "take: index -4 is out of bounds for axis 0 with size 3");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { take(x, Array::from_list<std::int8_t>({12})); }),
            "take: index 12 is out of bounds for axis 0 with size 12 (the flattened array)");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { take(x, Array::from_list<float>({1})); }),
            "take: indices must have an integer dtype (int8, uint8, int32, int64), got float32");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { take(x, Array::from_list<std::int32_t>({0}), 2); }),
            "take: axis 2 is out of bounds for array of dimension 2");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { take(Array::zeros({0}), Array::from_list<std::int32_t>({0}), 0); }),
            "take: index 0 is out of bounds for axis 0 with size 0");
}

}  // namespace indexing_test
}  // namespace
}  // namespace weft
