// one_hot and take (ops.hpp): the label encoding of a classifier's loss and the gather of rows (a batch of
// examples, an embedding lookup). Both validate every index before writing anything. Compiled with
// -march=${WEFT_ARCH} (src/core/CMakeLists.txt).
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "array/element_types.hpp"
#include "array/isa.hpp"
#include "array/trace_hook.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {

using namespace kernels;

// The elements of an integer array as int64. Floats and bool are refused: an index must be an integer.
std::vector<std::int64_t> integer_values(const Array& x, const char* op, const char* what) {
  if (!is_integer(x.dtype())) {
    throw InvalidArgument(std::string(op) + ": " + what +
                          " must have an integer dtype (int8, uint8, int32, int64), got " +
                          std::string(dtype_name(x.dtype())));
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(x.size()));
  dispatch(x.dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<S>) {
      const S* p = elements<S>(x);
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::int64_t>(p[i]);
    }
  });
  return out;
}

}  // namespace

Array one_hot(const Array& labels, int num_classes, DType dtype) {
  isa::ensure_kernels_supported();
  if (num_classes < 0) {
    throw InvalidArgument("one_hot: num_classes must be non-negative, got " + std::to_string(num_classes));
  }
  if (labels.traced()) [[unlikely]] {
    return detail::record1("one_hot", {labels}, {{"num_classes", std::int64_t{num_classes}}, {"dtype", dtype}});
  }
  const std::vector<std::int64_t> values = integer_values(labels, "one_hot", "labels");
  Shape shape = labels.shape();
  shape.push_back(num_classes);
  Array out = Array::empty(shape, dtype);
  if (out.size() == 0) return out;
  std::memset(out.mutable_bytes(), 0, out.nbytes());  // all-zero bits are 0 in every dtype
  dispatch(dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S one = Traits<S>::from_double(1.0);
    S* po = mutable_elements<S>(out);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::int64_t label = values[i];
      if (label >= 0 && label < num_classes) po[static_cast<std::int64_t>(i) * num_classes + label] = one;
    }
  });
  return out;
}

Array take(const Array& x, const Array& indices, std::optional<int> axis) {
  isa::ensure_kernels_supported();
  if (x.traced() || indices.traced()) [[unlikely]] {
    // As weft/_jnp.py: no axis takes from the flattened x.
    if (!axis) return detail::record1("take", {x.reshape({-1}), indices});
    return detail::record1("take", {x, indices}, {{"axis", detail::traced_axis(*axis, x.ndim())}});
  }
  std::vector<std::int64_t> index = integer_values(indices, "take", "indices");
  const Array source = axis ? x : x.reshape({x.size()});
  const int nd = source.ndim();
  int ax = 0;
  if (axis) {
    if (*axis < -nd || *axis >= nd) {
      throw InvalidArgument("take: axis " + std::to_string(*axis) + " is out of bounds for array of dimension " +
                            std::to_string(nd));
    }
    ax = *axis < 0 ? *axis + nd : *axis;
  }
  const Shape& shape = source.shape();
  const std::int64_t n = shape[ax];
  for (std::int64_t& i : index) {
    if (i < -n || i >= n) {
      throw InvalidArgument("take: index " + std::to_string(i) + " is out of bounds for axis " + std::to_string(ax) +
                            " with size " + std::to_string(n) + (axis ? "" : " (the flattened array)"));
    }
    if (i < 0) i += n;
  }
  Shape out_shape(shape.begin(), shape.begin() + ax);
  out_shape.insert(out_shape.end(), indices.shape().begin(), indices.shape().end());
  out_shape.insert(out_shape.end(), shape.begin() + ax + 1, shape.end());
  Array out = Array::empty(out_shape, x.dtype());
  if (out.size() == 0) return out;
  const std::int64_t outer = num_elements(Shape(shape.begin(), shape.begin() + ax));
  const std::size_t chunk = static_cast<std::size_t>(num_elements(Shape(shape.begin() + ax + 1, shape.end()))) *
                            dtype_size(x.dtype());
  const std::byte* src = source.bytes();
  std::byte* dst = out.mutable_bytes();
  for (std::int64_t o = 0; o < outer; ++o) {
    const std::byte* block = src + static_cast<std::size_t>(o * n) * chunk;
    for (const std::int64_t i : index) {
      std::memcpy(dst, block + static_cast<std::size_t>(i) * chunk, chunk);
      dst += chunk;
    }
  }
  return out;
}

}  // namespace weft
