// Element-wise reductions of several buffers in a fixed order: out[i] = in[0][i] (op) in[1][i] (op) ..., so
// that every process and every member of a group computes bitwise the same result whatever path (shared
// memory, the pair exchange, the ring, the in-process transport) brought the inputs together. The one kernel
// set of the collectives and the transports; the lowest layer, so each can include it. Internal: never
// included by a public header.
//
// Only sum, prod, max and min: a mean is a sum and divide_sums (collectives/request.hpp lowers it). Integer
// sums and products wrap modulo 2^bits; floating max and min propagate NaN (as XLA); 16-bit floats
// accumulate in float32; booleans sum and multiply as int32 (JAX's psum), max is "or", min is "and".
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "weft/dtype.hpp"
#include "weft/reduce_op.hpp"

namespace weft::kernels {

// Elements per block of the kernels (a caller reducing block by block uses it too).
inline constexpr std::int64_t kReductionBlock = 2048;

// Reduces `count` elements: inputs[m] points at member m's first element (of `dtype`), `out` at the output's,
// whose elements have psum's dtype for the op (int32 for a boolean sum or product), or float32 for a 16-bit
// float sum kept `wide` (a mean's sums, divided before they are rounded). `out` must not overlap an input.
void reduce_in_order(DType dtype, ReduceOp op, std::span<const std::byte* const> inputs, std::byte* out,
                     std::int64_t count, bool wide = false);

// out[i] = sums[i] / divisor, for a mean: sums of sums_dtype, divided in float32 (float64 for float64 and
// int64 sums) and stored as out_dtype. In place when the two dtypes are the same.
void divide_sums(DType sums_dtype, const std::byte* sums, DType out_dtype, std::byte* out, std::int64_t count,
                 int divisor);

}  // namespace weft::kernels
