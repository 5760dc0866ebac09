// Vectorised float32 kernels shared by the core's math files (elementwise_math.cc defines them; softmax.cc
// uses exp, the program layer's fused loops sqrt). Contiguous arrays; `out` may be `in`. Internal: never
// included by a public header.
#pragma once
#include <cstdint>

namespace weft::kernels {

// exp with the accuracy and special values of std::exp (Eigen's vectorised exp where it is accurate, the C
// library for NaN, inf and arguments whose result is subnormal or overflows).
void exp_f32(const float* in, float* out, std::int64_t n);

// sqrt, correctly rounded (std::sqrt's bits) on the CPU's packet instructions; fusion.cc's loops use it.
void sqrt_f32(const float* in, float* out, std::int64_t n);

}  // namespace weft::kernels
