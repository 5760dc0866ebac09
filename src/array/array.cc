// weft::Array storage, views and dtype-agnostic (byte-level) copies; MemoryAccount::charge.
// Typed kernels (conversions, arithmetic, reductions) live in array_ops.cc, printing in array_format.cc.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>
#include <string>
#include <utility>

#include "array/buffer_pool.hpp"
#include "array/sole_reference.hpp"
#include "array/trace_hook.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"

namespace weft {

// ---- memory accounting ------------------------------------------------------------------------------

void MemoryAccount::charge(std::int64_t bytes) {
  if (capacity_ <= 0) {
    used_.fetch_add(bytes, std::memory_order_relaxed);
    return;
  }
  std::int64_t current = used_.load(std::memory_order_relaxed);
  for (;;) {
    if (bytes > capacity_ - current) {
      throw OutOfMemoryError("device memory exhausted on " + owner_ + ": asked " + std::to_string(bytes) +
                             " bytes, " + std::to_string(capacity_ - current) + " bytes free of " +
                             std::to_string(capacity_));
    }
    if (used_.compare_exchange_weak(current, current + bytes, std::memory_order_relaxed)) return;
  }
}

// ---- Buffer -----------------------------------------------------------------------------------------

namespace {
constexpr std::size_t kAlignment = 64;
std::size_t allocation_size(std::size_t bytes) {
  return std::max<std::size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
}
}  // namespace

Buffer::Buffer(std::size_t bytes, std::shared_ptr<MemoryAccount> account)
    : bytes_(bytes), account_(account ? std::move(account) : default_memory_account()) {
  if (account_) account_->charge(static_cast<std::int64_t>(bytes_));
  try {
    data_ = detail::acquire_block(allocation_size(bytes_), account_.get());
  } catch (const std::bad_alloc&) {
    // Resource exhaustion is an error the program can report, like a device's capacity.
    if (account_) account_->release(static_cast<std::int64_t>(bytes_));
    throw OutOfMemoryError("out of memory: cannot allocate " + std::to_string(bytes_) + " bytes" +
                           (account_ ? " for " + account_->owner() : std::string()) + " (the system refused)");
  } catch (...) {
    if (account_) account_->release(static_cast<std::int64_t>(bytes_));
    throw;
  }
}

Buffer::~Buffer() {
  detail::release_block(data_, allocation_size(bytes_), account_.get());
  if (account_) account_->release(static_cast<std::int64_t>(bytes_));
}

// ---- shapes -----------------------------------------------------------------------------------------

std::int64_t num_elements(const Shape& shape) {
  // Checked: a count that wraps (2^32 x 2^32 x 3 is 0 in 64-bit arithmetic) would make an array smaller than
  // its shape. As in numpy, a zero dimension does not excuse the others from overflowing.
  std::int64_t n = 1;
  bool zero = false;
  for (std::int64_t d : shape) {
    if (d == 0) {
      zero = true;
    } else if (__builtin_mul_overflow(n, d, &n)) {
      throw InvalidArgument("array is too big: shape " + shape_str(shape) + " has more than 2^63 - 1 elements");
    }
  }
  return zero ? 0 : n;
}

std::string shape_str(const Shape& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

namespace {

// Dimensions >= 0, and the element count and byte size representable (at most PTRDIFF_MAX bytes: the
// largest object C++ can index).
void check_shape(const Shape& shape, DType dtype, const char* what) {
  for (std::int64_t d : shape) {
    if (d < 0) {
      throw InvalidArgument(std::string(what) + ": negative dimensions are not allowed, got shape " +
                            shape_str(shape));
    }
  }
  const std::int64_t n = num_elements(shape);
  const auto item = static_cast<std::int64_t>(dtype_size(dtype));
  if (n > std::numeric_limits<std::ptrdiff_t>::max() / item) {
    throw InvalidArgument("array is too big: shape " + shape_str(shape) + " of " + std::string(dtype_name(dtype)) +
                          " needs more than 2^63 - 1 bytes");
  }
}

// Normalises `axis` for an array of `ndim` dimensions (negative counts from the end).
int normalize_axis(int axis, int ndim, const char* what) {
  if (axis < -ndim || axis >= ndim) {
    throw InvalidArgument(std::string(what) + ": axis " + std::to_string(axis) +
                          " is out of bounds for array of dimension " + std::to_string(ndim));
  }
  return axis < 0 ? axis + ndim : axis;
}

// Python-style clamping of a slice bound to [0, size].
std::int64_t clamp_bound(std::int64_t bound, std::int64_t size) {
  if (bound < 0) bound += size;
  return std::clamp<std::int64_t>(bound, 0, size);
}

// Row-major strides in elements.
std::vector<std::int64_t> strides_of(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

}  // namespace

// ---- Array basics -----------------------------------------------------------------------------------

Array::Array() = default;

Array::Array(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer, std::size_t offset, int device)
    : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)), offset_(offset), device_(device) {
  check_shape(shape_, dtype_, "Array");  // dtype_size() in it validates the tag
  const std::size_t need = nbytes();
  if (need > 0 && !buffer_) {
    throw InvalidArgument("Array: shape " + shape_str(shape_) + " of " + std::string(dtype_name(dtype_)) +
                          " needs " + std::to_string(need) + " bytes but no buffer was given");
  }
  if (buffer_ && offset_ + need > buffer_->size()) {
    throw InvalidArgument("Array: shape " + shape_str(shape_) + " of " + std::string(dtype_name(dtype_)) +
                          " at byte offset " + std::to_string(offset_) + " needs " + std::to_string(need) +
                          " bytes but the buffer holds " + std::to_string(buffer_->size()));
  }
}

Array Array::from_bytes(DType dtype, Shape shape, const void* data) {
  check_shape(shape, dtype, "from_bytes");
  Array out = empty(shape, dtype);
  const std::size_t n = out.nbytes();
  if (n > 0) {
    if (data == nullptr) throw InvalidArgument("from_bytes: null data for " + std::to_string(n) + " bytes");
    std::byte* dst = out.mutable_bytes();
    std::memcpy(dst, data, n);
    if (dtype == DType::boolean) {
      for (std::size_t i = 0; i < n; ++i) dst[i] = dst[i] != std::byte{0} ? std::byte{1} : std::byte{0};
    }
  }
  return out;
}

Array Array::empty(const Shape& shape, DType dtype, std::shared_ptr<MemoryAccount> account, int device) {
  check_shape(shape, dtype, "empty");
  const std::size_t n = static_cast<std::size_t>(num_elements(shape)) * dtype_size(dtype);
  return Array(dtype, shape, std::make_shared<Buffer>(n, std::move(account)), 0, device);
}

const std::byte* Array::bytes() const {
  if (trace_) [[unlikely]] detail::throw_traced_read("Array::bytes");
  return buffer_ ? buffer_->data() + offset_ : nullptr;
}

std::byte* Array::mutable_bytes() {
  if (trace_) [[unlikely]] detail::throw_traced_read("Array::mutable_bytes");
  const std::size_t n = nbytes();
  const bool exclusive = offset_ == 0 && buffer_ && buffer_->size() == n && detail::sole_reference(buffer_);
  if (!exclusive) {
    auto fresh = std::make_shared<Buffer>(n, buffer_ ? buffer_->account() : nullptr);
    if (n > 0) std::memcpy(fresh->data(), bytes(), n);
    buffer_ = std::move(fresh);
    offset_ = 0;
  }
  return buffer_->data();
}

void Array::check_element_type(DType wanted) const {
  if (wanted != dtype_) {
    throw InvalidArgument("array of dtype " + std::string(dtype_name(dtype_)) + " accessed as " +
                          std::string(dtype_name(wanted)));
  }
}

// ---- views ------------------------------------------------------------------------------------------

Array Array::reshape(Shape shape) const {
  if (trace_) [[unlikely]] return detail::record1("reshape", {*this}, {{"shape", shape}});
  int unknown = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (unknown >= 0) throw InvalidArgument("reshape: can only specify one unknown dimension, got " + shape_str(shape));
      unknown = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw InvalidArgument("reshape: negative dimensions are not allowed, got " + shape_str(shape));
    } else if (shape[i] != 0 && __builtin_mul_overflow(known, shape[i], &known)) {
      throw InvalidArgument("reshape: cannot reshape array of size " + std::to_string(size()) + " into shape " +
                            shape_str(shape) + ": array is too big");
    }
  }
  if (std::count(shape.begin(), shape.end(), 0) > 0) known = 0;
  const std::int64_t n = size();
  if (unknown >= 0) {
    if (known == 0 || n % known != 0) {
      throw InvalidArgument("reshape: cannot reshape array of size " + std::to_string(n) + " into shape " +
                            shape_str(shape));
    }
    shape[unknown] = n / known;
  } else if (known != n) {
    throw InvalidArgument("reshape: cannot reshape array of size " + std::to_string(n) + " into shape " +
                          shape_str(shape));
  }
  return Array(dtype_, std::move(shape), buffer_, offset_, device_);
}

Array Array::operator[](std::int64_t index) const {
  if (ndim() == 0) {
    throw InvalidArgument("too many indices for array: array is 0-dimensional, but 1 were indexed");
  }
  const std::int64_t n = shape_[0];
  if (index < -n || index >= n) {
    throw InvalidArgument("index " + std::to_string(index) + " is out of bounds for axis 0 with size " +
                          std::to_string(n));
  }
  if (index < 0) index += n;
  Shape rest(shape_.begin() + 1, shape_.end());
  if (trace_) [[unlikely]] {
    // x[k] as weft/_jnp.py records it: a slice of axis 0, then the axis dropped.
    std::vector<std::int64_t> start(shape_.size(), 0), limit = shape_, step(shape_.size(), 1);
    start[0] = index;
    limit[0] = index + 1;
    return detail::record1("slice", {*this}, {{"start", start}, {"limit", limit}, {"step", step}}).reshape(rest);
  }
  const std::size_t row = static_cast<std::size_t>(num_elements(rest)) * dtype_size(dtype_);
  return Array(dtype_, std::move(rest), buffer_, offset_ + static_cast<std::size_t>(index) * row, device_);
}

Array Array::slice(std::int64_t begin, std::int64_t end) const {
  if (ndim() == 0) throw InvalidArgument("slice: cannot slice a 0-dimensional array");
  const std::int64_t n = shape_[0];
  const std::int64_t b = clamp_bound(begin, n);
  const std::int64_t e = std::max(b, clamp_bound(end, n));
  if (trace_) [[unlikely]] return slice_axis(0, begin, end);
  Shape shape = shape_;
  shape[0] = e - b;
  Shape tail(shape_.begin() + 1, shape_.end());
  const std::size_t stride = static_cast<std::size_t>(num_elements(tail)) * dtype_size(dtype_);
  return Array(dtype_, std::move(shape), buffer_, offset_ + static_cast<std::size_t>(b) * stride, device_);
}

Array Array::squeeze(int axis) const {
  const int a = normalize_axis(axis, ndim(), "squeeze");
  if (shape_[a] != 1) {
    throw InvalidArgument("squeeze: cannot select an axis to squeeze out which has size not equal to one (axis " +
                          std::to_string(axis) + " of shape " + shape_str(shape_) + ")");
  }
  Shape shape = shape_;
  shape.erase(shape.begin() + a);
  if (trace_) [[unlikely]] return reshape(std::move(shape));
  return Array(dtype_, std::move(shape), buffer_, offset_, device_);
}

Array Array::expand_dims(int axis) const {
  const int a = normalize_axis(axis, ndim() + 1, "expand_dims");
  Shape shape = shape_;
  shape.insert(shape.begin() + a, 1);
  if (trace_) [[unlikely]] return reshape(std::move(shape));
  return Array(dtype_, std::move(shape), buffer_, offset_, device_);
}

Array Array::with_device(int device) const {
  Array out = *this;
  out.device_ = device;
  return out;
}

bool Array::identical(const Array& other) const {
  if (trace_ || other.trace_) [[unlikely]] detail::throw_traced_read("Array::identical");
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  const std::size_t n = nbytes();
  return n == 0 || std::memcmp(bytes(), other.bytes(), n) == 0;
}

// ---- byte-level copies ------------------------------------------------------------------------------

Array Array::copy() const {
  if (trace_) [[unlikely]] return detail::record1("copy", {*this});
  Array out = empty(shape_, dtype_, buffer_ ? buffer_->account() : nullptr, device_);
  if (nbytes() > 0) std::memcpy(out.mutable_bytes(), bytes(), nbytes());
  return out;
}

Array Array::slice_axis(int axis, std::int64_t begin, std::int64_t end) const {
  const int a = normalize_axis(axis, ndim(), "slice_axis");
  const std::int64_t n = shape_[a];
  const std::int64_t b = clamp_bound(begin, n);
  const std::int64_t e = std::max(b, clamp_bound(end, n));
  Shape shape = shape_;
  shape[a] = e - b;
  if (trace_) [[unlikely]] {
    if (b == 0 && e == n) return *this;
    std::vector<std::int64_t> start(shape_.size(), 0), limit = shape_, step(shape_.size(), 1);
    start[a] = b;
    limit[a] = e;
    return detail::record1("slice", {*this}, {{"start", start}, {"limit", limit}, {"step", step}});
  }
  Array out = empty(shape, dtype_);
  const std::int64_t outer = num_elements(Shape(shape_.begin(), shape_.begin() + a));
  const std::size_t inner =
      static_cast<std::size_t>(num_elements(Shape(shape_.begin() + a + 1, shape_.end()))) * dtype_size(dtype_);
  const std::size_t chunk = static_cast<std::size_t>(e - b) * inner;
  if (out.nbytes() == 0) return out;
  std::byte* dst = out.mutable_bytes();
  const std::byte* src = bytes();
  for (std::int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + static_cast<std::size_t>(o) * chunk,
                src + static_cast<std::size_t>(o) * static_cast<std::size_t>(n) * inner +
                    static_cast<std::size_t>(b) * inner,
                chunk);
  }
  return out;
}

Array Array::moveaxis(int source, int destination) const {
  const int nd = ndim();
  const int s = normalize_axis(source, nd, "moveaxis");
  const int d = normalize_axis(destination, nd, "moveaxis");
  std::vector<int> perm;
  for (int i = 0; i < nd; ++i) {
    if (i != s) perm.push_back(i);
  }
  perm.insert(perm.begin() + d, s);
  if (trace_) [[unlikely]] {
    return detail::record1("transpose", {*this}, {{"perm", std::vector<std::int64_t>(perm.begin(), perm.end())}});
  }
  Shape shape(nd);
  for (int i = 0; i < nd; ++i) shape[i] = shape_[perm[i]];
  Array out = empty(shape, dtype_);
  const std::int64_t total = size();
  if (total == 0) return out;
  const std::size_t es = dtype_size(dtype_);
  const std::vector<std::int64_t> src_strides = strides_of(shape_);
  std::vector<std::int64_t> strides(nd);  // source stride for each output axis
  for (int i = 0; i < nd; ++i) strides[i] = src_strides[perm[i]];
  std::byte* dst = out.mutable_bytes();
  const std::byte* src = bytes();
  std::vector<std::int64_t> counter(nd, 0);
  std::int64_t src_index = 0;
  for (std::int64_t i = 0; i < total; ++i) {
    std::memcpy(dst + static_cast<std::size_t>(i) * es, src + static_cast<std::size_t>(src_index) * es, es);
    for (int k = nd - 1; k >= 0; --k) {
      if (++counter[k] < shape[k]) {
        src_index += strides[k];
        break;
      }
      src_index -= strides[k] * (shape[k] - 1);
      counter[k] = 0;
    }
  }
  return out;
}

Array Array::concatenate(const std::vector<Array>& arrays, int axis) {
  if (arrays.empty()) throw InvalidArgument("concatenate: need at least one array to concatenate");
  const int nd = arrays[0].ndim();
  if (nd == 0) throw InvalidArgument("concatenate: zero-dimensional arrays cannot be concatenated");
  const int a = normalize_axis(axis, nd, "concatenate");
  DType dtype = arrays[0].dtype();
  for (std::size_t i = 1; i < arrays.size(); ++i) {
    const Array& x = arrays[i];
    if (x.ndim() != nd) {
      throw InvalidArgument("concatenate: all the input arrays must have same number of dimensions, but the array "
                            "at index 0 has " + std::to_string(nd) + " dimension(s) and the array at index " +
                            std::to_string(i) + " has " + std::to_string(x.ndim()) + " dimension(s)");
    }
    for (int k = 0; k < nd; ++k) {
      if (k != a && x.shape()[k] != arrays[0].shape()[k]) {
        throw InvalidArgument("concatenate: all the input array dimensions except for the concatenation axis must "
                              "match exactly, but along dimension " + std::to_string(k) +
                              ", the array at index 0 has size " + std::to_string(arrays[0].shape()[k]) +
                              " and the array at index " + std::to_string(i) + " has size " +
                              std::to_string(x.shape()[k]));
      }
    }
    dtype = promote_types(dtype, x.dtype());
  }
  for (const Array& x : arrays) {
    if (x.traced()) [[unlikely]] return detail::record1("concatenate", arrays, {{"axis", std::int64_t{a}}});
  }
  Shape shape = arrays[0].shape();
  shape[a] = 0;
  for (const Array& x : arrays) shape[a] += x.shape()[a];
  Array out = empty(shape, dtype);
  if (out.nbytes() == 0) return out;
  const std::size_t es = dtype_size(dtype);
  const std::int64_t outer = num_elements(Shape(shape.begin(), shape.begin() + a));
  const std::size_t inner = static_cast<std::size_t>(num_elements(Shape(shape.begin() + a + 1, shape.end()))) * es;
  const std::size_t out_row = static_cast<std::size_t>(shape[a]) * inner;
  std::byte* dst = out.mutable_bytes();
  std::size_t column = 0;
  for (const Array& x0 : arrays) {
    const Array x = x0.astype(dtype);
    const std::size_t chunk = static_cast<std::size_t>(x.shape()[a]) * inner;
    if (chunk > 0) {
      const std::byte* src = x.bytes();
      for (std::int64_t o = 0; o < outer; ++o) {
        std::memcpy(dst + static_cast<std::size_t>(o) * out_row + column, src + static_cast<std::size_t>(o) * chunk,
                    chunk);
      }
    }
    column += chunk;
  }
  return out;
}

Array Array::stack(const std::vector<Array>& arrays, int axis) {
  if (arrays.empty()) throw InvalidArgument("stack: need at least one array to stack");
  for (std::size_t i = 1; i < arrays.size(); ++i) {
    if (arrays[i].shape() != arrays[0].shape()) {
      throw InvalidArgument("stack: all input arrays must have the same shape, but the array at index 0 has shape " +
                            shape_str(arrays[0].shape()) + " and the array at index " + std::to_string(i) +
                            " has shape " + shape_str(arrays[i].shape()));
    }
  }
  const int a = normalize_axis(axis, arrays[0].ndim() + 1, "stack");
  std::vector<Array> expanded;
  expanded.reserve(arrays.size());
  for (const Array& x : arrays) expanded.push_back(x.expand_dims(a));
  return concatenate(expanded, a);
}

}  // namespace weft
