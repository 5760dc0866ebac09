// A product widened to several threads (array/gemm_threads.hpp, the executor's shared products) and the
// same product on one thread, alternately on one thread: both match a naive float64 product, so the
// primitive each runs was made for its own thread count (oneDNN's cache is keyed by it) and the thread's
// OpenMP count is back to one after a widened product. Shapes large enough for the GEMM library.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "array/gemm_threads.hpp"
#include "weft/array.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {
namespace gemm_threads_test {

Array Pattern(std::int64_t rows, std::int64_t cols, int salt) {
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((static_cast<int>(i) * 7 + salt) % 13 - 6) / 8;
  return Array::from_doubles(v, {rows, cols}, DType::f32);
}

std::vector<double> Naive(const Array& a, const Array& b) {
  const std::int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t l = 0; l < k; ++l)
      for (std::int64_t j = 0; j < n; ++j) c[i * n + j] += x[i * k + l] * y[l * n + j];
  return c;
}

TEST(GemmThreads, WidenedAndSingleThreadProductsAlternateAndBothMatchTheNaiveOne) {
  const Array a = Pattern(256, 96, 1), b = Pattern(96, 80, 2);
  const std::vector<double> want = Naive(a, b);
  EXPECT_EQ(kernels::gemm_threads(), 1);
  for (int round = 0; round < 3; ++round) {
    for (int threads : {2, 1, 4, 1}) {
      std::vector<double> got;
      {
        const kernels::WidenedGemm widened(threads);
        // (The sanitizer builds never widen: gemm_threads.hpp.)
        EXPECT_EQ(kernels::gemm_threads(), kernels::gemm_widening() ? threads : 1);
        got = matmul(a, b).to_doubles();
      }
      EXPECT_EQ(kernels::gemm_threads(), 1);
      ASSERT_EQ(got.size(), want.size());
      // Sums of 96 exact products of eighths: float32 holds each partial sum exactly.
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << threads << " threads, element " << i;
    }
  }
}

TEST(GemmThreads, GuardsNestAndNeverGoBelowOne) {
  {
    const kernels::WidenedGemm outer(3);
    {
      const kernels::WidenedGemm inner(0);
      EXPECT_EQ(kernels::gemm_threads(), 1);
    }
    EXPECT_EQ(kernels::gemm_threads(), kernels::gemm_widening() ? 3 : 1);
  }
  EXPECT_EQ(kernels::gemm_threads(), 1);
}

}  // namespace gemm_threads_test
}  // namespace
}  // namespace weft
