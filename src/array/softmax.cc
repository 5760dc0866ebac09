// softmax, log_softmax and logsumexp (ops.hpp) as jax.nn / jax.scipy.special compute them, stable for large
// logits: the maximum along the axis is subtracted before exp. Special values follow JAX's formulas exactly:
// softmax and log_softmax subtract the plain maximum, so a row of only -inf (or one holding +inf or NaN) is
// NaN; logsumexp replaces a non-finite maximum by 0, so an all -inf row gives -inf and a +inf entry gives inf.
//
// The training shape is a (batch, classes) array over its last axis: every pass below walks the whole buffer
// once (maxima, shift, one vectorised exp over everything, sums, scale), rather than row by row. Sums, logs
// and the final scaling run in double and round once; float16/bfloat16/integer inputs compute in float32.
// Compiled with -march=${WEFT_ARCH} (src/core/CMakeLists.txt); every entry point checks the CPU first. With
// -march=native on an AVX-512 CPU, GCC 12 warns -Wmaybe-uninitialized inside its own avx512fintrin.h (the
// deliberately undefined first operand of its _mm512 intrinsics, inlined into Eigen's packet math): a false
// positive about the compiler's header, silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "array/element_types.hpp"
#include "array/float_kernels.hpp"
#include "array/isa.hpp"
#include "array/trace_hook.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {

using namespace kernels;

enum class Kind { softmax, log_softmax, logsumexp };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::softmax: return "softmax";
    case Kind::log_softmax: return "log_softmax";
    case Kind::logsumexp: return "logsumexp";
  }
  return "?";
}

// The maxima of rows (reductions over a contiguous last axis) shorter than this are computed a block of
// kRowBlock rows at a time, column by column, so that vectors run across rows rather than along a row.
constexpr std::int64_t kShortRow = 32;
constexpr std::int64_t kRowBlock = 256;

// The array seen as (outer, n, inner) around the reduced axis of size n.
struct Split {
  std::int64_t outer = 1, n = 1, inner = 1;
};

Split split_at(const Shape& shape, int axis) {
  Split s;
  for (int d = 0; d < axis; ++d) s.outer *= shape[d];
  s.n = shape[axis];
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < shape.size(); ++d) s.inner *= shape[d];
  return s;
}

int positive_axis(Kind kind, int axis, int ndim) {
  if (axis < -ndim || axis >= ndim) {
    throw InvalidArgument(std::string(kind_name(kind)) + ": axis " + std::to_string(axis) +
                          " is out of bounds for array of dimension " + std::to_string(ndim));
  }
  return axis < 0 ? axis + ndim : axis;
}

void exp_in_place(float* p, std::int64_t n) { exp_f32(p, p, n); }
void exp_in_place(double* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = std::exp(p[i]);
}

// Sum of p[0..n) in double, four partial sums (the additions of one row pipeline instead of waiting on each
// other).
template <class C>
double row_sum(const C* p, std::int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += static_cast<double>(p[k]);
    s1 += static_cast<double>(p[k + 1]);
    s2 += static_cast<double>(p[k + 2]);
    s3 += static_cast<double>(p[k + 3]);
  }
  for (; k < n; ++k) s0 += static_cast<double>(p[k]);
  return (s0 + s1) + (s2 + s3);
}

// GCC does not if-convert floating-point compares under -ftrapping-math (its default) and FP exception flags
// are never read here, so the select loops below are compiled without it; they call nothing (GCC does not
// inline across FP options).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif
// m[j] = max(m[j], row[j]) with NaN winning (element_types.hpp's max_nan as selects).
template <class C>
void max_into(C* m, const C* row, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    const C a = m[j];
    const C b = row[j];
    m[j] = a != a ? a : (b != b ? b : (a < b ? b : a));
  }
}
// m[r] = max(m[r], x[r * stride]) with NaN winning, for r < count: one column of a (rows, n) block.
template <class C>
void max_into_strided(C* m, const C* x, std::int64_t count, std::int64_t stride) {
  for (std::int64_t r = 0; r < count; ++r) {
    const C a = m[r];
    const C b = x[r * stride];
    m[r] = a != a ? a : (b != b ? b : (a < b ? b : a));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// The maximum along the axis (NaN wins, as jnp.max; -inf for an empty axis, as its `initial`), for every
// (outer, inner) pair; logsumexp then replaces non-finite maxima by 0.
template <class C>
std::vector<C> shifts(Kind kind, const C* x, const Split& sp) {
  using Row = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
  std::vector<C> shift(static_cast<std::size_t>(sp.outer * sp.inner), -std::numeric_limits<C>::infinity());
  if (sp.inner == 1 && sp.n < kShortRow) {
    // Short rows (10 classes): Eigen's maxCoeff would run its scalar path on each. Instead the maxima of a
    // block of rows advance column by column, a vector of rows per step.
    for (std::int64_t r0 = 0; r0 < sp.outer; r0 += kRowBlock) {
      const std::int64_t count = std::min(kRowBlock, sp.outer - r0);
      for (std::int64_t k = 0; k < sp.n; ++k) max_into_strided(shift.data() + r0, x + r0 * sp.n + k, count, sp.n);
    }
  } else if (sp.inner == 1) {
    for (std::int64_t r = 0; r < sp.outer; ++r) {
      shift[static_cast<std::size_t>(r)] = Row(x + r * sp.n, sp.n).template maxCoeff<Eigen::PropagateNaN>();
    }
  } else {
    for (std::int64_t o = 0; o < sp.outer; ++o) {
      for (std::int64_t k = 0; k < sp.n; ++k) {
        max_into(shift.data() + o * sp.inner, x + (o * sp.n + k) * sp.inner, sp.inner);
      }
    }
  }
  if (kind == Kind::logsumexp) {
    for (C& m : shift) m = std::isfinite(m) ? m : C(0);
  }
  return shift;
}

// p[i] = p[i] * f (scale) or p[i] - f, in double, rounded once; f is one value or one per element.
template <class C>
void finish(C* p, std::int64_t n, double f, bool scale) {
  if (scale) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<C>(static_cast<double>(p[i]) * f);
  } else {
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<C>(static_cast<double>(p[i]) - f);
  }
}
template <class C>
void finish(C* p, std::int64_t n, const double* f, bool scale) {
  if (scale) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<C>(static_cast<double>(p[i]) * f[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<C>(static_cast<double>(p[i]) - f[i]);
  }
}

// x: (outer, n, inner) in C (float or double). out: the full shape for softmax / log_softmax, (outer, inner)
// for logsumexp. Every loop below runs over a whole row or block, so the compiler vectorises it.
template <class C>
void run(Kind kind, const C* x, C* out, const Split& sp) {
  const std::int64_t rows = sp.outer * sp.inner;  // one reduction per (outer, inner) pair
  const std::int64_t total = rows * sp.n;
  const std::int64_t block = sp.n * sp.inner;
  const std::vector<C> shift = shifts(kind, x, sp);

  // shifted = x - shift, in the output for softmax / log_softmax, else in a scratch buffer.
  std::vector<C> scratch;
  C* shifted = out;
  if (kind == Kind::logsumexp) {
    scratch.resize(static_cast<std::size_t>(total));
    shifted = scratch.data();
  }
  for (std::int64_t o = 0; o < sp.outer; ++o) {
    const C* m = shift.data() + o * sp.inner;
    const C* xb = x + o * block;
    C* sb = shifted + o * block;
    if (sp.inner == 1) {
      const C mo = m[0];
      for (std::int64_t k = 0; k < sp.n; ++k) sb[k] = xb[k] - mo;
    } else {
      for (std::int64_t k = 0; k < sp.n; ++k) {
        for (std::int64_t j = 0; j < sp.inner; ++j) sb[k * sp.inner + j] = xb[k * sp.inner + j] - m[j];
      }
    }
  }

  // e = exp(shifted), over the whole buffer at once (log_softmax keeps `shifted` and needs a copy).
  C* e = shifted;
  if (kind == Kind::log_softmax) {
    scratch.assign(shifted, shifted + total);
    e = scratch.data();
  }
  exp_in_place(e, total);

  // The sums along the axis, in double; then what each op makes of them (1 / sum, log(sum)).
  std::vector<double> sum(static_cast<std::size_t>(rows), 0.0);
  if (sp.inner == 1) {
    for (std::int64_t r = 0; r < rows; ++r) sum[static_cast<std::size_t>(r)] = row_sum(e + r * sp.n, sp.n);
  } else {
    for (std::int64_t o = 0; o < sp.outer; ++o) {
      double* s = sum.data() + o * sp.inner;
      const C* eb = e + o * block;
      for (std::int64_t k = 0; k < sp.n; ++k) {
        for (std::int64_t j = 0; j < sp.inner; ++j) s[j] += static_cast<double>(eb[k * sp.inner + j]);
      }
    }
  }
  if (kind == Kind::logsumexp) {
    for (std::int64_t r = 0; r < rows; ++r) {
      out[r] = static_cast<C>(std::log(sum[static_cast<std::size_t>(r)]) + static_cast<double>(shift[r]));
    }
    return;
  }
  for (double& v : sum) v = kind == Kind::softmax ? 1.0 / v : std::log(v);

  // softmax: e / sum, as e * (1 / sum) in double; log_softmax: shifted - log(sum). Each rounded once to C.
  const bool scale = kind == Kind::softmax;
  if (sp.inner == 1) {
    for (std::int64_t r = 0; r < rows; ++r) finish(out + r * sp.n, sp.n, sum[static_cast<std::size_t>(r)], scale);
  } else {
    for (std::int64_t o = 0; o < sp.outer; ++o) {
      for (std::int64_t k = 0; k < sp.n; ++k) {
        finish(out + (o * sp.n + k) * sp.inner, sp.inner, sum.data() + o * sp.inner, scale);
      }
    }
  }
}

Array softmax_family(Kind kind, const Array& x, int axis, bool keepdims) {
  isa::ensure_kernels_supported();
  const int ax = positive_axis(kind, axis, x.ndim());
  if (x.traced()) [[unlikely]] {
    if (kind == Kind::logsumexp) {
      return detail::record1("logsumexp", {x}, {{"axis", std::int64_t{ax}}, {"keepdims", keepdims}});
    }
    return detail::record1(kind == Kind::softmax ? "softmax" : "log_softmax", {x}, {{"axis", std::int64_t{ax}}});
  }
  const Split sp = split_at(x.shape(), ax);
  Shape out_shape = x.shape();
  if (kind == Kind::logsumexp) {
    if (keepdims) {
      out_shape[static_cast<std::size_t>(ax)] = 1;
    } else {
      out_shape.erase(out_shape.begin() + ax);
    }
  }
  // float64 computes in double; everything else in float32 (integers and bool give float32, as JAX).
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::f32;
  const DType compute = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Array in = x.astype(compute);
  Array out = Array::empty(out_shape, compute);
  if (out.size() == 0) return out.astype(out_dtype);
  if (compute == DType::f64) {
    run<double>(kind, elements<double>(in), mutable_elements<double>(out), sp);
  } else {
    run<float>(kind, elements<float>(in), mutable_elements<float>(out), sp);
  }
  return out.astype(out_dtype);
}

}  // namespace

Array softmax(const Array& x, int axis) { return softmax_family(Kind::softmax, x, axis, false); }
Array log_softmax(const Array& x, int axis) { return softmax_family(Kind::log_softmax, x, axis, false); }
Array logsumexp(const Array& x, int axis, bool keepdims) {
  return softmax_family(Kind::logsumexp, x, axis, keepdims);
}

}  // namespace weft
