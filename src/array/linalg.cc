// matmul and transpose (ops.hpp). matmul is the hot kernel of a training step, so it is Eigen's GEMM on the
// row-major buffers as they are: transposed operands are transposed maps (no copies), batches loop over
// broadcast batch offsets. Eigen runs single-threaded (EIGEN_DONT_PARALLELIZE, no OpenMP): weft runs one
// replica per thread. Compiled with -march=${WEFT_ARCH} (src/core/CMakeLists.txt).
// With -march=native on an AVX-512 CPU, GCC 12 warns -Wmaybe-uninitialized inside its own avx512fintrin.h
// (the deliberately undefined first operand of _mm512_unpacklo_ps, inlined into Eigen's GEMM kernel): a
// false positive about the compiler's header, silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "array/blas.hpp"
#include "array/broadcast.hpp"
#include "array/isa.hpp"
#include "array/trace_hook.hpp"
#include "array/onednn.hpp"
#include "array/widened_matmul.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {

using namespace kernels;
using Index = Eigen::Index;

// ---- matmul ------------------------------------------------------------------------------------------------

// The same product through a BLAS GEMM (column-major): row-major C = op(A) op(B) is column-major
// C^T = op(B)^T op(A)^T, and a row-major matrix read column-major is its transpose, so B goes first, each
// operand keeps its own transpose flag and every leading dimension is a row length. beta = 0 overwrites C
// (never reads it), so the uninitialised output buffer is fine.
template <class T, class Gemm>
void blas_gemm(Gemm gemm, const T* a, const T* b, T* c, Index m, Index k, Index n, bool ta, bool tb) {
  const int rows = static_cast<int>(n), cols = static_cast<int>(m), depth = static_cast<int>(k);
  const int ldb = static_cast<int>(tb ? k : n), lda = static_cast<int>(ta ? m : k), ldc = static_cast<int>(n);
  const T one = 1, zero = 0;
  const blas::CallSlot slot;
  gemm(tb ? "T" : "N", ta ? "T" : "N", &rows, &cols, &depth, &one, b, &ldb, a, &lda, &zero, c, &ldc);
}

// C (m, n) = op(A) @ op(B), all row-major and dense; op(A) is (m, k), op(B) is (k, n). Large float32
// products go to oneDNN, large float32 and float64 ones to OpenBLAS when it runs kernels made for this CPU
// (array/blas.hpp), the rest to Eigen.
template <class T>
void gemm(const T* a, const T* b, T* c, Index m, Index k, Index n, bool ta, bool tb) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (blas::worth_gemm(m, k, n)) {
      const blas::Backend& backend = blas::backend();
      if constexpr (std::is_same_v<T, float>) {
        if (backend.onednn) return onednn::matmul_f32(*backend.onednn, a, b, c, m, k, n, ta, tb);
        if (backend.sgemm) return blas_gemm(backend.sgemm, a, b, c, m, k, n, ta, tb);
      } else {
        if (backend.dgemm) return blas_gemm(backend.dgemm, a, b, c, m, k, n, ta, tb);
      }
    }
  }
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<Mat> C(c, m, n);
  if (k == 0) {
    C.setZero();
    return;
  }
  const Eigen::Map<const Mat> A(a, ta ? k : m, ta ? m : k);
  const Eigen::Map<const Mat> B(b, tb ? n : k, tb ? k : n);
  if (!ta && !tb) {
    C.noalias() = A * B;
  } else if (ta && !tb) {
    C.noalias() = A.transpose() * B;
  } else if (!ta && tb) {
    C.noalias() = A * B.transpose();
  } else {
    C.noalias() = A.transpose() * B.transpose();
  }
}

std::string operand_str(const Array& x, bool transposed) { return shape_str(x.shape()) + (transposed ? ".T" : ""); }

// The dtype the GEMM runs in for a promoted dtype, and whether its elements are read as the unsigned type of
// the same width (integers: wrapping arithmetic without signed-overflow UB).
DType compute_dtype(DType dtype) {
  switch (dtype) {
    case DType::f16:
    case DType::bf16:
    case DType::f32: return DType::f32;
    case DType::f64: return DType::f64;
    case DType::i8:
    case DType::u8:
    case DType::i32: return DType::i32;  // products mod 2^32 give the right residue mod 2^8 too
    case DType::i64:
    case DType::boolean: return DType::i64;  // bool: counts of true products, nonzero = true
  }
  return dtype;
}

template <class T>
void run_matmul(const Array& a, const Array& b, Array& out, const Shape& batch, const Shape& a_batch,
                const Shape& b_batch, Index m, Index k, Index n, bool ta, bool tb) {
  const T* pa = reinterpret_cast<const T*>(a.bytes());
  const T* pb = reinterpret_cast<const T*>(b.bytes());
  T* pc = reinterpret_cast<T*>(out.mutable_bytes());
  const std::vector<std::int64_t> sa = broadcast_strides(a_batch, batch);
  const std::vector<std::int64_t> sb = broadcast_strides(b_batch, batch);
  const std::int64_t a_size = m * k, b_size = k * n, c_size = m * n;
  for_each_broadcast(batch, sa, sb, [&](std::int64_t o, std::int64_t ia, std::int64_t ib) {
    gemm(pa + ia * a_size, pb + ib * b_size, pc + o * c_size, m, k, n, ta, tb);
  });
}

// bfloat16 products on oneDNN's bfloat16 kernels (AVX512-BF16 or AMX), when it has them here: the library, or
// null (then bfloat16 computes as float32, converted exactly). WEFT_GEMM choosing another library than oneDNN
// leaves oneDNN unloaded, and so turns this off too.
const onednn::Library* bf16_library() {
  static const onednn::Library* const library = [] {
    const onednn::Library* lib = blas::backend().onednn;
    return lib != nullptr && !onednn::bf16_kernels(*lib).empty() ? lib : nullptr;
  }();
  return library;
}

// The batched bfloat16 product, float32 out (rounded by the caller); products too small for a library call
// (blas::worth_gemm) convert their operands and take Eigen's float32 GEMM, as the float32 path does.
void run_matmul_bf16(const onednn::Library& library, const Array& a, const Array& b, Array& out, const Shape& batch,
                     const Shape& a_batch, const Shape& b_batch, Index m, Index k, Index n, bool ta, bool tb) {
  const auto* pa = reinterpret_cast<const std::uint16_t*>(a.bytes());
  const auto* pb = reinterpret_cast<const std::uint16_t*>(b.bytes());
  float* pc = reinterpret_cast<float*>(out.mutable_bytes());
  const std::vector<std::int64_t> sa = broadcast_strides(a_batch, batch);
  const std::vector<std::int64_t> sb = broadcast_strides(b_batch, batch);
  const std::int64_t a_size = m * k, b_size = k * n, c_size = m * n;
  for_each_broadcast(batch, sa, sb, [&](std::int64_t o, std::int64_t ia, std::int64_t ib) {
    onednn::matmul_bf16(library, pa + ia * a_size, pb + ib * b_size, pc + o * c_size, m, k, n, ta, tb);
  });
}

// ---- transpose ---------------------------------------------------------------------------------------------

// Copies an n-d permutation given as compressed dims (no size-1 axes, no two neighbours that stay neighbours):
// out dim i has size d[i] and reads the input with element stride s[i]. The output is written in order; when
// the input's contiguous axis is not the output's last one, 2-d tiles keep both sides' cache lines hot.
template <class U>
void permute(const U* in, U* out, const std::vector<std::int64_t>& d, const std::vector<std::int64_t>& s) {
  const int r = static_cast<int>(d.size());
  std::vector<std::int64_t> os(r);  // output strides (row-major)
  std::int64_t stride = 1;
  for (int i = r - 1; i >= 0; --i) {
    os[i] = stride;
    stride *= d[i];
  }
  const int p = static_cast<int>(std::find(s.begin(), s.end(), 1) - s.begin());  // the input's contiguous dim
  // The dims walked by the odometer: every dim but the last, and but p when tiling.
  std::vector<int> walk;
  for (int i = 0; i < r - 1; ++i) {
    if (i != p) walk.push_back(i);
  }
  std::vector<std::int64_t> counter(walk.size(), 0);
  std::int64_t in_off = 0, out_off = 0;
  const std::int64_t last = d[r - 1];
  const std::int64_t last_stride = s[r - 1];
  constexpr std::int64_t kTile = sizeof(U) == 8 ? 8 : 16;  // measured: 8-32 alike, 64 slower
  while (true) {
    if (p == r - 1) {
      std::memcpy(out + out_off, in + in_off, static_cast<std::size_t>(last) * sizeof(U));
    } else {
      const std::int64_t rows = d[p];
      const std::int64_t row_stride = os[p];
      const U* src = in + in_off;
      U* dst = out + out_off;
      for (std::int64_t i0 = 0; i0 < rows; i0 += kTile) {
        const std::int64_t i1 = std::min(rows, i0 + kTile);
        for (std::int64_t j0 = 0; j0 < last; j0 += kTile) {
          const std::int64_t j1 = std::min(last, j0 + kTile);
          for (std::int64_t i = i0; i < i1; ++i) {
            U* drow = dst + i * row_stride;
            const U* scol = src + i;
            for (std::int64_t j = j0; j < j1; ++j) drow[j] = scol[j * last_stride];
          }
        }
      }
    }
    int w = static_cast<int>(walk.size()) - 1;
    for (; w >= 0; --w) {
      const int dim = walk[w];
      in_off += s[dim];
      out_off += os[dim];
      if (++counter[w] < d[dim]) break;
      in_off -= s[dim] * d[dim];
      out_off -= os[dim] * d[dim];
      counter[w] = 0;
    }
    if (w < 0) break;
  }
}

std::string perm_str(const std::vector<int>& perm) {
  std::string out = "(";
  for (std::size_t i = 0; i < perm.size(); ++i) out += (i ? ", " : "") + std::to_string(perm[i]);
  return out + (perm.size() == 1 ? ",)" : ")");
}

}  // namespace

std::string matmul_backend() {
  const std::string eigen = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                            std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION);
  const blas::Backend& backend = blas::backend();
  if (backend.float32.empty() && backend.float64.empty() && backend.eigen_float32 == backend.eigen_float64) {
    return eigen + " (" + backend.eigen_float32 + ")";
  }
  auto part = [&](const std::string& library, const std::string& eigen_why) {
    return library.empty() ? eigen + " (" + eigen_why + ")" : library;
  };
  const onednn::Library* bf16 = bf16_library();
  const std::string bfloat16 =
      bf16 != nullptr ? "oneDNN (" + onednn::bf16_kernels(*bf16) + " kernels, float32 accumulation)"
                      : "as float32 (oneDNN has no bfloat16 kernels for this CPU, or is not used)";
  return "float32: " + part(backend.float32, backend.eigen_float32) + "; float64: " +
         part(backend.float64, backend.eigen_float64) + "; bfloat16: " + bfloat16 + "; from 32^3 multiply-adds, " +
         eigen + " below";
}

namespace {

// The float32 result of a bfloat16 product, rounded to bfloat16's precision where it lies: astype(bf16) and
// back, without the bfloat16 array (the same conversions, so the same bits, NaN quieted as there).
Array rounded_as_bf16(Array out) {
  float* p = reinterpret_cast<float*>(out.mutable_bytes());
  const std::int64_t count = out.size();
  for (std::int64_t i = 0; i < count; ++i) p[i] = bf16_to_float(float_to_bf16(p[i]));
  return out;
}

// matmul, or with `widen` (bfloat16 operands only) matmul(...).astype(f32) in one pass.
Array matmul_impl(const Array& a, const Array& b, MatmulOptions options, bool widen) {
  isa::ensure_kernels_supported();
  const bool ta = options.transpose_a, tb = options.transpose_b;
  auto where = [&] { return operand_str(a, ta) + " @ " + operand_str(b, tb); };
  if (a.ndim() == 0 || b.ndim() == 0) {
    throw InvalidArgument("matmul: operands need at least 1 dimension, got a 0-d array: " + where());
  }
  if ((ta && a.ndim() == 1) || (tb && b.ndim() == 1)) {
    throw InvalidArgument(std::string("matmul: transpose_") + (ta && a.ndim() == 1 ? "a" : "b") +
                          " swaps the last two axes, so it needs an operand of at least 2 dimensions: " +
                          shape_str(a.shape()) + " @ " + shape_str(b.shape()));
  }
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const int na = a.ndim(), nb = b.ndim();
  // op(a) is (m, k) and op(b) is (k, n); a 1-d a is a row (m = 1), a 1-d b a column (n = 1).
  const std::int64_t m = na == 1 ? 1 : (ta ? as[na - 1] : as[na - 2]);
  const std::int64_t ka = na == 1 ? as[0] : (ta ? as[na - 2] : as[na - 1]);
  const std::int64_t kb = nb == 1 ? bs[0] : (tb ? bs[nb - 1] : bs[nb - 2]);
  const std::int64_t n = nb == 1 ? 1 : (tb ? bs[nb - 2] : bs[nb - 1]);
  if (ka != kb) {
    throw InvalidArgument("matmul: contracting dimensions differ: " + where() + " (" + std::to_string(ka) +
                          " != " + std::to_string(kb) + ")");
  }
  const Shape a_batch(as.begin(), as.end() - std::min(na, 2));
  const Shape b_batch(bs.begin(), bs.end() - std::min(nb, 2));
  Shape batch;
  try {
    batch = broadcast_shapes(a_batch, b_batch);
  } catch (const InvalidArgument&) {
    throw InvalidArgument("matmul: batch dimensions " + shape_str(a_batch) + " and " + shape_str(b_batch) +
                          " do not broadcast: " + where());
  }
  Shape out_shape = batch;
  if (na > 1) out_shape.push_back(m);
  if (nb > 1) out_shape.push_back(n);
  if (a.traced() || b.traced()) [[unlikely]] {
    // The transposed forms stay one equation (the same kernel call as here), not a transpose and a matmul.
    ProgramParams params;
    if (ta) params["transpose_a"] = true;
    if (tb) params["transpose_b"] = true;
    return detail::record1("matmul", {a, b}, std::move(params));
  }

  const DType dtype = promote_types(a.dtype(), b.dtype());
  if (a.dtype() == DType::bf16 && b.dtype() == DType::bf16 && blas::worth_gemm(m, ka, n)) {
    if (const onednn::Library* library = bf16_library()) {
      Array out = Array::empty(out_shape, DType::f32);
      if (out.size() > 0) {
        const blas::CallSlot slot;
        run_matmul_bf16(*library, a, b, out, batch, a_batch, b_batch, m, ka, n, ta, tb);
      }
      return widen ? rounded_as_bf16(std::move(out)) : out.astype(DType::bf16);
    }
  }
  const DType compute = compute_dtype(dtype);
  const Array x = a.astype(compute);
  const Array y = b.astype(compute);
  Array out = Array::empty(out_shape, compute);
  if (out.size() > 0) {
    switch (compute) {
      case DType::f32: run_matmul<float>(x, y, out, batch, a_batch, b_batch, m, ka, n, ta, tb); break;
      case DType::f64: run_matmul<double>(x, y, out, batch, a_batch, b_batch, m, ka, n, ta, tb); break;
      case DType::i32: run_matmul<std::uint32_t>(x, y, out, batch, a_batch, b_batch, m, ka, n, ta, tb); break;
      case DType::i64: run_matmul<std::uint64_t>(x, y, out, batch, a_batch, b_batch, m, ka, n, ta, tb); break;
      default: break;
    }
  }
  if (widen) return rounded_as_bf16(std::move(out));  // compute is float32 for bfloat16 operands
  return out.astype(dtype);
}

}  // namespace

Array matmul(const Array& a, const Array& b, MatmulOptions options) { return matmul_impl(a, b, options, false); }

Array detail::matmul_bf16_widened(const Array& a, const Array& b, MatmulOptions options) {
  if (a.dtype() != DType::bf16 || b.dtype() != DType::bf16) {
    throw InvalidArgument("matmul_bf16_widened: needs bfloat16 operands, got " + std::string(dtype_name(a.dtype())) +
                          " and " + std::string(dtype_name(b.dtype())));
  }
  if (a.traced() || b.traced()) return matmul(a, b, options).astype(DType::f32);  // two equations, as written
  return matmul_impl(a, b, options, true);
}

Array transpose(const Array& x, const std::vector<int>& perm_in) {
  isa::ensure_kernels_supported();
  const int nd = x.ndim();
  std::vector<int> perm(nd);
  if (perm_in.empty()) {
    for (int i = 0; i < nd; ++i) perm[i] = nd - 1 - i;
  } else {
    if (static_cast<int>(perm_in.size()) != nd) {
      throw InvalidArgument("transpose: perm " + perm_str(perm_in) + " names " + std::to_string(perm_in.size()) +
                            " axes but the array has " + std::to_string(nd) + " dimensions (shape " +
                            shape_str(x.shape()) + ")");
    }
    std::vector<bool> seen(nd, false);
    for (int i = 0; i < nd; ++i) {
      const int ax = perm_in[i];
      if (ax < -nd || ax >= nd) {
        throw InvalidArgument("transpose: axis " + std::to_string(ax) + " in perm " + perm_str(perm_in) +
                              " is out of bounds for array of dimension " + std::to_string(nd));
      }
      perm[i] = ax < 0 ? ax + nd : ax;
      if (seen[perm[i]]) {
        throw InvalidArgument("transpose: perm " + perm_str(perm_in) + " repeats axis " + std::to_string(perm[i]) +
                              "; it must be a permutation of the " + std::to_string(nd) + " axes");
      }
      seen[perm[i]] = true;
    }
  }
  if (x.traced()) [[unlikely]] {
    if (perm_in.empty()) return detail::record1("transpose", {x});
    return detail::record1("transpose", {x}, {{"perm", std::vector<std::int64_t>(perm.begin(), perm.end())}});
  }
  const Shape& shape = x.shape();
  std::vector<std::int64_t> in_strides(nd);
  std::int64_t stride = 1;
  for (int i = nd - 1; i >= 0; --i) {
    in_strides[i] = stride;
    stride *= shape[i];
  }
  Shape out_shape(nd);
  for (int i = 0; i < nd; ++i) out_shape[i] = shape[perm[i]];
  // Compressed dims: size-1 axes dropped, output neighbours that are input neighbours merged.
  std::vector<std::int64_t> d, s;
  for (int i = 0; i < nd; ++i) {
    const std::int64_t size = shape[perm[i]];
    if (size == 1) continue;
    if (!d.empty() && s.back() == in_strides[perm[i]] * size) {
      d.back() *= size;
      s.back() = in_strides[perm[i]];
    } else {
      d.push_back(size);
      s.push_back(in_strides[perm[i]]);
    }
  }
  if (d.size() <= 1 || x.size() == 0) return x.reshape(out_shape);  // the same order: a view
  Array out = Array::empty(out_shape, x.dtype());
  const std::byte* in = x.bytes();
  std::byte* o = out.mutable_bytes();
  switch (dtype_size(x.dtype())) {
    case 1: permute(reinterpret_cast<const std::uint8_t*>(in), reinterpret_cast<std::uint8_t*>(o), d, s); break;
    case 2: permute(reinterpret_cast<const std::uint16_t*>(in), reinterpret_cast<std::uint16_t*>(o), d, s); break;
    case 4: permute(reinterpret_cast<const std::uint32_t*>(in), reinterpret_cast<std::uint32_t*>(o), d, s); break;
    case 8: permute(reinterpret_cast<const std::uint64_t*>(in), reinterpret_cast<std::uint64_t*>(o), d, s); break;
    default: throw InvalidArgument("transpose: unsupported element size");
  }
  return out;
}

}  // namespace weft
