// The fused layer normalisation and its VJP (layer_norm.hpp says what and why). One row at a time, with
// Eigen's vectorised row arithmetic: its mean, its centred values and their mean square (in L1), then the
// outputs; the VJP recomputes the row's statistics rather than keeping them, so the forward pass leaves
// nothing but its inputs for the backward. Compiled for WEFT_ARCH with the other kernels.
#include "array/layer_norm.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "array/element_types.hpp"
#include "weft/error.hpp"

namespace weft::detail {
namespace {

using kernels::elements;
using kernels::mutable_elements;

template <class T>
using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T>
using RowMap = Eigen::Map<Row<T>>;
template <class T>
using ConstRowMap = Eigen::Map<const Row<T>>;

template <class T>
void forward(const T* x, const T* g, const T* b, T* y, std::int64_t rows, std::int64_t d, double eps) {
  const ConstRowMap<T> gm(g, d), bm(b, d);
  for (std::int64_t r = 0; r < rows; ++r) {
    const ConstRowMap<T> xr(x + r * d, d);
    RowMap<T> yr(y + r * d, d);
    const T mean = xr.mean();
    yr = xr - mean;  // the centred row, in place in y
    const T rstd = static_cast<T>(1.0 / std::sqrt(static_cast<double>(yr.square().mean()) + eps));
    // xhat, then the scale, then the bias, each its own pass and so its own rounding (one expression would let
    // the compiler fuse the last two into an FMA): scale 1 and bias 0 give xhat exactly, and per-example
    // scales and biases applied to it by the program's multiply and add give each example's own result bit
    // for bit (layer_norm's batching rule, src/program/ops/nn.cc).
    yr *= rstd;
    yr *= gm;
    yr += bm;
  }
}

template <class T>
void backward(const T* x, const T* g, const T* dy, T* dx, T* dg, T* db, std::int64_t rows, std::int64_t d,
              double eps) {
  const ConstRowMap<T> gm(g, d);
  RowMap<T> dgm(dg, d), dbm(db, d);
  dgm.setZero();
  dbm.setZero();
  Row<T> xhat(d);
  for (std::int64_t r = 0; r < rows; ++r) {
    const ConstRowMap<T> xr(x + r * d, d), dyr(dy + r * d, d);
    RowMap<T> dxr(dx + r * d, d);
    const T mean = xr.mean();
    xhat = xr - mean;
    const T rstd = static_cast<T>(1.0 / std::sqrt(static_cast<double>(xhat.square().mean()) + eps));
    xhat *= rstd;
    dxr = dyr * gm;  // dxhat, in place in dx
    const T m1 = dxr.mean();
    const T m2 = (dxr * xhat).mean();
    dxr = rstd * (dxr - m1 - xhat * m2);
    dgm += dyr * xhat;
    dbm += dyr;
  }
}

DType compute_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

std::int64_t last_dim(const Array& x, const Array& scale, const Array& other, const char* other_name) {
  if (x.ndim() == 0) throw InvalidArgument("layer_norm: x must have at least one dimension, got a scalar");
  const std::int64_t d = x.shape().back();
  for (const auto& [a, name] : {std::pair<const Array*, const char*>{&scale, "scale"}, {&other, other_name}}) {
    if (a->ndim() != 1 || a->shape()[0] != d) {
      throw InvalidArgument(std::string("layer_norm: ") + name + " must have shape (" + std::to_string(d) +
                            ",), the last dimension of x");
    }
  }
  return d;
}

}  // namespace

Array layer_norm(const Array& x, const Array& scale, const Array& bias, double eps) {
  const std::int64_t d = last_dim(x, scale, bias, "bias");
  const DType dt = compute_dtype(x.dtype());
  const Array xc = x.astype(dt), gc = scale.astype(dt), bc = bias.astype(dt);
  Array y = Array::empty(x.shape(), dt);
  const std::int64_t rows = d == 0 ? 0 : x.size() / d;
  if (dt == DType::f64) {
    forward(elements<double>(xc), elements<double>(gc), elements<double>(bc), mutable_elements<double>(y), rows, d, eps);
  } else {
    forward(elements<float>(xc), elements<float>(gc), elements<float>(bc), mutable_elements<float>(y), rows, d, eps);
  }
  return y.astype(x.dtype());
}

LayerNormGrads layer_norm_vjp(const Array& x, const Array& scale, const Array& dy, double eps) {
  const std::int64_t d = last_dim(x, scale, scale, "scale");
  if (dy.shape() != x.shape()) throw InvalidArgument("layer_norm_vjp: the cotangent must have x's shape");
  const DType dt = compute_dtype(x.dtype());
  const Array xc = x.astype(dt), gc = scale.astype(dt), dyc = dy.astype(dt);
  LayerNormGrads out{Array::empty(x.shape(), dt), Array::empty({d}, dt), Array::empty({d}, dt)};
  const std::int64_t rows = d == 0 ? 0 : x.size() / d;
  if (dt == DType::f64) {
    backward(elements<double>(xc), elements<double>(gc), elements<double>(dyc), mutable_elements<double>(out.dx),
             mutable_elements<double>(out.dscale), mutable_elements<double>(out.dbias), rows, d, eps);
  } else {
    backward(elements<float>(xc), elements<float>(gc), elements<float>(dyc), mutable_elements<float>(out.dx),
             mutable_elements<float>(out.dscale), mutable_elements<float>(out.dbias), rows, d, eps);
  }
  return {out.dx.astype(x.dtype()), out.dscale.astype(x.dtype()), out.dbias.astype(x.dtype())};
}

}  // namespace weft::detail
