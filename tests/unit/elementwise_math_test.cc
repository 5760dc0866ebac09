// Elementwise math (ops.hpp): exp, log, log1p, tanh, sqrt, rsqrt, sigmoid against naive double-precision
// references written here, for every float dtype (and the float32 result of integer/bool inputs); abs,
// negative, sign, relu against numpy's rules for every dtype; maximum/minimum, where and clip with
// broadcasting, promotion and NaN; the special values numpy gives (NaN, ±inf, signed zeros, subnormals); and
// the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "array/gelu.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {
namespace elementwise_math_test {

using testing::ErrorOf;
using D = std::vector<double>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<DType> kFloatDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                       DType::i32, DType::i64, DType::u8,  DType::boolean};

// How close a result of `dtype` must be to the double-precision reference: rtol * |ref| + atol, where atol is
// the dtype's smallest subnormal (results there have fewer significant bits). float32: 1e-6 is 8 to 17 ulp
// (the vectorised kernels stay within 6); 16-bit floats: one ulp of the format (computed in float32, rounded
// once); float64: the C library's last-bit differences.
struct Tolerance {
  double rtol, atol;
};
Tolerance ToleranceOf(DType dtype) {
  switch (dtype) {
    case DType::f32: return {1e-6, std::numeric_limits<float>::denorm_min()};
    case DType::f64: return {1e-15, std::numeric_limits<double>::denorm_min()};
    case DType::f16: return {std::ldexp(1.0, -10), std::ldexp(1.0, -24)};
    case DType::bf16: return {std::ldexp(1.0, -7), std::ldexp(1.0, -133)};
    default: return {0, 0};
  }
}

// got[i] against ref[i]: NaN must be NaN, an infinity the same infinity, anything else within tolerance.
void ExpectClose(const Array& got, const D& ref, Tolerance tol, const std::string& what, const D& inputs = {}) {
  const D g = got.to_doubles();
  ASSERT_EQ(g.size(), ref.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < g.size() && reported < 5; ++i) {
    bool ok;
    if (std::isnan(ref[i])) {
      ok = std::isnan(g[i]);
    } else if (std::isinf(ref[i])) {
      ok = g[i] == ref[i];
    } else {
      ok = std::fabs(g[i] - ref[i]) <= tol.rtol * std::fabs(ref[i]) + tol.atol;
    }
    if (!ok) {
      ++reported;
      ADD_FAILURE() << what << ": element " << i << (inputs.empty() ? "" : " (input " + std::to_string(inputs[i]) + ")")
                    << " got " << g[i] << ", expected " << ref[i];
    }
  }
}

// Exactly these values: NaN where expected is NaN (any payload), otherwise equal with the same sign, so
// -0. and 0. differ.
void ExpectSameValues(const Array& got, const D& expected, const std::string& what) {
  const D g = got.to_doubles();
  ASSERT_EQ(g.size(), expected.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i << ": got " << g[i];
    } else {
      EXPECT_EQ(g[i], expected[i]) << what << " element " << i;
      EXPECT_EQ(std::signbit(g[i]), std::signbit(expected[i])) << what << " element " << i << ": got " << g[i];
    }
  }
}

// ---- the transcendental functions ---------------------------------------------------------------------------

struct UnaryCase {
  const char* name;
  Array (*op)(const Array&);
  double (*ref)(double);  // the naive formula in double precision
};

double RefExp(double x) { return std::exp(x); }
double RefLog(double x) { return std::log(x); }
double RefLog1p(double x) { return std::log1p(x); }
double RefTanh(double x) { return std::tanh(x); }
double RefSqrt(double x) { return std::sqrt(x); }
double RefRsqrt(double x) { return 1.0 / std::sqrt(x); }
double RefSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

const UnaryCase kTranscendental[] = {
    {"exp", weft::exp, RefExp},       {"log", weft::log, RefLog},        {"log1p", weft::log1p, RefLog1p},
    {"tanh", weft::tanh, RefTanh},    {"sqrt", weft::sqrt, RefSqrt},     {"rsqrt", weft::rsqrt, RefRsqrt},
    {"sigmoid", weft::sigmoid, RefSigmoid},
};

// A sweep over [-30, 30], magnitudes from 1e-30 to 1e30, and the special values.
D SweepInputs() {
  D v;
  for (int i = -300; i <= 300; ++i) v.push_back(i * 0.1 + 0.013 * (i % 7));
  for (int e = -30; e <= 30; e += 3) {
    v.push_back(std::pow(10.0, e));
    v.push_back(-std::pow(10.0, e));
  }
  for (double s : {0.0, -0.0, 1.0, -1.0, kInf, -kInf, kNaN, 88.0, -100.0, 1e-40, -1e-40, 0.5, -0.999, 1e-5})
    v.push_back(s);
  return v;
}

TEST(Transcendental, EveryFloatDTypeAgainstTheDoubleReference) {
  const D sweep = SweepInputs();
  for (const UnaryCase& c : kTranscendental) {
    for (DType dtype : kFloatDTypes) {
      const Array x = Array::from_doubles(sweep, {static_cast<std::int64_t>(sweep.size())}, dtype);
      const D seen = x.to_doubles();  // the inputs as the dtype holds them
      D ref;
      for (double v : seen) ref.push_back(c.ref(v));
      // The reference rounded to the dtype (what a correctly rounded kernel would give), then the tolerance.
      const D rounded = Array::from_doubles(ref, x.shape(), dtype).to_doubles();
      const Array y = c.op(x);
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype));
      EXPECT_EQ(y.dtype(), dtype) << what;
      EXPECT_EQ(y.shape(), x.shape()) << what;
      ExpectClose(y, rounded, ToleranceOf(dtype), what, seen);
    }
  }
}

TEST(Transcendental, IntegerAndBoolInputsGiveFloat32) {
  const D values = {-3, -1, 0, 1, 2, 5};
  for (const UnaryCase& c : kTranscendental) {
    for (DType dtype : {DType::i8, DType::i32, DType::i64, DType::u8, DType::boolean}) {
      const Array x = Array::from_doubles(values, {2, 3}, dtype);
      const Array y = c.op(x);
      const std::string what = std::string(c.name) + " of " + std::string(dtype_name(dtype));
      EXPECT_EQ(y.dtype(), DType::f32) << what;
      EXPECT_EQ(y.shape(), (Shape{2, 3})) << what;
      D ref;
      for (double v : x.to_doubles()) ref.push_back(static_cast<float>(c.ref(v)));
      ExpectClose(y, ref, ToleranceOf(DType::f32), what);
    }
  }
}

TEST(Transcendental, SpecialValuesAsNumpy) {
  // Exact results numpy gives in float32, signed zeros included.
  struct Case {
    const char* name;
    Array (*op)(const Array&);
    D in, out;
  };
  const double sub = std::numeric_limits<float>::denorm_min();
  const Case cases[] = {
      {"exp", weft::exp, {0.0, -0.0, kInf, -kInf, kNaN, 89.0, -104.0}, {1, 1, kInf, 0, kNaN, kInf, 0}},
      {"log", weft::log, {0.0, -0.0, 1.0, -1.0, kInf, -kInf, kNaN}, {-kInf, -kInf, 0, kNaN, kInf, kNaN, kNaN}},
      {"log1p", weft::log1p, {0.0, -0.0, -1.0, -2.0, kInf, -kInf, kNaN}, {0, -0.0, -kInf, kNaN, kInf, kNaN, kNaN}},
      {"tanh", weft::tanh, {0.0, -0.0, kInf, -kInf, kNaN, 20.0, -20.0}, {0, -0.0, 1, -1, kNaN, 1, -1}},
      {"sqrt", weft::sqrt, {0.0, -0.0, 4.0, -1.0, kInf, -kInf, kNaN}, {0, -0.0, 2, kNaN, kInf, kNaN, kNaN}},
      {"rsqrt", weft::rsqrt, {0.0, -0.0, 4.0, -1.0, kInf, -kInf, kNaN}, {kInf, -kInf, 0.5, kNaN, 0, kNaN, kNaN}},
      {"sigmoid", weft::sigmoid, {0.0, -0.0, kInf, -kInf, kNaN, 1000.0, -1000.0}, {0.5, 0.5, 1, 0, kNaN, 1, 0}},
      // The smallest results are subnormal: exp(-103.28) is 1 ulp, 2 ** -149.
      {"exp", weft::exp, {-103.27893}, {sub}},
      // Far below: 0 without the C library's underflow path (masked attention scores are -1e9).
      {"exp", weft::exp, {-104.5, -1e9, -3.0e38, -103.96}, {0, 0, 0, sub}},
  };
  for (const Case& c : cases) {
    const Array got = c.op(Array::from_doubles(c.in, {static_cast<std::int64_t>(c.in.size())}, DType::f32));
    EXPECT_EQ(got.dtype(), DType::f32) << c.name;
    ExpectSameValues(got, c.out, c.name);
  }
}

TEST(Transcendental, MaskedExpInputsGiveZeroAndLeaveTheOthersBitForBit) {
  // Causal attention's softmax: half of each row is masked (-1e9, or -inf, or anything below -104). Such a
  // chunk takes a vectorised select; its other values must be the bits they have without the masked ones
  // beside them, and within float32's tolerance of the double reference; every masked one exactly 0.
  // 3000 elements: three 1024-element chunks, the last one partial.
  const double masks[] = {-1e9, -kInf, -200.0, -104.5};
  D in, unmasked, ref;
  for (int i = 0; i < 3000; ++i) {
    const double v = std::sin(0.37 * i) * 20.0;  // within [-20, 20]: Eigen's range
    if (i % 3 == 1) {
      in.push_back(masks[(i / 3) % 4]);
      ref.push_back(0.0);
    } else {
      in.push_back(v);
      unmasked.push_back(v);
      ref.push_back(static_cast<float>(std::exp(static_cast<double>(static_cast<float>(v)))));
    }
  }
  const Array got = exp(Array::from_doubles(in, {static_cast<std::int64_t>(in.size())}, DType::f32));
  ExpectClose(got, ref, ToleranceOf(DType::f32), "exp with masked inputs");
  const D g = got.to_doubles();
  const D alone = exp(Array::from_doubles(unmasked, {static_cast<std::int64_t>(unmasked.size())}, DType::f32))
                      .to_doubles();
  std::size_t k = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (i % 3 == 1) {
      ASSERT_EQ(g[i], 0.0) << "masked input " << in[i] << " at " << i;
      ASSERT_FALSE(std::signbit(g[i])) << i;
    } else {
      ASSERT_EQ(g[i], alone[k++]) << "input " << in[i] << " at " << i;
    }
  }
  // One input in [-104, -87) or a NaN in the chunk: the element loop, the same answers as alone.
  D mixed = {-1e9, 1.5, -95.0, kNaN, -1e9};
  ExpectClose(exp(Array::from_doubles(mixed, {5}, DType::f32)),
              {0, std::exp(1.5), static_cast<float>(std::exp(-95.0)), kNaN, 0}, ToleranceOf(DType::f32),
              "exp with a masked input beside the slow ones");
}

TEST(Transcendental, Float64ExpUnderflowsToZero) {
  const D in = {-745.0, -746.5, -1e9, -1e300};
  const Array got = exp(Array::from_doubles(in, {4}, DType::f64));
  ExpectSameValues(got, {std::exp(-745.0), 0, 0, 0}, "exp f64 underflow");
}

TEST(Transcendental, SubnormalArgumentsAndResults) {
  // log of a subnormal float32 (Eigen's vectorised log would treat it as 0); exp and sigmoid down to the
  // subnormal range; sigmoid(-100) = exp(-100) / (1 + exp(-100)).
  const D in = {1e-40, 1e-45, 3e-39};
  ExpectClose(log(Array::from_doubles(in, {3}, DType::f32)),
              {std::log(static_cast<double>(1e-40f)), std::log(static_cast<double>(1e-45f)),
               std::log(static_cast<double>(3e-39f))},
              ToleranceOf(DType::f32), "log of subnormals");
  const D neg = {-88.0, -95.0, -100.0, -103.0};
  D ref_exp, ref_sigmoid;
  for (double v : neg) {
    ref_exp.push_back(static_cast<float>(std::exp(v)));
    ref_sigmoid.push_back(static_cast<float>(std::exp(v) / (1 + std::exp(v))));
  }
  ExpectClose(exp(Array::from_doubles(neg, {4}, DType::f32)), ref_exp, ToleranceOf(DType::f32), "exp -> subnormal");
  ExpectClose(sigmoid(Array::from_doubles(neg, {4}, DType::f32)), ref_sigmoid, ToleranceOf(DType::f32),
              "sigmoid -> subnormal");
}

// Units in the last place of float32 between a result and the double reference.
double UlpError(float got, double ref) {
  const float r = static_cast<float>(ref);
  if (std::isnan(r)) return std::isnan(got) ? 0 : kInf;
  if (std::isinf(r) || std::isinf(got) || std::isnan(got)) return got == r ? 0 : kInf;
  double ulp = std::numeric_limits<float>::denorm_min();
  if (std::fabs(r) >= std::numeric_limits<float>::min()) {
    int e = 0;
    std::frexp(r, &e);
    ulp = std::ldexp(1.0, e - 24);
  }
  return std::fabs(static_cast<double>(got) - ref) / ulp;
}

TEST(Transcendental, Float32WorstErrorOverDenseSweeps) {
  // Large arrays (many vectorised chunks, odd tails) over each function's useful range, with a few special
  // values planted inside so the per-chunk fallback runs next to vectorised chunks. The bound, 6 ulp, is the
  // worst this machine's kernels measured over every 61st float32 (exp 4.5 with AVX-512, tanh 5.9 with SSE2),
  // plus nothing: a regression shows.
  struct Sweep {
    const char* name;
    Array (*op)(const Array&);
    double (*ref)(double);
    double lo, hi;
    bool log_spaced;
  };
  const Sweep sweeps[] = {
      {"exp", weft::exp, RefExp, -87.3, 88.7, false},
      {"log", weft::log, RefLog, 1e-37, 1e37, true},
      {"log1p", weft::log1p, RefLog1p, -0.9999, 1e6, false},
      {"tanh", weft::tanh, RefTanh, -10, 10, false},
      {"sigmoid", weft::sigmoid, RefSigmoid, -80, 80, false},
      {"sqrt", weft::sqrt, RefSqrt, 1e-38, 1e38, true},
      {"rsqrt", weft::rsqrt, RefRsqrt, 1e-37, 1e37, true},
  };
  constexpr int kCount = 200003;
  for (const Sweep& s : sweeps) {
    D values(kCount);
    for (int i = 0; i < kCount; ++i) {
      const double t = static_cast<double>(i) / (kCount - 1);
      values[i] = s.log_spaced ? s.lo * std::pow(s.hi / s.lo, t) : s.lo + (s.hi - s.lo) * t;
    }
    values[5000] = kNaN;
    values[70001] = kInf;
    values[70002] = -kInf;
    const Array x = Array::from_doubles(values, {kCount}, DType::f32);
    const std::vector<float> in = x.to_vector<float>();
    const std::vector<float> out = s.op(x).to_vector<float>();
    double worst = 0;
    float worst_at = 0;
    for (int i = 0; i < kCount; ++i) {
      const double e = UlpError(out[i], s.ref(in[i]));
      if (e > worst) worst = e, worst_at = in[i];
    }
    EXPECT_LE(worst, 6.0) << s.name << " at x = " << worst_at;
  }
}

// sqrt and rsqrt run on the CPU's packet sqrt instructions: correctly rounded, so every float32 gives the bits
// of std::sqrt (and of 1 / sqrt in double, rounded once), in the packets and in the scalar tail alike. Every
// 4093rd bit pattern (both signs: negatives, -0, subnormals, inf, NaNs with payloads) as one array; at every
// offset of a packet, arrays of 1 to 40 elements starting at each of the first 16 patterns (subnormals and
// small normals), and ending at each of the last 16 (the specials appended: 0, -0, 1, -1, 4, inf, -inf, the
// smallest subnormal and both NaNs, after negative NaN patterns).
TEST(Transcendental, SqrtAndRsqrtAreStdSqrtBitForBit) {
  std::vector<float> all;
  for (std::uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4093) {
    const std::uint32_t bits = static_cast<std::uint32_t>(b);
    float f;
    std::memcpy(&f, &bits, 4);
    all.push_back(f);
  }
  for (float f : {0.0f, -0.0f, 1.0f, -1.0f, 4.0f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
    all.push_back(f);
  }
  auto bits_of = [](float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  auto check = [&](const std::vector<float>& in, const char* what) {
    const Array x = Array::from_vector(in, {static_cast<std::int64_t>(in.size())});
    const std::vector<float> s = weft::sqrt(x).to_vector<float>();
    const std::vector<float> r = weft::rsqrt(x).to_vector<float>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      const float want_s = std::sqrt(in[i]);
      const float want_r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in[i])));
      ASSERT_EQ(bits_of(s[i]), bits_of(want_s)) << what << ": sqrt of bits " << std::hex << bits_of(in[i]);
      ASSERT_EQ(bits_of(r[i]), bits_of(want_r)) << what << ": rsqrt of bits " << std::hex << bits_of(in[i]);
    }
  };
  for (std::ptrdiff_t start = 0; start < 16; ++start) {
    for (std::ptrdiff_t len = 1; len <= 40; ++len) {
      check(std::vector<float>(all.begin() + start, all.begin() + start + len), "short array from the start");
      check(std::vector<float>(all.end() - start - len, all.end() - start), "short array at the end");
    }
  }
  check(all, "every 4093rd pattern");
}

TEST(Transcendental, SixteenBitFloatsRoundOnceFromFloat32) {
  // 2500 elements: more than one conversion chunk. exp(1/3) in float16: the float32 result rounded once.
  D v(2500, 1.0 / 3);
  const Array h = exp(Array::from_doubles(v, {2500}, DType::f16));
  const float in = half_to_float(float_to_half(1.0f / 3));
  const std::uint16_t expected = float_to_half(exp(Array::full({1}, in, DType::f32)).item<float>());
  for (std::int64_t i : {0, 1023, 1024, 2499}) {
    std::uint16_t bits;
    std::memcpy(&bits, h.bytes() + 2 * i, 2);
    EXPECT_EQ(bits, expected) << i;
  }
}

// A value's result is the same bits wherever it sits: alone, at any position of a longer array, and read
// from any (mis)aligned address. Eigen computes the elements before an aligned address and after the last
// whole packet with a scalar function whose bits differ from its vectorised one; before the fix an 8-replica
// training run did not repeat bit for bit (log_softmax's scratch buffer is only 16-byte aligned).
TEST(Transcendental, ResultDependsOnTheValueAloneNotItsAddressOrPosition) {
  D v;
  for (int i = 0; i < 1100; ++i) v.push_back(-6.0 + 12.0 * ((i * 7919) % 1100) / 1100.0 + 1e-3 * (i % 7));
  const Array x = Array::from_doubles(v, {static_cast<std::int64_t>(v.size())}, DType::f32);
  using Fn = Array (*)(const Array&);
  for (const auto& [name, fn] : std::vector<std::pair<const char*, Fn>>{
           {"exp", weft::exp}, {"log", weft::log}, {"log1p", weft::log1p}, {"tanh", weft::tanh}, {"sigmoid", weft::sigmoid}}) {
    const Array positive = name == std::string("log") || name == std::string("log1p") ? weft::abs(x) : x;
    const Array whole = fn(positive);
    for (std::int64_t offset = 0; offset < 17; ++offset) {
      // A view starting `offset` floats in: misaligned input, and every element shifted to another position.
      const Array shifted = fn(positive.slice_axis(0, offset, positive.size()));
      EXPECT_EQ(std::memcmp(shifted.bytes(), whole.bytes() + 4 * offset, shifted.nbytes()), 0) << name << " offset " << offset;
    }
    for (std::int64_t i : {0, 1, 15, 16, 17, 1023, 1024, 1099}) {
      const Array one = fn(positive.slice_axis(0, i, i + 1));
      EXPECT_EQ(std::memcmp(one.bytes(), whole.bytes() + 4 * i, 4), 0) << name << " element " << i << " alone";
    }
  }
  // log_softmax over (batch, classes) rows: each row as in a larger batch, wherever it starts.
  const Array logits = x.slice_axis(0, 0, 1000).reshape({100, 10});
  const Array all = weft::log_softmax(logits, -1);
  for (std::int64_t r : {0, 1, 3, 50, 99}) {
    const Array row = weft::log_softmax(logits.slice_axis(0, r, r + 1), -1);
    EXPECT_EQ(std::memcmp(row.bytes(), all.bytes() + 40 * r, 40), 0) << "log_softmax row " << r;
  }
}

// ---- dtype-keeping ops ----------------------------------------------------------------------------------------

// numpy's rules, written per element on the values as the dtype holds them.
double RefAbs(double v, DType dtype) {
  if (dtype == DType::i8 && v == -128) return -128;  // wraps
  return std::fabs(v);
}
double RefNegative(double v, DType dtype) {
  if (dtype == DType::u8) return v == 0 ? 0 : 256 - v;
  if (dtype == DType::i8 && v == -128) return -128;
  return -v;
}
double RefSign(double v, DType) { return std::isnan(v) ? v : (v > 0 ? 1 : (v < 0 ? -1 : 0)); }
double RefRelu(double v, DType) { return std::isnan(v) ? v : (v > 0 ? v : 0); }

TEST(KeepDType, AbsNegativeSignReluForEveryDType) {
  struct Case {
    const char* name;
    Array (*op)(const Array&);
    double (*ref)(double, DType);
  };
  const Case cases[] = {{"abs", weft::abs, RefAbs}, {"negative", weft::negative, RefNegative},
                        {"sign", weft::sign, RefSign}, {"relu", weft::relu, RefRelu}};
  const D values = {-128, -7, -1, 0, 1, 3, 100, 127};
  for (const Case& c : cases) {
    for (DType dtype : kAllDTypes) {
      if (dtype == DType::boolean) continue;  // below
      const Array x = Array::from_doubles(values, {2, 4}, dtype);
      const Array y = c.op(x);
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype));
      EXPECT_EQ(y.dtype(), dtype) << what;
      EXPECT_EQ(y.shape(), (Shape{2, 4})) << what;
      D ref;
      for (double v : x.to_doubles()) ref.push_back(c.ref(v, dtype));
      EXPECT_EQ(y.to_doubles(), ref) << what;
    }
  }
  const Array b = Array::from_list<bool>({true, false});
  EXPECT_TRUE(abs(b).identical(b));
  EXPECT_TRUE(relu(b).identical(b));
}

TEST(KeepDType, SignedZerosNanAndInfinities) {
  const D in = {-0.0, 0.0, kNaN, -kInf, kInf, -2.5, 3e-5};  // 3e-5: subnormal in float16
  struct Case {
    const char* name;
    Array (*op)(const Array&);
    D out;
  };
  // numpy: abs(-0.) = 0., negative(0.) = -0., sign(-0.) = 0. (not -0.), relu(-0.) = 0. (the cases file's
  // jax.nn.relu), NaN stays NaN everywhere.
  const Case cases[] = {
      {"abs", weft::abs, {0.0, 0.0, kNaN, kInf, kInf, 2.5, 3e-5}},
      {"negative", weft::negative, {0.0, -0.0, kNaN, kInf, -kInf, 2.5, -3e-5}},
      {"sign", weft::sign, {0.0, 0.0, kNaN, -1, 1, -1, 1}},
      {"relu", weft::relu, {0.0, 0.0, kNaN, 0, kInf, 0, 3e-5}},
  };
  for (const Case& c : cases) {
    for (DType dtype : kFloatDTypes) {
      // The expected values as the dtype holds them (3e-5 rounds differently in each).
      const D expected = Array::from_doubles(c.out, {7}, dtype).to_doubles();
      ExpectSameValues(c.op(Array::from_doubles(in, {7}, dtype)), expected,
                       std::string(c.name) + " " + std::string(dtype_name(dtype)));
    }
  }
}

TEST(KeepDType, IntegerEdgesWrap) {
  EXPECT_EQ(abs(Array::full({1}, -2147483648.0, DType::i32)).to_doubles(), (D{-2147483648.0}));
  EXPECT_EQ(abs(Array::from_list<std::int64_t>({std::numeric_limits<std::int64_t>::min()})).to_vector<std::int64_t>(),
            std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min()});
  EXPECT_EQ(negative(Array::full({1}, -128, DType::i8)).to_doubles(), (D{-128}));
  EXPECT_EQ(sign(Array::from_list<std::uint8_t>({0, 1, 255})).to_doubles(), (D{0, 1, 1}));
  EXPECT_EQ(relu(Array::from_list<std::int64_t>({-5, 0, 7})).to_doubles(), (D{0, 0, 7}));
}

TEST(KeepDType, SixteenBitFloatsExactly) {
  // abs clears only the sign bit; relu and sign give inputs or small integers, exact in the format.
  const Array h = Array::from_doubles({-1.5, 65504, -65504, -0.0001}, {4}, DType::f16);
  EXPECT_EQ(abs(h).to_doubles(), (D{1.5, 65504, 65504, Array::from_doubles({0.0001}, {1}, DType::f16).value_at(0)}));
  EXPECT_EQ(relu(h).to_doubles(), (D{0, 65504, 0, 0}));
  EXPECT_EQ(sign(Array::from_doubles({-3, 0, 2}, {3}, DType::bf16)).to_doubles(), (D{-1, 0, 1}));
}

TEST(KeepDType, BoolIsRefusedWhereNumpyRefusesIt) {
  const Array b = Array::from_list<bool>({true});
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { negative(b); }),
            "negative: the `-` operator is not supported for dtype bool; use the `~` operator instead");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { sign(b); }), "sign: not supported for dtype bool (numeric arrays only)");
}

TEST(KeepDType, EmptyArrays) {
  for (DType dtype : kAllDTypes) {
    const Array e = Array::zeros({0, 3}, dtype);
    EXPECT_EQ(relu(e).shape(), (Shape{0, 3}));
    EXPECT_EQ(abs(e).shape(), (Shape{0, 3}));
    EXPECT_EQ(exp(e).shape(), (Shape{0, 3}));
    EXPECT_EQ(exp(e).dtype(), is_floating(dtype) ? dtype : DType::f32);
  }
}

// ---- maximum / minimum ----------------------------------------------------------------------------------------

// numpy.maximum on doubles: a NaN operand wins (the first when both are), a tie keeps the first operand.
double RefMax(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a < b ? b : a); }
double RefMin(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a); }

TEST(MaximumMinimum, BroadcastingAgainstAReference) {
  struct Shapes {
    Shape a, b, out;
  };
  const Shapes shapes[] = {{{2, 3}, {2, 3}, {2, 3}},       {{2, 3}, {3}, {2, 3}},    {{3}, {2, 3}, {2, 3}},
                           {{2, 1}, {1, 3}, {2, 3}},       {{}, {2, 3}, {2, 3}},     {{2, 3}, {1, 1}, {2, 3}},
                           {{4, 1, 5}, {3, 1}, {4, 3, 5}}, {{1, 1, 1}, {2}, {1, 1, 2}}};
  for (DType dtype : kAllDTypes) {
    for (const Shapes& s : shapes) {
      const std::int64_t na = num_elements(s.a), nb = num_elements(s.b);
      D va(na), vb(nb);
      for (std::int64_t i = 0; i < na; ++i) va[i] = (i * 7) % 11 - 5;
      for (std::int64_t i = 0; i < nb; ++i) vb[i] = (i * 5) % 9 - 4;
      if (dtype == DType::u8 || dtype == DType::boolean) {
        for (double& v : va) v = std::fabs(v) > 3 ? 1 : 0;
        for (double& v : vb) v = std::fabs(v) > 2 ? 1 : 0;
      }
      const Array a = Array::from_doubles(va, s.a, dtype);
      const Array b = Array::from_doubles(vb, s.b, dtype);
      const Array mx = maximum(a, b);
      const Array mn = minimum(a, b);
      ASSERT_EQ(mx.shape(), s.out);
      EXPECT_EQ(mx.dtype(), dtype);
      // The reference walks the output's multi-index and reads each operand at its broadcast position.
      const D gx = mx.to_doubles(), gn = mn.to_doubles();
      const std::int64_t n = num_elements(s.out);
      for (std::int64_t o = 0; o < n; ++o) {
        std::int64_t ia = 0, ib = 0, rest = o, sa = 1, sb = 1;
        for (std::size_t k = s.out.size(); k-- > 0;) {
          const std::int64_t idx = rest % s.out[k];
          rest /= s.out[k];
          const std::size_t off_a = s.out.size() - s.a.size(), off_b = s.out.size() - s.b.size();
          if (k >= off_a && s.a[k - off_a] != 1) ia += idx * sa;
          if (k >= off_a) sa *= s.a[k - off_a];
          if (k >= off_b && s.b[k - off_b] != 1) ib += idx * sb;
          if (k >= off_b) sb *= s.b[k - off_b];
        }
        EXPECT_EQ(gx[o], RefMax(va[ia], vb[ib])) << dtype_name(dtype) << " " << shape_str(s.a) << shape_str(s.b);
        EXPECT_EQ(gn[o], RefMin(va[ia], vb[ib])) << dtype_name(dtype) << " " << shape_str(s.a) << shape_str(s.b);
      }
    }
  }
}

TEST(MaximumMinimum, NanPropagatesAndTiesKeepTheFirstOperand) {
  const Array a = Array::from_doubles({kNaN, 1, kNaN, -0.0, 0.0, -kInf}, {6}, DType::f32);
  const Array b = Array::from_doubles({1, kNaN, 2, 0.0, -0.0, kInf}, {6}, DType::f32);
  for (DType dtype : kFloatDTypes) {
    const Array x = a.astype(dtype), y = b.astype(dtype);
    const D mx = maximum(x, y).to_doubles(), mn = minimum(x, y).to_doubles();
    const std::string what(dtype_name(dtype));
    EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mx[2])) << what;
    EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mn[1]) && std::isnan(mn[2])) << what;
    EXPECT_TRUE(std::signbit(mx[3])) << what;   // maximum(-0., 0.) is -0. in numpy
    EXPECT_FALSE(std::signbit(mx[4])) << what;  // maximum(0., -0.) is 0.
    EXPECT_TRUE(std::signbit(mn[3])) << what;
    EXPECT_FALSE(std::signbit(mn[4])) << what;
    EXPECT_EQ(mx[5], kInf) << what;
    EXPECT_EQ(mn[5], -kInf) << what;
  }
}

TEST(MaximumMinimum, PromotionAndWeakScalars) {
  const Array i = Array::from_list<std::int32_t>({-2, 0, 3});
  const Array f = Array::from_list<float>({-1.5f, 0.5f, 1.5f});
  EXPECT_EQ(maximum(i, f).dtype(), DType::f32);
  EXPECT_EQ(maximum(i, f).to_doubles(), (D{-1.5, 0.5, 3}));
  // The scalar takes the array's dtype: 1.7 becomes int32 1.
  EXPECT_EQ(maximum(i, 1.7).dtype(), DType::i32);
  EXPECT_EQ(maximum(i, 1.7).to_doubles(), (D{1, 1, 3}));
  EXPECT_EQ(minimum(Array::from_doubles({1, 3}, {2}, DType::f16), 2.0).dtype(), DType::f16);
  EXPECT_EQ(minimum(Array::from_doubles({1, 3}, {2}, DType::f16), 2.0).to_doubles(), (D{1, 2}));
  EXPECT_EQ(maximum(Array::from_list<bool>({true, false}), Array::from_list<bool>({false, false})).to_doubles(),
            (D{1, 0}));
}

TEST(MaximumMinimum, BadBroadcastNamesTheOpAndBothShapes) {
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { maximum(Array::zeros({2, 3}), Array::zeros({4})); }),
            "maximum: operands could not be broadcast together with shapes (2, 3) (4,)");
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { minimum(Array::zeros({5}), Array::zeros({2, 1, 4})); }),
            "minimum: operands could not be broadcast together with shapes (5,) (2, 1, 4)");
}

// ---- where ----------------------------------------------------------------------------------------------------

TEST(Where, ThreeWayBroadcastAgainstAReference) {
  // cond (2, 1, 3), a (4, 1), b (3,) -> (2, 4, 3)
  const D vc = {1, 0, 1, 0, 0, 1};
  const D va = {10, 20, 30, 40};
  const D vb = {-1, -2, -3};
  const Array got = where(Array::from_doubles(vc, {2, 1, 3}, DType::boolean),
                          Array::from_doubles(va, {4, 1}, DType::f32), Array::from_doubles(vb, {3}, DType::f32));
  ASSERT_EQ(got.shape(), (Shape{2, 4, 3}));
  D ref;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) ref.push_back(vc[i * 3 + k] != 0 ? va[j] : vb[k]);
  EXPECT_EQ(got.to_doubles(), ref);
}

TEST(Where, AScalarBranchAgainstAReference) {
  // The one-pass loops for a scalar branch (either side), against the definition element by element.
  const D vc = {1, 0, 0, 1, 1, 0, 1};
  const D va = {1, 2, 3, 4, 5, 6, 7};
  const Array cond = Array::from_doubles(vc, {7}, DType::boolean);
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::u8}) {
    const Array a = Array::from_doubles(va, {7}, dtype);
    const Array s = Array::scalar(-0.0 + 9, dtype);
    D right, left;
    for (std::size_t i = 0; i < vc.size(); ++i) {
      right.push_back(vc[i] != 0 ? va[i] : 9);
      left.push_back(vc[i] != 0 ? 9 : va[i]);
    }
    EXPECT_EQ(where(cond, a, s).to_doubles(), right) << dtype_name(dtype);
    EXPECT_EQ(where(cond, s, a).to_doubles(), left) << dtype_name(dtype);
  }
}

TEST(Where, ConditionIsNonzeroOfAnyDType) {
  // NaN is nonzero (true); -0. is zero (false), as numpy's bool() of them.
  const Array cond = Array::from_doubles({kNaN, -0.0, 2.5, 0.0}, {4}, DType::f32);
  const Array a = Array::full({4}, 1, DType::i32);
  const Array b = Array::full({4}, 2, DType::i32);
  EXPECT_EQ(where(cond, a, b).to_doubles(), (D{1, 2, 1, 2}));
  EXPECT_EQ(where(Array::from_list<std::int8_t>({0, -3}), a.slice(0, 2), b.slice(0, 2)).to_doubles(), (D{2, 1}));
}

TEST(Where, PromotesBothBranchesAndKeepsBitsExactly) {
  const Array cond = Array::from_list<bool>({true, false, true});
  const Array i = Array::from_list<std::int32_t>({1, 2, 3});
  const Array f = Array::from_doubles({-0.0, kNaN, 0.25}, {3}, DType::f32);
  const Array got = where(cond, i, f);
  EXPECT_EQ(got.dtype(), DType::f32);
  const D g = got.to_doubles();
  EXPECT_EQ(g[0], 1);
  EXPECT_TRUE(std::isnan(g[1]));
  EXPECT_EQ(g[2], 3);
  const Array h = where(cond, Array::from_doubles({-0.0, 1, 2}, {3}, DType::bf16), 7.0);  // scalar takes bf16
  EXPECT_EQ(h.dtype(), DType::bf16);
  EXPECT_TRUE(std::signbit(h.value_at(0)));
  EXPECT_EQ(h.to_doubles(), (D{-0.0, 7, 2}));
  for (DType dtype : kAllDTypes) {
    const Array x = Array::ones({2, 2}, dtype), y = Array::zeros({2, 2}, dtype);
    const Array c = Array::from_list<bool>({true, false, false, true}).reshape({2, 2});
    EXPECT_EQ(where(c, x, y).to_doubles(), (D{1, 0, 0, 1})) << dtype_name(dtype);
    EXPECT_EQ(where(c, x, y).dtype(), dtype);
  }
}

TEST(Where, BadBroadcastNamesAllThreeShapes) {
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { where(Array::zeros({2}), Array::zeros({3}), Array::zeros({4})); }),
            "where: operands could not be broadcast together with shapes (2,) (3,) (4,)");
  EXPECT_EQ(ErrorOf<InvalidArgument>([] { where(Array::zeros({2, 3}), Array::zeros({3}), Array::zeros({2})); }),
            "where: operands could not be broadcast together with shapes (2, 3) (3,) (2,)");
}

// ---- clip -------------------------------------------------------------------------------------------------------

TEST(Clip, IsMinimumOfMaximum) {
  const D in = {-3, -1, 0, 0.5, 2, kNaN, -kInf, kInf};
  const Array x = Array::from_doubles(in, {8}, DType::f32);
  struct Case {
    std::optional<double> lo, hi;
    D out;
  };
  const Case cases[] = {
      {-1.0, 1.0, {-1, -1, 0, 0.5, 1, kNaN, -1, 1}},
      {0.0, std::nullopt, {0, 0, 0, 0.5, 2, kNaN, 0, kInf}},
      {std::nullopt, 0.0, {-3, -1, 0, 0, 0, kNaN, -kInf, 0}},
      {std::nullopt, std::nullopt, in},
      {2.0, 1.0, {1, 1, 1, 1, 1, kNaN, 1, 1}},  // lo > hi: numpy gives hi
  };
  for (const Case& c : cases) {
    const D got = clip(x, c.lo, c.hi).to_doubles();
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (std::isnan(c.out[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      } else {
        EXPECT_EQ(got[i], c.out[i]) << i;
      }
    }
  }
  const Array i = Array::from_list<std::int32_t>({-5, 0, 5});
  EXPECT_EQ(clip(i, -2.0, 3.0).dtype(), DType::i32);
  EXPECT_EQ(clip(i, -2.0, 3.0).to_doubles(), (D{-2, 0, 3}));
  EXPECT_EQ(clip(Array::from_doubles({0.1, 0.9}, {2}, DType::f16), 0.25, 0.75).to_doubles(), (D{0.25, 0.75}));
}

// The programs' fused GELU (weft.nn.gelu on tracers) and its derivative against double formulas, over
// [-12, 12] in chunks of odd sizes (the tanh's vectorised chunks and its |u| > 7.5 fallback both run), in
// float32 and float64; the derivative also against a central difference of the double GELU.
TEST(Transcendental, FusedGeluAndItsDerivative) {
  const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
  auto gelu = [&](double x) { return 0.5 * x * (1.0 + std::tanh(c * (x + a * x * x * x))); };
  D in, ref, dref;
  for (int i = 0; i <= 24001; ++i) {
    const double x = -12.0 + i * 0.001;
    in.push_back(x);
    ref.push_back(gelu(x));
    const double h = 1e-5;
    dref.push_back((gelu(x + h) - gelu(x - h)) / (2 * h));
  }
  const auto n = static_cast<std::int64_t>(in.size());
  for (DType dtype : {DType::f32, DType::f64}) {
    const Array x = Array::from_doubles(in, {n}, dtype);
    D ref_rounded = ref, dref_rounded = dref;
    if (dtype == DType::f32) {
      for (std::size_t i = 0; i < in.size(); ++i) {
        const double xf = static_cast<float>(in[i]);
        ref_rounded[i] = gelu(xf);
        dref_rounded[i] = (gelu(xf + 1e-5) - gelu(xf - 1e-5)) / 2e-5;
      }
    }
    const Array y = weft::detail::gelu_tanh(x);
    EXPECT_EQ(y.dtype(), dtype);
    // 1 + tanh(u) cancels for negative x (as in JAX's formula): the error is the dtype's epsilon times |x|,
    // absolute, not relative to the tiny result.
    ExpectClose(y, ref_rounded, Tolerance{dtype == DType::f32 ? 1e-6 : 1e-12, dtype == DType::f32 ? 2e-6 : 1e-14},
                "gelu_tanh");
    // The derivative: the difference quotient is good to ~1e-10, float32's own rounding to ~1e-6.
    ExpectClose(weft::detail::gelu_tanh_derivative(x), dref_rounded,
                Tolerance{dtype == DType::f32 ? 1e-5 : 1e-9, dtype == DType::f32 ? 1e-5 : 1e-9},
                "gelu_tanh_derivative");
  }
}


}  // namespace elementwise_math_test
}  // namespace
}  // namespace weft
