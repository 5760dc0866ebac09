// Denormal floats inside replicas (RuntimeOptions::flush_denormals, WEFT_FLUSH_DENORMALS,
// runtime/denormals.hpp), table-driven over both schedulers, float32 and float64: with the option off, a
// result below the smallest normal is the exact denormal IEEE gives (numpy's and PyTorch's); with it on, as
// XLA:CPU computes, a denormal result is 0 and a denormal input reads as 0, in elementwise math, in matmul
// and in a psum's reduction. The expectations are closed-form (numeric_limits' min halved or quartered,
// which are exact denormals). And the mode stays inside the replicas: the caller's thread computes
// denormals afterwards either way.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "weft/ops.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace denormals_test {

constexpr int kReplicas = 4;

struct Case {
  std::string scheduler;
  DType dtype;
  int flush;  // RuntimeOptions::flush_denormals
};

template <class T>
struct Limits {
  static double tiny() { return static_cast<double>(std::numeric_limits<T>::min()); }  // the smallest normal
};

double Tiny(DType dtype) { return dtype == DType::f32 ? Limits<float>::tiny() : Limits<double>::tiny(); }

// One row per replica: [tiny, tiny / 4, tiny / 4]; tiny / 4 is a denormal, exact in the dtype.
Array Inputs(DType dtype) {
  const double tiny = Tiny(dtype);
  std::vector<double> v;
  for (int r = 0; r < kReplicas; ++r) v.insert(v.end(), {tiny, tiny / 4, tiny / 4});
  return Array::from_doubles(v, {kReplicas, 3}, dtype);
}

class FlushDenormals : public ::testing::TestWithParam<Case> {};

TEST_P(FlushDenormals, ResultsAndInputsAsTheModeSays) {
  const Case& c = GetParam();
  Runtime rt({.device_count = kReplicas, .scheduler = c.scheduler, .flush_denormals = c.flush});
  const DType dtype = c.dtype;
  auto step = pmap(
      [dtype](Replica& r, const Array& row) {
        const Array half = Array::from_doubles({0.5}, {}, dtype), one = Array::from_doubles({1.0}, {}, dtype);
        const Array tiny = row.slice(0, 1), denormal = row.slice(1, 2);
        return std::tuple{tiny * half,                                      // a denormal result (FTZ)
                          denormal * one,                                   // a denormal input (DAZ)
                          matmul(tiny.reshape({1, 1}), half.reshape({1, 1})),  // the same in a product
                          r.psum(row.slice(2, 3), "i")};                    // and in a reduction
      },
      {.axis = "i", .runtime = &rt});
  const auto [underflow, input, product, sum] = step(Inputs(dtype));
  const double tiny = Tiny(dtype);
  const bool flushed = c.flush == 1;
  for (int r = 0; r < kReplicas; ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    EXPECT_EQ(underflow[r].to_doubles()[0], flushed ? 0.0 : tiny / 2);
    EXPECT_EQ(input[r].to_doubles()[0], flushed ? 0.0 : tiny / 4);
    EXPECT_EQ(product[r].to_doubles()[0], flushed ? 0.0 : tiny / 2);
    // Four denormal quarters sum to the smallest normal, unless each reads as zero.
    EXPECT_EQ(sum[r].to_doubles()[0], flushed ? 0.0 : tiny);
  }
  // The caller's thread kept IEEE's gradual underflow (the mode is set and restored inside each replica).
  const Array here = Array::from_doubles({tiny}, {1}, dtype) * Array::from_doubles({0.5}, {}, dtype);
  EXPECT_EQ(here.to_doubles()[0], tiny / 2);
}

// Fibers of one worker switch between replicas: each keeps its own mode (Boost.Context saves MXCSR), so
// a runtime with the option off, run after one with it on in the same threads, still computes denormals.
TEST(FlushDenormalsOff, AfterARuntimeWithItOn) {
  for (int flush : {1, 0}) {
    Runtime rt({.device_count = kReplicas, .flush_denormals = flush});
    auto halve = pmap([](const Array& x) { return x * Array::from_doubles({0.5}, {}, DType::f32); },
                      {.axis = "i", .runtime = &rt});
    const double tiny = Limits<float>::tiny();
    const Array out = halve(Array::from_doubles(std::vector<double>(kReplicas, tiny), {kReplicas}, DType::f32)).to_host();
    for (double v : out.to_doubles()) EXPECT_EQ(v, flush ? 0.0 : tiny / 2) << "flush_denormals = " << flush;
  }
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* scheduler : {"fibers", "threads"})
    for (DType dtype : {DType::f32, DType::f64})
      for (int flush : {0, 1}) cases.push_back({scheduler, dtype, flush});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Table, FlushDenormals, ::testing::ValuesIn(Cases()), [](const auto& info) {
  const Case& c = info.param;
  return c.scheduler + (c.dtype == DType::f32 ? "_f32" : "_f64") + (c.flush ? "_flushed" : "_ieee");
});

}  // namespace denormals_test
}  // namespace
}  // namespace weft
