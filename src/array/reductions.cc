// Reductions (sum, mean, max, min) over every axis, one or several, with keepdims; argmax / argmin.
//
// Summation order follows numpy 1.24 exactly, so float32 / float64 sums match numpy's to the last bit: after
// size-1 axes are dropped and neighbouring reduced (or kept) axes merged, a trailing reduced run is summed
// pairwise (numpy's pairwise_sum) in blocks of 8192 elements (numpy's buffer size), and everything else is
// added one slice after another in row-major order. That is also the fast order: the bias gradient (sum over
// axis 0 of (256, 512)) adds contiguous rows into the output, the loss (sum / max over the last axis of
// (256, 10)) reduces contiguous runs. Compiled with -march=${WEFT_ARCH} (src/core/CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "array/element_types.hpp"
#include "array/isa.hpp"
#include "array/reduction_dtypes.hpp"
#include "array/trace_hook.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {

using namespace kernels;

// numpy's pairwise summation (umath loops_utils pairwise_sum), accumulating in the compute type.
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

// numpy's reduction loop hands pairwise_sum at most one buffer (8192 elements) at a time.
constexpr std::int64_t kNumpyBuffer = 8192;

enum class Reduce { sum, max, min, mean };

const char* reduce_name(Reduce kind) {
  switch (kind) {
    case Reduce::sum: return "sum";
    case Reduce::max: return "max";
    case Reduce::min: return "min";
    case Reduce::mean: return "mean";
  }
  return "?";
}

// max / min with NaN propagation, written branch-free so the row loops vectorise: v replaces acc when it is
// larger (smaller) or NaN; a NaN acc is never replaced (no comparison with NaN is true).
template <class C>
C take_max(C acc, C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return (v > acc || v != v) ? v : acc;
  } else {
    return v > acc ? v : acc;
  }
}
template <class C>
C take_min(C acc, C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return (v < acc || v != v) ? v : acc;
  } else {
    return v < acc ? v : acc;
  }
}

// The identity max and min start from (an empty reduction is refused before).
template <class C>
C lowest() {
  if constexpr (std::is_floating_point_v<C>) return -std::numeric_limits<C>::infinity();
  return std::numeric_limits<C>::lowest();
}
template <class C>
C highest() {
  if constexpr (std::is_floating_point_v<C>) return std::numeric_limits<C>::infinity();
  return std::numeric_limits<C>::max();
}

// The reduction as merged dims: d[i] with `reduced[i]`; the output has the kept dims in order.
struct Plan {
  std::vector<std::int64_t> d;
  std::vector<bool> reduced;
  std::int64_t count = 1;  // elements reduced into each output element
};

Plan make_plan(const Shape& shape, const std::vector<bool>& reduce_axis) {
  Plan plan;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (reduce_axis[i]) plan.count *= shape[i];
    if (shape[i] == 1) continue;
    if (!plan.d.empty() && plan.reduced.back() == reduce_axis[i]) {
      plan.d.back() *= shape[i];
    } else {
      plan.d.push_back(shape[i]);
      plan.reduced.push_back(reduce_axis[i]);
    }
  }
  return plan;
}

// Walks the input one row (the last merged dim) at a time in row-major order, calling
// row(input_offset, output_offset) with the output offset of the row's first element.
template <class F>
void for_each_row(const Plan& plan, F&& row) {
  const int r = static_cast<int>(plan.d.size());
  if (r == 0) {
    row(0, 0);
    return;
  }
  std::vector<std::int64_t> out_stride(r, 0);
  std::int64_t stride = 1;
  for (int i = r - 1; i >= 0; --i) {
    if (!plan.reduced[i]) {
      out_stride[i] = stride;
      stride *= plan.d[i];
    }
  }
  const std::int64_t len = plan.d[r - 1];
  std::vector<std::int64_t> counter(r - 1, 0);
  std::int64_t in_off = 0, out_off = 0;
  while (true) {
    row(in_off, out_off);
    in_off += len;
    int i = r - 2;
    for (; i >= 0; --i) {
      out_off += out_stride[i];
      if (++counter[i] < plan.d[i]) break;
      out_off -= out_stride[i] * plan.d[i];
      counter[i] = 0;
    }
    if (i < 0) break;
  }
}

template <class S>
void run_reduce(Reduce kind, const Plan& plan, const Array& in, Array& out) {
  using T = Traits<S>;
  using C = compute_t<S>;
  const S* p = elements<S>(in);
  const std::int64_t n_out = out.size();
  // Accumulate in the compute type: in place when it is the storage type, else in a scratch vector.
  std::unique_ptr<C[]> scratch;  // not std::vector: C may be bool
  C* acc;
  if constexpr (std::is_same_v<S, C>) {
    acc = mutable_elements<S>(out);
  } else {
    scratch = std::make_unique<C[]>(static_cast<std::size_t>(n_out));
    acc = scratch.get();
  }
  const bool additive = kind == Reduce::sum || kind == Reduce::mean;
  const C init = additive ? C(0) : kind == Reduce::max ? lowest<C>() : highest<C>();
  std::fill(acc, acc + n_out, init);
  const bool last_reduced = !plan.d.empty() && plan.reduced.back();
  const std::int64_t len = plan.d.empty() ? 1 : plan.d.back();

  if (last_reduced) {
    for_each_row(plan, [&](std::int64_t i, std::int64_t o) {
      const S* row = p + i;
      C& a = acc[o];
      if (additive) {
        if constexpr (std::is_floating_point_v<C>) {
          for (std::int64_t b = 0; b < len; b += kNumpyBuffer) {
            a += pairwise_sum(row + b, std::min(kNumpyBuffer, len - b));
          }
        } else {
          C s = a;
          for (std::int64_t k = 0; k < len; ++k) s = wrap_add(s, T::load(row[k]));
          a = s;
        }
      } else if (kind == Reduce::max) {
        C m = a;
        for (std::int64_t k = 0; k < len; ++k) m = take_max(m, T::load(row[k]));
        a = m;
      } else {
        C m = a;
        for (std::int64_t k = 0; k < len; ++k) m = take_min(m, T::load(row[k]));
        a = m;
      }
    });
  } else {
    // The last dim is kept: the row is added element by element into a contiguous run of the output.
    for_each_row(plan, [&](std::int64_t i, std::int64_t o) {
      const S* row = p + i;
      C* a = acc + o;
      if (additive) {
        for (std::int64_t k = 0; k < len; ++k) a[k] = wrap_add(a[k], T::load(row[k]));
      } else if (kind == Reduce::max) {
        for (std::int64_t k = 0; k < len; ++k) a[k] = take_max(a[k], T::load(row[k]));
      } else {
        for (std::int64_t k = 0; k < len; ++k) a[k] = take_min(a[k], T::load(row[k]));
      }
    });
  }
  if (kind == Reduce::mean) {
    if constexpr (std::is_floating_point_v<C>) {
      const C count = static_cast<C>(plan.count);
      for (std::int64_t o = 0; o < n_out; ++o) acc[o] = acc[o] / count;
    }
  }
  if constexpr (!std::is_same_v<S, C>) {
    S* po = mutable_elements<S>(out);
    for (std::int64_t o = 0; o < n_out; ++o) po[o] = T::store(acc[o]);
  }
}

// Which axes `axes` names, validated: out of bounds and repeated axes are refused.
std::vector<bool> reduced_axes(const char* name, const ReduceAxes& axes, int nd) {
  std::vector<bool> reduce(nd, axes.all());
  if (axes.all()) return reduce;
  std::vector<int> given(nd, 0);
  for (int axis : axes.axes()) {
    if (axis < -nd || axis >= nd) {
      throw InvalidArgument(std::string(name) + ": axis " + std::to_string(axis) +
                            " is out of bounds for array of dimension " + std::to_string(nd));
    }
    const int a = axis < 0 ? axis + nd : axis;
    if (reduce[a]) {
      throw InvalidArgument(std::string(name) + ": duplicate value in 'axis': " + std::to_string(given[a]) +
                            " and " + std::to_string(axis) + " both name axis " + std::to_string(a) +
                            " of an array of dimension " + std::to_string(nd));
    }
    reduce[a] = true;
    given[a] = axis;
  }
  return reduce;
}

Array reduce(const Array& a, const ReduceAxes& axes, bool keepdims, Reduce kind) {
  isa::ensure_kernels_supported();
  const char* name = reduce_name(kind);
  const std::vector<bool> reduce_axis = reduced_axes(name, axes, a.ndim());
  if (a.traced()) [[unlikely]] {
    ProgramParams params{{"keepdims", keepdims}};
    if (!axes.all()) {
      std::vector<std::int64_t> list;
      for (int axis : axes.axes()) list.push_back(detail::traced_axis(axis, a.ndim()));
      params["axes"] = list;
    }
    return detail::record1(name, {a}, std::move(params));
  }
  Array in = a;
  DType result_dtype = a.dtype();
  if (kind == Reduce::sum && detail::sum_dtype(a.dtype()) != a.dtype()) {
    // JAX's accumulation dtype: a hundred int8 100s sum to int32 10000, not int8's wrapped 16.
    result_dtype = detail::sum_dtype(a.dtype());
    in = a.astype(result_dtype);
  }
  if (kind == Reduce::mean && !is_floating(a.dtype())) {
    // Integers and bool: mean in float64, rounded once to the float32 result.
    in = a.astype(DType::f64);
    result_dtype = DType::f32;
  }
  const Shape& shape = in.shape();
  Shape out_shape;
  for (int i = 0; i < in.ndim(); ++i) {
    if (!reduce_axis[i]) {
      out_shape.push_back(shape[i]);
    } else if (keepdims) {
      out_shape.push_back(1);
    }
  }
  Array out = Array::empty(out_shape, in.dtype());
  if (out.size() == 0) return out.astype(result_dtype);
  const Plan plan = make_plan(shape, reduce_axis);
  if (plan.count == 0 && (kind == Reduce::max || kind == Reduce::min)) {
    throw InvalidArgument(std::string(name) + ": zero-size array to reduction operation " +
                          (kind == Reduce::max ? "maximum" : "minimum") + " which has no identity");
  }
  if (in.size() == 0) {
    // Nothing to add: sums are 0, means 0 / 0.
    const double fill = kind == Reduce::mean ? std::nan("") : 0.0;
    return Array::full(out_shape, fill, result_dtype);
  }
  dispatch(in.dtype(), [&](auto tag) { run_reduce<typename decltype(tag)::type>(kind, plan, in, out); });
  return out.astype(result_dtype);
}

// ---- argmax / argmin ---------------------------------------------------------------------------------------

// Whether v should replace the current best: strictly better (so the first of equal values stays), or the
// first NaN (which then stays, as nothing replaces a NaN).
template <class C>
bool better(bool is_max, C best, C v) {
  if constexpr (std::is_floating_point_v<C>) {
    if (best != best) return false;
    if (v != v) return true;
  }
  return is_max ? v > best : v < best;
}

template <class S>
void run_arg(bool is_max, const Array& in, Array& out, std::int64_t outer, std::int64_t n, std::int64_t inner) {
  using T = Traits<S>;
  using C = compute_t<S>;
  const S* p = elements<S>(in);
  std::int32_t* po = mutable_elements<std::int32_t>(out);
  const auto best = std::make_unique<C[]>(static_cast<std::size_t>(inner));  // not std::vector: C may be bool
  for (std::int64_t o = 0; o < outer; ++o) {
    const S* base = p + o * n * inner;
    std::int32_t* idx = po + o * inner;
    for (std::int64_t i = 0; i < inner; ++i) {
      best[i] = T::load(base[i]);
      idx[i] = 0;
    }
    for (std::int64_t k = 1; k < n; ++k) {
      const S* row = base + k * inner;
      for (std::int64_t i = 0; i < inner; ++i) {
        const C v = T::load(row[i]);
        if (better(is_max, best[i], v)) {
          best[i] = v;
          idx[i] = static_cast<std::int32_t>(k);
        }
      }
    }
  }
}

Array arg_reduce(const Array& x, std::optional<int> axis, bool keepdims, bool is_max) {
  isa::ensure_kernels_supported();
  const char* name = is_max ? "argmax" : "argmin";
  const int nd = x.ndim();
  std::int64_t outer = 1, n = x.size(), inner = 1;
  Shape out_shape;
  if (axis) {
    if (*axis < -nd || *axis >= nd) {
      throw InvalidArgument(std::string(name) + ": axis " + std::to_string(*axis) +
                            " is out of bounds for array of dimension " + std::to_string(nd));
    }
    const int ax = *axis < 0 ? *axis + nd : *axis;
    const Shape& shape = x.shape();
    outer = num_elements(Shape(shape.begin(), shape.begin() + ax));
    n = shape[ax];
    inner = num_elements(Shape(shape.begin() + ax + 1, shape.end()));
    out_shape = shape;
    if (keepdims) {
      out_shape[ax] = 1;
    } else {
      out_shape.erase(out_shape.begin() + ax);
    }
  } else if (keepdims) {
    out_shape.assign(nd, 1);
  }
  if (x.traced()) [[unlikely]] {
    ProgramParams params{{"keepdims", keepdims}};
    if (axis) params["axis"] = detail::traced_axis(*axis, nd);
    return detail::record1(name, {x}, std::move(params));
  }
  if (n == 0) {
    throw InvalidArgument(std::string(name) + ": attempt to get " + name + " of an empty sequence (shape " +
                          shape_str(x.shape()) + (axis ? ", axis " + std::to_string(*axis) : std::string()) + ")");
  }
  if (n > std::numeric_limits<std::int32_t>::max()) {
    throw InvalidArgument(std::string(name) + ": " + std::to_string(n) +
                          " elements along the axis do not fit the int32 index type");
  }
  Array out = Array::empty(out_shape, DType::i32);
  if (out.size() == 0) return out;
  dispatch(x.dtype(), [&](auto tag) { run_arg<typename decltype(tag)::type>(is_max, x, out, outer, n, inner); });
  return out;
}

}  // namespace

Array Array::sum(const ReduceAxes& axes, bool keepdims) const { return reduce(*this, axes, keepdims, Reduce::sum); }
Array Array::max(const ReduceAxes& axes, bool keepdims) const { return reduce(*this, axes, keepdims, Reduce::max); }
Array Array::min(const ReduceAxes& axes, bool keepdims) const { return reduce(*this, axes, keepdims, Reduce::min); }
Array Array::mean(const ReduceAxes& axes, bool keepdims) const { return reduce(*this, axes, keepdims, Reduce::mean); }

Array sum(const Array& x, const ReduceAxes& axes, bool keepdims) { return reduce(x, axes, keepdims, Reduce::sum); }
Array mean(const Array& x, const ReduceAxes& axes, bool keepdims) { return reduce(x, axes, keepdims, Reduce::mean); }
Array max(const Array& x, const ReduceAxes& axes, bool keepdims) { return reduce(x, axes, keepdims, Reduce::max); }
Array min(const Array& x, const ReduceAxes& axes, bool keepdims) { return reduce(x, axes, keepdims, Reduce::min); }

Array argmax(const Array& x, std::optional<int> axis, bool keepdims) { return arg_reduce(x, axis, keepdims, true); }
Array argmin(const Array& x, std::optional<int> axis, bool keepdims) { return arg_reduce(x, axis, keepdims, false); }

}  // namespace weft
