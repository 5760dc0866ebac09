// Test inputs and index arithmetic shared by the array-math tests (linalg, reductions, indexing): seeded
// pseudo-random arrays of any dtype, and row-major ravel / unravel for the naive references the tests write.
#pragma once
#include <cstdint>
#include <vector>

#include "weft/array.hpp"

namespace weft::testing {

// Deterministic values of `dtype`: integers in [lo, hi] (bool: 0 or 1; uint8: clamped to >= 0), reproducible
// from `seed`. Small integers are exact in every dtype, so references can compare exactly.
inline Array SampleIntegers(const Shape& shape, DType dtype, std::uint32_t seed, int lo = -8, int hi = 8) {
  if (dtype == DType::u8 && lo < 0) lo = 0;
  if (dtype == DType::boolean) lo = 0, hi = 1;
  std::vector<double> values(static_cast<std::size_t>(num_elements(shape)));
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (double& v : values) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    // The span in 64 bits: hi - lo overflows int for ranges like [-2e9, 2e9] (UBSan found it).
    const auto span = static_cast<std::uint64_t>(static_cast<std::int64_t>(hi) - lo + 1);
    v = static_cast<double>(static_cast<std::int64_t>(lo) + static_cast<std::int64_t>((x >> 33) % span));
  }
  return Array::from_doubles(values, shape, dtype);
}

// Deterministic reals in [-1, 1) on a 2^-12 grid (exact in float32; rounded once in 16-bit floats).
inline Array SampleReals(const Shape& shape, DType dtype, std::uint32_t seed) {
  std::vector<double> values(static_cast<std::size_t>(num_elements(shape)));
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
  for (double& v : values) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<double>(static_cast<std::int64_t>((x >> 33) % 8192) - 4096) / 4096.0;
  }
  return Array::from_doubles(values, shape, dtype);
}

// An exact integer result as `dtype` holds it: two's complement wrap to the dtype's width, bool = nonzero,
// floats unchanged (the tests keep float results small enough to be exact).
inline double WrapTo(std::int64_t v, DType dtype) {
  const auto u = static_cast<std::uint64_t>(v);
  switch (dtype) {
    case DType::i8: return static_cast<std::int8_t>(static_cast<std::uint8_t>(u));
    case DType::u8: return static_cast<std::uint8_t>(u);
    case DType::i32: return static_cast<std::int32_t>(static_cast<std::uint32_t>(u));
    case DType::boolean: return v != 0 ? 1 : 0;
    default: return static_cast<double>(v);
  }
}

// Row-major multi-index of element `flat` of `shape`, and back.
inline std::vector<std::int64_t> Unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    index[k] = flat % shape[k];
    flat /= shape[k];
  }
  return index;
}
inline std::int64_t Ravel(const std::vector<std::int64_t>& index, const Shape& shape) {
  std::int64_t flat = 0;
  for (std::size_t k = 0; k < shape.size(); ++k) flat = flat * shape[k] + index[k];
  return flat;
}

}  // namespace weft::testing
