// Cumulative sums and products along one axis (jnp.cumsum / jnp.cumprod; lax's `reverse` runs from the end):
// the program layer's cumsum and cumprod ops (src/program/ops/reductions.cc).
// Internal: not part of the public array API.
#pragma once

#include "weft/array.hpp"

namespace weft::detail {

enum class Cumulative { sum, product };

// x's shape, in sum_dtype(x.dtype()) (reduction_dtypes.hpp: bool, int8 and uint8 accumulate in int32). Each
// result is the running total in scan order (16-bit floats carry it in float32 and round each result once;
// integers wrap as JAX's). `axis` is non-negative.
Array cumulative(const Array& x, int axis, Cumulative op, bool reverse);

}  // namespace weft::detail
