// Typed array kernels: conversions, creation from values, elementwise ops with numpy broadcasting, and
// reductions. Dtype dispatch is a switch over DType calling a template with the element's storage type.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "core/broadcast.hpp"
#include "core/element_types.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {

using namespace kernels;

std::string dname(DType dtype) { return std::string(dtype_name(dtype)); }

// ---- scalar kernels -------------------------------------------------------------------------------------

enum class Op { add, sub, mul, div, pow, band, bor, bxor, lt, le, gt, ge, eq, ne };

const char* op_name(Op op) {
  switch (op) {
    case Op::add: return "add";
    case Op::sub: return "subtract";
    case Op::mul: return "multiply";
    case Op::div: return "divide";
    case Op::pow: return "power";
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

template <class S>
void run_binary(Op op, const Array& x, const Array& y, Array& out) {
  using T = Traits<S>;
  using C = compute_t<S>;
  const S* pa = elements<S>(x);
  const S* pb = elements<S>(y);
  const Shape& shape = out.shape();
  const auto sa = broadcast_strides(x.shape(), shape);
  const auto sb = broadcast_strides(y.shape(), shape);
  if (is_comparison(op)) {
    Bool8* po = mutable_elements<Bool8>(out);
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
  S* po = mutable_elements<S>(out);
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

Array binary(const Array& a, const Array& b, Op op) {
  DType common = promote_types(a.dtype(), b.dtype());
  if (op == Op::div && !is_floating(common)) common = DType::f32;
  if (is_bitwise(op) && is_floating(common)) {
    throw InvalidArgument(std::string(op_name(op)) + ": not supported for dtype " + dname(common) +
                          " (only integer and bool arrays)");
  }
  if (op == Op::sub && common == DType::boolean) {
    throw InvalidArgument("subtract: boolean subtract, the `-` operator, is not supported for dtype bool; use the "
                          "`^` operator instead");
  }
  const Shape shape = broadcast_shapes(a.shape(), b.shape());
  const Array x = a.astype(common);
  const Array y = b.astype(common);
  Array out = Array::empty(shape, is_comparison(op) ? DType::boolean : common);
  if (out.size() == 0) return out;
  dispatch(common, [&](auto tag) { run_binary<typename decltype(tag)::type>(op, x, y, out); });
  return out;
}

// Writes `result` (broadcast to target's shape by the op) into `target` in its own dtype.
void assign_in_place(Array& target, const Array& result, const char* op) {
  if (result.shape() != target.shape()) {
    throw InvalidArgument(std::string(op) + ": non-broadcastable output operand with shape " +
                          shape_str(target.shape()) + " doesn't match the broadcast shape " +
                          shape_str(result.shape()));
  }
  const Array converted = result.astype(target.dtype());
  if (target.nbytes() > 0) std::memcpy(target.mutable_bytes(), converted.bytes(), target.nbytes());
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
    for (std::int64_t i = 0; i < out.size(); ++i) p[i] = v;
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
  Array out = empty(shape_, dtype);
  if (out.size() == 0) return out;
  dispatch(dtype_, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch(dtype, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* src = elements<From>(*this);
      To* dst = mutable_elements<To>(out);
      for (std::int64_t i = 0; i < size(); ++i) dst[i] = convert<From, To>(src[i]);
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
  Array out = empty(shape_, dtype_);
  if (out.size() == 0) return out;
  dispatch(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using T = Traits<S>;
    using C = compute_t<S>;
    const S* src = elements<S>(*this);
    S* dst = mutable_elements<S>(out);
    for (std::int64_t i = 0; i < size(); ++i) {
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
  Array out = empty(shape_, dtype_);
  if (out.size() == 0) return out;
  dispatch(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using T = Traits<S>;
    using C = compute_t<S>;
    if constexpr (std::is_integral_v<C>) {
      const S* src = elements<S>(*this);
      S* dst = mutable_elements<S>(out);
      for (std::int64_t i = 0; i < size(); ++i) {
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
  assign_in_place(*this, *this + other, "+=");
  return *this;
}
Array& Array::operator-=(const Array& other) {
  assign_in_place(*this, *this - other, "-=");
  return *this;
}
Array& Array::operator*=(const Array& other) {
  assign_in_place(*this, *this * other, "*=");
  return *this;
}
Array& Array::operator/=(const Array& other) {
  assign_in_place(*this, *this / other, "/=");
  return *this;
}

}  // namespace weft
