// The tanh-approximated GELU (jax.nn.gelu(approximate=True)) and its derivative as single array passes, for
// the program layer's gelu_tanh op and its VJP (src/program/ops/elementwise.cc). Internal: weft::nn-style names in
// the public headers are the composed ops; programs get this fused form from weft.nn.gelu on tracers.
#pragma once

#include "weft/array.hpp"

namespace weft::detail {

// u = kGeluC (x + kGeluA x^3): the kernels', and the program layer's second derivative (ops/elementwise.cc).
inline constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kGeluA = 0.044715;

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); float types keep their dtype, others give float32.
Array gelu_tanh(const Array& x);
// d/dx of gelu_tanh at x.
Array gelu_tanh_derivative(const Array& x);

}  // namespace weft::detail
