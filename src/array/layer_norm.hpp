// Layer normalisation over the last axis, y = (x - mean) / sqrt(var + eps) * scale + bias, and its
// vector-Jacobian product, each one pass over the rows: the program layer's layer_norm op and its VJP
// (src/program/ops/nn.cc; weft.nn.layer_norm on tracers). The composed form is five array passes forward and
// about ten back, each a fresh buffer; here each row stays in L1 between its statistics and its outputs.
// Internal: not part of the public array API.
#pragma once

#include "weft/array.hpp"

namespace weft::detail {

// x (..., d), scale and bias (d): float32 or float64 (other dtypes compute in float32). The results have x's
// dtype, as the layer_norm and layer_norm_vjp rules give (src/program/ops/nn.cc).
// The row statistics accumulate in the compute dtype (Eigen's vectorised sums); var is the biased variance
// (numpy's, PyTorch's). The output is rounded as xhat = (x - mean) * rstd, then xhat * scale, then + bias, one
// rounding each (no fused multiply-add), which layer_norm's batching rule relies on.
Array layer_norm(const Array& x, const Array& scale, const Array& bias, double eps);

struct LayerNormGrads {
  Array dx, dscale, dbias;
};
// The cotangents of x, scale and bias for the cotangent dy of layer_norm(x, scale, bias, eps).
LayerNormGrads layer_norm_vjp(const Array& x, const Array& scale, const Array& dy, double eps);

}  // namespace weft::detail
