// The strided copy under the program layer's slice and broadcast_to kernels (src/program/ops/shape.cc): a fresh
// row-major array read from another one along per-axis starts and steps. Internal: not part of the public
// array API (Array::slice and weft::ops cover the user's slicing).
#pragma once

#include <cstdint>
#include <vector>

#include "weft/array.hpp"

namespace weft::detail {

// out[o] = in[source(o)] for a row-major walk over `out_shape` (rank = in's rank): axis d of the output starts
// at start[d] of the input and steps by step[d], which may be negative (a reversed slice) or 0 (an axis
// broadcast from size 1). The caller keeps every source index inside `in`; the result has in's dtype.
Array strided_copy(const Array& in, const Shape& out_shape, const std::vector<std::int64_t>& start,
                   const std::vector<std::int64_t>& step);

}  // namespace weft::detail
