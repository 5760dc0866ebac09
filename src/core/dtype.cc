// Element types: sizes, numpy names, promotion, and the IEEE half / bfloat16 conversions.
#include "weft/dtype.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <string>

#include "weft/error.hpp"

namespace weft {
namespace {

struct DTypeInfo {
  DType dtype;
  std::size_t size;
  std::string_view name;
};

constexpr std::array<DTypeInfo, 9> kDTypes{{
    {DType::f32, 4, "float32"},
    {DType::f64, 8, "float64"},
    {DType::f16, 2, "float16"},
    {DType::bf16, 2, "bfloat16"},
    {DType::i8, 1, "int8"},
    {DType::i32, 4, "int32"},
    {DType::i64, 8, "int64"},
    {DType::u8, 1, "uint8"},
    {DType::boolean, 1, "bool"},
}};

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<std::size_t>(dtype);
  if (index >= kDTypes.size()) {
    throw InvalidArgument("unknown dtype tag " + std::to_string(index));
  }
  return kDTypes[index];
}

// Rank in the promotion lattice bool < u8 < i8 < i32 < i64 < bf16 < f16 < f32 < f64.
int promotion_rank(DType dtype) {
  switch (dtype) {
    case DType::boolean: return 0;
    case DType::u8: return 1;
    case DType::i8: return 2;
    case DType::i32: return 3;
    case DType::i64: return 4;
    case DType::bf16: return 5;
    case DType::f16: return 6;
    case DType::f32: return 7;
    case DType::f64: return 8;
  }
  return 0;
}

// Rounds `bits` right by `shift` bits, to nearest with ties to even.
std::uint32_t round_shift_right(std::uint32_t bits, int shift) {
  if (shift <= 0) return bits;
  if (shift >= 32) return 0;
  const std::uint32_t kept = bits >> shift;
  const std::uint32_t rest = bits & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u))) return kept + 1;
  return kept;
}

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

DType dtype_from_name(std::string_view name) {
  for (const DTypeInfo& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  std::string valid;
  for (const DTypeInfo& entry : kDTypes) {
    if (!valid.empty()) valid += ", ";
    valid += entry.name;
  }
  throw InvalidArgument("unknown dtype '" + std::string(name) + "'; valid dtypes are " + valid);
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

bool is_integer(DType dtype) {
  return dtype == DType::i8 || dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u8;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  if ((a == DType::u8 && b == DType::i8) || (a == DType::i8 && b == DType::u8)) return DType::i32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

float half_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  std::uint32_t mantissa = bits & 0x3FFu;
  std::uint32_t out = 0;
  if (exponent == 0x1F) {
    out = sign | 0x7F800000u | (mantissa << 13);  // inf / nan (payload kept)
  } else if (exponent != 0) {
    out = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;  // signed zero
  } else {
    // Subnormal half: value = mantissa * 2^-24; normalise for float.
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    out = sign | (static_cast<std::uint32_t>(112 - e) << 23) | ((mantissa & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(out);
}

std::uint16_t float_to_half(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or nan
    if (abs == 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  const int exponent = static_cast<int>(abs >> 23);
  if (exponent < 113) {
    // Half subnormal (or zero): units of 2^-24. value = m * 2^(exponent - 150), m with the hidden bit.
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero
    const std::uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    return static_cast<std::uint16_t>(sign | round_shift_right(m, 126 - exponent));
  }
  // Normal: rebias the exponent and round the mantissa from 23 to 10 bits (a carry may bump the exponent).
  const std::uint32_t biased = (static_cast<std::uint32_t>(exponent - 112) << 10) | ((abs & 0x7FFFFFu) >> 13);
  const std::uint32_t rest = abs & 0x1FFFu;
  std::uint32_t out = biased;
  if (rest > 0x1000u || (rest == 0x1000u && (biased & 1u))) ++out;
  return static_cast<std::uint16_t>(sign | out);
}


namespace {
// double -> float rounding to odd: exact when representable, otherwise the neighbour with an odd last bit.
// Rounding that float to nearest-even in a type with at least two fewer mantissa bits then gives the same
// result as rounding the double directly (no double-rounding error).
float round_to_odd_float(double value) {
  if (!std::isfinite(value)) return static_cast<float>(value);
  if (std::fabs(value) >= 0x1p128) return value > 0 ? INFINITY : -INFINITY;
  float f = static_cast<float>(value);
  if (static_cast<double>(f) == value) return f;
  std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(value)) --bits;  // truncate toward zero (magnitude)
  if (std::isinf(std::bit_cast<float>(bits))) --bits;
  bits |= 1u;
  return std::bit_cast<float>(bits);
}
}  // namespace

std::uint16_t double_to_half(double value) { return float_to_half(round_to_odd_float(value)); }
std::uint16_t double_to_bf16(double value) { return float_to_bf16(round_to_odd_float(value)); }

}  // namespace weft
