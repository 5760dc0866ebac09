// numpy broadcasting: the common shape of two operands and a row-major walk over it. Internal to the core's
// kernel files.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "weft/array.hpp"
#include "weft/error.hpp"

namespace weft::kernels {

inline Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    const std::int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const std::int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw InvalidArgument("operands could not be broadcast together with shapes " + shape_str(a) + " " +
                            shape_str(b));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Element strides of `in` read as `out` (0 along broadcast axes).
inline std::vector<std::int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<std::int64_t> strides(out.size(), 0);
  std::int64_t stride = 1;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::size_t i = in.size() - 1 - k;
    const std::size_t o = out.size() - 1 - k;
    strides[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

// Calls f(out_index, a_index, b_index) for every element of `out` in row-major order.
template <class F>
void for_each_broadcast(const Shape& out, const std::vector<std::int64_t>& sa, const std::vector<std::int64_t>& sb,
                        F&& f) {
  const std::int64_t total = num_elements(out);
  if (total == 0) return;
  const int nd = static_cast<int>(out.size());
  if (nd == 0) {
    f(0, 0, 0);
    return;
  }
  const std::int64_t inner = out[nd - 1];
  const std::int64_t step_a = sa[nd - 1];
  const std::int64_t step_b = sb[nd - 1];
  std::vector<std::int64_t> counter(nd, 0);
  std::int64_t ia = 0, ib = 0;
  for (std::int64_t o = 0; o < total; o += inner) {
    for (std::int64_t k = 0; k < inner; ++k) f(o + k, ia + k * step_a, ib + k * step_b);
    for (int d = nd - 2; d >= 0; --d) {
      if (++counter[d] < out[d]) {
        ia += sa[d];
        ib += sb[d];
        break;
      }
      ia -= sa[d] * (out[d] - 1);
      ib -= sb[d] * (out[d] - 1);
      counter[d] = 0;
    }
  }
}

// Calls f(out_index, c_index, a_index, b_index) for every element of `out` in row-major order: the walk of
// for_each_broadcast with a third operand (numpy.where's condition).
template <class F>
void for_each_broadcast3(const Shape& out, const std::vector<std::int64_t>& sc, const std::vector<std::int64_t>& sa,
                         const std::vector<std::int64_t>& sb, F&& f) {
  const std::int64_t total = num_elements(out);
  if (total == 0) return;
  const int nd = static_cast<int>(out.size());
  if (nd == 0) {
    f(0, 0, 0, 0);
    return;
  }
  const std::int64_t inner = out[nd - 1];
  std::vector<std::int64_t> counter(nd, 0);
  std::int64_t ic = 0, ia = 0, ib = 0;
  for (std::int64_t o = 0; o < total; o += inner) {
    for (std::int64_t k = 0; k < inner; ++k) f(o + k, ic + k * sc[nd - 1], ia + k * sa[nd - 1], ib + k * sb[nd - 1]);
    for (int d = nd - 2; d >= 0; --d) {
      if (++counter[d] < out[d]) {
        ic += sc[d];
        ia += sa[d];
        ib += sb[d];
        break;
      }
      ic -= sc[d] * (out[d] - 1);
      ia -= sa[d] * (out[d] - 1);
      ib -= sb[d] * (out[d] - 1);
      counter[d] = 0;
    }
  }
}

}  // namespace weft::kernels
