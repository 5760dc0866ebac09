// matmul's choice between Eigen, OpenBLAS and oneDNN (src/array/blas.hpp): the decision with injected inputs
// (the kernels OpenBLAS chose, the CPU, whether oneDNN runs JIT kernels, WEFT_GEMM), the sizes that go to a
// library, and this process's backend as ctest runs it: unit_matmul_backend_test with the default setting,
// and again with WEFT_GEMM=eigen, openblas and onednn (tests/CMakeLists.txt), where the products below must
// still equal the reference, also from more threads at once than OpenBLAS has work buffers for.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../support/arrays.hpp"
#include "../support/errors.hpp"
#include "array/blas.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {
namespace matmul_backend_test {

using blas::Isa;
using blas::Mode;
using testing::ErrorOf;

TEST(MatmulBackend, KernelNamesMapToTheirIsa) {
  struct Case {
    const char* corename;
    Isa isa;
  };
  const Case cases[] = {
      {"SkylakeX", Isa::avx512}, {"Cooperlake", Isa::avx512}, {"SapphireRapids", Isa::avx512},
      {"COOPERLAKE", Isa::avx512}, {"Haswell", Isa::avx2},    {"Zen", Isa::avx2},
      {"Excavator", Isa::avx2},  {"Prescott", Isa::baseline}, {"Sandybridge", Isa::baseline},
      {"Nehalem", Isa::baseline}, {"", Isa::baseline},        {"SkylakeXX", Isa::baseline},
  };
  for (const Case& c : cases) EXPECT_EQ(blas::core_isa(c.corename), c.isa) << c.corename;
}

TEST(MatmulBackend, CpuIsaNeedsEveryFeatureOfTheLevel) {
  auto cpu_with = [](std::set<std::string> features) {
    return [features = std::move(features)](std::string_view f) { return features.count(std::string(f)) > 0; };
  };
  EXPECT_EQ(blas::cpu_isa(cpu_with({"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"})), Isa::avx512);
  EXPECT_EQ(blas::cpu_isa(cpu_with({"avx2", "fma", "avx512f", "avx512bw", "avx512dq"})), Isa::avx2);  // no VL
  EXPECT_EQ(blas::cpu_isa(cpu_with({"avx2", "fma"})), Isa::avx2);
  EXPECT_EQ(blas::cpu_isa(cpu_with({"avx2"})), Isa::baseline);  // AVX2 without FMA
  EXPECT_EQ(blas::cpu_isa(cpu_with({})), Isa::baseline);
}

TEST(MatmulBackend, AutoUsesOpenBlasOnlyWithKernelsForThisCpu) {
  struct Case {
    Isa core, cpu;
    bool use;
    const char* why;
  };
  const Case cases[] = {
      {Isa::avx512, Isa::avx512, true, "SkylakeX kernels on an AVX-512 CPU"},
      {Isa::avx2, Isa::avx512, false, "OpenBLAS 0.3.21 on a Zen 5: Haswell kernels, slower than Eigen"},
      {Isa::baseline, Isa::avx512, false, "OpenBLAS 0.3.21 on a Sapphire Rapids: Prescott kernels, ~10x slower"},
      {Isa::avx2, Isa::avx2, true, "Haswell or Zen kernels on an AVX2 CPU"},
      {Isa::baseline, Isa::baseline, false, "an old CPU: Eigen's kernels are as good"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(blas::use_openblas(Mode::automatic, c.core, c.cpu), c.use) << c.why;
    EXPECT_FALSE(blas::use_openblas(Mode::eigen, c.core, c.cpu)) << c.why;
    EXPECT_TRUE(blas::use_openblas(Mode::openblas, c.core, c.cpu)) << c.why;
    EXPECT_FALSE(blas::use_openblas(Mode::onednn, c.core, c.cpu)) << c.why;  // float64 stays on Eigen
  }
}

TEST(MatmulBackend, AutoUsesOneDnnOnlyWithJitKernels) {
  EXPECT_TRUE(blas::use_onednn(Mode::automatic, true));
  EXPECT_FALSE(blas::use_onednn(Mode::automatic, false));  // its reference loops: slower than Eigen
  for (bool jit : {false, true}) {
    EXPECT_TRUE(blas::use_onednn(Mode::onednn, jit));
    EXPECT_FALSE(blas::use_onednn(Mode::eigen, jit));
    EXPECT_FALSE(blas::use_onednn(Mode::openblas, jit));
  }
}

TEST(MatmulBackend, SettingParsesOrNamesTheRule) {
  EXPECT_EQ(blas::parse_mode(nullptr), Mode::automatic);
  EXPECT_EQ(blas::parse_mode("auto"), Mode::automatic);
  EXPECT_EQ(blas::parse_mode("eigen"), Mode::eigen);
  EXPECT_EQ(blas::parse_mode("openblas"), Mode::openblas);
  EXPECT_EQ(blas::parse_mode("onednn"), Mode::onednn);
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { blas::parse_mode("OpenBLAS"); }),
            "WEFT_GEMM=OpenBLAS is not a matmul library: use auto, eigen, openblas or onednn (docs/settings.md, "
            "\"matmul's library\")");
  // Empty means unset, as for every WEFT_* variable (issue 21, item 14).
  EXPECT_EQ(blas::parse_mode(""), Mode::automatic);
}

TEST(MatmulBackend, OnlyProductsOfBlockedSizeGoToTheBlas) {
  EXPECT_TRUE(blas::worth_gemm(32, 32, 32));
  EXPECT_FALSE(blas::worth_gemm(31, 32, 32));
  EXPECT_TRUE(blas::worth_gemm(32, 784, 512));  // a training step's forward product
  EXPECT_TRUE(blas::worth_gemm(1, 1 << 20, 1));
  EXPECT_FALSE(blas::worth_gemm(0, 1 << 20, 1 << 20));
  EXPECT_FALSE(blas::worth_gemm(std::int64_t{INT_MAX} + 1, 64, 64));  // BLAS sizes are int
  EXPECT_TRUE(blas::worth_gemm(INT_MAX, 64, 64));
}

// This process, as ctest set it up: the backend named is the one WEFT_GEMM asked for.
TEST(MatmulBackend, ThisProcessUsesWhatTheSettingAsks) {
  const char* setting = std::getenv("WEFT_GEMM");
  const std::string backend = matmul_backend();
  SCOPED_TRACE(backend);
  if (setting && std::string(setting) == "eigen") {
    EXPECT_EQ(backend.rfind("Eigen 3.4", 0), 0u);
    EXPECT_NE(backend.find("(WEFT_GEMM=eigen)"), std::string::npos);
  } else if (setting && std::string(setting) == "openblas") {
    // ./test installs Debian's libopenblas0-pthread; elsewhere the forced setting must say it cannot load.
    EXPECT_EQ(backend.rfind("float32: OpenBLAS 0.3", 0), 0u);
    EXPECT_NE(backend.find("float64: OpenBLAS 0.3"), std::string::npos);
    EXPECT_NE(backend.find("WEFT_GEMM=openblas"), std::string::npos);
  } else if (setting && std::string(setting) == "onednn") {
    // ./test installs Debian's libdnnl-dev (and so libdnnl2).
    EXPECT_EQ(backend.rfind("float32: oneDNN 2.", 0), 0u);
    EXPECT_NE(backend.find("float64: Eigen 3.4.0 (WEFT_GEMM=onednn)"), std::string::npos);
  } else {
    EXPECT_EQ(backend.rfind("float32: ", 0), 0u);
    EXPECT_NE(backend.find("; float64: "), std::string::npos);
    EXPECT_NE(backend.find("; from 32^3 multiply-adds, Eigen 3.4"), std::string::npos);
  }
}

// NaN and infinity propagate through a product large enough for the BLAS as numpy says (NaN * 0 = NaN,
// inf * 0 = NaN): a BLAS that skipped zero terms (the reference BLAS does) would return 0 here.
TEST(MatmulBackend, NanAndInfinityPropagateThroughLargeProducts) {
  const std::int64_t n = 48;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> a(n * n, 0.0), b(n * n, 1.0);
  for (std::int64_t j = 0; j < n; ++j) b[5 * n + j] = 0.0;  // row 5 of b is zero
  a[3 * n + 5] = nan;  // row 3 of the result: NaN * 0 in every column
  a[7 * n + 5] = inf;  // row 7: inf * 0
  a[9 * n + 6] = inf;  // row 9: inf * 1
  for (DType dtype : {DType::f32, DType::f64}) {
    const Array c = matmul(Array::from_doubles(a, {n, n}, dtype), Array::from_doubles(b, {n, n}, dtype));
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(std::isnan(c.value_at(3 * n + j))) << dtype_name(dtype) << " column " << j;
      EXPECT_TRUE(std::isnan(c.value_at(7 * n + j))) << dtype_name(dtype) << " column " << j;
      EXPECT_EQ(c.value_at(9 * n + j), inf) << dtype_name(dtype) << " column " << j;
      EXPECT_EQ(c.value_at(0 * n + j), 0.0) << dtype_name(dtype) << " column " << j;
    }
  }
}

// Every transpose combination of a BLAS-sized product, float32 and float64, against a double-precision
// triple loop, within a rounding bound relative to the sum of |terms|.
TEST(MatmulBackend, LargeProductsMatchTheReferenceInEveryTransposeCombination) {
  const std::int64_t m = 37, k = 70, n = 53;  // sizes off every library's register blocks
  for (DType dtype : {DType::f32, DType::f64}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Array a = testing::SampleReals(ta ? Shape{k, m} : Shape{m, k}, dtype, 3);
        const Array b = testing::SampleReals(tb ? Shape{n, k} : Shape{k, n}, dtype, 4);
        const Array c = matmul(a, b, {ta, tb});
        double worst = 0;
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double want = 0, scale = 0;
            for (std::int64_t p = 0; p < k; ++p) {
              const double x = a.value_at(ta ? p * m + i : i * k + p);
              const double y = b.value_at(tb ? j * k + p : p * n + j);
              want += x * y;
              scale += std::abs(x * y);
            }
            worst = std::max(worst, std::abs(c.value_at(i * n + j) - want) / (scale + 1e-300));
          }
        }
        const double eps = dtype == DType::f32 ? 1.2e-7 : 2.3e-16;
        EXPECT_LT(worst, 4 * k * eps) << dtype_name(dtype) << (ta ? " a.T" : " a") << (tb ? " @ b.T" : " @ b");
      }
    }
  }
}

// bfloat16 products of BLAS size in every transpose combination (oneDNN's bfloat16 kernels where this CPU has
// them, else the float32 path), against a double-precision triple loop over the same bfloat16 values: float32
// accumulation (k * 2^-24 of the sum of |terms|) and one rounding to bfloat16 (2^-8 of the result); also
// batched, with a broadcast batch.
TEST(MatmulBackend, Bfloat16ProductsRoundOnceFromFloat32Sums) {
  const std::int64_t m = 37, k = 70, n = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Array a = testing::SampleReals(ta ? Shape{3, k, m} : Shape{3, m, k}, DType::bf16, 5);
      const Array b = testing::SampleReals(tb ? Shape{n, k} : Shape{k, n}, DType::bf16, 6);
      const Array c = matmul(a, b, {ta, tb});
      ASSERT_EQ(c.dtype(), DType::bf16);
      ASSERT_EQ(c.shape(), (Shape{3, m, n}));
      double worst = 0;
      for (std::int64_t q = 0; q < 3; ++q) {
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double want = 0, scale = 0;
            for (std::int64_t p = 0; p < k; ++p) {
              const double x = a.value_at(q * m * k + (ta ? p * m + i : i * k + p));
              const double y = b.value_at(tb ? j * k + p : p * n + j);
              want += x * y;
              scale += std::abs(x * y);
            }
            const double bound = 0x1p-8 * std::abs(want) + 4 * k * 0x1p-24 * scale + 1e-300;
            worst = std::max(worst, std::abs(c.value_at((q * m + i) * n + j) - want) / bound);
          }
        }
      }
      EXPECT_LE(worst, 1.0) << (ta ? "a.T" : "a") << (tb ? " @ b.T" : " @ b") << " on " << matmul_backend();
    }
  }
}

// Where oneDNN runs (the default setting, and WEFT_GEMM=onednn) on a CPU with AVX512-BF16, bfloat16 products
// go to its bfloat16 kernels, and matmul_backend() says so; elsewhere it says they compute as float32.
TEST(MatmulBackend, Bfloat16NamesItsKernels) {
  const std::string backend = matmul_backend();
  SCOPED_TRACE(backend);
  const char* setting = std::getenv("WEFT_GEMM");
  const bool onednn = backend.rfind("float32: oneDNN", 0) == 0;
  const bool cpu_bf16 = __builtin_cpu_supports("avx512bf16");
  if (onednn && cpu_bf16) {
    EXPECT_NE(backend.find("; bfloat16: oneDNN (brg:avx512_core_"), std::string::npos);
    EXPECT_NE(backend.find("kernels, float32 accumulation)"), std::string::npos);
  } else if (!onednn && backend.rfind("float32: ", 0) == 0) {  // (Eigen alone names no dtypes)
    EXPECT_NE(backend.find("; bfloat16: as float32"), std::string::npos) << (setting ? setting : "default");
  }
}

// More distinct shapes than the oneDNN backend keeps primitives for (it starts over past 256): every product
// stays right, before and after the cache is cleared.
TEST(MatmulBackend, ManyDistinctShapesStayRight) {
  const std::int64_t k = 32, n = 33;
  const Array ones = Array::ones({k, n}, DType::f32);
  int wrong = 0;
  for (std::int64_t m = 32; m < 32 + 300; ++m) {
    std::vector<double> rows(static_cast<std::size_t>(m * k), 0.0);
    for (std::int64_t i = 0; i < m; ++i) rows[i * k + i % k] = static_cast<double>(i);  // row i sums to i
    const Array c = matmul(Array::from_doubles(rows, {m, k}, DType::f32), ones);
    for (std::int64_t i = 0; i < m * n; ++i) {
      if (c.value_at(i) != static_cast<double>(i / n)) ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0);
}

// More threads than OpenBLAS has work buffers for, each computing large products at once (the threads
// scheduler runs every device as a thread): every result is the reference's. At most
// CallSlot::kMaxCallsInFlight calls run inside the BLAS together; the rest wait their turn. (The one test
// of this tier that starts threads.)
TEST(MatmulBackend, ManyThreadsAtOnceEachGetTheirOwnProduct) {
  constexpr int kThreads = 3 * blas::CallSlot::kMaxCallsInFlight;
  const std::int64_t n = 40;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // A diagonal matrix times the all-ones matrix: every element of row i is (t + i), exactly.
      std::vector<double> diagonal(n * n, 0.0);
      for (std::int64_t i = 0; i < n; ++i) diagonal[i * n + i] = t + i;
      const Array a = Array::from_doubles(diagonal, {n, n}, DType::f32);
      const Array ones = Array::ones({n, n}, DType::f32);
      for (int repeat = 0; repeat < 3; ++repeat) {
        const Array c = matmul(a, ones);
        for (std::int64_t i = 0; i < n * n; ++i) {
          if (c.value_at(i) != static_cast<double>(t + i / n)) ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace matmul_backend_test
}  // namespace
}  // namespace weft
