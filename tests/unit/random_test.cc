// weft::random against JAX's classic threefry PRNG: the cipher on Random123's known-answer vectors, keys,
// splits, bits and samples on values JAX publishes (its tests and documentation, each cited where used), the
// counter layout on a naive reference written here, and the distributions on statistics with fixed keys.
//
// Every statistical check is deterministic (fixed keys), so it either always passes or always fails; its
// threshold is set so that a truly random stream would fail it with probability about 1e-6 or less (stated
// per check), which is the chance that a correct generator happens to fail it for the chosen key.
#include "weft/random.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/dtype.hpp"
#include "weft/error.hpp"

namespace weft::random {
namespace {
namespace random_test {

using Words = std::array<std::uint32_t, 2>;

// 5 standard deviations: two-sided normal tail probability 5.7e-7.
constexpr double kSigmas = 5.0;

std::vector<std::uint32_t> as_u32(const Array& bits_array) {
  std::vector<std::uint32_t> out;
  for (std::int64_t v : bits_array.to_vector<std::int64_t>()) out.push_back(static_cast<std::uint32_t>(v));
  return out;
}

// JAX's threefry_2x32(key, iota(n)) written out from prng.py with the scalar cipher: the counters, padded
// with one zero when n is odd, are split into halves paired position by position; the outputs are the
// first words, then the second words, padding dropped.
std::vector<std::uint32_t> hash_iota_reference(const Key& key, std::uint32_t n) {
  const std::uint32_t half = (n + 1) / 2;
  std::vector<std::uint32_t> counts(2 * half, 0);
  for (std::uint32_t i = 0; i < n; ++i) counts[i] = i;
  std::vector<std::uint32_t> out(2 * half);
  for (std::uint32_t i = 0; i < half; ++i) {
    const Words y = threefry2x32(key.words, {counts[i], counts[half + i]});
    out[i] = y[0];
    out[half + i] = y[1];
  }
  out.resize(n);
  return out;
}

// zlib's Adler-32 (RFC 1950), which JAX's random_test.py uses to derive the seeds of its value cases.
std::uint32_t adler32(std::string_view text) {
  std::uint32_t a = 1, b = 0;
  for (unsigned char c : text) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

struct Moments {
  double mean, variance, skewness, excess_kurtosis;
};
Moments moments(const std::vector<double>& x) {
  const double n = static_cast<double>(x.size());
  double mean = 0;
  for (double v : x) mean += v;
  mean /= n;
  double m2 = 0, m3 = 0, m4 = 0;
  for (double v : x) {
    const double d = v - mean;
    m2 += d * d;
    m3 += d * d * d;
    m4 += d * d * d * d;
  }
  m2 /= n, m3 /= n, m4 /= n;
  return {mean, m2, m3 / std::pow(m2, 1.5), m4 / (m2 * m2) - 3.0};
}

// Kolmogorov-Smirnov distance between the sample and a continuous CDF.
double ks_distance(std::vector<double> x, const std::function<double(double)>& cdf) {
  std::sort(x.begin(), x.end());
  const double n = static_cast<double>(x.size());
  double d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double f = cdf(x[i]);
    d = std::max({d, (static_cast<double>(i) + 1) / n - f, f - static_cast<double>(i) / n});
  }
  return d;
}

// Critical KS distance for n samples at false-failure probability 1e-6: P(sqrt(n) D > t) ~ 2 exp(-2 t^2)
// (Kolmogorov's limit, conservative for n = 1e5), t = sqrt(ln(2e6) / 2) = 2.6934.
double ks_critical(std::size_t n) { return std::sqrt(std::log(2e6) / 2) / std::sqrt(static_cast<double>(n)); }

double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const Moments ma = moments(a), mb = moments(b);
  double c = 0;
  for (std::size_t i = 0; i < a.size(); ++i) c += (a[i] - ma.mean) * (b[i] - mb.mean);
  return c / static_cast<double>(a.size()) / std::sqrt(ma.variance * mb.variance);
}

// ---- the cipher --------------------------------------------------------------------------------------------

TEST(Threefry, Random123KnownAnswerVectors) {
  // Random123 examples/kat_vectors, the "threefry2x32 20" lines (CTR, KEY, EXPECTED), as in
  // github.com/girving/random123-manual at 61e84792; JAX's tests/random_test.py testThreefry2x32 checks the
  // same three (citing DEShawResearch/Random123-Boost libs/random/test/test_threefry.cpp).
  struct Case {
    Words counter, key, expected;
  };
  const std::vector<Case> cases = {
      {{0x00000000, 0x00000000}, {0x00000000, 0x00000000}, {0x6b200159, 0x99ba4efe}},
      {{0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x1cb996fc, 0xbb002be7}},
      {{0x243f6a88, 0x85a308d3}, {0x13198a2e, 0x03707344}, {0xc4923a9c, 0x483df7a0}},
  };
  for (const Case& c : cases) EXPECT_EQ(threefry2x32(c.key, c.counter), c.expected);
}

// ---- keys ----------------------------------------------------------------------------------------------------

TEST(Key, FromSeedAsJaxWithX64) {
  // JAX tests/random_test.py test_prng_seeds_and_keys, the jax_enable_x64 expectations (a 64-bit seed's high
  // word is kept); seeds below 2^32 give the same key in JAX's default 32-bit mode too.
  const std::int64_t i32_max = 2147483647, i32_min = -2147483648LL;
  const std::vector<std::pair<std::int64_t, Words>> cases = {
      {0, {0, 0}},
      {1, {0, 1}},
      {3, {0, 3}},
      {-1, {4294967295u, 4294967295u}},
      {-3, {4294967295u, 4294967293u}},
      {i32_max + 100, {0, 2147483747u}},
      {i32_max + 101, {0, 2147483748u}},
      {i32_min - 100, {4294967295u, 2147483548u}},
      {i32_min - 101, {4294967295u, 2147483547u}},
  };
  for (const auto& [seed, words] : cases) EXPECT_EQ(key(static_cast<std::uint64_t>(seed)).words, words) << seed;
  EXPECT_EQ(key(0x123456789abcdef0ull).words, (Words{0x12345678u, 0x9abcdef0u}));
}

TEST(Key, Printing) {
  EXPECT_EQ(to_string(Key{{0, 42}}), "Key(0, 42)");
  std::ostringstream os;
  os << key(0xffffffff00000001ull);
  EXPECT_EQ(os.str(), "Key(4294967295, 1)");
}

TEST(Split, JaxDocumentationExample) {
  // JAX docs/notebooks/Common_Gotchas_in_JAX.ipynb (the "Random Numbers" cells, as of jax-ml/jax 225a2a5f8b^):
  // key, subkey = random.split(random.PRNGKey(0)) prints new key [4146024105 967050713] and new subkey
  // [2718843009 1272950319]; splitting that new key again gives [2384771982 3928867769] and
  // [1278412471 2182328957].
  const auto [k1, s1] = split2(key(0));
  EXPECT_EQ(k1.words, (Words{4146024105u, 967050713u}));
  EXPECT_EQ(s1.words, (Words{2718843009u, 1272950319u}));
  const auto [k2, s2] = split2(k1);
  EXPECT_EQ(k2.words, (Words{2384771982u, 3928867769u}));
  EXPECT_EQ(s2.words, (Words{1278412471u, 2182328957u}));
  const std::vector<Key> two = split(key(0), 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], k1);
  EXPECT_EQ(two[1], s1);
}

TEST(Split, JaxPrngValues) {
  // JAX tests/random_test.py testPRNGValues (classic threefry): split(PRNGKey(0), 4) and fold_in(PRNGKey(0), 4).
  const std::vector<Words> expected = {
      {2285895361u, 1501764800u}, {1518642379u, 4090693311u}, {433833334u, 4221794875u}, {839183663u, 3740430601u}};
  const std::vector<Key> keys = split(key(0), 4);
  ASSERT_EQ(keys.size(), expected.size());
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(keys[i].words, expected[i]) << i;
  EXPECT_EQ(fold_in(key(0), 4).words, (Words{2285895361u, 433833334u}));
}

TEST(Split, IsTheHashOfAnIotaTwiceAsLong) {
  // _threefry_split_original: split(key, n) = threefry_2x32(key, iota(2n)) reshaped (n, 2).
  const Key k = key(20240601);
  for (int n : {0, 1, 2, 3, 5, 300, 513}) {
    const std::vector<std::uint32_t> words = hash_iota_reference(k, static_cast<std::uint32_t>(2 * n));
    const std::vector<Key> keys = split(k, n);
    ASSERT_EQ(keys.size(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) EXPECT_EQ(keys[i].words, (Words{words[2 * i], words[2 * i + 1]})) << n << " " << i;
  }
}

TEST(FoldIn, IsTheCipherOnTheCounterZeroData) {
  // _threefry_fold_in: threefry_2x32(key, threefry_seed(data)) and threefry_seed(data) = [0, data].
  const Key k = key(7);
  for (std::uint32_t data : {0u, 1u, 4u, 123456u, 0xffffffffu}) {
    EXPECT_EQ(fold_in(k, data).words, threefry2x32(k.words, {0u, data})) << data;
  }
}

// ---- bits --------------------------------------------------------------------------------------------------

TEST(Bits, JaxRngRandomBits) {
  // JAX tests/random_test.py testRngRandomBits: random.bits(PRNGKey(1701), (3,), 'uint32').
  const Array b = bits(key(1701), {3});
  EXPECT_EQ(b.dtype(), DType::i64);
  EXPECT_EQ(b.shape(), (Shape{3}));
  EXPECT_EQ(as_u32(b), (std::vector<std::uint32_t>{56197195u, 4200222568u, 961309823u}));
}

TEST(Bits, CounterLayoutMatchesTheReference) {
  // Odd sizes (padding), chunk boundaries of the vectorised cipher (512 pairs) and a multi-dimensional shape,
  // which draws by element count only.
  const Key k = key(99);
  for (std::uint32_t n : {0u, 1u, 2u, 3u, 4u, 7u, 1023u, 1024u, 1025u, 1026u, 5001u}) {
    EXPECT_EQ(as_u32(bits(k, {n})), hash_iota_reference(k, n)) << n;
  }
  const Array grid = bits(k, {3, 5});
  EXPECT_EQ(grid.shape(), (Shape{3, 5}));
  EXPECT_EQ(as_u32(grid), hash_iota_reference(k, 15));
  EXPECT_EQ(bits(k, {}).shape(), Shape{});
  EXPECT_EQ(as_u32(bits(k, {})), hash_iota_reference(k, 1));
}

// ---- uniform ---------------------------------------------------------------------------------------------

TEST(Uniform, EveryWidthFromJaxPublishedBits) {
  // JAX tests/random_test.py testRngRandomBits publishes the 64-, 16- and 8-bit draws of PRNGKey(1701), (3,).
  // _uniform keeps the top nmant bits as a mantissa in [1, 2) and subtracts 1, so the floats are
  // (b >> (width - nmant)) * 2^-nmant: float64 from 64-bit bits (52), float16 from 16-bit bits (10),
  // bfloat16 from 8-bit bits (7).
  const std::vector<std::uint64_t> b64 = {3982329540505020460ull, 16822122385914693683ull, 7882654074788531506ull};
  const std::vector<std::uint32_t> b16 = {41682, 1300, 55017};
  const std::vector<std::uint32_t> b8 = {216, 115, 43};
  const std::vector<double> f64 = uniform(key(1701), {3}, DType::f64).to_doubles();
  const std::vector<double> f16 = uniform(key(1701), {3}, DType::f16).to_doubles();
  const std::vector<double> bf16 = uniform(key(1701), {3}, DType::bf16).to_doubles();
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f64[i], std::ldexp(static_cast<double>(b64[i] >> 12), -52)) << i;
    EXPECT_EQ(f16[i], std::ldexp(static_cast<double>(b16[i] >> 6), -10)) << i;
    EXPECT_EQ(bf16[i], std::ldexp(static_cast<double>(b8[i] >> 1), -7)) << i;
  }
}

TEST(Uniform, Float32IsTheTop23BitsScaled) {
  // Closed form of _uniform for float32 on the reference words: f = (w >> 9) * 2^-23, then f * (max - min) + min
  // in float32, then max(min, .).
  const Key k = key(5);
  const std::vector<std::uint32_t> w = hash_iota_reference(k, 1001);
  // The scaled value may round up to maxval itself when the range is narrow for its magnitude (as in JAX),
  // hence <= at the top.
  const std::vector<std::pair<double, double>> ranges = {{0.0, 1.0}, {-3.0, 5.0}, {2.5, 2.75}, {-1e-3, 0.0}};
  for (const auto& [lo, hi] : ranges) {
    const Array u = uniform(k, {1001}, DType::f32, lo, hi);
    ASSERT_EQ(u.dtype(), DType::f32);
    const auto got = u.data<float>();
    const float flo = static_cast<float>(lo), span = static_cast<float>(hi) - flo;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const float f = std::ldexp(static_cast<float>(w[i] >> 9), -23);
      ASSERT_EQ(got[i], std::max(flo, f * span + flo)) << lo << " " << hi << " " << i;
      ASSERT_GE(got[i], flo);
      ASSERT_LE(got[i], static_cast<float>(hi));
    }
  }
}

TEST(Uniform, ClampsAtMinvalAndPropagatesNan) {
  // max(minval, .) after scaling: with maxval < minval every value is minval (JAX's lax.max); NaN bounds give NaN.
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (double v : uniform(key(1), {100}, dtype, 1.0, 0.0).to_doubles()) ASSERT_EQ(v, 1.0) << dtype_name(dtype);
    for (double v : uniform(key(1), {10}, dtype, std::nan(""), 1.0).to_doubles()) ASSERT_TRUE(std::isnan(v));
  }
}

TEST(Uniform, SixteenBitFloatsRoundEveryStep) {
  // _uniform for float16 / bfloat16 in closed form on the reference words: 16-bit values (bfloat16: 8-bit,
  // nmant = 7 < 8) cut little end first from the 32-bit words, f = (b >> (width - nmant)) * 2^-nmant, then
  // span = max - min, f * span and + min each rounded to the format (16-bit ops), then max(min, .).
  const Key k = key(6);
  const std::uint32_t n = 999;
  struct Format {
    DType dtype;
    int width, nmant;
    std::uint16_t (*round)(float);
    float (*load)(std::uint16_t);
  };
  const std::vector<Format> formats = {{DType::f16, 16, 10, float_to_half, half_to_float},
                                       {DType::bf16, 8, 7, float_to_bf16, bf16_to_float}};
  const std::vector<std::pair<double, double>> ranges = {{0.0, 1.0}, {-0.99951171875, 1.0}, {-3.0, 5.0}, {0.1, 0.3}};
  for (const Format& fmt : formats) {
    const std::uint32_t per_word = 32 / static_cast<std::uint32_t>(fmt.width);
    const std::vector<std::uint32_t> words = hash_iota_reference(k, (n + per_word - 1) / per_word);
    auto r = [&](float v) { return fmt.load(fmt.round(v)); };
    for (const auto& [lo_d, hi_d] : ranges) {
      const float lo = r(static_cast<float>(lo_d)), hi = r(static_cast<float>(hi_d));
      const float span = r(hi - lo);
      const std::vector<double> got = uniform(k, {n}, fmt.dtype, lo_d, hi_d).to_doubles();
      for (std::uint32_t j = 0; j < n; ++j) {
        const std::uint32_t b = (words[j / per_word] >> (fmt.width * (j % per_word))) & ((1u << fmt.width) - 1);
        const float f = std::ldexp(static_cast<float>(b >> (fmt.width - fmt.nmant)), -fmt.nmant);
        ASSERT_EQ(got[j], std::max(lo, r(r(f * span) + lo))) << dtype_name(fmt.dtype) << " " << lo_d << " " << j;
      }
    }
  }
}

TEST(Uniform, Moments) {
  // n = 1e6: mean within 5 sd of 1/2 (sd = sqrt(1/12 / n)); variance within 5 sd of 1/12, where the sample
  // variance's sd is sqrt((mu4 - sigma^4) / n) = sqrt((1/80 - 1/144) / n). Each: false-failure p = 5.7e-7.
  const double n = 1e6;
  for (DType dtype : {DType::f32, DType::f64}) {
    const Moments m = moments(uniform(key(2024), {1000000}, dtype).to_doubles());
    EXPECT_NEAR(m.mean, 0.5, kSigmas * std::sqrt(1.0 / 12 / n)) << dtype_name(dtype);
    EXPECT_NEAR(m.variance, 1.0 / 12, kSigmas * std::sqrt((1.0 / 80 - 1.0 / 144) / n)) << dtype_name(dtype);
  }
}

TEST(Uniform, KolmogorovSmirnov) {
  // n = 1e5 against the exact CDF of U(-2, 3); D below the critical value for false-failure p = 1e-6.
  for (DType dtype : {DType::f32, DType::f64}) {
    const std::vector<double> x = uniform(key(31337), {100000}, dtype, -2.0, 3.0).to_doubles();
    const double d = ks_distance(x, [](double v) { return std::clamp((v + 2.0) / 5.0, 0.0, 1.0); });
    EXPECT_LT(d, ks_critical(x.size())) << dtype_name(dtype);
  }
}

// ---- normal ------------------------------------------------------------------------------------------------

TEST(Normal, JaxDocumentationValues) {
  // JAX docs/notebooks/Common_Gotchas_in_JAX.ipynb ("Random Numbers", jax-ml/jax 225a2a5f8b^), float32 printed
  // to round-trip precision, so equality is exact: normal(PRNGKey(0), (1,)) = -0.20584226; after
  // key, subkey = split(key): normal(subkey) = -1.2515389, then -0.58665055; then key, *subkeys = split(key, 4)
  // gives -0.37533438, 0.98645043, 0.14553197. (docs/jep/4410-omnistaging.md has -1.2515389 for the first
  // subkey too.)
  EXPECT_EQ(normal(key(0), {1}).item<float>(), -0.20584226f);
  Key k = key(0);
  std::vector<float> drawn;
  for (int i = 0; i < 2; ++i) {
    const auto [next, subkey] = split2(k);
    k = next;
    drawn.push_back(normal(subkey, {1}).item<float>());
  }
  const std::vector<Key> four = split(k, 4);
  for (int i = 1; i < 4; ++i) drawn.push_back(normal(four[i], {1}).item<float>());
  EXPECT_EQ(drawn, (std::vector<float>{-1.2515389f, -0.58665055f, -0.37533438f, 0.98645043f, 0.14553197f}));
}

TEST(Distributions, JaxRandomValuesCases) {
  // JAX tests/random_test.py _RANDOM_VALUES_CASES (threefry2x32, checked without x64), each drawn from
  // PRNGKey(zlib.adler32(name + "threefry2x32")) with shape (5,), compared there with assertAllClose
  // (float32 tolerance 1e-6) on six printed decimals.
  const std::vector<float> u = uniform(key(adler32("uniformthreefry2x32")), {5}).to_vector<float>();
  const std::vector<float> z = normal(key(adler32("normalthreefry2x32")), {5}).to_vector<float>();
  const std::vector<double> u_expected = {0.298671, 0.073213, 0.873356, 0.260549, 0.412797};
  const std::vector<double> z_expected = {-1.173234, -1.511662, 0.070593, -0.099764, 1.052845};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(u[i], u_expected[i], 1e-6) << i;
    EXPECT_NEAR(z[i], z_expected[i], 1e-6) << i;
  }
  const Array b = bernoulli(key(adler32("bernoullithreefry2x32")), 0.5, {5});
  EXPECT_EQ(b.dtype(), DType::boolean);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{false, true, true, true, false}));
}

// Solves erf(z / sqrt(2)) = u for z by Newton's method in long double from a close start, as an independent
// reference for the erfinv inside normal. Odd symmetry keeps u >= 0, and above 1/2 the equation is posed on
// erfc(z / sqrt(2)) = 1 - u (1 - u is exact), so the tails keep their relative precision.
double inverse_normal_reference(double u, double start) {
  if (u < 0) return -inverse_normal_reference(-u, -start);
  long double z = start;
  for (int i = 0; i < 6; ++i) {
    const long double r = u > 0.5 ? (1.0L - u) - std::erfc(z / std::sqrt(2.0L)) : std::erf(z / std::sqrt(2.0L)) - u;
    const long double slope = std::sqrt(2.0L / std::acos(-1.0L)) * std::exp(-z * z / 2);
    z -= r / slope;  // both residuals increase with z at the rate sqrt(2/pi) exp(-z^2/2)
  }
  return static_cast<double>(z);
}

// How far (in ulps of the result) z lies outside the exact inverses of u perturbed by a relative `rel`:
// XLA's erfinv forms w = -log1p(-u * u), and the rounding of u * u is the backward error that dominates in
// the tails (1 - u^2 cancels), so that is the interval a faithful evaluation lands in.
template <class T>
double ulps_outside(double u, T z, double rel) {
  const double top = std::nextafter(1.0, 0.0);
  const double a = inverse_normal_reference(std::clamp(u * (1 - rel), -top, top), z);
  const double b = inverse_normal_reference(std::clamp(u * (1 + rel), -top, top), z);
  const T mid = static_cast<T>(inverse_normal_reference(u, z));
  const double ulp = static_cast<double>(std::nextafter(std::fabs(mid), std::numeric_limits<T>::max()) - std::fabs(mid));
  const double zd = static_cast<double>(z);
  return std::max({0.0, std::min(a, b) - zd, zd - std::max(a, b)}) / ulp;
}

TEST(Normal, IsSqrt2ErfinvOfTheUniformOnOpenMinusOneOne) {
  // _normal_real: u = uniform(key, shape, nextafter(-1, 0), 1), z = sqrt(2) * erfinv(u). u comes from the
  // reference words in closed form; z must be within 4 ulps of the exact inverse of u perturbed by one
  // rounding of u * u (relative 2^-23 in float32, 2^-52 in float64). Without that perturbation the float32
  // tail is off by up to ~90 ulps and the float64 tail by ~1000 ulps: JAX's numbers, reproduced here.
  const Key k = key(77);
  const std::uint32_t n = 20001;
  const std::vector<std::uint32_t> w = hash_iota_reference(k, n);
  const std::vector<float> z32 = normal(k, {n}).to_vector<float>();
  double worst32 = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const float f = std::ldexp(static_cast<float>(w[i] >> 9), -23);
    const float u = std::max(std::nextafter(-1.0f, 0.0f), f * 2.0f + std::nextafter(-1.0f, 0.0f));
    worst32 = std::max(worst32, ulps_outside(u, z32[i], std::ldexp(1.0, -23)));
  }
  EXPECT_LE(worst32, 4.0);

  const std::vector<std::uint32_t> w64 = hash_iota_reference(k, 2 * n);
  const std::vector<double> z64 = normal(k, {n}, DType::f64).to_vector<double>();
  double worst64 = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t b = (static_cast<std::uint64_t>(w64[i]) << 32) | w64[n + i];
    const double f = std::ldexp(static_cast<double>(b >> 12), -52);
    const double u = std::max(std::nextafter(-1.0, 0.0), f * 2.0 + std::nextafter(-1.0, 0.0));
    worst64 = std::max(worst64, ulps_outside(u, z64[i], std::ldexp(1.0, -52)));
  }
  EXPECT_LE(worst64, 4.0);
}

// StableHLO's erfInv32 transcribed (stablehlo/transforms/ChloLegalizeToStablehlo.cpp, what JAX's
// lax.erf_inv lowers to; XLA's ErfInv32 in xla/hlo/builder/lib/math.cc is the same): w = -log1p(x * -x),
// Giles' single-precision coefficients by branch, Horner in float32, then p * x. log1p correctly rounded.
float xla_erfinv_f32(float x) {
  const float small[9] = {2.81022636e-08f, 3.43273939e-07f, -3.5233877e-06f, -4.39150654e-06f, 0.00021858087f,
                          -0.00125372503f, -0.00417768164f, 0.246640727f,    1.50140941f};
  const float large[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f, -0.00367342844f, 0.00573950773f,
                          -0.0076224613f,   0.00943887047f,   1.00167406f,    2.83297682f};
  const float w = -static_cast<float>(std::log1p(static_cast<double>(x * -x)));
  const bool lt = w < 5.0f;
  const float v = lt ? w - 2.5f : std::sqrt(w) - 3.0f;
  float p = lt ? small[0] : large[0];
  for (int i = 1; i < 9; ++i) p = (lt ? small[i] : large[i]) + p * v;
  return p * x;
}

TEST(Normal, Float32IsXlasErfinvToTheBit) {
  // Bit for bit against the transcription on 20001 draws, tails included: there the single rounding of
  // x * x decides the last bits (a more accurate 1 - x^2 would give other numbers than JAX's).
  const Key k = key(78);
  const std::uint32_t n = 20001;
  const std::vector<std::uint32_t> w = hash_iota_reference(k, n);
  const std::vector<float> z = normal(k, {n}).to_vector<float>();
  const float lo = std::nextafter(-1.0f, 0.0f);
  const float sqrt2 = static_cast<float>(std::sqrt(2.0));
  int tails = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const float u = std::max(lo, std::ldexp(static_cast<float>(w[i] >> 9), -23) * 2.0f + lo);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(z[i]), std::bit_cast<std::uint32_t>(sqrt2 * xla_erfinv_f32(u))) << i;
    tails += std::fabs(z[i]) > 3.0f;
  }
  EXPECT_GT(tails, 20);  // about 0.27% of 20001 lie beyond 3 sd
}

TEST(Normal, SixteenBitFloatsFollowJaxsRoundingSteps) {
  // The jaxpr for 16-bit floats: u = uniform in the format on (nextafter(-1, 0), 1) (checked above), erf_inv
  // upcast to float32 and rounded back to the format, times sqrt(2) rounded to the format, rounded.
  const Key k = key(3);
  struct Format {
    DType dtype;
    double lo;
    std::uint16_t (*round)(float);
    float (*load)(std::uint16_t);
  };
  const std::vector<Format> formats = {{DType::f16, -0.99951171875, float_to_half, half_to_float},
                                       {DType::bf16, -0.99609375, float_to_bf16, bf16_to_float}};
  for (const Format& fmt : formats) {
    auto r = [&](float v) { return fmt.load(fmt.round(v)); };
    const std::vector<double> u = uniform(k, {4000}, fmt.dtype, fmt.lo, 1.0).to_doubles();
    const Array z = normal(k, {4000}, fmt.dtype);
    ASSERT_EQ(z.dtype(), fmt.dtype);
    const std::vector<double> zd = z.to_doubles();
    const float sqrt2 = r(static_cast<float>(std::sqrt(2.0)));
    for (std::size_t i = 0; i < u.size(); ++i) {
      ASSERT_EQ(zd[i], r(sqrt2 * r(xla_erfinv_f32(static_cast<float>(u[i]))))) << dtype_name(fmt.dtype) << " " << i;
    }
  }
}

TEST(Normal, Moments) {
  // n = 1e6 standard normals: mean (sd 1/sqrt(n)), variance (sd sqrt(2/n)), skewness (sd sqrt(6/n)) and
  // excess kurtosis (sd sqrt(24/n)) each within 5 sd: false-failure p = 5.7e-7 each.
  const double n = 1e6;
  for (DType dtype : {DType::f32, DType::f64}) {
    const Moments m = moments(normal(key(4242), {1000, 1000}, dtype).to_doubles());
    EXPECT_NEAR(m.mean, 0.0, kSigmas * std::sqrt(1 / n)) << dtype_name(dtype);
    EXPECT_NEAR(m.variance, 1.0, kSigmas * std::sqrt(2 / n)) << dtype_name(dtype);
    EXPECT_NEAR(m.skewness, 0.0, kSigmas * std::sqrt(6 / n)) << dtype_name(dtype);
    EXPECT_NEAR(m.excess_kurtosis, 0.0, kSigmas * std::sqrt(24 / n)) << dtype_name(dtype);
  }
}

TEST(Normal, KolmogorovSmirnov) {
  // n = 1e5 against Phi(x) = erfc(-x / sqrt(2)) / 2; D below the critical value for p = 1e-6.
  for (DType dtype : {DType::f32, DType::f64}) {
    const std::vector<double> x = normal(key(8), {100000}, dtype).to_doubles();
    const double d = ks_distance(x, [](double v) { return 0.5 * std::erfc(-v / std::sqrt(2.0)); });
    EXPECT_LT(d, ks_critical(x.size())) << dtype_name(dtype);
  }
}

// ---- bernoulli ---------------------------------------------------------------------------------------------

TEST(Bernoulli, IsUniformBelowP) {
  // _bernoulli: uniform(key, shape, float32) < p.
  const Key k = key(12);
  const std::vector<float> u = uniform(k, {2, 500}).to_vector<float>();
  for (double p : {0.0, 0.25, 0.5, 0.999, 1.0}) {
    const Array b = bernoulli(k, p, {2, 500});
    ASSERT_EQ(b.shape(), (Shape{2, 500}));
    const std::vector<bool> got = b.to_vector<bool>();
    for (std::size_t i = 0; i < u.size(); ++i) ASSERT_EQ(got[i], u[i] < static_cast<float>(p)) << p << " " << i;
  }
  // Strictly below: p equal to a drawn value gives false there, the next float up gives true.
  EXPECT_FALSE(bernoulli(k, u[0], {2, 500}).to_vector<bool>()[0]);
  EXPECT_TRUE(bernoulli(k, std::nextafter(u[0], 2.0f), {2, 500}).to_vector<bool>()[0]);
  const std::vector<bool> ones = bernoulli(k, 1.0, {1000}).to_vector<bool>();
  EXPECT_TRUE(std::all_of(ones.begin(), ones.end(), [](bool v) { return v; }));
  const std::vector<bool> zeros = bernoulli(k, 0.0, {1000}).to_vector<bool>();
  EXPECT_TRUE(std::none_of(zeros.begin(), zeros.end(), [](bool v) { return v; }));
}

TEST(Bernoulli, Frequency) {
  // n = 1e6 draws with p = 0.3: the count within 5 sd of np (sd = sqrt(np(1 - p))): p = 5.7e-7.
  const double n = 1e6, p = 0.3;
  const std::vector<bool> b = bernoulli(key(555), p, {1000000}).to_vector<bool>();
  const double count = static_cast<double>(std::count(b.begin(), b.end(), true));
  EXPECT_NEAR(count, n * p, kSigmas * std::sqrt(n * p * (1 - p)));
}

// ---- permutation -------------------------------------------------------------------------------------------

// JAX's _shuffle written out naively: `rounds` times, key, subkey = split(key); stable-sort the values by
// bits(subkey, (n,)). Counts the equal sort keys met on the way in `ties`: where there are some, only a
// stable sort reproduces JAX's order.
std::vector<std::int64_t> shuffle_reference(Key k, std::int64_t n, int rounds, int* ties = nullptr) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = i;
  for (int r = 0; r < rounds; ++r) {
    const std::vector<Key> pair = split(k, 2);
    k = pair[0];
    const std::vector<std::uint32_t> sort_keys = hash_iota_reference(pair[1], static_cast<std::uint32_t>(n));
    std::vector<std::size_t> order(values.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sort_keys[a] < sort_keys[b]; });
    for (std::size_t i = 1; ties != nullptr && i < order.size(); ++i) *ties += sort_keys[order[i]] == sort_keys[order[i - 1]];
    std::vector<std::int64_t> next;
    for (std::size_t i : order) next.push_back(values[i]);
    values = next;
  }
  return values;
}

TEST(Permutation, IsJaxsShuffleOfTheRange) {
  // num_rounds = ceil(3 ln n / ln(2^32 - 1)): 0 for n <= 1, 1 up to 2^(32/3) = 1625.5, 2 up to 2^(64/3) (2.6e6).
  // n = 200000 meets equal 32-bit sort keys (about n^2 / 2^33 = 4.7 pairs per round), checked below, so the
  // tie order (stable, as lax.sort_key_val's default) is exercised.
  const std::vector<std::pair<std::int64_t, int>> cases = {
      {0, 0}, {1, 0}, {2, 1}, {3, 1}, {10, 1}, {1625, 1}, {1626, 2}, {60000, 2}, {200000, 2}};
  for (const auto& [n, rounds] : cases) {
    const Array p = permutation(key(1000 + static_cast<std::uint64_t>(n)), n);
    ASSERT_EQ(p.dtype(), DType::i32);
    ASSERT_EQ(p.shape(), Shape{n});
    std::vector<std::int64_t> got;
    for (std::int32_t v : p.to_vector<std::int32_t>()) got.push_back(v);
    int ties = 0;
    EXPECT_EQ(got, shuffle_reference(key(1000 + static_cast<std::uint64_t>(n)), n, rounds, &ties)) << n;
    if (n == 200000) {
      EXPECT_GT(ties, 0);
    }
    std::vector<std::int64_t> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i) << n;
  }
}

TEST(Permutation, PositionFrequenciesAreFlat) {
  // T = 16000 permutations of 8 (keys fold_in(key, t)); C[v][p] counts value v at position p, expected T/8.
  // C is a sum of T random permutation matrices, whose covariance is P(x)P / (n - 1) with P = I - J/n, so
  // the Pearson sum times (n - 1)/n is chi-square with (n - 1)^2 = 49 degrees of freedom; its 1e-6 upper
  // quantile is 111.14 (regularized upper incomplete gamma, = scipy.stats.chi2.isf(1e-6, 49)).
  const int n = 8, trials = 16000;
  std::vector<double> counts(n * n, 0.0);
  const Key k = key(271828);
  for (int t = 0; t < trials; ++t) {
    const std::vector<std::int32_t> p = permutation(fold_in(k, static_cast<std::uint32_t>(t)), n).to_vector<std::int32_t>();
    for (int pos = 0; pos < n; ++pos) counts[p[pos] * n + pos] += 1;
  }
  const double expected = static_cast<double>(trials) / n;
  double chi2 = 0;
  for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2 * (n - 1) / n, 111.14);
}

TEST(Permutation, OrderingsAreEquallyLikely) {
  // T = 48000 permutations of 4: each of the 24 orderings expected 2000 times; Pearson chi-square with 23
  // degrees of freedom below its 1e-6 upper quantile 70.55.
  const int trials = 48000;
  std::vector<double> counts(256, 0.0);
  const Key k = key(161803);
  for (int t = 0; t < trials; ++t) {
    const std::vector<std::int32_t> p = permutation(fold_in(k, static_cast<std::uint32_t>(t)), 4).to_vector<std::int32_t>();
    counts[p[0] * 64 + p[1] * 16 + p[2] * 4 + p[3]] += 1;
  }
  std::vector<int> order = {0, 1, 2, 3};
  double chi2 = 0, seen = 0;
  do {
    const double c = counts[order[0] * 64 + order[1] * 16 + order[2] * 4 + order[3]];
    seen += c;
    chi2 += (c - 2000.0) * (c - 2000.0) / 2000.0;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(seen, trials);  // every draw was a permutation
  EXPECT_LT(chi2, 70.55);
}

TEST(Permutation, OfAnArrayShufflesTheFirstAxis) {
  // permutation(key, x) = x[permutation(key, len(x))] along axis 0 (for 1-d x JAX sorts x itself: the same).
  const Key k = key(9);
  const Array order = permutation(k, 5);
  const std::vector<std::int32_t> idx = order.to_vector<std::int32_t>();
  const Array rows = Array::arange(15, DType::f32).reshape({5, 3});
  const std::vector<float> shuffled = permutation(k, rows).to_vector<float>();
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(shuffled[i * 3 + j], static_cast<float>(idx[i] * 3 + j));
  }
  const Array x = Array::from_list<std::int64_t>({10, 11, 12, 13, 14});
  const std::vector<std::int64_t> y = permutation(k, x).to_vector<std::int64_t>();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(y[i], 10 + idx[i]);
  EXPECT_TRUE(permutation(k, Array::scalar(5, DType::i32)).identical(order));  // an integer scalar is a length
  EXPECT_EQ(permutation(k, Array::zeros({0, 4})).shape(), (Shape{0, 4}));
}

// ---- independence and determinism -------------------------------------------------------------------------

TEST(Keys, DerivedKeysAreDistinct) {
  // Split children, fold_in(key, i) for i < 100000 and the parent: all distinct. For random 64-bit keys a
  // collision among these 1.1e5 keys has probability about 1.1e5^2 / 2^65 = 3e-10.
  const Key parent = key(42);
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen = {{parent.words[0], parent.words[1]}};
  std::size_t total = 1;
  for (const Key& k : split(parent, 10000)) {
    seen.insert({k.words[0], k.words[1]});
    ++total;
  }
  for (std::uint32_t i = 0; i < 100000; ++i) {
    const Key k = fold_in(parent, i);
    seen.insert({k.words[0], k.words[1]});
    ++total;
  }
  EXPECT_EQ(seen.size(), total);
}

TEST(Keys, StreamsOfDerivedKeysAreUncorrelated) {
  // Pearson correlation of uniform streams (n = 1e5) from related keys: sd 1/sqrt(n) under independence;
  // |r| below 5 sd: false-failure p = 5.7e-7 per pair.
  const std::int64_t n = 100000;
  const Key parent = key(1);
  const auto [a, b] = split2(parent);
  const std::vector<Key> three = split(parent, 3);
  const std::vector<std::pair<Key, Key>> pairs = {
      {a, b}, {parent, a}, {parent, b}, {three[0], three[1]}, {three[1], three[2]},
      {fold_in(parent, 0), fold_in(parent, 1)}, {fold_in(parent, 1), fold_in(parent, 2)}, {parent, fold_in(parent, 0)},
      {a, three[0]},
  };
  for (const auto& [x, y] : pairs) {
    const double r = correlation(uniform(x, {n}, DType::f64).to_doubles(), uniform(y, {n}, DType::f64).to_doubles());
    EXPECT_LT(std::fabs(r), kSigmas / std::sqrt(static_cast<double>(n))) << x << " " << y;
  }
}

TEST(Keys, SameKeySameNumbers) {
  const Key k = key(2718);
  EXPECT_TRUE(bits(k, {100}).identical(bits(k, {100})));
  EXPECT_TRUE(normal(k, {10, 10}).identical(normal(k, {10, 10})));
  EXPECT_TRUE(permutation(k, 100).identical(permutation(k, 100)));
  EXPECT_TRUE(normal(k, {4, 25}).reshape({100}).identical(normal(k, {100})));  // element count decides
  EXPECT_FALSE(bits(k, {100}).identical(bits(fold_in(k, 0), {100})));
  EXPECT_EQ(split(k, 3), split(k, 3));
}

// ---- errors ------------------------------------------------------------------------------------------------

TEST(Random, ErrorMessages) {
  const Key k = key(0);
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { split(k, -1); }, "split: the number of keys must be non-negative, got -1"},
      {[&] { bits(k, {2, -1}); }, "bits: negative dimensions are not allowed, got shape (2, -1)"},
      {[&] { uniform(k, {-3}); }, "uniform: negative dimensions are not allowed, got shape (-3,)"},
      {[&] { uniform(k, {3}, DType::i32); }, "uniform: dtype must be a float dtype, got int32"},
      {[&] { normal(k, {3}, DType::boolean); }, "normal: dtype must be a float dtype, got bool"},
      {[&] { bernoulli(k, 0.5, {-1}); }, "bernoulli: negative dimensions are not allowed, got shape (-1,)"},
      {[&] { permutation(k, -2); }, "permutation: n must be non-negative, got -2"},
      {[&] { permutation(k, Array::scalar(1.5)); },
       "permutation: x must be an integer or at least 1-dimensional, got a float32 scalar"},
  };
  for (const auto& [f, message] : cases) {
    try {
      f();
      ADD_FAILURE() << "no exception, expected: " << message;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
}

// ---- speed -------------------------------------------------------------------------------------------------

TEST(Random, Speed) {
  // Not a benchmark: reports numbers per second, and fails only if initialising a 784 x 512 layer takes a
  // visible fraction of a second (it takes milliseconds).
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const Key k = key(0);
  const auto t0 = Clock::now();
  const Array u = uniform(k, {1000000});
  const auto t1 = Clock::now();
  const Array z = normal(k, {1000000});
  const auto t2 = Clock::now();
  const Array layer = normal(k, {784, 512});
  const auto t3 = Clock::now();
  std::cout << "uniform float32: " << 1e6 / seconds(t0, t1) / 1e6 << " M numbers/s; normal float32: "
            << 1e6 / seconds(t1, t2) / 1e6 << " M numbers/s; normal (784, 512): " << seconds(t2, t3) * 1e3 << " ms\n";
  ::testing::Test::RecordProperty("uniform_f32_per_s", std::to_string(1e6 / seconds(t0, t1)));
  ::testing::Test::RecordProperty("normal_f32_per_s", std::to_string(1e6 / seconds(t1, t2)));
  EXPECT_EQ(u.size() + z.size(), 2000000);
  EXPECT_LT(seconds(t2, t3), 0.5);
}

}  // namespace random_test
}  // namespace
}  // namespace weft::random
