// Array math with numpy / JAX semantics: what a training step needs (matmul, elementwise math, the softmax
// family, reductions, indexing). Free functions named as in jax.numpy / jax.nn, so code reads like JAX:
//
//   Array logits = matmul(relu(matmul(x, w1) + b1), w2) + b2;
//   Array loss = -mean(sum(one_hot(labels, 10) * log_softmax(logits, -1), {-1}));
//
// Dtypes follow JAX with 64-bit types enabled: the result of an op on float32 is float32 (never silently
// float64); float16 and bfloat16 are computed in float32 and rounded back once; integer and bool inputs of
// the transcendental functions (exp, log, tanh, sigmoid, softmax, ...) compute in and return float32. The
// kernels are Eigen's, compiled for the ISA chosen at build time (WEFT_ARCH, docs/training.md); nothing here
// exposes Eigen.
//
// Every function returns a new array (arrays are immutable values); errors are InvalidArgument naming the
// op and the rule broken, e.g. "matmul: contracting dimensions differ: (4, 7) @ (6, 2) (7 != 6)".
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "weft/array.hpp"

namespace weft {

// ---- linear algebra -----------------------------------------------------------------------------------

// Which operands of matmul enter transposed (their last two axes swapped), without a copy: the backward pass
// of a dense layer is matmul(x, dy, {.transpose_a = true}) and matmul(dy, w, {.transpose_b = true}).
struct MatmulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
};
// numpy.matmul: 2-D @ 2-D; 1-D operands are promoted (a to a row, b to a column) and the added axis removed
// from the result; leading (batch) axes broadcast. float32, float64, bfloat16, float16 (computed in float32),
// int32 and int64 (exact, wrapping). Mixed dtypes promote as the arithmetic operators do.
Array matmul(const Array& a, const Array& b, MatmulOptions options = {});
// Which library computes matmul in this process, and why: large float32 products run on oneDNN when it is
// installed and has JIT kernels for this CPU, large float64 ones (and float32 without oneDNN) on OpenBLAS when
// it is installed and runs kernels made for this CPU, everything else on Eigen (docs/array-math.md); e.g.
// "float32: oneDNN 2.6.3 (brg:avx512_core kernels); float64: OpenBLAS 0.3.21 (SkylakeX kernels); from 32^3
// multiply-adds, Eigen 3.4.0 below". WEFT_GEMM=auto|eigen|openblas|onednn overrides (docs/settings.md); an
// invalid value is an InvalidArgument here and at the first large matmul.
std::string matmul_backend();
// numpy.transpose: axis i of the result is axis perm[i] of x; an empty perm reverses the axes.
Array transpose(const Array& x, const std::vector<int>& perm = {});

// ---- elementwise, one operand -------------------------------------------------------------------------
Array exp(const Array& x);
Array log(const Array& x);
Array log1p(const Array& x);
Array tanh(const Array& x);
Array sqrt(const Array& x);
Array rsqrt(const Array& x);     // 1 / sqrt(x)
Array abs(const Array& x);       // keeps integer dtypes
Array negative(const Array& x);  // keeps integer dtypes (wrapping); the same as unary minus
Array sign(const Array& x);      // -1, 0, 1 (NaN stays NaN); keeps the dtype
Array sigmoid(const Array& x);   // jax.nn.sigmoid, 1 / (1 + exp(-x)), no overflow for large |x|
Array relu(const Array& x);      // jax.nn.relu: max(x, 0); NaN stays NaN; keeps the dtype

// ---- elementwise, several operands (numpy broadcasting, dtypes promoted) --------------------------------
Array maximum(const Array& a, const Array& b);  // NaN-propagating, as numpy.maximum
Array minimum(const Array& a, const Array& b);
Array maximum(const Array& a, double b);        // the scalar takes a's dtype (JAX weak typing)
Array minimum(const Array& a, double b);
// numpy.where: cond (bool, or nonzero of any dtype) picks from a or b; all three broadcast together.
Array where(const Array& cond, const Array& a, const Array& b);
Array where(const Array& cond, const Array& a, double b);
// numpy.clip: minimum(maximum(x, lo), hi); NaN stays NaN. Either bound may be absent.
Array clip(const Array& x, std::optional<double> lo, std::optional<double> hi);

// ---- the softmax family (jax.nn / jax.scipy.special), stable for large logits ----------------------------
Array softmax(const Array& x, int axis = -1);
Array log_softmax(const Array& x, int axis = -1);
// log(sum(exp(x), axis)) computed as max + log(sum(exp(x - max))); the axis is removed unless keepdims.
Array logsumexp(const Array& x, int axis = -1, bool keepdims = false);

// ---- reductions (also as Array methods: x.sum({0, 1}, true)) ---------------------------------------------
Array sum(const Array& x, const ReduceAxes& axes = {}, bool keepdims = false);
Array mean(const Array& x, const ReduceAxes& axes = {}, bool keepdims = false);
Array max(const Array& x, const ReduceAxes& axes = {}, bool keepdims = false);
Array min(const Array& x, const ReduceAxes& axes = {}, bool keepdims = false);
// Index of the first maximum / minimum along `axis` (of the flattened array when absent), as int32 (JAX's
// default index type). NaN counts as the maximum and as the minimum (its first occurrence wins), as numpy.
Array argmax(const Array& x, std::optional<int> axis = std::nullopt, bool keepdims = false);
Array argmin(const Array& x, std::optional<int> axis = std::nullopt, bool keepdims = false);

// ---- indexing -------------------------------------------------------------------------------------------
// jax.nn.one_hot: labels (any integer dtype) -> labels.shape + (num_classes,) of `dtype`; a label outside
// [0, num_classes) gives a row of zeros, as in JAX.
Array one_hot(const Array& labels, int num_classes, DType dtype = DType::f32);
// numpy.take: elements of x at `indices` (any integer dtype, negative counts from the end) along `axis`, or
// of the flattened x when absent. Result shape: x.shape[:axis] + indices.shape + x.shape[axis+1:]. An index
// out of range is an InvalidArgument naming it (numpy's rule; JAX would silently clamp or fill).
Array take(const Array& x, const Array& indices, std::optional<int> axis = std::nullopt);

}  // namespace weft
