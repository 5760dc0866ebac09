// strided_copy (strided_copy.hpp): one pass over the output, whole rows by memcpy where the innermost step is 1.
#include "array/strided_copy.hpp"

#include <cstddef>
#include <cstring>

namespace weft::detail {

Array strided_copy(const Array& in, const Shape& out_shape, const std::vector<std::int64_t>& start,
                   const std::vector<std::int64_t>& step) {
  Array out = Array::empty(out_shape, in.dtype());
  const std::int64_t total = out.size();
  if (total == 0) return out;
  const std::size_t elem = dtype_size(in.dtype());
  const std::size_t rank = out_shape.size();
  std::vector<std::int64_t> in_strides(rank, 1);
  for (std::size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * in.shape()[d];
  std::int64_t base = 0;
  for (std::size_t d = 0; d < rank; ++d) base += start[d] * in_strides[d];
  const std::byte* src = in.bytes();
  std::byte* dst = out.mutable_bytes();
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return out;
  }
  std::vector<std::int64_t> counter(rank, 0);
  const std::int64_t inner = out_shape[rank - 1];
  const std::int64_t inner_step = step[rank - 1] * in_strides[rank - 1];
  std::int64_t at = base;
  for (std::int64_t o = 0; o < total; o += inner) {
    if (inner_step == 1) {
      std::memcpy(dst + o * elem, src + at * elem, static_cast<std::size_t>(inner) * elem);
    } else {
      for (std::int64_t k = 0; k < inner; ++k) std::memcpy(dst + (o + k) * elem, src + (at + k * inner_step) * elem, elem);
    }
    // The odometer over the outer axes: advance the innermost outer axis, carrying into the ones before it.
    for (std::size_t d = rank - 1; d-- > 0;) {
      at += step[d] * in_strides[d];
      if (++counter[d] < out_shape[d]) break;
      at -= counter[d] * step[d] * in_strides[d];
      counter[d] = 0;
    }
  }
  return out;
}

}  // namespace weft::detail
