// Element types of weft arrays. 16-bit floats are stored as their bit patterns and computed in float32.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft {

enum class DType : std::uint8_t { f32, f64, f16, bf16, i8, i32, i64, u8, boolean };

// Bytes per element.
std::size_t dtype_size(DType dtype);
// numpy's name: "float32", "bfloat16", "bool", ...
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name; throws InvalidArgument naming the unknown text.
DType dtype_from_name(std::string_view name);
bool is_floating(DType dtype);
bool is_integer(DType dtype);  // bool is not an integer here
// The dtype two operands are computed in: the larger along bool < u8 < i8 < i32 < i64 < bf16 < f16 < f32 < f64,
// except float16 with bfloat16 -> float32 and uint8 with int8 -> int32.
DType promote_types(DType a, DType b);

// Maps a C++ element type to its DType tag (float -> f32, ...).
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<std::int8_t> { static constexpr DType value = DType::i8; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

// IEEE half and bfloat16 conversions (round to nearest even), used by kernels and tests.
float half_to_float(std::uint16_t bits);
std::uint16_t float_to_half(float value);
// bfloat16's are inline: every bfloat16 kernel (astype, elementwise, reductions) calls them per element, and
// out of line they cost ~3 ns each (a cast of a 784x512 weight matrix took 1.35 ms; inline, vectorised, ~0.1).
inline float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);  // quiet nan
  const std::uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}
// Directly from double, rounded once (no double rounding through float).
std::uint16_t double_to_half(double value);
std::uint16_t double_to_bf16(double value);

}  // namespace weft
