// Element storage types and dtype dispatch, shared by the typed kernel files of the core (array_ops.cc,
// the math kernels, random numbers, file formats). Internal: never included by a public header.
//
// Each DType has a storage type S (what sits in memory) and a compute type Traits<S>::C (what arithmetic
// runs in): 16-bit floats are stored as bit patterns and computed in float32, bool as a byte computed as
// bool. dispatch(dtype, f) calls f(Tag<S>{}) with the storage type of `dtype`.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "weft/array.hpp"
#include "weft/error.hpp"

namespace weft::kernels {

struct F16 { std::uint16_t bits; };
struct BF16 { std::uint16_t bits; };
struct Bool8 { std::uint8_t value; };

template <class I>
I float_to_int(double d) {
  // Truncates toward zero like numpy's astype; NaN and out-of-range values give the x86 "integer indefinite"
  // (the minimum value), which is what numpy produces there.
  if constexpr (sizeof(I) >= 4) {
    constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
    constexpr double hi = -lo;  // 2^31 or 2^63
    if (!(d >= lo && d < hi)) return std::numeric_limits<I>::min();
    return static_cast<I>(d);
  } else {
    // 8-bit targets convert through a wide integer and wrap, as C casts do in numpy.
    return static_cast<I>(float_to_int<std::int64_t>(d));
  }
}

template <class S>
struct Traits {  // plain arithmetic storage: float, double and the integers
  using C = S;
  static C load(S s) { return s; }
  static S store(C c) { return c; }
  static S from_double(double d) {
    if constexpr (std::is_floating_point_v<S>) {
      return static_cast<S>(d);
    } else {
      return float_to_int<S>(d);
    }
  }
};
template <>
struct Traits<F16> {
  using C = float;
  static C load(F16 s) { return half_to_float(s.bits); }
  static F16 store(C c) { return {float_to_half(c)}; }
  static F16 from_double(double d) { return {double_to_half(d)}; }
};
template <>
struct Traits<BF16> {
  using C = float;
  static C load(BF16 s) { return bf16_to_float(s.bits); }
  static BF16 store(C c) { return {float_to_bf16(c)}; }
  static BF16 from_double(double d) { return {double_to_bf16(d)}; }
};
template <>
struct Traits<Bool8> {
  using C = bool;
  static C load(Bool8 s) { return s.value != 0; }
  static Bool8 store(C c) { return {static_cast<std::uint8_t>(c ? 1 : 0)}; }
  static Bool8 from_double(double d) { return store(d != 0.0); }
};

template <class S>
using compute_t = typename Traits<S>::C;

template <class S>
double to_double(S s) {
  return static_cast<double>(Traits<S>::load(s));
}

// Converts one element between storage types with numpy's astype semantics.
template <class From, class To>
To convert(From s) {
  using FC = compute_t<From>;
  using TC = compute_t<To>;
  const FC c = Traits<From>::load(s);
  if constexpr (std::is_same_v<To, Bool8>) {
    return Traits<To>::store(c != FC(0));
  } else if constexpr (std::is_floating_point_v<FC> && std::is_integral_v<TC>) {
    return Traits<To>::from_double(static_cast<double>(c));
  } else if constexpr (std::is_same_v<To, F16> || std::is_same_v<To, BF16>) {
    if constexpr (std::is_same_v<FC, float>) {
      return Traits<To>::store(c);
    } else {
      return Traits<To>::from_double(static_cast<double>(c));  // one rounding, not two
    }
  } else {
    return Traits<To>::store(static_cast<TC>(c));
  }
}

template <class T>
struct Tag {
  using type = T;
};

template <class F>
decltype(auto) dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(Tag<float>{});
    case DType::f64: return f(Tag<double>{});
    case DType::f16: return f(Tag<F16>{});
    case DType::bf16: return f(Tag<BF16>{});
    case DType::i8: return f(Tag<std::int8_t>{});
    case DType::i32: return f(Tag<std::int32_t>{});
    case DType::i64: return f(Tag<std::int64_t>{});
    case DType::u8: return f(Tag<std::uint8_t>{});
    case DType::boolean: return f(Tag<Bool8>{});
  }
  throw InvalidArgument("unknown dtype tag " + std::to_string(static_cast<int>(dtype)));
}

template <class S>
const S* elements(const Array& a) {
  return reinterpret_cast<const S*>(a.bytes());
}
template <class S>
S* mutable_elements(Array& a) {
  return reinterpret_cast<S*>(a.mutable_bytes());
}

// ---- scalar arithmetic shared by kernels: integers wrap (two's complement), NaN propagates ------------

template <class C>
using wide_unsigned_t = std::make_unsigned_t<C>;

template <class C>
C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    return static_cast<C>(static_cast<wide_unsigned_t<C>>(a) + static_cast<wide_unsigned_t<C>>(b));
  } else if constexpr (std::is_same_v<C, bool>) {
    return a || b;
  } else {
    return a + b;
  }
}

template <class C>
C wrap_sub(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a != b;  // unreachable: rejected before the kernel runs
  } else if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<wide_unsigned_t<C>>(a) - static_cast<wide_unsigned_t<C>>(b));
  } else {
    return a - b;
  }
}

template <class C>
C wrap_mul(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a && b;
  } else if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<wide_unsigned_t<C>>(a) * static_cast<wide_unsigned_t<C>>(b));
  } else {
    return a * b;
  }
}

template <class C>
C int_power(C base, C exponent) {
  if constexpr (std::is_same_v<C, bool>) {
    return base || !exponent;
  } else {
    if constexpr (std::is_signed_v<C>) {
      if (exponent < 0) throw InvalidArgument("power: integers to negative integer powers are not allowed");
    }
    using U = wide_unsigned_t<C>;
    U result = 1;
    U b = static_cast<U>(base);
    auto e = exponent;
    while (e > 0) {
      if (e & 1) result = static_cast<U>(result * b);
      b = static_cast<U>(b * b);
      e = static_cast<C>(e >> 1);
    }
    return static_cast<C>(result);
  }
}

// max / min with NaN propagating, as numpy.maximum and XLA: a NaN operand wins (the first when both are);
// ties keep `a`. Written as selects, so loops of them vectorise (the array ops, the collectives' kernels).
template <class C>
C max_nan(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return a != a ? a : (b != b ? b : (a < b ? b : a));
  return a < b ? b : a;
}

template <class C>
C min_nan(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return a != a ? a : (b != b ? b : (b < a ? b : a));
  return b < a ? b : a;
}

}  // namespace weft::kernels
