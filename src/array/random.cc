// Counter-based random numbers (weft/random.hpp): the threefry-2x32 block cipher and JAX's classic
// (non-partitionable) ways of turning a key into keys, bits and floats, so that a weft program seeded like a
// JAX program draws the same numbers. Every function is pure: the output depends on the key and the request
// only, which is what makes draws reproducible across threads, replicas and processes.
//
// Sources followed step by step: jax/_src/prng.py (threefry_seed, threefry_2x32, _threefry_split_original,
// _threefry_fold_in, _threefry_random_bits_original), jax/_src/random.py (_uniform, _normal_real, _bernoulli,
// _shuffle, permutation) and StableHLO's chlo.erf_inv lowering (ChloLegalizeToStablehlo.cpp, erfInv32 and
// erfInv64, ported from XLA's ErfInv).
#include "weft/random.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <type_traits>
#include <utility>

#include "weft/error.hpp"

namespace weft::random {
namespace {

// ---- the cipher -----------------------------------------------------------------------------------------

constexpr std::uint32_t kParity = 0x1BD11BDA;  // Threefish's key-schedule constant, 32-bit variant

inline std::uint32_t rotl(std::uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

// Four mixing rounds; threefry-2x32 alternates two rotation sets between key injections.
template <int R0, int R1, int R2, int R3>
inline void four_rounds(std::uint32_t& x0, std::uint32_t& x1) {
  x0 += x1; x1 = rotl(x1, R0); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, R1); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, R2); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, R3); x1 ^= x0;
}

// 20 rounds, a key injection (with the injection counter added to word 1) after every 4.
inline void encrypt(std::uint32_t k0, std::uint32_t k1, std::uint32_t& x0, std::uint32_t& x1) {
  const std::uint32_t k2 = k0 ^ k1 ^ kParity;
  x0 += k0; x1 += k1;
  four_rounds<13, 15, 26, 6>(x0, x1);  x0 += k1; x1 += k2 + 1u;
  four_rounds<17, 29, 16, 24>(x0, x1); x0 += k2; x1 += k0 + 2u;
  four_rounds<13, 15, 26, 6>(x0, x1);  x0 += k0; x1 += k1 + 3u;
  four_rounds<17, 29, 16, 24>(x0, x1); x0 += k1; x1 += k2 + 4u;
  four_rounds<13, 15, 26, 6>(x0, x1);  x0 += k2; x1 += k0 + 5u;
}

// JAX's threefry_2x32(key, iota(n)): the counters 0..n-1, padded with one zero when n is odd, are cut into
// halves that enter the cipher as word 0 and word 1; the output is all word-0 results, then all word-1
// results, padding dropped. n < 2^32. Chunks of plain arrays let the compiler vectorise the cipher.
void hash_iota(const Key& key, std::uint64_t n, std::uint32_t* out) {
  if (n == 0) return;
  const std::uint64_t half = (n + 1) / 2;
  constexpr std::uint64_t kChunk = 512;
  std::uint32_t x0[kChunk];
  std::uint32_t x1[kChunk];
  const std::uint32_t k0 = key.words[0];
  const std::uint32_t k1 = key.words[1];
  for (std::uint64_t base = 0; base < half; base += kChunk) {
    const std::uint64_t m = std::min(kChunk, half - base);
    for (std::uint64_t i = 0; i < m; ++i) {
      x0[i] = static_cast<std::uint32_t>(base + i);
      x1[i] = static_cast<std::uint32_t>(half + base + i);
    }
    const bool padded = (n % 2 == 1) && base + m == half;
    if (padded) x1[m - 1] = 0;
    for (std::uint64_t i = 0; i < m; ++i) encrypt(k0, k1, x0[i], x1[i]);
    std::memcpy(out + base, x0, m * sizeof(std::uint32_t));
    std::memcpy(out + half + base, x1, (padded ? m - 1 : m) * sizeof(std::uint32_t));
  }
}

// JAX's 32-bit word stream for `count` words (_threefry_random_bits_original): one hash of an iota while the
// counters fit in 32 bits; beyond 2^32 - 1 words, one hash of iota(2^32 - 1) per key of a split, then the rest.
std::vector<std::uint32_t> random_words(const Key& key, std::uint64_t count) {
  std::vector<std::uint32_t> words(count);
  constexpr std::uint64_t kBlock = 0xFFFFFFFFull;
  const std::uint64_t nblocks = count / kBlock;
  const std::uint64_t rem = count % kBlock;
  if (nblocks == 0) {
    hash_iota(key, rem, words.data());
    return words;
  }
  const std::vector<Key> keys = split(key, static_cast<int>(nblocks + 1));
  for (std::uint64_t b = 0; b < nblocks; ++b) hash_iota(keys[b], kBlock, words.data() + b * kBlock);
  hash_iota(keys.back(), rem, words.data() + nblocks * kBlock);
  return words;
}

// 16- and 8-bit values as JAX cuts them from 32-bit words: value j is bits [w*(j%k), w*(j%k+1)) of word j/k,
// k = 32/w (little end first), over ceil(w*size/32) words.
std::vector<std::uint16_t> random_bits16(const Key& key, std::uint64_t size) {
  const std::vector<std::uint32_t> words = random_words(key, (size + 1) / 2);
  std::vector<std::uint16_t> out(size);
  for (std::uint64_t j = 0; j < size; ++j) out[j] = static_cast<std::uint16_t>(words[j / 2] >> (16 * (j % 2)));
  return out;
}
std::vector<std::uint8_t> random_bits8(const Key& key, std::uint64_t size) {
  const std::vector<std::uint32_t> words = random_words(key, (size + 3) / 4);
  std::vector<std::uint8_t> out(size);
  for (std::uint64_t j = 0; j < size; ++j) out[j] = static_cast<std::uint8_t>(words[j / 4] >> (8 * (j % 4)));
  return out;
}

// ---- floats -----------------------------------------------------------------------------------------------

std::uint64_t checked_size(const char* op, const Shape& shape) {
  for (std::int64_t d : shape) {
    if (d < 0) {
      throw InvalidArgument(std::string(op) + ": negative dimensions are not allowed, got shape " + shape_str(shape));
    }
  }
  return static_cast<std::uint64_t>(num_elements(shape));
}

// lax.max: NaN if either side is NaN.
template <class T>
T nan_max(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a > b ? a : b;
}

// _uniform for float32: the top 23 bits as the mantissa of a float in [1, 2), minus 1, scaled, clamped below.
std::vector<float> uniform_f32(const Key& key, std::uint64_t size, float lo, float hi) {
  const std::vector<std::uint32_t> words = random_words(key, size);
  std::vector<float> out(size);
  const float span = hi - lo;
  for (std::uint64_t i = 0; i < size; ++i) {
    const float f = std::bit_cast<float>((words[i] >> 9) | 0x3F800000u) - 1.0f;
    out[i] = nan_max(lo, f * span + lo);
  }
  return out;
}

// _uniform for float64: 64-bit values whose high words are the first half of 2 * size words and whose low
// words are the second half; the top 52 bits become the mantissa.
std::vector<double> uniform_f64(const Key& key, std::uint64_t size, double lo, double hi) {
  const std::vector<std::uint32_t> words = random_words(key, 2 * size);
  std::vector<double> out(size);
  const double span = hi - lo;
  for (std::uint64_t i = 0; i < size; ++i) {
    const std::uint64_t b = (static_cast<std::uint64_t>(words[i]) << 32) | words[size + i];
    const double f = std::bit_cast<double>((b >> 12) | 0x3FF0000000000000ull) - 1.0;
    out[i] = nan_max(lo, f * span + lo);
  }
  return out;
}

// A 16-bit float format: its bit patterns, converted to and from float32 (rounding to nearest even).
struct Half16 {
  static float load(std::uint16_t b) { return half_to_float(b); }
  static std::uint16_t store(float f) { return float_to_half(f); }
  static std::uint16_t from_double(double d) { return double_to_half(d); }
};
struct Brain16 {
  static float load(std::uint16_t b) { return bf16_to_float(b); }
  static std::uint16_t store(float f) { return float_to_bf16(f); }
  static std::uint16_t from_double(double d) { return double_to_bf16(d); }
};

// _uniform for float16 (16 random bits, 10 mantissa bits) and bfloat16 (8 random bits widened, 7 mantissa
// bits), each arithmetic step rounded to the format as the jaxpr's 16-bit ops are.
template <class F>
std::vector<std::uint16_t> uniform_16(const Key& key, std::uint64_t size, std::uint16_t lo_bits, std::uint16_t hi_bits) {
  constexpr bool kHalf = std::is_same_v<F, Half16>;
  std::vector<std::uint16_t> raw(size);
  if constexpr (kHalf) {
    const std::vector<std::uint16_t> b = random_bits16(key, size);
    for (std::uint64_t i = 0; i < size; ++i) raw[i] = static_cast<std::uint16_t>((b[i] >> 6) | 0x3C00u);
  } else {
    const std::vector<std::uint8_t> b = random_bits8(key, size);
    for (std::uint64_t i = 0; i < size; ++i) raw[i] = static_cast<std::uint16_t>((b[i] >> 1) | 0x3F80u);
  }
  const float lo = F::load(lo_bits);
  const float span = F::load(F::store(F::load(hi_bits) - lo));
  std::vector<std::uint16_t> out(size);
  for (std::uint64_t i = 0; i < size; ++i) {
    const float f = F::load(raw[i]) - 1.0f;  // exact: a multiple of the format's epsilon in [0, 1)
    const float v = F::load(F::store(F::load(F::store(f * span)) + lo));
    out[i] = F::store(nan_max(lo, v));
  }
  return out;
}

// erf^-1 in float32 as XLA and StableHLO's chlo.erf_inv compute it (M. Giles, "Approximating the erfinv
// function", GPU Computing Gems Jade, 2011: single precision, two polynomial branches in w = -log(1 - x^2)).
// log1p is evaluated in double and rounded once, i.e. correctly rounded almost always; XLA's backends use
// their own log1p here (its last bit can differ between JAX on CPU and on GPU).
float erfinv_f32(float x) {
  static constexpr float kSmall[9] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                      -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                      -0.00417768164f,  0.246640727f,    1.50140941f};
  static constexpr float kLarge[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                      -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                      0.00943887047f,   1.00167406f,     2.83297682f};
  // XLA maps x = +-1 to +-inf; normal never gets there (u <= 1 - 3 * 2^-24), so that branch is left out.
  const float t = x * -x;
  float w = -static_cast<float>(std::log1p(static_cast<double>(t)));
  const bool small = w < 5.0f;
  const float* c = small ? kSmall : kLarge;
  w = small ? w - 2.5f : std::sqrt(w) - 3.0f;
  float p = c[0];
  for (int i = 1; i < 9; ++i) p = c[i] + p * w;
  return p * x;
}

// erf^-1 in float64 as chlo.erf_inv computes it: Giles' double-precision approximation, three branches
// (w < 6.25, w < 16, beyond) with 23, 19 and 17 coefficients. Its error is that of the rounding of x * x
// (1 - x^2 cancels in the tails), about one ulp of the input u; the draws have no finer resolution anyway.
double erfinv_f64(double x) {
  static constexpr double kW625[23] = {
      -3.6444120640178196996e-21, -1.685059138182016589e-19,  1.2858480715256400167e-18,
      1.115787767802518096e-17,   -1.333171662854620906e-16,  2.0972767875968561637e-17,
      6.6376381343583238325e-15,  -4.0545662729752068639e-14, -8.1519341976054721522e-14,
      2.6335093153082322977e-12,  -1.2975133253453532498e-11, -5.4154120542946279317e-11,
      1.051212273321532285e-09,   -4.1126339803469836976e-09, -2.9070369957882005086e-08,
      4.2347877827932403518e-07,  -1.3654692000834678645e-06, -1.3882523362786468719e-05,
      0.0001867342080340571352,   -0.00074070253416626697512, -0.0060336708714301490533,
      0.24015818242558961693,     1.6536545626831027356};
  static constexpr double kW16[19] = {
      2.2137376921775787049e-09,  9.0756561938885390979e-08,  -2.7517406297064545428e-07,
      1.8239629214389227755e-08,  1.5027403968909827627e-06,  -4.013867526981545969e-06,
      2.9234449089955446044e-06,  1.2475304481671778723e-05,  -4.7318229009055733981e-05,
      6.8284851459573175448e-05,  2.4031110387097893999e-05,  -0.0003550375203628474796,
      0.00095328937973738049703,  -0.0016882755560235047313,  0.0024914420961078508066,
      -0.0037512085075692412107,  0.005370914553590063617,    1.0052589676941592334,
      3.0838856104922207635};
  static constexpr double kWBig[17] = {
      -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
      -3.7894654401267369937e-09, 7.6157012080783393804e-09,  -1.4960026627149240478e-08,
      2.9147953450901080826e-08,  -6.7711997758452339498e-08, 2.2900482228026654717e-07,
      -9.9298272942317002539e-07, 4.5260625972231537039e-06,  -1.9681778105531670567e-05,
      7.5995277030017761139e-05,  -0.00021503011930044477347, -0.00013871931833623122026,
      1.0103004648645343977,      4.8499064014085844221};
  double w = -std::log1p(x * -x);
  const double* c;
  int degree;
  if (w < 6.25) {
    c = kW625, degree = 23, w -= 3.125;
  } else if (w < 16.0) {
    c = kW16, degree = 19, w = std::sqrt(w) - 3.25;
  } else {
    c = kWBig, degree = 17, w = std::sqrt(w) - 5.0;
  }
  double p = c[0];
  for (int i = 1; i < degree; ++i) p = c[i] + p * w;
  return p * x;
}

template <class T>
Array array_of(const Shape& shape, DType dtype, const std::vector<T>& values) {
  Array out = Array::empty(shape, dtype);
  if (!values.empty()) std::memcpy(out.mutable_bytes(), values.data(), values.size() * sizeof(T));
  return out;
}

template <class F>
Array normal_16(const Key& key, const Shape& shape, DType dtype, std::uint64_t size) {
  // lo = nextafter(-1, 0) in the format: -1's pattern minus one (sign-magnitude, toward zero).
  const std::uint16_t minus_one = F::store(-1.0f);
  std::vector<std::uint16_t> u = uniform_16<F>(key, size, static_cast<std::uint16_t>(minus_one - 1), F::store(1.0f));
  // erf_inv upcasts 16-bit floats to float32 and rounds its result back; the sqrt(2) product is 16-bit.
  const float sqrt2 = F::load(F::from_double(std::sqrt(2.0)));
  for (std::uint16_t& v : u) v = F::store(sqrt2 * F::load(F::store(erfinv_f32(F::load(v)))));
  return array_of(shape, dtype, u);
}

// JAX's _shuffle applied to 0..n-1: ceil(3 ln n / ln(2^32 - 1)) rounds, each a stable sort of the values by
// fresh 32-bit keys from the second key of a split (the first carries on).
std::vector<std::int64_t> shuffled_indices(Key key, std::int64_t n) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = i;
  const int rounds =
      static_cast<int>(std::ceil(3.0 * std::log(static_cast<double>(std::max<std::int64_t>(1, n))) /
                                 std::log(static_cast<double>(std::numeric_limits<std::uint32_t>::max()))));
  const std::uint64_t count = static_cast<std::uint64_t>(n);
  std::vector<std::int64_t> next(values.size());
  for (int r = 0; r < rounds; ++r) {
    const auto [carry, subkey] = split2(key);
    key = carry;
    const std::vector<std::uint32_t> sort_keys = random_words(subkey, count);
    if (count <= (1ull << 32)) {
      // (sort key, position) packed into one word: unique, so an unstable sort gives the stable order.
      std::vector<std::uint64_t> packed(count);
      for (std::uint64_t i = 0; i < count; ++i) packed[i] = (static_cast<std::uint64_t>(sort_keys[i]) << 32) | i;
      std::sort(packed.begin(), packed.end());
      for (std::uint64_t i = 0; i < count; ++i) next[i] = values[packed[i] & 0xFFFFFFFFull];
    } else {
      std::vector<std::uint64_t> order(count);
      for (std::uint64_t i = 0; i < count; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(),
                       [&](std::uint64_t a, std::uint64_t b) { return sort_keys[a] < sort_keys[b]; });
      for (std::uint64_t i = 0; i < count; ++i) next[i] = values[order[i]];
    }
    values.swap(next);
  }
  return values;
}

}  // namespace

std::string to_string(const Key& key) {
  return "Key(" + std::to_string(key.words[0]) + ", " + std::to_string(key.words[1]) + ")";
}
std::ostream& operator<<(std::ostream& os, const Key& key) { return os << to_string(key); }

std::array<std::uint32_t, 2> threefry2x32(std::array<std::uint32_t, 2> key, std::array<std::uint32_t, 2> counter) {
  encrypt(key[0], key[1], counter[0], counter[1]);
  return counter;
}

Key key(std::uint64_t seed) {
  return Key{{static_cast<std::uint32_t>(seed >> 32), static_cast<std::uint32_t>(seed & 0xFFFFFFFFull)}};
}

std::vector<Key> split(const Key& key, int n) {
  if (n < 0) throw InvalidArgument("split: the number of keys must be non-negative, got " + std::to_string(n));
  std::vector<std::uint32_t> words(2 * static_cast<std::size_t>(n));
  hash_iota(key, words.size(), words.data());
  std::vector<Key> keys(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i].words = {words[2 * i], words[2 * i + 1]};
  return keys;
}

std::pair<Key, Key> split2(const Key& key) {
  const std::vector<Key> keys = split(key, 2);
  return {keys[0], keys[1]};
}

Key fold_in(const Key& key, std::uint32_t data) {
  // threefry_2x32(key, threefry_seed(data)): the seed of a 32-bit value is the counter pair (0, data).
  return Key{threefry2x32(key.words, {0u, data})};
}

Array bits(const Key& key, const Shape& shape) {
  const std::uint64_t size = checked_size("bits", shape);
  const std::vector<std::uint32_t> words = random_words(key, size);
  return array_of(shape, DType::i64, std::vector<std::int64_t>(words.begin(), words.end()));
}

Array uniform(const Key& key, const Shape& shape, DType dtype, double minval, double maxval) {
  const std::uint64_t size = checked_size("uniform", shape);
  switch (dtype) {
    case DType::f32:
      return array_of(shape, dtype,
                      uniform_f32(key, size, static_cast<float>(minval), static_cast<float>(maxval)));
    case DType::f64:
      return array_of(shape, dtype, uniform_f64(key, size, minval, maxval));
    case DType::f16:
      return array_of(shape, dtype,
                      uniform_16<Half16>(key, size, double_to_half(minval), double_to_half(maxval)));
    case DType::bf16:
      return array_of(shape, dtype,
                      uniform_16<Brain16>(key, size, double_to_bf16(minval), double_to_bf16(maxval)));
    default:
      throw InvalidArgument("uniform: dtype must be a float dtype, got " + std::string(dtype_name(dtype)));
  }
}

Array normal(const Key& key, const Shape& shape, DType dtype) {
  const std::uint64_t size = checked_size("normal", shape);
  switch (dtype) {
    case DType::f32: {
      std::vector<float> v = uniform_f32(key, size, std::nextafter(-1.0f, 0.0f), 1.0f);
      const float sqrt2 = static_cast<float>(std::sqrt(2.0));
      for (float& x : v) x = sqrt2 * erfinv_f32(x);
      return array_of(shape, dtype, v);
    }
    case DType::f64: {
      std::vector<double> v = uniform_f64(key, size, std::nextafter(-1.0, 0.0), 1.0);
      const double sqrt2 = std::sqrt(2.0);
      for (double& x : v) x = sqrt2 * erfinv_f64(x);
      return array_of(shape, dtype, v);
    }
    case DType::f16:
      return normal_16<Half16>(key, shape, dtype, size);
    case DType::bf16:
      return normal_16<Brain16>(key, shape, dtype, size);
    default:
      throw InvalidArgument("normal: dtype must be a float dtype, got " + std::string(dtype_name(dtype)));
  }
}

Array bernoulli(const Key& key, double p, const Shape& shape) {
  const std::uint64_t size = checked_size("bernoulli", shape);
  // JAX compares in p's dtype: a Python float is float32 under JAX's default (32-bit) configuration.
  const std::vector<float> u = uniform_f32(key, size, 0.0f, 1.0f);
  const float threshold = static_cast<float>(p);
  std::vector<std::uint8_t> out(size);
  for (std::uint64_t i = 0; i < size; ++i) out[i] = u[i] < threshold ? 1 : 0;
  return array_of(shape, DType::boolean, out);
}

Array permutation(const Key& key, std::int64_t n) {
  if (n < 0) throw InvalidArgument("permutation: n must be non-negative, got " + std::to_string(n));
  const std::vector<std::int64_t> order = shuffled_indices(key, n);
  if (n >= (std::int64_t{1} << 31)) return array_of({n}, DType::i64, order);
  return array_of({n}, DType::i32, std::vector<std::int32_t>(order.begin(), order.end()));
}

Array permutation(const Key& key, const Array& x) {
  if (x.ndim() == 0) {
    if (!is_integer(x.dtype())) {
      throw InvalidArgument("permutation: x must be an integer or at least 1-dimensional, got a " +
                            std::string(dtype_name(x.dtype())) + " scalar");
    }
    return permutation(key, static_cast<std::int64_t>(x.value_at(0)));
  }
  const std::int64_t n = x.shape()[0];
  const std::vector<std::int64_t> order = shuffled_indices(key, n);
  Array out = Array::empty(x.shape(), x.dtype());
  const std::size_t row = n == 0 ? 0 : x.nbytes() / static_cast<std::size_t>(n);
  const std::byte* src = x.bytes();
  std::byte* dst = out.mutable_bytes();
  if (row == 0) return out;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t from = static_cast<std::size_t>(order[static_cast<std::size_t>(i)]);
    std::memcpy(dst + static_cast<std::size_t>(i) * row, src + from * row, row);
  }
  return out;
}

}  // namespace weft::random
