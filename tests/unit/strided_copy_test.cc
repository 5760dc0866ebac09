// detail::strided_copy (src/array/strided_copy.hpp), the copy under the program layer's slice and broadcast_to
// kernels, against a naive reference that computes every output element's source index on its own: forward,
// reversed and broadcast (step 0) axes, ranks 0 to 4, empty and size-1 axes, element sizes 1 to 8 bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "array/strided_copy.hpp"
#include "weft/array.hpp"

namespace weft {
namespace {
namespace strided_copy_test {

// Distinct bytes per element, so a wrong source shows.
Array patterned(const Shape& shape, DType dtype) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * dtype_size(dtype));
  for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<unsigned char>((k * 37 + 11) % 251);
  return Array::from_bytes(dtype, shape, bytes.data());
}

// out[i_0, ..., i_r] = in[start_0 + i_0 step_0, ..., start_r + i_r step_r], one element at a time.
std::vector<unsigned char> reference(const Array& in, const Shape& out_shape, const std::vector<std::int64_t>& start,
                                     const std::vector<std::int64_t>& step) {
  const std::size_t elem = dtype_size(in.dtype());
  const std::size_t rank = out_shape.size();
  std::int64_t total = 1;
  for (std::int64_t d : out_shape) total *= d;
  std::vector<unsigned char> out(static_cast<std::size_t>(total) * elem);
  for (std::int64_t o = 0; o < total; ++o) {
    std::int64_t rest = o;
    std::int64_t source = 0;
    std::int64_t in_stride = 1;
    for (std::size_t d = rank; d-- > 0;) {
      const std::int64_t i = rest % out_shape[d];
      rest /= out_shape[d];
      const std::int64_t at = start[d] + i * step[d];
      EXPECT_GE(at, 0);
      EXPECT_LT(at, in.shape()[d]);
      source += at * in_stride;
      in_stride *= in.shape()[d];
    }
    std::memcpy(out.data() + o * elem, in.bytes() + source * elem, elem);
  }
  return out;
}

struct Case {
  Shape in_shape;
  Shape out_shape;
  std::vector<std::int64_t> start;
  std::vector<std::int64_t> step;
};

TEST(StridedCopy, MatchesTheElementwiseReference) {
  const std::vector<Case> cases = {
      {{}, {}, {}, {}},                                   // a scalar
      {{7}, {7}, {0}, {1}},                               // the whole row: one memcpy
      {{7}, {3}, {2}, {1}},                               // a window
      {{9}, {4}, {1}, {2}},                               // every other element
      {{7}, {7}, {6}, {-1}},                              // reversed
      {{10}, {4}, {9}, {-3}},                             // reversed by 3
      {{1}, {5}, {0}, {0}},                               // broadcast from size 1
      {{5}, {0}, {0}, {1}},                               // empty
      {{3, 4}, {3, 4}, {0, 0}, {1, 1}},                   // a copy
      {{3, 4}, {2, 2}, {1, 1}, {1, 2}},                   // a 2-D window with a stride
      {{3, 4}, {3, 4}, {2, 3}, {-1, -1}},                 // both axes reversed
      {{1, 4}, {5, 4}, {0, 0}, {0, 1}},                   // a row broadcast down
      {{3, 1}, {3, 6}, {0, 0}, {1, 0}},                   // a column broadcast across (inner step 0)
      {{1, 1}, {2, 3}, {0, 0}, {0, 0}},                   // a 1x1 broadcast to 2x3
      {{4, 3, 5}, {2, 3, 2}, {3, 0, 4}, {-2, 1, -3}},     // mixed steps on three axes
      {{2, 3, 4, 5}, {2, 1, 4, 2}, {0, 2, 0, 1}, {1, 1, 1, 2}},
      {{2, 3, 4, 5}, {2, 3, 0, 5}, {0, 0, 0, 0}, {1, 1, 1, 1}},  // an empty inner axis
      {{6, 1}, {3, 1}, {5, 0}, {-2, 1}},                  // a size-1 inner axis
  };
  for (DType dtype : {DType::u8, DType::bf16, DType::f32, DType::f64}) {
    for (const Case& c : cases) {
      const Array in = patterned(c.in_shape, dtype);
      const Array out = detail::strided_copy(in, c.out_shape, c.start, c.step);
      EXPECT_EQ(out.dtype(), dtype);
      EXPECT_EQ(out.shape(), c.out_shape);
      const std::vector<unsigned char> want = reference(in, c.out_shape, c.start, c.step);
      ASSERT_EQ(out.nbytes(), want.size());
      EXPECT_TRUE(want.empty() || std::memcmp(out.bytes(), want.data(), want.size()) == 0)
          << dtype_name(dtype) << " from " << ::testing::PrintToString(c.in_shape) << " to "
          << ::testing::PrintToString(c.out_shape);
    }
  }
}

}  // namespace strided_copy_test
}  // namespace
}  // namespace weft
