// The contiguous binary loops of the elementwise arithmetic (add, subtract, multiply, divide, maximum,
// minimum) on element types computed as stored (float, double, the integers), shared by the array library's
// fast paths (array_ops.cc) and the program layer's fused loops (src/program/fusion.cc): one definition of
// each op's scalar expression, so a fused program gives the unfused program's bits.
//
// Every loop reads element i of its inputs before writing element i and nothing else, so the output may be
// an input itself (in place). GCC keeps floating-point compares from being if-converted while
// -ftrapping-math is on (its default), so the select-based loops (maximum, minimum) would stay scalar; FP
// exception flags are never read here, so this region is compiled without it. Everything the loops call is
// defined inside the region: GCC does not inline across differing FP options.
#pragma once
#include <cstdint>
#include <type_traits>

#include "array/element_types.hpp"

namespace weft::kernels::binary_loops {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

template <class C>
struct AddF {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return a + b;
    } else {
      return static_cast<C>(static_cast<wide_unsigned_t<C>>(a) + static_cast<wide_unsigned_t<C>>(b));
    }
  }
};
template <class C>
struct SubF {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return a - b;
    } else {
      return static_cast<C>(static_cast<wide_unsigned_t<C>>(a) - static_cast<wide_unsigned_t<C>>(b));
    }
  }
};
template <class C>
struct MulF {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return a * b;
    } else {
      return static_cast<C>(static_cast<wide_unsigned_t<C>>(a) * static_cast<wide_unsigned_t<C>>(b));
    }
  }
};
template <class C>
struct DivF {  // only instantiated for floating types (integer division is promoted to float32 first)
  C operator()(C a, C b) const { return a / b; }
};
// numpy.maximum / numpy.minimum: a NaN operand wins (the first one when both are NaN); ties keep `a`. The
// same decisions as max_nan / min_nan in element_types.hpp, spelled as selects.
template <class C>
struct MaxF {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return a != a ? a : (b != b ? b : (a < b ? b : a));
    } else {
      return a < b ? b : a;
    }
  }
};
template <class C>
struct MinF {
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return a != a ? a : (b != b ? b : (b < a ? b : a));
    } else {
      return b < a ? b : a;
    }
  }
};

template <class C, class F>
void loop_same(const C* a, const C* b, C* out, std::int64_t n) {
  const F f{};
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}
template <class C, class F>
void loop_scalar_b(const C* a, C b, C* out, std::int64_t n) {
  const F f{};
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a[i], b);
}
template <class C, class F>
void loop_scalar_a(C a, const C* b, C* out, std::int64_t n) {
  const F f{};
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(a, b[i]);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

}  // namespace weft::kernels::binary_loops
