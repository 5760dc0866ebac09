// The dtypes reductions accumulate in and return, one definition for the kernels (array/reductions.cc) and the
// type rules of traced programs (program/ops/reductions.cc), so that a rule never says other than its kernel.
#pragma once
#include "weft/dtype.hpp"

namespace weft::detail {

// The dtype a sum of `dtype` accumulates in and returns, JAX's with 64-bit types off: bool, int8 and uint8 sum
// in int32 (a hundred int8 100s are 10000, not int8's wrapped 16; JAX sums uint8 in uint32, which weft does not
// have: int32 holds the same sums below 2^31); the others keep their dtype (int32 wraps as JAX's does; 16-bit
// floats accumulate in float32 and round once).
inline DType sum_dtype(DType dtype) {
  return dtype == DType::boolean || dtype == DType::i8 || dtype == DType::u8 ? DType::i32 : dtype;
}

}  // namespace weft::detail
