// A bfloat16 product handed on in float32: what mixed precision does after every product (the policy's
// cast_to_output, torch.autocast's float32 consumers). matmul(a, b).astype(f32) would round the float32
// accumulation to a bfloat16 array and widen it into a second, float32 one: two passes and an array between.
// This is the same values in one pass, in place: the float32 result rounded to bfloat16's precision. The
// program layer's fusion (src/program/fusion.cc) runs a matmul followed by such an astype this way.
// Internal: never included by a public header.
#pragma once
#include "weft/array.hpp"
#include "weft/ops.hpp"

namespace weft::detail {

// matmul(a, b, options).astype(DType::f32), bit for bit, for bfloat16 `a` and `b` (anything else: an
// InvalidArgument; matmul's own errors as matmul gives them).
Array matmul_bf16_widened(const Array& a, const Array& b, MatmulOptions options);

}  // namespace weft::detail
