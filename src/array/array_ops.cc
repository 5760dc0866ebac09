// Typed array kernels: conversions, creation from values, the binary elementwise ops (arithmetic, comparisons,
// bitwise, maximum/minimum) with numpy broadcasting, and the compound assignments. Dtype dispatch is a switch
// over DType calling a template with the element's storage type; the common layouts (equal shapes, a scalar,
// a bias row) take contiguous loops the compiler vectorises.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "array/binary_loops.hpp"
#include "array/broadcast.hpp"
#include "array/element_types.hpp"
#include "array/isa.hpp"
#include "array/trace_hook.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {

using namespace kernels;

std::string dname(DType dtype) { return std::string(dtype_name(dtype)); }

// ---- scalar kernels -------------------------------------------------------------------------------------

enum class Op { add, sub, mul, div, pow, max, min, band, bor, bxor, lt, le, gt, ge, eq, ne };

const char* op_name(Op op) {
  switch (op) {
    case Op::add: return "add";
    case Op::sub: return "subtract";
    case Op::mul: return "multiply";
    case Op::div: return "divide";
    case Op::pow: return "power";
    case Op::max: return "maximum";
    case Op::min: return "minimum";
    case Op::band: return "bitwise_and";
    case Op::bor: return "bitwise_or";
    case Op::bxor: return "bitwise_xor";
    case Op::lt: return "less";
    case Op::le: return "less_equal";
    case Op::gt: return "greater";
    case Op::ge: return "greater_equal";
    case Op::eq: return "equal";
    case Op::ne: return "not_equal";
  }
  return "?";
}

bool is_comparison(Op op) { return op >= Op::lt; }
bool is_bitwise(Op op) { return op == Op::band || op == Op::bor || op == Op::bxor; }

// ---- fast paths ---------------------------------------------------------------------------------------------
// Contiguous loops for the layouts a training step produces (equal shapes, a scalar operand, a bias row), for
// element types that are computed as stored (float, double, the integers). They apply the same scalar
// expression as the generic broadcast walk below (array/binary_loops.hpp), so results are bitwise identical;
// they only let the compiler vectorise. The output may be the first operand itself (in-place `x += y`).
using binary_loops::AddF;
using binary_loops::DivF;
using binary_loops::loop_same;
using binary_loops::loop_scalar_a;
using binary_loops::loop_scalar_b;
using binary_loops::MaxF;
using binary_loops::MinF;
using binary_loops::MulF;
using binary_loops::SubF;

// How each operand maps onto the output, when it does so in one of the fast ways.
struct Layout {
  enum Kind { same, scalar_a, scalar_b, rows_a, rows_b, generic } kind = generic;
  std::int64_t inner = 0;  // rows_*: the repeated operand's size (the output is rows x inner)
};

// True when `s`, without its leading 1s, is the trailing part of `out`: element j of the operand is then
// element j % size of every row of the output.
bool is_trailing_block(const Shape& s, const Shape& out) {
  std::size_t lead = 0;
  while (lead < s.size() && s[lead] == 1) ++lead;
  const std::size_t k = s.size() - lead;
  if (k > out.size()) return false;
  return std::equal(s.begin() + static_cast<std::ptrdiff_t>(lead), s.end(),
                    out.end() - static_cast<std::ptrdiff_t>(k));
}

Layout layout_of(const Shape& sa, const Shape& sb, const Shape& out) {
  // An operand with as many elements as the output covers it one to one (broadcasting only adds elements).
  const std::int64_t n = num_elements(out);
  const std::int64_t na = num_elements(sa);
  const std::int64_t nb = num_elements(sb);
  if (na == n && nb == n) return {Layout::same, 0};
  if (na == n && nb == 1) return {Layout::scalar_b, 0};
  if (nb == n && na == 1) return {Layout::scalar_a, 0};
  if (na == n && is_trailing_block(sb, out)) return {Layout::rows_b, nb};
  if (nb == n && is_trailing_block(sa, out)) return {Layout::rows_a, na};
  return {};
}

template <class C, class F>
void run_fast(const Layout& layout, const C* a, const C* b, C* out, std::int64_t n) {
  switch (layout.kind) {
    case Layout::same: loop_same<C, F>(a, b, out, n); break;
    case Layout::scalar_a: loop_scalar_a<C, F>(a[0], b, out, n); break;
    case Layout::scalar_b: loop_scalar_b<C, F>(a, b[0], out, n); break;
    case Layout::rows_a:
      for (std::int64_t r = 0; r < n; r += layout.inner) loop_same<C, F>(a, b + r, out + r, layout.inner);
      break;
    case Layout::rows_b:
      for (std::int64_t r = 0; r < n; r += layout.inner) loop_same<C, F>(a + r, b, out + r, layout.inner);
      break;
    case Layout::generic: break;
  }
}

// Runs `op` through a fast path if one applies; false leaves the work to the generic walk.
template <class S>
bool try_fast(Op op, const S* a, const Shape& sa, const S* b, const Shape& sb, S* out, const Shape& shape) {
  if constexpr (std::is_same_v<compute_t<S>, S> && !std::is_same_v<S, bool>) {
    const Layout layout = layout_of(sa, sb, shape);
    if (layout.kind == Layout::generic) return false;
    const std::int64_t n = num_elements(shape);
    switch (op) {
      case Op::add: run_fast<S, AddF<S>>(layout, a, b, out, n); return true;
      case Op::sub: run_fast<S, SubF<S>>(layout, a, b, out, n); return true;
      case Op::mul: run_fast<S, MulF<S>>(layout, a, b, out, n); return true;
      case Op::div:
        if constexpr (std::is_floating_point_v<S>) {
          run_fast<S, DivF<S>>(layout, a, b, out, n);
          return true;
        }
        return false;
      case Op::max: run_fast<S, MaxF<S>>(layout, a, b, out, n); return true;
      case Op::min: run_fast<S, MinF<S>>(layout, a, b, out, n); return true;
      default: return false;
    }
  } else {
    (void)op, (void)a, (void)sa, (void)b, (void)sb, (void)out, (void)shape;
    return false;
  }
}

// ---- the generic broadcast walk -------------------------------------------------------------------------------

// `out` is the output's storage (Bool8 for comparisons, S otherwise); it may be `a` itself (see above).
template <class S>
void run_binary(Op op, const S* pa, const Shape& sha, const S* pb, const Shape& shb, void* out, const Shape& shape) {
  using T = Traits<S>;
  using C = compute_t<S>;
  const auto sa = broadcast_strides(sha, shape);
  const auto sb = broadcast_strides(shb, shape);
  if (is_comparison(op)) {
    Bool8* po = static_cast<Bool8*>(out);
    auto cmp = [&](auto pred) {
      for_each_broadcast(shape, sa, sb, [&](std::int64_t o, std::int64_t i, std::int64_t j) {
        po[o] = Traits<Bool8>::store(pred(T::load(pa[i]), T::load(pb[j])));
      });
    };
    switch (op) {
      case Op::lt: cmp([](C a, C b) { return a < b; }); break;
      case Op::le: cmp([](C a, C b) { return a <= b; }); break;
      case Op::gt: cmp([](C a, C b) { return a > b; }); break;
      case Op::ge: cmp([](C a, C b) { return a >= b; }); break;
      case Op::eq: cmp([](C a, C b) { return a == b; }); break;
      case Op::ne: cmp([](C a, C b) { return a != b; }); break;
      default: break;
    }
    return;
  }
  S* po = static_cast<S*>(out);
  if (try_fast<S>(op, pa, sha, pb, shb, po, shape)) return;
  auto apply = [&](auto fn) {
    for_each_broadcast(shape, sa, sb, [&](std::int64_t o, std::int64_t i, std::int64_t j) {
      po[o] = T::store(static_cast<C>(fn(T::load(pa[i]), T::load(pb[j]))));
    });
  };
  switch (op) {
    case Op::add: apply([](C a, C b) { return wrap_add(a, b); }); break;
    case Op::sub: apply([](C a, C b) { return wrap_sub(a, b); }); break;
    case Op::mul: apply([](C a, C b) { return wrap_mul(a, b); }); break;
    case Op::div:
      if constexpr (std::is_floating_point_v<C>) apply([](C a, C b) { return a / b; });
      break;
    case Op::pow:
      if constexpr (std::is_floating_point_v<C>) {
        apply([](C a, C b) { return std::pow(a, b); });
      } else {
        apply([](C a, C b) { return int_power(a, b); });
      }
      break;
    case Op::max: apply([](C a, C b) { return max_nan(a, b); }); break;
    case Op::min: apply([](C a, C b) { return min_nan(a, b); }); break;
    case Op::band:
      if constexpr (std::is_integral_v<C>) apply([](C a, C b) { return static_cast<C>(a & b); });
      break;
    case Op::bor:
      if constexpr (std::is_integral_v<C>) apply([](C a, C b) { return static_cast<C>(a | b); });
      break;
    case Op::bxor:
      if constexpr (std::is_integral_v<C>) apply([](C a, C b) { return static_cast<C>(a ^ b); });
      break;
    default: break;
  }
}

// The dtype `op` computes in for operands of dtypes a and b (after checking that the op allows it).
DType compute_dtype(Op op, DType a, DType b) {
  DType common = promote_types(a, b);
  if (op == Op::div && !is_floating(common)) common = DType::f32;
  if (is_bitwise(op) && is_floating(common)) {
    throw InvalidArgument(std::string(op_name(op)) + ": not supported for dtype " + dname(common) +
                          " (only integer and bool arrays)");
  }
  if (op == Op::sub && common == DType::boolean) {
    throw InvalidArgument("subtract: boolean subtract, the `-` operator, is not supported for dtype bool; use the "
                          "`^` operator instead");
  }
  return common;
}

Shape broadcast_for(Op op, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(op_name(op)) + ": " + e.what());
  }
}

Array binary(const Array& a, const Array& b, Op op) {
  isa::ensure_kernels_supported();
  const DType common = compute_dtype(op, a.dtype(), b.dtype());
  const Shape shape = broadcast_for(op, a.shape(), b.shape());
  if (a.traced() || b.traced()) [[unlikely]] return detail::record1(op_name(op), {a, b});
  const Array x = a.astype(common);
  const Array y = b.astype(common);
  Array out = Array::empty(shape, is_comparison(op) ? DType::boolean : common);
  if (out.size() == 0) return out;
  void* po = out.mutable_bytes();
  dispatch(common, [&](auto tag) {
    using S = typename decltype(tag)::type;
    run_binary<S>(op, elements<S>(x), x.shape(), elements<S>(y), y.shape(), po, shape);
  });
  return out;
}

// target = target op other, written into target's own buffer (copy-on-write: a shared buffer is detached
// first, so other holders never see the change). The result keeps target's dtype and must keep its shape.
void compound_assign(Array& target, const Array& other, Op op, const char* name) {
  isa::ensure_kernels_supported();
  const DType common = compute_dtype(op, target.dtype(), other.dtype());
  const Shape shape = broadcast_for(op, target.shape(), other.shape());
  if (shape != target.shape()) {
    throw InvalidArgument(std::string(name) + ": non-broadcastable output operand with shape " +
                          shape_str(target.shape()) + " doesn't match the broadcast shape " + shape_str(shape));
  }
  if (target.traced() || other.traced()) [[unlikely]] {
    // x op= y on a traced x: x = (x op y) in x's dtype, as the in-place form computes it.
    Array result = binary(target, other, op);
    target = result.dtype() == target.dtype() ? result : result.astype(target.dtype());
    return;
  }
  if (target.size() == 0) return;
  if (common != target.dtype()) {
    // Computed in a wider dtype (int32 += float32, int /= int): convert the result back, as numpy's casting
    // of an in-place output does.
    const Array converted = binary(target, other, op).astype(target.dtype());
    std::memcpy(target.mutable_bytes(), converted.bytes(), target.nbytes());
    return;
  }
  Array converted_other;
  const Array* rhs = &other;
  if (other.dtype() != common) {
    converted_other = other.astype(common);
    rhs = &converted_other;
  }
  void* po = target.mutable_bytes();  // before reading rhs: rhs may be target itself
  dispatch(common, [&](auto tag) {
    using S = typename decltype(tag)::type;
    run_binary<S>(op, static_cast<const S*>(po), target.shape(), elements<S>(*rhs), rhs->shape(), po, shape);
  });
}

}  // namespace

// ---- creation and conversion ------------------------------------------------------------------------------

Array Array::from_doubles(const std::vector<double>& values, Shape shape, DType dtype) {
  if (static_cast<std::int64_t>(values.size()) != num_elements(shape)) {
    throw InvalidArgument("from_doubles: " + std::to_string(values.size()) + " values do not fill shape " +
                          shape_str(shape) + " (" + std::to_string(num_elements(shape)) + " elements)");
  }
  Array out = empty(shape, dtype);
  if (values.empty()) return out;
  dispatch(dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    S* p = mutable_elements<S>(out);
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = Traits<S>::from_double(values[i]);
  });
  return out;
}

Array Array::full(const Shape& shape, double value, DType dtype) {
  Array out = empty(shape, dtype);
  if (out.size() == 0) return out;
  dispatch(dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S v = Traits<S>::from_double(value);
    S* p = mutable_elements<S>(out);
    const std::int64_t n = out.size();  // once: size() is out of line
    for (std::int64_t i = 0; i < n; ++i) p[i] = v;
  });
  return out;
}

Array Array::scalar(double value, DType dtype) { return full({}, value, dtype); }
Array Array::zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Array Array::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Array Array::arange(std::int64_t n, DType dtype) {
  if (n < 0) throw InvalidArgument("arange: negative length " + std::to_string(n));
  Array out = empty({n}, dtype);
  if (n == 0) return out;
  dispatch(dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    S* p = mutable_elements<S>(out);
    for (std::int64_t i = 0; i < n; ++i) p[i] = convert<std::int64_t, S>(i);
  });
  return out;
}

double Array::value_at(std::int64_t flat_index) const {
  if (trace_) [[unlikely]] detail::throw_traced_read("Array::value_at");
  const std::int64_t n = size();
  if (flat_index < 0 || flat_index >= n) {
    throw InvalidArgument("value_at: index " + std::to_string(flat_index) + " is out of bounds for size " +
                          std::to_string(n));
  }
  return dispatch(dtype_, [&](auto tag) -> double {
    using S = typename decltype(tag)::type;
    return to_double(elements<S>(*this)[flat_index]);
  });
}

std::vector<double> Array::to_doubles() const {
  if (trace_) [[unlikely]] detail::throw_traced_read("Array::to_doubles");
  std::vector<double> out(static_cast<std::size_t>(size()));
  if (out.empty()) return out;
  dispatch(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = elements<S>(*this);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_double(p[i]);
  });
  return out;
}

Array Array::astype(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (trace_) [[unlikely]] return detail::record1("astype", {*this}, {{"dtype", dtype}});
  Array out = empty(shape_, dtype);
  // The count once: size() is out of line (num_elements of the shape), and in a loop condition it cost 20x
  // the conversion itself.
  const std::int64_t n = out.size();
  if (n == 0) return out;
  // Mixed precision casts parameters and gradients between float32 and bfloat16 every step: plain loops the
  // compiler vectorises (the same conversions as convert<>'s, without its per-element dispatch).
  if (dtype_ == DType::f32 && dtype == DType::bf16) {
    const float* src = reinterpret_cast<const float*>(bytes());
    auto* dst = reinterpret_cast<std::uint16_t*>(out.mutable_bytes());
    for (std::int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
    return out;
  }
  if (dtype_ == DType::bf16 && dtype == DType::f32) {
    const auto* src = reinterpret_cast<const std::uint16_t*>(bytes());
    float* dst = reinterpret_cast<float*>(out.mutable_bytes());
    for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
    return out;
  }
  dispatch(dtype_, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch(dtype, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* src = elements<From>(*this);
      To* dst = mutable_elements<To>(out);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = convert<From, To>(src[i]);
    });
  });
  return out;
}

// ---- elementwise --------------------------------------------------------------------------------------------

Array operator+(const Array& a, const Array& b) { return binary(a, b, Op::add); }
Array operator-(const Array& a, const Array& b) { return binary(a, b, Op::sub); }
Array operator*(const Array& a, const Array& b) { return binary(a, b, Op::mul); }
Array operator/(const Array& a, const Array& b) { return binary(a, b, Op::div); }
Array operator&(const Array& a, const Array& b) { return binary(a, b, Op::band); }
Array operator|(const Array& a, const Array& b) { return binary(a, b, Op::bor); }
Array operator^(const Array& a, const Array& b) { return binary(a, b, Op::bxor); }
Array operator<(const Array& a, const Array& b) { return binary(a, b, Op::lt); }
Array operator<=(const Array& a, const Array& b) { return binary(a, b, Op::le); }
Array operator>(const Array& a, const Array& b) { return binary(a, b, Op::gt); }
Array operator>=(const Array& a, const Array& b) { return binary(a, b, Op::ge); }
Array equal(const Array& a, const Array& b) { return binary(a, b, Op::eq); }
Array not_equal(const Array& a, const Array& b) { return binary(a, b, Op::ne); }
Array power(const Array& a, const Array& b) { return binary(a, b, Op::pow); }
Array power(const Array& a, double exponent) { return binary(a, Array::scalar(exponent, a.dtype()), Op::pow); }

Array operator+(const Array& a, double b) { return a + Array::scalar(b, a.dtype()); }
Array operator+(double a, const Array& b) { return Array::scalar(a, b.dtype()) + b; }
Array operator-(const Array& a, double b) { return a - Array::scalar(b, a.dtype()); }
Array operator-(double a, const Array& b) { return Array::scalar(a, b.dtype()) - b; }
Array operator*(const Array& a, double b) { return a * Array::scalar(b, a.dtype()); }
Array operator*(double a, const Array& b) { return Array::scalar(a, b.dtype()) * b; }
Array operator/(const Array& a, double b) { return a / Array::scalar(b, a.dtype()); }
Array operator/(double a, const Array& b) { return Array::scalar(a, b.dtype()) / b; }

Array Array::operator-() const {
  if (dtype_ == DType::boolean) {
    throw InvalidArgument("negative: the `-` operator is not supported for dtype bool; use the `~` operator instead");
  }
  if (trace_) [[unlikely]] return detail::record1("negative", {*this});
  Array out = empty(shape_, dtype_);
  if (out.size() == 0) return out;
  dispatch(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using T = Traits<S>;
    using C = compute_t<S>;
    const S* src = elements<S>(*this);
    S* dst = mutable_elements<S>(out);
    const std::int64_t n = out.size();  // once: size() is out of line
    for (std::int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_floating_point_v<C>) {
        dst[i] = T::store(-T::load(src[i]));  // exact, keeps the sign of zero
      } else {
        dst[i] = T::store(wrap_sub(C(0), T::load(src[i])));
      }
    }
  });
  return out;
}

Array Array::operator~() const {
  if (is_floating(dtype_)) {
    throw InvalidArgument("invert: the `~` operator is not supported for dtype " + dname(dtype_) +
                          " (only integer and bool arrays)");
  }
  if (trace_) [[unlikely]] return detail::record1("bitwise_not", {*this});
  Array out = empty(shape_, dtype_);
  if (out.size() == 0) return out;
  dispatch(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using T = Traits<S>;
    using C = compute_t<S>;
    if constexpr (std::is_integral_v<C>) {
      const S* src = elements<S>(*this);
      S* dst = mutable_elements<S>(out);
      const std::int64_t n = out.size();  // once: size() is out of line
      for (std::int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<C, bool>) {
          dst[i] = T::store(!T::load(src[i]));
        } else {
          dst[i] = T::store(static_cast<C>(~T::load(src[i])));
        }
      }
    }
  });
  return out;
}

Array& Array::operator+=(const Array& other) {
  compound_assign(*this, other, Op::add, "+=");
  return *this;
}
Array& Array::operator-=(const Array& other) {
  compound_assign(*this, other, Op::sub, "-=");
  return *this;
}
Array& Array::operator*=(const Array& other) {
  compound_assign(*this, other, Op::mul, "*=");
  return *this;
}
Array& Array::operator/=(const Array& other) {
  compound_assign(*this, other, Op::div, "/=");
  return *this;
}
// The scalar takes the array's dtype (as in x + value), so the result never widens.
Array& Array::operator+=(double value) {
  compound_assign(*this, scalar(value, dtype_), Op::add, "+=");
  return *this;
}
Array& Array::operator-=(double value) {
  compound_assign(*this, scalar(value, dtype_), Op::sub, "-=");
  return *this;
}
Array& Array::operator*=(double value) {
  compound_assign(*this, scalar(value, dtype_), Op::mul, "*=");
  return *this;
}
Array& Array::operator/=(double value) {
  compound_assign(*this, scalar(value, dtype_), Op::div, "/=");
  return *this;
}

// ---- maximum / minimum (ops.hpp): the binary machinery with numpy's NaN-propagating selection -----------------

Array maximum(const Array& a, const Array& b) { return binary(a, b, Op::max); }
Array minimum(const Array& a, const Array& b) { return binary(a, b, Op::min); }
Array maximum(const Array& a, double b) { return binary(a, Array::scalar(b, a.dtype()), Op::max); }
Array minimum(const Array& a, double b) { return binary(a, Array::scalar(b, a.dtype()), Op::min); }

}  // namespace weft
