// oneDNN as matmul's backend for large float32 products (and 16-bit float ones, which compute in float32).
//
// Why: a data-parallel training step on a 2-core machine runs 8 replicas, each multiplying its 32 rows by
// the whole weight matrices. At 32 rows a classic BLAS spends most of its extra time packing the weight
// panel (OpenBLAS's sgemm_itcopy was 17 % of a step), and both Eigen and OpenBLAS reach 110-137 GFLOP/s on
// one core of the AMD EPYC (Zen 5) we measure on. oneDNN's matmul (its "brgemm" kernels, JIT-generated for
// the CPU's ISA from cpuid, so it needs no CPU model table and has no misdetection to work around) reaches
// 140 at 32x784x512 on the plain row-major operands, and 165-176 on the weight-gradient shapes.
//
// Like OpenBLAS (blas.hpp), oneDNN is loaded at run time (dlopen of Debian's libdnnl2, on the first product
// large enough), never linked: a process that does no large float32 matmul never maps its 40 MB, and a weft
// built without oneDNN's headers (libdnnl-dev) still builds, with Eigen or OpenBLAS computing. Only the C API
// is used, through its own function types (decltype of the declarations), so the ABI is the header's.
//
// Every call runs on the calling thread: Debian builds oneDNN on OpenMP, and each weft thread that calls it
// first sets its own OpenMP thread count to 1 (omp_set_num_threads is per thread); weft owns the cores. The
// one exception is a product run for several replicas whose workers wait meanwhile (the executor's shared
// products): its caller widens it (gemm_threads.hpp), and the primitive is made for that many threads.
// Primitives are created once per shape and kept (up to 256 shapes, then the cache starts over); the scratchpad is the caller's (one buffer per thread, as
// a primitive runs to its end without yielding, so no two fibers of a thread share it at once); the math
// mode is set to strict float32 (no bf16/tf32 down-conversion, whatever ONEDNN_DEFAULT_FPMATH_MODE says).
#pragma once
#include <cstdint>
#include <string>

namespace weft::onednn {

class Library;  // the loaded library, its engine and its primitives (onednn.cc)

// Loads oneDNN once per process (later calls return the first answer). Null when it cannot be loaded, with
// `why` saying so; else `description` names it and the kernels its matmul runs here ("oneDNN 2.6.3
// (brg:avx512_core kernels)") and `jit` says whether those are JIT-generated ones (not its reference C++).
const Library* load(std::string& description, std::string& why, bool& jit);

// C (m, n) = op(A) @ op(B), row-major and dense; op(A) is (m, k), op(B) is (k, n), each given as stored (a
// transposed operand is read through its strides, never copied). Throws weft::Error if oneDNN refuses.
void matmul_f32(const Library& library, const float* a, const float* b, float* c, std::int64_t m, std::int64_t k,
                std::int64_t n, bool transpose_a, bool transpose_b);

// The same with bfloat16 operands (their bits) and a float32 result, accumulated in float32 by oneDNN's
// AVX512-BF16 / AMX kernels: the caller rounds it to bfloat16 once (as the float32 path does), so only the
// order of the float32 sums differs from converting the operands and running matmul_f32.
void matmul_bf16(const Library& library, const std::uint16_t* a, const std::uint16_t* b, float* c, std::int64_t m,
                 std::int64_t k, std::int64_t n, bool transpose_a, bool transpose_b);

// The implementation oneDNN's bfloat16 matmul picks on this CPU ("brg:avx512_core_bf16", "brg:avx512_core_amx"),
// or "" when it has only reference loops here (then bfloat16 products take the float32 path).
std::string bf16_kernels(const Library& library);

}  // namespace weft::onednn
