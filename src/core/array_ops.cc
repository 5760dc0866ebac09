// Typed array kernels: conversions, creation from values, elementwise ops with numpy broadcasting, and
// reductions. Dtype dispatch is a switch over DType calling a template with the element's storage type.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "core/element_types.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {

using namespace kernels;

std::string dname(DType dtype) { return std::string(dtype_name(dtype)); }

// ---- broadcasting ---------------------------------------------------------------------------------------

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    const std::int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const std::int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw InvalidArgument("operands could not be broadcast together with shapes " + shape_str(a) + " " +
                            shape_str(b));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Element strides of `in` read as `out` (0 along broadcast axes).
std::vector<std::int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<std::int64_t> strides(out.size(), 0);
  std::int64_t stride = 1;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::size_t i = in.size() - 1 - k;
    const std::size_t o = out.size() - 1 - k;
    strides[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

// Calls f(out_index, a_index, b_index) for every element of `out` in row-major order.
template <class F>
void for_each_broadcast(const Shape& out, const std::vector<std::int64_t>& sa, const std::vector<std::int64_t>& sb,
                        F&& f) {
  const std::int64_t total = num_elements(out);
  if (total == 0) return;
  const int nd = static_cast<int>(out.size());
  if (nd == 0) {
    f(0, 0, 0);
    return;
  }
  const std::int64_t inner = out[nd - 1];
  const std::int64_t step_a = sa[nd - 1];
  const std::int64_t step_b = sb[nd - 1];
  std::vector<std::int64_t> counter(nd, 0);
  std::int64_t ia = 0, ib = 0;
  for (std::int64_t o = 0; o < total; o += inner) {
    for (std::int64_t k = 0; k < inner; ++k) f(o + k, ia + k * step_a, ib + k * step_b);
    for (int d = nd - 2; d >= 0; --d) {
      if (++counter[d] < out[d]) {
        ia += sa[d];
        ib += sb[d];
        break;
      }
      ia -= sa[d] * (out[d] - 1);
      ib -= sb[d] * (out[d] - 1);
      counter[d] = 0;
    }
  }
}

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

template <class C>
C max_nan(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;
}

template <class C>
C min_nan(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

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

// ---- reductions -----------------------------------------------------------------------------------------

// numpy's pairwise summation (umath loops), accumulating in the compute type.
template <class S>
compute_t<S> pairwise_sum(const S* p, std::int64_t n) {
  using C = compute_t<S>;
  using T = Traits<S>;
  if (n < 8) {
    C res = C(0);
    for (std::int64_t i = 0; i < n; ++i) res += T::load(p[i]);
    return res;
  }
  if (n <= 128) {
    C r[8];
    for (int j = 0; j < 8; ++j) r[j] = T::load(p[j]);
    std::int64_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += T::load(p[i + j]);
    }
    C res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += T::load(p[i]);
    return res;
  }
  std::int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(p, n2) + pairwise_sum(p + n2, n - n2);
}

enum class Reduce { sum, max, min, mean };

template <class S>
void run_reduce(Reduce kind, const Array& in, Array& out, std::int64_t outer, std::int64_t n, std::int64_t inner) {
  using T = Traits<S>;
  using C = compute_t<S>;
  const S* p = elements<S>(in);
  S* po = mutable_elements<S>(out);
  for (std::int64_t o = 0; o < outer; ++o) {
    const S* base = p + o * n * inner;
    for (std::int64_t i = 0; i < inner; ++i) {
      C acc{};
      if (kind == Reduce::sum || kind == Reduce::mean) {
        if constexpr (std::is_floating_point_v<C>) {
          if (inner == 1) {
            acc = C(0) + pairwise_sum(base, n);
          } else {
            acc = C(0);
            for (std::int64_t k = 0; k < n; ++k) acc += T::load(base[k * inner + i]);
          }
          if (kind == Reduce::mean) acc = acc / static_cast<C>(n);
        } else {
          acc = C(0);
          for (std::int64_t k = 0; k < n; ++k) acc = wrap_add(acc, T::load(base[k * inner + i]));
        }
      } else {
        acc = T::load(base[i]);
        for (std::int64_t k = 1; k < n; ++k) {
          const C v = T::load(base[k * inner + i]);
          acc = kind == Reduce::max ? max_nan(acc, v) : min_nan(acc, v);
        }
      }
      po[o * inner + i] = T::store(acc);
    }
  }
}

Array reduce(const Array& a, std::optional<int> axis, Reduce kind) {
  const char* name = kind == Reduce::sum ? "sum" : kind == Reduce::max ? "max" : kind == Reduce::min ? "min" : "mean";
  Array in = a;
  if (kind == Reduce::sum && a.dtype() == DType::boolean) in = a.astype(DType::i32);
  if (kind == Reduce::mean && !is_floating(a.dtype())) in = a.astype(DType::f32);
  const Shape& shape = in.shape();
  std::int64_t outer = 1, n = in.size(), inner = 1;
  Shape out_shape;
  if (axis) {
    const int nd = in.ndim();
    if (*axis < -nd || *axis >= nd) {
      throw InvalidArgument(std::string(name) + ": axis " + std::to_string(*axis) +
                            " is out of bounds for array of dimension " + std::to_string(nd));
    }
    const int ax = *axis < 0 ? *axis + nd : *axis;
    outer = num_elements(Shape(shape.begin(), shape.begin() + ax));
    n = shape[ax];
    inner = num_elements(Shape(shape.begin() + ax + 1, shape.end()));
    out_shape = shape;
    out_shape.erase(out_shape.begin() + ax);
  }
  Array out = Array::empty(out_shape, in.dtype());
  if (out.size() == 0) return out;
  if (n == 0 && (kind == Reduce::max || kind == Reduce::min)) {
    throw InvalidArgument(std::string(name) + ": zero-size array to reduction operation " +
                          (kind == Reduce::max ? "maximum" : "minimum") + " which has no identity");
  }
  dispatch(in.dtype(), [&](auto tag) { run_reduce<typename decltype(tag)::type>(kind, in, out, outer, n, inner); });
  return out;
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

// ---- reductions -----------------------------------------------------------------------------------------------

namespace {
// Placeholder until the multi-axis reductions land: one axis or all of them, no keepdims.
std::optional<int> single_axis(const ReduceAxes& axes, bool keepdims) {
  if (keepdims || (!axes.all() && axes.axes().size() != 1)) throw InvalidArgument("reduction: several axes / keepdims not implemented yet");
  return axes.all() ? std::nullopt : std::optional<int>(axes.axes()[0]);
}
}  // namespace
Array Array::sum(const ReduceAxes& axes, bool keepdims) const { return reduce(*this, single_axis(axes, keepdims), Reduce::sum); }
Array Array::max(const ReduceAxes& axes, bool keepdims) const { return reduce(*this, single_axis(axes, keepdims), Reduce::max); }
Array Array::min(const ReduceAxes& axes, bool keepdims) const { return reduce(*this, single_axis(axes, keepdims), Reduce::min); }
Array Array::mean(const ReduceAxes& axes, bool keepdims) const { return reduce(*this, single_axis(axes, keepdims), Reduce::mean); }

}  // namespace weft
